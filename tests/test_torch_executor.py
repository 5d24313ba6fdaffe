"""The torch executor against plain backpropagation and the simulator.

For every registered solver and every built-in network (test scale), the solver's schedule
is executed with autograd; the oracles are plain backpropagation (parameter gradients, the
input gradient, BatchNorm buffers and the random generator states, compared bit for bit:
every op of these networks is deterministic on the CPU, and on a GPU the tests switch
deterministic kernels on, see torch_device.py) and the simulator (bytes held after each
operation, and each operation's peak, measured by the MemoryTracker).
"""
import copy

import pytest

torch = pytest.importorskip("torch")

import solvers  # noqa: E402
from remat_theory.model.errors import InvalidScheduleError  # noqa: E402
from remat_theory.model.schedule import Schedule  # noqa: E402
from remat_theory.model.simulator import simulate  # noqa: E402
from remat_theory.torch import (MemoryTracker, ScheduleExecutor, build, plain_backprop,  # noqa: E402
                                profile, split_stages)
from remat_theory.torch.stages import stage_parameters  # noqa: E402
from torch_device import DEVICE, rng_states, same_rng  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

NETWORKS = ("mlp", "resnet", "transformer", "rnn")
SEED = 7
# The 4-byte loss value the executor keeps for its caller is bookkeeping, made while
# trackers are paused (like the model, they do not count it).
LOSS_VALUE_BYTES = 0


_CHAINS = {}


def _net_and_chain(name):
    net = build(name, "test").to(DEVICE)
    if name not in _CHAINS:
        _CHAINS[name] = profile(net.model, net.example_input, net.loss_fn, repeats=1, warmup=0)
    return net, _CHAINS[name]


def _reference(net):
    """Plain backprop from a fixed model state and seed: grads, input grad, buffers, RNG."""
    state = copy.deepcopy(net.model.state_dict())
    params = stage_parameters(split_stages(net.model))
    torch.manual_seed(SEED)
    ref = plain_backprop(net.model, net.example_input, net.loss_fn)
    out = {"grads": [p.grad.clone() for p in params], "input_grad": ref.input_grad.clone(),
           "loss": ref.loss.clone(), "buffers": copy.deepcopy(net.model.state_dict()),
           "rng": rng_states()}
    net.model.load_state_dict(state)
    for p in params:
        p.grad = torch.zeros_like(p)  # allocated before tracking: not activation memory
    return state, out


def _run_and_check(net, chain, schedule, state, ref, allow_drop=False):
    """Execute, compare with plain backprop bit for bit and with the simulator step by step."""
    stages = split_stages(net.model)
    params = stage_parameters(stages)
    net.model.load_state_dict(state)
    for p in params:
        p.grad = None  # a step starts without them, as the profile has it
    sim = simulate(chain, schedule, allow_drop=allow_drop)
    tracker = MemoryTracker()
    tracker.track(net.example_input)
    torch.manual_seed(SEED)
    ex = ScheduleExecutor(stages, net.loss_fn, net.example_input, tracker=tracker)
    with tracker:
        for k, op in enumerate(schedule):
            tracker.reset_peak()
            ex.step(op)
            # parameter gradients the backwards make are persistent memory outside the chain
            grads = sum(p.grad.untyped_storage().nbytes() for p in params if p.grad is not None)
            after = tracker.refresh() - grads
            row = sim.profile[k]
            extra = LOSS_VALUE_BYTES if ex.loss is not None else 0
            assert after == row.memory_after + extra, (k, op.token, after, row.memory_after)
            assert tracker.peak - grads <= row.peak + extra, (k, op.token, tracker.peak, row.peak)
    assert ex.done
    for p, g in zip(params, ref["grads"]):
        assert torch.equal(p.grad, g)
    assert torch.equal(ex.input_grad, ref["input_grad"])
    assert torch.equal(ex.loss, ref["loss"])
    for (k, a), b in zip(ref["buffers"].items(), net.model.state_dict().values()):
        assert torch.equal(a, b), f"buffer {k} differs from plain backprop"
    assert same_rng(rng_states(), ref["rng"])


def _feasible(chain, name):
    """The solver's schedule at the lowest of a few budgets between the persistent minimum
    and store-all where it finds one."""
    info = solvers.get(name)
    opts = {"time_limit": 20.0} if "time_limit" in info.options else {}
    lo = solvers.solve(chain, chain.store_all_memory(), "dp").min_budget
    hi = chain.store_all_memory()
    for f in (0.0, 0.25, 0.5, 1.0):
        sol = solvers.solve(chain, int(lo + f * (hi - lo)), name, **opts)
        if sol.schedule is not None:
            return sol
    pytest.fail(f"solver {name} found no schedule even at the store-all budget {hi}")


@pytest.mark.parametrize("network", NETWORKS)
def test_every_solver_schedule_gives_plain_backprop_gradients(network):
    net, chain = _net_and_chain(network)
    state, ref = _reference(net)
    recomputing = 0
    for name in solvers.names():
        sol = _feasible(chain, name)
        _run_and_check(net, chain, sol.schedule, state, ref, bool(sol.info.get("allow_drop")))
        recomputing += sol.schedule.forward_count() > chain.length
    assert recomputing >= 2, "the budgets chosen made (almost) no solver recompute anything"


@pytest.mark.parametrize("network", ["mlp", "transformer"])
def test_dropout_masks_replay_on_every_recomputation(network):
    """Recompute every stage from x_0 before its backward (L(L+1)/2 forwards, every kind)."""
    net, chain = _net_and_chain(network)
    assert any(isinstance(m, torch.nn.Dropout) for m in net.model.modules())
    state, ref = _reference(net)
    L = chain.length
    ops = ["Fck0"] + [f"Fn{i}" for i in range(1, L)] + ["Loss"]
    for i in range(L - 1, -1, -1):
        if i:
            ops += ["Fck0"] + [f"Fn{j}" for j in range(1, i)]
        ops += [f"Fall{i}", f"B{i}"]
    _run_and_check(net, chain, Schedule(ops), state, ref)


def test_batchnorm_statistics_updated_once_despite_recomputation():
    net, chain = _net_and_chain("resnet")
    state, ref = _reference(net)
    sol = solvers.solve(chain, solvers.solve(chain, 10 ** 12, "dp").min_budget, "recompute-all")
    assert sol.schedule.forward_count() > 2 * chain.length
    _run_and_check(net, chain, sol.schedule, state, ref)
    bn = [m for m in net.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert all(int(m.num_batches_tracked) == 1 for m in bn)


def test_drop_operations_free_memory():
    net, chain = _net_and_chain("rnn")
    state, ref = _reference(net)
    L = chain.length
    ops = [f"Fall{i}" for i in range(L)] + ["Dropt3", "Loss"]
    for i in range(L - 1, -1, -1):
        if i == 3:
            ops += ["Fall2"]  # B3 needs x3: t3 is recomputed from x2 inside t2
        ops += [f"B{i}"]
    _run_and_check(net, chain, Schedule(ops), state, ref, allow_drop=True)


def test_invalid_schedules_are_refused_naming_the_step():
    net, _ = _net_and_chain("mlp")
    stages = split_stages(net.model)
    ex = ScheduleExecutor(stages, net.loss_fn, net.example_input)
    ex.step("Fall0")
    with pytest.raises(InvalidScheduleError, match=r"step 1 \(B0\)"):
        ex.step("B0")
    with pytest.raises(InvalidScheduleError, match="without computing d0"):
        ScheduleExecutor(stages, net.loss_fn, net.example_input).run("Fall0")
    ex = ScheduleExecutor(stages, net.loss_fn, net.example_input, allow_drop=False)
    with pytest.raises(InvalidScheduleError, match="Drop"):
        ex.step("Dropx0")


def test_tracker_counts_new_storages_once_and_forgets_freed_ones():
    lin = torch.nn.Linear(16, 16).to(DEVICE)
    tr = MemoryTracker()
    with tr:
        a = torch.empty(100, device=DEVICE)  # 400 B
        v = a.view(10, 10)  # view: no new memory
        a.add_(1)  # in place: none
        w = lin.weight.t()  # view of an untracked parameter: not counted
        b = torch.empty(50, dtype=torch.float64, device=DEVICE)  # 400 B
        assert tr.refresh() == 800
        del a
        assert tr.refresh() == 800  # the view keeps the storage
        del v
        assert tr.refresh() == 400
        c = torch.empty(25, device=DEVICE)  # 100 B
        assert tr.peak == 800
    del b, c, w
    assert tr.refresh() == 0
    assert tr.peak == 800
