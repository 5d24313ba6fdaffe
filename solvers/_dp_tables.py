"""What the two dynamic programs (``solvers/dp.py``, ``solvers/dp_weak.py``) share.

* :class:`UnitChain`: a chain's sizes in integer memory units (exact: divided by their gcd;
  ``slots``: rounded to slots of budget/S bytes), with the forward-pass peak table ``fp``;
* option checks (``slots``, ``time_limit``) with the messages a CLI user reads;
* the clock both tables check once per row (:class:`solvers._deadline.Deadline`, shared
  with ``ilp``), so that a ``time_limit`` bounds the whole run, table building included;
* the up-front size check: a table that would need more memory than
  :data:`MAX_TABLE_BYTES`, or clearly more time than the limit allows, is refused before
  any work with a one-line error that names the estimate and the way out
  (``--slots S`` / ``-o slots=S``);
* :func:`slot_info` (the guarantee of ``slots`` mode) and :func:`peak` (replay).

Memory convention, subproblems and proofs: ``proofs/persistent_dp.md`` and
``proofs/weak_persistence.md``.
"""
from __future__ import annotations

import math
import numbers
from functools import reduce

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import SolverOptionError
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import Solution

from solvers._deadline import Deadline, DeadlineExpired

__all__ = ["Deadline", "DeadlineExpired", "NEVER", "UnitChain", "all_sizes", "check_bool",
           "check_slots", "check_time_limit", "peak", "refuse_if_too_big", "shift", "slot_info"]

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


NEVER = Deadline(None)


def check_slots(slots, solver: str):
    """``slots`` must be None or an integer >= 1; returns it as int (or None)."""
    if slots is None:
        return None
    if isinstance(slots, bool) or not isinstance(slots, numbers.Integral) or slots < 1:
        raise SolverOptionError(f"solver {solver!r}: option slots = {slots!r} must be an integer >= 1")
    return int(slots)


def check_time_limit(time_limit, solver: str):
    """``time_limit`` must be None or a positive finite number of seconds."""
    if time_limit is None:
        return None
    if isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real) \
            or not math.isfinite(time_limit) or time_limit <= 0:
        raise SolverOptionError(f"solver {solver!r}: option time_limit = {time_limit!r} must be a "
                          f"positive number of seconds")
    return float(time_limit)


def check_bool(value, name: str, solver: str) -> bool:
    if not isinstance(value, bool):
        raise SolverOptionError(f"solver {solver!r}: option {name} = {value!r} must be True or False")
    return value


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
    """

    def __init__(self, x, tape, fo, bo, fwd, bwd, fao=None, fall=None):
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
        self.cf = np.concatenate([[0.0], np.cumsum(self.fwd)])
        self.step = self.x[:L] + self.x[1:] + self.fo  # peak of Fn_j above held: x[j]+x[j+1]+fo[j]
        self._fp = None
        self._fps = None

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
            self._fp = fp
        return self._fp

    @classmethod
    def exact(cls, chain: Chain) -> tuple["UnitChain", int]:
        """Sizes divided by their gcd; returns (unit chain, gcd in bytes)."""
        g = chain.size_gcd()
        return cls([v // g for v in chain.x_size], [v // g for v in chain.tape_size],
                   [v // g for v in chain.fwd_overhead], [v // g for v in chain.bwd_overhead],
                   chain.fwd_time, chain.bwd_time, [v // g for v in chain.fall_overhead],
                   chain.fall_time), g

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
                   chain.fwd_time, chain.bwd_time, [r(v) for v in chain.fall_overhead],
                   chain.fall_time)

    def size_gcd(self) -> int:
        """gcd of every unit size (1 when all are zero)."""
        vals = np.concatenate([self.x, self.tape, self.fo, self.bo, self.fao])
        g = int(reduce(math.gcd, (int(v) for v in np.unique(vals)), 0))
        return max(g, 1)

    def divided(self, g: int) -> "UnitChain":
        """The same chain with every unit size divided by ``g`` (which divides them all).

        Every peak of every operation is then divided by ``g`` too, so W(s, t, m) of this
        chain at m is W of the original at any m' with m' // g = m: the DP answers at
        budget B are those of the divided chain at B // g (a larger unit, same schedules)."""
        if g == 1:
            return self
        return UnitChain(self.x // g, self.tape // g, self.fo // g, self.bo // g, self.fwd,
                         self.bwd, self.fao // g, self.fall)

    def g(self, t: int) -> int:
        """Size of the gradient live at the start of a segment ending at t."""
        return int(self.x[t + 1]) if t < self.L else 0

    def fall_needs(self, s: int, t: int) -> int:
        """Least m for Fall_s (at the start of segment (s, t)) and B_s at its end."""
        x, tape = self.x, self.tape
        return int(max(self.g(t) + tape[s] + self.fao[s], tape[s] + x[s + 1] + x[s] + self.bo[s]))

    def store_all_units(self) -> int:
        """Peak of store-all in units (the persistent optimum is constant above it)."""
        L, x, tp, fo, bo = self.L, self.x, self.tape, self.fao, self.bo
        TS = np.concatenate([[0], np.cumsum(tp)])
        held_f = int(x[0]) + TS[:L]  # held before Fall_i
        peak = max(int(x[0]), int((held_f + tp + fo).max(initial=0)))
        held = int(x[0] + TS[L])
        peak = max(peak, held + int(x[L] + bo[L]))
        held += int(x[L])
        # before B_i: x_0, tapes 0..i, x_{i+1} (d_{i+1}); B_i produces x_i-sized d_i
        i = np.arange(L)
        held_b = int(x[0]) + TS[i + 1] + x[i + 1]
        if L:
            peak = max(peak, int((held_b + x[:L] + bo[:L]).max()))
        return peak


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
    is over-counted by less than one slot.  A peak of a schedule adds at most L + 4 values
    (x_0, one value per stage 1..L since no class schedule holds a plain x_i and t_i
    together, the live gradient, the value being produced and the overhead), so every
    persistent schedule whose true peak is at most ``guaranteed_budget`` = budget minus the
    L + 4 largest over-counts is accepted by the slot DP: its makespan is then at most the
    exact persistent optimum at ``guaranteed_budget``.
    """
    L = chain.length
    sizes = all_sizes(chain)
    slot = budget / slots
    if budget == 0:
        excess = [0.0 for _ in sizes]
    else:
        excess = [(-(-v * slots // budget)) * budget / slots - v for v in sizes]
    largest = sorted(excess, reverse=True)[:L + 4]
    loss = sum(largest)
    return {"slots": slots, "slot_size": slot, "rounding_loss_max": max(excess),
            "rounding_loss": loss, "guaranteed_budget": max(0, math.floor(budget - loss))}


def all_sizes(chain: Chain) -> list:
    """Every size of the chain (bytes) that slot rounding touches (``fall_overhead`` only
    when the chain gives its own: otherwise it repeats ``fwd_overhead``, and listing it
    twice would only loosen :func:`slot_info`'s bound)."""
    sizes = (list(chain.x_size) + list(chain.tape_size) + list(chain.fwd_overhead)
             + list(chain.bwd_overhead))
    return sizes + list(chain.fall_overhead) if chain.has_fall_costs else sizes


def peak(chain: Chain, schedule: Schedule) -> int:
    """Peak memory of ``schedule`` in bytes (replayed: the DPs work in rounded units)."""
    return simulate(chain, schedule).peak_memory


def refuse_if_too_big(solver: str, table_bytes: float, steps: float, rate: float,
                      time_limit: float | None, stages: int, units: int, slots: int | None,
                      fit_slots) -> None:
    """Raise :class:`SolverOptionError` before any work when the table would exceed
    :data:`MAX_TABLE_BYTES`, or when a ``time_limit`` is set and the estimated time
    ``steps / rate`` exceeds :data:`REFUSE_FACTOR` times it (and
    :data:`REFUSE_MIN_SECONDS`).

    Both estimates are upper bounds (every split at every memory value), so a refusal means
    the run is at least that far past the limit at the assumed ``rate``.
    ``fit_slots(max_bytes, max_steps)`` returns the largest number of slots that fits both
    (or 0 when none does); it is named in the message as the way out.
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
        ways.append(f"use --slots S (-o slots=S) with S at most {s_fit}")
    elif time_limit is not None and s_mem >= MIN_USEFUL_SLOTS and (slots is None or s_mem < slots):
        need = math.ceil(est_s * s_mem / max(1, units))
        ways.append(f"use --slots S (-o slots=S) with S at most {s_mem} and a --time-limit of "
                    f"{need} or more")
    if too_slow and not too_big:
        ways.append(f"a --time-limit of {math.ceil(est_s)} or more")
    if not ways:
        ways.append(f"it is too long for this solver (fewer than {MIN_USEFUL_SLOTS} slots would "
                    f"fit); use a heuristic solver (e.g. --solver revolve)")
    way = ", or ".join(ways)
    raise SolverOptionError(f"solver {solver!r}: {stages} stages at {mode} would need {what}, "
                      f"estimated {steps:.2g} min-plus steps; {way}")


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
                f"a larger --time-limit, or a smaller --slots S (-o slots=S), may let it finish")
