"""The torch executor against plain backpropagation and the simulator.

For every registered solver and every built-in network (test scale), the solver's schedule
is executed with autograd; the oracles are plain backpropagation (parameter gradients, the
input gradient, BatchNorm buffers and the random generator states, compared bit for bit:
every op of these networks is deterministic on the CPU, and on a GPU the tests switch
deterministic kernels on, see torch_device.py) and the simulator (bytes held after each
operation, and each operation's peak, measured by the MemoryTracker).
"""
import contextlib
import copy
from unittest import mock

import pytest
from _tiers import tiered

torch = pytest.importorskip("torch")

import solvers  # noqa: E402
from remat_theory.model.errors import InvalidScheduleError, SolverLimitError  # noqa: E402
from remat_theory.model.schedule import Schedule  # noqa: E402
from remat_theory.model.simulator import simulate  # noqa: E402
from remat_theory.torch import (MemoryTracker, ScheduleExecutor, plain_backprop,  # noqa: E402
                                profile, split_stages)
from remat_theory.lab.networks import build  # noqa: E402
from remat_theory.torch.plan.nested_form import (NotNestedError, nested_form, nested_schedule)  # noqa: E402
from remat_theory.torch.run.nested import StageRunner, run_nested  # noqa: E402
from remat_theory.torch.profiling.profiler import prime_forward  # noqa: E402
from remat_theory.torch.capture.stages import stage_parameters  # noqa: E402
from remat_theory.torch.tracker import AllocatorMeter, storage_bytes  # noqa: E402
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
    ex = ScheduleExecutor(stages, net.loss_fn, net.example_input, tracker=tracker,
                          output_saved=chain.output_saved)
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


_SOLUTIONS = {}


def _feasible(chain, name):
    """The solver's schedule at the lowest of a few budgets between the persistent minimum
    and store-all where it finds one (solved once per chain and solver)."""
    key = (id(chain), name)
    if key not in _SOLUTIONS:
        _SOLUTIONS[key] = _solve_feasible(chain, name)
    return _SOLUTIONS[key]


# Exact searches of the two-stream model refuse these chains by their stage guard (a limit,
# not a finding); they replay their own schedules in tests/test_offload_solvers.py.
REFUSED_BY_SIZE = {"exhaustive-offload", "ilp-offload"}


def _solve_feasible(chain, name):
    info = solvers.get(name)
    if name in REFUSED_BY_SIZE:
        with pytest.raises(SolverLimitError, match="max_stages"):
            solvers.solve(chain, chain.store_all_memory(), name)
        return None
    opts = {"time_limit": 20.0} if "time_limit" in info.options else {}
    lo = solvers.solve(chain, chain.store_all_memory(), "dp").min_budget
    hi = chain.store_all_memory()
    for f in (0.0, 0.25, 0.5, 1.0):
        sol = solvers.solve(chain, int(lo + f * (hi - lo)), name, **opts)
        if sol.schedule is not None:
            return sol
    pytest.fail(f"solver {name} found no schedule even at the store-all budget {hi}")


@pytest.mark.parametrize("network", tiered(NETWORKS, ["mlp"]))
def test_every_solver_schedule_gives_plain_backprop_gradients(network):
    net, chain = _net_and_chain(network)
    state, ref = _reference(net)
    recomputing = 0
    for name in solvers.names():
        sol = _feasible(chain, name)
        if sol is None:
            continue
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


# ---------------------------------------------------------------------------------------
# The nested form (what CheckpointedSequential runs): autograd plus nested checkpoints
# ---------------------------------------------------------------------------------------

def _shared_parameter_bytes(stages):
    """Bytes of parameters used by more than one stage (the unrolled RNN's cell)."""
    seen, shared = {}, {}
    for k, s in enumerate(stages):
        for p in s.parameters():
            if id(p) in seen and seen[id(p)] != k:
                shared[id(p)] = p.numel() * p.element_size()
            seen.setdefault(id(p), k)
    return sum(shared.values())


def _forward_counts(schedule, length):
    counts = [0] * length
    for op in schedule:
        if op.is_forward:
            counts[op.index] += 1
    return counts


@contextlib.contextmanager
def _rng_states_apart(meter):
    """The random generator states that checkpoints save (``preserve_rng_state``, and
    ``torch.random.fork_rng`` around each recomputation) are made as the meter's
    bookkeeping: CPU tensors outside the chain (5056 B each on the CPU), not activations."""
    get = torch.get_rng_state

    def paused_get():
        with meter.paused():
            return get()

    with mock.patch.object(torch, "get_rng_state", paused_get):
        yield


def _run_nested_and_check(net, chain, schedule, state, ref, early_stop):
    """Run the nested form of ``schedule`` as autograd and compare with plain backprop
    (bit for bit), with the schedule (forwards per stage) and with the simulator (peak, by
    the allocator accounting the profile used; returns the measured peak)."""
    stages = split_stages(net.model)
    params = stage_parameters(stages)
    net.model.load_state_dict(state)
    for p in params:
        p.grad = None  # a step starts without them, as the profile has it
    tree = nested_form(schedule, chain.length)
    counts = [0] * chain.length
    hooks = [s.register_forward_hook(lambda m, a, o, i=i: counts.__setitem__(i, counts[i] + 1))
             for i, s in enumerate(stages)]
    x = net.example_input.detach().clone().requires_grad_(True)
    meter = AllocatorMeter(DEVICE, persistent=lambda: [p.grad for p in params],
                           prime=lambda: prime_forward(stages, x, DEVICE))
    torch.manual_seed(SEED)
    try:
        with meter:
            with meter.op("step"), _rng_states_apart(meter):
                counts[:] = [0] * chain.length  # the meter's priming forward aside
                out = run_nested(tree, x, StageRunner(stages), early_stop)
                loss = net.loss_fn(out)
                del out
                loss.backward()
    finally:
        for h in hooks:
            h.remove()
    peak = storage_bytes(x) + meter.peak
    want = _forward_counts(schedule, chain.length)
    if early_stop:  # a recomputation may stop once the backward has all it needs
        assert all(1 <= c <= w for c, w in zip(counts, want)), (counts, want)
    else:
        assert counts == want
    # The simulator's peak bounds the real one within the 1% of remat confirm's band (a
    # recomputation here runs inside the first backward node that needs it, so B_i's
    # transient meets the engine's buffers: measured up to 0.9% above on the transformer),
    # up to what the chain does not hold: the loss value returned to the caller and the
    # gradient that seeds the backward, and the gradient autograd sums for a parameter used
    # by several stages, in one buffer until its last use (plus the newest term: at most
    # twice those parameters' bytes).
    predicted = simulate(chain, schedule).peak_memory
    outside = 2 * storage_bytes(loss) + 2 * _shared_parameter_bytes(stages)
    assert peak <= 1.01 * predicted + outside, (peak, predicted, outside,
                                                " ".join(o.token for o in schedule))
    for p, g in zip(params, ref["grads"]):
        assert torch.equal(p.grad, g)
    assert torch.equal(x.grad, ref["input_grad"])
    assert torch.equal(loss.detach(), ref["loss"])
    for (k, a), b in zip(ref["buffers"].items(), net.model.state_dict().values()):
        assert torch.equal(a, b), f"buffer {k} differs from plain backprop"
    assert same_rng(rng_states(), ref["rng"])
    return peak


@pytest.mark.parametrize("network", tiered(NETWORKS, ["mlp"]))
def test_nested_form_of_every_solver_runs_as_autograd_like_plain_backprop(network):
    """Every persistent solver's schedule, put in nested form and run as autograd with
    checkpoints: same gradients, buffers and RNG as plain backprop; each stage forwarded as
    often as the schedule says (at most, with early stop); peak within the simulator's."""
    net, chain = _net_and_chain(network)
    state, ref = _reference(net)
    nested = 0
    for name in solvers.names():
        sol = _feasible(chain, name)
        if sol is None:
            continue
        try:
            tree = nested_form(sol.schedule, chain.length)
        except NotNestedError:
            # nested by construction: the persistent DP and the segment baselines; solvers
            # optimal over a wider class (all schedules, weakly persistent ones) and those
            # that delete values need not be (the registry says which)
            info = solvers.get(name)
            assert info.may_drop or info.optimal_for not in ("persistent", "none"), \
                f"{name}'s schedule has no nested form"
            continue
        assert nested_schedule(tree, chain.length) == sol.schedule
        for early_stop in (False, True):
            _run_nested_and_check(net, chain, sol.schedule, state, ref, early_stop)
        nested += sol.schedule.forward_count() > chain.length
    assert nested >= 2, "the budgets chosen made (almost) no solver recompute anything"


def test_nested_peak_falls_with_the_budget():
    """The memory the schedule saves is really saved: at the DP's smallest budget the
    measured peak is below the store-all schedule's measured peak by at least half of
    what the simulator predicts."""
    net, chain = _net_and_chain("transformer")
    state, ref = _reference(net)
    store_all = solvers.solve(chain, chain.store_all_memory(), "store-all").schedule
    lo = solvers.solve(chain, chain.store_all_memory(), "dp").min_budget
    tight = solvers.solve(chain, lo, "dp").schedule
    peak_all = _run_nested_and_check(net, chain, store_all, state, ref, True)
    peak_tight = _run_nested_and_check(net, chain, tight, state, ref, True)
    predicted_saving = simulate(chain, store_all).peak_memory - simulate(chain, tight).peak_memory
    assert predicted_saving > 0
    assert peak_all - peak_tight >= predicted_saving / 2, (peak_all, peak_tight, predicted_saving)


def test_a_last_stage_replayed_after_the_loss_is_nested():
    """``Fck{L-1} Loss Fall{L-1} B{L-1}``: the last stage runs without its tape through the
    loss and is replayed for its backward (the DP chooses it where the loss stage's
    transient is large); its nested form ends the replayed segment without a second Loss."""
    net, chain = _net_and_chain("mlp")
    state, ref = _reference(net)
    L = chain.length
    ops = [f"Fall{i}" for i in range(L - 1)] + [f"Fck{L - 1}", "Loss", f"Fall{L - 1}"]
    schedule = Schedule(ops + [f"B{i}" for i in range(L - 1, -1, -1)])
    tree = nested_form(schedule, L)
    assert nested_schedule(tree, L) == schedule
    for early_stop in (False, True):
        _run_nested_and_check(net, chain, schedule, state, ref, early_stop)


def test_schedules_without_nested_form_are_named():
    with pytest.raises(NotNestedError, match=r"operation 2 \(Dropt1\)"):
        nested_form(Schedule.parse("Fall0 Fall1 Dropt1 Loss Fall1 B1 B0"), 2)
    with pytest.raises(NotNestedError, match=r"operation 0 \(Fn0\)"):
        nested_form(Schedule.parse("Fn0 Fall1 Loss B1 Fall0 B0"), 2)
