"""The persistent dynamic program (Rotor), exact with respect to the simulator.

Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, "Optimal checkpointing for heterogeneous
chains: how to train deep neural networks with limited memory" (2019/2020), section 4: the
optimal *persistent* schedule of a chain is found by a dynamic program over segments.  This
module re-derives that program from the operation table of DESIGN section 1 (the
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

Vectorization: the table is computed for every memory value at once (numpy rows over m);
for fixed (s, t) the minimum over k of option B is one ``(t-s) x M`` array operation, and
the forward-pass memory condition g + FP(s, k) <= m, whose threshold is non-decreasing in k,
is handled by a prefix minimum over k on the few memory values below the largest threshold.
Only the memory values between the segment's least feasible memory and the peak of its
store-all schedule (above which its time is the ideal one) are reduced, and the table is
float32 when that is exact (integer times, sums below 2^24).
Choices are not stored: the schedule is rebuilt by recomputing the choice at the memory
value actually used by each segment on the optimal path.  Time O(L^3 M), memory O(L^2 M).

Memory modes: exact integers (every size and the budget divided by the chain's size gcd) or
``slots=S`` (sizes rounded *up* to multiples of budget/S: every schedule found fits in the
real budget; ``info`` reports the slot size, the rounding loss and the budget for which the
result is guaranteed to be at least as good as the exact persistent optimum).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import SolverError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, Op, Schedule
from remat_theory.model.solution import (CLASS_NONE, CLASS_PERSISTENT, FEASIBLE, INFEASIBLE, OPTIMAL,
                                   Solution)

from solvers.registry import register

INF = math.inf

#: Largest value table (bytes) the exact mode builds before asking for ``slots``.
MAX_TABLE_BYTES = 6 * 2 ** 30


class UnitChain:
    """A chain's sizes in integer memory units, as numpy arrays (internal to the DPs).

    ``x`` (L+1), ``tape`` (L), ``fo`` (L), ``bo`` (L+1) are int64 unit counts; ``fwd``
    (L) and ``bwd`` (L+1) are float64 seconds; ``cf[i]`` = fwd[0] + .. + fwd[i-1].
    ``fp[s, k]`` (k > s) is the largest peak, minus held memory, of the forward pass
    Fck_s Fn_{s+1} .. Fn_{k-1}: max(x[s+1] + fo[s], max_{s<j<k} x[j] + x[j+1] + fo[j]).
    """

    def __init__(self, x, tape, fo, bo, fwd, bwd):
        self.x = np.asarray(x, dtype=np.int64)
        self.tape = np.asarray(tape, dtype=np.int64)
        self.fo = np.asarray(fo, dtype=np.int64)
        self.bo = np.asarray(bo, dtype=np.int64)
        self.fwd = np.asarray(fwd, dtype=np.float64)
        self.bwd = np.asarray(bwd, dtype=np.float64)
        L = len(self.fwd)
        self.L = L
        self.cf = np.concatenate([[0.0], np.cumsum(self.fwd)])
        fp = np.zeros((L + 1, L + 1), dtype=np.int64)
        x, fo = self.x, self.fo
        step = np.zeros(L, dtype=np.int64)  # x[j] + x[j+1] + fo[j]
        step[:] = x[:L] + x[1:] + fo
        for s in range(L):
            cur = x[s + 1] + fo[s]
            fp[s, s + 1] = cur
            for k in range(s + 2, L + 1):
                cur = max(cur, step[k - 1])
                fp[s, k] = cur
        self.fp = fp

    @classmethod
    def exact(cls, chain: Chain) -> tuple["UnitChain", int]:
        """Sizes divided by their gcd; returns (unit chain, gcd in bytes)."""
        g = chain.size_gcd()
        return cls([v // g for v in chain.x_size], [v // g for v in chain.tape_size],
                   [v // g for v in chain.fwd_overhead], [v // g for v in chain.bwd_overhead],
                   chain.fwd_time, chain.bwd_time), g

    @classmethod
    def rounded(cls, chain: Chain, budget: int, slots: int, down: bool = False) -> "UnitChain":
        """Sizes in slots of budget/slots bytes, rounded up (or down when ``down``)."""
        def r(v: int) -> int:
            if v == 0:
                return 0
            if budget == 0:
                return slots + 1  # nothing non-empty fits in a zero budget
            num = v * slots
            return num // budget if down else -(-num // budget)

        return cls([r(v) for v in chain.x_size], [r(v) for v in chain.tape_size],
                   [r(v) for v in chain.fwd_overhead], [r(v) for v in chain.bwd_overhead],
                   chain.fwd_time, chain.bwd_time)

    def g(self, t: int) -> int:
        """Size of the gradient live at the start of a segment ending at t."""
        return int(self.x[t + 1]) if t < self.L else 0

    def fall_needs(self, s: int, t: int) -> int:
        """Least m for Fall_s (at the start of segment (s, t)) and B_s at its end."""
        x, tape = self.x, self.tape
        return int(max(self.g(t) + tape[s] + self.fo[s], tape[s] + x[s + 1] + x[s] + self.bo[s]))

    def store_all_units(self) -> int:
        """Peak of store-all in units (the persistent optimum is constant above it)."""
        L, x, tp, fo, bo = self.L, self.x, self.tape, self.fo, self.bo
        held = int(x[0])
        peak = held
        for i in range(L):
            peak = max(peak, held + int(tp[i] + fo[i]))
            held += int(tp[i])
        peak = max(peak, held + int(x[L] + bo[L]))
        held += int(x[L])
        for i in range(L - 1, -1, -1):
            peak = max(peak, held + int(x[i] + bo[i]))
            held += int(x[i] - x[i + 1] - tp[i])
        return peak


# ---------------------------------------------------------------------- smallest budget
def min_memory_table(uc: UnitChain) -> np.ndarray:
    """mm[s, t] = the least m at which W(s, t, m) is finite (int64; see module docstring).

    Feasibility is monotone in m (a schedule valid at m is valid at m' > m), so the least
    feasible m of a composition is the max of the parts' least values and the peaks of the
    operations in between; the minimum over options is exact.  O(L^3) with numpy over k.
    """
    L, x = uc.L, uc.x
    mm = np.zeros((L + 1, L + 1), dtype=np.int64)
    for t in range(L + 1):
        g = uc.g(t)
        for s in range(t, -1, -1):
            if s == t:
                if t == L:
                    mm[s, t] = x[L] + uc.bo[L]
                else:
                    mm[s, t] = uc.fall_needs(s, t)
                continue
            best = max(uc.fall_needs(s, t), int(uc.tape[s] + mm[s + 1, t]))
            ks = np.arange(s + 1, t + 1)
            cand = np.maximum(np.maximum(g + uc.fp[s, ks], x[ks] + mm[ks, t]), mm[s, ks - 1])
            mm[s, t] = min(best, int(cand.min()))
    return mm


def min_units(uc: UnitChain) -> int:
    """Smallest budget (units) at which a persistent schedule exists."""
    return int(uc.x[0] + min_memory_table(uc)[0, uc.L])


def min_feasible_budget(chain: Chain) -> int:
    """The smallest budget (bytes) at which ANY persistent schedule of ``chain`` exists.

    Exact: computed on sizes divided by their gcd by the DP's own min-memory recursion
    (:func:`min_memory_table`).  Persistent schedules are a subset of all schedules, so this
    is >= the global smallest feasible budget; the tests compare the two by exhaustive
    search (on small chains they have always been equal so far; see proofs/persistent_dp.md).
    """
    if not isinstance(chain, Chain):
        raise SolverError(f"chain must be a Chain, got {type(chain).__name__}")
    uc, g = UnitChain.exact(chain)
    return min_units(uc) * g


# ---------------------------------------------------------------------- the table
def _shift(row: np.ndarray, d: int) -> np.ndarray:
    """out[m] = row[m - d] (inf where m < d)."""
    out = np.full_like(row, INF)
    n = row.shape[-1]
    if d < n:
        out[..., d:] = row[..., :n - d]
    return out


def _saturation(uc: UnitChain):
    """sat[s, t]: peak (memory units, segment convention) of the segment's store-all
    schedule Fall_s .. Fall_t (the loss when t = L), B_t .. B_s; ideal[s, t]: its time, the
    least any schedule of the segment can take.  W(s, t, m) = ideal[s, t] for m >= sat[s, t]."""
    L, x, tape, fo, bo = uc.L, uc.x, uc.tape, uc.fo, uc.bo
    TS = np.concatenate([[0], np.cumsum(tape)]).astype(np.int64)
    cb = np.concatenate([[0.0], np.cumsum(uc.bwd)])
    fall_term = [int(TS[j + 1] + fo[j]) for j in range(L)]
    b_term = [int(TS[j + 1] + x[j + 1] + x[j] + bo[j]) for j in range(L)]
    sat = np.zeros((L + 1, L + 1), dtype=np.int64)
    ideal = np.zeros((L + 1, L + 1))
    for s in range(L + 1):
        rf = rb = -(1 << 62)
        for t in range(s, L + 1):
            if t < L:
                rf = max(rf, fall_term[t])
                rb = max(rb, b_term[t])
                sat[s, t] = max(int(x[t + 1]) + rf, rb) - int(TS[s])
                ideal[s, t] = (uc.cf[t + 1] - uc.cf[s]) + (cb[t + 1] - cb[s])
            else:
                peak = int(TS[L] - TS[s] + x[L] + bo[L])
                if s < L:
                    peak = max(peak, rf - int(TS[s]), rb - int(TS[s]))
                sat[s, t] = peak
                ideal[s, t] = (uc.cf[L] - uc.cf[s]) + (cb[L + 1] - cb[s])
    return sat, ideal


class PersistentTable:
    """The value table W(s, t, m) for m = 0..M (seconds, inf when infeasible; float64, or
    float32 when :func:`table_dtype` says it is exact).

    ``V[s][t - s]`` is the row W(s, t, .).  Built for all m at once; see the module docstring.
    """

    def __init__(self, uc: UnitChain, M: int, dtype=np.float64, mm: np.ndarray | None = None):
        if M < 0:
            raise ValueError("M must be >= 0")
        self.uc, self.M = uc, M
        L = uc.L
        x, tape = uc.x, uc.tape
        W = M + 1
        marr = np.arange(W, dtype=np.int64)
        V = [np.empty((L + 1 - s, W), dtype=dtype) for s in range(L + 1)]
        # CT[k] = W(k, t, m - x[k]) + cf[k]: the plain-form child plus the pass prefix time.
        CT = np.empty((L + 1, W), dtype=dtype)
        buf = np.empty((L + 1, W), dtype=dtype)
        cf = [float(v) for v in uc.cf]
        fb = [float(uc.fwd[i] + uc.bwd[i]) for i in range(L)]
        mm = min_memory_table(uc) if mm is None else mm
        sat, ideal = _saturation(uc)
        for t in range(L + 1):
            g = uc.g(t)
            for s in range(t, -1, -1):
                if s == t:
                    if t == L:
                        need = int(x[L] + uc.bo[L])
                        cost = float(uc.bwd[L])
                    else:
                        need = uc.fall_needs(s, t)
                        cost = fb[s]
                    row = np.where(marr >= need, cost, INF).astype(dtype)
                else:
                    # Only memory values in [a, b) need work: below mm[s, t] nothing is
                    # feasible, from sat[s, t] on store-all of the segment fits (ideal time).
                    a = min(int(mm[s, t]), W)
                    b = max(a, min(int(sat[s, t]), W))
                    row = np.full(W, INF, dtype=dtype)
                    row[b:] = ideal[s, t]
                    # option A: Fall_s, W(s+1, t, m - tape[s]), B_s
                    d = int(tape[s])
                    a1 = max(a, uc.fall_needs(s, t))
                    if a1 < b:
                        np.add(V[s + 1][t - s - 1][a1 - d:b - d], fb[s], out=row[a1:b])
                    # option B: pass s -> k, W(k, t, m - x[k]), W(s, k-1, m)
                    n = t - s
                    thr = g + uc.fp[s, s + 1:t + 1]  # non-decreasing in k
                    lo = max(a, int(thr[0]))
                    if lo < b:
                        # Whole contiguous rows: numpy adds them several times faster than
                        # a column window of them (strided rows), so only the reductions
                        # are restricted to the window.
                        full = buf[:n]
                        np.add(V[s][:n], CT[s + 1:t + 1], out=full)
                        blk = full[:, lo:b]
                        best = blk.min(axis=0)
                        hi = min(int(thr[-1]), b)
                        if hi > lo:  # memory values where only a prefix of k is allowed
                            part = np.minimum.accumulate(blk[:, :hi - lo], axis=0)
                            cnt = np.searchsorted(thr, marr[lo:hi], side="right")
                            best[:hi - lo] = part[cnt - 1, np.arange(hi - lo)]
                        best -= cf[s]
                        np.minimum(row[lo:b], best, out=row[lo:b])
                V[s][t - s] = row
                if s >= 1:
                    CT[s] = _shift(row, int(x[s])) + cf[s]
        self.V = V

    def value(self, s: int, t: int, m: int) -> float:
        if m < 0:
            return INF
        return float(self.V[s][t - s][min(m, self.M)])

    def choice(self, s: int, t: int, m: int):
        """The option the table took for W(s, t, m): ``None`` (base case), ``"A"``, or k."""
        uc = self.uc
        if s == t:
            return None
        best, arg = INF, None
        if m >= uc.fall_needs(s, t):
            best = self.value(s + 1, t, m - int(uc.tape[s])) + (uc.fwd[s] + uc.bwd[s])
            arg = "A"
        g = uc.g(t)
        for k in range(s + 1, t + 1):
            if g + uc.fp[s, k] > m:
                break
            child = self.value(k, t, m - int(uc.x[k]))
            v = (self.value(s, k - 1, m) + (child + uc.cf[k])) - uc.cf[s]
            if v < best:
                best, arg = v, k
        return arg

    def schedule(self, m: int) -> Schedule:
        """Rebuild the optimal schedule of W(0, L, m) (iterative: no recursion limit)."""
        uc = self.uc
        ops: list[Op] = []
        stack: list = [("seg", 0, uc.L, m)]
        while stack:
            item = stack.pop()
            if item[0] == "op":
                ops.append(item[1])
                continue
            _, s, t, mm = item
            c = self.choice(s, t, mm)
            if c is None:
                if s == uc.L:
                    ops.append(LOSS_OP)
                else:
                    ops += [Fall(s), Bwd(s)]
            elif c == "A":
                ops.append(Fall(s))
                stack.append(("op", Bwd(s)))
                stack.append(("seg", s + 1, t, mm - int(uc.tape[s])))
            else:
                k = c
                ops.append(Fck(s))
                ops += [Fn(j) for j in range(s + 1, k)]
                stack.append(("seg", s, k - 1, mm))
                stack.append(("seg", k, t, mm - int(uc.x[k])))
        return Schedule(ops)


def table_dtype(uc: UnitChain):
    """float32 when it is exact, float64 otherwise.

    When every time is an integer and every sum the DP forms is below 2^24, float32
    represents all of them exactly (a persistent schedule runs at most L(L+1)/2 forwards
    and each backward once; the table also adds one prefix sum of forward times), so the
    table is exactly the float64 one at half the memory traffic.
    """
    times = np.concatenate([uc.fwd, uc.bwd])
    if not np.all(times == np.floor(times)):
        return np.float64
    L = uc.L
    top = (L + 1) * (L + 2) / 2 * float(uc.fwd.max(initial=0.0)) + float(uc.bwd.sum()) + 2 * float(uc.cf[-1])
    return np.float32 if top < 2 ** 24 else np.float64


def solve_units(uc: UnitChain, budget_units: int, mm: np.ndarray | None = None):
    """Optimal persistent makespan and schedule for a budget in units, or (inf, None).

    Returns ``(makespan, schedule, mm)`` with ``mm`` the min-memory table
    (:func:`min_memory_table`, computed here when not given)."""
    if mm is None:
        mm = min_memory_table(uc)
    L = uc.L
    M = budget_units - int(uc.x[0])
    if M < int(mm[0, L]):
        return INF, None, mm
    # Above store-all's peak the optimum is the ideal makespan: no need for a wider table.
    M = min(M, max(0, uc.store_all_units() - int(uc.x[0])))
    table_bytes = (L + 1) * (L + 2) // 2 * (M + 1) * 8
    if table_bytes > MAX_TABLE_BYTES:
        raise SolverError(
            f"solver 'dp': the exact-memory table would need {table_bytes / 2**30:.1f} GiB "
            f"({M + 1} memory units x {L} stages); pass slots=S to discretize memory")
    table = PersistentTable(uc, M, table_dtype(uc), mm)
    value = table.value(0, L, M)
    if value == INF:  # pragma: no cover - mm says it is feasible
        raise SolverError("solver 'dp': internal error, the table disagrees with min-memory")
    return value, table.schedule(M), mm


def _check_slots(slots, solver: str = "dp"):
    if slots is None:
        return None
    if isinstance(slots, bool) or not isinstance(slots, numbers.Integral) or slots < 1:
        raise SolverError(f"solver {solver!r}: option slots = {slots!r} must be an integer >= 1")
    return int(slots)


def slot_info(chain: Chain, budget: int, slots: int) -> dict:
    """Slot size, rounding loss and guaranteed budget of ``slots`` mode (bytes).

    Every size v is counted as ceil(v * slots / budget) slots of budget/slots bytes, so it
    is over-counted by less than one slot.  A peak of a schedule adds at most L + 4 values
    (x_0, one value per stage 1..L since no class schedule holds a plain x_i and t_i
    together, the live gradient, the value being produced and the overhead), so every
    persistent schedule whose true peak is at most ``guaranteed_budget`` = budget minus the
    L + 4 largest over-counts is accepted by the slot DP: its makespan is then at most the
    exact persistent optimum at ``guaranteed_budget``.
    """
    L = chain.length
    sizes = list(chain.x_size) + list(chain.tape_size) + list(chain.fwd_overhead) + list(chain.bwd_overhead)
    slot = budget / slots
    if budget == 0:
        excess = [0.0 for _ in sizes]
    else:
        excess = [(-(-v * slots // budget)) * budget / slots - v for v in sizes]
    largest = sorted(excess, reverse=True)[:L + 4]
    loss = sum(largest)
    return {"slots": slots, "slot_size": slot, "rounding_loss_max": max(excess),
            "rounding_loss": loss, "guaranteed_budget": max(0, math.floor(budget - loss))}


@register("dp", optimal_for=CLASS_PERSISTENT, exact=True,
          description="Rotor persistent dynamic program, exact integer memory or slots.")
def solve_dp(chain: Chain, budget: int, *, slots: int | None = None,
             slot_bound: bool = False) -> Solution:
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
    """
    slots = _check_slots(slots)
    if not isinstance(slot_bound, bool):
        raise SolverError(f"solver 'dp': option slot_bound = {slot_bound!r} must be True or False")
    if slot_bound and slots is None:
        raise SolverError("solver 'dp': option slot_bound needs slots=S")
    uc_exact, gcd = UnitChain.exact(chain)
    if slots is None:
        info = {"memory": "exact", "unit": gcd, "budget_units": budget // gcd}
        makespan, schedule, mm = solve_units(uc_exact, budget // gcd)
        min_budget = int(uc_exact.x[0] + mm[0, uc_exact.L]) * gcd
        if schedule is None:
            return Solution("dp", INFEASIBLE, None, None, None, budget, optimal_for=CLASS_PERSISTENT,
                            min_budget=min_budget, info=info,
                            message=f"no persistent schedule fits in {budget}; the smallest "
                                    f"feasible budget is {min_budget}")
        peak = _peak(chain, schedule)
        return Solution("dp", OPTIMAL, schedule, makespan, peak, budget, bound=makespan,
                        optimal_for=CLASS_PERSISTENT, min_budget=min_budget, info=info)
    info = {"memory": "slots", **slot_info(chain, budget, slots)}
    uc = UnitChain.rounded(chain, budget, slots)
    makespan, schedule, _ = solve_units(uc, slots)
    if schedule is None:
        min_budget = min_units(uc_exact) * gcd
        msg = (f"no persistent schedule fits in {budget} with sizes rounded up to "
               f"{slots} slots; the smallest feasible budget (exact memory) is {min_budget}")
        return Solution("dp", INFEASIBLE, None, None, None, budget, optimal_for=CLASS_PERSISTENT,
                        min_budget=min_budget, info=info, message=msg)
    bound = None
    status = FEASIBLE
    sizes = chain.x_size + chain.tape_size + chain.fwd_overhead + chain.bwd_overhead
    if budget == 0 or all(v * slots % budget == 0 for v in sizes):
        # every size is a whole number of slots: the slot DP is the exact DP, scaled
        status, bound = OPTIMAL, makespan
        info["rounding_exact"] = True
    elif slot_bound:
        lb, _, _ = solve_units(UnitChain.rounded(chain, budget, slots, down=True), slots)
        bound = lb
        info["lower_bound_from"] = "sizes rounded down"
        if lb == makespan:
            status = OPTIMAL
    peak = _peak(chain, schedule)
    return Solution("dp", status, schedule, makespan, peak, budget, bound=bound,
                    optimal_for=CLASS_PERSISTENT if status == OPTIMAL else CLASS_NONE,
                    info=info,
                    message="" if status == OPTIMAL else
                    "slots mode: optimal for the rounded sizes, not proven optimal at the real budget")


def _peak(chain: Chain, schedule: Schedule) -> int:
    """Peak memory of ``schedule`` in bytes (replayed: the DP works in rounded units)."""
    from remat_theory.model.simulator import simulate

    return simulate(chain, schedule).peak_memory
