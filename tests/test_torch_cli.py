"""``remat confirm`` and ``remat profile`` end to end (test-scale networks)."""
import json

import pytest

torch = pytest.importorskip("torch")

from remat_theory.model.chain import Chain  # noqa: E402
from remat_theory.cli import main  # noqa: E402
from torch_device import NAME  # noqa: E402

pytestmark = pytest.mark.torch

FIELDS = {"model", "solver", "budget", "predicted_peak", "measured_peak", "predicted_time",
          "measured_time", "max_grad_error", "status", "min_budget", "within_budget",
          "param_grad_bytes", "worst_peak_op", "worst_after_op"}


def test_confirm_json_records_and_files(tmp_path, capsys):
    before = torch.are_deterministic_algorithms_enabled()
    rc = main(["confirm", "--scale", "test", "--models", "rnn,mlp", "--budgets", "0.9,100%",
               "--solvers", "dp,store-all", "--repeats", "1", "--profile-repeats", "1",
               "--threads", "1", "--device", NAME, "--deterministic", "--json",
               "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert torch.are_deterministic_algorithms_enabled() == before  # --deterministic restores it
    records = json.loads(out)  # nothing but the JSON on stdout
    assert len(records) == 2 * 2 * 2
    assert all(FIELDS <= set(r) for r in records)
    for r in records:
        if r["solver"] == "store-all" and r["budget_fraction"] == 0.9:
            assert r["status"] == "infeasible" and r["min_budget"] > r["budget"]
            assert r["measured_peak"] is None
        else:
            assert r["measured_peak"] is not None
            # the allocator's peak, as the profile measured it: the target band
            assert 0.97 <= r["measured_peak"] / r["predicted_peak"] <= 1.01
            assert r["measured_peak"] <= r["budget"] and r["within_budget"]
            assert r["measured_param_grad_bytes"] == r["param_grad_bytes"] > 0
            assert r["grads_identical"] and r["max_grad_error"] == 0.0
    assert all(r["device"].startswith(NAME) and r["deterministic"] for r in records)
    assert json.loads((tmp_path / f"confirm_{NAME}.json").read_text()) == records
    assert (tmp_path / f"confirm_{NAME}.png").stat().st_size > 1000


def test_infeasible_budgets_are_reported_not_clamped(tmp_path, capsys):
    rc = main(["confirm", "--scale", "test", "--models", "mlp", "--budgets", "0.05",
               "--solvers", "dp", "--repeats", "1", "--profile-repeats", "1", "--json",
               "--out-dir", ""])
    records = json.loads(capsys.readouterr().out)
    assert rc == 0
    (r,) = records
    assert r["status"] == "infeasible" and r["min_budget"] > r["budget"]


@pytest.mark.parametrize("argv, match", [
    (["confirm", "--budgets", "0"], "--budgets"),
    (["confirm", "--budgets", "half"], "--budgets"),
    (["confirm", "--models", "vgg"], "unknown network 'vgg'"),
    (["confirm", "--solvers", "nope", "--models", "mlp"], "unknown solver 'nope'"),
    (["confirm", "--device", "tpu"], "--device"),
    (["profile", "--model", "vgg"], "unknown network 'vgg'"),
])
def test_bad_input_exits_2_with_one_line(argv, match, capsys):
    assert main(argv + ["--out-dir", ""] if argv[0] == "confirm" else argv) == 2
    err = capsys.readouterr().err
    assert match in err and err.startswith("remat: error:")


def test_profile_writes_a_chain(tmp_path, capsys):
    out = tmp_path / "rnn.json"
    assert main(["profile", "--model", "rnn", "--scale", "test", "--repeats", "1",
                 "--out", str(out)]) == 0
    chain = Chain.load(out)
    assert chain.length == 7
    text = capsys.readouterr().out
    assert "store-all peak" in text
    # a column per field with a number per stage, read from the table: each stage's row
    # is the written chain's entries (its output's for an activation field)
    from remat_theory.model import fields
    cols = [f for f in fields.FIELDS if not f.scalar and f.kind != "flag"]
    lines = text.splitlines()
    head = next(ln for ln in lines if ln.split()[:2] == ["i", "stage"])
    assert [w for w in head.split() if w != "ms"][2:] == [f.name for f in cols]
    for i in range(chain.length):
        row = next(ln for ln in lines if ln.split()[:1] == [str(i)]).split()
        want = [f"{getattr(chain, f.name)[i + (f.per == 'activation')] * 1e3:.3f}"
                if f.kind == "time" else str(getattr(chain, f.name)[i + (f.per == 'activation')])
                for f in cols]
        assert row[-len(cols):] == want, (i, row)
