"""Solvers of the two-stream model and the claims of proofs/offload.md, each checked.

The exact search (``exhaustive-offload``) is checked against a brute force written here:
every token sequence up to a length, replayed by the independent interpreter of
tests/_offload_reference.py.  Then the theory: offloading never hurts (O.1), no bandwidth
or a zero one is today's optimum (O.2), the dominance the search relies on (O.4), the
smallest budget without recomputation is save-on-cpu's peak (O.6), and with an unbounded
bandwidth that budget reaches the ideal makespan (O.7).
"""
from __future__ import annotations

import pytest
from _tiers import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from remat_theory import Chain, simulate
from remat_theory.model import classes
from remat_theory.model.offload import OffloadState, dominates, step
from remat_theory.model.schedule import Op, Schedule
from remat_theory.strategies import chains, valid_schedules
from solvers import registry
from solvers.exhaustive import min_feasible_budget as canonical_min_budget
from solvers.offload.baselines import offload_all_schedule
from solvers.offload.exhaustive import min_feasible_budget

from _offload_reference import (TwoStreamReference, best_persistent_offload,
                               persistent_offload_schedules)


def _with_bandwidth(chain: Chain, ratio: float) -> Chain:
    """The chain with a bandwidth at which its mean tape copies in ``ratio`` times its mean
    forward (at least 1 byte/s)."""
    L = chain.length
    fwd = max(sum(chain.fwd_time) / L, 1.0)
    return chain.replace(bandwidth=max(sum(chain.tape_size) / L / (ratio * fwd), 1.0))


def _tokens(L):
    out = [f"{k}{i}" for k in ("Fn", "Fck", "Fall", "B") for i in range(L)] + ["Loss"]
    out += [f"{k}{v}{i}" for k in ("Off", "Pre") for v in "xt" for i in range(1, L + 1)]
    return out


def _brute_force(chain: Chain, budget: int, depth: int, cap: float):
    """The least makespan below ``cap`` over every sequence of at most ``depth`` tokens the
    reference interpreter accepts within ``budget`` (depth-first; the makespan of a prefix
    never decreases, so prefixes at ``cap`` or above are cut)."""
    tokens = _tokens(chain.length)
    best = [cap]

    def dfs(ref, n):
        makespan, peak = ref.result()
        if peak > budget or makespan >= best[0]:
            return
        if ref.bwd_next == -1:
            best[0] = makespan
            return
        if n == depth:
            return
        child = None  # an op the interpreter refuses leaves it unchanged: the copy is reused
        for t in tokens:
            if child is None:
                child = ref.copy()
            if child.apply(t):
                dfs(child, n + 1)
                child = None

    dfs(TwoStreamReference(chain), 0)
    return best[0]


def _check_brute_force(chain, ratio, slack, extra):
    chain = _with_bandwidth(chain, ratio)
    budget = min_feasible_budget(chain) + slack
    sol = registry.solve(chain, budget, "exhaustive-offload")
    assert sol.status == "optimal"
    found = _brute_force(chain, budget, len(sol.schedule) + extra, sol.makespan + 1e-9)
    assert found == pytest.approx(sol.makespan)


@settings(max_examples=examples(6, 3), deadline=None)
@given(chains(1, 2, max_size=6, max_time=4, overheads=None), st.sampled_from([0.3, 1.0, 3.0]),
       st.integers(0, 3))
def test_exhaustive_offload_matches_brute_force(chain, ratio, slack):
    """No sequence of up to len(optimum) + 1 tokens beats exhaustive-offload's optimum."""
    _check_brute_force(chain, ratio, slack, 1)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(chains(1, 2, max_size=6, max_time=4, overheads=None, unsaved_outputs=None),
       st.sampled_from([0.3, 1.0, 3.0]), st.integers(0, 3))
def test_exhaustive_offload_matches_brute_force_longer(chain, ratio, slack):
    """The same, up to len(optimum) + 2 tokens, unsaved outputs included (minutes)."""
    _check_brute_force(chain, ratio, slack, 2)


@settings(max_examples=examples(10, 4), deadline=None)
@given(chains(1, 3, max_size=6, max_time=5, overheads=None, unsaved_outputs=None),
       st.sampled_from([0.25, 1.0, 4.0]), st.floats(0, 1))
def test_offloading_never_hurts_and_the_solvers_agree(chain, ratio, where):
    """O.1: OPT with offloading <= remat only (exhaustive) and <= offload only; offload-only
    <= save-on-cpu and offload-all where they fit; every schedule replays."""
    chain = _with_bandwidth(chain, ratio)
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    budget = lo + int(where * (hi - lo))
    both = registry.solve(chain, budget, "exhaustive-offload")
    assert both.status == "optimal" and both.optimal_for == classes.OFFLOAD.key
    remat = registry.solve(chain.replace(bandwidth=None), budget, "exhaustive")
    if remat.status == "optimal":
        assert both.makespan <= remat.makespan + 1e-9
    only = registry.solve(chain, budget, "exhaustive-offload-only")
    if only.status == "optimal":
        assert both.makespan <= only.makespan + 1e-9
        assert classes.NO_REMAT.contains(chain, only.schedule)
        for name in ("save-on-cpu", "offload-all"):
            sol = registry.solve(chain, budget, name)
            if sol.schedule is not None:
                assert only.makespan <= sol.makespan + 1e-9
    else:
        assert only.status == "infeasible" and only.min_budget > budget
    assert classes.OFFLOAD.contains(chain, both.schedule)
    assert simulate(chain, both.schedule, budget).makespan == pytest.approx(both.makespan)


@settings(max_examples=examples(25, 10), deadline=None)
@given(chains(1, 3, max_size=6, max_time=5, overheads=None, unsaved_outputs=None),
       st.floats(0, 1))
def test_no_bandwidth_or_zero_is_todays_optimum(chain, where):
    """O.2: without a bandwidth, with bandwidth 0, or with one so low that a copy outlasts
    the whole canonical optimum, exhaustive-offload's optimum is exhaustive's."""
    lo, hi = canonical_min_budget(chain), chain.store_all_memory()
    budget = lo + int(where * (hi - lo))
    ref = registry.solve(chain, budget, "exhaustive")
    assert min_feasible_budget(chain.replace(bandwidth=0)) == lo
    smallest = min(v for v in chain.x_size[1:] + chain.tape_held if v)
    slow = smallest / (2 * ref.makespan + 1)  # every copy takes longer than the optimum
    for c in (chain, chain.replace(bandwidth=0), chain.replace(bandwidth=slow)):
        sol = registry.solve(c, budget, "exhaustive-offload")
        assert sol.status == "optimal"
        assert sol.makespan == pytest.approx(ref.makespan)


@settings(max_examples=30, deadline=None)
@given(st.data(), chains(1, 3, overheads=None, unsaved_outputs=None),
       st.sampled_from([0.5, 2.0]))
def test_dominance_no_op_starts_later_from_earlier_times(data, chain, bandwidth):
    """O.4: from the same placement of values, a state whose times are all no later gives
    every op of any continuation a start and end no later, and the same memory."""
    chain = chain.replace(bandwidth=bandwidth)
    sched = data.draw(valid_schedules(chain, max_random_steps=6)).tokens()
    cut = data.draw(st.integers(0, len(sched)))
    a = OffloadState.initial(chain)
    for t in sched[:cut]:
        a = step(chain, a, Op.parse(t))[0]
    n = 3 + 2 * len(a.ready)
    bumps = data.draw(st.lists(st.sampled_from([0.0, 0.5, 3.0]), min_size=n, max_size=n))
    C, H, O = a.C + bumps[0], a.H + bumps[1], a.O + bumps[2]
    k = len(a.ready)
    b = a._replace(C=C, H=H, O=O, ready=tuple(t + d for t, d in zip(a.ready, bumps[3:3 + k])),
                   lastread=tuple(t + d for t, d in zip(a.lastread, bumps[3 + k:])))
    assume(dominates(a.times(), b.times()))  # what the search compares (most draws)
    for t in sched[cut:]:
        assert b.logical() == a.logical()
        ra, rb = step(chain, a, Op.parse(t)), step(chain, b, Op.parse(t))
        (a, ta), (b, tb) = ra, rb
        assert ta.start <= tb.start and ta.end <= tb.end
        assert (ta.memory_before, ta.peak, ta.memory_after) == \
               (tb.memory_before, tb.peak, tb.memory_after)
    assert a.makespan <= b.makespan


@settings(max_examples=25, deadline=None)
@given(chains(1, 4, max_size=6, overheads=None), st.sampled_from([0.5, 2.0]))
def test_smallest_budget_without_recomputation_is_save_on_cpu(chain, bandwidth):
    """O.6: without recomputation, the smallest feasible budget is save-on-cpu's peak, and
    offload-all's is no smaller."""
    chain = chain.replace(bandwidth=bandwidth)
    soc = simulate(chain, offload_all_schedule(chain, 0))
    assert min_feasible_budget(chain, recompute=False) == soc.peak_memory
    assert simulate(chain, offload_all_schedule(chain, 1)).peak_memory >= soc.peak_memory
    if chain.length <= 3:
        sol = registry.solve(chain, soc.peak_memory - 1, "exhaustive-offload-only")
        assert sol.status == "infeasible" and sol.min_budget == soc.peak_memory


@settings(max_examples=25, deadline=None)
@given(chains(1, 6, max_size=6, overheads=None))
def test_unbounded_bandwidth_reaches_the_ideal_makespan(chain):
    """O.7: at N, save-on-cpu's peak (every op's own needs, no recomputation), the makespan
    of save-on-cpu exceeds the ideal one by at most the time of its copies, so it tends to
    the ideal as the bandwidth grows; remat alone stays above the ideal at N whenever N is
    below store-all's peak and forward times are positive."""
    for bw in (1.0, 1e3, 1e9):
        c = chain.replace(bandwidth=bw)
        sched = offload_all_schedule(c, 0)
        r = simulate(c, sched)
        copies = sum(simulate(c, sched).profile[k].time for k, op in enumerate(sched)
                     if op.is_transfer and op.kind == "Pre")
        copies += sum(c.tape_held[op.index - 1] / bw for op in sched if op.kind == "Off")
        assert c.ideal_makespan() - 1e-9 <= r.makespan <= c.ideal_makespan() + copies + 1e-9
    N = r.peak_memory
    assert r.makespan == pytest.approx(chain.ideal_makespan(), abs=1e-6)
    if chain.length <= 3 and N < chain.store_all_memory() and min(chain.fwd_time) > 0:
        remat = registry.solve(chain, N, "exhaustive")
        assert remat.schedule is None or remat.makespan > chain.ideal_makespan()


def test_offload_solvers_are_registered_with_their_classes():
    info = registry.get("exhaustive-offload")
    assert info.exact and info.optimal_for == "all+offload"
    assert registry.resolve("exhaustive-offload-only")[1] == {"recompute": False}
    assert classes.subset("all", "all+offload") and classes.subset("no-remat+offload",
                                                                  "all+offload")
    assert not classes.subset("all+offload", "all") and not classes.subset("all+drop",
                                                                           "all+offload")
    c = Chain.homogeneous(3, x_size=4, tape_size=6).replace(bandwidth=4.0)
    s = Schedule.parse("Fall0 Fall1 Offt1 Fall2 Loss B2 Pret1 B1 B0")
    # transfers without recomputation: the smaller class (the claim of exhaustive-offload-only)
    assert classes.classify(c, s) == classes.NO_REMAT
    assert not classes.ALL.contains(c, s) and classes.OFFLOAD.contains(c, s)
    # recomputes F0; x1 prefetched two ops before the B1 that reads it: outside the class
    # DP's (offloaded after the loss, passed on by <2, 3>, it is a member: O.25)
    r = Schedule.parse("Fck0 Fall1 Offx1 Fall2 Prex1 Loss B2 B1 Fall0 B0")
    assert classes.classify(c, r) == classes.OFFLOAD and not classes.NO_REMAT.contains(c, r)
    deferred = Schedule.parse("Fck0 Fall1 Fall2 Loss Offx1 B2 Prex1 B1 Fall0 B0")
    assert classes.classify(c, deferred) == classes.PERSISTENT_OFFLOAD
    late = Schedule.parse("Fck0 Fall1 Fall2 Offx1 Loss B2 Prex1 B1 Fall0 B0")  # one op late
    assert classes.classify(c, late) == classes.PERSISTENT_OFFLOAD


def test_infeasible_budget_says_the_smallest_feasible_one():
    c = Chain.homogeneous(2, x_size=4, tape_size=6).replace(bandwidth=4.0)
    mfb = min_feasible_budget(c)
    sol = registry.solve(c, mfb - 1, "exhaustive-offload")
    assert sol.status == "infeasible" and sol.min_budget == mfb
    assert str(mfb) in sol.message
    assert registry.solve(c, mfb, "exhaustive-offload").status == "optimal"


@settings(max_examples=40, deadline=None)
@given(chains(1, 6, max_size=6, overheads=None, unsaved_outputs=None),
       st.floats(0.1, 10), st.floats(1.0, 10.0), st.sampled_from([0, 1]))
def test_a_faster_channel_never_lengthens_a_schedule(chain, bandwidth, factor, lookahead):
    """O.9: the same schedule on a faster channel: same memory, no op later."""
    slow = chain.replace(bandwidth=bandwidth)
    fast = chain.replace(bandwidth=bandwidth * factor)
    sched = offload_all_schedule(slow, lookahead)
    a, b = simulate(slow, sched), simulate(fast, sched)
    assert b.peak_memory == a.peak_memory
    for sa, sb in zip(a.profile, b.profile):
        assert sb.start <= sa.start + 1e-9 and sb.start + sb.time <= sa.start + sa.time + 1e-9
    assert b.makespan <= a.makespan + 1e-9


@pytest.mark.parametrize("seed", [0] + [pytest.param(s, marks=pytest.mark.slow) for s in (1, 2)])
def test_scaling_sizes_scales_the_bandwidth_and_keeps_every_offload_optimum(seed):
    """bandwidth is bytes per second: ``scaled_sizes(g)`` divides it with the sizes, so the
    chain in units of g bytes has the same copy times, and at budget / g the same optimum
    (and smallest budget / g) as the chain itself, by an independent solve of each.  (One
    seed by default, 18 solves of 4.5 s; seeds 1 and 2 with ``-m slow``.)"""
    from remat_theory.analysis import families
    from remat_theory.model.fields import variation

    g = 4
    base = families.make("random", 3, seed)
    big = base.replace(**{f: [v * g for v in getattr(base, f)] for f in
                          ("x_size", "tape_size", "fwd_overhead", "bwd_overhead",
                           "fall_overhead")})
    big = variation("offload").apply(big, seed)
    small = big.scaled_sizes(g)
    assert small.bandwidth == pytest.approx(big.bandwidth / g, rel=1e-15)
    lo = min_feasible_budget(big)
    assert lo == g * min_feasible_budget(small)
    for budget in sorted({lo, lo + g, (lo + big.store_all_memory()) // g * g}):
        for label in ("exhaustive-offload", "exhaustive-offload-only", "save-on-cpu"):
            a = registry.solve(big, budget, label)
            b = registry.solve(small, budget // g, label)
            assert a.status == b.status, (label, budget)
            if a.makespan is not None:
                assert a.makespan == pytest.approx(b.makespan, rel=1e-9), (label, budget)
                assert a.peak_memory == g * b.peak_memory


# ------------------------------------------------------------------ dp-offload (O.10, O.11)

@settings(max_examples=examples(12, 3), deadline=None)
@given(chains(1, 3, max_size=6, max_time=5, overheads=None, fall_costs=None,
              unsaved_outputs=None), st.sampled_from([0.25, 1.0, 4.0]), st.floats(0, 1))
def test_dp_offload_is_the_optimum_of_its_grammar_and_sits_between(chain, ratio, where):
    """O.10/O.11: dp-offload's answer is the best member of its grammar (every member
    enumerated and replayed by the independent interpreter), its smallest budget is the
    grammar's least peak; exhaustive-offload <= dp-offload <= dp (persistent, remat only),
    <= save-on-cpu (a member of the class) and <= the best member of O.10's smaller
    grammar."""
    chain = _with_bandwidth(chain, ratio)
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    budget = lo + int(where * (hi - lo))
    sol = registry.solve(chain, budget, "dp-offload")
    best, least = best_persistent_offload(chain, budget)
    assert sol.min_budget == least
    if best is None:
        assert sol.status == "infeasible" and sol.optimal_for == "persistent+offload"
        return
    assert sol.status == "optimal" and sol.makespan == pytest.approx(best[0], rel=1e-9)
    assert classes.PERSISTENT_OFFLOAD.contains(chain, sol.schedule)
    exact = registry.solve(chain, budget, "exhaustive-offload")
    assert exact.makespan <= sol.makespan + 1e-9
    dp = registry.solve(chain.replace(bandwidth=None), budget, "dp")
    if dp.schedule is not None:
        assert sol.makespan <= dp.makespan + 1e-9
    soc = registry.solve(chain, budget, "save-on-cpu")
    if soc.schedule is not None:  # a member (unsaved outputs' tapes: late moves, O.16)
        assert classes.PERSISTENT_OFFLOAD.contains(chain, soc.schedule)
        assert sol.makespan <= soc.makespan + 1e-9
    # the class of O.10 (no late offload, no tape move, no early prefetch) is a subset
    old, old_least = best_persistent_offload(chain, budget, extended=False)
    assert old_least is None or least <= old_least
    if old is not None:
        assert sol.makespan <= old[0] + 1e-9


@settings(max_examples=10, deadline=None)
@given(chains(1, 4, max_size=6, max_time=5, overheads=None, unsaved_outputs=None),
       st.floats(0, 1))
def test_dp_offload_without_a_channel_is_the_persistent_dp(chain, where):
    """O.11 (b): no bandwidth, or bandwidth 0 with positive sizes: no transfer, and the
    answer is dp's, the persistent optimum, exactly."""
    lo, hi = canonical_min_budget(chain), chain.store_all_memory()
    budget = lo + int(where * (hi - lo))
    ref = registry.solve(chain, budget, "dp")
    cases = [chain]
    if min(chain.x_size[1:] + chain.tape_held) > 0:
        cases.append(chain.replace(bandwidth=0))
    for c in cases:
        sol = registry.solve(c, budget, "dp-offload")
        assert sol.status == ref.status and sol.min_budget == ref.min_budget
        if ref.schedule is not None:
            assert sol.makespan == ref.makespan
            assert not any(op.is_transfer for op in sol.schedule)


def test_dp_offload_scales_to_long_chains_with_slots():
    """A 30-stage chain in slots: a valid schedule (replayed by the registry) no slower than
    dp's with the same slots (its class contains the persistent one, on the same rounded
    sizes), and at most save-on-cpu's where that fits."""
    from remat_theory.analysis import families
    c = families.make("transformer", 30, 0)
    c = c.replace(bandwidth=sum(c.tape_size) / sum(c.fwd_time))
    for budget in (c.store_all_memory() // 4, c.store_all_memory() // 2):
        sol = registry.solve(c, budget, "dp-offload", slots=64)
        dp = registry.solve(c.replace(bandwidth=None), budget, "dp", slots=64)
        assert sol.schedule is not None and sol.makespan <= dp.makespan + 1e-9
        assert sol.status == "feasible" and "not proven optimal" in sol.message
        assert sol.info["transfers"] > 0


def test_the_class_grammar_parser():
    """classes.is_persistent_offload: members (save-on-cpu, offload-all, dp's schedules, an
    offload two ops late passed on by a segment that moves nothing, O.25, an option-B
    checkpoint moved late and fetched ahead, O.26) and non-members (a prefetch two
    backwards ahead, an offload passed on by a segment that moved its own container, an
    evicting child's tape fetched ahead of the recomputing forward, an offload by a stale
    segment)."""
    c = Chain.homogeneous(3, x_size=4, tape_size=6).replace(bandwidth=4.0)
    soc = offload_all_schedule(c, 0)
    assert classes.PERSISTENT_OFFLOAD.contains(c, soc)
    assert classes.classify(c, soc) == classes.NO_REMAT  # the smaller class first
    # offload-all prefetches one backward ahead: right before the child's last op (O.16)
    c4 = Chain.homogeneous(4, x_size=4, tape_size=6).replace(bandwidth=4.0)
    assert classes.PERSISTENT_OFFLOAD.contains(c4, offload_all_schedule(c4, 1))
    two_ahead = Schedule.parse("Fall0 Fall1 Offt1 Fall2 Fall3 Loss Pret1 B3 B2 B1 B0")
    two_late = Schedule.parse("Fall0 Fall1 Fall2 Fall3 Offt1 Loss B3 B2 Pret1 B1 B0")
    one_late = Schedule.parse("Fall0 Fall1 Fall2 Offt1 Fall3 Loss B3 B2 Pret1 B1 B0")
    # t1 passed on by <2, 4>, which offloads its own container t2: not a member (O.25)
    past_a_mover = Schedule.parse("Fall0 Fall1 Fall2 Offt2 Fall3 Offt1 Loss B3 Pret2 B2 "
                                  "Pret1 B1 B0")
    # O.26: option B's checkpoint x1 offloaded after its child's first op, fetched right
    # before the child's last op B2
    b_late_ahead = Schedule.parse("Fck0 Fck1 Fall2 Offx1 Fall3 Loss B3 Prex1 B2 Fall1 B1 "
                                  "Fall0 B0")
    for s, member in ((two_ahead, False), (two_late, True), (one_late, True),
                      (past_a_mover, False), (b_late_ahead, True)):
        assert classes.OFFLOAD.contains(c4, s)
        assert classes.PERSISTENT_OFFLOAD.contains(c4, s) == member
    # O.25: an evicting child's tape t2 (x2 unsaved) fetched right before the recomputing
    # Fall0, not ahead of it (the row would overcount: the forward does not wait for it)
    from remat_theory.analysis import families
    cu = families.make("random", 4, 1020).replace(bandwidth=0.7,
                                                  output_saved=[True, False, False, False])
    for text, member in (("Fall0 Fall1 Offt1 Fall2 Fall3 Offt2 Loss B3 B2 Pret2 Fall0 B1 B0",
                          True),
                         ("Fall0 Fall1 Offt1 Fall2 Fall3 Offt2 Loss B3 Pret2 B2 Fall0 B1 B0",
                          False)):
        assert classes.OFFLOAD.contains(cu, Schedule.parse(text))
        assert classes.PERSISTENT_OFFLOAD.contains(cu, Schedule.parse(text)) == member
    r = Schedule.parse("Fck0 Fck1 Offx1 Fall2 Loss B2 Prex1 Fall1 Offt2 B1 Fall0 B0")
    assert not classes.PERSISTENT_OFFLOAD.contains(c, r)  # Offt2: not a container there
    m = Schedule.parse("Fck0 Fck1 Offx1 Fall2 Loss B2 Prex1 Fall1 B1 Fall0 B0")
    assert classes.classify(c, m) == classes.PERSISTENT_OFFLOAD
    stale = Schedule.parse("Fck0 Fck1 Fall2 Loss B2 Fall1 Offx1 B1 Fall0 B0")
    assert not classes.PERSISTENT_OFFLOAD.contains(c, stale)
    assert classes.subset("persistent", "persistent+offload")
    assert classes.subset("persistent+offload", "all+offload")
    assert not classes.subset("persistent+offload", "all")


@settings(max_examples=examples(8, 3), deadline=None)
@given(chains(1, 5, max_size=6, max_time=5, overheads=None, unsaved_outputs=None),
       st.sampled_from([0.25, 4.0]),
       st.floats(-0.2, 1))
def test_auto_on_a_channel_never_says_a_false_infeasible(chain, ratio, where):
    """auto on a bandwidth chain: exhaustive-offload's answer on tiny chains; beyond, a
    schedule no slower than the offload DP's and remat alone's, or infeasible only below
    the memory lower bound (O.12), or time_limit; info names who answered."""
    chain = _with_bandwidth(chain, ratio)
    lb, hi = chain.memory_lower_bound(), chain.store_all_memory()
    budget = max(0, lb + int(where * (hi - lb)))
    # tiny chains: no clock (exact search answers in well under a second, but a clock
    # would make the comparison depend on the machine's speed)
    sol = registry.solve(chain, budget, "auto", time_limit=None if chain.length <= 3 else 20)
    assert sol.info["answered_by"]
    if chain.length <= 3:
        ref = registry.solve(chain, budget, "exhaustive-offload")
        assert sol.status == ref.status and sol.optimal_for in ("all+offload",)
        if ref.makespan is not None:
            assert sol.makespan == pytest.approx(ref.makespan)
        return
    if sol.status == "infeasible":
        assert budget < lb and sol.optimal_for == "all+offload"
        return
    if chain.output_saved == (True,) * chain.length:
        dpo = registry.solve(chain, budget, "dp-offload")
        if dpo.schedule is not None:
            assert sol.schedule is not None and sol.makespan <= dpo.makespan + 1e-9
    assert sol.status != "time_limit" or "not proven optimal" in sol.message


# ------------------------------------------------------------------ ilp-offload (O.13)

@settings(max_examples=4, deadline=None)
@given(chains(1, 2, max_size=6, max_time=4, overheads=None, unsaved_outputs=None),
       st.sampled_from([0.3, 1.0, 3.0]), st.floats(0, 1), st.sampled_from([-1, 0, 2]))
def test_ilp_offload_is_exhaustive_search_over_n_ops(chain, ratio, where, extra):
    """O.13: the MILP's optimum over schedules of at most N ops is exhaustive-offload's
    with the same op limit (N around the length of the unlimited optimum, so that the limit
    binds in some draws), and equals the unlimited optimum once N reaches its length."""
    chain = _with_bandwidth(chain, ratio)
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    budget = lo + int(where * (hi - lo))
    full = registry.solve(chain, budget, "exhaustive-offload")
    n = max(1, len(full.schedule) + extra)
    ref = registry.solve(chain, budget, "exhaustive-offload", max_ops=n)
    sol = registry.solve(chain, budget, "ilp-offload", max_ops=n)
    assert ref.optimal_for == f"all+offload<={n}"
    # O.14: the MILP's answer says all+offload when n reaches the length bound of its value
    assert sol.optimal_for in (ref.optimal_for, "all+offload")
    assert sol.status == ref.status
    if ref.status == "optimal":
        assert sol.makespan == pytest.approx(ref.makespan, rel=1e-9)
        assert len(sol.schedule) <= n
    if extra >= 0 or sol.optimal_for == "all+offload":
        assert sol.makespan == pytest.approx(full.makespan, rel=1e-9)


def test_ilp_offload_at_its_time_limit_gives_a_certified_bound():
    """At a time limit: the incumbent (a valid schedule), a lower bound no higher than the
    exact optimum of its class, "not proven optimal"; and beyond max_stages a refusal that
    names the way out."""
    from remat_theory.analysis import families
    from remat_theory.model.errors import SolverLimitError
    c = families.make("transformer", 3, 0)
    c = c.replace(bandwidth=sum(c.tape_size) / sum(c.fwd_time))
    budget = (min_feasible_budget(c) + c.store_all_memory()) // 2
    with pytest.raises(SolverLimitError, match="max_stages"):
        registry.solve(c, budget, "ilp-offload")
    sol = registry.solve(c, budget, "ilp-offload", max_stages=3, time_limit=0.5)
    if sol.status == "time_limit":
        assert "not proven optimal" in sol.message and sol.schedule is not None
        n = sol.info["max_ops"]
        ref = registry.solve(c, budget, "exhaustive-offload", max_ops=n)
        assert sol.bound is None or sol.bound <= ref.makespan + 1e-9
        assert ref.makespan <= sol.makespan + 1e-9
    else:  # proven within half a second
        assert sol.status == "optimal"


def test_the_offload_dp_gap_certificate():
    """O.11 (c): where the class is not optimal.  proofs/certificates/offload_dp_gap.json:
    exhaustive-offload beats dp-offload (replayed and re-proven by tests/test_proofs.py),
    while remat alone (the chain without its channel) the persistent DP is optimal and the
    class gains nothing over it: the gap is the class's placement of transfers (the optimum
    offloads a value two ops after its last use, which the grammar does not have)."""
    from pathlib import Path
    from remat_theory.analysis.certificates import load
    cert = load(Path(__file__).resolve().parent.parent / "proofs" / "certificates"
                / "offload_dp_gap.json")
    c, b = cert.chain, cert.budget
    opt, dp = cert.solutions["opt"]["makespan"], cert.solutions["dp"]["makespan"]
    assert opt < dp
    plain = c.replace(bandwidth=None)
    for solver in ("exhaustive", "dp"):
        sol = registry.solve(plain, b, solver)
        assert sol.status == "optimal"
        assert sol.makespan == pytest.approx(cert.facts["remat_only_optimum"]) == dp
    assert not classes.PERSISTENT_OFFLOAD.contains(c, Schedule(cert.solutions["opt"]["schedule"]))


@pytest.mark.parametrize("stages,seed", [(1, 0), (2, 1), (2, 2), (3, 3), (3, 4)])
def test_the_class_parser_is_the_enumerated_grammar(stages, seed):
    """O.16: classes.is_persistent_offload accepts every token sequence of the grammar as
    enumerated from its text (tests/_offload_reference.py), and none of the sequences one
    swap of adjacent tokens or one deletion away that the enumeration does not contain
    (valid or not: the parser decides the grammar, the referee validity)."""
    from remat_theory.analysis import families
    import random

    chain = families.make("random", stages, seed)
    r = random.Random(seed)
    chain = chain.replace(bandwidth=1.0, output_saved=[r.random() < 0.5
                                                       for _ in range(stages)])
    members = {tuple(s) for s in persistent_offload_schedules(chain)}
    for s in members:
        assert classes.is_persistent_offload(chain, Schedule.parse(" ".join(s))), s
    for s in r.sample(sorted(members), min(150, len(members))):
        for i in range(len(s) - 1):
            for near in (s[:i] + (s[i + 1], s[i]) + s[i + 2:], s[:i] + s[i + 1:]):
                if near not in members:
                    assert not classes.is_persistent_offload(chain,
                                                             Schedule.parse(" ".join(near)))


@pytest.mark.parametrize("stages", [4, 6])
def test_dp_offload_on_longer_chains_with_unsaved_outputs(stages):
    """Beyond the enumeration's reach: on random chains of 4 and 6 stages with some
    outputs unsaved and copies from a third to three forwards, at budgets from the class's
    least to store-all's, dp-offload's schedule replays in the referee to its value (the
    registry checks it), is a member of its class, and is no slower than dp (remat only)
    or save-on-cpu (a member, O.17)."""
    from benchmarks.offload_dp_gap import with_channel
    from remat_theory.analysis import families

    for seed in range(4):
        for ratio in (0.3, 1.0, 3.0):
            chain = with_channel(families.make("random", stages, seed), ratio, seed)
            least = registry.solve(chain, 0, "dp-offload").min_budget
            hi = chain.store_all_memory()
            for budget in sorted({least, (least + hi) // 2, hi}):
                sol = registry.solve(chain, budget, "dp-offload")
                assert sol.status == "optimal"
                assert classes.PERSISTENT_OFFLOAD.contains(chain, sol.schedule)
                for other, c in (("dp", chain.replace(bandwidth=None)),
                                 ("save-on-cpu", chain)):
                    ref = registry.solve(c, budget, other)
                    if ref.schedule is not None:
                        assert sol.makespan <= ref.makespan + 1e-9


def test_dp_offload_evicts_only_where_its_input_survives():
    """O.18 needs the segment's input saved: a Fall_s frees an unsaved plain x_s, so the
    recomputing Fall_s could not read it.  The profiled resnet chain (x_2 unsaved) at
    1 GB/s, where an eviction at stage 2 would otherwise be chosen: the schedule replays
    (the registry checks it) and stays in the class."""
    from pathlib import Path
    import json

    path = (Path(__file__).resolve().parent.parent / "benchmarks" / "results"
            / "offload_chains" / "resnet-small.json")
    chain = Chain.from_dict(json.loads(path.read_text())).replace(bandwidth=1e9)
    assert not chain.output_saved[1]  # x_2 unsaved
    sol = registry.solve(chain, 14347721, "dp-offload", slots=1000)
    assert sol.schedule is not None
    assert classes.PERSISTENT_OFFLOAD.contains(chain, sol.schedule)
    ref = registry.solve(chain.replace(bandwidth=None), 14347721, "dp", slots=1000)
    assert ref.schedule is None or sol.makespan <= ref.makespan + 1e-9
