"""The offload executor (remat_theory/torch/run/offload_executor.py) against plain
backpropagation and the two-stream referee (remat_theory/model/offload.py).

Schedules with transfers (the baselines ``save-on-cpu`` and ``offload-all`` and the class DP
``dp-offload`` on the built-in networks, the exact ``exhaustive-offload`` and random valid two-stream schedules on 4-stage
slices of them, hand-written ones) are executed on real networks.  Oracles: plain
backpropagation (parameter gradients, input gradient, loss, buffers and random generator
states, bit for bit) and the referee (device memory after every operation and each
operation's peak, measured by the allocator in correctness mode on the CPU, where host
buffers are not device memory).
"""
import copy
import random

import pytest
from _tiers import tiered

torch = pytest.importorskip("torch")

import solvers  # noqa: E402
from remat_theory.model.errors import InvalidScheduleError  # noqa: E402
from remat_theory.model.offload import OffloadState, simulate_offload, step  # noqa: E402
from remat_theory.model.schedule import Op, Schedule  # noqa: E402
from remat_theory.torch import plain_backprop, profile_details, split_stages  # noqa: E402
from remat_theory.lab.networks import build  # noqa: E402
from remat_theory.lab.confirm import measure_run  # noqa: E402
from remat_theory.torch.run.offload_executor import OffloadExecutor, executor_for  # noqa: E402
from remat_theory.torch.capture.stages import stage_parameters  # noqa: E402
from remat_theory.torch.run.executor import ScheduleExecutor  # noqa: E402
from torch_device import DEVICE, rng_states, same_rng  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

NETWORKS = ("mlp", "resnet", "transformer", "rnn")
SEED = 11


def _square_loss(y):
    return y.float().pow(2).mean()


class _Case:
    """A network (stages, input, loss), its profiled chain with unit times (the executor
    does not read times; unit times make the solvers' schedules independent of timing
    noise) and a copy channel, and plain backprop's results from a fixed state and seed."""

    def __init__(self, name: str, stages: int | None = None):
        net = build(name, "test").to(DEVICE)
        self.stages = split_stages(net.model)
        self.loss_fn = net.loss_fn
        if stages is not None:
            self.stages = self.stages[:stages]
            self.loss_fn = _square_loss
        self.x0 = net.example_input
        self.params = stage_parameters(self.stages)
        self.modules = torch.nn.ModuleList(self.stages)
        prof = profile_details(self.stages, self.x0, self.loss_fn, repeats=1, warmup=0)
        chain = prof.chain
        self.release = prof.bwd_release  # how each backward was measured: run it so
        L = chain.length
        # a channel that copies the largest tape in about one stage time
        bandwidth = float(max(chain.tape_size))
        self.chain = chain.replace(fwd_time=[1.0] * L, fall_time=[1.0] * L,
                                   bwd_time=[1.0] * (L + 1), bandwidth=bandwidth)
        self.state = copy.deepcopy(self.modules.state_dict())
        self._reset()
        torch.manual_seed(SEED)
        ref = plain_backprop(self.stages, self.x0, self.loss_fn)
        self.ref = {"grads": [p.grad.clone() for p in self.params],
                    "input_grad": None if ref.input_grad is None else ref.input_grad.clone(),
                    "loss": ref.loss.clone(), "buffers": copy.deepcopy(self.modules.state_dict()),
                    "rng": rng_states()}

    def _reset(self):
        self.modules.load_state_dict(self.state)
        for p in self.params:
            p.grad = None

    def check(self, schedule, *, per_op: bool = True):
        """Run ``schedule`` under the allocator meter; compare with plain backprop and the
        referee.  Returns the measured run (``measure_run``'s dict)."""
        schedule = Schedule.parse(schedule) if isinstance(schedule, str) else schedule
        sim = simulate_offload(self.chain, schedule)
        self._reset()
        torch.manual_seed(SEED)
        run = measure_run(self.stages, self.loss_fn, self.x0, schedule, self.params, DEVICE,
                          self.chain.output_saved, self.release)
        res = run["result"]
        for p, g in zip(self.params, self.ref["grads"]):
            assert torch.equal(p.grad, g)
        if self.ref["input_grad"] is not None:
            assert torch.equal(res.input_grad, self.ref["input_grad"])
        assert torch.equal(res.loss, self.ref["loss"])
        for a, b in zip(self.ref["buffers"].values(), self.modules.state_dict().values()):
            assert torch.equal(a, b)
        assert same_rng(rng_states(), self.ref["rng"])
        assert run["peak"] == sim.peak_memory, (run["peak"], sim.peak_memory, str(schedule))
        if per_op:
            x0 = run["x0"]
            for row, m in zip(sim.profile, run["ops"]):
                assert x0 + m.after == row.memory_after, (row.step, row.op, x0 + m.after,
                                                          row.memory_after, str(schedule))
                assert x0 + m.peak == row.peak, (row.step, row.op, x0 + m.peak, row.peak,
                                                 str(schedule))
        return run


_CASES = {}


def _case(name, stages=None) -> _Case:
    key = (name, stages)
    if key not in _CASES:
        _CASES[key] = _Case(name, stages)
    return _CASES[key]


@pytest.mark.parametrize("network", tiered(NETWORKS, ["mlp", "transformer"]))
@pytest.mark.parametrize("solver", ["save-on-cpu", "offload-all"])
def test_offload_baselines_run_like_plain_backprop_at_the_predicted_peak(network, solver):
    case = _case(network)
    sol = solvers.solve(case.chain, case.chain.store_all_memory(), solver)
    assert any(op.is_transfer for op in sol.schedule)
    run = case.check(sol.schedule)
    # what travels is what the chain says a tape holds on the device
    moved = run["executor"].moved_bytes
    for op in sol.schedule:
        if op.kind == "Off":
            assert moved[f"t{op.index}"] == case.chain.tape_held[op.index - 1]
    assert run["host_peak"] == _host_peak(case.chain, sol.schedule) > 0


def _host_peak(chain, schedule) -> int:
    """The most bytes the referee's placements hold on the host at once."""
    st, most = OffloadState.initial(chain), 0
    for op in schedule:
        st = step(chain, st, op)[0]
        held = sum(chain.x_size[i] for i in range(chain.length + 1) if st.host_plain >> i & 1)
        held += sum(chain.tape_held[i - 1] for i in range(1, chain.length + 1)
                    if st.host_tapes >> i & 1)
        most = max(most, held)
    return most


@pytest.mark.parametrize("network", tiered(NETWORKS, ["mlp", "rnn"]))
def test_exhaustive_offload_schedules_run_like_plain_backprop(network):
    """The exact optimum on a 4-stage slice at save-on-cpu's peak (the least memory without
    recomputation, proofs/offload.md O.6) and halfway from there to store-all."""
    case = _case(network, 4)
    chain = case.chain
    top = chain.store_all_memory()
    low = solvers.solve(chain, top, "save-on-cpu").min_budget
    moved = 0
    for budget in (low, (low + top) // 2):
        sol = solvers.solve(chain, budget, "exhaustive-offload")
        assert sol.status == "optimal"
        case.check(sol.schedule)
        moved += sum(op.is_transfer for op in sol.schedule)
    assert moved  # the slices are chosen so that the optimum offloads


@pytest.mark.parametrize("network", tiered(NETWORKS, ["resnet", "transformer"]))
def test_dp_offload_schedules_run_like_plain_backprop(network):
    """The class DP (persistent schedules whose segments may offload their input) on the
    whole test-scale networks, at its smallest feasible budget and halfway to store-all."""
    case = _case(network)
    chain = case.chain
    top = chain.store_all_memory()
    low = solvers.solve(chain, 1, "dp-offload").min_budget
    moved = 0
    for budget in (low, (low + top) // 2):
        sol = solvers.solve(chain, budget, "dp-offload")
        assert sol.schedule is not None
        case.check(sol.schedule)
        moved += sum(op.is_transfer for op in sol.schedule)
    assert moved


def _offloaded_twice(st, op) -> bool:
    """An offload of a value whose previous offload's device copy is still leaving (an
    ``Off v .. Pre v .. Off v`` with no compute op between).  The referee keeps one leaving
    bit per value and counts that copy once; the executor holds both copies, so these walks
    are left out (the referee over-counts them; reported, not changed here)."""
    if op.kind != "Off":
        return False
    return bool((st.pend_plain if op.target == "x" else st.pend_tapes) >> op.index & 1)


def random_schedule(chain, rng: random.Random, max_ops: int = 90) -> Schedule:
    """A random valid two-stream schedule: a walk over the ops the referee accepts, backwards
    and transfers weighted up so that walks end."""
    L = chain.length
    tokens = [f"{k}{i}" for k in ("Fn", "Fck", "Fall", "B") for i in range(L)] + ["Loss"]
    tokens += [f"{k}{i}" for k in ("Offx", "Prex", "Offt", "Pret") for i in range(1, L + 1)]
    ops = [Op.parse(t) for t in tokens]
    while True:
        st, out = OffloadState.initial(chain), []
        while not st.is_final() and len(out) < max_ops:
            valid = [(op, r[0]) for op in ops if not _offloaded_twice(st, op)
                     and not isinstance(r := step(chain, st, op), str)]
            weights = [6 if op.kind in ("B", "Loss") else 2 if op.is_transfer else 1
                       for op, _ in valid]
            op, st = rng.choices(valid, weights)[0]
            out.append(op)
        if st.is_final():
            return Schedule(out)


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("seed", tiered(range(3), [0]))
def test_random_two_stream_schedules_run_like_plain_backprop(network, seed):
    case = _case(network, 4)
    schedule = random_schedule(case.chain, random.Random(f"{network}-{seed}"))
    assert any(op.is_transfer for op in schedule)
    run = case.check(schedule)
    assert run["host_peak"] == _host_peak(case.chain, schedule)


HAND_WRITTEN = [
    # a plain checkpoint offloaded across the forward and the late backwards
    "Fck0 Fck1 Offx1 Fall2 Fall3 Loss B3 B2 Prex1 Fall1 B1 Fall0 B0",
    # x1 (unsaved on the mlp, so Fall0 makes it plain: its storage is the output of t1)
    # leaves while t1 stays
    "Fall0 Offx1 Prex1 Fall1 Offt1 Fall2 Fall3 Loss B3 B2 Pret1 B1 B0",
    # a tape offloaded, recomputed while on the host (the host copy is dropped)
    "Fall0 Fall1 Offt1 Fall2 Fall3 Loss B3 B2 Fall0 B1 B0",
    # a tape offloaded and prefetched back twice
    "Fall0 Offt1 Pret1 Fall1 Fall2 Offt2 Offt1 Fall3 Loss B3 Pret2 B2 Pret1 B1 B0",
]


@pytest.mark.parametrize("network,schedule",
                         [("mlp", s) for s in HAND_WRITTEN]
                         + [("resnet", s) for k, s in enumerate(HAND_WRITTEN) if k != 1])
def test_hand_written_schedules(network, schedule):
    case = _case(network, 4)
    run = case.check(schedule)
    assert run["host_peak"] == _host_peak(case.chain, Schedule.parse(schedule))


def test_an_operation_reading_a_value_on_the_host_is_refused_naming_the_step():
    case = _case("mlp", 4)
    case._reset()
    ex = OffloadExecutor(case.stages, case.loss_fn, case.x0, output_saved=case.chain.output_saved)
    for tok in ("Fck0", "Offx1"):
        ex.step(tok)
    with pytest.raises(InvalidScheduleError, match=r"step 2.*x1 on the host: prefetch first"):
        ex.step("Fall1")
    with pytest.raises(InvalidScheduleError, match="not on the host"):
        ex.step("Pret2")


def test_executor_for_picks_the_offload_executor_only_for_transfers():
    case = _case("mlp", 4)
    kw = {"output_saved": case.chain.output_saved}
    plain = executor_for("Fall0 Fall1 Fall2 Fall3 Loss B3 B2 B1 B0", case.stages, case.loss_fn,
                         case.x0, **kw)
    assert type(plain) is ScheduleExecutor
    moved = executor_for(HAND_WRITTEN[0], case.stages, case.loss_fn, case.x0, **kw)
    assert type(moved) is OffloadExecutor
