"""The ``fall_peak`` rows of the moment relaxation (solvers/ilp/fall_peak.py, proofs/ilp.md
section 12, Theorem 5): every valid schedule is a point of them, so the relaxation with them
is still a lower bound on every schedule; checked against exhaustive search, the oracle
with no modelling argument, on chains with overheads, recording costs and unsaved outputs."""
import math

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import simulate
from remat_theory.analysis.families import make
from remat_theory.model.errors import SolverOptionError
from remat_theory.model.schedule import Schedule
from remat_theory.strategies import chains, valid_schedules
from solvers.exhaustive import min_feasible_budget, search
from solvers.ilp import cuts, fall_peak
from solvers.ilp.relaxation import build_relaxation, lower_bound, relaxation_point, violated_rows

FAMILY = ("fall_peak",)


def _objective(model, point, chain):
    expr = model.prob.objective
    return math.fsum(expr[v] * point[v.name] for v in expr) + math.fsum(chain.bwd_time)


@settings(max_examples=examples(300, 12), deadline=None)
@given(st.data(), chains(1, 5, max_size=6, fall_costs=None, unsaved_outputs=None))
def test_every_valid_schedule_is_a_point_of_the_fall_peak_rows(data, chain):
    """The constructive half of Theorem 5: a valid schedule's point (section 9's map and
    :func:`fall_peak.point`) satisfies every row at the schedule's own peak, and the
    objective with the second-operation variables d2 is at most its makespan."""
    sched = data.draw(valid_schedules(chain, 40))
    ref = simulate(chain, sched)
    model = build_relaxation(chain, ref.peak_memory)
    cuts.add_cuts(model, ref.peak_memory, FAMILY)
    point = cuts.cut_point(chain, sched, relaxation_point(chain, sched))
    assert violated_rows(model, point) == []
    assert _objective(model, point, chain) <= ref.makespan + 1e-9


def test_the_point_names_what_is_held_before_the_last_recording():
    """A hand-checked phase (4 stages; t_1 held from the loss phase): phase 2 runs Fck1
    (a plain x_2 read out of t_1), Fall2 (omega), Fn2 (frees x_2), Fck1 again, Fall1 (t_2
    for B1).  Just before omega: t_1 and the plain x_2; x_1 and x_2 were available; after
    omega operations of stage 1 make stage-2 values (wy_2), none of stage 0; stage 1 runs
    three operations of two kinds (d2)."""
    chain = make("random", 4, 0)
    sched = Schedule.parse("Fall0 Fck1 Fn2 Fall3 Loss B3 Fck1 Fall2 Fn2 Fck1 Fall1 B2 B1 B0")
    simulate(chain, sched)  # valid
    val = fall_peak.point(chain, sched)
    assert val["wx_2_2"] == 1 and val["wt_0_2"] == 1
    assert val["wx_1_2"] == 0 and val["wt_1_2"] == 0
    assert val["wa_1_2"] == val["wa_2_2"] == 1
    assert val["wy_2_2"] == 1 and val["wy_1_2"] == 0
    assert val["d2_1_2"] == 1 and val["d2_0_2"] == 0


@settings(max_examples=examples(40, 2), deadline=None)
@given(chains(1, 4, max_size=6, fall_costs=None, unsaved_outputs=None))
def test_the_bound_with_fall_peak_never_exceeds_the_exhaustive_optimum(chain):
    """With the rows the relaxation's optimum stays at most the optimum and at least the
    plain relaxation's (rows only raise it), at the smallest budget and a tight one."""
    lo = min_feasible_budget(chain)
    for b in sorted({lo, lo + (chain.store_all_memory() - lo) // 10}):
        opt = search(chain, b)[1]
        plain = lower_bound(chain, b)
        with_rows = lower_bound(chain, b, cuts=FAMILY)
        assert plain.proven_optimal and with_rows.proven_optimal
        assert plain.value - 1e-9 <= with_rows.value <= opt + 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("seed,budget,plain,opt", [(1, 52, 253, 257), (3, 48, 212, 214)])
def test_fall_peak_closes_the_13_stage_gaps(seed, budget, plain, opt):
    """The two gaps of the plain relaxation met on random 13-stage chains (the weak DP's
    schedule is optimal there: bounded search proves it): the plain bound stops below the
    optimum, the bound with the rows reaches it."""
    chain = make("random", 13, seed)
    assert lower_bound(chain, budget).value == pytest.approx(plain)
    assert lower_bound(chain, budget, cuts=FAMILY).value == pytest.approx(opt)
    proof = solvers.solve(chain, budget, "prove", relaxation=False)  # bounded search
    assert proof.status == "optimal" and proof.makespan == pytest.approx(opt)


def test_fall_peak_is_accepted_on_unsaved_outputs_where_the_older_rows_are_refused():
    chain = make("random", 3, 0)
    unsaved = chain.replace(output_saved=[False] + [True] * (chain.length - 1))
    cuts.add_cuts(build_relaxation(unsaved, 100), 100, FAMILY)
    with pytest.raises(SolverOptionError, match="reach"):
        cuts.add_cuts(build_relaxation(unsaved, 100), 100, ("reach", "fall_peak"))
    # and through the prove solver's option (which checked the chain against reach and
    # fwd_peak whatever families were asked for, refusing fall_peak on unsaved outputs)
    budget = min_feasible_budget(unsaved)
    sol = solvers.solve(unsaved, budget, "prove", time_limit=30, cuts="fall_peak")
    assert sol.status == "optimal" and sol.makespan == pytest.approx(search(unsaved, budget)[1])
    with pytest.raises(SolverOptionError, match="reach"):
        solvers.solve(unsaved, budget, "prove", cuts="reach,fall_peak")


def test_fall_peak_closes_a_3_stage_gap():
    """A chain of the validity sweep (benchmarks/bench_relaxation_depth.py --sweep) where the
    plain relaxation stops at 57 and the optimum is 62: the rows reach it."""
    from remat_theory import Chain
    chain = Chain([5.0, 8.0, 10.0], [10.0, 3.0, 3.0, 5.0], [3, 1, 1, 5], [4, 9, 8],
                  [0, 3, 1], [1, 0, 0, 0])
    assert search(chain, 18)[1] == 62
    assert lower_bound(chain, 18).value == pytest.approx(57)
    assert lower_bound(chain, 18, cuts=FAMILY).value == pytest.approx(62)
