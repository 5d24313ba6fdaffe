"""Bandwidth measurement (remat_theory/torch/profiling/bandwidth.py) and the offload options of the
torch commands: ``remat profile --offload``, ``remat confirm --offload/--bandwidth``."""
import json

import pytest

torch = pytest.importorskip("torch")

from remat_theory.cli import main  # noqa: E402
from remat_theory.model.errors import RematError  # noqa: E402
from remat_theory.torch.profiling.bandwidth import measure_bandwidth, with_bandwidth  # noqa: E402
from remat_theory.model.chain import Chain  # noqa: E402
from torch_device import NAME  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


def test_bandwidth_is_the_slower_direction_at_the_largest_size():
    res = measure_bandwidth(NAME, sizes=(1 << 16, 4096), repeats=2)
    assert [r[0] for r in res.rates] == [4096, 1 << 16]
    assert all(r[1] > 0 and r[2] > 0 for r in res.rates)
    assert (res.to_host, res.to_device) == tuple(res.rates[-1][1:])
    assert res.bandwidth == min(res.to_host, res.to_device)
    chain, again = with_bandwidth(Chain.homogeneous(2), NAME, sizes=(4096,), repeats=1)
    assert chain.bandwidth == again.bandwidth > 0


@pytest.mark.parametrize("kw,field", [({"sizes": ()}, "sizes"), ({"sizes": (0,)}, "sizes"),
                                      ({"sizes": (1.5,)}, "sizes"), ({"repeats": 0}, "repeats"),
                                      ({"device": "meta"}, "device")])
def test_bad_measurement_arguments_are_named(kw, field):
    with pytest.raises(RematError, match=field):
        measure_bandwidth(**{"device": NAME, **kw})


def test_profile_offload_writes_a_bandwidth_and_plain_profile_does_not(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["profile", "--model", "mlp", "--scale", "test", "--repeats", "1",
                 "--device", NAME, "--offload", "--out", str(out), "--no-progress"]) == 0
    assert "copy bandwidth" in capsys.readouterr().out
    assert Chain.load(out).bandwidth > 0
    assert main(["profile", "--model", "mlp", "--scale", "test", "--repeats", "1",
                 "--device", NAME, "--out", str(out), "--no-progress"]) == 0
    assert Chain.load(out).bandwidth is None
    assert "bandwidth" not in json.loads(out.read_text())


def test_confirm_offload_compares_device_peaks_and_flags_cpu_times(capsys):
    rc = main(["confirm", "--scale", "test", "--models", "mlp", "--budgets", "100%",
               "--solvers", "save-on-cpu,dp", "--bandwidth", "1e9", "--repeats", "1",
               "--profile-repeats", "1", "--device", NAME, "--out", "", "--json"])
    assert rc == 0
    records = {r["solver"]: r for r in json.loads(capsys.readouterr().out)}
    soc, dp = records["save-on-cpu"], records["dp"]
    assert soc["bandwidth"] == dp["bandwidth"] == 1e9
    assert soc["transfers"] > 0 and dp["transfers"] == 0
    assert soc["time_meaningful"] is (NAME != "cpu") and dp["time_meaningful"] is True
    for r in (soc, dp):
        assert r["grads_identical"] and r["measured_peak"] == r["predicted_peak"]
    assert soc["measured_peak"] < dp["measured_peak"]
    assert soc["host_peak"] > 0 and dp["host_peak"] == 0
