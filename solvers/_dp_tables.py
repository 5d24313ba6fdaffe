"""What the two dynamic programs (``solvers/dp.py``, ``solvers/dp_weak.py``) share.

* :class:`UnitChain`: a chain's sizes in integer memory units (exact: divided by their gcd;
  ``slots``: rounded to slots of budget/S bytes), with the forward-pass peak table ``fp``;
* the clock both tables check once per row (:class:`solvers._deadline.Deadline`, shared
  with ``ilp``), so that a ``time_limit`` bounds the whole run, table building included;
* the up-front size check: a table that would need more memory than
  :data:`MAX_TABLE_BYTES`, or clearly more time than the limit allows, is refused before
  any work with a :class:`~remat_theory.model.errors.SolverLimitError` that carries the
  estimate and the ways out as facts (a ``slots`` value that fits, a time limit, a
  heuristic solver);
* :func:`slot_info` (the guarantee of ``slots`` mode) and :func:`peak` (replay).

Memory convention, subproblems and proofs: ``proofs/persistent_dp.md`` and
``proofs/weak_persistence.md``.
"""
from __future__ import annotations

import math
from functools import reduce

import numpy as np

from remat_theory.model import fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import AT_LEAST, AT_MOST, InternalError, Remedy, SolverLimitError
from remat_theory.model.schedule import Schedule
# the simulator's answer (makespan, peak), vectorised for long schedules
from remat_theory.model.fast_replay import replay_totals as simulate
from remat_theory.model.solution import Solution

from solvers._deadline import Deadline, DeadlineExpired

__all__ = ["Deadline", "DeadlineExpired", "NEVER", "UnitChain", "all_sizes", "peak",
           "refuse_by_length", "refuse_if_too_big", "shift", "slot_info"]

INF = math.inf

#: Largest table (bytes) either DP builds; above it the solver refuses up front.
MAX_TABLE_BYTES = 8 * 2 ** 30

#: With a time limit, a run whose estimated time exceeds this many times the limit, and
#: :data:`REFUSE_MIN_SECONDS`, is refused up front ("clearly far past the limit"); below it
#: the solver starts and stops at the limit.
REFUSE_FACTOR = 10.0
REFUSE_MIN_SECONDS = 10.0

#: The smallest slot count a refusal suggests (fewer slots make the DP's answer coarse).
MIN_USEFUL_SLOTS = 10
#: The solver named as the way out when no slot count makes a DP fit (a heuristic, O(L) memory).
HEURISTIC_FALLBACK = "revolve"


NEVER = Deadline(None)

#: ``fp``/``fps`` of a forward pass that crosses a barrier (:class:`UnitChain`): above any
#: memory value (budgets and sizes are below 2^53, so sums with it stay inside int64).
BLOCKED = 2 ** 62


class UnitChain:
    """A chain's sizes in integer memory units, as numpy arrays (internal to the DPs).

    ``x`` (L+1), ``tape`` (L), ``fo`` (L), ``bo`` (L+1), ``fao`` (L) are int64 unit counts;
    ``fwd`` (L), ``bwd`` (L+1) and ``fall`` (L) are float64 seconds; ``cf[i]`` = fwd[0] + ..
    + fwd[i-1].  ``fwd``/``fo`` are the costs of Fn_i and Fck_i (the passes), ``fall``/``fao``
    those of the recording forward Fall_i (the chain's ``fall_time``/``fall_overhead``,
    equal to the forward ones unless the chain gives its own; docs/model.md).
    ``fp[s, k]`` (k > s) is the largest peak, minus held memory, of the forward pass
    Fck_s Fn_{s+1} .. Fn_{k-1}: max(x[s+1] + fo[s], max_{s<j<k} x[j] + x[j+1] + fo[j])
    (0 for k <= s).

    ``barriers`` (the ``dp`` option): stage indices j after which no forward pass goes on,
    the passes with s <= j < k - 1 (they run both Fn/Fck_j and Fn_{j+1}); ``fp[s, k]`` of
    such a pass is :data:`BLOCKED`, above any memory value, so that every table built on
    ``fp``/``fps`` (options, min-memory, the rebuilt choice) leaves it out.  ``pass_cap[s]``
    is the longest pass from s that crosses none (k - s <= pass_cap[s]; L - s without one).
    """

    def __init__(self, x, tape, fo, bo, fwd, bwd, fao=None, fall=None, held=None,
                 unsaved=None, barriers=()):
        self.x = np.asarray(x, dtype=np.int64)
        self.tape = np.asarray(tape, dtype=np.int64)
        self.fo = np.asarray(fo, dtype=np.int64)
        self.bo = np.asarray(bo, dtype=np.int64)
        self.fwd = np.asarray(fwd, dtype=np.float64)
        self.bwd = np.asarray(bwd, dtype=np.float64)
        self.fao = self.fo.copy() if fao is None else np.asarray(fao, dtype=np.int64)
        self.fall = self.fwd.copy() if fall is None else np.asarray(fall, dtype=np.float64)
        L = len(self.fwd)
        self.L = L
        # Outputs no backward reads (the chain's ``output_saved``, docs/model.md): ``un[i]``
        # is True when x_i is unsaved (never for x_0), ``ux[i]`` = x[i] then, else 0;
        # ``th[i]`` is the held size of t_{i+1} (``tape_held``; ``tape`` stays what Fall_i
        # adds in all, its peak).  All saved: th = tape, ux = 0, every formula as before.
        self.un = (np.zeros(L + 1, dtype=bool) if unsaved is None
                   else np.asarray(unsaved, dtype=bool))
        self.ux = np.where(self.un, self.x, 0).astype(np.int64)
        self.th = self.tape.copy() if held is None else np.asarray(held, dtype=np.int64)
        self.cf = np.concatenate([[0.0], np.cumsum(self.fwd)])
        self.step = self.x[:L] + self.x[1:] + self.fo  # peak of Fn_j above held: x[j]+x[j+1]+fo[j]
        # Option A's child (s+1, t) runs at m - dA[s]: Fall_s adds th[s] and an unsaved plain
        # x_{s+1} (the child's own input), and frees an unsaved x_s (proofs/persistent_dp.md).
        self.dA = self.th + self.ux[1:] - self.ux[:L]
        # B_s at the end of a segment starting at s: t_{s+1}, d_{s+1}, the new d_s, and x_s
        # unless Fall_s freed it (unsaved).
        self.bneed = self.th + self.x[1:] + self.x[:L] - self.ux[:L] + self.bo[:L]
        self.barriers = tuple(sorted({int(j) for j in barriers}))
        if self.barriers and not (0 <= self.barriers[0] and self.barriers[-1] < L - 1):
            raise InternalError(f"UnitChain: barriers {self.barriers} must be in [0, {L - 2}]")
        cap, nxt, bset = [0] * (L + 1), None, set(self.barriers)
        for s in range(L, -1, -1):
            if s in bset:
                nxt = s  # the first barrier j >= s
            cap[s] = L - s if nxt is None else nxt + 1 - s
        self.pass_cap = cap
        self._fp = None
        self._fps = None

    @property
    def has_unsaved(self) -> bool:
        return bool(self.un.any())

    @property
    def fps(self) -> np.ndarray:
        """``fp`` skewed: fps[s, j] = fp[s, s + j] for 1 <= j <= L - s (0 elsewhere); built
        column by column (all s at once), O(L) numpy calls."""
        if self._fps is None:
            L, x, fo, step = self.L, self.x, self.fo, self.step
            fps = np.zeros((L + 1, L + 1), dtype=np.int64)
            if L:
                fps[:L, 1] = x[1:] + fo
            for j in range(2, L + 1):
                N = L + 1 - j
                np.maximum(fps[:N, j - 1], step[j - 1:j - 1 + N], out=fps[:N, j])
            for s, c in enumerate(self.pass_cap):  # passes that cross a barrier
                if c < L - s:
                    fps[s, c + 1:L - s + 1] = BLOCKED
            self._fps = fps
        return self._fps

    @property
    def fp(self) -> np.ndarray:
        """(L+1) x (L+1) int64, built on first use (O(L) numpy calls)."""
        if self._fp is None:
            L, x, fo, step = self.L, self.x, self.fo, self.step
            fp = np.zeros((L + 1, L + 1), dtype=np.int64)
            for s in range(L):
                fp[s, s + 1] = x[s + 1] + fo[s]
                if s + 2 <= L:
                    np.maximum.accumulate(np.maximum(step[s + 1:L], fp[s, s + 1]),
                                          out=fp[s, s + 2:])
                if self.barriers:
                    fp[s, s + self.pass_cap[s] + 1:] = BLOCKED
            self._fp = fp
        return self._fp

    @classmethod
    def exact(cls, chain: Chain, barriers=()) -> tuple["UnitChain", int]:
        """Sizes divided by their gcd; returns (unit chain, gcd in bytes)."""
        g = chain.size_gcd()
        a = chain.array  # int64 (every size is below 2**53): divided at once
        return cls(a("x_size") // g, a("tape_size") // g, a("fwd_overhead") // g,
                   a("bwd_overhead") // g, a("fwd_time"), a("bwd_time"),
                   a("fall_overhead") // g, a("fall_time"), held=a("tape_held") // g,
                   unsaved=_unsaved(chain), barriers=barriers), g

    @classmethod
    def rounded(cls, chain: Chain, budget: int, slots: int, down: bool = False,
                barriers=()) -> "UnitChain":
        """Sizes in slots of budget/slots bytes, rounded up (or down when ``down``).

        Every value held is rounded on its own (a held tape ``tape_held[i]`` too, beside
        ``tape_size[i]``, the size Fall_i's peak adds), so a peak in slots is the sum of
        rounded parts: never below the true peak rounded up (never above it rounded down)."""
        def r(v: int) -> int:
            if v == 0:
                return 0
            if budget == 0:
                return slots + 1  # nothing non-empty fits in a zero budget
            num = v * slots
            return num // budget if down else -(-num // budget)

        return cls([r(v) for v in chain.x_size], [r(v) for v in chain.tape_size],
                   [r(v) for v in chain.fwd_overhead], [r(v) for v in chain.bwd_overhead],
                   chain.fwd_time, chain.bwd_time, [r(v) for v in chain.fall_overhead],
                   chain.fall_time, held=[r(v) for v in chain.tape_held],
                   unsaved=_unsaved(chain), barriers=barriers)

    def size_gcd(self) -> int:
        """gcd of every unit size (1 when all are zero)."""
        vals = np.concatenate([self.x, self.tape, self.fo, self.bo, self.fao, self.th])
        return max(int(np.gcd.reduce(vals)) if len(vals) else 0, 1)

    def divided(self, g: int) -> "UnitChain":
        """The same chain with every unit size divided by ``g`` (which divides them all).

        Every peak of every operation is then divided by ``g`` too, so W(s, t, m) of this
        chain at m is W of the original at any m' with m' // g = m: the DP answers at
        budget B are those of the divided chain at B // g (a larger unit, same schedules)."""
        if g == 1:
            return self
        return UnitChain(self.x // g, self.tape // g, self.fo // g, self.bo // g, self.fwd,
                         self.bwd, self.fao // g, self.fall, held=self.th // g, unsaved=self.un,
                         barriers=self.barriers)

    def g(self, t: int) -> int:
        """Size of the gradient live at the start of a segment ending at t."""
        return int(self.x[t + 1]) if t < self.L else 0

    def fall_needs(self, s: int, t: int) -> int:
        """Least m for Fall_s (at the start of segment (s, t)) and B_s at its end."""
        return int(max(self.g(t) + self.tape[s] + self.fao[s], self.bneed[s]))

    def store_all_terms(self):
        """Peaks of store-all (Fall_0 .. Fall_{L-1}, the loss, B_{L-1} .. B_0) above x_0,
        as ``(P, fall_term, b_term, loss_term)``: held before the forward of stage i is
        ``P[i]`` (the held tapes of stages < i and an unsaved plain x_i), the peak of Fall_i
        ``fall_term[i] = P[i] + tape[i] + fao[i]``, of B_i ``b_term[i]`` (held tapes of
        stages <= i, d_{i+1}, the new d_i), of the loss ``loss_term``.  A segment (s, t)
        sees each of them minus ``P[s]`` (proofs/persistent_dp.md, Lemma 2.4)."""
        L, x, th = self.L, self.x, self.th
        TH = np.concatenate([[0], np.cumsum(th)]).astype(np.int64)
        P = TH + self.ux
        fall_term = P[:L] + self.tape + self.fao
        b_term = TH[1:] + x[1:] + x[:L] + self.bo[:L]
        loss_term = int(P[L] + x[L] + self.bo[L])
        return P, fall_term, b_term, loss_term

    def store_all_units(self) -> int:
        """Peak of store-all in units (the persistent optimum is constant above it)."""
        _, fall_term, b_term, loss_term = self.store_all_terms()
        return int(self.x[0]) + max(0, loss_term, int(fall_term.max(initial=0)),
                                    int(b_term.max(initial=0)))


def _unsaved(chain: Chain) -> list:
    """un[i] (i = 0..L): x_i is unsaved, no backward reads it (never x_0)."""
    return np.concatenate(([False], ~chain.array("output_saved")))


def shift(row: np.ndarray, d: int) -> np.ndarray:
    """out[m] = row[m - d] (inf where m < d)."""
    out = np.full_like(row, INF)
    n = row.shape[-1]
    if d < n:
        out[..., d:] = row[..., :n - d]
    return out


def slot_info(chain: Chain, budget: int, slots: int) -> dict:
    """Slot size, rounding loss and guaranteed budget of ``slots`` mode (bytes).

    Every size v is counted as ceil(v * slots / budget) slots of budget/slots bytes, so it
    is over-counted by less than one slot.  A peak of a schedule adds at most L + 4 + U
    values, U the number of unsaved outputs (x_0; one value per stage 1..L, since no class
    schedule holds a plain x_i and t_i together, two where x_i is unsaved: Fall_{i-1} holds
    both until Fall_i; the live gradient, the value being produced and the overhead), so
    every persistent schedule whose true peak is at most ``guaranteed_budget`` = budget
    minus the L + 4 + U largest over-counts is accepted by the slot DP: its makespan is then
    at most the exact persistent optimum at ``guaranteed_budget``.
    """
    L = chain.length
    sizes = all_sizes(chain)
    slot = budget / slots
    if budget == 0:
        excess = [0.0 for _ in sizes]
    else:
        excess = [(-(-v * slots // budget)) * budget / slots - v for v in sizes]
    count = L + 4 + sum(1 for v in chain.output_saved if not v)
    largest = sorted(excess, reverse=True)[:count]
    loss = sum(largest)
    return {"slots": slots, "slot_size": slot, "rounding_loss_max": max(excess),
            "rounding_loss": loss, "guaranteed_budget": max(0, math.floor(budget - loss))}


def all_sizes(chain: Chain) -> list:
    """Every size of the chain (bytes) that slot rounding touches: the size fields of the
    field table (:mod:`remat_theory.model.fields`), an optional one only when the chain uses
    its variation (``fall_overhead`` otherwise repeats ``fwd_overhead``, and listing it
    twice would only loosen :func:`slot_info`'s bound); then the held size of a tape where
    it differs from ``tape_size``, an unsaved output's stage."""
    sizes = []
    for f in fields.of_kind("size"):
        if not f.optional or chain.uses(f.variation):
            sizes += list(getattr(chain, f.name))
    sizes += [h for h, keep in zip(chain.tape_held, chain.output_saved) if not keep]
    return sizes


def peak(chain: Chain, schedule: Schedule) -> int:
    """Peak memory of ``schedule`` in bytes (replayed: the DPs work in rounded units)."""
    return simulate(chain, schedule).peak_memory


def refuse_by_length(solver: str, stages: int, least_table_bytes: float) -> None:
    """Raise :class:`SolverLimitError` from the chain's length alone, before any work on its
    values (at a million stages dividing the sizes by their gcd and the other O(L) steps
    take a second under load), when even a table with a single memory value per row, the
    smallest any budget or ``slots`` gives (``least_table_bytes``), is over
    :data:`MAX_TABLE_BYTES`; the way out is a heuristic of any length."""
    if least_table_bytes <= MAX_TABLE_BYTES:
        return
    raise SolverLimitError(
        f"solver {solver!r}: {stages} stages would need at least "
        f"{least_table_bytes / 2 ** 30:.1f} GiB of table even with a single memory value "
        f"(limit {MAX_TABLE_BYTES / 2 ** 30:.0f} GiB); it is too long for this solver at any "
        f"budget or number of slots",
        solver=solver, estimate_bytes=least_table_bytes,
        remedies=(Remedy(solver=HEURISTIC_FALLBACK, note="a heuristic, not optimal"),))


def refuse_if_too_big(solver: str, table_bytes: float, steps: float, rate: float,
                      time_limit: float | None, stages: int, units: int, slots: int | None,
                      fit_slots) -> None:
    """Raise :class:`SolverLimitError` before any work when the table would exceed
    :data:`MAX_TABLE_BYTES`, or when a ``time_limit`` is set and the estimated time
    ``steps / rate`` exceeds :data:`REFUSE_FACTOR` times it (and
    :data:`REFUSE_MIN_SECONDS`).

    Both estimates are upper bounds (every split at every memory value), so a refusal means
    the run is at least that far past the limit at the assumed ``rate``.
    ``fit_slots(max_bytes, max_steps)`` returns the largest number of slots that fits both
    (or 0 when none does); it is the first way out (:attr:`SolverLimitError.remedies`).
    """
    est_s = steps / rate
    too_big = table_bytes > MAX_TABLE_BYTES
    too_slow = (time_limit is not None and est_s > REFUSE_FACTOR * time_limit
                and est_s > REFUSE_MIN_SECONDS)
    if not (too_big or too_slow):
        return
    max_steps = math.inf if time_limit is None else rate * time_limit
    s_fit = fit_slots(MAX_TABLE_BYTES, max_steps)
    s_mem = fit_slots(MAX_TABLE_BYTES, math.inf)
    what = (f"{table_bytes / 2 ** 30:.1f} GiB of table (limit {MAX_TABLE_BYTES / 2 ** 30:.0f} GiB)"
            if too_big else f"about {est_s:.0f} s (time limit {time_limit:g} s)")
    mode = f"{slots} slots" if slots is not None else f"exact memory ({units} units)"
    ways = []
    if s_fit >= MIN_USEFUL_SLOTS and (slots is None or s_fit < slots):
        ways.append(Remedy(options=(("slots", AT_MOST, s_fit),)))
    elif time_limit is not None and s_mem >= MIN_USEFUL_SLOTS and (slots is None or s_mem < slots):
        need = math.ceil(est_s * s_mem / max(1, units))
        ways.append(Remedy(options=(("slots", AT_MOST, s_mem), ("time_limit", AT_LEAST, need))))
    if too_slow and not too_big:
        ways.append(Remedy(options=(("time_limit", AT_LEAST, math.ceil(est_s)),)))
    problem = (f"solver {solver!r}: {stages} stages at {mode} would need {what}, estimated "
               f"{steps:.2g} min-plus steps")
    if not ways:
        problem += (f"; it is too long for this solver (fewer than {MIN_USEFUL_SLOTS} slots "
                    f"would fit)")
        ways.append(Remedy(solver=HEURISTIC_FALLBACK, note="a heuristic, not optimal"))
    raise SolverLimitError(problem, solver=solver, estimate_s=est_s, estimate_bytes=table_bytes,
                           remedies=ways)


def time_up(solver: str, schedule_class: str, chain: Chain, budget: int, deadline: Deadline,
            where: str, info: dict) -> Solution:
    """What a DP answers when its time limit runs out: no schedule, ``time_limit``, and the
    ideal makespan as its only bound (a lower bound over every schedule)."""
    bound = chain.ideal_makespan()
    info = {**info, "stopped_by": "time_limit", "stopped_in": where}
    return Solution.time_limit(
        solver, budget, bound=bound, optimal_for=schedule_class, info=info,
        message=f"time limit of {deadline.limit:g} s reached while {where}: no schedule, "
                f"not proven optimal; lower bound {bound:g} (the ideal makespan); "
                f"a larger time limit, or fewer slots, may let it finish")
