"""``dp``'s tables: min-memory, saturation, and the value table W(s, t, m) with two kernels.

Subproblems, recurrence and memory convention: ``solvers/dp.py`` (and
``proofs/persistent_dp.md``).  This module builds the tables:

* :func:`skewed_min_memory` (the least feasible m of every segment) and
  :func:`skewed_saturation` (the peak of its store-all schedule, above which its time is the
  ideal one), all segments of one length in one numpy operation (tables stored "skewed":
  entry [s, n] is segment (s, s + n));
* the value table for every memory value at once, by either kernel (option ``kernel``,
  ``solvers/dp_kernel.py``):

  - :class:`PersistentTable` (numpy): for fixed (s, t) the minimum over k of option B is a
    ``(t-s) x M`` min-plus reduction done in blocks of rows that stay in the processor's
    cache; the forward-pass memory condition g + FP(s, k) <= m, whose threshold is
    non-decreasing in k, by a prefix minimum over k on the few memory values below the
    largest threshold; one row of W + 1 values per segment, up to the largest saturation
    point of the segments from s;
  - :class:`FusedTable` (numba, ``solvers/dp_numba.py``): the same values, one compiled
    loop nest, and a compact store: a segment keeps only its window [mm, sat) (below it
    nothing is feasible, above it the time is the ideal one), and of the window the part
    where the value is within 65534 of the ideal time (with integer times: most of it) as
    a 2-byte excess; the rest ("head") in the table's dtype.

Both are float32 when that is exact (integer times, sums below 2^24: :func:`table_dtype`).
When every unit size shares a factor (common in ``slots`` mode) the chain is divided by it
first (``solvers/dp.py``).  Choices are not stored: the schedule is rebuilt by recomputing
the choice at the memory value actually used by each segment on the optimal path.
Time O(L^3 M), memory O(L^2 M).
"""
from __future__ import annotations

import math
from time import perf_counter

import numpy as np
from numpy.lib.stride_tricks import as_strided

from remat_theory.model.errors import InternalError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, Schedule

from solvers._dp_tables import NEVER, Deadline, DeadlineExpired, UnitChain
from solvers._schedules import unfold

__all__ = ["FusedTable", "PersistentTable", "min_memory_table", "skewed_min_memory",
           "skewed_saturation", "table_dtype"]

INF = math.inf

#: Elements of the scratch block of the option-B reduction (float32: 512 KiB, in the
#: per-core cache; smaller blocks cost more numpy calls than they save in cache misses).
CHUNK_ELEMS = 131072

#: Consecutive segment ends t computed together (see PersistentTable).
T_BLOCK = 8


# ---------------------------------------------------------------------- skewed tables
def _anti_diagonal(S: np.ndarray, n: int, N: int) -> np.ndarray:
    """Read-only (N, n) view of S[s + j, n - j] for s < N, j = 1..n (S square, C order):
    in a skewed table, the right parts (k, t) of the splits of segments of length n."""
    R = S.shape[1]
    it = S.itemsize
    return as_strided(S.reshape(-1)[R + n - 1:], shape=(N, n), strides=(R * it, (R - 1) * it),
                      writeable=False)


def skewed_min_memory(uc: UnitChain, deadline: Deadline = NEVER,
                      kernel: str = "numpy") -> np.ndarray:
    """S[s, n] = mm[s, s + n] (:func:`min_memory_table`), all segments of one length at once;
    with ``kernel="numba"`` by the compiled loop (the same integers; 1.2 CPU s of numpy at
    1000 stages)."""
    L, x, tape, bo = uc.L, uc.x, uc.tape, uc.bo
    gvec = np.concatenate([x[1:], [0]]).astype(np.int64)  # g(t), t = 0..L
    S = np.zeros((L + 1, L + 1), dtype=np.int64)
    bneed, dA = uc.bneed, uc.dA  # B_s's need; option A's child runs at m - dA[s]
    fao = uc.fao  # Fall_s's transient memory (fo is Fck/Fn's: inside fps)
    S[:L, 0] = np.maximum(gvec[:L] + tape + fao, bneed)
    S[L, 0] = x[L] + bo[L]
    fps = uc.fps
    if kernel == "numba":
        from solvers.dp_kernel import jit

        step = jit().min_memory_length
        args = [np.ascontiguousarray(a, dtype=np.int64) for a in (x, tape, fao, bneed, dA, fps)]
        for n in range(1, L + 1):
            deadline.check(f"building the min-memory table (length {n} of {L})")
            step(n, L, *args, S)
        return S
    it = x.itemsize
    for n in range(1, L + 1):
        deadline.check(f"building the min-memory table (length {n} of {L})")
        N = L + 1 - n
        gt = gvec[n:n + N]
        best = np.maximum(np.maximum(gt + tape[:N] + fao[:N], bneed[:N]), dA[:N] + S[1:N + 1, n - 1])
        xk = as_strided(x[1:], shape=(N, n), strides=(it, it), writeable=False)
        cand = np.maximum(fps[:N, 1:n + 1] + gt[:, None], xk + _anti_diagonal(S, n, N))
        np.maximum(cand, S[:N, :n], out=cand)
        np.minimum(best, cand.min(axis=1), out=S[:N, n])
    return S


def _unskew(S: np.ndarray) -> np.ndarray:
    """The (L+1) x (L+1) table T[s, t] = S[s, t - s] (0 below the diagonal)."""
    R = S.shape[0]
    T = np.zeros_like(S)
    flat = T.reshape(-1)
    for n in range(R):
        flat[n::R + 1][:R - n] = S[:R - n, n]
    return T


# ---------------------------------------------------------------------- smallest budget
def min_memory_table(uc: UnitChain, deadline: Deadline = NEVER) -> np.ndarray:
    """mm[s, t] = the least m at which W(s, t, m) is finite (int64; see module docstring).

    Feasibility is monotone in m (a schedule valid at m is valid at m' > m), so the least
    feasible m of a composition is the max of the parts' least values and the peaks of the
    operations in between; the minimum over options is exact.  O(L^3) element operations,
    O(L) numpy calls (all segments of one length together).
    """
    return _unskew(skewed_min_memory(uc, deadline))


# ---------------------------------------------------------------------- the table
def skewed_saturation(uc: UnitChain) -> np.ndarray:
    """sat[s, n]: peak (memory units, segment convention) of the store-all schedule of
    segment (s, s + n): Fall_s .. Fall_t (the loss when t = L), B_t .. B_s.  Above it
    W(s, t, m) is the segment's ideal time, the least any schedule of it can take."""
    L, x = uc.L, uc.x
    P, fall_term, b_term, loss_term = uc.store_all_terms()
    sat = np.zeros((L + 1, L + 1), dtype=np.int64)
    for s in range(L + 1):
        if s < L:
            rf = np.maximum.accumulate(fall_term[s:])
            rb = np.maximum.accumulate(b_term[s:])
            sat[s, :L - s] = np.maximum(x[s + 1:] + rf, rb) - P[s]
            sat[s, L - s] = max(loss_term, int(rf[-1]), int(rb[-1])) - int(P[s])
        else:
            sat[s, 0] = loss_term - int(P[L])
    return sat


def _min_plus_rows(left: np.ndarray, right: np.ndarray, c0: int, c1: int, tmp: np.ndarray):
    """min over rows r of left[r, c0:c1] + right[r, c0:c1], in blocks of rows whose sum fits
    in ``tmp`` (a flat scratch array of at least max(W, CHUNK_ELEMS) elements).

    Whole rows are added when the window is wide (numpy adds contiguous rows about three
    times faster than a window of them), a window of rows otherwise."""
    n, W = left.shape  # right may be wider: only its first W columns are read
    w = c1 - c0
    whole = 3 * w > W
    span = W if whole else w
    rows = max(1, CHUNK_ELEMS // span)
    best = None
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        blk = tmp[:(r1 - r0) * span].reshape(r1 - r0, span)
        if whole:
            np.add(left[r0:r1], right[r0:r1, :W], out=blk)
            part = blk[:, c0:c1].min(axis=0)
        else:
            np.add(left[r0:r1, c0:c1], right[r0:r1, c0:c1], out=blk)
            part = blk.min(axis=0)
        if best is None:
            best = part
        else:
            np.minimum(best, part, out=best)
    return best


class _Rebuild:
    """The schedule rebuilt from a table's ``value(s, t, m)`` (both kernels)."""

    def option_a(self, s: int, t: int, m: int):
        """(value, ``"A"``) of option A for W(s, t, m) where its recording fits, else
        (inf, None): the start of :meth:`choice` in both kernels."""
        uc = self.uc
        if m >= uc.fall_needs(s, t):
            return self.value(s + 1, t, m - int(uc.dA[s])) + (uc.fall[s] + uc.bwd[s]), "A"
        return INF, None

    def choice(self, s: int, t: int, m: int):
        """The option the table took for W(s, t, m): ``None`` (base case), ``"A"``, or k."""
        uc = self.uc
        if s == t:
            return None
        best, arg = self.option_a(s, t, m)
        g = uc.g(t)
        for k in range(s + 1, t + 1):
            if g + self.fps[s, k - s] > m:
                break
            child = self.value(k, t, m - int(uc.x[k]))
            v = (self.value(s, k - 1, m) + (child + uc.cf[k])) - uc.cf[s]
            if v < best:
                best, arg = v, k
        return arg

    def schedule(self, m: int) -> Schedule:
        """Rebuild the optimal schedule of W(0, L, m) (:func:`solvers._schedules.unfold`)."""
        uc = self.uc

        def expand(item):
            _, s, t, mm = item
            c = self.choice(s, t, mm)
            if c is None:
                return ([LOSS_OP] if s == uc.L else [Fall(s), Bwd(s)]), ()
            if c == "A":
                return [Fall(s)], (("seg", s + 1, t, mm - int(uc.dA[s])), Bwd(s))
            k = c
            return ([Fck(s)] + [Fn(j) for j in range(s + 1, k)],
                    (("seg", k, t, mm - int(uc.x[k])), ("seg", s, k - 1, mm)))

        return unfold(("seg", 0, uc.L, m), expand,
                      lambda: self.deadline.check("rebuilding the schedule"))

    def ideal(self, s: int, t: int) -> float:
        """The segment's ideal time (each Fall and each B once) in the table's dtype."""
        return float(self._dtype_round((self._cfx[t + 1] - self._cfa[s])
                                       + (self._cb[t + 1] - self._cb[s])))


class PersistentTable(_Rebuild):
    """The value table W(s, t, m) for m = 0..M (seconds, inf when infeasible; float64, or
    float32 when :func:`table_dtype` says it is exact).

    ``V[s][t - s]`` is the row W(s, t, .).  Built for all m at once; see the module docstring.
    ``deadline`` is checked once per row (:class:`solvers._deadline.DeadlineExpired`).
    """

    def __init__(self, uc: UnitChain, M: int, dtype=np.float64, mm_skewed: np.ndarray | None = None,
                 deadline: Deadline = NEVER):
        if M < 0:
            raise InternalError(f"PersistentTable: M = {M} must be >= 0")
        self.uc, self.M = uc, M
        L = uc.L
        self.fps = fps = uc.fps
        mms = skewed_min_memory(uc, deadline) if mm_skewed is None else mm_skewed
        sat = skewed_saturation(uc)
        W = M + 1
        x = [int(v) for v in uc.x]
        tf = [int(v) for v in uc.tape + uc.fao]
        bneed = [int(v) for v in uc.bneed]
        dA = [int(v) for v in uc.dA]
        gl = [int(v) for v in uc.x[1:]] + [0]
        fps1 = [int(v) for v in fps[:, 1]]
        cap = uc.pass_cap  # longest pass from s crossing no barrier
        cf = [float(v) for v in uc.cf]  # pass prefix times (Fck/Fn)
        # A saturated row holds the segment's ideal time, each Fall and each B once:
        # (cfx[t + 1] - cfa[s]) + (cb[t + 1] - cb[s]).
        self._cfa = cfa = [0.0] + [float(v) for v in np.cumsum(uc.fall)]
        self._cfx = cfx = cfa + [cfa[-1]]  # the loss has no forward
        self._cb = cb = [0.0] + [float(v) for v in np.cumsum(uc.bwd)]
        fb = [float(uc.fall[i] + uc.bwd[i]) for i in range(L)]  # Fall_s and B_s
        # Row store of s: memory values up to ws[s], the largest saturation point of the
        # segments starting at s (capped at W); above it every row of s is its ideal time.
        ws = [int(v) for v in np.minimum(sat.max(axis=1), W)]
        ws = [max(1, v) for v in ws]
        self.ws = ws
        V = [np.empty((L + 1 - s, ws[s]), dtype=dtype) for s in range(L + 1)]
        # CT[k] = W(k, t, m - x[k]) + cf[k]: the plain-form child plus the pass prefix time.
        # Segments are computed for T_BLOCK consecutive t at once, s descending, t ascending
        # inside: the left block W(s, s.., .) of segment (s, t) is then reused from the cache
        # by the next t of the block instead of being read again from memory (the table is
        # far larger than the cache; reading it once per t was the bottleneck).  One CT
        # buffer per t of the block.
        CTB = np.empty((T_BLOCK, L + 1, W), dtype=dtype)
        tmp = np.empty(max(W, CHUNK_ELEMS), dtype=dtype)
        marr = np.arange(W, dtype=np.int64)
        R = L + 1
        it = mms.itemsize

        def anti(T, t):  # T[s, t - s] for s = 0..t, as a list
            return as_strided(T.reshape(-1)[t:], shape=(t + 1,), strides=((R - 1) * it,)).tolist()

        at = None if deadline.limit is None else deadline.start + deadline.limit
        for t0 in range(0, L + 1, T_BLOCK):
            block = range(t0, min(L + 1, t0 + T_BLOCK))
            lists = {t: (anti(mms, t), anti(sat, t), anti(fps, t)) for t in block}
            for s, t in ((s, t) for s in range(block[-1], -1, -1) for t in block if t >= s):
                a_t, sat_t, fp_t = lists[t]
                g = gl[t]
                CT = CTB[t - t0]
                if at is not None and perf_counter() > at:
                    raise DeadlineExpired(f"building the value table (row ({s}, {t}) of {L} "
                                          f"stages)", deadline.limit)
                n = t - s
                row = V[s][n]
                wr = ws[s]
                ideal = (cfx[t + 1] - cfa[s]) + (cb[t + 1] - cb[s])
                if n == 0:
                    need = x[L] + int(uc.bo[L]) if t == L else max(g + tf[s], bneed[s])
                    need = min(need, wr)
                    row[:need] = INF
                    row[need:] = ideal
                else:
                    # Only memory values in [a, b) need work: below mm[s, t] nothing is
                    # feasible, from sat[s, t] on store-all of the segment fits (ideal time).
                    a = min(a_t[s], W)
                    b = max(a, min(sat_t[s], W))
                    row[:b] = INF
                    row[b:] = ideal
                    # option A: Fall_s, W(s+1, t, m - dA[s]), B_s (dA[s] = tape[s] when
                    # x_s and x_{s+1} are saved; it may be negative: an unsaved x_s is freed)
                    d = dA[s]
                    a1 = max(a, g + tf[s], bneed[s])  # >= d: bneed[s] >= th[s] + x[s+1]
                    if a1 < b:
                        e = min(b, ws[s + 1] + d)  # above it W(s+1, t, m - d) is stored no more
                        if a1 < e:
                            np.add(V[s + 1][n - 1][a1 - d:e - d], fb[s], out=row[a1:e])
                        if e < b:
                            if ws[s + 1] < W:  # saturated: the child's ideal time
                                row[max(a1, e):b] = ((cfx[t + 1] - cfa[s + 1]) + (cb[t + 1] - cb[s + 1])) + fb[s]
                            else:  # past M (only when d < 0, never on the optimal path):
                                # the child at M, as value() reads it
                                row[max(a1, e):b] = V[s + 1][n - 1][W - 1] + fb[s]
                    # option B: pass s -> k, W(k, t, m - x[k]), W(s, k-1, m); only the
                    # passes that cross no barrier: k - s <= cap[s] (= n without barriers)
                    lo = max(a, g + fps1[s])
                    if lo < b:
                        nk = min(n, cap[s])
                        left, right = V[s][:nk], CT[s + 1:s + 1 + nk]
                        # thresholds g + fp[s, k], non-decreasing in k
                        hi = min(g + (fp_t[s] if nk == n else int(fps[s, nk])), b)
                        if hi > lo:  # memory values where only a prefix of k is allowed
                            thr = g + fps[s, 1:nk + 1]
                            blk = left[:, lo:hi] + right[:, lo:hi]
                            part = np.minimum.accumulate(blk, axis=0)
                            cnt = np.searchsorted(thr, marr[lo:hi], side="right")
                            best = part[cnt - 1, np.arange(hi - lo)] - cf[s]
                            np.minimum(row[lo:hi], best, out=row[lo:hi])
                        c0 = max(lo, hi)
                        if c0 < b:
                            best = _min_plus_rows(left, right, c0, b, tmp)
                            best -= cf[s]
                            np.minimum(row[c0:b], best, out=row[c0:b])
                if s >= 1:
                    xs = x[s]
                    if xs >= W:
                        CT[s] = INF
                    else:
                        CT[s, :xs] = INF
                        e = min(W, xs + wr)
                        np.add(row[:e - xs], cf[s], out=CT[s, xs:e])
                        if e < W:
                            CT[s, e:] = ideal + cf[s]
        self.V = V
        self.deadline = deadline
        self._dtype_round = np.dtype(dtype).type

    def value(self, s: int, t: int, m: int) -> float:
        if m < 0:
            return INF
        m = min(m, self.M)
        if m >= self.ws[s]:  # saturated: the segment's ideal time
            return self.ideal(s, t)
        return float(self.V[s][t - s][m])


def table_dtype(uc: UnitChain):
    """float32 when it is exact, float64 otherwise.

    When every time is an integer and every sum the DP forms is below 2^24, float32
    represents all of them exactly (a persistent schedule runs at most L(L+1)/2 forwards
    and each backward once; the table also adds one prefix sum of forward times), so the
    table is exactly the float64 one at half the memory traffic.
    """
    times = np.concatenate([uc.fwd, uc.bwd, uc.fall])
    if not np.all(times == np.floor(times)):
        return np.float64
    L = uc.L
    top = ((L + 1) * (L + 2) / 2 * float(uc.fwd.max(initial=0.0)) + float(uc.bwd.sum())
           + float(uc.fall.sum()) + 2 * float(uc.cf[-1]))
    return np.float32 if top < 2 ** 24 else np.float64


#: Consecutive segment ends t the fused kernel computes together (each stored left row is
#: then read once for all of them; the block's right rows CT take T_FUSED * (L + 1) *
#: (M + 1) values).
T_FUSED = 8
#: Consecutive segment starts s computed together (each right row is read once for them).
S_FUSED = 8
#: Splits whose stored left rows the fused kernel expands together (for a group of starts).
K_FUSED = 16


class FusedTable(_Rebuild):
    """The value table of :class:`PersistentTable`, value for value, built by the numba
    kernel (:func:`solvers.dp_numba.persistent_block`) into a compact store.

    Segment (s, t) keeps its window [a, b) = [mm, sat) (capped at M + 1): below a it is
    infeasible, from b on its time is the ideal one.  With integer times the tail [p, b)
    of the window where the value exceeds the ideal time by at most 65534 is kept as that
    excess (uint16, exact: checked cell by cell when stored), the head [a, p) in the
    table's dtype; otherwise all of it is head.  The two pools are allocated at their
    largest possible size and filled in order, so only the part written is ever resident.
    ``deadline`` is checked once per block of :data:`T_FUSED` columns.
    """

    def __init__(self, uc: UnitChain, M: int, dtype=np.float64, mm_skewed: np.ndarray | None = None,
                 deadline: Deadline = NEVER):
        from solvers.dp_kernel import jit

        if M < 0:
            raise InternalError(f"FusedTable: M = {M} must be >= 0")
        kern = jit()
        self.uc, self.M, self.deadline = uc, M, deadline
        L, W, R = uc.L, M + 1, uc.L + 1
        self.fps = fps = uc.fps
        mms = skewed_min_memory(uc, deadline) if mm_skewed is None else mm_skewed
        sat = skewed_saturation(uc)
        valid = np.arange(R)[None, :] <= (L - np.arange(R))[:, None]  # s + n <= L
        a = np.minimum(mms, W)
        cells = int(np.where(valid, np.maximum(a, np.minimum(sat, W)) - a, 0).sum())
        times = np.concatenate([uc.fwd, uc.bwd, uc.fall])
        tails = bool(np.all(times == np.floor(times)))
        self.hpool = np.empty(max(cells, 1), dtype=dtype)
        self.tpool = np.empty(max(cells, 1) if tails else 1, dtype=np.uint16)
        self.pos = np.zeros(2, dtype=np.int64)
        self.A, self.P, self.B = (np.zeros(R * R, dtype=np.int64) for _ in range(3))
        self.HOFF, self.TOFF = np.zeros(R * R, dtype=np.int64), np.zeros(R * R, dtype=np.int64)
        self._cfa = cfa = np.concatenate([[0.0], np.cumsum(uc.fall)])
        self._cfx = cfx = np.concatenate([cfa, cfa[-1:]])  # the loss has no forward
        self._cb = cb = np.concatenate([[0.0], np.cumsum(uc.bwd)])
        self._dtype_round = np.dtype(dtype).type
        gl = np.concatenate([uc.x[1:], [0]]).astype(np.int64)
        tf = (uc.tape + uc.fao).astype(np.int64)
        fb = (uc.fall + uc.bwd[:L]).astype(np.float64)
        cap = np.asarray(uc.pass_cap, dtype=np.int64)
        T = min(T_FUSED, R)
        LD = np.empty((S_FUSED, T, W), dtype=dtype)
        COL = np.empty((T, 2, W), dtype=dtype)  # W(s, t, .) of the last two s (option A)
        CT = np.empty((T, R, W), dtype=dtype)
        ACC = np.empty((S_FUSED, T, W), dtype=dtype)
        DL = np.empty((S_FUSED, K_FUSED, W), dtype=dtype)
        mms64 = np.ascontiguousarray(mms, dtype=np.int64)
        for t0 in range(0, R, T):
            t1 = min(R, t0 + T)
            deadline.check(f"building the value table (columns {t0}..{t1 - 1} of {L} stages)")
            kern.persistent_block(t0, t1, L, W, mms64, sat, fps, uc.x, gl, tf, uc.bneed, uc.dA,
                                  cap, uc.cf, cfa, cfx, cb, fb, self.A, self.P, self.B,
                                  self.HOFF, self.TOFF, self.hpool, self.tpool, self.pos, tails,
                                  LD, COL, CT, ACC, DL)
        self.stored_cells = (int(self.pos[0]), int(self.pos[1]))  # (head, tail)

    def value(self, s: int, t: int, m: int) -> float:
        if m < 0:
            return INF
        m = min(m, self.M)
        seg = s * (self.uc.L + 1) + (t - s)
        a, p, b = int(self.A[seg]), int(self.P[seg]), int(self.B[seg])
        if m < a:
            return INF
        if m >= b:
            return self.ideal(s, t)
        if m < p:
            return float(self.hpool[self.HOFF[seg] + m - a])
        ideal = self._dtype_round(self.ideal(s, t))
        return float(self._dtype_round(ideal + self.tpool[self.TOFF[seg] + m - p]))

    def _values(self, ss: np.ndarray, ts: np.ndarray, ms: np.ndarray) -> np.ndarray:
        """``value(s, t, m)`` of many (s, t, m) at once, in float64 (the same values)."""
        R = self.uc.L + 1
        seg = ss * R + (ts - ss)
        a, p, b = self.A[seg], self.P[seg], self.B[seg]
        mm = np.minimum(ms, self.M)
        dt = self.hpool.dtype
        ideal = ((self._cfx[ts + 1] - self._cfa[ss]) + (self._cb[ts + 1] - self._cb[ss])).astype(dt)
        out = ideal.astype(np.float64)
        head = (mm >= a) & (mm < p)
        out[head] = self.hpool[self.HOFF[seg[head]] + (mm - a)[head]]
        tail = (mm >= p) & (mm < b)
        out[tail] = ideal[tail] + self.tpool[self.TOFF[seg[tail]] + (mm - p)[tail]]
        out[(ms < 0) | (mm < a)] = INF
        return out

    def choice(self, s: int, t: int, m: int):
        """:meth:`_Rebuild.choice`, the splits k as one vector: the first least, as the loop."""
        uc = self.uc
        if s == t:
            return None
        best, arg = self.option_a(s, t, m)
        over = uc.g(t) + self.fps[s, 1:t - s + 1] > m  # the loop stops at the first
        ks = np.arange(s + 1, s + 1 + (int(np.argmax(over)) if over.any() else t - s))
        if len(ks):
            child = self._values(ks, np.full(len(ks), t), m - uc.x[ks].astype(np.int64))
            left = self._values(np.full(len(ks), s), ks - 1, np.full(len(ks), m))
            v = (left + (child + uc.cf[ks])) - uc.cf[s]
            q = int(np.argmin(v))
            if v[q] < best:
                arg = int(ks[q])
        return arg

    def stored_bytes(self) -> int:
        """Bytes of the pools actually written (the resident part of the table)."""
        return int(self.pos[0]) * self.hpool.itemsize + int(self.pos[1]) * 2
