"""The persistent dynamic program (Rotor), exact with respect to the simulator.

Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, "Optimal checkpointing for heterogeneous
chains: how to train deep neural networks with limited memory" (2019/2020), section 4: the
optimal *persistent* schedule of a chain is found by a dynamic program over segments.  This
module re-derives that program from the operation table of docs/model.md (the
simulator), case by case, so that its memory accounting matches every operation's peak
exactly; ``proofs/persistent_dp.md`` states the recurrence, the class it is optimal for
(:func:`remat_theory.model.persistence.is_persistent`) and the proof.

Subproblem W(s, t, m), 0 <= s <= t <= L: the live gradient is d_{t+1} (none when t = L: the
loss has not run), x_s is available *without being owned* (x_0, or x_s inside a held tape
t_s), nothing of stages s+1..t is held; run the backward of stages t..s (the loss when
t = L) and stop with d_s live.  ``m`` (memory units) is the budget minus everything held
that the segment does not own; the segment owns d_{t+1} (size g = x[t+1], or 0 when t = L)
and, at the end, d_s.  A segment whose x_s is a *plain* x_s (s >= 1) that it owns and frees
with B_s has exactly the same peaks shifted by x[s], so its value is W(s, t, m - x[s]): one
table serves both forms.

Recurrence (every peak is a row of the operation table):

* t = s = L (loss, x_L unowned): Loss, peak x[L] + bo[L].
* t = s < L: Fall_s (peak g + tape[s] + fo[s]), B_s (peak tape[s] + x[s+1] + x[s] + bo[s]).
* option A, s < t: Fall_s (peak g + tape[s] + fo[s]); then W(s+1, t, m - tape[s]) with x_{s+1}
  inside t_{s+1}; then B_s (peak tape[s] + x[s+1] + x[s] + bo[s]).
* option B, s < k <= t: Fck_s Fn_{s+1} .. Fn_{k-1} (peaks g + x[s+1] + fo[s] and
  g + x[j] + x[j+1] + fo[j]), leaving a plain x_k; then W(k, t, m - x[k]) (plain x_k owned
  by the child, freed by B_k or by the loss); then W(s, k-1, m).

The answer is W(0, L, budget - x[0]) (x_0 is always held, never freed).

Outputs no backward reads (the chain's ``output_saved``; proofs/persistent_dp.md 2.10):
t_{s+1} holds th[s] = ``tape_held[s]``, an unsaved x_s is a plain value the segment owns
(counted outside m, as in the plain form) and Fall_s frees it, so option A's child runs at
m - dA[s], dA[s] = th[s] + ux[s+1] - ux[s], and B_s needs bneed[s] = th[s] + x[s+1] + x[s]
- ux[s] + bo[s] (ux[i] = x[i] when x_i is unsaved, else 0).  All saved: the formulas above.

Vectorization: the table is computed for every memory value at once (numpy rows over m);
for fixed (s, t) the minimum over k of option B is a ``(t-s) x M`` min-plus reduction done in
blocks of rows that stay in the processor's cache (one add and one minimum per block), and
the forward-pass memory condition g + FP(s, k) <= m, whose threshold is non-decreasing in k,
is handled by a prefix minimum over k on the few memory values below the largest threshold.
Only the memory values between the segment's least feasible memory and the peak of its
store-all schedule (above which its time is the ideal one) are reduced, and the table is
float32 when that is exact (integer times, sums below 2^24).  The min-memory table, the
saturation table and the forward-pass peaks are computed by segment length, all segments of
one length in one numpy operation (tables stored "skewed": entry [s, n] is segment
(s, s + n)).  When every unit size shares a factor (common in ``slots`` mode, where sizes
are rounded to whole slots) the chain is divided by it first: the same answers on a table
that many times smaller.
Choices are not stored: the schedule is rebuilt by recomputing the choice at the memory
value actually used by each segment on the optimal path.  Time O(L^3 M), memory O(L^2 M).

Limits: ``time_limit`` (seconds) bounds the whole run; the clock is read once per table row,
and when it runs out the solver returns status ``time_limit`` with the ideal makespan as
its lower bound.  A table over 8 GiB, or (with a time limit) an estimate over ten times
the limit, is refused before any work, naming a ``slots`` value that fits
(:class:`~remat_theory.model.errors.SolverLimitError`).

Barriers (option ``barriers``): the forward passes across a barrier j (s <= j < k - 1) get
``fp[s, k]`` above any memory value, so option B, the min-memory table and the rebuilt
choice all leave them out; the value table only reduces the passes that remain
(``UnitChain.pass_cap``).  The answer is then optimal among the persistent schedules with
no such pass, and claims nothing about the whole class.

Memory modes: exact integers (every size and the budget divided by the chain's size gcd) or
``slots=S`` (sizes rounded *up* to multiples of budget/S: every schedule found fits in the
real budget; ``info`` reports the slot size, the rounding loss and the budget for which the
result is guaranteed to be at least as good as the exact persistent optimum).
"""
from __future__ import annotations

import math
from time import perf_counter

import numpy as np
from numpy.lib.stride_tricks import as_strided

from remat_theory.model.chain import Chain
from remat_theory.model.errors import EQ, InternalError, Remedy, SolverError, SolverOptionError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, Schedule
from remat_theory.model.solution import (CLASS_NONE, CLASS_PERSISTENT, FEASIBLE, INFEASIBLE,
                                         OPTIMAL, Solution)

from solvers._dp_tables import (NEVER, Deadline, DeadlineExpired, UnitChain, peak,
                                refuse_by_length, refuse_if_too_big, slot_info, all_sizes,
                                time_up)
from solvers._schedules import unfold
from solvers.registry import Option, register

__all__ = ["PersistentTable", "UnitChain", "min_feasible_budget", "min_memory_table",
           "slot_info", "solve_dp", "solve_units", "table_dtype"]

INF = math.inf

#: Min-plus steps per second the up-front estimate assumes (an optimistic figure for this
#: implementation on one core: ``benchmarks/bench_dp.py scale`` measures the real one), so
#: that only runs clearly past the time limit are refused.
ASSUMED_RATE = 4e9

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


def skewed_min_memory(uc: UnitChain, deadline: Deadline = NEVER) -> np.ndarray:
    """S[s, n] = mm[s, s + n] (:func:`min_memory_table`), all segments of one length at once."""
    L, x, tape, fo, bo = uc.L, uc.x, uc.tape, uc.fo, uc.bo
    gvec = np.concatenate([x[1:], [0]]).astype(np.int64)  # g(t), t = 0..L
    S = np.zeros((L + 1, L + 1), dtype=np.int64)
    bneed, dA = uc.bneed, uc.dA  # B_s's need; option A's child runs at m - dA[s]
    fao = uc.fao  # Fall_s's transient memory (fo is Fck/Fn's: inside fps)
    S[:L, 0] = np.maximum(gvec[:L] + tape + fao, bneed)
    S[L, 0] = x[L] + bo[L]
    fps = uc.fps
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


def min_units(uc: UnitChain) -> int:
    """Smallest budget (units) at which a persistent schedule exists."""
    return int(uc.x[0] + skewed_min_memory(uc)[0, uc.L])


def min_feasible_budget(chain: Chain, barriers=()) -> int:
    """The smallest budget (bytes) at which ANY persistent schedule of ``chain`` exists
    (with ``barriers``, :func:`solve_dp`'s option: any without a pass across them).

    Exact: computed on sizes divided by their gcd by the DP's own min-memory recursion
    (:func:`min_memory_table`).  Persistent schedules are a subset of all schedules, so this
    is >= the global smallest feasible budget; the tests compare the two by exhaustive
    search (on small chains they have always been equal so far; see proofs/persistent_dp.md).
    """
    if not isinstance(chain, Chain):
        raise SolverError(f"chain must be a Chain, got {type(chain).__name__}")
    barriers = BARRIERS.check(barriers, "barriers", "dp", chain)
    uc, g = UnitChain.exact(chain, barriers)
    return min_units(uc) * g


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


class PersistentTable:
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
        tape = [int(v) for v in uc.tape]
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
            return float(self._dtype_round((self._cfx[t + 1] - self._cfa[s]) + (self._cb[t + 1] - self._cb[s])))
        return float(self.V[s][t - s][m])

    def choice(self, s: int, t: int, m: int):
        """The option the table took for W(s, t, m): ``None`` (base case), ``"A"``, or k."""
        uc = self.uc
        if s == t:
            return None
        best, arg = INF, None
        if m >= uc.fall_needs(s, t):
            best = self.value(s + 1, t, m - int(uc.dA[s])) + (uc.fall[s] + uc.bwd[s])
            arg = "A"
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


def work_estimate(L: int, M: int, itemsize: int) -> tuple[float, float]:
    """(table bytes, min-plus steps) of the value table for L stages and m = 0..M: the
    table has one row of M + 1 values per segment; the steps are an upper bound (every
    split of every segment at every memory value; the saturation window only lowers it)."""
    cells = (L + 1) * (L + 2) / 2
    tri = L * (L + 1) * (L + 2) / 6
    return cells * (M + 1) * itemsize, tri * (M + 1)


def _fit_slots(L: int, itemsize: int):
    cells = (L + 1) * (L + 2) / 2
    tri = max(1.0, L * (L + 1) * (L + 2) / 6)

    def fit(max_bytes, max_steps):
        return int(min(max_bytes / (cells * itemsize), max_steps / tri))
    return fit


def solve_units(uc: UnitChain, budget_units: int, deadline: Deadline = NEVER,
                time_limit: float | None = None, slots: int | None = None):
    """Optimal persistent makespan and schedule for a budget in units, or (inf, None).

    Returns ``(makespan, schedule, min_units)``: ``min_units`` is the smallest feasible
    budget in the units of ``uc``.  A common factor of every unit size is divided out first
    (:meth:`UnitChain.divided`).  Raises :class:`SolverError` up front when the table is
    too big (:func:`solvers._dp_tables.refuse_if_too_big`), ``DeadlineExpired`` when
    ``deadline`` passes."""
    g = uc.size_gcd()
    x0 = int(uc.x[0])
    ucd = uc.divided(g)
    L = ucd.L
    M = (budget_units - x0) // g if budget_units >= x0 else -1
    # Above store-all's peak the optimum is the ideal makespan: no need for a wider table.
    M = min(M, max(0, ucd.store_all_units() - int(ucd.x[0])))
    dtype = table_dtype(ucd)
    itemsize = np.dtype(dtype).itemsize
    table_bytes, steps = work_estimate(L, max(M, 0), itemsize)
    refuse_if_too_big("dp", table_bytes, steps, ASSUMED_RATE, time_limit, L, M + 1, slots,
                      _fit_slots(L, itemsize))
    mms = skewed_min_memory(ucd, deadline)
    least = g * (int(ucd.x[0]) + int(mms[0, L]))
    if M < int(mms[0, L]):
        return INF, None, least
    table = PersistentTable(ucd, M, dtype, mms, deadline)
    value = table.value(0, L, M)
    if value == INF:  # pragma: no cover - mm says it is feasible
        raise InternalError("solver 'dp': the table disagrees with min-memory")
    return value, table.schedule(M), least


def _time_up(chain: Chain, budget: int, deadline: Deadline, where: str, info: dict) -> Solution:
    return time_up("dp", CLASS_PERSISTENT, chain, budget, deadline, where, info)


#: The ``barriers`` option (:func:`solve_dp`).
BARRIERS = Option("indices", "stages j after which no checkpointed forward pass goes on (no "
                  "recomputed segment holds both j and j+1); optimal only among such "
                  "persistent schedules (status feasible, no class claimed)", minimum=0,
                  maximum="L-2")

#: What an answer with barriers is optimal among (``info["optimal_among"]``).
AMONG_BARRIERS = "persistent schedules with no forward pass across a barrier"


def _with_barriers(sol: Solution, barriers: tuple) -> Solution:
    """``sol`` (solved on a chain whose passes across ``barriers`` were left out) with no
    claim about the persistent class: a proof of optimality (or of infeasibility) holds only
    among the persistent schedules without such a pass, which ``info`` and the message say;
    ``min_budget`` is the smallest budget of those."""
    where = f"after stage{'s' if len(barriers) > 1 else ''} {', '.join(map(str, barriers))}"
    info = {**sol.info, "barriers": list(barriers)}
    if sol.status == OPTIMAL:
        info["optimal_among"] = AMONG_BARRIERS
        return sol.replace(status=FEASIBLE, optimal_for=CLASS_NONE, bound=None, info=info,
                           message=f"optimal among {AMONG_BARRIERS} (barriers {where}); not "
                                   f"proven optimal among all persistent schedules")
    if sol.status == INFEASIBLE:
        slots = " with sizes rounded up to slots" if info.get("memory") == "slots" else ""
        return sol.replace(optimal_for=CLASS_NONE, info=info, message=(
            f"no persistent schedule without a forward pass across the barriers {where} fits "
            f"in {sol.budget}{slots}; the smallest budget at which one does (exact memory) is "
            f"{sol.min_budget}"))
    if sol.status == FEASIBLE and sol.bound is not None:  # slot_bound: over the same schedules
        info["lower_bound_among"] = (sol.bound, AMONG_BARRIERS)
    note = f"barriers {where}: no forward pass crosses them"
    return sol.replace(optimal_for=CLASS_NONE, bound=None if sol.status == FEASIBLE else sol.bound,
                       info=info, message=f"{sol.message}; {note}" if sol.message else note)


@register("dp", optimal_for=CLASS_PERSISTENT, exact=True,
          description="Rotor persistent dynamic program, exact integer memory or slots.",
          variants={"dp-slots": {"slots": 64}},
          supports=("fall_time", "fall_overhead", "output_saved"),
          options={"slots": Option("int", "round sizes up to budget/slots (valid, optimal for "
                                   "the rounded sizes only; status feasible)", minimum=1,
                                   none=True),
                   "slot_bound": Option("bool", "with slots, also solve with sizes rounded "
                                        "down: a lower bound on the exact persistent "
                                        "optimum (status optimal where the two agree)"),
                   "time_limit": Option("seconds", "for the whole run, table building "
                                        "included (status time_limit past it)", none=True),
                   "barriers": BARRIERS})
def solve_dp(chain: Chain, budget: int, *, slots: int | None = None,
             slot_bound: bool = False, time_limit: float | None = None,
             barriers: tuple = ()) -> Solution:
    """Optimal persistent schedule (Beaumont et al., Rotor, section 4), exact in memory.

    Options
    -------
    slots : None for exact integer memory (sizes divided by their gcd), or S >= 1 to count
        memory in S slots of budget/S bytes, sizes rounded up (faster and smaller for large
        budgets; the result is valid at the real budget but optimal only for the rounded
        sizes: status ``feasible``).
    slot_bound : with ``slots``, also run the DP with sizes rounded *down*: a relaxation
        whose optimum is a lower bound on the exact persistent optimum (``bound``); when the
        two agree the status is ``optimal``.
    time_limit : seconds for the whole run (tables and rebuild), or None.  When it runs out
        the status is ``time_limit``, with no schedule and the ideal makespan as bound.
        With a limit, a run estimated at more than ten times it is refused up front
        (:class:`SolverLimitError` with the estimate and a ``slots`` value that fits), as is
        any table over 8 GiB.
    barriers : stage indices j (0 <= j <= L - 2) where no checkpointed forward pass goes on
        from stage j to stage j+1: no pass ``Fck_s Fn_{s+1} .. Fn_{k-1}`` with s <= j < k - 1
        (no ``Fn_{j+1}`` at all), so no recomputed segment holds both stages; ``Fck_{j+1}``
        and ``Fall_{j+1}`` are allowed.  The table leaves those passes out
        (:class:`UnitChain`, ``fp`` above any memory), so the answer is optimal among the
        persistent schedules without them: status ``feasible`` (``optimal_for`` none, no
        bound), ``info["optimal_among"]`` and the message saying so, ``info["barriers"]``;
        ``min_budget`` is the smallest budget of those schedules.  Empty (the default): the
        plain DP.
    """
    deadline = Deadline(time_limit)  # options checked by the registry (the schema above)
    barriers = BARRIERS.check(barriers, "barriers", "dp", chain)  # called directly too
    sol = _solve(chain, budget, slots, slot_bound, deadline, barriers)
    return _with_barriers(sol, barriers) if barriers else sol


def _solve(chain: Chain, budget: int, slots: int | None, slot_bound: bool, deadline: Deadline,
           barriers: tuple) -> Solution:
    """:func:`solve_dp` on the chain whose passes across ``barriers`` are left out, with the
    persistent class's claims (:func:`_with_barriers` withdraws them)."""
    if slot_bound and slots is None:
        raise SolverOptionError("solver 'dp': option slot_bound needs slots",
                                remedies=(Remedy(options=(("slots", EQ, None),)),))
    # a float32 value per segment at least: refused from the length before any O(L) work
    refuse_by_length("dp", chain.length, work_estimate(chain.length, 0, 4)[0])
    uc_exact, gcd = UnitChain.exact(chain, barriers)
    if slots is None:
        info = {"memory": "exact", "unit": gcd, "budget_units": budget // gcd}
        try:
            makespan, schedule, least = solve_units(uc_exact, budget // gcd, deadline,
                                                    deadline.limit)
        except DeadlineExpired as e:
            return _time_up(chain, budget, deadline, e.what, info)
        min_budget = least * gcd
        if schedule is None:
            return Solution.infeasible("dp", budget, optimal_for=CLASS_PERSISTENT,
                            min_budget=min_budget, info=info,
                            message=f"no persistent schedule fits in {budget}; the smallest "
                                    f"feasible budget is {min_budget}")
        return Solution.optimal("dp", budget, schedule, makespan, peak(chain, schedule),
                        bound=makespan, optimal_for=CLASS_PERSISTENT, min_budget=min_budget,
                        info=info)
    info = {"memory": "slots", **slot_info(chain, budget, slots)}
    uc = UnitChain.rounded(chain, budget, slots, barriers=barriers)
    try:
        makespan, schedule, _ = solve_units(uc, slots, deadline, deadline.limit, slots)
        if schedule is None:
            min_budget = min_units(uc_exact) * gcd
            msg = (f"no persistent schedule fits in {budget} with sizes rounded up to "
                   f"{slots} slots; the smallest feasible budget (exact memory) is {min_budget}")
            # Rounding up loses schedules: the class is proven empty only below the exact
            # smallest budget; at or above it the answer claims nothing about the class.
            claim = CLASS_PERSISTENT if budget < min_budget else CLASS_NONE
            return Solution.infeasible("dp", budget,
                            optimal_for=claim, min_budget=min_budget, info=info,
                            message=msg)
        bound = None
        status = FEASIBLE
        sizes = all_sizes(chain)
        if budget == 0 or all(v * slots % budget == 0 for v in sizes):
            # every size is a whole number of slots: the slot DP is the exact DP, scaled
            status, bound = OPTIMAL, makespan
            info["rounding_exact"] = True
        elif slot_bound:
            lb, _, _ = solve_units(UnitChain.rounded(chain, budget, slots, down=True,
                                                   barriers=barriers), slots,
                                   deadline, deadline.limit, slots)
            bound = lb
            info["lower_bound_from"] = "sizes rounded down"
            if lb == makespan:
                status = OPTIMAL
    except DeadlineExpired as e:
        return _time_up(chain, budget, deadline, e.what, info)
    return Solution("dp", status, schedule, makespan, peak(chain, schedule), budget, bound=bound,
                    optimal_for=CLASS_PERSISTENT if status == OPTIMAL else CLASS_NONE,
                    info=info,
                    message="" if status == OPTIMAL else
                    "slots mode: optimal for the rounded sizes, not proven optimal at the real budget")
