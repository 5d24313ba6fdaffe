"""The profiler: sizes against independent counts, the two tape measures against each
other, and profiling leaves the model untouched."""
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from remat_theory.model.chain import Chain  # noqa: E402
from remat_theory.model.errors import RematError  # noqa: E402
from remat_theory.torch import build, profile, profile_details, split_stages  # noqa: E402
from torch_device import DEVICE, rng_states, same_rng  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


@pytest.mark.parametrize("network", ["mlp", "resnet", "transformer", "rnn"])
def test_profile_sizes(network):
    net = build(network, "test").to(DEVICE)
    res = profile_details(net.model, net.example_input, net.loss_fn, repeats=1, warmup=0)
    chain = res.chain
    stages = split_stages(net.model)
    assert chain.length == len(stages)
    # x sizes: bytes of each stage output, by an independent plain forward pass
    x = net.example_input
    sizes = [x.numel() * x.element_size()]
    with torch.no_grad():
        for s in stages:
            x = s(x)
            sizes.append(x.numel() * x.element_size())
    assert list(chain.x_size) == sizes
    # tapes: saved_tensors_hooks and the tracker agree, and hold at least the output
    assert res.hook_tape_size == res.tracked_tape_size
    assert list(chain.tape_size) == res.hook_tape_size
    assert all(t >= x for t, x in zip(chain.tape_size, chain.x_size[1:]))
    assert all(t > 0 for t in chain.fwd_time) and all(t > 0 for t in chain.bwd_time)
    assert Chain.from_json(chain.to_json()) == chain


def test_tape_of_known_stages():
    """Linear saves its input (not in the tape) and its weight (a parameter): tape = output.
    ReLU saves its output: tape = output.  Dropout saves its scaled mask (float): 2 outputs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))
    x = torch.randn(32, 8)
    chain = profile(model, x, lambda y: y.square().mean(), repeats=1, warmup=0)
    out = 32 * 16 * 4
    assert list(chain.x_size) == [32 * 8 * 4, out, out, out, 32 * 4 * 4]
    assert list(chain.tape_size) == [out, out, 2 * out, 32 * 4 * 4]


def test_profile_leaves_model_state_and_rng_alone():
    net = build("resnet", "test").to(DEVICE)
    before = {k: v.clone() for k, v in net.model.state_dict().items()}
    rng = rng_states()
    profile(net.model, net.example_input, net.loss_fn, repeats=2, warmup=1)
    assert all(torch.equal(before[k], v) for k, v in net.model.state_dict().items())
    assert all(p.grad is None for p in net.model.parameters())
    assert same_rng(rng, rng_states())


def test_nested_sequentials_are_flattened_and_lists_kept():
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)
    assert split_stages(nn.Sequential(nn.Sequential(a, b), c)) == [a, b, c]
    group = nn.Sequential(a, b)
    assert split_stages([group, c]) == [group, c]


@pytest.mark.parametrize("model, match", [
    (nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True)), "in place"),
    (nn.Sequential(nn.Linear(4, 4), nn.Flatten(0)), "view of its input"),
    (nn.Linear(4, 4), "nn.Sequential or a list"),
    (nn.Sequential(), "no stages"),
])
def test_bad_models_are_refused_with_a_reason(model, match):
    with pytest.raises(RematError, match=match):
        profile(model, torch.randn(3, 4), lambda y: y.sum(), repeats=1, warmup=0)


def test_bad_arguments():
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(RematError, match="repeats"):
        profile(model, torch.randn(3, 4), lambda y: y.sum(), repeats=0)
    with pytest.raises(RematError, match="example_input"):
        profile(model, [1, 2], lambda y: y.sum())


def test_gpu_timer_ab_benchmark_runs_and_predicts_each_schedule(tmp_path):
    """benchmarks/gpu_timer_ab.py (the A/B of the GPU stage timer) on the test device: every
    record carries one prediction per profile, each the simulator's makespan (positive)."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_timer_ab.py"
    spec = importlib.util.spec_from_file_location("gpu_timer_ab", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "ab.json"
    assert mod.main(["--device", DEVICE.type, "--scale", "test", "--models", "mlp", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert {r["solver"] for r in records} >= {"store-all", "recompute-all"}
    for r in records:
        for v, _ in mod.VARIANTS:
            assert r["pred_" + v] > 0 and r["ratio_" + v] == r["measured"] / r["pred_" + v]
