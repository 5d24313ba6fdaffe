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

With unsaved outputs (the chain's ``output_saved``; proofs/weak_persistence.md 3.7) W and R
shift as in ``dp`` (option A's child at m - dA[s], B_s's need bneed[s]), and, for a saved
x_s whose output x_{s+1} is unsaved, W gains

  A-release: Fall_s [g + tape[s] + fao[s] <= m], R(s+1, t, j, m - th[s]), K(s, j-1, m)
                                                                            (s+1 < j <= t)
K(s, t, m): t_{s+1} held, x_s available, d_{t+1} live; B_s if t = s [bneed[s] <= m], else
  pass(s, k) [th[s] + g + fp[s, k] <= m], then W(k, t, m - th[s] - x[k]), K(s, k-1, m), or
  R(k, t, j', m - th[s]), K(s, j'-1, m)                                    (s < k < j' <= t)

(the released x_{s+1} is made again from x_s by Fck_s while t_{s+1} is held).

The answer is W(0, L, budget - x[0]).  With the inner minimum over k of keep-release (and
of C) computed once per (i, t, j') the table costs O(L^4 M) time and O(L^3 M) memory: meant
for chains of tens of stages, not hundreds (proofs/weak_persistence.md 3.5 counts the
work: about L^4/6 candidate rows of M + 1 values, out of reach of numpy for 300 stages at
500 slots in a minute).  Each option is evaluated for all the rows it feeds at once
(:class:`WeakTable`): O(L^3) numpy calls.  Same memory modes as ``dp`` (exact integers, or ``slots``, with a
common factor of the unit sizes divided out), the same ``time_limit`` and up-front size
check (``solvers/_dp_tables.py``).  ``Fall_s`` costs the chain's ``fall_time[s]`` and
peaks with ``fall_overhead[s]`` (base case and option A), passes the forward costs.
"""
from __future__ import annotations

import math

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InternalError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, Schedule
from remat_theory.model.solution import CLASS_WEAK, Solution

from solvers._dp_tables import NEVER, Deadline, UnitChain, refuse_if_too_big
from solvers.dp_front import DPParts, solve_front
from solvers._schedules import unfold
from solvers.dp_kernel import KERNEL, jit, resolve_kernel
from solvers.registry import Option, register

INF = math.inf

#: Row operations (one memory value each) per second the up-front estimate assumes: an
#: optimistic figure for this implementation, so that only runs clearly past the time
#: limit are refused.
ASSUMED_RATE = 2e9
#: The numpy kernel's measured rate in the same operations (about 4e8 per second at 40 and
#: 80 stages): what option kernel = auto weighs against compiling.
NUMPY_RATE = 4e8

#: Table columns t the compiled kernel fills per call (the clock is read between calls).
WEAK_COLUMNS_PER_CALL = 4
#: Largest mask array the compiled kernel builds to run blocks of short rows as one loop.
PEN_MAX_BYTES = 64 * 2 ** 20


class WeakTable:
    """Value tables W(s, t, .) and R(i, t, j, .) for m = 0..M (float64, inf = infeasible).

    ``Wa[s][t - s]`` is the row W(s, t, .); ``Ra[i, t][j - i - 1]`` the row R(i, t, j, .).
    Each option is evaluated for all the rows it feeds at once: for a segment (s, t), one
    2-D numpy operation per split k (or release point l, or return point j'), covering every
    return point j of the R rows of (s, t): O(L^3) numpy calls for O(L^4 M) work (the
    first implementation made one call per candidate row, O(L^4) calls; it is kept as the
    tests' reference, tests/_dp_weak_reference.py).
    """

    def __init__(self, uc: UnitChain, M: int, deadline: Deadline = NEVER, kernel: str = "auto"):
        self.uc, self.M = uc, M
        self.deadline = deadline
        L, x, tape, cf = uc.L, uc.x, uc.tape, uc.cf
        step = np.zeros(L, dtype=np.int64)
        step[:] = x[:L] + x[1:] + uc.fo
        self.step = step
        fp = uc.fp
        n = M + 1
        self.Ka = {s: None for s in range(L) if not uc.un[s] and uc.un[s + 1]}
        if resolve_kernel(kernel, "dp-weak", work_estimate(L, M)[1] / NUMPY_RATE) == "numba":
            self._fill_numba(n)
            return
        marr = np.arange(n, dtype=np.int64)
        Wa = [np.empty((L + 1 - s, n)) for s in range(L + 1)]
        Ra: dict = {}
        # K(s, t', .) (t' = s..L-1, row t' - s) for the stages s whose saved input x_s
        # stays while the unsaved output x_{s+1} is released (option A-release).
        Ka = {s: np.full((L - s, n), INF) for s in self.Ka}
        self.Ka = Ka
        for t in range(L + 1):
            g = uc.g(t)
            for s in range(t, -1, -1):
                deadline.check(f"building the tables (segment ({s}, {t}) of {L} stages)")
                nn = t - s
                if s >= 1 and nn >= 1:
                    Ra[s, t] = self._r_rows(s, t, g, Ra, Wa, n)
                if s in Ka and t < L:
                    Ka[s][nn] = self._k_row(s, t, g, Ra, Wa, Ka[s], n)
                if nn == 0:
                    if t == L:
                        need, cost = int(x[L] + uc.bo[L]), uc.bwd[L]
                    else:
                        need, cost = uc.fall_needs(s, t), uc.fall[s] + uc.bwd[s]
                    Wa[s][0] = np.where(marr >= need, cost, INF)
                    continue
                row = np.full(n, INF)
                d = int(uc.dA[s])  # A: Fall_s, W(s+1, t, m - dA[s]), B_s
                lo = max(uc.fall_needs(s, t), d)
                if lo < n and d >= 0:
                    row[lo:] = Wa[s + 1][nn - 1][lo - d:n - d] + (uc.fall[s] + uc.bwd[s])
                elif lo < n:  # an unsaved x_s freed by Fall_s: the child past M is read at M
                    row[lo:] = (Wa[s + 1][nn - 1][np.minimum(marr[lo:] - d, n - 1)]
                                + (uc.fall[s] + uc.bwd[s]))
                if s in Ka and nn >= 2:  # A-release: Fall_s, R(s+1, t, j, m - th[s]), K(s, j-1, m)
                    h = int(uc.th[s])
                    lo = max(g + int(tape[s] + uc.fao[s]), h)
                    if lo < n:
                        cand = (Ra[s + 1, t][:, lo - h:n - h] + Ka[s][1:nn, lo:]).min(axis=0)
                        np.minimum(row[lo:], cand + uc.fall[s], out=row[lo:])
                for k in range(s + 1, t + 1):  # B: persistent checkpoint x_k
                    xk = int(x[k])
                    lo = max(g + int(fp[s, k]), xk)
                    if lo < n:
                        r = row[lo:]
                        np.minimum(r, Wa[k][t - k][lo - xk:n - xk] + (cf[k] - cf[s]) + Wa[s][k - 1 - s][lo:],
                                   out=r)
                if nn >= 2:  # C: checkpoint x_k released, back to d_j (H row: j - s - 2)
                    H = np.full((nn - 1, n), INF)
                    for k in range(s + 1, t):
                        lo = min(g + int(fp[s, k]), n)
                        tgt = H[k - s - 1:, lo:]
                        np.minimum(tgt, Ra[k, t][:, lo:] + (cf[k] - cf[s]), out=tgt)
                    np.minimum(row, (H + Wa[s][1:nn]).min(axis=0), out=row)
                Wa[s][nn] = row
        self.Wa, self.Ra = Wa, Ra

    def _fill_numba(self, n: int) -> None:
        """The same tables by the compiled kernel (``solvers/dp_numba.py``, :func:`weak_fill`):
        W dense, R and K rows in one array each; ``Wa``, ``Ra`` and ``Ka`` are views of them."""
        uc = self.uc
        L = uc.L
        RO = np.full((L + 1, L + 1), -1, dtype=np.int64)
        rows = 0
        for i in range(1, L + 1):
            for t in range(i + 1, L + 1):
                RO[i, t] = rows
                rows += t - i
        KO = np.full(L + 1, -1, dtype=np.int64)
        krows = 0
        for s in sorted(self.Ka):
            KO[s] = krows
            krows += L - s
        times = np.concatenate([uc.fwd, uc.bwd, uc.fall])
        # float32 holds every integer below 2^24 exactly; with integer times every value the
        # table keeps is then exact when the largest finite one is below 2^24 (all operands
        # are non-negative, so a sum that passed 2^24 on the way stays above it); otherwise
        # the table is built again in float64
        for dtype in ((np.float32, np.float64) if np.all(times == np.floor(times))
                      else (np.float64,)):
            Wd, Rarr, Karr = self._fill_arrays(n, RO, rows, KO, krows, dtype)
            if dtype == np.float64 or all(_largest_finite(a) < 2 ** 24 for a in (Wd, Rarr, Karr)):
                break
        self.Wa = [Wd[s, :L + 1 - s] for s in range(L + 1)]
        self.Ra = {(i, t): Rarr[RO[i, t]:RO[i, t] + t - i] for i in range(1, L + 1)
                   for t in range(i + 1, L + 1)}
        self.Ka = {s: Karr[KO[s]:KO[s] + L - s] for s in self.Ka}

    def _fill_arrays(self, n, RO, rows, KO, krows, dtype):
        uc = self.uc
        L = uc.L
        Wd = np.empty((L + 1, L + 1, n), dtype=dtype)
        Rarr = np.empty((max(rows, 1), n), dtype=dtype)
        Karr = np.full((max(krows, 1), n), INF, dtype=dtype)
        G, H, HK = (np.empty((max(L, 1), n), dtype=dtype) for _ in range(3))
        tmp = np.empty(n, dtype=dtype)
        gl = np.concatenate([uc.x[1:], [0]]).astype(np.int64)
        # PEN[lo, f] = 0 where f % n >= lo, inf below: lets the kernel treat a block of rows
        # as one loop (dp_numba._blk); only where it is small
        if (n + 1) * L * n * 8 <= PEN_MAX_BYTES:
            PEN = np.where(np.arange(L * n)[None, :] % n >= np.arange(n + 1)[:, None], 0.0,
                           INF).astype(dtype)
        else:
            PEN = np.zeros((0, 0), dtype=dtype)
        kern = jit()
        cols = max(1, WEAK_COLUMNS_PER_CALL)
        for t0 in range(0, L + 1, cols):
            self.deadline.check(f"building the tables (column {t0} of {L} stages)")
            kern.weak_fill(t0, min(L + 1, t0 + cols), L, n, uc.x, uc.cf, uc.fp, self.step,
                           uc.th, uc.tape, uc.fao, uc.bneed, uc.dA, uc.fall, uc.bwd,
                           int(uc.x[L] + uc.bo[L]), gl, KO, Wd, Rarr, RO, Karr, G, H, HK, tmp,
                           PEN)
        return Wd, Rarr, Karr

    def _r_rows(self, s: int, t: int, g: int, Ra: dict, Wa: list, n: int) -> np.ndarray:
        """R(s, t, j, .) for j = s+1..t (row j - s - 1); module docstring for the options."""
        uc, x, cf, fp, step = self.uc, self.uc.x, self.uc.cf, self.uc.fp, self.step
        nn = t - s
        xs = int(x[s])
        # keep-release inner minimum: G[j'] = min_k pass(s, k) + R(k, t, j', m - x[s])
        G = np.full((max(0, nn - 1), n), INF)  # row j' - s - 2
        for k in range(s + 1, t):
            lo = max(xs + g + int(fp[s, k]), xs)
            if lo < n:
                tgt = G[k - s - 1:, lo:]
                np.minimum(tgt, Ra[k, t][:, lo - xs:n - xs] + (cf[k] - cf[s]), out=tgt)
        best = np.full((nn, n), INF)
        for l in range(s + 1, t + 1):  # release x_s now: Fn_s .. Fn_{l-1}
            need = g + int(step[s:l].max())
            c = cf[l] - cf[s]
            xl = int(x[l])
            lo = max(need, xl)
            if lo < n:  # l == j: the segment (j, t) with a plain x_j
                r = best[l - s - 1, lo:]
                np.minimum(r, Wa[l][t - l][lo - xl:n - xl] + c, out=r)
            lo = min(need, n)
            if l < t and lo < n:  # l < j: x_l released in turn
                tgt = best[l - s:, lo:]
                np.minimum(tgt, Ra[l, t][:, lo:] + c, out=tgt)
        for k in range(s + 2, t + 1):  # keep: checkpoint x_k committed (j < k)
            d = xs + int(x[k])
            lo = max(xs + g + int(fp[s, k]), d)
            if lo < n:
                tgt = best[:k - s - 1, lo:]
                np.minimum(tgt, (Wa[k][t - k][lo - d:n - d] + (cf[k] - cf[s])) + Ra[s, k - 1][:, lo:],
                           out=tgt)
        for jp in range(s + 2, t + 1):  # keep, the new checkpoint released too (j < j')
            tgt = best[:jp - s - 1]
            np.minimum(tgt, G[jp - s - 2] + Ra[s, jp - 1], out=tgt)
        return best

    def _k_row(self, s: int, t: int, g: int, Ra: dict, Wa: list, Ks: np.ndarray,
               n: int) -> np.ndarray:
        """K(s, t, .): t_{s+1} held (Fall_s has run, its unsaved output x_{s+1} released),
        the saved x_s available, d_{t+1} live, nothing held in s+1..t; run the backward of
        stages t..s (B_s last).  m counts t_{s+1} and d_{t+1} (proofs/weak_persistence.md)."""
        uc, x, cf, fp = self.uc, self.uc.x, self.uc.cf, self.uc.fp
        h = int(uc.th[s])
        row = np.full(n, INF)
        if t == s:  # B_s
            need = int(uc.bneed[s])
            row[min(need, n):] = uc.bwd[s]
            return row
        nn = t - s
        H = np.full((max(0, nn - 1), n), INF)  # row j' - s - 2: min over k of pass + R
        for k in range(s + 1, t + 1):
            lo = h + g + int(fp[s, k])
            c = cf[k] - cf[s]
            d = h + int(x[k])  # pass(s, k), W(k, t, m - th[s] - x[k]), K(s, k-1, m)
            lw = max(lo, d)
            if lw < n:
                r = row[lw:]
                np.minimum(r, Wa[k][t - k][lw - d:n - d] + c + Ks[k - 1 - s][lw:], out=r)
            if k < t:  # pass(s, k), R(k, t, j', m - th[s]), then K(s, j'-1, m)
                lr = max(lo, h)
                if lr < n:
                    tgt = H[k - s - 1:, lr:]
                    np.minimum(tgt, Ra[k, t][:, lr - h:n - h] + c, out=tgt)
        if nn >= 2:
            np.minimum(row, (H + Ks[1:nn]).min(axis=0), out=row)
        return row

    # ------------------------------------------------------------------ lookups
    def w(self, s, t, m) -> float:
        return INF if m < 0 else float(self.Wa[s][t - s][min(m, self.M)])

    def r(self, i, t, j, m) -> float:
        return INF if m < 0 else float(self.Ra[i, t][j - i - 1][min(m, self.M)])

    def k(self, s, t, m) -> float:
        return INF if m < 0 else float(self.Ka[s][t - s][min(m, self.M)])

    # ------------------------------------------------------------------ rebuild
    # The option a subproblem's value came from: its candidates in a fixed order (the order
    # the tests' plain enumeration, tests/test_dp_kernel.py, lists them in), the first one
    # of least value; the candidates that differ only by a return point j form a vector, so
    # a subproblem costs O(L) numpy calls rather than O(L^2) Python steps.  Every value is
    # formed in float64 by the same operations as the enumeration's: (a + c) + b.
    def _col(self, rows, m) -> np.ndarray:
        """Column m (clamped at M) of a block of table rows, in float64; inf when m < 0."""
        if m < 0:
            return np.full(len(rows), INF)
        return rows[:, min(m, self.M)].astype(np.float64)

    def _r_over_t(self, i, j, m, t0, t1) -> np.ndarray:
        """r(i, t', j, m) for t0 <= t' < t1, in float64."""
        if m < 0 or t1 <= t0:
            return np.full(max(t1 - t0, 0), INF)
        mm = min(m, self.M)
        return np.array([self.Ra[i, tt][j - i - 1][mm] for tt in range(t0, t1)], dtype=np.float64)

    @staticmethod
    def _pick(best, vals, make):
        """``best`` (value, action, subs) or the first least of ``vals`` when it is smaller."""
        if len(vals):
            q = int(np.argmin(vals))
            if vals[q] < best[0]:
                return (float(vals[q]),) + make(q)
        return best

    def _best_w(self, s, t, m):
        uc, cf, x = self.uc, self.uc.cf, self.uc.x
        if s == t:
            return 0.0, "base", ()
        g = uc.g(t)
        best = (INF, None, ())
        if m >= uc.fall_needs(s, t):
            sub = ("W", s + 1, t, m - int(uc.dA[s]))
            best = self._pick(best, [self.w(*sub[1:]) + (uc.fall[s] + uc.bwd[s])],
                              lambda q: ("A", (sub,)))
        if s in self.Ka and m >= g + uc.tape[s] + uc.fao[s] and t - s >= 2:
            h = int(uc.th[s])  # j = s + 2 .. t
            vals = (self._col(self.Ra[s + 1, t], m - h) + self._col(self.Ka[s][1:t - s], m)
                    + uc.fall[s])
            best = self._pick(best, vals, lambda q: ("Arel", (("R", s + 1, t, s + 2 + q, m - h),
                                                              ("K", s, s + 1 + q, m))))
        for k in range(s + 1, t + 1):
            if g + uc.fp[s, k] > m:
                break
            c = cf[k] - cf[s]
            sub = ("W", k, t, m - int(x[k]))
            best = self._pick(best, [self.w(*sub[1:]) + c + self.w(s, k - 1, m)],
                              lambda q: (("pass", k), (sub, ("W", s, k - 1, m))))
            if k < t:  # j = k + 1 .. t
                vals = self._col(self.Ra[k, t], m) + c + self._col(self.Wa[s][k - s:t - s], m)
                best = self._pick(best, vals, lambda q: (("pass", k), (("R", k, t, k + 1 + q, m),
                                                                       ("W", s, k + q, m))))
        return best

    def _best_r(self, i, t, j, m):
        uc, cf, x = self.uc, self.uc.cf, self.uc.x
        g = uc.g(t)
        best = (INF, None, ())
        for l in range(i + 1, j + 1):
            if g + int(self.step[i:l].max()) > m:
                break
            nxt = ("W", l, t, m - int(x[l])) if l == j else ("R", l, t, j, m)
            val = self.w(l, t, m - int(x[l])) if l == j else self.r(l, t, j, m)
            best = self._pick(best, [val + (cf[l] - cf[i])], lambda q: (("release", l), (nxt,)))
        rij = self._r_over_t(i, j, m, j, t)  # r(i, t', j, m), t' = j .. t - 1
        xi = int(x[i])
        for k in range(i + 1, t + 1):
            if xi + g + uc.fp[i, k] > m:
                break
            c = cf[k] - cf[i]
            if k > j:
                sub = ("W", k, t, m - xi - int(x[k]))
                best = self._pick(best, [self.w(*sub[1:]) + c + self.r(i, k - 1, j, m)],
                                  lambda q: (("pass", k), (sub, ("R", i, k - 1, j, m))))
            j0 = max(k + 1, j + 1)  # j' = j0 .. t
            if j0 <= t:
                vals = (self._col(self.Ra[k, t][j0 - k - 1:], m - xi) + c
                        + rij[j0 - 1 - j:])
                best = self._pick(best, vals, lambda q: (("pass", k), (
                    ("R", k, t, j0 + q, m - xi), ("R", i, j0 + q - 1, j, m))))
        return best

    def _best_k(self, s, t, m):
        uc, cf, x = self.uc, self.uc.cf, self.uc.x
        if s == t:
            return (uc.bwd[s], "B", ()) if m >= uc.bneed[s] else (INF, None, ())
        g, h = uc.g(t), int(uc.th[s])
        best = (INF, None, ())
        for k in range(s + 1, t + 1):
            if h + g + uc.fp[s, k] > m:
                break
            c = cf[k] - cf[s]
            sub = ("W", k, t, m - h - int(x[k]))
            best = self._pick(best, [self.w(*sub[1:]) + c + self.k(s, k - 1, m)],
                              lambda q: (("pass", k), (sub, ("K", s, k - 1, m))))
            if k < t:  # j' = k + 1 .. t
                vals = (self._col(self.Ra[k, t], m - h) + c
                        + self._col(self.Ka[s][k - s:t - s], m))
                best = self._pick(best, vals, lambda q: (("pass", k), (
                    ("R", k, t, k + 1 + q, m - h), ("K", s, k + q, m))))
        return best

    def schedule(self, m: int) -> Schedule:
        """Rebuild the optimal schedule of W(0, L, m) (:func:`solvers._schedules.unfold`)."""
        uc = self.uc

        def expand(item):
            s = item[1]
            if item[0] == "W":
                val, action, subs = self._best_w(*item[1:])
            elif item[0] == "K":
                val, action, subs = self._best_k(*item[1:])
            else:
                val, action, subs = self._best_r(*item[1:])
            if val == INF:  # pragma: no cover - the table said this subproblem is feasible
                raise InternalError(f"dp-weak: the table disagrees with itself rebuilding {item}")
            if action == "base":
                return ([LOSS_OP] if s == uc.L else [Fall(s), Bwd(s)]), ()
            if action == "B":  # K(s, s): the backward that closes Fall_s
                return [Bwd(s)], ()
            if action in ("A", "Arel"):
                return [Fall(s)], tuple(subs) + ((Bwd(s),) if action == "A" else ())
            if action[0] == "pass":
                return [Fck(s)] + [Fn(q) for q in range(s + 1, action[1])], tuple(subs)
            return [Fn(q) for q in range(s, action[1])], tuple(subs)  # release: Fn_s .. Fn_{l-1}

        return unfold(("W", 0, uc.L, m), expand,
                      lambda: self.deadline.check("rebuilding the schedule"))


def _largest_finite(a: np.ndarray) -> float:
    """The largest finite value of ``a`` (0 when there is none), a block at a time."""
    top = 0.0
    flat = a.reshape(-1)
    for i in range(0, len(flat), 1 << 22):
        blk = flat[i:i + (1 << 22)]
        fin = blk[np.isfinite(blk)]
        if len(fin):
            top = max(top, float(fin.max()))
    return top


def work_estimate(L: int, M: int) -> tuple[float, float]:
    """(bytes of the R and W tables, row operations) for L stages and m = 0..M: about
    L^3/6 rows R(i, t, j, .) and L^2/2 rows W(s, t, .) of M + 1 float64 values; about
    L^4/6 candidate rows (each R row takes O(L) candidates, and the inner minimum of
    keep-release and option C O(L^2) per segment)."""
    rows = (L + 1) ** 3 / 6 + (L + 1) * (L + 2) / 2
    return rows * (M + 1) * 8, max(1.0, (L + 1) ** 4 / 6) * (M + 1)


def _fit_slots(L: int):
    rows = (L + 1) ** 3 / 6 + (L + 1) * (L + 2) / 2
    quad = max(1.0, (L + 1) ** 4 / 6)

    def fit(max_bytes, max_steps):
        return int(min(max_bytes / (rows * 8), max_steps / quad))
    return fit


def prepare_table(uc: UnitChain, budget_units: int, time_limit, slots):
    """(divided chain, g, M) after the up-front size check; M < 0 when the budget is below
    x_0.  A common factor of the unit sizes is divided out (as in ``dp``)."""
    g = uc.size_gcd()
    ucd = uc.divided(g)
    x0 = int(uc.x[0])
    M = (budget_units - x0) // g if budget_units >= x0 else -1
    M = min(M, max(0, ucd.store_all_units() - int(ucd.x[0])))
    table_bytes, steps = work_estimate(ucd.L, max(M, 0))
    refuse_if_too_big("dp-weak", table_bytes, steps, ASSUMED_RATE, time_limit, ucd.L, M + 1,
                      slots, _fit_slots(ucd.L))
    return ucd, g, M


def _solve_units(uc: UnitChain, budget_units: int, deadline: Deadline = NEVER, slots=None,
                 kernel: str = "auto"):
    ucd, g, M = prepare_table(uc, budget_units, deadline.limit, slots)
    if M < 0:
        return INF, None, None
    table = WeakTable(ucd, M, deadline, kernel)
    value = table.w(0, ucd.L, M)
    if value == INF:
        return INF, None, table
    return value, table.schedule(M), table


def min_units(uc: UnitChain, deadline: Deadline = NEVER, kernel: str = "auto") -> int:
    """Smallest budget (units) at which a weakly persistent schedule exists: the first
    finite entry of W(0, L, .) over the whole useful memory range (up to store-all)."""
    top = uc.store_all_units()
    ucd, g, M = prepare_table(uc, top, deadline.limit, None)
    table = WeakTable(ucd, max(0, M), deadline, kernel)
    row = table.Wa[0][ucd.L]
    return int(uc.x[0] + g * np.argmax(np.isfinite(row)))


def min_feasible_budget(chain: Chain) -> int:
    """Smallest budget (bytes) at which a weakly persistent schedule of ``chain`` exists."""
    uc, g = UnitChain.exact(chain)
    return min_units(uc) * g


@register("dp-weak", optimal_for=CLASS_WEAK, exact=True,
          description="DP over weakly persistent schedules (checkpoints may be released early).",
          variants={"dp-weak-slots": {"slots": 64}},
          supports=("fall_time", "fall_overhead", "output_saved"),
          options={"slots": Option("int", "round sizes up to budget/slots (valid, optimal for "
                                   "the rounded sizes only; status feasible)", minimum=1,
                                   none=True),
                   "time_limit": Option("seconds", "for the whole run, table building "
                                        "included (status time_limit past it)", none=True),
                   "kernel": KERNEL})
def solve_dp_weak(chain: Chain, budget: int, *, slots: int | None = None,
                  time_limit: float | None = None, kernel: str = "auto") -> Solution:
    """Optimal weakly persistent schedule (module docstring), exact in memory, or with
    ``slots=S`` (sizes rounded up to multiples of budget/S: valid at the real budget, optimal
    for the rounded sizes only, status ``feasible``).  ``time_limit`` (seconds) bounds the
    whole run as for ``dp``: status ``time_limit``, no schedule, the ideal makespan as bound;
    tables over 8 GiB, or runs estimated at more than ten times the limit, are refused up
    front naming a ``slots`` value that fits (:class:`SolverLimitError`)."""
    deadline = Deadline(time_limit)  # options checked by the registry (the schema above)
    resolve_kernel(kernel, "dp-weak")  # kernel = 'numba' without numba: refused before any work

    def units(uc, budget_units, deadline, slots):
        return _solve_units(uc, budget_units, deadline, slots, kernel)[:2] + (None,)

    parts = DPParts("dp-weak", CLASS_WEAK, "weakly persistent",
                    lambda stages: work_estimate(stages, 0)[0],  # a value per row at least
                    units, lambda uc, deadline: min_units(uc, deadline, kernel))
    return solve_front(parts, chain, budget, slots, deadline)
