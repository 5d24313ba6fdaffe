"""The ILP against exhaustive search (the oracle with no modelling argument), against the
DPs, and the lemmas of proofs/ilp.md checked on random valid schedules."""
import math

import highspy
import pulp
import pytest
from _tiers import examples, tiered
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.model.errors import SolverError, SolverLimitError
from remat_theory.analysis.families import make
from remat_theory.model.persistence import is_monotone
from remat_theory.model.schedule import B, FCK, FN, LOSS, Schedule
from remat_theory.model.solution import INFEASIBLE, OPTIMAL, TIME_LIMIT
from remat_theory.strategies import chains, chains_and_budgets, valid_schedules
from _breakpoints import breakpoints
from solvers.exhaustive import min_feasible_budget, search
from solvers.ilp import (binaries_bound, build_model, decode, encode, phase_op_bound,
                         phase_pass_bound)


@pytest.fixture(autouse=True, scope="module")
def _models_decide():
    """These tests check the MILP models against exhaustive search: the certified mode's
    exhaustive-search step (which would decide chains within its stage guard before any
    model is built) is switched off here; tests/test_ilp_dispatch.py tests that step."""
    import solvers.exhaustive

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(solvers.exhaustive, "DEFAULT_MAX_STAGES", 0)
        yield


HIGHS_PROVEN = "Optimal"  # highspy's modelStatusToString(kOptimal)
FAST = {"passes": 1, "pairs": True}  # the fast mode of proofs/ilp.md section 5


def phases(schedule):
    """Forward operations of each phase, as (phase index p, [ops])."""
    L = None
    out, cur = [], []
    for op in schedule:
        if op.kind == LOSS:
            out.append(("loss", cur))
            cur = []
        elif op.kind == B:
            out.append((op.index, cur))
            cur = []
        else:
            cur.append(op)
    return out


def strip_dead(chain, schedule):
    """Remove the operations Lemma 2 excludes: Fck_p in phase p < L, Fn_0/Fck_0 in phase 0."""
    keep = []
    p = chain.length
    for op in schedule:
        if op.kind == LOSS:
            p = chain.length - 1
        elif op.kind == B:
            p = op.index - 1
        elif p < chain.length and ((op.kind == FCK and op.index == p)
                                    or (p == 0 and op.kind in (FN, FCK) and op.index == 0)):
            continue
        keep.append(op)
    return Schedule(keep)


def check_against_oracle(chain, budget, expected, **options):
    sol = solvers.solve(chain, budget, "ilp", **options)  # replays the schedule
    if expected is None:
        assert sol.status == INFEASIBLE
        assert sol.schedule is None
    else:
        assert sol.status == OPTIMAL, sol.message
        if sol.info.get("certificate") == "moment relaxation":
            # proved by the relaxation's bound (proofs/ilp.md section 9), not by a MIP solve
            rel = sol.info["relaxation"]
            assert rel["bound"] >= expected * (1 - 1e-9)
        else:
            assert sol.info["solver_status"] == HIGHS_PROVEN
        assert sol.makespan == pytest.approx(expected, rel=1e-9)
        assert sol.bound == pytest.approx(expected, rel=1e-9)
        assert sol.peak_memory <= budget
    return sol


# Chains of the breakpoint sweep: (family, stages, seed, overheads).
SWEEP = [("random", 3, 1, True), ("random", 3, 2, False), ("random", 4, 3, True),
         ("random", 4, 4, False), ("resnet", 4, 0, True), ("random", 5, 5, True),
         ("random", 5, 6, False), ("transformer", 5, 1, True)]


def sweep_chain(family, L, seed, overheads):
    return make(family, L, seed, overheads=overheads) if family != "homogeneous" else \
        make(family, L, seed)


@pytest.mark.parametrize("family,L,seed,overheads", [
    p if p[1] < 4 else pytest.param(*p, marks=pytest.mark.slow) for p in SWEEP])
def test_restricted_modes_at_every_breakpoint(family, L, seed, overheads):
    """At every budget where the unrestricted optimum changes (and one below each): the fast
    mode (one weakly increasing run per phase) equals the exhaustive search of its class
    and is never below the optimum; passes=1 without pairs (section 4) is never below the
    optimum either, and infeasible whenever every schedule is.  (The 3-stage chains by
    default; the 4- and 5-stage ones with ``-m slow``.)"""
    chain = sweep_chain(family, L, seed, overheads)
    for budget, expected in breakpoints(chain).items():
        mono = solvers.solve(chain, budget, "exhaustive", schedule_class="monotone")
        fast = check_against_oracle(chain, budget, mono.makespan, **FAST)
        if expected is None:
            assert fast.status == INFEASIBLE
        else:
            assert fast.status == INFEASIBLE or fast.makespan >= expected * (1 - 1e-9)
        one = solvers.solve(chain, budget, "ilp", passes=1)
        if expected is None:
            assert one.status == INFEASIBLE
        elif one.status == OPTIMAL:
            assert one.makespan >= expected * (1 - 1e-9)


# The counterexample of proofs/ilp.md, section 4: one increasing run per phase (the
# Checkmate-style normal form, each stage at most once per phase) misses the optimum.
CHECKMATE_COUNTEREXAMPLE = Chain(
    fwd_time=[10.0, 6.0, 8.0], bwd_time=[1.0, 5.0, 7.0, 5.0], x_size=[0, 11, 0, 10],
    tape_size=[30, 5, 23], fwd_overhead=[9, 20, 13], bwd_overhead=[11, 5, 9, 14])


def test_one_run_per_phase_is_lossy():
    chain, budget = CHECKMATE_COUNTEREXAMPLE, 52
    exact = solvers.solve(chain, budget, "exhaustive")
    one = solvers.solve(chain, budget, "ilp", passes=1)
    two = solvers.solve(chain, budget, "ilp", passes=2)
    fast = solvers.solve(chain, budget, "ilp", **FAST)
    proven = solvers.solve(chain, budget, "ilp")
    assert exact.makespan == 58.0
    assert one.status == OPTIMAL and one.makespan == 66.0
    assert two.status == OPTIMAL and two.makespan == exact.makespan
    assert fast.status == OPTIMAL and fast.makespan == exact.makespan
    assert fast.optimal_for == "weak-runs<=1" and one.optimal_for == "runs<=1"
    assert proven.status == OPTIMAL and proven.makespan == exact.makespan
    # the optimum needs Fall_1 and then Fn_1 (which frees x_1) in the loss phase
    loss_phase = phases(two.schedule)[0][1]
    assert [o.index for o in loss_phase].count(1) == 2


@pytest.mark.parametrize("family,L,seed,overheads,certify", [
    (*p, c) if p[1] < 4 and (c is None or p[2] == 1) else pytest.param(*p, c, marks=pytest.mark.slow)
    for p in SWEEP[:3] for c in (None, False)])
def test_proven_mode_equals_exhaustive_at_every_breakpoint(family, L, seed, overheads, certify):
    """Default options (certify=None: the moment relaxation first, the proven model when it
    leaves a gap) and the proven model alone (certify=False: the number of passes Theorem 1
    proves sufficient): both exact for all schedules.  (By default the defaults on the two
    3-stage chains and the proven model alone on the first; the rest with ``-m slow``.)"""
    chain = sweep_chain(family, L, seed, overheads)
    for budget, expected in breakpoints(chain).items():
        sol = check_against_oracle(chain, budget, expected, certify=certify)
        assert sol.optimal_for == "all"
        if expected is None:
            assert sol.min_budget == min_feasible_budget(chain)


# proofs/ilp.md section 5: one weakly increasing run per phase (the fast mode) is lossy too.
# (chain, budget, unrestricted optimum (None: infeasible), best with one weak run, its
# smallest feasible budget); the chains of proofs/certificates/ilp_weak_run_*.json.
WEAK_RUN_COUNTEREXAMPLES = [
    (Chain(fwd_time=[1.0, 1.0, 1.0], bwd_time=[1.0, 1.0, 1.0, 1.0], x_size=[0, 2, 0, 0],
           tape_size=[4, 1, 5], fwd_overhead=[4, 5, 4]), 9, 11.0, None, 10),
    (Chain(fwd_time=[1.0, 1.0, 3.0, 1.0], bwd_time=[1.0] * 5, x_size=[0, 2, 0, 0, 0],
           tape_size=[7, 1, 5, 3], fwd_overhead=[4, 5, 0, 0], bwd_overhead=[0, 0, 0, 4, 0]),
     12, 15.0, 16.0, None),
]


@pytest.mark.parametrize("chain,budget,opt,fast_value,fast_min", WEAK_RUN_COUNTEREXAMPLES)
def test_one_weak_run_per_phase_is_lossy(chain, budget, opt, fast_value, fast_min):
    exact = solvers.solve(chain, budget, "exhaustive")
    fast = solvers.solve(chain, budget, "ilp", **FAST)
    two = solvers.solve(chain, budget, "ilp", passes=2, pairs=True)
    assert exact.status == OPTIMAL and exact.makespan == opt
    assert two.status == OPTIMAL and two.makespan == opt
    if fast_value is None:
        assert fast.status == INFEASIBLE and fast.min_budget == fast_min
        assert min_feasible_budget(chain) == budget
    else:
        assert fast.status == OPTIMAL and fast.makespan == fast_value > opt
    assert fast.optimal_for == "weak-runs<=1"
    # the mechanism: in phase 1 the optimum computes x_1 (Fn0), reads it (Fall1), frees it
    # (Fn1) and only then computes the tape t_1 (Fall0), which also holds x_1
    phase1 = [o.token for o in phases(exact.schedule)[-2][1]]
    assert phase1 == ["Fn0", "Fall1", "Fn1", "Fall0"]


# the chain of proofs/certificates/ilp_fall_tail_refuted.json (budget 9)
FALL_TAIL_CHAIN = Chain(fwd_time=[1.0] * 4, bwd_time=[1.0] * 5, x_size=[0, 1, 3, 0, 0],
                        tape_size=[2, 4, 1, 5], fwd_overhead=[0, 2, 5, 4])


def test_the_proven_mode_starts_from_the_two_run_optimum(monkeypatch):
    """The proven model is warm-started with the optimum of two weakly increasing runs per
    phase (a class it contains): on the run+falls counterexample no DP schedule fits the
    budget, so before this the proven mode had no incumbent at all under a time limit.
    (The two-run step may take the whole limit here, not its usual quarter: at load 15 on
    two cores its quarter, 3 s of wall time, ended it at an incumbent of 18 and the test
    failed; the proven model is not closed in 12 s either way, so it gets one second here:
    what is checked is the incumbent it starts from.)"""
    import solvers.ilp.backends as backends
    import solvers.ilp.seeds as seeds

    chain = FALL_TAIL_CHAIN
    assert solvers.solve(chain, 9, "dp-weak").status == INFEASIBLE
    monkeypatch.setattr(seeds, "STAGED_SHARE", 1.0)
    # The claim is the start, not the proof: the proven model (more passes than the
    # two-run step) gets one second, the two-run step the rest of the limit.
    run_model = backends.run_model

    def proven_model_briefly(model, solver, time_limit, *args, **kw):
        if getattr(model, "passes", 0) > seeds.STAGED_PASSES:  # not the relaxation
            time_limit = 1.0 if time_limit is None else min(time_limit, 1.0)
        return run_model(model, solver, time_limit, *args, **kw)

    monkeypatch.setattr(backends, "run_model", proven_model_briefly)
    sol = solvers.solve(chain, 9, "ilp", time_limit=12)
    assert sol.info["warm_start"] == "ilp passes=2 pairs=True"
    assert sol.info["staged"]["makespan"] == 16.0
    assert sol.status in (OPTIMAL, TIME_LIMIT) and sol.makespan == 16.0  # exhaustive's value
    assert sol.optimal_for == "all" and sol.bound <= 16.0
    assert simulate(chain, sol.schedule, 9).makespan == 16.0


def test_the_smallest_budget_is_proven_by_a_schedule_just_above_an_infeasible_one():
    """Below the run+falls counterexample's smallest budget (9, where no DP schedule fits),
    the proven model seeds its min-budget variant with the two-run class's smallest budget;
    a schedule at budget + 1 (gcd 1) next to the proven infeasibility of the budget closes
    the question without proving the min-budget MILP optimal (which took minutes)."""
    chain = FALL_TAIL_CHAIN
    assert solvers.solve(chain, 0, "dp-weak").min_budget == 10
    sol = solvers.solve(chain, 8, "ilp", time_limit=20)
    assert sol.status == INFEASIBLE and sol.min_budget == 9 == min_feasible_budget(chain)
    assert sol.info["staged_min_budget"]["budget"] == 9
    assert "smallest feasible budget is 9" in sol.message


def test_an_unproven_smallest_budget_is_reported_as_found_with_its_bound(monkeypatch):
    """A min-budget MILP stopped by its time limit without an answer: the seed's budget is
    reported as found, with the proven lower bound (the infeasible budget + 1), and never as
    the smallest feasible budget."""
    import solvers.ilp.backends as ilp

    chain = Chain([1.0, 1.0], [1.0, 1.0, 1.0], [5, 2, 2], [3, 3])
    stopped = ilp.RunResult(proven=False, infeasible=False, has_solution=False, objective=None,
                            bound=None, status_text="Time limit reached")
    monkeypatch.setattr(ilp, "run_model", lambda *a, **k: stopped)
    sol = solvers.solve(chain, 4, "ilp", time_limit=5)
    true_min = min_feasible_budget(chain)
    assert sol.status == INFEASIBLE and sol.min_budget is None
    found, low = sol.info["min_budget_found"], sol.info["min_budget_bound"]
    assert low == 5 <= true_min <= found and found > 5
    assert f"between {low} and {found}" in sol.message and "not proven" in sol.message


def test_one_weak_run_then_falls_only_is_lossy():
    """proofs/ilp.md section 5 (certificates/ilp_fall_tail_refuted.json): the second run of a
    phase cannot be restricted to Fall operations (the class run+falls, which contains every
    earlier counterexample): here it must recompute a plain x_1 before making the tape t_2."""
    chain = FALL_TAIL_CHAIN
    exact = solvers.solve(chain, 9, "exhaustive")
    assert exact.status == OPTIMAL and exact.makespan == 16.0
    for cls in ("run+falls", "monotone"):
        assert min_feasible_budget(chain, schedule_class=cls) == 10
    two = solvers.solve(chain, 9, "ilp", passes=2, pairs=True)
    assert two.status == OPTIMAL and two.makespan == 16.0
    # phase 2: Fall0 Fn1 Fall2 Fn2, then Fn0 Fall1: Fall2 (tape 1, overhead 5) reads the
    # plain x_2 (3 bytes) with nothing else held (9); t_2 (4 bytes) can only come after it,
    # from a plain x_1 recomputed by Fn0 (t_1, 2 bytes, would not fit beside d_2 at B2)
    phase2 = [o.token for o in phases(exact.schedule)[2][1]]
    assert [int(t[-1]) for t in phase2] == [0, 1, 2, 2, 0, 1]
    assert phase2[-2:] == ["Fn0", "Fall1"]


@settings(max_examples=examples(15, 3), deadline=None)
@given(chains_and_budgets(1, 3, max_size=8, max_time=9))
def test_proven_mode_equals_exhaustive_on_random_chains(cb):
    chain, budget = cb
    e = solvers.solve(chain, budget, "exhaustive")
    sol = check_against_oracle(chain, budget, e.makespan if e.status == OPTIMAL else None)
    assert sol.optimal_for == "all"
    if e.status == INFEASIBLE:
        assert sol.min_budget == e.min_budget


@settings(max_examples=examples(40, 4), deadline=None)
@given(chains_and_budgets(1, 5, max_size=10, max_time=9))
def test_fast_mode_equals_the_exhaustive_search_of_its_class(cb):
    """Theorem 2 with blocks: the fast mode is exactly the monotone class (forward stages
    never decrease inside a phase), so it must equal exhaustive search restricted to that
    class: same status, same optimum, same smallest feasible budget.  (Unlike its equality
    with the unrestricted optimum, which is the open question of section 5, this one is
    proved.)"""
    chain, budget = cb
    e = solvers.solve(chain, budget, "exhaustive", schedule_class="monotone")
    sol = check_against_oracle(chain, budget, e.makespan if e.status == OPTIMAL else None,
                               **FAST)
    assert sol.optimal_for == e.optimal_for == "weak-runs<=1"
    if e.status == INFEASIBLE:
        assert sol.min_budget == e.min_budget
    else:
        assert is_monotone(chain, sol.schedule)


@settings(max_examples=examples(20, 3), deadline=None)
@given(chains_and_budgets(1, 4, max_size=10, max_time=9))
def test_two_weak_passes_equal_the_exhaustive_search_of_their_class(cb):
    """Theorem 2' with K = 2: two passes with blocks are exactly the class weak-runs<=2."""
    chain, budget = cb
    e = solvers.solve(chain, budget, "exhaustive", schedule_class="weak-runs<=2")
    sol = check_against_oracle(chain, budget, e.makespan if e.status == OPTIMAL else None,
                               passes=2, pairs=True)
    assert e.optimal_for == "weak-runs<=2"
    # one stage: two passes are already the proven number (Theorem 1), exact for all
    assert sol.optimal_for == ("all" if chain.length == 1 else "weak-runs<=2")
    if e.status == INFEASIBLE:
        assert sol.min_budget == e.min_budget


@settings(max_examples=examples(8, 3), deadline=None)
@given(chains(6, 9, max_size=10), st.floats(0.0, 1.0))
def test_never_worse_than_the_dps(chain, frac):
    """ilp <= dp-weak <= dp (the DPs' schedules are in the model: one run per phase)."""
    lo = solvers.solve(chain, 0, "dp").min_budget
    budget = int(lo + frac * (chain.store_all_memory() - lo))
    dp = solvers.solve(chain, budget, "dp")
    weak = solvers.solve(chain, budget, "dp-weak")
    sol = solvers.solve(chain, budget, "ilp", **FAST)
    assert sol.status == OPTIMAL
    assert weak.makespan <= dp.makespan * (1 + 1e-9)
    assert sol.makespan <= weak.makespan * (1 + 1e-9)
    assert sol.info["warm_start"] == "dp-weak"


def test_time_limit_is_honest():
    """A tight budget on 25 stages cannot be proven in a fraction of a second; whatever
    happens, the status must be the solver's own: time_limit with a bound below the
    makespan, or optimal only when HiGHS says proven."""
    chain = make("random", 25, 3)
    lo = solvers.solve(chain, 0, "dp-weak").min_budget
    budget = lo + (chain.store_all_memory() - lo) // 10
    sol = solvers.solve(chain, budget, "ilp", passes=1, time_limit=0.3)
    assert sol.status in (OPTIMAL, TIME_LIMIT)
    assert sol.schedule is not None  # the DP warm start is an incumbent
    if sol.status == TIME_LIMIT:
        assert sol.info["solver_status"] != HIGHS_PROVEN
        assert sol.bound is not None and sol.bound <= sol.makespan
        assert "not proven optimal" in sol.message
    else:
        assert sol.info["solver_status"] == HIGHS_PROVEN
        assert sol.bound == pytest.approx(sol.makespan)


@pytest.mark.parametrize("L,seed", [(3, 0), (4, 1), (5, 2)])
def test_cbc_agrees_with_highs(L, seed):
    chain = make("random", L, seed)
    lo = min_feasible_budget(chain)
    for budget in (lo - 1, lo, (lo + chain.store_all_memory()) // 2):
        h = solvers.solve(chain, budget, "ilp", **FAST)
        c = solvers.solve(chain, budget, "ilp", mip_solver="cbc", **FAST)
        assert c.status == h.status
        assert c.makespan == pytest.approx(h.makespan) if h.makespan else c.makespan is None
        assert c.min_budget == h.min_budget


def test_cbc_time_limit_is_honest():
    chain = make("random", 25, 3)
    lo = solvers.solve(chain, 0, "dp-weak").min_budget
    budget = lo + (chain.store_all_memory() - lo) // 10
    sol = solvers.solve(chain, budget, "ilp", passes=1, mip_solver="cbc", time_limit=1.0)
    assert sol.status in (OPTIMAL, TIME_LIMIT)
    if sol.status == TIME_LIMIT:
        assert sol.info["solver_status"] != "Optimal Solution Found"
        assert sol.bound is None or sol.schedule is None or sol.bound <= sol.makespan
    else:
        assert sol.info["solver_status"] == "Optimal Solution Found"


# ----------------------------------------------------------------------- the lemmas
@settings(max_examples=examples(60, 22), deadline=None)
@given(st.data(), chains(1, 4, max_size=6))
def test_lemma2_dead_operations_can_be_removed(data, chain):
    """Removing Fck_p in phase p < L (and Fn_0/Fck_0 in phase 0) keeps a schedule valid and
    never increases its time or its peak."""
    sched = data.draw(valid_schedules(chain, 25))
    stripped = strip_dead(chain, sched)
    a = simulate(chain, sched)
    b = simulate(chain, stripped)
    assert b.makespan <= a.makespan + 1e-9
    assert b.peak_memory <= a.peak_memory


def _phase_successors(chain, p):
    """``successors(state)``: the (forward op, next state) pairs the simulator's own
    transitions allow in phase p, with no budget."""
    from remat_theory.model.schedule import FORWARD_KINDS, Op
    from remat_theory.model.simulator import transition

    forwards = [Op(k, s) for s in range(min(p, chain.length - 1) + 1) for k in FORWARD_KINDS]

    def successors(state):
        for op in forwards:
            r = transition(chain, state, 0, op)
            if not isinstance(r, str):
                yield op, r.state

    return successors


def _longest_phase(chain, start):
    """A longest phase from ``start``: the most forward operations the simulator allows (no
    budget), found as a longest path in the acyclic graph of its transitions."""
    from functools import lru_cache

    successors = _phase_successors(chain, start.bwd_next)

    @lru_cache(maxsize=None)
    def longest(state):
        best = ()
        for op, nxt in successors(state):
            rest = longest(nxt)
            if 1 + len(rest) > len(best):
                best = (op,) + rest
        return best

    return list(longest(start))


def assert_fixed_min_budget_is(model, values, peak):
    """With a schedule's operations fixed (``values`` from ``encode``), the min-budget model
    is feasible and its smallest budget is the schedule's simulated ``peak``, exactly: the
    model's memory accounting is the simulator's."""
    for var in model.prob.variables():
        if var.name in values:
            var.lowBound = var.upBound = values[var.name]
    model.prob.solve(pulp.HiGHS(msg=False))
    assert model.prob.solverModel.getModelStatus() == highspy.HighsModelStatus.kOptimal
    assert round(model.budget_var.varValue) == peak


def _strict_runs(stages):
    """Maximal strictly increasing runs in a sequence of stage indices."""
    return sum(1 for i, s in enumerate(stages) if i == 0 or s <= stages[i - 1])


def _most_runs(chain, start):
    """The most increasing runs a phase from ``start`` can have (no budget): a longest path
    where each operation at a stage <= the previous one's starts a run."""
    from functools import lru_cache

    successors = _phase_successors(chain, start.bwd_next)

    @lru_cache(maxsize=None)
    def most(state, last):  # last: the previous operation's stage, -1 at the start
        return max((int(last < 0 or op.index <= last) + most(nxt, op.index)
                    for op, nxt in successors(state)), default=0)

    return most(start, -1)


def _phase_starts(L, p):
    """Every start state phase p can have: any plain x_j and tape t_j it tracks, except a
    plain x_{p+1} (B_{p+1} frees it)."""
    from remat_theory.model.simulator import State

    J = L if p == L else p + 1
    for plain in range(1 << J):
        if p < L and plain >> p & 1:  # bit j-1: plain x_j
            continue
        for tapes in range(1 << J):
            yield State(plain=1 | plain << 1, tapes=tapes << 1, bwd_next=p)


@pytest.mark.parametrize("L", tiered([1, 2, 3, 4], [1, 2, 3]))
def test_lemma4_run_bound_is_attained_and_never_exceeded(L):
    """Lemma 4, searched exhaustively like Lemma 3: no phase has more than
    phase_pass_bound(L, p) increasing runs, and some phase has exactly that many."""
    chain = Chain([1.0] * L, [1.0] * (L + 1), [0] * (L + 1), [0] * L)
    for p in range(L, -1, -1):
        most = max(_most_runs(chain, start) for start in _phase_starts(L, p))
        assert most == phase_pass_bound(L, p), (p, most)


@pytest.mark.parametrize("L", tiered([1, 2, 3, 4], [1, 2, 3]))
def test_lemma3_bound_is_attained_and_never_exceeded(L):
    """Lemma 3, searched exhaustively: from every start state a phase can have (any plain
    x_j and tape t_j it may track, no plain x_{p+1} after B_{p+1}), no phase runs more than
    phase_op_bound(L, p) forward operations, and the longest one runs exactly that many;
    the loss phase reaches it from the initial state (x_0 alone), so in a valid schedule."""
    from remat_theory.model.simulator import State

    chain = Chain([1.0] * L, [1.0] * (L + 1), [0] * (L + 1), [0] * L)
    assert len(_longest_phase(chain, State.initial(chain))) == phase_op_bound(L, L)
    for p in range(L, -1, -1):
        longest = max(len(_longest_phase(chain, start)) for start in _phase_starts(L, p))
        assert longest == phase_op_bound(L, p), (p, longest)


@pytest.mark.parametrize("L", [2, 3, 4])
def test_the_longest_phase_is_a_point_of_the_proven_model(L):
    """The extremal case of Lemma 3 and of the model's per-phase count row:
    a schedule whose loss phase is a longest one (every x_j and t_j held at its end, so the
    backward operations follow directly) is a point of the proven model, and with its
    operations fixed the min-budget model returns its simulated peak."""
    from remat_theory.model.schedule import Op
    from remat_theory.model.simulator import State

    chain = make("random", L, 0)
    first = _longest_phase(chain, State.initial(chain))
    assert len(first) == phase_op_bound(L, L)
    sched = Schedule(first + [Op(LOSS)] + [Op(B, i) for i in range(L - 1, -1, -1)])
    ref = simulate(chain, sched)
    model = build_model(chain, None, None)
    values = encode(model, sched)
    assert values is not None
    assert_fixed_min_budget_is(model, values, ref.peak_memory)


@settings(max_examples=examples(40, 3), deadline=None)
@given(st.data(), chains(1, 4, max_size=6), st.booleans())
def test_lemma3_and_theorem1_every_schedule_is_in_the_proven_model(data, chain, pairs):
    """Every valid schedule runs at most phase_op_bound(L, p) forward ops in phase p, in at
    most phase_pass_bound(L, p) increasing runs, and
    once stripped of dead operations it is a point of the proven model (with or without the
    two-operation blocks) that decodes back to itself."""
    L = chain.length
    sched = data.draw(valid_schedules(chain, 40))
    for p, ops in phases(sched):
        pi = L if p == "loss" else p
        assert len(ops) <= phase_op_bound(L, pi)
        assert _strict_runs([o.index for o in ops]) <= phase_pass_bound(L, pi)
    stripped = strip_dead(chain, sched)
    model = build_model(chain, None, None, pairs=pairs)  # min-budget variant, proven passes
    values = encode(model, stripped)
    assert values is not None
    for var in model.prob.variables():
        if var.name in values:
            var.varValue = values[var.name]
    decoded = decode(model)
    # Fn_0 and Fck_0 are the same operation (x_0 is never freed): the model writes Fck_0;
    # with pairs, a block Fck_s Fall_s is written Fall_s Fck_s (same peaks, same state)
    norm = [("Fck" if (o.kind == FN and o.index == 0) else o.kind, o.index) for o in stripped]
    got = [(o.kind, o.index) for o in decoded]
    if not pairs:
        assert got == norm
    ref, dec = simulate(chain, stripped), simulate(chain, decoded)
    assert sorted(got) == sorted(norm)
    assert dec.makespan == pytest.approx(ref.makespan) and dec.peak_memory == ref.peak_memory
    assert_fixed_min_budget_is(model, values, ref.peak_memory)


def test_passes_one_is_the_checkmate_style_normal_form():
    """With passes=1 each stage runs at most once per phase (and the model still finds the
    store-all schedule, which has exactly one run per phase)."""
    chain = make("random", 6, 0)
    sol = solvers.solve(chain, chain.store_all_memory(), "ilp", passes=1)
    assert sol.makespan == pytest.approx(chain.ideal_makespan())
    for _, ops in phases(sol.schedule):
        stages = [o.index for o in ops]
        assert stages == sorted(set(stages))


# ----------------------------------------------------------------------- bad input
@pytest.mark.parametrize("option,value", [("mip_solver", "gurobi"), ("passes", 0),
                                          ("pairs", 1),
                                          ("passes", 1.5), ("time_limit", -1.0),
                                          ("time_limit", math.nan), ("warm_start", "yes"),
                                          ("threads", 0)])
def test_bad_options_are_named(option, value):
    chain = make("random", 3, 0)
    with pytest.raises(SolverError, match=option):
        solvers.solve(chain, chain.store_all_memory(), "ilp", **{option: value})


@pytest.mark.parametrize("version", ["4.2.0", "4.0.0a5", "3.3.0", "2.7.0"])
def test_an_unsupported_pulp_is_named(monkeypatch, version):
    monkeypatch.setattr(pulp, "__version__", version)
    chain = make("random", 3, 0)
    with pytest.raises(SolverError, match=f"PuLP {version} is installed"):
        solvers.solve(chain, chain.store_all_memory(), "ilp")


def test_the_installed_pulp_is_supported():
    # the pin in pyproject.toml and the solver's own check agree on the installed PuLP
    chain = make("random", 3, 0)
    assert solvers.solve(chain, chain.store_all_memory(), "ilp", passes=1).status == OPTIMAL


def test_budget_below_x0_is_infeasible():
    chain = Chain([1.0, 1.0], [1.0, 1.0, 1.0], [5, 2, 2], [3, 3])
    sol = solvers.solve(chain, 4, "ilp")
    assert sol.status == INFEASIBLE
    assert sol.min_budget == min_feasible_budget(chain)


def test_sizes_are_divided_by_their_gcd():
    base = make("random", 4, 7)
    big = Chain(base.fwd_time, base.bwd_time, [v * 1000 for v in base.x_size],
                [v * 1000 for v in base.tape_size], [v * 1000 for v in base.fwd_overhead],
                [v * 1000 for v in base.bwd_overhead])
    lo = min_feasible_budget(base)
    for b in (lo, lo + 3):
        s1 = solvers.solve(base, b, "ilp", passes=1)
        s2 = solvers.solve(big, b * 1000 + 999, "ilp", passes=1)
        assert s2.info["gcd"] % 1000 == 0
        assert s1.makespan == pytest.approx(s2.makespan)



def test_model_size_guard():
    """binaries_bound is the model's operation count before budget filtering, and the proven
    model refuses a chain whose model would be too large, naming the option and the fast mode."""
    for L in (1, 3, 6):
        chain = make("random", L, 0)
        for passes, pairs in ((None, False), (1, True), (2, False)):
            assert binaries_bound(chain, passes, pairs) == \
                len(build_model(chain, None, passes, pairs=pairs).ops)
    big = make("random", 20, 0)
    with pytest.raises(SolverError, match="max_binaries.*fast mode"):
        solvers.solve(big, big.store_all_memory(), "ilp", certify=False)
    # the default mode proves with the moment relaxation and needs the proven model only
    # when a gap is left: here store-all fits, so the bound is the ideal makespan at once
    cert = solvers.solve(big, big.store_all_memory(), "ilp")
    assert cert.status == OPTIMAL and cert.optimal_for == "all"
    assert cert.makespan == big.ideal_makespan()
    assert cert.info["certificate"] == "moment relaxation"
    with pytest.raises(SolverError, match="max_binaries = 0"):
        solvers.solve(big, big.store_all_memory(), "ilp", max_binaries=0)
    fast = solvers.solve(big, big.store_all_memory(), "ilp", passes=1, pairs=True)
    assert fast.status == OPTIMAL and fast.makespan == big.ideal_makespan()


# ----------------------------------------------------------------------- one stage
ONE_STAGE = Chain(fwd_time=[1.0], bwd_time=[1.0, 1.0], x_size=[1, 1], tape_size=[2])


@pytest.mark.parametrize("options", [{"certify": False}, {"passes": 2, "pairs": True},
                                     {"passes": 2}, {}, FAST])
def test_a_one_stage_chain_is_solved(options):
    """On one stage the proven model has two passes per phase, as many as the two-run model
    it is seeded from: it used to seed itself until the stack overflowed (RecursionError).
    Every budget, every mode, against exhaustive search."""
    chain = ONE_STAGE
    for budget, expected in breakpoints(chain).items():
        sol = check_against_oracle(chain, budget, expected, **options)
        if expected is None:
            assert sol.min_budget == min_feasible_budget(chain)
    big = check_against_oracle(chain, 14, search(chain, 14)[1], **options)
    assert "staged" not in big.info  # nothing smaller to seed from


# ----------------------------------------------------------------------- fall costs
@settings(max_examples=examples(12, 3), deadline=None)
@given(chains_and_budgets(1, 3, max_size=8, max_time=9, fall_costs=True))
def test_fall_costs_the_proven_modes_equal_exhaustive(cb):
    """With fall_time / fall_overhead different from the forward ones (Fall_i takes
    fall_time[i] and peaks at held + tape_size[i] + fall_overhead[i]), the certified default
    and the proven model alone equal exhaustive search (which runs the simulator's own
    transitions)."""
    chain, budget = cb
    e = solvers.solve(chain, budget, "exhaustive")
    expected = e.makespan if e.status == OPTIMAL else None
    for certify in (None, False):
        sol = check_against_oracle(chain, budget, expected, certify=certify)
        assert sol.optimal_for == "all"
        if e.status == INFEASIBLE:
            assert sol.min_budget == e.min_budget


@settings(max_examples=examples(30, 4), deadline=None)
@given(chains_and_budgets(1, 4, max_size=10, max_time=9, fall_costs=True))
def test_fall_costs_the_fast_mode_equals_the_exhaustive_search_of_its_class(cb):
    chain, budget = cb
    e = solvers.solve(chain, budget, "exhaustive", schedule_class="monotone")
    sol = check_against_oracle(chain, budget, e.makespan if e.status == OPTIMAL else None,
                               **FAST)
    if e.status == INFEASIBLE:
        assert sol.min_budget == e.min_budget


@settings(max_examples=examples(40, 3), deadline=None)
@given(st.data(), chains(1, 4, max_size=6, fall_costs=True), st.booleans())
def test_fall_costs_every_schedule_is_in_the_proven_model_at_its_own_peak(data, chain, pairs):
    """Theorem 1 with fall costs: every valid schedule, stripped of dead operations, is a
    point of the proven model, and with its operations fixed the min-budget model returns
    the simulated peak of the schedule it decodes to (every operation's and block's peak in
    the model is the simulator's), never above the schedule's own, and its objective is the
    simulated makespan.  (With pairs, Fck+Fall is placed as Fall+Fck where that peaks no
    higher, so the decoded schedule may peak lower.)"""
    sched = strip_dead(chain, data.draw(valid_schedules(chain, 40)))
    ref = simulate(chain, sched)
    model = build_model(chain, None, None, pairs=pairs)
    values = encode(model, sched)
    assert values is not None
    for var in model.prob.variables():
        if var.name in values:
            var.varValue = values[var.name]
    dec = simulate(chain, decode(model))
    assert dec.makespan == pytest.approx(ref.makespan) and dec.peak_memory <= ref.peak_memory
    if not pairs:
        assert dec.peak_memory == ref.peak_memory
    assert_fixed_min_budget_is(model, values, dec.peak_memory)
    # at its own peak, the model's objective at the schedule's point is its makespan
    timed = build_model(chain, ref.peak_memory, None, pairs=pairs)
    point = encode(timed, sched)
    assert point is not None
    cost = math.fsum(c * point[v.name] for v, c in timed.prob.objective.items())
    assert cost + timed.constant == pytest.approx(ref.makespan)


@pytest.mark.parametrize("fo,fa,block", [(5, 0, "ckall"), (0, 5, "allck"), (3, 3, "allck")])
def test_fall_costs_a_forward_then_fall_block_keeps_its_peak(fo, fa, block):
    """With pairs, Fck_s Fall_s is placed as the block Fall+Fck when that peaks no higher
    (fall_overhead >= fwd_overhead: the same times, the same values after); where the
    recording forward has the smaller overhead, Fall+Fck would peak higher, and the model
    has the block Fck+Fall: the schedule stays a point at its own peak (8 here, Fall+Fck
    would need 9)."""
    chain = Chain([1.0, 1.0], [1.0] * 3, [1, 1, 1], [2, 2], [fo, fo], fall_time=[3.0, 3.0],
                  fall_overhead=[fa, fa])
    sched = Schedule.parse("Fck0 Fall0 Fall1 Loss B1 B0")
    ref = simulate(chain, sched)
    model = build_model(chain, ref.peak_memory, 1, pairs=True)
    values = encode(model, sched)
    assert values is not None
    chosen = [kd for (p, k, s, kd), var in model.ops.items() if values[var.name] and s == 0]
    assert chosen == [block]
    if fo > fa:
        assert ref.peak_memory == 8


# ----------------------------------------------------------------------- time limits
def _homogeneous(L):
    """fwd 1, bwd 2, x 1, tape 2: the long chains of the time-limit reports."""
    return Chain([1.0] * L, [2.0] * L + [0.0], [1] * (L + 1), [2] * L)


def test_a_time_limit_bounds_a_long_chain_and_keeps_the_schedule_in_hand():
    """100 stages at budget 30 with 5 s: the weak DP (minutes here) and the models (their
    build, load and HiGHS's root cuts, which do not check the limit) do not fit, so the
    answer is the persistent DP's schedule, replayed, with the ideal makespan as its bound,
    status time_limit.  (It took 127 s before; the wall-clock bound is generous: no tight
    timed assert.)"""
    import time

    chain = _homogeneous(100)
    t0 = time.perf_counter()
    sol = solvers.solve(chain, 30, "ilp", time_limit=5)
    assert time.perf_counter() - t0 < 5 + 10
    dp = solvers.solve(chain, 30, "dp")
    assert sol.status == TIME_LIMIT and sol.schedule is not None
    assert sol.makespan <= dp.makespan + 1e-9
    assert chain.ideal_makespan() <= sol.bound <= sol.makespan
    assert "not proven optimal" in sol.message and sol.info["certificate"] is None


@pytest.mark.parametrize("L,budget", [(300, 60), (2000, 100), (5000, 100)])
def test_a_chain_too_long_for_any_ilp_model_is_refused_up_front(L, budget):
    """Beyond about 200 stages even the moment relaxation is above max_binaries: one line,
    the model sizes and the way out, before any DP or model is built."""
    import time

    chain = _homogeneous(L)
    t0 = time.perf_counter()
    with pytest.raises(SolverLimitError, match=f"{L} stages is too large.*use solver 'dp'") as e:
        solvers.solve(chain, budget, "ilp", time_limit=5)
    assert [r.solver for r in e.value.remedies[:2]] == ["dp", "dp-weak"]
    with pytest.raises(SolverError, match="max_binaries"):
        solvers.solve(chain, budget, "ilp", passes=1, pairs=True, time_limit=5)
    assert time.perf_counter() - t0 < 5 + 10


def test_model_building_stops_at_the_deadline():
    """Building checks the deadline before it starts (the estimate of build, load and root
    cuts) and as it goes: an expired deadline stops it with DeadlineExpired, which names
    the step."""
    from solvers._deadline import Deadline, DeadlineExpired
    from solvers.ilp.relaxation import build_relaxation

    chain = make("random", 6, 0)
    gone = Deadline(1e-9)
    with pytest.raises(DeadlineExpired, match="building the MILP"):
        build_model(chain, chain.store_all_memory(), 1, pairs=True, deadline=gone)
    with pytest.raises(DeadlineExpired, match="building the moment relaxation"):
        build_relaxation(chain, chain.store_all_memory(), deadline=gone)
    assert Deadline(None).remaining() is None and not Deadline(None).expired()
    # a generous deadline changes nothing: the same model
    a = build_model(chain, chain.store_all_memory(), 1, pairs=True)
    b = build_model(chain, chain.store_all_memory(), 1, pairs=True, deadline=Deadline(600))
    assert str(a.prob) == str(b.prob)


def test_options_are_validated_in_one_place():
    """The registry checks every option against the registration's schema before the
    solver runs (naming it and the value); IlpOptions resolves certify's default (on for
    the proven model, off for a K-pass class) and makes numbers plain."""
    import numpy as np

    from solvers.ilp.options import IlpOptions

    assert IlpOptions().certify is True and IlpOptions(passes=1).certify is False
    opts = IlpOptions(passes=np.int64(2), time_limit=np.float64(1.5))
    assert opts.passes == 2 and type(opts.passes) is int and type(opts.time_limit) is float
    chain = Chain.homogeneous(2)
    for option, value in (("max_binaries", 0), ("threads", True), ("certify", "yes"),
                          ("time_limit", math.inf), ("mip_solver", "glpk"), ("passes", 0)):
        with pytest.raises(SolverError, match=f"{option} = {value!r}"):
            solvers.solve(chain, chain.store_all_memory(), "ilp", **{option: value})


def test_a_deadline_shares_what_is_left():
    from solvers._deadline import Deadline, DeadlineExpired

    none = Deadline(None)
    assert none.share(0.25, 30.0) == 30.0 and none.fits(1e9)
    none.require(1e9, "anything")  # no limit: nothing is refused
    d = Deadline(100.0)
    assert 0 < d.share(0.25, 30.0) <= 25.0 and d.fits(10.0) and not d.fits(1e9)
    with pytest.raises(DeadlineExpired, match="building it .estimated 1e\\+09 s"):
        d.require(1e9, "building it")
    gone = Deadline(1e-9)
    assert gone.expired() and gone.remaining(0.01) == 0.01
    with pytest.raises(DeadlineExpired, match="time limit of 1e-09 s reached while solving"):
        gone.check("solving")


ZERO_TIMES = Chain([0, 0], [0, 0, 0], [3, 5, 5], [6, 6])


def test_a_zero_objective_infeasible_model_is_answered_not_crashed():
    """Issue #29: every time 0 makes the objective empty; HiGHS 1.16's presolve reduced the
    infeasible two-pass model at budget 23 to an empty one, called it optimal, and ended in
    "Solve error".  The answer is exhaustive search's: infeasible, smallest budget 24."""
    e = solvers.solve(ZERO_TIMES, 23, "exhaustive", schedule_class="weak-runs<=2")
    assert e.status == INFEASIBLE
    for opts in ({"passes": 2, "pairs": True}, {"passes": 1, "pairs": True}, {},
                 {"certify": False}, {"mip_solver": "cbc"}):
        sol = solvers.solve(ZERO_TIMES, 23, "ilp", **opts)
        assert sol.status == INFEASIBLE, opts
        assert sol.min_budget in (None, e.min_budget), opts
    ok = solvers.solve(ZERO_TIMES, 24, "ilp", passes=2, pairs=True)
    assert ok.status == OPTIMAL and ok.makespan == 0.0


def test_a_failing_back_end_is_retried_by_another(monkeypatch):
    """A MIP back end that fails is not the answer: run_model asks the next one
    (backends.ATTEMPTS) and the solution says which answered; only when all fail is
    IlpError raised."""
    import solvers.ilp.backends as backends

    chain = Chain([1.0, 2.0], [1.0, 1.0, 2.0], [2, 3, 2], [4, 3])
    budget = min_feasible_budget(chain)
    exact = solvers.solve(chain, budget, "exhaustive", schedule_class="weak-runs<=2")

    def broken(*a, **k):
        raise backends.IlpError("ilp: HiGHS failed (Solve error)")

    monkeypatch.setattr(backends, "_run_highs", broken)
    sol = solvers.solve(chain, budget, "ilp", passes=2, pairs=True)
    assert sol.status == OPTIMAL and sol.makespan == pytest.approx(exact.makespan)
    assert sol.info["mip_backend"] == "cbc" and len(sol.info["mip_retries"]) == 2
    monkeypatch.setattr(backends, "_run_cbc", broken)
    with pytest.raises(backends.IlpError, match="every MIP back end failed"):
        solvers.solve(chain, budget, "ilp", passes=2, pairs=True)

