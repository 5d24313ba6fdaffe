"""The ``ilp`` solver on chains with unsaved outputs (``output_saved`` false entries):
every mode against exhaustive search, the moment relaxation's bound, the smallest feasible
budget, and the lemmas of proofs/ilp.md section 10 checked on random valid schedules and by
searching every phase of short chains.  Chains with every output saved are the business of
tests/test_ilp.py and tests/test_ilp_bound.py, unchanged."""
import itertools

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.model.schedule import B, FALL, LOSS, Schedule
from remat_theory.model.solution import INFEASIBLE, OPTIMAL
from remat_theory.strategies import chains, valid_schedules
from solvers.exhaustive import min_feasible_budget, search
from solvers.ilp import build_model, build_relaxation, decode, encode, phase_op_bound, \
    phase_pass_bound
from solvers.ilp.relaxation import lower_bound, objective_of, relaxation_point, violated_rows
from test_ilp import (_longest_phase, _most_runs, _phase_starts, _strict_runs,
                      assert_fixed_min_budget_is, phases, strip_dead)

FAST = {"passes": 1, "pairs": True}
# small chains, some outputs unsaved, recording-forward costs drawn or not
UNSAVED = chains(1, 3, max_size=6, unsaved_outputs=True, fall_costs=None)


@pytest.fixture(autouse=True, scope="module")
def _models_decide():
    """The certified mode's exhaustive-search step is switched off, as in test_ilp.py: the
    MILP models decide, and exhaustive search is only the oracle."""
    import solvers.exhaustive

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(solvers.exhaustive, "DEFAULT_MAX_STAGES", 0)
        yield


def _budget(data, chain):
    """One below the smallest feasible budget, the smallest, or one up to store-all."""
    lo = min_feasible_budget(chain)
    hi = max(lo, chain.store_all_memory())
    return data.draw(st.sampled_from(sorted({lo - 1, lo, (lo + hi) // 2, hi})), label="budget")


def _check(chain, budget, sol, schedule_class="all"):
    """``sol`` is exhaustive search's answer at ``budget``: the same optimum, a schedule the
    simulator replays with the claimed makespan, or infeasible with the smallest budget."""
    _, ms, _, _, proven = search(chain, budget, schedule_class=schedule_class)
    assert proven
    if ms is None:
        assert sol.status == INFEASIBLE
        if schedule_class == "all" and budget >= chain.x_size[0]:
            assert sol.min_budget == min_feasible_budget(chain)
        return None
    assert sol.status == OPTIMAL
    assert sol.makespan == pytest.approx(ms)
    sim = simulate(chain, sol.schedule, budget)
    assert sim.makespan == pytest.approx(sol.makespan)
    return ms


@settings(max_examples=examples(20, 3), deadline=None)
@given(st.data(), UNSAVED)
def test_the_proven_model_equals_exhaustive_search(data, chain):
    """``certify=False``: the time-expanded model alone, with the passes of Lemma 4 as
    extended in section 10, is exact over all schedules (optimum and smallest budget)."""
    budget = _budget(data, chain)
    _check(chain, budget, solvers.solve(chain, budget, "ilp", certify=False))


@settings(max_examples=examples(25, 3), deadline=None)
@given(st.data(), UNSAVED)
def test_the_certified_mode_equals_exhaustive_search(data, chain):
    """The default mode (weak DP, moment relaxation, fast mode, proven model)."""
    budget = _budget(data, chain)
    _check(chain, budget, solvers.solve(chain, budget, "ilp"))


@settings(max_examples=examples(25, 5), deadline=None)
@given(st.data(), UNSAVED)
def test_the_fast_mode_equals_exhaustive_search_of_its_class(data, chain):
    """One weakly increasing run per phase: the blocks of section 10 cover the class."""
    budget = _budget(data, chain)
    sol = solvers.solve(chain, budget, "ilp", **FAST)
    _check(chain, budget, sol, schedule_class="monotone")


@settings(max_examples=15, deadline=None)
@given(st.data(), UNSAVED)
def test_the_relaxation_bound_is_below_the_optimum(data, chain):
    """Theorem 3 with unsaved outputs: the relaxation's optimum never exceeds exhaustive
    search's, and it proves infeasible only budgets where no schedule fits."""
    budget = _budget(data, chain)
    _, ms, _, _, _ = search(chain, budget)
    lb = lower_bound(chain, budget)
    if ms is None:
        return
    assert not lb.infeasible
    assert lb.value <= ms + 1e-9 * max(1.0, chain.ideal_makespan())


@settings(max_examples=examples(60, 13), deadline=None)
@given(st.data(), chains(1, 5, max_size=6, unsaved_outputs=None, fall_costs=None))
def test_every_valid_schedule_is_a_point_of_the_relaxation(data, chain):
    """The map of section 9 sends every valid schedule to a point satisfying every row, at
    its peak as the budget, with an objective at most its makespan (Fn/Fck at fwd_time, Fall
    at fall_time), on chains with and without each optional field (Theorem 3)."""
    sched = data.draw(valid_schedules(chain, 40))
    ref = simulate(chain, sched)
    point = relaxation_point(chain, sched)
    assert violated_rows(build_relaxation(chain, ref.peak_memory), point) == []
    assert violated_rows(build_relaxation(chain, None), dict(point, budget=ref.peak_memory)) == []
    assert objective_of(chain, point) <= ref.makespan + 1e-9


@settings(max_examples=examples(40, 3), deadline=None)
@given(st.data(), chains(1, 4, max_size=6, unsaved_outputs=True, fall_costs=None),
       st.booleans())
def test_every_valid_schedule_is_in_the_proven_model(data, chain, pairs):
    """Lemmas 3-4 as extended in section 10 bound every phase of a valid schedule, and once
    stripped of dead operations (Lemma 2) it is a point of the proven model that decodes
    back to a schedule with the same makespan and peak; with its operations fixed, the
    min-budget model's budget is the simulated peak exactly."""
    L = chain.length
    saved = chain.output_saved
    sched = data.draw(valid_schedules(chain, 40))
    for p, ops in phases(sched):
        pi = L if p == "loss" else p
        assert len(ops) <= phase_op_bound(L, pi, saved)
        assert _strict_runs([o.index for o in ops]) <= phase_pass_bound(L, pi, saved)
    stripped = strip_dead(chain, sched)
    a, b = simulate(chain, sched), simulate(chain, stripped)
    assert b.makespan <= a.makespan + 1e-9 and b.peak_memory <= a.peak_memory  # Lemma 2
    model = build_model(chain, None, None, pairs=pairs)
    values = encode(model, stripped)
    assert values is not None
    for var in model.prob.variables():
        if var.name in values:
            var.varValue = values[var.name]
    dec = simulate(chain, decode(model))
    assert dec.makespan == pytest.approx(b.makespan) and dec.peak_memory == b.peak_memory
    assert_fixed_min_budget_is(model, values, b.peak_memory)


@pytest.mark.parametrize("L", [1, 2, 3])
def test_the_extended_bounds_hold_in_every_phase(L):
    """Every phase of every chain of 1-3 stages, every pattern of unsaved outputs, from
    every start state (the simulator's transitions, no budget): the operation bound of
    section 10 is attained and never exceeded, the run bound never exceeded."""
    for saved in itertools.product([True, False], repeat=L):
        chain = Chain([1.0] * L, [1.0] * (L + 1), [1] * (L + 1), [1] * L, output_saved=saved)
        for p in range(L, -1, -1):
            starts = list(_phase_starts(L, p))
            longest = max(len(_longest_phase(chain, s)) for s in starts)
            assert longest == phase_op_bound(L, p, saved), (saved, p)
            most = max(_most_runs(chain, s) for s in starts)
            assert most <= phase_pass_bound(L, p, saved), (saved, p)


@pytest.mark.parametrize("saved,text,kind", [
    # Fall_0 finds the plain unsaved x_1 that Fck_0 made, and keeps it (kind allk)
    ((False, True), "Fck0 Fall0 Fall1 Loss B1 B0", "allk"),
    # Fn_1 frees the plain x_1, Fall_1 reads t_1 and keeps the x_2 Fn_1 made (block nall)
    ((True, False), "Fall0 Fck0 Fn1 Fall1 Loss B1 B0", "nall"),
])
@pytest.mark.parametrize("pairs", [False, True])
def test_a_fall_that_keeps_the_plain_output_is_in_the_model(saved, text, kind, pairs):
    """The keeping Fall (section 10), alone or in a block, is a point of the proven model
    that decodes back to the same operations, whose memory rows give the simulated peak."""
    chain = Chain([1.0, 2.0], [1.0, 1.0, 1.0], [2, 3, 1], [5, 4], [1, 2], [0, 1, 0],
                  output_saved=saved)
    sched = Schedule.parse(text)
    ref = simulate(chain, sched)
    model = build_model(chain, None, None, pairs=pairs)
    values = encode(model, sched)
    assert values is not None
    used = {name.rsplit("_", 1)[1] for name, v in values.items() if v == 1}
    assert (kind if pairs else "allk") in used  # without blocks, the Fall is an allk
    for var in model.prob.variables():
        if var.name in values:
            var.varValue = values[var.name]
    got = decode(model)
    assert sorted(map(str, got)) == sorted(map(str, sched))
    dec = simulate(chain, got)
    assert dec.makespan == pytest.approx(ref.makespan) and dec.peak_memory == ref.peak_memory
    assert_fixed_min_budget_is(model, values, ref.peak_memory)
