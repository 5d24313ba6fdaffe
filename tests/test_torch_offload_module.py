"""The drop-in with offload plans (remat_theory/torch/modules/offload.py): a
``CheckpointedSequential`` whose solver plans transfers runs them, and a training step gives
plain autograd's gradients bit for bit, at the device peak the referee predicts."""
import copy

import pytest
from _tiers import tiered

torch = pytest.importorskip("torch")

import solvers  # noqa: E402
from remat_theory.model.errors import RematError  # noqa: E402
from remat_theory.torch import plain_backprop, split_stages  # noqa: E402
from remat_theory.lab.networks import build  # noqa: E402
from remat_theory.torch.modules.checkpointed import (Budget, CheckpointOptions,  # noqa: E402
                                                     CheckpointedSequential)
from remat_theory.torch.plan.offload import OffloadRun  # noqa: E402
from remat_theory.torch.capture.stages import stage_parameters  # noqa: E402
from remat_theory.torch.tracker import allocator_peak, storage_bytes  # noqa: E402
from torch_device import DEVICE  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

SEED = 5


def _square_loss(y):
    return y.float().pow(2).mean()


def _reference(stages, x, loss_fn, params):
    torch.manual_seed(SEED)
    ref = plain_backprop(stages, x, loss_fn)
    out = [p.grad.clone() for p in params], None if ref.input_grad is None else ref.input_grad.clone()
    for p in params:
        p.grad = None
    return out


def _step_and_compare(ck, stages, x0, loss_fn, params, state, modules):
    """One seeded training step of ``ck``: its gradients against plain backprop's, and its
    peak (x_0 included) as the allocator measures it."""
    modules.load_state_dict(state)
    grads, input_grad = _reference(stages, x0, loss_fn, params)
    modules.load_state_dict(state)
    x = x0.detach().clone().requires_grad_(x0.is_floating_point())
    torch.manual_seed(SEED)

    def step():
        out = ck(x)
        loss = loss_fn(out)
        del out
        loss.backward()
    peak = allocator_peak(step, DEVICE, persistent=lambda: [p.grad for p in params])
    for p, g in zip(params, grads):
        assert torch.equal(p.grad, g)
    if input_grad is not None:
        assert torch.equal(x.grad, input_grad)
    return peak + storage_bytes(x)


def _network(name: str, stages_kept: int | None = None):
    """A test-scale network on the device: the network, its stages (the first
    ``stages_kept``), their parameters, the stages as one module and its initial state."""
    net = build(name, "test").to(DEVICE)
    stages = split_stages(net.model)[:stages_kept]
    params = stage_parameters(stages)
    modules = torch.nn.ModuleList(stages)
    return net, stages, params, modules, copy.deepcopy(modules.state_dict())


# rnn aside: its shared cell's gradient reserve (CheckpointedSequential.shared_gradient_reserve)
# exceeds what offloading saves on its test-scale chain, so no budget below store-all fits
def _allowed(ck) -> int:
    """The referee's device peak, plus the scalars of the user's loss (its value, seed
    gradient and reductions' partial results: 8-60 bytes measured on these networks; 256
    allowed)."""
    return ck.plan.predicted_peak + 256


@pytest.mark.parametrize("network", tiered(["mlp", "resnet", "transformer"], ["transformer"]))
def test_save_on_cpu_plan_trains_like_plain_autograd(network):
    net, stages, params, modules, state = _network(network)
    ck = CheckpointedSequential(net.model, 0.95, "save-on-cpu", example_input=net.example_input,
                                loss_fn=net.loss_fn, bandwidth=1e9,
                                options=CheckpointOptions(profile_repeats=1))
    assert isinstance(ck.plan.tree, OffloadRun) and ck.plan.tree.transfers > 0
    assert ck.chain.bandwidth == 1e9
    peak = _step_and_compare(ck, stages, net.example_input, net.loss_fn, params, state, modules)
    assert peak <= _allowed(ck)
    assert peak < ck.chain.store_all_memory()


@pytest.mark.parametrize("network", tiered(["mlp", "resnet", "transformer"], ["transformer"]))
def test_dp_offload_plan_trains_like_plain_autograd(network):
    """The class DP's plan at its smallest feasible budget on the profiled chain, where it
    offloads."""
    net, stages, params, modules, state = _network(network)
    probe = CheckpointedSequential(net.model, 1.0, "dp-offload", example_input=net.example_input,
                                   loss_fn=net.loss_fn, bandwidth=1e9,
                                   options=CheckpointOptions(profile_repeats=1))
    L = probe.chain.length
    # unit times and a channel that copies the largest tape in one stage time: the plan
    # does not depend on timing noise
    chain = probe.chain.replace(fwd_time=[1.0] * L, fall_time=[1.0] * L, bwd_time=[1.0] * (L + 1),
                                bandwidth=float(max(probe.chain.tape_size)))
    low = solvers.solve(chain, 1, "dp-offload").min_budget
    ck = CheckpointedSequential(net.model, Budget.activations(low), "dp-offload",
                                example_input=net.example_input, loss_fn=net.loss_fn,
                                options=CheckpointOptions(chain=chain, unit=1))
    assert isinstance(ck.plan.tree, OffloadRun) and ck.plan.tree.transfers > 0
    peak = _step_and_compare(ck, stages, net.example_input, net.loss_fn, params, state, modules)
    assert peak <= _allowed(ck)


def test_exhaustive_offload_plan_on_a_slice_trains_like_plain_autograd():
    net, stages, params, modules, state = _network("mlp", 4)
    ck = CheckpointedSequential(stages, 0.7, "exhaustive-offload", example_input=net.example_input,
                                loss_fn=_square_loss, bandwidth=1e9,
                                options=CheckpointOptions(profile_repeats=1, unit=1))
    assert isinstance(ck.plan.tree, OffloadRun) and ck.plan.tree.transfers > 0
    peak = _step_and_compare(ck, stages, net.example_input, _square_loss, params, state, modules)
    assert peak <= _allowed(ck)


def test_a_second_backward_of_an_offload_plan_is_refused():
    net = build("mlp", "test").to(DEVICE)
    ck = CheckpointedSequential(net.model, 0.95, "save-on-cpu", example_input=net.example_input,
                                loss_fn=net.loss_fn, bandwidth=1e9,
                                options=CheckpointOptions(profile_repeats=1))
    loss = net.loss_fn(ck(net.example_input))
    loss.backward(retain_graph=True)
    with pytest.raises(RematError, match="second backward"):
        loss.backward()


@pytest.mark.parametrize("bad", [-1.0, 0, float("inf"), "fast", True])
def test_bad_bandwidth_is_named(bad):
    net = build("mlp", "test")
    with pytest.raises(RematError, match="bandwidth"):
        CheckpointedSequential(net.model, 0.95, "save-on-cpu", example_input=net.example_input,
                               loss_fn=net.loss_fn, bandwidth=bad,
                               options=CheckpointOptions(profile_repeats=1))


def test_measured_bandwidth_gives_the_chain_a_channel():
    net = build("mlp", "test").to(DEVICE)
    ck = CheckpointedSequential(net.model, 0.95, "offload-all", example_input=net.example_input,
                                loss_fn=net.loss_fn, bandwidth="measure",
                                options=CheckpointOptions(profile_repeats=1))
    assert ck.chain.bandwidth > 0
    assert isinstance(ck.plan.tree, OffloadRun)


def test_frontier_offload_points_are_measured_with_plain_gradients():
    from remat_theory.lab.frontier import run_frontier
    from remat_theory.lab.frontier_networks import from_network

    w = from_network(build("mlp", "test"))
    rec = run_frontier(w, device=DEVICE, repeats=1, offload_solvers=("save-on-cpu", "offload-all"),
                       bandwidth=1e9, compile_budgets=(), compiled_points=0, hf=False,
                       segments=[], budgets=[])
    pts = [p for p in rec["points"] if p["family"] == "remat_offload"]
    assert {p["detail"] for p in pts} == {"save-on-cpu", "offload-all"}
    plain = next(p for p in rec["points"] if p["method"] == "plain")
    for p in pts:
        assert p["status"] == "ok" and p["grads_equal"], p
        assert p["method"].startswith("remat_offload:") and isinstance(p["param"], int)
        # below the plain model's peak: the offloaded tapes are off the device
        assert p["peak"] < plain["peak"]


@pytest.mark.parametrize("solver", ["save-on-cpu", "dp-offload"])
def test_the_output_stays_readable_after_the_backward(solver):
    """A training loop reads its output (or a loss on it) after ``loss.backward()``: the
    executor releases x_L's memory at the Loss only where the caller no longer holds it (the
    storage resized to nothing under a held tensor crashed the process on the next read)."""
    net, stages, params, modules, state = _network("mlp")
    ck = CheckpointedSequential(net.model, 0.95, solver, example_input=net.example_input,
                                loss_fn=net.loss_fn, bandwidth=1e9,
                                options=CheckpointOptions(profile_repeats=1))
    assert isinstance(ck.plan.tree, OffloadRun)
    out = ck(net.example_input)
    before = out.detach().clone()
    net.loss_fn(out).backward()
    assert out.untyped_storage().nbytes() == before.untyped_storage().nbytes()
    assert torch.equal(out.detach(), before)
