"""The two-stream model (docs/model.md, "Offloading"; remat_theory/model/offload.py).

The referee is checked against a second interpreter written here from the text of the
model, with named values in dicts and the memory timeline rebuilt from intervals (no
bitmasks, no incremental finalization, no shared code with the engine), on random
schedules: valid single-stream schedules with offload/prefetch pairs inserted at random
places, many of them invalid.  Both must agree on validity and the failing step, on every
op's stream, start and end, on the makespan and on the peak; and a budget one byte below
the peak must be refused, the peak itself accepted.
"""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from remat_theory import BudgetExceededError, Chain, ChainError, simulate
from remat_theory.model.errors import InvalidScheduleError
from remat_theory.model.offload import OffloadState, finish, simulate_offload, step
from remat_theory.model.schedule import Op, Schedule
from remat_theory.strategies import chains, valid_schedules

INF = math.inf


class TwoStreamReference:
    """The model's text, executed: logical state in issue order, then times."""

    def __init__(self, chain: Chain):
        self.c = chain
        self.dev = {"x0": chain.x_size[0]}  # name -> bytes on the device
        self.host = set()
        self.bwd_next = chain.length
        self.C = self.S = self.H = self.O = 0.0
        self.ready = {}  # name -> time its device copy is complete
        self.lastread = {}  # name -> end of the last compute op that read the device copy
        self.ops = []  # (stream, start, end, alloc at start, release at end)

    def saved(self, i):
        return i == 0 or self.c.output_saved[i - 1]

    def source(self, i):
        """The device value x_i is read from, or None."""
        if f"x{i}" in self.dev:
            return f"x{i}"
        if i >= 1 and self.saved(i) and f"t{i}" in self.dev:
            return f"t{i}"
        return None

    def size(self, name):
        i = int(name[1:])
        return self.c.x_size[i] if name[0] == "x" else self.c.tape_held[i - 1]

    def mem(self):
        return sum(self.dev.values())

    def apply(self, token):
        """Issue one op; False when it is invalid (the state is then unchanged)."""
        c, L = self.c, self.c.length
        if token[:3] in ("Off", "Pre"):
            if c.bandwidth is None:
                return False
            name = token[3:]
            i = int(name[1:])
            if name[0] == "x" and i > L or name[0] == "t" and not 1 <= i <= L:
                return False
            size = self.size(name)
            dur = 0.0 if size == 0 else (INF if c.bandwidth == 0 else size / c.bandwidth)
            if dur == INF:
                return False
            if token.startswith("Off"):
                if name == "x0" or name not in self.dev:
                    return False
                start = max(self.H, self.S, self.ready.get(name, 0.0))
                end = start + dur
                done = max(end, self.lastread.get(name, 0.0))
                del self.dev[name]
                self.host.add(name)
                self.H, self.O = end, max(self.O, done)
                self.ops.append(("channel", start, done, 0, size))
                return True
            if name not in self.host:
                return False
            start = max(self.H, self.S)
            end = start + dur
            self.host.discard(name)
            self.dev[name] = size
            self.ready[name], self.lastread[name] = end, 0.0
            self.H = end
            self.ops.append(("channel", start, end, size, 0))
            return True
        kind = token.rstrip("0123456789")
        i = int(token[len(kind):]) if kind != "Loss" else L
        x = c.x_size
        before = set(self.dev)
        mem = self.mem()
        if kind in ("Fn", "Fck", "Fall"):
            src = self.source(i) if i < L else None
            if i >= L or self.bwd_next < i or src is None:
                return False
            reads = [src]
            if kind == "Fall":
                if f"t{i + 1}" in self.dev:
                    return False
                peak = mem + c.tape_size[i] + c.fall_overhead[i]
                self.dev[f"t{i + 1}"] = c.tape_held[i]
                if not c.output_saved[i] and self.bwd_next >= i + 1:
                    self.dev.setdefault(f"x{i + 1}", x[i + 1])
                if i >= 1 and not self.saved(i):
                    del self.dev[f"x{i}"]
                dur = c.fall_time[i]
            else:
                if f"x{i + 1}" in self.dev:
                    return False
                peak = mem + x[i + 1] + c.fwd_overhead[i]
                self.dev[f"x{i + 1}"] = x[i + 1]
                if kind == "Fn" and i >= 1:
                    del self.dev[src]
                dur = c.fwd_time[i]
        elif kind == "Loss":
            src = self.source(L)
            if self.bwd_next != L or src is None:
                return False
            reads = [src]
            peak = mem + x[L] + c.bwd_overhead[L]
            self.dev[f"d{L}"] = x[L]
            self.dev.pop(f"x{L}", None)
            self.bwd_next = L - 1
            dur = c.bwd_time[L]
        else:  # B_i
            if i >= L or self.bwd_next != i or f"t{i + 1}" not in self.dev:
                return False
            reads = [f"t{i + 1}"]
            if self.saved(i):
                src = self.source(i)
                if src is None:
                    return False
                reads.append(src)
            peak = mem + x[i] + c.bwd_overhead[i]
            self.dev[f"d{i}"] = x[i]
            del self.dev[f"d{i + 1}"], self.dev[f"t{i + 1}"]
            if i >= 1:
                self.dev.pop(f"x{i}", None)
            self.bwd_next = i - 1
            dur = c.bwd_time[i]
        start = max([self.C, self.O] + [self.ready.get(v, 0.0) for v in reads])
        end = start + dur
        for v in reads:
            self.lastread[v] = max(self.lastread.get(v, 0.0), end)
        for v in set(self.dev) - before:
            self.ready[v], self.lastread[v] = end, 0.0
            self.host.discard(v)
        # host copies nothing reads any more
        for v in list(self.host):
            j = int(v[1:])
            if v[0] == "x" and j > self.bwd_next or v[0] == "t" and j > self.bwd_next + 1:
                self.host.discard(v)
        self.C, self.S = end, start
        self.ops.append(("compute", start, end, peak - mem, peak - self.mem()))
        return True

    def timeline(self):
        """(makespan, peak): events ordered as the model says, levels summed from x0."""
        events = []
        for k, (_, s, e, alloc, release) in enumerate(self.ops):
            events.append(((s, 1, k, 0), alloc, k))
            events.append((((e, 0, k, 0) if e > s else (e, 1, k, 1)), -release, k))
        events.sort()
        level = peak = self.c.x_size[0]
        for key, delta, k in events:
            level += delta
            peak = max(peak, level)
        makespan = max([0.0] + [e for _, _, e, _, _ in self.ops] + [self.H])
        return makespan, peak


def _engine_prefix(chain, tokens):
    st_ = OffloadState.initial(chain)
    timings = []
    for k, t in enumerate(tokens):
        r = step(chain, st_, Op.parse(t))
        if isinstance(r, str):
            return k, st_, timings
        st_, tm = r
        timings.append(tm)
    return None, finish(chain, st_), timings


def _insert_transfers(draw, chain, tokens):
    """Random transfers woven into a valid single-stream schedule: before each op, maybe
    offload a device value or prefetch a host one (the reference says which exist); when
    an op finds an input on the host, prefetch it first.  Sometimes a random transfer
    token instead, valid or not."""
    ref = TwoStreamReference(chain)
    out = []
    L = chain.length
    for t in tokens:
        r = draw(st.integers(0, 19))
        movable = sorted(v for v in ref.dev if v != "x0" and v[0] in "xt")
        transfer = None
        if r < 6 and movable:
            transfer = "Off" + draw(st.sampled_from(movable))
        elif r < 10 and ref.host:
            transfer = "Pre" + draw(st.sampled_from(sorted(ref.host)))
        elif r == 10:  # a random transfer token, valid or not: the prefix ends there
            kind, target = draw(st.sampled_from(["Off", "Pre"])), draw(st.sampled_from("xt"))
            return out + [f"{kind}{target}{draw(st.integers(0, L + 1))}"]
        if transfer is not None:
            out.append(transfer)
            if not ref.apply(transfer):  # pragma: no cover - chosen among valid ones
                return out
        for _ in range(2 * L + 2):
            snapshot = _copy(ref)
            if ref.apply(t):
                out.append(t)
                break
            ref = snapshot
            if not ref.host:
                return out + [t]
            pre = "Pre" + draw(st.sampled_from(sorted(ref.host)))
            ref.apply(pre)
            out.append(pre)
        else:
            return out + [t]
    return out


def _copy(ref):
    new = TwoStreamReference(ref.c)
    new.__dict__.update({k: (v.copy() if isinstance(v, (dict, set, list)) else v)
                         for k, v in ref.__dict__.items()})
    return new


@settings(max_examples=300, deadline=None)
@given(st.data(), chains(1, 4, unsaved_outputs=None, fall_costs=None, overheads=None),
       st.sampled_from([0.5, 1.0, 3.0, 7.0]))
def test_engine_agrees_with_the_reference(data, chain, bandwidth):
    chain = chain.replace(bandwidth=bandwidth)
    base = data.draw(valid_schedules(chain, max_random_steps=8)).tokens()
    tokens = _insert_transfers(data.draw, chain, base)
    ref = TwoStreamReference(chain)
    bad = None
    for k, t in enumerate(tokens):
        if not ref.apply(t):
            bad = k
            break
    engine_bad, st_, timings = _engine_prefix(chain, tokens)
    assert engine_bad == bad, (tokens, engine_bad, bad)
    event("invalid" if bad is not None else "prefix" if ref.bwd_next >= 0 else
          "valid, with transfers" if tokens != base else "valid, no transfer")
    if bad is not None:
        with pytest.raises(InvalidScheduleError) as e:
            simulate(chain, " ".join(tokens))
        assert e.value.step == bad
        return
    # every op: stream, start, end
    assert [(tm.stream, tm.start, tm.end) for tm in timings] == \
        [(s, pytest.approx(a), pytest.approx(b)) for s, a, b, _, _ in ref.ops]
    makespan, peak = ref.timeline()
    assert st_.peak == peak
    assert st_.makespan == pytest.approx(makespan)
    if ref.bwd_next == -1:
        r = simulate(chain, " ".join(tokens))
        assert r.peak_memory == peak and r.makespan == pytest.approx(makespan)
        assert simulate(chain, " ".join(tokens), budget=peak).peak_memory == peak
        if peak - 1 >= chain.x_size[0]:
            with pytest.raises(BudgetExceededError):
                simulate(chain, " ".join(tokens), budget=peak - 1)


@settings(max_examples=150, deadline=None)
@given(st.data(), chains(1, 5, unsaved_outputs=None, fall_costs=None, overheads=None))
def test_without_transfers_the_engine_is_the_single_stream_simulator(data, chain):
    """The two-stream engine replaying a schedule with no transfer gives the single-stream
    simulator's makespan and peak; and a chain's bandwidth changes no such answer."""
    sched = data.draw(valid_schedules(chain, max_random_steps=10))
    one = simulate(chain, sched)
    two = simulate_offload(chain, sched)
    assert two.makespan == pytest.approx(one.makespan) and two.peak_memory == one.peak_memory
    again = simulate(chain.replace(bandwidth=2.5), sched)
    assert again.makespan == one.makespan and again.peak_memory == one.peak_memory
    assert type(again) is type(one)


def _chain(bandwidth=4.0):
    return Chain.homogeneous(3, x_size=4, tape_size=6).replace(bandwidth=bandwidth)


def test_offload_all_by_hand():
    """Three stages, f = b = 1, x = 4, tapes 6, loss 0, bandwidth 4 (a tape copies in 1.5).
    Fall0 [0,1] Fall1 [1,2]; Offt1 starts at 1 (t1 ready at 1, Fall1 started at 1), ends at
    2.5; Fall2 waits for it: [2.5,3.5]; Offt2 [2.5,4] (Fall1 read x2? no: Fall2 reads x2 in
    t2, ends 3.5 <= 4); the loss waits for Offt2: [4,4]; Pret2 [4,5.5]; B2 reads x2 in t2:
    [5.5,6.5]; Pret1 [5.5,7]; B1 [7,8]; B0 [8,9]."""
    r = simulate(_chain(), "Fall0 Fall1 Offt1 Fall2 Offt2 Loss Pret2 B2 Pret1 B1 B0")
    times = [(s.op, s.stream, s.start, s.start + s.time) for s in r.profile]
    assert times == [("Fall0", "compute", 0, 1), ("Fall1", "compute", 1, 2),
                     ("Offt1", "channel", 1, 2.5), ("Fall2", "compute", 2.5, 3.5),
                     ("Offt2", "channel", 2.5, 4), ("Loss", "compute", 4, 4),
                     ("Pret2", "channel", 4, 5.5), ("B2", "compute", 5.5, 6.5),
                     ("Pret1", "channel", 5.5, 7), ("B1", "compute", 7, 8),
                     ("B0", "compute", 8, 9)]
    assert r.makespan == 9
    # peak: at 5.5, x0 4 + t3 6 + d3 4 + t2 6 back, then B2 takes d2 4 and Pret1 takes t1 6
    assert r.peak_memory == 30
    assert len(r.compute_steps) == 7 and len(r.channel_steps) == 4
    assert json.dumps(r.to_dict())  # events and steps serialize


@pytest.mark.parametrize("text, step, match", [
    ("Fall0 Offx0", 1, "x0 is never offloaded"),
    ("Fall0 Offx1", 1, "x1 is not on the device"),
    ("Fall0 Pret1", 1, "t1 is not on the host .it is on the device"),
    ("Fall0 Offt1 Offt1", 2, "t1 is not on the device .it is on the host"),
    ("Fall0 Offt1 Fall1", 2, "t1 on the host: prefetch first"),
    ("Fall0 Offt4", 1, "value index 4 is out of range 1..3"),
    ("Fall0 Fall1 Fall2 Loss B2 Offt2 B1", 6, "t2 on the host"),
])
def test_invalid_transfers_name_the_step_and_reason(text, step, match):
    with pytest.raises(InvalidScheduleError, match=match) as e:
        simulate(_chain(), text)
    assert e.value.step == step


def test_transfers_need_a_bandwidth_and_zero_never_ends():
    with pytest.raises(InvalidScheduleError, match="the chain has no bandwidth"):
        simulate(Chain.homogeneous(3), "Fall0 Offt1")
    with pytest.raises(InvalidScheduleError, match="bandwidth is 0"):
        simulate(_chain(bandwidth=0), "Fall0 Offt1")


def test_host_copy_is_discarded_once_its_backward_ran():
    """x1 offloaded, then B1 (reading x1 inside t1) runs: x1's host copy is gone."""
    c = _chain()
    with pytest.raises(InvalidScheduleError, match="x1 is not on the host"):
        simulate(c, "Fck0 Offx1 Fall0 Fall1 Fall2 Loss B2 B1 Prex1")


def test_budget_error_names_the_op_and_time():
    c = _chain()
    text = "Fall0 Fall1 Offt1 Fall2 Offt2 Loss Pret2 B2 Pret1 B1 B0"
    with pytest.raises(BudgetExceededError, match="above the budget 29") as e:
        simulate(c, text, budget=29)
    assert e.value.op in text.split() and e.value.peak == 30


def test_bandwidth_field_round_trips_and_is_validated():
    c = _chain()
    assert c.has_bandwidth and Chain.from_json(c.to_json()) == c
    assert json.loads(c.to_json())["bandwidth"] == 4.0
    plain = Chain.homogeneous(3, x_size=4, tape_size=6)
    assert not plain.has_bandwidth and "bandwidth" not in plain.to_dict()
    for bad, match in ((-1, "bandwidth = -1 is negative"), ("fast", "is not a number"),
                       (True, "is not a number"), (float("inf"), "is not finite"),
                       (float("nan"), "bandwidth is NaN")):
        with pytest.raises(ChainError, match=match):
            plain.replace(bandwidth=bad)


def test_tokens_parse_and_print():
    s = Schedule.parse("Fall0 Offt1 Offx2 Prex2 Pret1")
    assert s.tokens() == ["Fall0", "Offt1", "Offx2", "Prex2", "Pret1"]
    assert [op.is_transfer for op in s] == [False, True, True, True, True]
