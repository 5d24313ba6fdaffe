"""Every forward-time vector at once: the classic rows of proofs/README over all times.

On a chain with no recording costs (``fall_time = fwd_time``) the makespan of a schedule is
``sum_i n_i * fwd_time[i] + sum(bwd_time)``, where ``n_i`` counts its forward operations of
stage ``i`` (``Fn``, ``Fck`` and ``Fall`` alike): which schedules are valid under a budget
depends on the sizes only.  So instead of solving a chain once per time vector, this module
computes, for a chain's **memory configuration**, the Pareto set of ``(n, peak)`` over every
valid schedule (and over the schedules of a class), once; then for every budget and **every**
forward-time vector ``f >= 0`` at once it answers how far the class's optimum can be from
the unrestricted one (proofs/classic_model.md, section C.8):

    sup_f  min_{c in C_b} c.f / min_{a in A_b} a.f  =  max_{a in A_b}  val(a),
    val(a) = max_{g in simplex}  min_{c in C_b}  sum_i (c_i / a_i) g_i

(``A_b``, ``C_b``: the Pareto-minimal count vectors of every schedule and of the class
under budget ``b``; every schedule runs each stage at least once, so ``a_i >= 1``; ``f_i =
g_i / a_i``).  ``val(a)`` is the value of a matrix game, computed **exactly** (fractions)
by enumerating the vertices of its linear program; the maximising ``g`` gives a time vector
that attains the ratio, so every loss found comes with a chain to certify it.

The search (:func:`count_labels`) is a multi-objective label-setting walk over the
simulator's own states and transition function (``remat_theory.model.simulator``), class
rules from :func:`remat_theory.model.persistence.violation`: labels ``(n, peak)``, popped in
order of ``sum(n)`` (every forward adds 1, every backward moves the backward pointer down,
so no cycle is free), a label dropped when a settled label of the same node has no larger
count and no larger peak (the same state completes the same way from both).  Labels whose
peak reaches store-all's peak are not kept (at that budget store-all, in every class, is
optimal).  Backward times add a constant (Lemma C.2) and are ignored.
"""
from __future__ import annotations

import heapq
import itertools
from fractions import Fraction

from remat_theory.model import persistence
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import FALL, FCK, FN, LOSS_OP, Bwd, Fall, Fck, Fn
from remat_theory.model.simulator import State, simulate, state_memory, transition


def _check(chain: Chain) -> None:
    if chain.has_fall_costs:
        raise RematError("chain has recording costs (fall_time or fall_overhead differ from the "
                         "no-grad forward's): the count vectors do not decide the makespan")
    if chain.bandwidth is not None:
        raise RematError("chain.bandwidth is set: offloading is not part of this search")


def store_all_peak(chain: Chain) -> int:
    L = chain.length
    ops = [Fall(i) for i in range(L)] + [LOSS_OP] + [Bwd(i) for i in reversed(range(L))]
    return simulate(chain, ops).peak_memory


def count_labels(chain: Chain, schedule_class: str = persistence.ALL,
                 cap: int | None = None) -> list:
    """The Pareto set of ``(counts, peak)`` over the complete schedules of ``schedule_class``
    whose peak is below ``cap`` (default: store-all's peak); ``counts[i]`` is the number of
    forward operations of stage ``i``."""
    _check(chain)
    if not persistence.is_class(schedule_class):
        raise RematError(f"schedule_class = {schedule_class!r} is unknown")
    L = chain.length
    cap = store_all_peak(chain) if cap is None else cap
    fwd = [(Fn(i), Fck(i), Fall(i)) for i in range(L)]
    bwd = [Bwd(i) for i in range(L)]
    s0 = State.initial(chain)
    start = (s0, persistence.NO_FRESH)
    peak0 = state_memory(chain, s0)
    if peak0 >= cap:
        return []
    zero = (0,) * L
    settled: dict = {}
    final = []
    tie = itertools.count()
    heap = [(0, next(tie), zero, peak0, start)]
    while heap:
        _, _, n, pk, node = heapq.heappop(heap)
        seen = settled.setdefault(node, [])
        if any(m[1] <= pk and all(a <= b for a, b in zip(m[0], n)) for m in seen):
            continue
        seen.append((n, pk))
        state, mark = node
        if state.is_final():
            final.append((n, pk))
            continue
        mem = state_memory(chain, state)
        u = state.bwd_next
        ops = [LOSS_OP] if u == L else [bwd[u]] if u >= 0 else []
        for i in range(min(u, L - 1) + 1):
            ops.extend(fwd[i])
        for op in ops:
            if persistence.violation(chain, state, mark, op, schedule_class) is not None:
                continue
            r = transition(chain, state, mem, op)
            if isinstance(r, str):
                continue
            p = max(pk, r.peak)
            if p >= cap:
                continue
            nn = n
            if op.kind in (FN, FCK, FALL):
                m = list(n)
                m[op.index] += 1
                nn = tuple(m)
            nxt = (r.state, persistence.next_mark(op, schedule_class, mark))
            heapq.heappush(heap, (sum(nn), next(tie), nn, p, nxt))
    return pareto([(n, pk) for n, pk in final])


def pareto(labels: list) -> list:
    """The labels no other label dominates (no larger count anywhere, no larger peak)."""
    out = []
    for n, pk in sorted(set(labels), key=lambda x: (sum(x[0]), x[1], x[0])):
        if not any(q <= pk and all(a <= b for a, b in zip(m, n)) for m, q in out):
            out.append((n, pk))
    return out


def vectors_at(labels: list, budget: int) -> list:
    """The Pareto-minimal count vectors of the schedules that fit ``budget``."""
    vs = sorted({n for n, pk in labels if pk <= budget}, key=lambda v: (sum(v), v))
    out = []
    for v in vs:
        if not any(all(a <= b for a, b in zip(m, v)) for m in out):
            out.append(v)
    return out


def _solve(rows: list, rhs: list):
    """Exact Gaussian elimination; None if singular."""
    n = len(rows)
    a = [list(r) + [b] for r, b in zip(rows, rhs)]
    for col in range(n):
        piv = next((r for r in range(col, n) if a[r][col] != 0), None)
        if piv is None:
            return None
        a[col], a[piv] = a[piv], a[col]
        inv = 1 / a[col][col]
        a[col] = [v * inv for v in a[col]]
        for r in range(n):
            if r != col and a[r][col] != 0:
                f = a[r][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col])]
    return [a[r][n] for r in range(n)]


def game_value(a: tuple, cs: list) -> tuple:
    """``max_{g in simplex} min_{c in cs} sum_i (c_i/a_i) g_i`` exactly, and a maximising
    ``g`` (fractions): the vertices of the LP ``max t, t <= (Mg)_c, g >= 0, sum g = 1``."""
    L = len(a)
    if any(x < 1 for x in a):
        raise RematError(f"count vector {a} has a zero entry: every stage runs at least once")
    M = [[Fraction(c[i], a[i]) for i in range(L)] for c in cs]
    # constraints as (row over g..., coefficient of t, rhs) equalities when tight
    ineq = [([Fraction(int(i == j)) for j in range(L)], Fraction(0), Fraction(0))
            for i in range(L)]  # g_i >= 0
    ineq += [(row, Fraction(-1), Fraction(0)) for row in M]  # (Mg)_c - t >= 0
    best, arg = None, None
    one = ([Fraction(1)] * L, Fraction(0), Fraction(1))
    for pick in itertools.combinations(range(len(ineq)), L):
        eqs = [one] + [ineq[k] for k in pick]
        sol = _solve([r + [tc] for r, tc, _ in eqs], [b for _, _, b in eqs])
        if sol is None:
            continue
        g, t = sol[:L], sol[L]
        if any(v < 0 for v in g):
            continue
        if any(sum(r[j] * g[j] for j in range(L)) < t for r in M):
            continue
        if best is None or t > best:
            best, arg = t, g
    return best, arg


def time_free_ratio(all_vs: list, class_vs: list) -> tuple:
    """``sup_f min_c c.f / min_a a.f`` over forward-time vectors ``f >= 0, f != 0`` (exact),
    with a time vector (integers) attaining it; ``(1, None)`` when the class never loses."""
    best, arg = Fraction(1), None
    for a in all_vs:
        if any(all(x <= y for x, y in zip(c, a)) for c in class_vs):
            continue  # some class schedule is no slower than a at every time vector
        v, g = game_value(a, class_vs)
        if v > best:
            f = [gi / ai for gi, ai in zip(g, a)]
            den = 1
            for x in f:
                den = den * x.denominator // _gcd(den, x.denominator)
            best, arg = v, [int(x * den) for x in f]
    return best, arg


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def budget_ratios(chain: Chain, schedule_class: str = persistence.WEAK) -> list:
    """Per budget where the Pareto sets change (from the class's smallest budget up to
    store-all's peak, exclusive): ``(budget, ratio, time vector or None)``, the ratio over
    every forward-time vector.  Budgets where the class has no schedule are skipped (that
    is the class-budget gap's measure)."""
    cap = store_all_peak(chain)
    A = count_labels(chain, persistence.ALL, cap)
    C = count_labels(chain, schedule_class, cap)
    out = []
    for b in sorted({pk for _, pk in A} | {pk for _, pk in C}):
        cs = vectors_at(C, b)
        if not cs:
            continue
        r, f = time_free_ratio(vectors_at(A, b), cs)
        out.append((b, r, f))
    return out


__all__ = ["count_labels", "pareto", "vectors_at", "game_value", "time_free_ratio",
           "budget_ratios", "store_all_peak"]


def enumerate_range(cfg, schedule_class: str, lo: int = 0, hi: int | None = None,
                    keep: int = 200) -> dict:
    """Every memory configuration ``lo..hi-1`` of ``cfg`` (a
    :class:`remat_theory.analysis.classic_enum.EnumConfig`; its ``times`` are not used: every
    forward-time vector is covered at once) against ``schedule_class``: the budgets checked,
    the losses (a budget where some time vector makes the class slower), the largest ratio
    and its count, the ratios' histogram, the time vectors attaining each loss (counted) and
    the ``keep`` largest records, each a chain with a time vector that attains its ratio."""
    from remat_theory.analysis.classic_enum import chain_of, memory_config
    hi = cfg.size() if hi is None else hi
    out = {"configs": 0, "checks": 0, "losses": 0, "max_ratio": "1", "histogram": {},
           "losing_configs": 0, "losses_without_fwd_overhead": 0, "worst_times": {},
           "records": []}
    best = Fraction(1)
    for idx in range(lo, hi):
        mem = memory_config(cfg, idx)
        chain = chain_of(mem, (1,) * cfg.stages)
        out["configs"] += 1
        lost = False
        for b, r, f in budget_ratios(chain, schedule_class):
            out["checks"] += 1
            if r > 1:
                lost = True
                out["losses"] += 1
                out["histogram"][str(r)] = out["histogram"].get(str(r), 0) + 1
                if not any(mem["fwd_overhead"]):
                    out["losses_without_fwd_overhead"] += 1
                best = max(best, r)
                key = " ".join(map(str, f))
                out["worst_times"][key] = out["worst_times"].get(key, 0) + 1
                rec = {"index": idx, "budget": b, "ratio": str(r), "ratio_float": float(r),
                       "chain": chain_of(mem, tuple(f)).to_dict()}
                out["records"].append(rec)
                out["records"] = sorted(out["records"], key=lambda x: -x["ratio_float"])[:keep]
        out["losing_configs"] += lost
    out["max_ratio"] = str(best)
    return out


__all__ += ["enumerate_range"]
