"""The simulator: the referee for every schedule (docs/model.md).

``simulate(chain, schedule, budget)`` replays a schedule operation by operation, checks
every rule of the operation table, and returns the makespan, the peak memory and the
per-step memory profile, or raises :class:`InvalidScheduleError` naming the first bad step.

The transition function :func:`transition` is public so that exact search (Dijkstra over
simulator states) uses the very same rules.

State encoding (:class:`State`): a bitmask of the plain activations x_i held (bit 0, x_0,
always set), a bitmask of the tapes t_i held (bits 1..L), and ``bwd_next``, the stage whose
backward runs next (L for the loss, then L-1, ..., 0; -1 once d_0 exists).  Backward
operations run in the fixed order Loss, B_{L-1}, ..., B_0, so the one live gradient is
d_{bwd_next+1} (none before the loss).
"""
from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import (EQ, BudgetExceededError, InvalidScheduleError, RematError,
                                       Remedy)
from remat_theory.model.schedule import B, DROP, FALL, FCK, FN, LOSS, Op, Schedule

DROP_NOT_ALLOWED = ("Drop operations are not allowed (the canonical model has no deletions; "
                    "explicit deletions are an extension of it)")


class State(NamedTuple):
    plain: int  # bit i set: plain x_i held
    tapes: int  # bit i set: tape t_i held (i >= 1)
    bwd_next: int  # L before the loss; i while d_{i+1} is live; -1 when d_0 exists

    @classmethod
    def initial(cls, chain: Chain) -> "State":
        return cls(plain=1, tapes=0, bwd_next=chain.length)

    def is_final(self) -> bool:
        return self.bwd_next == -1

    def describe(self, chain: Chain | int) -> str:
        """The values held, e.g. ``{x0, t2, d3}`` (``chain`` or its length)."""
        L = chain if isinstance(chain, int) else chain.length
        held = named_bits("x", self.plain, L)
        held += named_bits("t", self.tapes & ~1, L)
        if self.bwd_next < L:
            held.append(f"d{self.bwd_next + 1}")
        return "{" + ", ".join(held) + "}"


@functools.lru_cache(maxsize=4)
def _names(prefix: str, L: int) -> np.ndarray:
    """``prefix0`` .. ``prefixL`` as an array of strings (one per stage of a chain)."""
    return np.array([f"{prefix}{i}" for i in range(L + 1)], dtype=object)


def named_bits(prefix: str, mask: int, L: int) -> list:
    """The names ``prefix<i>`` of the set bits i <= L of ``mask``, in increasing i: in time
    linear in L (a shift per index was quadratic, and a profile describes every step of a
    long schedule)."""
    if mask < 1 << 62:
        out, i = [], 0
        while mask and i <= L:
            if mask & 1:
                out.append(f"{prefix}{i}")
            mask >>= 1
            i += 1
        return out
    raw = np.frombuffer(mask.to_bytes((mask.bit_length() + 7) // 8, "little"), dtype=np.uint8)
    bits = np.flatnonzero(np.unpackbits(raw, bitorder="little")[:L + 1])
    return _names(prefix, L)[bits].tolist()


def state_memory(chain: Chain, state: State) -> int:
    """Bytes held in ``state``: plain activations, tapes and the live gradient."""
    x, tp = chain.x_size, chain.tape_held
    mem = 0
    p = state.plain
    i = 0
    while p:
        if p & 1:
            mem += x[i]
        p >>= 1
        i += 1
    t = state.tapes >> 1
    i = 0
    while t:
        if t & 1:
            mem += tp[i]
        t >>= 1
        i += 1
    if state.bwd_next < chain.length:
        mem += x[state.bwd_next + 1]
    return mem


class Transition(NamedTuple):
    state: State
    peak: int  # memory while the op runs
    memory_after: int
    time: float


def transition(chain: Chain, state: State, memory: int, op: Op,
               allow_drop: bool = False) -> Transition | str:
    """Apply ``op`` to ``state`` (holding ``memory`` bytes).

    Returns the new state, the op's peak, the memory after and the op's time, or a string
    saying why the op is invalid.  Budget is not checked here.  One function per row of the
    operation table (docs/model.md) does the work.
    """
    kind = op.kind
    if kind in (FN, FCK, FALL):
        return _forward(chain, state, memory, kind, op.index)
    if kind == LOSS:
        return _loss(chain, state, memory)
    if kind == B:
        return _backward(chain, state, memory, op.index)
    if kind == DROP:
        if not allow_drop:
            return DROP_NOT_ALLOWED
        return _drop(chain, state, memory, op.target, op.index)
    return f"unknown operation {op!r}"  # pragma: no cover - Op validates its kind


def _available(chain: Chain, state: State, i: int) -> bool:
    """x_i can be read: held plain, or (when a backward reads it) inside the tape t_i."""
    return bool((state.plain | state.tapes & chain.saved_mask) >> i & 1)


def _unavailable(chain: Chain, i: int) -> str:
    if chain.saved(i):
        return f"x{i} is not available (neither x{i} nor t{i} is held)"
    return f"x{i} is not held (no backward reads it, so t{i} does not contain it)"


def _forward(chain: Chain, state: State, memory: int, kind: str, i: int) -> Transition | str:
    """Fn_i, Fck_i or Fall_i: each reads x_i (plain, or inside t_i)."""
    L = chain.length
    plain, tapes, bwd_next = state
    x = chain.x_size
    if i >= L:
        return f"stage index {i} is out of range 0..{L - 1}"
    if bwd_next < i:
        return f"B{i} has already run: a forward of stage {i} is no longer allowed"
    from_plain = plain >> i & 1
    if not _available(chain, state, i):
        return _unavailable(chain, i)
    if kind == FALL:
        return _record(chain, state, memory, i)
    if plain >> (i + 1) & 1:
        return f"x{i + 1} is already held"
    size = x[i + 1]
    peak = memory + size + chain.fwd_overhead[i]
    after = memory + size
    plain |= 1 << (i + 1)
    if kind == FN and i >= 1:
        if from_plain:
            plain &= ~(1 << i)
            after -= x[i]
        else:
            tapes &= ~(1 << i)
            after -= chain.tape_held[i - 1]
    return Transition(State(plain, tapes, bwd_next), peak, after, chain.fwd_time[i])


def _record(chain: Chain, state: State, memory: int, i: int) -> Transition | str:
    """Fall_i: adds t_{i+1}; an unsaved output x_{i+1} comes beside it as a plain value
    (unless a plain copy is already held, which is kept, or nothing can read it any more:
    B_{i+1}, or for i = L-1 the loss, has run), and an unsaved input x_i is freed (nothing
    will read it again)."""
    plain, tapes, bwd_next = state
    if tapes >> (i + 1) & 1:
        return f"t{i + 1} is already held"
    peak = memory + chain.tape_size[i] + chain.fall_overhead[i]
    after = memory + chain.tape_held[i]
    tapes |= 1 << (i + 1)
    if not chain.output_saved[i] and not plain >> (i + 1) & 1 and bwd_next > i:
        plain |= 1 << (i + 1)
        after += chain.x_size[i + 1]
    if i >= 1 and not chain.output_saved[i - 1]:
        plain &= ~(1 << i)  # an unsaved x_i is only ever plain: it was read from there
        after -= chain.x_size[i]
    return Transition(State(plain, tapes, bwd_next), peak, after, chain.fall_time[i])


def _loss(chain: Chain, state: State, memory: int) -> Transition | str:
    """The loss: reads x_L, adds d_L, frees a plain x_L."""
    L = chain.length
    plain, tapes, bwd_next = state
    x = chain.x_size
    if bwd_next != L:
        return "the loss has already run"
    from_plain = plain >> L & 1
    if not _available(chain, state, L):
        return _unavailable(chain, L)
    peak = memory + x[L] + chain.bwd_overhead[L]
    after = memory + x[L]
    if from_plain:
        plain &= ~(1 << L)
        after -= x[L]
    return Transition(State(plain, tapes, L - 1), peak, after, chain.bwd_time[L])


def _backward(chain: Chain, state: State, memory: int, i: int) -> Transition | str:
    """B_i: reads d_{i+1}, t_{i+1} and x_i (unless x_i is unsaved); adds d_i; frees d_{i+1},
    t_{i+1}, a plain x_i."""
    L = chain.length
    plain, tapes, bwd_next = state
    x = chain.x_size
    if i >= L:
        return f"stage index {i} is out of range 0..{L - 1}"
    if bwd_next == L:
        return f"d{i + 1} is not available: the loss has not run"
    if bwd_next < i:
        return f"B{i} has already run"
    if bwd_next > i:
        return f"d{i + 1} is not available (the live gradient is d{bwd_next + 1})"
    if not tapes >> (i + 1) & 1:
        return f"t{i + 1} is not held (B{i} needs the tape of F{i})"
    from_plain = plain >> i & 1
    if chain.saved(i) and not _available(chain, state, i):
        return _unavailable(chain, i)
    peak = memory + x[i] + chain.bwd_overhead[i]
    after = memory + x[i] - x[i + 1] - chain.tape_held[i]
    tapes &= ~(1 << (i + 1))
    if from_plain and i >= 1:
        plain &= ~(1 << i)
        after -= x[i]
    return Transition(State(plain, tapes, i - 1), peak, after, chain.bwd_time[i])


def _drop(chain: Chain, state: State, memory: int, target: str, i: int) -> Transition | str:
    """Drop (the optional extension): frees one held plain x_i (never x_0) or tape t_i."""
    L = chain.length
    plain, tapes, bwd_next = state
    if target == "x":
        if i > L:
            return f"value index {i} is out of range 0..{L}"
        if i == 0:
            return "x0 is never freed"
        if not plain >> i & 1:
            return f"x{i} is not held"
        return Transition(State(plain & ~(1 << i), tapes, bwd_next), memory,
                          memory - chain.x_size[i], 0.0)
    if i > L or i == 0:
        return f"tape index {i} is out of range 1..{L}"
    if not tapes >> i & 1:
        return f"t{i} is not held"
    return Transition(State(plain, tapes & ~(1 << i), bwd_next), memory,
                      memory - chain.tape_held[i - 1], 0.0)


@dataclass(frozen=True, slots=True)
class Step:
    """One row of the memory profile."""

    step: int
    op: str
    start: float  # time at which the op starts (seconds)
    time: float  # its duration
    memory_before: int
    peak: int  # memory while it runs (held + output + overhead)
    memory_after: int
    state: State = field(repr=False)  # the simulator state after it
    length: int = field(repr=False)  # L, to describe the state

    @property
    def held(self) -> str:
        """The values held after the op, e.g. ``{x0, t2, d3}`` (built on demand: cheap
        replays of long schedules do not pay for the text)."""
        return self.state.describe(self.length)

    def to_dict(self) -> dict:
        return {"step": self.step, "op": self.op, "start": self.start, "time": self.time,
                "memory_before": self.memory_before, "peak": self.peak,
                "memory_after": self.memory_after, "held": self.held}


@dataclass(frozen=True)
class SimulationResult:
    makespan: float
    peak_memory: int
    profile: tuple = field(repr=False)
    budget: int | None = None

    def to_dict(self) -> dict:
        return {
            "makespan": self.makespan,
            "peak_memory": self.peak_memory,
            "budget": self.budget,
            "profile": [s.to_dict() for s in self.profile],
        }


def check_budget(budget) -> int | None:
    """Validate a budget (bytes): None, or a non-negative integer."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
        raise RematError(f"budget = {budget!r} is not a number")
    if not isinstance(budget, numbers.Integral):
        f = float(budget)
        if math.isnan(f) or math.isinf(f) or not f.is_integer():
            raise RematError(f"budget = {budget!r} is not an integer number of bytes")
        budget = int(f)
    budget = int(budget)
    if budget < 0:
        raise RematError(f"budget = {budget} is negative")
    return budget


# The replay of schedules with transfers: remat_theory.model.offload registers it when
# imported (the package's __init__ imports it), so that this module imports nothing above.
_TWO_STREAM = None


def register_two_stream(replay) -> None:
    """Set the function that replays schedules with transfers (the two-stream model)."""
    global _TWO_STREAM
    _TWO_STREAM = replay


def replay_arguments(chain: Chain, schedule) -> Schedule:
    """The checks every replay makes first: a :class:`Chain`, and the schedule as a
    :class:`Schedule` (parsed from its token form, or built from operations)."""
    if not isinstance(chain, Chain):
        raise RematError(f"chain must be a Chain, got {type(chain).__name__}")
    if isinstance(schedule, str):
        return Schedule.parse(schedule)
    return schedule if isinstance(schedule, Schedule) else Schedule(schedule)


def checked_step(chain: Chain, state: State, memory: int, k: int, op: Op, budget: int | None,
                 allow_drop: bool) -> Transition:
    """Step ``k`` of a replay: the :class:`Transition` of ``op``, or the
    :class:`InvalidScheduleError` (:class:`BudgetExceededError`) :func:`simulate` raises."""
    r = transition(chain, state, memory, op, allow_drop)
    if isinstance(r, str):
        remedies = (Remedy(options=(("allow_drop", EQ, True),)),) \
            if r is DROP_NOT_ALLOWED else ()
        raise InvalidScheduleError(r, k, op.token, remedies=remedies)
    if budget is not None and r.peak > budget:
        raise BudgetExceededError(
            f"peak memory {r.peak} exceeds the budget {budget} (held {memory} before it, "
            f"values {state.describe(chain)})", k, op.token, r.peak, budget)
    return r


def check_final(chain: Chain, state: State) -> None:
    """The error of a schedule that ends in ``state`` without computing d0."""
    if not state.is_final():
        if state.bwd_next == chain.length:
            why = "the loss never ran"
        else:
            why = f"the last gradient computed is d{state.bwd_next + 1}"
        raise InvalidScheduleError(f"the schedule ends without computing d0 ({why})")


def check_x0(chain: Chain, budget: int | None) -> None:
    """The error of a budget below x0, which every schedule holds from the start."""
    if budget is not None and chain.x_size[0] > budget:
        raise InvalidScheduleError(
            f"budget {budget} is below the size of the input x0 ({chain.x_size[0]}), which is "
            f"always held")


def simulate(chain: Chain, schedule: Schedule | str | Iterable, budget: int | None = None,
             allow_drop: bool = False) -> SimulationResult:
    """Replay ``schedule`` on ``chain`` and check it against ``budget`` (bytes; None: no limit).

    Returns makespan (sum of op times), peak memory (bytes; max over the ops' peaks and the
    initial x_0) and the profile.  Raises :class:`InvalidScheduleError` (or its subclass
    :class:`BudgetExceededError`) naming the first invalid step, and also when the schedule
    ends without computing d_0.

    A schedule with transfers (``Offx{i}``, ``Offt{i}``, ``Prex{i}``, ``Pret{i}``) is
    replayed in the two-stream model by :func:`remat_theory.model.offload.simulate_offload`
    (makespan: the end of the last op; peak: the largest device memory over time); any
    other schedule here, exactly as always, whether or not the chain has a ``bandwidth``.

    Example (two stages; the peak is the loss's: x_0, t_1, t_2, d_2 and its overhead):

    >>> from remat_theory import Chain
    >>> chain = Chain(fwd_time=[1, 2], bwd_time=[3, 4, 0.5], x_size=[4, 2, 3],
    ...               tape_size=[5, 6], fwd_overhead=[1, 2], bwd_overhead=[1, 0, 2])
    >>> r = simulate(chain, "Fall0 Fall1 Loss B1 B0", budget=20)
    >>> r.makespan, r.peak_memory
    (10.5, 20)
    >>> simulate(chain, "Fall0 Fall1 Loss B1 B0", budget=19)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    remat_theory.model.errors.BudgetExceededError: step 2 (Loss): peak memory 20 exceeds ...
    """
    schedule = replay_arguments(chain, schedule)
    if any(op.is_transfer for op in schedule):  # the two-stream model (docs/model.md)
        if _TWO_STREAM is None:  # pragma: no cover - remat_theory/__init__ registers it
            raise RematError("the two-stream simulator is not loaded (import "
                             "remat_theory.model.offload)")
        return _TWO_STREAM(chain, schedule, budget, allow_drop)
    budget = check_budget(budget)
    state = State.initial(chain)
    memory = chain.x_size[0]
    peak = memory
    check_x0(chain, budget)
    clock = 0.0
    profile = []
    for k, op in enumerate(schedule):
        r = checked_step(chain, state, memory, k, op, budget, allow_drop)
        profile.append(Step(k, op.token, clock, r.time, memory, r.peak, r.memory_after,
                            r.state, chain.length))
        clock += r.time
        state, memory = r.state, r.memory_after
        peak = max(peak, r.peak)
    check_final(chain, state)
    return SimulationResult(makespan=clock, peak_memory=peak, profile=tuple(profile), budget=budget)
