"""O.15 (proofs/offload.md): ``ilp-offload``'s bound over ALL schedules beyond the range
its N positions prove.

Every schedule of more than N ops takes at least ``longer_schedule_bound(N)``, the least
float V with ``length_bound(V) > N`` (O.14 read the other way round), so the minimum of
that and the MILP's bound over schedules of at most N ops bounds every schedule.  Checked
here: the threshold against a brute-force scan over V and against an exact rational
closed form of the length bound (its breakpoints), and the solver's bound against the
independent oracle ``exhaustive-offload`` (exact over all schedules, O.5), with N below
the length bound of the optimum, at a time limit, and where no schedule of N ops fits.
"""
from __future__ import annotations

import math
import random
from fractions import Fraction

import _bench
import pytest
from _tiers import instances

from remat_theory import Chain
from solvers import registry
from solvers.offload.copies import copy_time
from solvers.offload.copies import size, values
from solvers.offload.ilp_bounds import length_bound, longer_schedule_bound
from solvers.offload.normal import FLOAT_SLACK as _FLOAT_SLACK
from solvers.offload.exhaustive import min_feasible_budget


def _random_chain(rng: random.Random, L: int, *, zero_sizes: bool = False,
                  channel: bool = True) -> Chain:
    """Positive forward times (some fractional), backward and loss times that may be 0;
    with ``zero_sizes`` some values of 0 bytes (copies of no time)."""
    lo = 0 if zero_sizes else 1
    x = [rng.randint(1, 6)] + [rng.randint(lo, 6) for _ in range(L)]
    tape = [x[i + 1] + rng.randint(lo, 5) for i in range(L)]
    fwd = [rng.choice([0.5, 1, 1.25, 2, 3]) for _ in range(L)]
    c = Chain(fwd_time=fwd, bwd_time=[rng.randint(0, 3) for _ in range(L + 1)], x_size=x,
              tape_size=tape, fall_time=[f + rng.choice([0, 0.5, 1]) for f in fwd])
    return c.replace(bandwidth=rng.choice([1.0, 2.5, 4.0, 8.0, 24.0])) if channel else c


def _prev(x: float) -> float:
    return math.nextafter(x, -math.inf)


def test_the_threshold_is_exact_and_monotone():
    """``longer_schedule_bound(N)`` is the least float where ``length_bound`` exceeds N:
    above N there, at most N one float below; non-decreasing in N; and a brute-force scan
    of V over a grid (with every grid point's neighbours) never contradicts it."""
    rng = random.Random(15)
    for k in range(instances(40, 5)):
        chain = _random_chain(rng, rng.randint(1, 3), zero_sizes=k % 3 == 1,
                              channel=k % 4 != 3)
        top = 3 * chain.ideal_makespan() + 10
        grid = [top * j / 400 for j in range(401)]
        prev_v = 0.0
        for n in range(0, 70, 3):
            v = longer_schedule_bound(chain, n)
            assert v >= prev_v  # monotone in N
            prev_v = v
            assert length_bound(chain, v) > n
            assert v == 0.0 or length_bound(chain, _prev(v)) <= n
            for g in grid:  # brute force: l(g) <= n exactly below the threshold
                assert (length_bound(chain, g) <= n) == (g < v), (chain, n, g, v)
        # length_bound itself is non-decreasing along the scan
        ls = [length_bound(chain, g) for g in grid]
        assert ls == sorted(ls)


def _exact_general_bound(chain: Chain, V: Fraction) -> int:
    """O.14's closed form in exact rational arithmetic, with no float slack."""
    L = chain.length
    f = min(Fraction(min(a, b)) for a, b in zip(chain.fwd_time, chain.fall_time))
    S = sum(Fraction(t) for t in chain.bwd_time) + sum(Fraction(t) for t in chain.fall_time)
    if V < S:
        return 0
    n_c = 2 * L + 1 + math.floor((V - S) / f)
    copies = []
    if chain.bandwidth is not None:
        copies = [Fraction(size(chain, v)) / Fraction(chain.bandwidth) for v in values(chain)]
    n_t = 3 * len(copies) * n_c
    timed = [d for d in copies if d > 0]
    if timed:
        n_t = min(n_t, 3 * (len(copies) - len(timed)) * n_c + math.floor(V / min(timed)))
    return n_c + n_t


def _charge(chain: Chain, kind: str, i: int = 0) -> int:
    """O.21's charge of a compute op, from its definition: over the sources it may read
    its input from, the values it leaves on the device that it made or read, plus the
    values it touches (reads, or the unsaved output of a Fall); x_0 never moves."""
    L = chain.length
    best = 0
    if kind == "Loss":
        sources = ["x", "t"] if chain.saved(L) else ["x"]
        for src in sources:  # a plain x_L is freed, x_L in t_L keeps t_L
            best = max(best, (src == "t") + 1)
        return best
    sources = [None] if i == 0 else (["x", "t"] if chain.saved(i) else ["x"])
    for src in sources:
        touches = [] if src is None else [src]
        if kind == "B":
            touches.append("t_next")
            left = [src] if src == "t" else []  # B frees t_{i+1} and a plain x_i
        else:
            frees = kind == "Fn" or (kind == "Fall" and src == "x" and not chain.saved(i))
            left = ([] if frees or src is None else [src]) + ["made"]
            if kind == "Fall" and not chain.output_saved[i]:
                left.append("unsaved")
                touches.append("unsaved")
        best = max(best, len(left) + len(touches))
    return best


_MEMO: dict = {}


def _exact_normal_bound(chain: Chain, V: Fraction) -> int:
    """O.21's bound in exact rational arithmetic, by enumerating the extra forwards."""
    L = chain.length
    S = sum(Fraction(t) for t in chain.bwd_time) + sum(Fraction(t) for t in chain.fall_time)
    if V < S:
        return 0
    fixed = 1 + _charge(chain, "Loss") + sum(1 + _charge(chain, "B", i) for i in range(L)) \
        + sum(1 + _charge(chain, "Fall", i) for i in range(L))
    items = [(Fraction(chain.fwd_time[i]), 1 + _charge(chain, k, i))
             for i in range(L) for k in ("Fn", "Fck")]
    items += [(Fraction(chain.fall_time[i]), 1 + _charge(chain, "Fall", i)) for i in range(L)]

    memo = _MEMO.setdefault(chain, {})

    def most(spare, start):  # the most value of a multiset of items[start:] within spare
        if (spare, start) not in memo:
            memo[spare, start] = max([0] + [w + most(spare - t, j)
                                            for j, (t, w) in enumerate(items)
                                            if j >= start and t <= spare])
        return memo[spare, start]

    return fixed + most(V - S, 0)


def _exact_length_bound(chain: Chain, V: Fraction) -> int:
    """The bound the solver certifies with: the smaller of O.14's and O.21's (a chain with
    a channel); O.14's alone without one."""
    general = _exact_general_bound(chain, V)
    if chain.bandwidth is None:
        return general
    return min(general, _exact_normal_bound(chain, V))


def _exact_threshold(chain: Chain, n: int) -> Fraction:
    """The least V with the exact closed form above n: it jumps only at S (the ideal
    makespan), at S + k f, at k c (k >= 1) and at S plus a sum of forward times (O.21's
    knapsack), so scan those breakpoints in order."""
    f = min(Fraction(min(a, b)) for a, b in zip(chain.fwd_time, chain.fall_time))
    S = sum(Fraction(t) for t in chain.bwd_time) + sum(Fraction(t) for t in chain.fall_time)
    points = {S} | {S + k * f for k in range(1, 400)}
    times = {Fraction(t) for t in chain.fwd_time + chain.fall_time}
    sums = {Fraction(0)}
    for _ in range(12):  # sums of up to 12 forwards: past every threshold scanned here
        sums |= {a + t for a in sums for t in times if a + t <= 12 * max(times)}
    points |= {S + a for a in sums}
    if chain.bandwidth is not None:
        cs = [Fraction(size(chain, v)) / Fraction(chain.bandwidth) for v in values(chain)]
        cs = [d for d in cs if d > 0]
        if cs:
            points |= {k * min(cs) for k in range(1, 2000)}
    scanned = _SCANNED.setdefault(chain, [])  # (point, bound) in order, shared by the n's
    for k, p in enumerate(sorted(points)):
        if k == len(scanned):
            scanned.append((p, _exact_length_bound(chain, p)))
        if scanned[k][1] > n:
            return p
    raise AssertionError("scan too short")


_SCANNED: dict = {}


def test_the_threshold_is_the_closed_forms_up_to_the_float_slack():
    """Against the exact rational closed form: the float threshold is the exact one divided
    by (1 + slack), the factor by which ``length_bound`` inflates a makespan."""
    rng = random.Random(151)
    for k in range(instances(30, 3)):
        chain = _random_chain(rng, rng.randint(1, 3), zero_sizes=k % 3 == 1,
                              channel=k % 5 != 4)
        for n in (0, 3, 7, 12, 20, 33, 50):
            exact = _exact_threshold(chain, n)
            got = longer_schedule_bound(chain, n)
            assert got == pytest.approx(float(exact) / (1 + _FLOAT_SLACK), rel=1e-13), (chain, n)


def test_no_threshold_when_a_forward_takes_no_time():
    c = Chain(fwd_time=[0, 1], bwd_time=[1, 1, 0], x_size=[2, 2, 2], tape_size=[3, 3],
              bandwidth=2.0)
    assert longer_schedule_bound(c, 10) is None
    with pytest.raises(ValueError, match="n = -1"):
        longer_schedule_bound(c.replace(fwd_time=[1, 1]), -1)


def _cases():
    """(chain, budget) on random 1-2 stage chains, budgets from the smallest feasible up."""
    rng = random.Random(30)
    out = []
    for k in range(8):
        L = 1 + k % 2
        chain = _random_chain(rng, L, zero_sizes=k % 4 == 3)
        lo, hi = min_feasible_budget(chain), chain.store_all_memory()
        out.append((chain, lo + int(rng.random() * (hi - lo) / 2)))
    return out


def test_the_bound_over_all_schedules_is_below_the_exhaustive_optimum():
    """On every instance and N: a bound said to be over ``all+offload`` is at most
    exhaustive-offload's optimum over all schedules; one over ``all+offload<=N`` at most
    its optimum with N ops; where the bound is the makespan, the answer is the optimum over
    all schedules and says so.  N runs from below the optimum's length (no schedule of N
    ops fits: the bound is O.15's alone) past it (below the length bound of the optimum:
    the MILP's optimum bounds the short schedules), at a time limit on two stages."""
    seen = {"infeasible": 0, "optimal-short": 0, "time_limit": 0, "certified": 0}
    for chain, budget in _cases():
        ref = registry.solve(chain, budget, "exhaustive-offload")
        assert ref.status == "optimal" and ref.optimal_for == "all+offload"
        n0, need = len(ref.schedule), length_bound(chain, ref.makespan)
        for n in (max(1, n0 - 2), n0, n0 + 2):
            tl = 0.2 if chain.length == 2 else None
            sol = registry.solve(chain, budget, "ilp-offload", max_ops=n, time_limit=tl)
            over = sol.info["bound_over"]
            assert sol.bound is not None
            if over == "all+offload":
                assert sol.bound <= ref.makespan * (1 + 1e-9), (chain, budget, n, sol)
                assert sol.info["longer_bound"] == longer_schedule_bound(chain, n)
            else:
                short = registry.solve(chain, budget, "exhaustive-offload", max_ops=n)
                assert sol.bound <= short.makespan * (1 + 1e-9)
            if sol.status == "infeasible":
                seen["infeasible"] += 1
                assert over == "all+offload" and sol.bound == sol.info["longer_bound"]
            if sol.status == "time_limit":
                seen["time_limit"] += 1
                assert "not proven optimal" in sol.message
                assert sol.optimal_for == over
            if sol.status == "optimal":
                assert sol.bound <= sol.makespan
                if sol.bound == sol.makespan:
                    seen["certified"] += 1
                    assert sol.optimal_for == "all+offload"
                    assert sol.makespan == pytest.approx(ref.makespan, rel=1e-9)
                else:
                    assert sol.optimal_for == f"all+offload<={n}"
                    assert "not proven over longer schedules" in sol.message
                    if n < need:
                        seen["optimal-short"] += 1
    # the cases this test is about all occurred
    assert seen["infeasible"] and seen["optimal-short"], seen


def test_at_a_time_limit_the_bound_covers_all_schedules():
    """Two stages, cheap copies, many positions: HiGHS stops at its limit; the bound then
    is the minimum of its dual bound (schedules of at most N ops) and O.15's (longer ones),
    never above exhaustive-offload's optimum; the incumbent is a valid schedule."""
    chain = Chain(fwd_time=[1, 1.25], bwd_time=[1, 1, 0], x_size=[2, 4, 4], tape_size=[6, 7],
                  bandwidth=24.0)
    budget = (min_feasible_budget(chain) + chain.store_all_memory()) // 2
    ref = registry.solve(chain, budget, "exhaustive-offload")
    n = length_bound(chain, ref.makespan) - 2  # beyond the proven range
    assert n >= 12
    sol = registry.solve(chain, budget, "ilp-offload", max_ops=n, time_limit=0.2)
    assert sol.info["bound_over"] == "all+offload"
    assert sol.bound <= ref.makespan * (1 + 1e-9)
    assert sol.bound >= longer_schedule_bound(chain, 0)  # never below the ideal makespan
    if sol.status == "time_limit":
        within, longer = sol.info["bound_at_most_n"], sol.info["longer_bound"]
        # no dual bound yet: only the ideal makespan (W_0) is known of the short schedules
        assert within is not None and within >= longer_schedule_bound(chain, 0)
        assert sol.bound == max(longer_schedule_bound(chain, 0), min(within, longer))
        assert sol.schedule is not None and sol.makespan >= ref.makespan * (1 - 1e-9)
    else:  # proven inside the limit: then it is the optimum of at most n ops
        assert sol.status == "optimal"


def test_a_zero_time_forward_gives_no_bound_over_all_schedules():
    """No length bound exists, so the answer bounds only the schedules of at most N ops,
    and says so: the class, ``longer_bound`` None, the message."""
    c = Chain(fwd_time=[0], bwd_time=[1, 0], x_size=[2, 3], tape_size=[5], bandwidth=2.0)
    budget = min_feasible_budget(c)
    for n in (4, 8):
        sol = registry.solve(c, budget, "ilp-offload", max_ops=n)
        assert sol.info["bound_over"] == f"all+offload<={n}"
        assert sol.info["longer_bound"] is None
        assert "no lower bound over them" in sol.message
        if sol.status == "optimal":
            assert sol.optimal_for == f"all+offload<={n}" and sol.bound == sol.makespan


def test_verify_checks_a_bound_over_the_class_it_names():
    """``remat verify`` checks a bound against the class of ``info["bound_over"]``: an
    optimum over schedules of at most N ops whose bound claims all schedules is refuted by
    a shorter schedule of more ops, and not by one of a class the bound does not cover."""
    from remat_theory.analysis.verify import _check_instance

    def rec(solver, status, makespan, bound, optimal_for, schedule_class, bound_over=None):
        return {"solver": solver, "exact": True, "status": status, "makespan": makespan,
                "peak_memory": 1, "bound": bound, "optimal_for": optimal_for,
                "min_budget": None, "wall_time": 0.0, "error": None,
                "schedule_class": schedule_class, "message": "", "bound_over": bound_over}

    ilp = rec("ilp-offload", "optimal", 12.0, 10.0, "all+offload<=6", "all+offload<=6",
              "all+offload")
    long_ = rec("exhaustive-offload", "optimal", 9.0, 9.0, "all+offload", "all+offload")
    found = _check_instance("c", 10, [ilp, long_])
    assert [v["relation"] for v in found] == ["no schedule beats a proven lower bound of its class"]
    assert "every all+offload schedule takes >= 10" in found[0]["detail"]
    ok = rec("exhaustive-offload", "optimal", 10.0, 10.0, "all+offload", "all+offload")
    assert _check_instance("c", 10, [ilp, ok]) == []


def test_a_time_limit_before_any_dual_bound_gives_only_the_ideal_makespan():
    """HiGHS stopped before it had a dual bound (-inf): the schedules of at most N ops are
    then bounded by the ideal makespan only, never by O.15's bound on the longer ones (which
    once was reported alone, above the optimum: random-2 seed 0, copies 0.3 forwards,
    unsaved outputs, budget 27, where the optimum is 40 and that bound 50)."""
    mod = _bench.load("offload_dp_gap")
    from remat_theory.analysis import families
    chain = mod.with_channel(families.make("random", 2, 0), 0.3, 0)
    ref = registry.solve(chain, 27, "exhaustive-offload")
    sol = registry.solve(chain, 27, "ilp-offload", max_ops=19, time_limit=0.05)
    assert sol.info["longer_bound"] > ref.makespan  # the case: W_N alone would be wrong
    assert sol.bound <= ref.makespan * (1 + 1e-9), (sol.bound, ref.makespan)
    if sol.status == "optimal":
        assert sol.makespan == pytest.approx(ref.makespan, rel=1e-9)
    else:
        assert sol.status == "time_limit" and sol.bound < sol.makespan
