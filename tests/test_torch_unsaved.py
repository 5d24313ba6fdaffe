"""Unsaved outputs (``output_saved``, docs/model.md) on real stages.

Oracles: what autograd's formulas are known to save (a Linear saves its input and weight,
not its result; ReLU saves its result, not its input; a product by a number saves
nothing), derived here from the layer types, not from the profiler; the simulator, step by
step, for what the executor holds under the allocator accounting; plain autograd, for the
gradients and for the peak the chain now predicts.
"""
import copy

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import solvers  # noqa: E402
from remat_theory.model.errors import RematError, SolverLimitError  # noqa: E402
from remat_theory.model.schedule import Schedule  # noqa: E402
from remat_theory.model.simulator import simulate  # noqa: E402
from remat_theory.strategies import chains  # noqa: E402
from remat_theory.torch import (ScheduleExecutor, plain_backprop,  # noqa: E402
                                profile, profile_details, split_stages)
from remat_theory.lab.networks import build  # noqa: E402
from remat_theory.lab.confirm import measure_run  # noqa: E402
from remat_theory.torch.profiling.profiler import prime_forward, profile_details  # noqa: E402
from remat_theory.torch.capture.stages import stage_parameters  # noqa: E402
from remat_theory.torch.tracker import AllocatorMeter, storage_bytes  # noqa: E402
from torch_device import DEVICE  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


class Scale(nn.Module):
    """x * 2: its backward multiplies the gradient by 2 and reads nothing saved."""

    def forward(self, x):
        return x * 2.0


class ReluView(nn.Module):
    """ReLU returning a view of its result: ReLU saves the result, so the output's storage
    is saved although the output tensor itself is not."""

    def forward(self, x):
        return torch.relu(x).view(x.shape[0], -1)


class ViewLinear(nn.Module):
    """A Linear applied to a view of the input: it saves the view, i.e. the input's storage."""

    def __init__(self, n: int):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return self.lin(x.view(-1, x.shape[-1]))


def _expected(stages) -> list:
    """output_saved from the layer types alone: x_{i+1} is read by a backward when stage i
    saves its result (ReLU, ReluView) or stage i+1 saves its input (Linear, ViewLinear);
    the last output is read only by the loss."""
    saves_result = (nn.ReLU, ReluView)
    saves_input = (nn.Linear, ViewLinear)
    L = len(stages)
    return [isinstance(stages[i], saves_result)
            or (i + 1 < L and isinstance(stages[i + 1], saves_input)) for i in range(L)]


CASES = {
    "linear-relu": lambda n: [nn.Linear(n, n), nn.ReLU()],
    "relu-linear": lambda n: [nn.ReLU(), nn.Linear(n, n)],
    "linear-scale-linear": lambda n: [nn.Linear(n, n), Scale(), nn.Linear(n, n)],
    "linear-viewlinear": lambda n: [nn.Linear(n, n), ViewLinear(n), Scale()],
    "reluview-scale": lambda n: [nn.Linear(n, n), ReluView(), Scale()],
}


def _loss(y):
    return y.square().mean()


@pytest.mark.parametrize("case", sorted(CASES))
def test_profiled_output_saved_is_what_autograd_saves(case):
    torch.manual_seed(0)
    stages = [m.to(DEVICE) for m in CASES[case](16)]
    res = profile_details(stages, torch.randn(8, 16, device=DEVICE), _loss, repeats=1, warmup=0)
    assert list(res.chain.output_saved) == _expected(stages)
    # tape_size is still all Fall_i adds, the output included; the tape held is the rest
    assert all(h == (t if s else t - x) for h, t, x, s in zip(
        res.chain.tape_held, res.chain.tape_size, res.chain.x_size[1:], res.chain.output_saved))


def test_the_known_cases_in_the_brief():
    """A Linear followed by a ReLU: the Linear's output is unsaved; a ReLU followed by a
    Linear: the ReLU's output is saved (both read it)."""
    torch.manual_seed(0)
    x = torch.randn(8, 16, device=DEVICE)
    assert profile([nn.Linear(16, 16).to(DEVICE), nn.ReLU()], x, _loss, repeats=1,
                   warmup=0).output_saved[0] is False
    assert profile([nn.ReLU(), nn.Linear(16, 16).to(DEVICE)], x, _loss, repeats=1,
                   warmup=0).output_saved[0] is True


def test_builtin_mlp_flags_follow_its_layers():
    net = build("mlp", "test").to(DEVICE)
    chain = profile(net.model, net.example_input, net.loss_fn, repeats=1, warmup=0)
    stages = split_stages(net.model)
    assert list(chain.output_saved) == _expected(stages)
    assert chain.has_unsaved_outputs


# ------------------------------------------------------------------ execution on a flagged chain

def _net():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Dropout(0.25), nn.Linear(32, 32),
                          Scale(), nn.Linear(32, 8)).to(DEVICE)
    x = torch.randn(64, 32, device=DEVICE)
    return model, x


# Every row of the table with an unsaved value (x1, x4 and x6 are unsaved here):
SCHEDULES = {
    # store-all: each Fall of a Linear adds a plain output beside its tape, which the next
    # Fall frees after reading it; the loss frees the plain x_L
    "store-all": "Fall0 Fall1 Fall2 Fall3 Fall4 Fall5 Loss B5 B4 B3 B2 B1 B0",
    # a plain x1 already held when Fall0 records: the new copy is discarded; Fn reads an
    # unsaved plain input; a tape recorded after the loss keeps no plain x_L
    "recompute": "Fck0 Fall0 Fall1 Fck2 Fn3 Fn4 Fck5 Loss Fall5 B5 Fck2 Fall3 Fall4 B4 B3 "
                 "Fall2 B2 B1 B0",
    # explicit deletions of an unsaved plain value while its tape lives, and of a tape
    # while its plain output stays
    "drop": "Fall0 Dropx1 Fck0 Fall1 Fall2 Fall3 Dropt4 Fall3 Fall4 Fall5 Loss B5 B4 B3 B2 "
            "B1 Dropt1 Fall0 B0",
}


@pytest.fixture(scope="module")
def flagged():
    model, x = _net()
    prof = profile_details(model, x, _loss, repeats=1, warmup=0)
    chain = prof.chain
    assert list(chain.output_saved) == _expected(split_stages(model))
    assert [i for i, s in enumerate(chain.output_saved) if not s] == [0, 3, 5]
    state = copy.deepcopy(model.state_dict())
    params = stage_parameters(split_stages(model))
    torch.manual_seed(11)
    ref = plain_backprop(model, x, _loss)
    ref_grads = [p.grad.clone() for p in params] + [ref.input_grad.clone()]
    return model, x, chain, state, ref_grads, prof.bwd_release


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_executor_holds_what_the_simulator_says_and_gradients_match(flagged, name):
    """Operation by operation, the allocator's bytes before, at the peak and after each
    operation equal the simulator's on the flagged chain (on a GPU, within the caching
    allocator's block rounding); gradients equal plain autograd's bit for bit."""
    model, x, chain, state, ref_grads, release = flagged
    schedule = Schedule.parse(SCHEDULES[name])
    sim = simulate(chain, schedule, allow_drop=True)
    model.load_state_dict(state)
    stages = split_stages(model)
    params = stage_parameters(stages)
    for p in params:
        p.grad = None
    torch.manual_seed(11)
    run = measure_run(stages, _loss, x, schedule, params, DEVICE, chain.output_saved, release)
    for row, m in zip(sim.profile, run["ops"]):
        got = (run["x0"] + m.before, run["x0"] + m.peak, run["x0"] + m.after)
        want = (row.memory_before, row.peak, row.memory_after)
        if DEVICE.type == "cpu":
            assert got == want, (row.step, row.op, got, want)
        else:
            assert all(0.97 * w <= g <= 1.01 * w for g, w in zip(got, want)), (row.op, got, want)
    got = [p.grad for p in params] + [run["result"].input_grad]
    assert all(torch.equal(a, b) for a, b in zip(got, ref_grads))


def test_every_solver_on_the_flagged_chain_runs_as_predicted(flagged):
    """Each registered solver's schedule at a budget between the smallest and store-all: the
    measured peak is the simulator's (within the allocator's rounding on a GPU) and within
    the budget, and the gradients are plain autograd's."""
    model, x, chain, state, ref_grads, release = flagged
    stages = split_stages(model)
    params = stage_parameters(stages)
    lo = solvers.solve(chain, chain.store_all_memory(), "recompute-all").peak_memory
    budget = (lo + chain.store_all_memory()) // 2
    ran = 0
    for name in solvers.names():
        opts = {"time_limit": 20.0} if "time_limit" in solvers.get(name).options else {}
        if name in ("exhaustive-offload", "ilp-offload"):  # stage guards: limits
            with pytest.raises(SolverLimitError, match="max_stages"):
                solvers.solve(chain, budget, name, **opts)
            continue
        sol = solvers.solve(chain, budget, name, **opts)
        if sol.schedule is None:
            continue
        predicted = simulate(chain, sol.schedule, budget, allow_drop=sol.allows_drop).peak_memory
        model.load_state_dict(state)
        for p in params:
            p.grad = None
        torch.manual_seed(11)
        run = measure_run(stages, _loss, x, sol.schedule, params, DEVICE, chain.output_saved,
                          release)
        assert 0.97 <= run["peak"] / predicted <= 1.01, (name, run["peak"], predicted)
        assert run["peak"] <= budget, (name, run["peak"], budget)
        got = [p.grad for p in params] + [run["result"].input_grad]
        assert all(torch.equal(a, b) for a, b in zip(got, ref_grads)), name
        ran += 1
    assert ran >= 5


def test_a_chain_that_says_a_read_value_is_unsaved_is_refused():
    """Releasing the storage of a value a backward reads would corrupt the gradient: the
    executor checks what each recording forward saves and names the stage and the flag."""
    torch.manual_seed(0)
    stages = [nn.ReLU(), nn.Linear(16, 16).to(DEVICE)]
    x = torch.randn(4, 16, device=DEVICE)
    ex = ScheduleExecutor(stages, _loss, x, output_saved=[False, False])
    with pytest.raises(RematError, match=r"stage 0 \(ReLU\) saves its output x1.*output_saved\[0\]"):
        ex.step("Fall0")
    stages = [Scale(), nn.Linear(16, 16).to(DEVICE)]
    ex = ScheduleExecutor(stages, _loss, x, output_saved=[False, False])
    ex.step("Fall0")
    with pytest.raises(RematError, match=r"stage 1 \(Linear\) saves its input x1.*output_saved\[0\]"):
        ex.step("Fall1")
    with pytest.raises(RematError, match="output_saved has length 1, expected 2"):
        ScheduleExecutor(stages, _loss, x, output_saved=[True])
    with pytest.raises(RematError, match=r"output_saved\[1\] = 1 is not a boolean"):
        ScheduleExecutor(stages, _loss, x, output_saved=[True, 1])


def test_plain_autograd_holds_what_the_flagged_chain_predicts():
    """The MLP evidence: plain autograd (no schedule at all) peaks at the store-all
    prediction of the flagged chain, up to the loss value and the gradient seeding the
    backward (outside the chain); the chain without the flags over-predicts it by the
    Linear outputs that no backward reads."""
    net = build("mlp", "test").to(DEVICE)
    stages = split_stages(net.model)
    params = stage_parameters(stages)
    chain = profile(stages, net.example_input, net.loss_fn, repeats=1, warmup=0)
    for p in params:
        p.grad = None
    x = net.example_input
    meter = AllocatorMeter(DEVICE, persistent=lambda: [p.grad for p in params],
                           prime=lambda: prime_forward(stages, x, DEVICE))
    with meter:
        with meter.op("step"):
            y = x
            for s in stages:
                y = s(y)
            loss = net.loss_fn(y)
            del y
            loss.backward()
    measured = storage_bytes(x) + meter.peak
    predicted = chain.store_all_memory()
    assert predicted <= measured <= predicted + 2 * storage_bytes(loss), (measured, predicted)
    unflagged = chain.replace(output_saved=None).store_all_memory()
    assert unflagged > 1.1 * measured
    for p in params:
        p.grad = None


# ------------------------------------------------------------------ solving in memory units

def test_rounding_keeps_the_held_tape_of_an_unsaved_output():
    """A tape of 1000 B around an unsaved output of 999 B, in units of 512 B: rounding the
    two apart would hold 0 B of tape where the real chain holds 1 B."""
    from remat_theory.model.chain import Chain
    from remat_theory.torch.plan.rounding import rounded_chain

    chain = Chain(fwd_time=[1], bwd_time=[1, 1], x_size=[4, 999], tape_size=[1000],
                  output_saved=[False])
    r = rounded_chain(chain, 512)
    assert r.tape_held[0] >= chain.tape_held[0] > 0
    assert r.tape_size[0] >= chain.tape_size[0] and r.output_saved == chain.output_saved


@given(chain=chains(1, 4, max_size=40, unsaved_outputs=True, overheads=None),
       unit=st.integers(1, 16), frac=st.floats(0.0, 1.0))
@settings(max_examples=40)
def test_a_schedule_that_fits_the_rounded_chain_fits_the_real_one(chain, unit, frac):
    """Every held value of the rounded chain is at least the real one, so each peak is:
    an optimal schedule (exhaustive search) under a budget of the rounded chain replays
    within that budget on the real chain, at no larger a peak."""
    from remat_theory.torch.plan.rounding import rounded_chain

    r = rounded_chain(chain, unit)
    sol = solvers.solve(r, 0, "exhaustive")
    lo = sol.min_budget
    budget = int(lo + frac * (r.store_all_memory() - lo))
    sol = solvers.solve(r, budget, "exhaustive")
    assert sol.schedule is not None
    real = simulate(chain, sol.schedule, budget)  # raises if a step exceeds the budget
    assert real.peak_memory <= simulate(r, sol.schedule).peak_memory
