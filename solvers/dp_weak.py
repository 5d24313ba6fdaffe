"""The weak-persistence dynamic program: optimal among weakly persistent schedules.

The class (:func:`remat_theory.model.persistence.is_weakly_persistent`; proofs/weak_persistence.md)
is the persistent class of ``solvers/dp.py`` plus one freedom, the one the journal version
of the Rotor work (Beaumont et al.) calls weak persistence: a checkpoint x_i (i >= 1) that
has already served may be *released* by a later ``Fn_i`` and replaced by the values
computed from it, before its own segment's backward has run; x_i is then recomputed from an
earlier checkpoint when it is needed again.

Subproblems (memory convention of ``solvers/dp.py``: m = budget minus everything held that
the subproblem does not own; g = x[t+1] is the live gradient d_{t+1}, 0 when t = L):

* W(s, t, m): as in the persistent DP (x_s available, not owned; ends with d_s), with one
  more option.
* R(i, t, j, m), 1 <= i < j <= t: a plain x_i, *owned*, and d_{t+1} are held; run the
  backward of stages t..j and stop with d_j live and x_i released (freed by an ``Fn_i``).

Options (peaks are rows of the operation table; pass(s, k) = Fck_s Fn_{s+1} .. Fn_{k-1}, whose
largest peak above held memory is fp[s, k]; an Fn-pass Fn_i .. Fn_{l-1} that releases x_i has
largest peak above the gradient max_{i<=r<l} x[r] + x[r+1] + fo[r]):

W(s, t, m): the persistent options (base cases; A: Fall_s, W(s+1, t, m - tape[s]), B_s;
  B: pass(s, k), W(k, t, m - x[k]), W(s, k-1, m)) and
  C: pass(s, k) [g + fp[s, k] <= m], R(k, t, j, m), W(s, j-1, m)            (s < k < j <= t)
R(i, t, j, m):
  release: Fn_i .. Fn_{l-1} [g + max step <= m], then W(j, t, m - x[j]) if l = j,
           else R(l, t, j, m)                                               (i < l <= j)
  keep:    pass(i, k) [x[i] + g + fp[i, k] <= m], W(k, t, m - x[i] - x[k]), R(i, k-1, j, m)
                                                                            (j < k <= t)
  keep-release: pass(i, k) [x[i] + g + fp[i, k] <= m], R(k, t, j', m - x[i]),
           R(i, j'-1, j, m)                                                 (i < k < j', j < j')

The answer is W(0, L, budget - x[0]).  With the inner minimum over k of keep-release (and
of C) computed once per (i, t, j') the table costs O(L^4 M) time and O(L^3 M) memory: meant
for chains of tens of stages, not hundreds.  Same memory modes as ``dp`` (exact integers,
or ``slots``).
"""
from __future__ import annotations

import math

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import SolverError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, Op, Schedule
from remat_theory.model.solution import (CLASS_NONE, CLASS_WEAK, FEASIBLE, INFEASIBLE, OPTIMAL,
                                   Solution)

from solvers.dp import UnitChain, _check_slots, _peak, _shift, slot_info
from solvers.registry import register

INF = math.inf

#: Largest R table (bytes) built before asking for ``slots``.
MAX_TABLE_BYTES = 4 * 2 ** 30


class WeakTable:
    """Value tables W(s, t, .) and R(i, t, j, .) for m = 0..M (float64, inf = infeasible)."""

    def __init__(self, uc: UnitChain, M: int):
        self.uc, self.M = uc, M
        L, x, tape, cf = uc.L, uc.x, uc.tape, uc.cf
        step = np.zeros(L, dtype=np.int64)
        step[:] = x[:L] + x[1:] + uc.fo
        self.step = step
        n = M + 1
        marr = np.arange(n, dtype=np.int64)
        W: dict = {}
        R: dict = {}

        def masked(row, need):
            if need > 0:
                row[:min(int(need), n)] = INF
            return row

        for t in range(L + 1):
            g = uc.g(t)
            for s in range(t, -1, -1):
                if s >= 1:
                    # keep-release inner minimum: G[j'] = min_k pass(s, k) + R(k, t, j', m - x[s])
                    G = {}
                    for jp in range(s + 2, t + 1):
                        best = np.full(n, INF)
                        for k in range(s + 1, jp):
                            cand = _shift(R[k, t, jp], int(x[s])) + (cf[k] - cf[s])
                            np.minimum(best, masked(cand, x[s] + g + uc.fp[s, k]), out=best)
                        G[jp] = best
                    for j in range(s + 1, t + 1):
                        best = np.full(n, INF)
                        for l in range(s + 1, j + 1):  # release x_s now
                            need = g + int(step[s:l].max())
                            if l == j:
                                cand = _shift(W[l, t], int(x[l])) + (cf[l] - cf[s])
                            else:
                                cand = R[l, t, j] + (cf[l] - cf[s])
                            np.minimum(best, masked(cand, need), out=best)
                        for k in range(j + 1, t + 1):  # keep: checkpoint x_k committed
                            cand = _shift(W[k, t], int(x[s] + x[k])) + (cf[k] - cf[s]) + R[s, k - 1, j]
                            np.minimum(best, masked(cand, x[s] + g + uc.fp[s, k]), out=best)
                        for jp in range(j + 1, t + 1):  # keep, the new checkpoint released too
                            np.minimum(best, G[jp] + R[s, jp - 1, j], out=best)
                        R[s, t, j] = best
                if s == t:
                    if t == L:
                        need, cost = int(x[L] + uc.bo[L]), uc.bwd[L]
                    else:
                        need, cost = uc.fall_needs(s, t), uc.fwd[s] + uc.bwd[s]
                    W[s, t] = np.where(marr >= need, cost, INF)
                    continue
                best = masked(_shift(W[s + 1, t], int(tape[s])) + (uc.fwd[s] + uc.bwd[s]),
                              uc.fall_needs(s, t))
                for k in range(s + 1, t + 1):  # B: persistent checkpoint x_k
                    cand = _shift(W[k, t], int(x[k])) + (cf[k] - cf[s]) + W[s, k - 1]
                    np.minimum(best, masked(cand, g + uc.fp[s, k]), out=best)
                for j in range(s + 2, t + 1):  # C: checkpoint x_k released, back to d_j
                    H = np.full(n, INF)
                    for k in range(s + 1, j):
                        cand = R[k, t, j] + (cf[k] - cf[s])
                        np.minimum(H, masked(cand, g + uc.fp[s, k]), out=H)
                    np.minimum(best, H + W[s, j - 1], out=best)
                W[s, t] = best
        self.W, self.R = W, R

    # ------------------------------------------------------------------ lookups
    def w(self, s, t, m) -> float:
        return INF if m < 0 else float(self.W[s, t][min(m, self.M)])

    def r(self, i, t, j, m) -> float:
        return INF if m < 0 else float(self.R[i, t, j][min(m, self.M)])

    # ------------------------------------------------------------------ rebuild
    def _w_options(self, s, t, m):
        uc, cf, x = self.uc, self.uc.cf, self.uc.x
        g = uc.g(t)
        if s == t:
            yield 0.0, "base", ()
            return
        if m >= uc.fall_needs(s, t):
            yield (self.w(s + 1, t, m - int(uc.tape[s])) + (uc.fwd[s] + uc.bwd[s]), "A",
                   (("W", s + 1, t, m - int(uc.tape[s])),))
        for k in range(s + 1, t + 1):
            if g + uc.fp[s, k] > m:
                break
            yield (self.w(k, t, m - int(x[k])) + (cf[k] - cf[s]) + self.w(s, k - 1, m), ("pass", k),
                   (("W", k, t, m - int(x[k])), ("W", s, k - 1, m)))
            for j in range(k + 1, t + 1):
                yield (self.r(k, t, j, m) + (cf[k] - cf[s]) + self.w(s, j - 1, m), ("pass", k),
                       (("R", k, t, j, m), ("W", s, j - 1, m)))

    def _r_options(self, i, t, j, m):
        uc, cf, x = self.uc, self.uc.cf, self.uc.x
        g = uc.g(t)
        for l in range(i + 1, j + 1):
            if g + int(self.step[i:l].max()) > m:
                break
            nxt = ("W", l, t, m - int(x[l])) if l == j else ("R", l, t, j, m)
            val = self.w(l, t, m - int(x[l])) if l == j else self.r(l, t, j, m)
            yield val + (cf[l] - cf[i]), ("release", l), (nxt,)
        for k in range(i + 1, t + 1):
            if x[i] + g + uc.fp[i, k] > m:
                break
            if k > j:
                yield (self.w(k, t, m - int(x[i] + x[k])) + (cf[k] - cf[i]) + self.r(i, k - 1, j, m),
                       ("pass", k), (("W", k, t, m - int(x[i] + x[k])), ("R", i, k - 1, j, m)))
            for jp in range(max(k + 1, j + 1), t + 1):
                yield (self.r(k, t, jp, m - int(x[i])) + (cf[k] - cf[i]) + self.r(i, jp - 1, j, m),
                       ("pass", k), (("R", k, t, jp, m - int(x[i])), ("R", i, jp - 1, j, m)))

    def schedule(self, m: int) -> Schedule:
        uc = self.uc
        ops: list[Op] = []
        stack: list = [("W", 0, uc.L, m)]
        while stack:
            item = stack.pop()
            if item[0] == "op":
                ops.append(item[1])
                continue
            if item[0] == "W":
                _, s, t, mm = item
                opts = self._w_options(s, t, mm)
                start = s
            else:
                _, s, t, j, mm = item
                opts = self._r_options(s, t, j, mm)
                start = s
            val, action, subs = min(opts, key=lambda o: o[0])
            if val == INF:  # pragma: no cover - the table said this subproblem is feasible
                raise SolverError(f"dp-weak: internal error rebuilding {item}")
            if action == "base":
                if s == uc.L:
                    ops.append(LOSS_OP)
                else:
                    ops += [Fall(s), Bwd(s)]
                continue
            if action == "A":
                ops.append(Fall(s))
                stack.append(("op", Bwd(s)))
            elif action[0] == "pass":
                ops.append(Fck(start))
                ops += [Fn(q) for q in range(start + 1, action[1])]
            else:  # release: Fn_i .. Fn_{l-1}
                ops += [Fn(q) for q in range(start, action[1])]
            for sub in reversed(subs):
                stack.append(sub)
        return Schedule(ops)


def _solve_units(uc: UnitChain, budget_units: int):
    M = budget_units - int(uc.x[0])
    if M < 0:
        return INF, None, None
    M = min(M, max(0, uc.store_all_units() - int(uc.x[0])))
    L = uc.L
    r_bytes = (L + 1) ** 3 // 6 * (M + 1) * 8
    if r_bytes > MAX_TABLE_BYTES:
        raise SolverError(f"solver 'dp-weak': the tables would need {r_bytes / 2**30:.1f} GiB "
                          f"({M + 1} memory units x {L} stages); pass slots=S")
    table = WeakTable(uc, M)
    value = table.w(0, L, M)
    if value == INF:
        return INF, None, table
    return value, table.schedule(M), table


def min_units(uc: UnitChain) -> int:
    """Smallest budget (units) at which a weakly persistent schedule exists: the first
    finite entry of W(0, L, .) over the whole useful memory range (up to store-all)."""
    top = uc.store_all_units()
    table = WeakTable(uc, max(0, top - int(uc.x[0])))
    row = table.W[0, uc.L]
    return int(uc.x[0] + np.argmax(np.isfinite(row)))


def min_feasible_budget(chain: Chain) -> int:
    """Smallest budget (bytes) at which a weakly persistent schedule of ``chain`` exists."""
    uc, g = UnitChain.exact(chain)
    return min_units(uc) * g


@register("dp-weak", optimal_for=CLASS_WEAK, exact=True,
          description="DP over weakly persistent schedules (checkpoints may be released early).")
def solve_dp_weak(chain: Chain, budget: int, *, slots: int | None = None) -> Solution:
    """Optimal weakly persistent schedule (module docstring), exact in memory, or with
    ``slots=S`` (sizes rounded up to multiples of budget/S: valid at the real budget, optimal
    for the rounded sizes only, status ``feasible``)."""
    slots = _check_slots(slots, "dp-weak")
    uc_exact, gcd = UnitChain.exact(chain)
    if slots is None:
        info = {"memory": "exact", "unit": gcd, "budget_units": budget // gcd}
        makespan, schedule, _ = _solve_units(uc_exact, budget // gcd)
        if schedule is None:
            mb = min_units(uc_exact) * gcd
            return Solution("dp-weak", INFEASIBLE, None, None, None, budget, optimal_for=CLASS_WEAK,
                            min_budget=mb, info=info,
                            message=f"no weakly persistent schedule fits in {budget}; the "
                                    f"smallest feasible budget is {mb}")
        return Solution("dp-weak", OPTIMAL, schedule, makespan, _peak(chain, schedule), budget,
                        bound=makespan, optimal_for=CLASS_WEAK, info=info)
    info = {"memory": "slots", **slot_info(chain, budget, slots)}
    uc = UnitChain.rounded(chain, budget, slots)
    makespan, schedule, _ = _solve_units(uc, slots)
    if schedule is None:
        mb = min_units(uc_exact) * gcd
        return Solution("dp-weak", INFEASIBLE, None, None, None, budget, optimal_for=CLASS_WEAK,
                        min_budget=mb, info=info,
                        message=f"no weakly persistent schedule fits in {budget} with sizes "
                                f"rounded up to {slots} slots; the smallest feasible budget "
                                f"(exact memory) is {mb}")
    sizes = chain.x_size + chain.tape_size + chain.fwd_overhead + chain.bwd_overhead
    if budget == 0 or all(v * slots % budget == 0 for v in sizes):
        # every size is a whole number of slots: the slot DP is the exact DP, scaled
        info["rounding_exact"] = True
        return Solution("dp-weak", OPTIMAL, schedule, makespan, _peak(chain, schedule), budget,
                        bound=makespan, optimal_for=CLASS_WEAK, info=info)
    return Solution("dp-weak", FEASIBLE, schedule, makespan, _peak(chain, schedule), budget,
                    optimal_for=CLASS_NONE, info=info,
                    message="slots mode: optimal for the rounded sizes, not proven optimal at "
                            "the real budget")
