"""The two-stream simulator as it was first written (remat_theory/model/offload.py before
its replay was made linear in the schedule's length), kept as the oracle of
tests/test_offload_sim_linear.py: the same model, stepped op by op on immutable states
(the times by value copied as tuples at every op, the leaving bytes and the description
found by a scan of the chain).  Not part of the package.

:func:`reference_simulate_offload` returns ``(makespan, peak, profile)``, the profile as
the rows of ``OffloadSimulationResult.to_dict()``, or raises the error the simulator
raises.  Only the state's type, the single-stream rules and the ops' reads and sizes are
the package's (unchanged by that work)."""
from __future__ import annotations

from typing import Iterable

from remat_theory.model.chain import Chain
from remat_theory.model.errors import BudgetExceededError, InvalidScheduleError
from remat_theory.model.offload import (CHANNEL, COMPUTE, OffloadState, Timing, reads,
                                        transfer_time, value_id, value_size)
from remat_theory.model.schedule import B, LOSS, OFF, PRE, Op, Schedule
from remat_theory.model.simulator import State, check_budget, replay_arguments, transition


def _describe(chain: Chain, st: OffloadState) -> str:
    text = st.dev.describe(chain)
    L = chain.length
    host = [f"x{i}" for i in range(L + 1) if st.host_plain >> i & 1]
    host += [f"t{i}" for i in range(1, L + 1) if st.host_tapes >> i & 1]
    pend = [f"x{i}" for i in range(L + 1) if st.pend_plain >> i & 1]
    pend += [f"t{i}" for i in range(1, L + 1) if st.pend_tapes >> i & 1]
    out = f"device {text}, host {{{', '.join(host)}}}"
    return out + (f", leaving {{{', '.join(pend)}}}" if pend else "")


def _pending_bytes(chain: Chain, st: OffloadState) -> int:
    L = chain.length
    total = 0
    for i in range(1, L + 1):
        if st.pend_plain >> i & 1:
            total += chain.x_size[i]
        if st.pend_tapes >> i & 1:
            total += chain.tape_held[i - 1]
    return total


def step(chain: Chain, st: OffloadState, op: Op, allow_drop: bool = False
         ) -> "tuple[OffloadState, Timing] | str":
    """Issue ``op`` after the prefix summarized by ``st``: the new state and the op's
    :class:`Timing`, or a string saying why the op is invalid (the budget is the caller's
    to check against the timing's peak)."""
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
        on_dev = (dev.plain if target == "x" else dev.tapes) & bit
        on_host = (st.host_plain if target == "x" else st.host_tapes) & bit
        mem = st.memory
        if op.kind == OFF:
            if target == "x" and i == 0:
                return "x0 is never offloaded (it is held from start to end)"
            if not on_dev:
                return f"{name} is not on the device" + (" (it is on the host)" if on_host else "")
            if size and not chain.bandwidth:
                return f"{op.token}: the bandwidth is 0, so the copy of {name} never ends"
            if (st.pend_plain if target == "x" else st.pend_tapes) & bit:
                # its earlier device copy is still leaving: one pending bit per value
                # cannot count two copies, and a second copy to the host adds nothing
                return (f"{name} was offloaded since the last compute op and its device "
                        f"copy is still leaving: issue a compute op before offloading it "
                        f"again")
            start = max(st.H, st.ready[vid])
            copy_end = start + transfer_time(chain, size)
            done = max(copy_end, st.lastread[vid])
            if target == "x":
                dev = State(dev.plain & ~bit, dev.tapes, dev.bwd_next)
                new = st._replace(dev=dev, host_plain=st.host_plain | bit,
                                  pend_plain=st.pend_plain | bit)
            else:
                dev = State(dev.plain, dev.tapes & ~bit, dev.bwd_next)
                new = st._replace(dev=dev, host_tapes=st.host_tapes | bit,
                                  pend_tapes=st.pend_tapes | bit)
            new = new._replace(H=copy_end, O=max(st.O, done))
            return new, Timing(CHANNEL, start, done, mem, mem, mem)
        if not on_host:
            return f"{name} is not on the host" + (" (it is on the device)" if on_dev else
                                                   " (offload it first)")
        if size and not chain.bandwidth:
            return f"{op.token}: the bandwidth is 0, so the copy of {name} never ends"
        start = max(st.H, st.C)
        end = start + transfer_time(chain, size)
        ready = list(st.ready)
        ready[vid] = end
        lastread = list(st.lastread)
        lastread[vid] = 0.0
        if target == "x":
            new = st._replace(dev=State(dev.plain | bit, dev.tapes, dev.bwd_next),
                              host_plain=st.host_plain & ~bit)
        else:
            new = st._replace(dev=State(dev.plain, dev.tapes | bit, dev.bwd_next),
                              host_tapes=st.host_tapes & ~bit)
        new = new._replace(memory=mem + size, H=end, ready=tuple(ready),
                           lastread=tuple(lastread))
        return new, Timing(CHANNEL, start, end, mem, mem + size, mem + size)

    # a compute op: it waits for the pending copies and releases them, then the
    # single-stream rules decide validity, peak and memory after
    r = transition(chain, dev, 0, op, allow_drop)
    if isinstance(r, str):
        return _with_host_hint(chain, st, op, r)
    mem = st.memory - _pending_bytes(chain, st)
    peak = mem + r.peak
    after = mem + r.memory_after
    read = reads(chain, dev, op)
    start = max(st.C, st.O, max((st.ready[v] for v in read), default=0.0))
    end = start + r.time
    ready = list(st.ready)
    lastread = list(st.lastread)
    for v in read:
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
    new = OffloadState(new_dev, hp, ht, 0, 0, after, end, st.H, 0.0, tuple(ready),
                       tuple(lastread))
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


def reference_simulate_offload(chain: Chain, schedule: "Schedule | str | Iterable",
                     budget: int | None = None, allow_drop: bool = False
                     ) -> tuple:
    """Replay a two-stream schedule (module docstring); raise :class:`InvalidScheduleError`
    (or :class:`BudgetExceededError`) naming the first invalid step."""
    schedule = replay_arguments(chain, schedule)
    budget = check_budget(budget)
    x0 = chain.x_size[0]
    if budget is not None and x0 > budget:
        raise InvalidScheduleError(
            f"budget {budget} is below the size of the input x0 ({x0}), which is always held")
    st = OffloadState.initial(chain)
    profile = []
    peak = x0
    for k, op in enumerate(schedule):
        r = step(chain, st, op, allow_drop)
        if isinstance(r, str):
            raise InvalidScheduleError(r, k, op.token)
        new, tm = r
        if budget is not None and tm.peak > budget:
            raise BudgetExceededError(
                f"peak memory {tm.peak} exceeds the budget {budget} (held {tm.memory_before} "
                f"before it; {_describe(chain, st)})", k, op.token, tm.peak, budget)
        profile.append({"step": k, "op": op.token, "stream": tm.stream, "start": tm.start,
                        "time": tm.end - tm.start, "memory_before": tm.memory_before,
                        "peak": tm.peak, "memory_after": tm.memory_after,
                        "held": _describe(chain, new)})
        peak = max(peak, tm.peak)
        st = new
    if not st.is_final():
        if st.dev.bwd_next == chain.length:
            why = "the loss never ran"
        else:
            why = f"the last gradient computed is d{st.dev.bwd_next + 1}"
        raise InvalidScheduleError(f"the schedule ends without computing d0 ({why})")
    return st.makespan, peak, profile


def times(self) -> tuple:
    """``OffloadState.times`` as it was first written (exact search's dominance key; the
    benchmark's "before" uses it)."""
    low = min(self.C, self.H)
    return ((self.C, self.H, self.O if self.O > self.C else 0.0)
            + tuple(t if t > low else 0.0 for t in self.ready)
            + tuple(t if t > self.H else 0.0 for t in self.lastread))
