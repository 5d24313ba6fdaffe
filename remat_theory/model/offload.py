"""The two-stream model: rematerialization and offloading (docs/model.md, "Offloading";
proofs/offload.md).

A chain with a ``bandwidth`` has a copy channel beside the compute stream.  A schedule is
still one token sequence, in issue order; compute ops (``Fn``, ``Fck``, ``Fall``, ``Loss``,
``B``, and ``Drop`` in the extension) run in that order on the compute stream, transfers
(``Offx{i}``, ``Offt{i}``, ``Prex{i}``, ``Pret{i}``) in that order on the channel, and the
two streams overlap.  This module is the referee of that model: :func:`simulate_offload`
replays such a schedule exactly (every op's stream, start and end; device memory at every
step) and rejects an invalid one naming the step and the reason.

Where values are (changed in issue order, op by op)
    Every value x_i (i >= 1) and t_i is absent, on the device, leaving it, or on the host.
    ``Off`` moves a device value to the host: from its issue the value cannot be read on the
    device, and its device copy is *pending* until the next compute op is issued, which
    waits for the copy and releases it.  ``Pre`` moves a host value back to the device.
    Compute ops read and free device values exactly as in the operation table (the device
    part of the state is a :class:`~remat_theory.model.simulator.State`, and the same
    :func:`~remat_theory.model.simulator.transition` decides validity).  Computing a value
    that has a host copy discards that copy, and so does the backward after which nothing
    reads it (B_i for x_i, the loss for x_L).  x_0 and the gradients are never offloaded.
    Host memory is unbounded.

Device memory (in issue order, as the executor's allocator sees it)
    The device memory held is that of the values on the device, the pending ones and the
    live gradient.  A compute op first releases the pending values (it has waited for their
    copies), then takes and frees exactly as in the operation table (its peak: held +
    output + transient).  A prefetch takes its value's size when it is issued.  An offload
    takes and frees nothing when issued.  The peak is the largest of these steps' peaks
    (at least x_0); it depends on the token sequence only, never on the times.  With no
    transfer it is exactly the single-stream simulator's peak.

When ops run (times)
    C: end of the last compute op issued (the compute stream is free); H: the channel is
    free; O: latest completion of an offload issued since the last compute op.

    - a compute op starts at ``max(C, O, ready(v) for each value v it reads)``;
    - an offload of v starts at ``max(H, ready(v))`` and copies for ``size / bandwidth``;
      it completes at ``max(copy end, end of the last compute op that read v)``;
    - a prefetch of v starts at ``max(H, C)``: after the compute op issued before it has
      ended, so that the memory that op frees may hold the copy; v is ready at its end.

    ``ready(v)`` is the end of the op that put v on the device (a forward or a prefetch).
    The makespan is the end of the last op, ``max(C, H, O)``.  With no transfer the compute
    ops run back to back: the makespan is the sum of their times, as always.

The replay (:func:`simulate_offload`) writes the times by value in place and finds the
leaving bytes and the values an op made from their bits, so an op's work does not grow
with the chain (but for the big-integer masks), and describes where the values are only
when a step's ``held`` is read; tests/test_offload_sim_linear.py compares it with its first,
quadratic, implementation.

Every start is a maximum of state times plus durations, so an op never starts later from
a state whose times are all earlier: :func:`dominates` is the exact dominance that exact
search (:mod:`solvers.offload.exhaustive`) uses, over the engine's own :func:`step`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

from remat_theory.model.chain import Chain
from remat_theory.model.errors import BudgetExceededError, InvalidScheduleError
from remat_theory.model.schedule import B, DROP, FALL, FCK, FN, LOSS, OFF, PRE, Op, Schedule
from remat_theory.model.simulator import (SimulationResult, State, check_budget, named_bits,
                                          register_two_stream, replay_arguments, transition)

COMPUTE, CHANNEL = "compute", "channel"
REPLAYING = "replaying the schedule with transfers in the two-stream simulator (the referee)"


class OffloadState(NamedTuple):
    """The engine's state after a prefix of a schedule (module docstring).  ``ready`` and
    ``lastread`` are indexed by value id (:func:`value_id`)."""

    dev: State  # device values and the backward next, as in the single-stream simulator
    host_plain: int  # bit i: x_i on the host
    host_tapes: int  # bit i: t_i on the host
    pend_plain: int  # bit i: a device copy of x_i offloaded, released by the next compute op
    pend_tapes: int
    memory: int  # device memory held (values on the device, pending copies, gradient)
    C: float
    H: float
    O: float
    ready: tuple
    lastread: tuple

    @classmethod
    def initial(cls, chain: Chain) -> "OffloadState":
        n = 2 * chain.length + 2
        return cls(State.initial(chain), 0, 0, 0, 0, chain.x_size[0], 0.0, 0.0, 0.0,
                   (0.0,) * n, (0.0,) * n)

    def is_final(self) -> bool:
        return self.dev.is_final()

    @property
    def makespan(self) -> float:
        """End of the last op issued so far."""
        return max(self.C, self.H, self.O)

    def logical(self) -> tuple:
        """Where every value is (its memory is a function of it)."""
        return (self.dev, self.host_plain, self.host_tapes, self.pend_plain, self.pend_tapes)

    def times(self) -> tuple:
        """The times that decide every continuation's times, with those that can no longer
        matter set to 0 (a ready time or last read no later than both streams' free times;
        an offload completion no later than C)."""
        C, H, O = self.C, self.H, self.O
        low = min(C, H)
        return tuple([C, H, O if O > C else 0.0]
                     + [t if t > low else 0.0 for t in self.ready]
                     + [t if t > H else 0.0 for t in self.lastread])


def dominates(a: tuple, b: tuple) -> bool:
    """``a`` (a :meth:`OffloadState.times`) is no later than ``b`` everywhere: from the same
    logical state, every continuation of ``a`` ends no later (proofs/offload.md, O.4)."""
    return all(x <= y for x, y in zip(a, b))


def value_id(chain: Chain, target: str, i: int) -> int:
    """Index of x_i (``i``) or t_i (``L + 1 + i``) in ``ready`` / ``lastread``."""
    return i if target == "x" else chain.length + 1 + i


def value_size(chain: Chain, target: str, i: int) -> int:
    """Bytes of x_i, or held by t_i (``tape_held``), on the device."""
    return chain.x_size[i] if target == "x" else chain.tape_held[i - 1]


def transfer_time(chain: Chain, size: int) -> float:
    """Seconds to copy ``size`` bytes one way (infinite on a channel of bandwidth 0)."""
    if size == 0:
        return 0.0
    if not chain.bandwidth:
        return math.inf
    return size / chain.bandwidth


class Timing(NamedTuple):
    """What :func:`step` reports about the op it issued: its stream, start and end (for an
    offload, its completion), the device memory before it (after the pending releases, for
    a compute op), its peak and the memory after it."""

    stream: str
    start: float
    end: float
    memory_before: int
    peak: int
    memory_after: int


def _describe(chain: Chain, st: OffloadState) -> str:
    return _where_text(chain.length, _where(st))


def _where(st: OffloadState) -> tuple:
    """Where the values are (what :func:`_where_text` describes): five immutable fields,
    kept by each step of a replay at no cost and described on demand."""
    return (st.dev, st.host_plain, st.host_tapes, st.pend_plain, st.pend_tapes)


def _where_text(L: int, where: tuple) -> str:
    """``device {x0, t2, d3}, host {x1}, leaving {t1}``: in time linear in L (the names of
    a mask's bits, as the single-stream simulator's description finds them)."""
    dev, host_plain, host_tapes, pend_plain, pend_tapes = where
    host = named_bits("x", host_plain, L) + named_bits("t", host_tapes & ~1, L)
    pend = named_bits("x", pend_plain, L) + named_bits("t", pend_tapes & ~1, L)
    out = f"device {dev.describe(L)}, host {{{', '.join(host)}}}"
    return out + (f", leaving {{{', '.join(pend)}}}" if pend else "")


def reads(chain: Chain, dev: State, op: Op) -> list:
    """The value ids a valid compute op reads on the device."""
    L = chain.length
    kind, i = op.kind, op.index
    out = []

    def source(j):
        if dev.plain >> j & 1:
            out.append(j)
        elif j >= 1 and dev.tapes >> j & 1:
            out.append(L + 1 + j)

    if kind in (FN, FCK, FALL):
        source(i)
    elif kind == LOSS:
        source(L)
    elif kind == B:
        out.append(L + 1 + i + 1)
        if chain.saved(i):
            source(i)
    elif kind == DROP:
        out.append(value_id(chain, op.target, i))
    return out


def _pending_bytes(chain: Chain, st: OffloadState) -> int:
    """Bytes of the device copies still leaving: the values offloaded since the last compute
    op, a handful, found by their bits (never a scan of the chain)."""
    total = 0
    for mask, sizes, shift in ((st.pend_plain, chain.x_size, 0),
                               (st.pend_tapes, chain.tape_held, 1)):
        while mask:
            low = mask & -mask
            total += sizes[low.bit_length() - 1 - shift]
            mask ^= low
    return total


def _kept(host: int, made: int, below: int) -> int:
    """``host`` less the bits of ``made`` and those at ``below`` and above (``host &
    ~made & (1 << below) - 1``, with no work where nothing is cleared, the common case)."""
    gone = host & made
    if gone:
        host ^= gone
    if host.bit_length() > below:
        host &= (1 << below) - 1
    return host


def step(chain: Chain, st: OffloadState, op: Op, allow_drop: bool = False
         ) -> "tuple[OffloadState, Timing] | str":
    """Issue ``op`` after the prefix summarized by ``st``: the new state and the op's
    :class:`Timing`, or a string saying why the op is invalid (the budget is the caller's
    to check against the timing's peak)."""
    return _advance(chain, st, op, allow_drop, False)


def _advance(chain: Chain, st: OffloadState, op: Op, allow_drop: bool, inplace: bool
             ) -> "tuple[OffloadState, Timing] | str":
    """:func:`step`, in time independent of the chain's length (but for the bit operations
    on the state's masks) when ``inplace``: ``st.ready`` and ``st.lastread`` are then lists,
    written in place and shared by the new state (:func:`simulate_offload`); otherwise the
    new state has new tuples (exact search keeps every state).  Nothing is written before
    the op is found valid."""
    L = chain.length
    dev = st.dev
    if op.kind in (OFF, PRE):
        if chain.bandwidth is None:
            return (f"{op.token} is a transfer, and the chain has no bandwidth (the copy "
                    f"channel's bytes per second: the chain field 'bandwidth')")
        i, target = op.index, op.target
        name = f"{target}{i}"
        if target == "x" and i > L or target == "t" and not 1 <= i <= L:
            return f"value index {i} is out of range {'0' if target == 'x' else '1'}..{L}"
        vid = value_id(chain, target, i)
        size = value_size(chain, target, i)
        bit = 1 << i
        plain, tapes, bwd_next = dev
        hp, ht, pp, pt = st.host_plain, st.host_tapes, st.pend_plain, st.pend_tapes
        on_dev = (plain if target == "x" else tapes) & bit
        on_host = (hp if target == "x" else ht) & bit
        mem = st.memory
        if op.kind == OFF:
            if target == "x" and i == 0:
                return "x0 is never offloaded (it is held from start to end)"
            if not on_dev:
                return f"{name} is not on the device" + (" (it is on the host)" if on_host else "")
            if size and not chain.bandwidth:
                return f"{op.token}: the bandwidth is 0, so the copy of {name} never ends"
            if (pp if target == "x" else pt) & bit:
                # its earlier device copy is still leaving: one pending bit per value
                # cannot count two copies, and a second copy to the host adds nothing
                return (f"{name} was offloaded since the last compute op and its device "
                        f"copy is still leaving: issue a compute op before offloading it "
                        f"again")
            start = max(st.H, st.ready[vid])
            copy_end = start + transfer_time(chain, size)
            done = max(copy_end, st.lastread[vid])
            # bit is set where it is cleared (on the device): an exclusive or, cheaper
            # than a mask's complement on a long chain's big integers
            if target == "x":
                plain, hp, pp = plain ^ bit, hp | bit, pp | bit
            else:
                tapes, ht, pt = tapes ^ bit, ht | bit, pt | bit
            new = OffloadState(State(plain, tapes, bwd_next), hp, ht, pp, pt, mem, st.C,
                               copy_end, max(st.O, done), st.ready, st.lastread)
            return new, Timing(CHANNEL, start, done, mem, mem, mem)
        if not on_host:
            return f"{name} is not on the host" + (" (it is on the device)" if on_dev else
                                                   " (offload it first)")
        if size and not chain.bandwidth:
            return f"{op.token}: the bandwidth is 0, so the copy of {name} never ends"
        start = max(st.H, st.C)
        end = start + transfer_time(chain, size)
        if target == "x":
            plain, hp = plain | bit, hp ^ bit  # bit is set on the host
        else:
            tapes, ht = tapes | bit, ht ^ bit
        ready, lastread = (st.ready, st.lastread) if inplace else \
            (list(st.ready), list(st.lastread))
        ready[vid] = end
        lastread[vid] = 0.0
        if not inplace:
            ready, lastread = tuple(ready), tuple(lastread)
        new = OffloadState(State(plain, tapes, bwd_next), hp, ht, pp, pt, mem + size, st.C,
                           end, st.O, ready, lastread)
        return new, Timing(CHANNEL, start, end, mem, mem + size, mem + size)

    # a compute op: it waits for the pending copies and releases them, then the
    # single-stream rules decide validity, peak and memory after
    r = transition(chain, dev, 0, op, allow_drop)
    if isinstance(r, str):
        return _with_host_hint(chain, st, op, r)
    mem = st.memory - (_pending_bytes(chain, st) if st.pend_plain | st.pend_tapes else 0)
    peak = mem + r.peak
    after = mem + r.memory_after
    read = reads(chain, dev, op)
    ready, lastread = (st.ready, st.lastread) if inplace else \
        (list(st.ready), list(st.lastread))
    start = max(st.C, st.O, max([ready[v] for v in read], default=0.0))
    end = start + r.time
    for v in read:
        if lastread[v] < end:
            lastread[v] = end
    new_dev = r.state
    made_plain = 0 if new_dev.plain == dev.plain else (new_dev.plain ^ dev.plain) & new_dev.plain
    made_tapes = 0 if new_dev.tapes == dev.tapes else (new_dev.tapes ^ dev.tapes) & new_dev.tapes
    for m, base in ((made_plain, 0), (made_tapes, L + 1)):
        while m:  # the values it made (one or two), bit by bit
            low = m & -m
            v = base + low.bit_length() - 1
            ready[v], lastread[v] = end, 0.0
            m ^= low
    if not inplace:
        ready, lastread = tuple(ready), tuple(lastread)
    # host copies nothing reads any more: recomputed ones, and those whose backward ran
    # (x_i for i > bwd_next, t_i for i > bwd_next + 1)
    hp, ht = st.host_plain, st.host_tapes
    if hp:
        hp = _kept(hp, made_plain, new_dev.bwd_next + 1)
    if ht:
        ht = _kept(ht, made_tapes, new_dev.bwd_next + 2)
    new = OffloadState(new_dev, hp, ht, 0, 0, after, end, st.H, 0.0, ready, lastread)
    return new, Timing(COMPUTE, start, end, mem, peak, after)


def _with_host_hint(chain: Chain, st: OffloadState, op: Op, why: str) -> str:
    """The single-stream reason, plus where the value it lacks is when it is on the host."""
    i = chain.length if op.kind == LOSS else op.index
    hints = []
    for j in ([i, i + 1] if op.kind == B else [i]):
        if st.host_plain >> j & 1:
            hints.append(f"x{j}")
        if st.host_tapes >> j & 1:
            hints.append(f"t{j}")
    if hints:
        return f"{why}; {' and '.join(hints)} on the host: prefetch first"
    return why


@dataclass(frozen=True, slots=True)
class OffloadStep:
    """One op of a two-stream schedule: its stream, start and duration (for an offload,
    until its completion), and the device memory before it, while it runs and after it
    (:class:`Timing`); ``held`` says where the values are after it."""

    step: int
    op: str
    stream: str
    start: float
    time: float
    memory_before: int
    peak: int
    memory_after: int
    where: tuple = field(repr=False)  # where the values are after it (:func:`_where`)
    length: int = field(repr=False)  # L, to describe them

    @property
    def held(self) -> str:
        """Where the values are after the op, e.g. ``device {x0, t2}, host {t1}`` (built on
        demand, as the single-stream simulator's: the text of every step of a long
        schedule is quadratic in its length)."""
        return _where_text(self.length, self.where)

    def to_dict(self) -> dict:
        return {"step": self.step, "op": self.op, "stream": self.stream, "start": self.start,
                "time": self.time, "memory_before": self.memory_before, "peak": self.peak,
                "memory_after": self.memory_after, "held": self.held}


@dataclass(frozen=True)
class OffloadSimulationResult(SimulationResult):
    """A :class:`SimulationResult` of the two-stream model: ``profile`` holds one
    :class:`OffloadStep` per op (its stream, start, duration and device memory)."""

    @property
    def compute_steps(self) -> tuple:
        return tuple(s for s in self.profile if s.stream == COMPUTE)

    @property
    def channel_steps(self) -> tuple:
        return tuple(s for s in self.profile if s.stream == CHANNEL)


#: Operations replayed between two calls of :func:`simulate_offload`'s ``check``.
CHECK_EVERY = 1 << 13


def simulate_offload(chain: Chain, schedule: "Schedule | str | Iterable",
                     budget: int | None = None, allow_drop: bool = False, *,
                     check: "Callable[[str], None] | None" = None, profile: bool = True
                     ) -> OffloadSimulationResult:
    """Replay a two-stream schedule (module docstring); raise :class:`InvalidScheduleError`
    (or :class:`BudgetExceededError`) naming the first invalid step.

    In time linear in the schedule's length, but for the bit operations on the state's masks
    (big integers of L bits, as the single-stream simulator's: an op takes 9-28 us from 100
    to 10,000 stages, 26-32 us at 100,000; benchmarks/results/offload_sim_speed.json).
    ``check(what)``, when given, is called every :data:`CHECK_EVERY` ops (a deadline's
    check, which raises to stop the replay); ``profile=False`` keeps no profile (the
    result's is empty): the makespan and the peak only, as the registry's replay needs."""
    schedule = replay_arguments(chain, schedule)
    budget = check_budget(budget)
    x0 = chain.x_size[0]
    if budget is not None and x0 > budget:
        raise InvalidScheduleError(
            f"budget {budget} is below the size of the input x0 ({x0}), which is always held")
    st = OffloadState.initial(chain)
    # the times by value, written in place (a step's tuples would be copied at every op)
    ready, lastread = list(st.ready), list(st.lastread)
    st = st._replace(ready=ready, lastread=lastread)
    L = chain.length
    steps = []
    peak = x0
    for k, op in enumerate(schedule):
        if check is not None and not k % CHECK_EVERY:
            check(REPLAYING)
        r = _advance(chain, st, op, allow_drop, True)
        if isinstance(r, str):
            raise InvalidScheduleError(r, k, op.token)
        new, tm = r
        if budget is not None and tm.peak > budget:  # (st's masks: as before the op)
            raise BudgetExceededError(
                f"peak memory {tm.peak} exceeds the budget {budget} (held {tm.memory_before} "
                f"before it; {_describe(chain, st)})", k, op.token, tm.peak, budget)
        if profile:
            steps.append(OffloadStep(k, op.token, tm.stream, tm.start, tm.end - tm.start,
                                     tm.memory_before, tm.peak, tm.memory_after, _where(new),
                                     L))
        if tm.peak > peak:
            peak = tm.peak
        st = new
    if not st.is_final():
        if st.dev.bwd_next == chain.length:
            why = "the loss never ran"
        else:
            why = f"the last gradient computed is d{st.dev.bwd_next + 1}"
        raise InvalidScheduleError(f"the schedule ends without computing d0 ({why})")
    return OffloadSimulationResult(makespan=st.makespan, peak_memory=peak,
                                   profile=tuple(steps), budget=budget)


register_two_stream(simulate_offload)
