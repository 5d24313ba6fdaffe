"""The two-stream model: rematerialization and offloading (docs/model.md, "Offloading";
proofs/offload.md).

A chain with a ``bandwidth`` has a copy channel beside the compute stream.  A schedule is
still one token sequence, in issue order; compute ops (``Fn``, ``Fck``, ``Fall``, ``Loss``,
``B``, and ``Drop`` in the extension) run in that order on the compute stream, transfers
(``Offx{i}``, ``Offt{i}``, ``Prex{i}``, ``Pret{i}``) in that order on the channel, and the
two streams overlap.  This module is the referee of that model: :func:`simulate_offload`
replays such a schedule exactly (every op's stream, start and end; device memory over time
as a list of events) and rejects an invalid one naming the step and the reason.

Where values are (changed in issue order, op by op: the *logical* state)
    Every value x_i (i >= 1) and t_i is absent, on the device or on the host.  ``Off`` moves
    a value from the device to the host, ``Pre`` from the host to the device.  Compute ops
    read and free device values exactly as in the operation table (the device part of the
    state is a :class:`~remat_theory.model.simulator.State`, and the same
    :func:`~remat_theory.model.simulator.transition` decides validity); a value on the host
    cannot be read.  Computing a value that has a host copy discards that copy, and so does
    the backward after which nothing reads it (B_i for x_i, the loss for x_L).  x_0 and the
    gradients are never offloaded.  Host memory is unbounded.

When ops run (times)
    C: the compute stream is free; S: the start of the last compute op issued; H: the
    channel is free; O: the latest completion of an offload issued so far.

    - a compute op starts at ``max(C, O, ready(v) for every value v it reads)``: after
      every offload issued before it has completed (so it may use the memory they free)
      and once its inputs are fully on the device;
    - an offload of v starts at ``max(H, S, ready(v))``, copies for ``size / bandwidth``;
      the device copy is freed at its completion ``max(copy end, end of the last compute
      op issued before it that reads v)``;
    - a prefetch of v starts at ``max(H, S)`` (v is on the host by then: its offload was
      issued earlier on the same channel), takes its device memory at its start, and v is
      ready at its end.

    ``ready(v)`` is the end of the op that put v on the device (its forward or its
    prefetch).  Transfers never start before the compute op issued before them has
    started: the token order is the order in which the executor reaches them.

Memory over time
    A compute op takes its output and transient at its start and releases its transient
    and the values it frees at its end (the table's peak and after); a prefetch takes its
    size at its start; an offload releases its size at its completion.  At one instant,
    the releases of ops that started earlier come first, then the ops starting at that
    instant in issue order, each zero-time op releasing right after it takes.  The peak is
    the largest level over this sequence of events (at least x_0): with no transfer, it
    is exactly the single-stream simulator's peak, and the makespan its sum of times.

The makespan is the end of the last op: ``max(C, H)`` at the end.

The engine is a pure function on :class:`OffloadState` (:func:`step`), so that exact search
(:mod:`solvers.offload_exhaustive`) uses the very rules of the referee, and the state is
*translation invariant*: nothing after the start of the last compute op depends on what
happened before it except through the state (:func:`state_key`).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from remat_theory.model.chain import Chain
from remat_theory.model.errors import BudgetExceededError, InvalidScheduleError, RematError
from remat_theory.model.schedule import (B, DROP, FALL, FCK, FN, LOSS, OFF, PRE, Op,
                                         Schedule)
from remat_theory.model.simulator import SimulationResult, State, check_budget, transition

COMPUTE, CHANNEL = "compute", "channel"


class OffloadState(NamedTuple):
    """The engine's state after a prefix of a schedule (module docstring).

    ``events`` are the memory events not yet final (time > ``S``), sorted by
    ``(time, phase, seq, sub)``; ``level`` is the device memory after every final event
    and ``peak`` the largest level reached by a final event.  ``ready`` and ``lastread`` are
    indexed by value id (:func:`value_id`)."""

    dev: State  # device values and the backward next, as in the single-stream simulator
    host_plain: int  # bit i: x_i on the host
    host_tapes: int  # bit i: t_i on the host
    C: float
    S: float
    H: float
    O: float
    ready: tuple
    lastread: tuple
    events: tuple  # (time, phase, seq, sub, delta, step)
    level: int
    peak: int
    seq: int  # ops issued so far

    @classmethod
    def initial(cls, chain: Chain) -> "OffloadState":
        n = 2 * chain.length + 2
        x0 = chain.x_size[0]
        return cls(State.initial(chain), 0, 0, 0.0, 0.0, 0.0, 0.0, (0.0,) * n, (0.0,) * n,
                   (), x0, x0, 0)

    def is_final(self) -> bool:
        return self.dev.is_final()

    @property
    def makespan(self) -> float:
        """End of the last op issued so far."""
        return max(self.C, self.H, self.O)


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
    """What :func:`step` reports about the op it issued."""

    stream: str
    start: float
    end: float  # for an offload: its completion (when its memory is freed)


def _describe(chain: Chain, st: OffloadState) -> str:
    text = st.dev.describe(chain)
    host = [f"x{i}" for i in range(chain.length + 1) if st.host_plain >> i & 1]
    host += [f"t{i}" for i in range(1, chain.length + 1) if st.host_tapes >> i & 1]
    return f"device {text}, host {{{', '.join(host)}}}"


def _reads(chain: Chain, dev: State, op: Op) -> list:
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


def _insert(events: list, ev: tuple) -> None:
    bisect.insort(events, ev)


def _finalize(st_events: list, upto: float, level: int, peak: int, budget: int | None,
              record: list | None):
    """Make final every event at time <= ``upto``: returns (remaining, level, peak,
    (step, time, level) of the first event that exceeds the budget or None)."""
    k = 0
    over = None
    n = len(st_events)
    while k < n and st_events[k][0] <= upto:
        ev = st_events[k]
        level += ev[4]
        if record is not None:
            record.append((ev[0], ev[5], ev[4], level))
        if level > peak:
            peak = level
            if budget is not None and level > budget and over is None:
                over = (ev[5], ev[0], level)
        k += 1
    return st_events[k:], level, peak, over


def _event(time: float, start: float, seq: int, is_end: bool, delta: int) -> tuple:
    """An event's sort key and payload: an end after its op's start comes before the
    starts at the same instant (phase 0); starts, and the end of a zero-time op right
    after its own start, follow in issue order (phase 1)."""
    if is_end and time > start:
        return (time, 0, seq, 0, delta, seq)
    return (time, 1, seq, 1 if is_end else 0, delta, seq)


def step(chain: Chain, st: OffloadState, op: Op, budget: int | None = None,
         allow_drop: bool = False, record: list | None = None
         ) -> "tuple[OffloadState, Timing] | str | BudgetExceededError":
    """Issue ``op`` after the prefix summarized by ``st``.

    Returns the new state and the op's timing, a string saying why the op is invalid, or a
    :class:`BudgetExceededError` (not raised) when an event made final by this op takes the
    device memory above ``budget``.  ``record`` (a list) receives every event made final,
    as ``(time, step, delta, level)``.
    """
    L = chain.length
    dev = st.dev
    seq = st.seq
    if op.kind in (OFF, PRE):
        if chain.bandwidth is None:
            return (f"{op.token} is a transfer, and the chain has no bandwidth (the copy "
                    f"channel's bytes per second: the chain field 'bandwidth')")
        i, target = op.index, op.target
        name = f"{target}{i}"
        if target == "x" and i > L or target == "t" and not 1 <= i <= L:
            return (f"value index {i} is out of range {'0' if target == 'x' else '1'}..{L}")
        vid = value_id(chain, target, i)
        size = value_size(chain, target, i)
        bit = 1 << i
        if op.kind == OFF:
            if target == "x" and i == 0:
                return "x0 is never offloaded (it is held from start to end)"
            held = dev.plain if target == "x" else dev.tapes
            if not held & bit:
                where = (st.host_plain if target == "x" else st.host_tapes) & bit
                return f"{name} is not on the device" + (" (it is on the host)" if where else "")
            if size and not chain.bandwidth:
                return f"{op.token}: the bandwidth is 0, so the copy of {name} never ends"
            start = max(st.H, st.S, st.ready[vid])
            copy_end = start + transfer_time(chain, size)
            done = max(copy_end, st.lastread[vid])
            events = list(st.events)
            _insert(events, _event(done, start, seq, True, -size))
            if target == "x":
                dev = State(dev.plain & ~bit, dev.tapes, dev.bwd_next)
                hp, ht = st.host_plain | bit, st.host_tapes
            else:
                dev = State(dev.plain, dev.tapes & ~bit, dev.bwd_next)
                hp, ht = st.host_plain, st.host_tapes | bit
            new = st._replace(dev=dev, host_plain=hp, host_tapes=ht, H=copy_end,
                              O=max(st.O, done), events=tuple(events), seq=seq + 1)
            return new, Timing(CHANNEL, start, done)
        # prefetch
        on_host = (st.host_plain if target == "x" else st.host_tapes) & bit
        if not on_host:
            held = (dev.plain if target == "x" else dev.tapes) & bit
            return f"{name} is not on the host" + (" (it is on the device)" if held else
                                                   " (offload it first)")
        if size and not chain.bandwidth:
            return f"{op.token}: the bandwidth is 0, so the copy of {name} never ends"
        held = (dev.plain if target == "x" else dev.tapes) & bit
        if held:  # pragma: no cover - a value is never in both places
            return f"{name} is already on the device"
        start = max(st.H, st.S)
        end = start + transfer_time(chain, size)
        events = list(st.events)
        _insert(events, _event(start, start, seq, False, size))
        if target == "x":
            dev = State(dev.plain | bit, dev.tapes, dev.bwd_next)
            hp, ht = st.host_plain & ~bit, st.host_tapes
        else:
            dev = State(dev.plain, dev.tapes | bit, dev.bwd_next)
            hp, ht = st.host_plain, st.host_tapes & ~bit
        ready = list(st.ready)
        ready[vid] = end
        lastread = list(st.lastread)
        lastread[vid] = 0.0
        new = st._replace(dev=dev, host_plain=hp, host_tapes=ht, H=end, events=tuple(events),
                          ready=tuple(ready), lastread=tuple(lastread), seq=seq + 1)
        return new, Timing(CHANNEL, start, end)

    # a compute op: the single-stream rules decide validity, alloc and release
    r = transition(chain, dev, 0, op, allow_drop)
    if isinstance(r, str):
        return _with_host_hint(chain, st, op, r)
    alloc = r.peak
    release = r.peak - r.memory_after
    reads = _reads(chain, dev, op)
    start = max(st.C, st.O, max((st.ready[v] for v in reads), default=0.0))
    end = start + r.time
    events = list(st.events)
    _insert(events, _event(start, start, seq, False, alloc))
    _insert(events, _event(end, start, seq, True, -release))
    ready = list(st.ready)
    lastread = list(st.lastread)
    for v in reads:
        if lastread[v] < end:
            lastread[v] = end
    new_dev = r.state
    made_plain = new_dev.plain & ~dev.plain
    made_tapes = new_dev.tapes & ~dev.tapes
    for i in range(L + 1):
        if made_plain >> i & 1:
            ready[i], lastread[i] = end, 0.0
        if made_tapes >> i & 1:
            ready[L + 1 + i], lastread[L + 1 + i] = end, 0.0
    # host copies nothing reads any more: recomputed ones, and those whose backward ran
    keep = (1 << (new_dev.bwd_next + 1)) - 1 if new_dev.bwd_next >= 0 else 0
    hp = st.host_plain & ~made_plain & keep
    ht = st.host_tapes & ~made_tapes & (keep << 1 | 1)
    remaining, level, peak, over = _finalize(events, start, st.level, st.peak, budget, record)
    new = OffloadState(new_dev, hp, ht, end, start, st.H, st.O, tuple(ready), tuple(lastread),
                       tuple(remaining), level, peak, seq + 1)
    if over is not None:
        return _over_budget(chain, st, over, budget)
    return new, Timing(COMPUTE, start, end)


def _with_host_hint(chain: Chain, st: OffloadState, op: Op, why: str) -> str:
    """The single-stream reason, plus where the value it lacks is when it is on the host."""
    i = op.index
    if op.kind == LOSS:
        i = chain.length
    hints = []
    for j in ([i, i + 1] if op.kind == B else [i]):
        if j is None:
            continue
        if st.host_plain >> j & 1:
            hints.append(f"x{j}")
        if st.host_tapes >> j & 1:
            hints.append(f"t{j}")
    if hints:
        return f"{why}; {' and '.join(hints)} on the host: prefetch first"
    return why


def _over_budget(chain: Chain, st, over, budget) -> BudgetExceededError:
    k, time, level = over
    return BudgetExceededError(
        f"device memory reaches {level} at time {time:.6g}, above the budget {budget}",
        k, None, level, budget)


def finish(chain: Chain, st: OffloadState, budget: int | None = None,
           record: list | None = None) -> "OffloadState | BudgetExceededError":
    """Make every event final (the schedule is over): the state's ``peak`` is then the
    schedule's peak."""
    remaining, level, peak, over = _finalize(list(st.events), math.inf, st.level, st.peak,
                                             budget, record)
    if over is not None:
        return _over_budget(chain, st, over, budget)
    return st._replace(events=tuple(remaining), level=level, peak=peak)


def state_key(st: OffloadState) -> tuple:
    """What determines every continuation of ``st``, with times relative to ``st.S``
    (proofs/offload.md, Lemma O.3): two states with the same key and final peaks within
    the budget have the same continuations, shifted by the difference of their ``S``."""
    b = st.S
    rel = lambda t: t - b if t > b else 0.0  # noqa: E731
    return (st.dev, st.host_plain, st.host_tapes, st.C - b, rel(st.H), rel(st.O),
            tuple(rel(t) for t in st.ready), tuple(rel(t) for t in st.lastread),
            tuple((e[0] - b, e[1], e[3], e[4]) for e in st.events if e[4]), st.level)


@dataclass(frozen=True, slots=True)
class OffloadStep:
    """One op of a two-stream schedule: its stream, start and duration (for an offload,
    until its completion), and the device memory just before its start event, right after
    it, and right after its end event."""

    step: int
    op: str
    stream: str
    start: float
    time: float
    memory_before: int
    peak: int
    memory_after: int
    held: str = field(default="")

    def to_dict(self) -> dict:
        return {"step": self.step, "op": self.op, "stream": self.stream, "start": self.start,
                "time": self.time, "memory_before": self.memory_before, "peak": self.peak,
                "memory_after": self.memory_after, "held": self.held}


@dataclass(frozen=True)
class OffloadSimulationResult(SimulationResult):
    """A :class:`SimulationResult` of the two-stream model: ``profile`` holds
    :class:`OffloadStep` rows, ``events`` the device memory over time as
    ``(time, step, delta, memory after)``, in the order of the model."""

    events: tuple = field(default=(), repr=False)

    @property
    def compute_steps(self) -> tuple:
        return tuple(s for s in self.profile if s.stream == COMPUTE)

    @property
    def channel_steps(self) -> tuple:
        return tuple(s for s in self.profile if s.stream == CHANNEL)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["events"] = [{"time": t, "step": k, "delta": dm, "memory": m}
                       for t, k, dm, m in self.events]
        return d


def simulate_offload(chain: Chain, schedule: "Schedule | str | Iterable",
                     budget: int | None = None, allow_drop: bool = False
                     ) -> OffloadSimulationResult:
    """Replay a two-stream schedule (module docstring); raise :class:`InvalidScheduleError`
    (or :class:`BudgetExceededError`) naming the first invalid step."""
    if not isinstance(chain, Chain):
        raise RematError(f"chain must be a Chain, got {type(chain).__name__}")
    if isinstance(schedule, str):
        schedule = Schedule.parse(schedule)
    elif not isinstance(schedule, Schedule):
        schedule = Schedule(schedule)
    budget = check_budget(budget)
    x0 = chain.x_size[0]
    if budget is not None and x0 > budget:
        raise InvalidScheduleError(
            f"budget {budget} is below the size of the input x0 ({x0}), which is always held")
    st = OffloadState.initial(chain)
    record: list = []
    timings = []
    helds = []
    ops = list(schedule)
    for k, op in enumerate(ops):
        r = step(chain, st, op, budget, allow_drop, record)
        if isinstance(r, str):
            raise InvalidScheduleError(r, k, op.token)
        if isinstance(r, BudgetExceededError):
            raise _named(r, ops)
        st, timing = r
        timings.append(timing)
        helds.append(_describe(chain, st))
    if not st.is_final():
        if st.dev.bwd_next == chain.length:
            why = "the loss never ran"
        else:
            why = f"the last gradient computed is d{st.dev.bwd_next + 1}"
        raise InvalidScheduleError(f"the schedule ends without computing d0 ({why})")
    r = finish(chain, st, budget, record)
    if isinstance(r, BudgetExceededError):
        raise _named(r, ops)
    st = r
    # per-op memory: the level before and after its start event, and after its end event
    before, after_start, after_end = {}, {}, {}
    level = x0
    for t, k, delta, m in record:
        if k not in before:
            before[k], after_start[k] = m - delta, m
        after_end[k] = m
        level = m
    profile = []
    for k, (op, tm) in enumerate(zip(ops, timings)):
        b, a = before.get(k, level), after_end.get(k, level)
        peak = b if op.kind == OFF else after_start.get(k, level)  # an offload only frees
        profile.append(OffloadStep(k, op.token, tm.stream, tm.start, tm.end - tm.start, b,
                                   peak, a, helds[k]))
    profile = tuple(profile)
    return OffloadSimulationResult(makespan=st.makespan, peak_memory=st.peak, profile=profile,
                                   budget=budget, events=tuple(record))


def _named(err: BudgetExceededError, ops: list) -> BudgetExceededError:
    k = err.step
    token = ops[k].token if k is not None and k < len(ops) else None
    msg = str(err.reason) if hasattr(err, "reason") else str(err)
    return BudgetExceededError(msg, k, token, err.peak, err.budget)


def has_transfers(schedule: Iterable) -> bool:
    """True when a schedule holds an offload or a prefetch."""
    return any(op.kind in (OFF, PRE) for op in schedule)
