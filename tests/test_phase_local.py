"""One phase on its own (remat_theory.analysis.phase_local), checked against exhaustive search, and
the claim of proofs/ilp.md section 5 that one phase alone can need three weakly increasing
runs while the whole chain does not."""
from __future__ import annotations

import pytest
from _tiers import examples
from hypothesis import given, settings

from remat_theory import Chain
from remat_theory.model.errors import RematError
from remat_theory.analysis.phase_local import missed_outcome, phase_outcomes
from remat_theory.model.schedule import FORWARD_KINDS
from remat_theory.model.simulator import State, state_memory, transition
from remat_theory.strategies import chains_and_budgets
from solvers.exhaustive import min_feasible_budget, search


def chained_optimum(chain: Chain, budget: int, schedule_class: str = "all"):
    """The whole chain's optimum, phase after phase from the initial state."""
    frontier = {State.initial(chain): 0.0}
    for _ in range(chain.length + 1):
        nxt: dict = {}
        for state, spent in frontier.items():
            for front in phase_outcomes(chain, state, budget, schedule_class).values():
                for o in front:
                    t = spent + o.time
                    if t < nxt.get(o.state, float("inf")):
                        nxt[o.state] = t
        frontier = nxt
    assert all(s.is_final() for s in frontier)
    return min(frontier.values(), default=None)


def replay(chain: Chain, start: State, ops, budget: int):
    state, mem, time = start, state_memory(chain, start), 0.0
    for op in ops:
        r = transition(chain, state, mem, op)
        assert not isinstance(r, str), r
        assert r.peak <= budget
        state, mem, time = r.state, r.memory_after, time + r.time
    return state, mem, time


def weak_runs(ops) -> int:
    stages = [op.index for op in ops if op.kind in FORWARD_KINDS]
    return (1 if stages else 0) + sum(b < a for a, b in zip(stages, stages[1:]))


@settings(max_examples=examples(40, 7), deadline=None)
@given(chains_and_budgets(1, 4, max_size=6))
def test_chaining_phases_gives_the_exhaustive_optimum(cb):
    chain, budget = cb
    best = search(chain, budget)[1]
    got = chained_optimum(chain, budget)
    assert (got is None) == (best is None)
    if best is not None:
        assert got == pytest.approx(best)


@settings(max_examples=examples(25, 14), deadline=None)
@given(chains_and_budgets(1, 4, max_size=6))
def test_each_outcome_replays_and_a_class_never_beats_all(cb):
    chain, budget = cb
    start = State.initial(chain)
    full = phase_outcomes(chain, start, budget)
    for front in full.values():
        for o in front:
            assert replay(chain, start, o.ops, budget) == (o.state, o.memory, pytest.approx(o.time))
    for live, front in phase_outcomes(chain, start, budget, "weak-runs<=1").items():
        for o in front:
            assert weak_runs(o.ops) <= 1
            assert any(q.memory <= o.memory and q.time <= o.time + 1e-9 for q in full[live])


# The witness of proofs/ilp.md section 5: phase 2 starts holding x0, x1 and t1 (and d3); its
# outcome "x1 held, t1 released, 4 bytes, time 13" needs the stages 1 2 2 1 0.
WITNESS = Chain([2.0, 3.0, 2.0], [1.0] * 4, [1, 1, 0, 2], [5, 1, 6], [6, 0, 0], [0] * 4)
WITNESS_START = State(plain=0b11, tapes=0b10, bwd_next=2)


def test_one_phase_alone_can_need_three_weak_runs():
    o = missed_outcome(WITNESS, WITNESS_START, 19, "weak-runs<=2")
    assert o is not None
    assert str(o.ops) == "Fn1 Fall2 Fn2 Fn1 Fn0 B2"
    assert weak_runs(o.ops) == 3
    assert replay(WITNESS, WITNESS_START, o.ops, 19)[1:] == (4, 13.0)
    assert missed_outcome(WITNESS, WITNESS_START, 19, "weak-runs<=3") is None


def test_the_witness_chain_needs_no_third_run_as_a_whole():
    lo = min_feasible_budget(WITNESS)
    assert min_feasible_budget(WITNESS, schedule_class="weak-runs<=2") == lo
    for b in range(lo, WITNESS.store_all_memory() + 1):
        assert search(WITNESS, b, schedule_class="weak-runs<=2")[1] == search(WITNESS, b)[1]


def test_bad_input_is_named():
    with pytest.raises(RematError, match="schedule_class"):
        phase_outcomes(WITNESS, WITNESS_START, 19, "sometimes")
    with pytest.raises(RematError, match="already complete"):
        phase_outcomes(WITNESS, State(1, 0, -1), 19)
