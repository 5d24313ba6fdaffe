"""The schedule classes of remat_theory.model.persistence: hand-built members and non-members, and
random schedules of each class checked against the class optimum of each DP."""
from __future__ import annotations

import math
import random

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.analysis import families
from remat_theory.model.errors import InvalidScheduleError, SolverError
from remat_theory.model.persistence import (MONOTONE, NO_FRESH, PERSISTENT, RUN_FALLS, WEAK,
                                      check_class, frontier, is_class_member, is_monotone,
                                      is_persistent,
                                      is_weakly_persistent, next_fresh, next_mark, violation)
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn
from remat_theory.model.simulator import State, transition
from remat_theory.strategies import chains
from solvers.store_all import store_all_schedule

C3 = Chain.homogeneous(3, x_size=1, tape_size=2)


def test_store_all_is_persistent():
    for L in (1, 2, 5):
        c = Chain.homogeneous(L)
        assert is_persistent(c, store_all_schedule(c))
        assert is_weakly_persistent(c, store_all_schedule(c))
        assert is_monotone(c, store_all_schedule(c))


@pytest.mark.parametrize("text", [
    "Fck0 Fn1 Fn2 Loss Fck0 Fn1 Fall2 B2 Fck0 Fall1 B1 Fall0 B0",  # x_0 only (recompute-all)
    "Fck0 Fck1 Fck2 Loss Fall2 B2 Fall1 B1 Fall0 B0",  # every x_i a checkpoint
    "Fall0 Fck1 Fall2 Loss B2 Fall1 B1 B0",  # x_1 read from its tape by Fck1 (kept)
    "Fn0 Fn1 Fall2 Loss B2 Fck0 Fall1 B1 Fall0 B0",  # Fn0 frees nothing: same as Fck0
])
def test_persistent_members(text):
    simulate(C3, text)
    assert is_persistent(C3, text) and is_weakly_persistent(C3, text)


@pytest.mark.parametrize("text, step, why", [
    # x_1 kept (read by Fck1) and later released by Fn1: weak, not persistent
    ("Fck0 Fck1 Fn2 Loss Fn1 Fall2 B2 Fck0 Fall1 B1 Fall0 B0", 4, "releases the checkpoint x1"),
])
def test_weak_but_not_persistent(text, step, why):
    simulate(C3, text)
    assert is_weakly_persistent(C3, text)
    assert not is_persistent(C3, text)
    with pytest.raises(InvalidScheduleError, match=why) as e:
        check_class(C3, text, PERSISTENT)
    assert e.value.step == step


@pytest.mark.parametrize("text, step, why", [
    # Fn1 reads x_1 from the tape t_1 and frees it: B0 then needs Fall0 again
    ("Fall0 Fn1 Fall2 Loss B2 Fck0 Fall1 B1 Fall0 B0", 1, "free the tape t1"),
    # computes x_1 early (from x_0) while the frontier is x_2
    ("Fck0 Fn1 Fck0 Fall2 Loss B2 Fall1 B1 Fall0 B0", 2, "frontier"),
    # Fck2 after the loss recomputes x_3 although d_3 exists
    ("Fck0 Fck1 Fall2 Loss Fck2 B2 Fall1 B1 Fall0 B0", 4, "after d3 exists"),
    # a plain x_1 computed while the tape t_1 (which holds x_1) is held
    ("Fall0 Fck0 Fn1 Fall2 Loss B2 Fall1 B1 B0", 1, "frontier"),
])
def test_in_neither_class(text, step, why):
    simulate(C3, text)  # a valid schedule of the model
    assert not is_weakly_persistent(C3, text) and not is_persistent(C3, text)
    with pytest.raises(InvalidScheduleError, match=why) as e:
        check_class(C3, text, WEAK)
    assert e.value.step == step


@pytest.mark.parametrize("text, monotone, step", [
    # weakly increasing phases although not weak (early x_1, a tape freed by Fn1)
    ("Fall0 Fn1 Fall2 Loss B2 Fck0 Fall1 B1 Fall0 B0", True, None),
    ("Fall0 Fck0 Fn1 Fall2 Loss B2 Fall1 B1 B0", True, None),
    # the optimum of proofs/ilp.md section 4: Fall1 then Fn1, stage 1 twice in a row
    ("Fn0 Fall1 Fn1 Fall2 Loss B2 Fall0 B1 B0", True, None),
    # Fck0 after Fn1 in the loss phase: stage 0 after stage 1
    ("Fck0 Fn1 Fck0 Fall2 Loss B2 Fall1 B1 Fall0 B0", False, 2),
    # phases restart the order: Fall2 in the loss phase, then Fall1 after B2 is fine, but
    # Fall1 then Fall0 inside the phase of B1 is a descent
    ("Fck0 Fck1 Fall2 Loss B2 Fall1 Fall0 B1 B0", False, 6),
])
def test_monotone_class(text, monotone, step):
    simulate(C3, text)
    assert is_monotone(C3, text) == monotone
    if not monotone:
        with pytest.raises(InvalidScheduleError, match="same phase") as e:
            check_class(C3, text, MONOTONE)
        assert e.value.step == step


@settings(max_examples=examples(40, 22), deadline=None)
@given(chain=chains(1, 6), seed=st.integers(0, 2 ** 32 - 1))
def test_weak_schedules_are_monotone(chain, seed):
    """Every weakly persistent schedule is monotone (persistence.py): random walks over the
    weak class's moves land in the monotone class."""
    rng = random.Random(seed)
    for _ in range(3):
        ops = random_class_schedule(chain, WEAK, rng)
        assert is_monotone(chain, ops)


@settings(max_examples=examples(30, 4), deadline=None)
@given(chain=chains(1, 5), frac=st.floats(0.0, 1.0))
def test_class_optima_are_ordered(chain, frac):
    """exhaustive(all) <= exhaustive(monotone) <= exhaustive(weak) <= exhaustive(persistent):
    the classes are nested, so their optima (and smallest feasible budgets) are ordered."""
    from solvers.exhaustive import min_feasible_budget

    mins = [min_feasible_budget(chain, schedule_class=c) for c in ("all", MONOTONE, WEAK,
                                                                     PERSISTENT)]
    assert mins == sorted(mins)
    budget = mins[-1] + int(frac * (chain.store_all_memory() - mins[-1]))
    ms = [solvers.solve(chain, budget, "exhaustive", schedule_class=c).makespan
          for c in ("all", MONOTONE, WEAK, PERSISTENT)]
    assert all(a <= b + 1e-9 for a, b in zip(ms, ms[1:]))


def test_invalid_or_dropping_schedules_are_in_no_class():
    assert not is_persistent(C3, "Fck0 Loss")
    assert not is_weakly_persistent(C3, "Fall0 Fall1 Fall2 Loss B2 B1")  # never computes d0
    dropping = "Fck0 Fck1 Dropx1 Fall2 Loss B2 Fck0 Fall1 B1 Fall0 B0"
    simulate(C3, dropping, allow_drop=True)
    assert not is_weakly_persistent(C3, dropping)


def test_frontier():
    c = Chain.homogeneous(4)
    s = State.initial(c)
    assert frontier(c, s) == 0
    assert frontier(c, State(plain=0b101, tapes=0b10000, bwd_next=4)) == 4  # t4 holds x4
    assert frontier(c, State(plain=0b101, tapes=0b10000, bwd_next=3)) == 2  # x4 is past d4
    assert frontier(c, State(plain=0b1, tapes=0b10, bwd_next=0)) == 0
    assert next_fresh(Fn(2)) == 3 and next_fresh(Fall(2)) == NO_FRESH and next_fresh(LOSS_OP) == NO_FRESH
    assert violation(c, s, NO_FRESH, Bwd(0), PERSISTENT) is None


def test_unknown_class():
    with pytest.raises(ValueError, match="schedule_class"):
        check_class(C3, store_all_schedule(C3), "strong")
    with pytest.raises(SolverError, match="schedule_class"):
        solvers.solve(C3, 100, "exhaustive", schedule_class="strong")
    with pytest.raises(SolverError, match="allow_drop"):
        solvers.solve(C3, 100, "exhaustive", schedule_class="weak", allow_drop=True)


# ---------------------------------------------------------------------- random class members
def random_class_schedule(chain: Chain, cls: str, rng: random.Random):
    """A random valid schedule of class ``cls`` (a random walk over the class's moves)."""
    L = chain.length
    state, mem, fresh = State.initial(chain), chain.x_size[0], NO_FRESH
    ops = []
    while not state.is_final():
        cands = []
        for i in range(L):
            for op in (Fn(i), Fck(i), Fall(i)):
                cands.append(op)
        cands += [LOSS_OP] + [Bwd(i) for i in range(L)]
        moves = []
        for op in cands:
            if violation(chain, state, fresh, op, cls) is not None:
                continue
            r = transition(chain, state, mem, op)
            if not isinstance(r, str):
                moves.append((op, r))
        backward = [m for m in moves if m[0].kind in ("B", "Loss")]
        op, r = backward[0] if backward and rng.random() < 0.5 else rng.choice(moves)
        ops.append(op)
        state, mem, fresh = r.state, r.memory_after, next_mark(op, cls, fresh)
    return ops


@pytest.mark.parametrize("cls, solver", [(PERSISTENT, "dp"), (WEAK, "dp-weak")])
@settings(max_examples=examples(40, 5), deadline=None)
@given(chain=chains(2, 9), seed=st.integers(0, 2 ** 32 - 1))
def test_random_class_members_never_beat_the_class_dp(cls, solver, chain, seed):
    """Any schedule of the class, at its own peak as budget, is no faster than the DP of
    the class: the DP's optimality claim checked beyond exhaustive search's reach (the
    three peaks read from one table of the DP: solvers/dp_sweep.py)."""
    from solvers.dp_sweep import sweep

    rng = random.Random(seed)
    runs = []
    for _ in range(3):
        ops = random_class_schedule(chain, cls, rng)
        check_class(chain, ops, cls)
        runs.append(simulate(chain, ops))
        if cls == PERSISTENT:
            assert is_weakly_persistent(chain, ops)
    best = sweep(chain, [sim.peak_memory for sim in runs], solver)
    for sim in runs:
        assert best[sim.peak_memory][0] <= sim.makespan + 1e-9


@settings(max_examples=examples(40, 12), deadline=None)
@given(chains(1, 6))
def test_class_searches_return_class_members(chain):
    budget = chain.store_all_memory() - 1
    names = {PERSISTENT: "persistent", WEAK: "weakly-persistent", MONOTONE: "weak-runs<=1"}
    for cls, pred in ((PERSISTENT, is_persistent), (WEAK, is_weakly_persistent),
                      (MONOTONE, is_monotone)):
        s = solvers.solve(chain, max(budget, 0), "exhaustive", schedule_class=cls)
        if s.schedule is not None:
            assert pred(chain, s.schedule)
            assert s.optimal_for == names[cls]


def test_family_dp_schedules_in_class():
    for name in ("resnet", "transformer"):
        c = families.make(name, 15, 0)
        budget = (c.memory_lower_bound() + c.store_all_memory()) // 2
        d = solvers.solve(c, budget, "dp")
        w = solvers.solve(c, budget, "dp-weak")
        if d.schedule is not None:
            assert is_persistent(c, d.schedule)
        if w.schedule is not None:
            assert is_weakly_persistent(c, w.schedule)
            assert d.schedule is None or w.makespan <= d.makespan + 1e-9
        assert math.isfinite(w.makespan if w.schedule is not None else 0.0)


@pytest.mark.parametrize("text, member, step", [
    # one weakly increasing run, then tapes only, in any order
    ("Fn0 Fall1 Fn1 Fall2 Loss B2 Fall0 B1 B0", True, None),
    ("Fck0 Fck1 Fall2 Loss B2 Fall1 Fall0 B1 B0", True, None),
    ("Fck0 Fck1 Fall2 Fn2 Fall1 Fall0 Loss B2 B1 B0", True, None),
    # a plain value recomputed after the phase's first decrease of stage
    ("Fck0 Fn1 Fck0 Fall2 Loss B2 Fall1 B1 Fall0 B0", False, 2),
    ("Fck0 Fck1 Fall2 Loss B2 Fall1 Fall0 Fn1 B1 B0", False, 7),
])
def test_run_falls_class(text, member, step):
    simulate(C3, text)
    if member:
        check_class(C3, text, RUN_FALLS)
        assert is_class_member(C3, text, "weak-runs<=3")
    else:
        with pytest.raises(InvalidScheduleError, match="only Fall may follow") as e:
            check_class(C3, text, RUN_FALLS)
        assert e.value.step == step


@settings(max_examples=examples(30, 3), deadline=None)
@given(chain=chains(1, 5), frac=st.floats(0.0, 1.0))
def test_run_falls_lies_between_monotone_and_all(chain, frac):
    """monotone ⊂ run+falls ⊂ all: their optima and smallest budgets are ordered, and the
    class search returns members of its class."""
    from solvers.exhaustive import min_feasible_budget

    classes = ("all", RUN_FALLS, MONOTONE)
    mins = [min_feasible_budget(chain, schedule_class=c) for c in classes]
    assert mins == sorted(mins)
    budget = mins[-1] + int(frac * (chain.store_all_memory() - mins[-1]))
    sols = [solvers.solve(chain, budget, "exhaustive", schedule_class=c) for c in classes]
    ms = [s.makespan for s in sols]
    assert all(a <= b + 1e-9 for a, b in zip(ms, ms[1:]))
    assert sols[1].optimal_for == RUN_FALLS
    assert is_class_member(chain, sols[1].schedule, RUN_FALLS)
