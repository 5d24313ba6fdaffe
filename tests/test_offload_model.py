"""The two-stream model (docs/model.md, "Offloading"; remat_theory/model/offload.py).

The referee is checked against a second interpreter written here from the text of the
model, with named values in dicts (no bitmasks, no shared code with the engine), on random
schedules: valid single-stream schedules with offloads and prefetches woven in, and
random transfer tokens, valid or not.  Both must agree on validity and the failing step,
on every op's stream, start, end and memory, on the makespan and on the peak; and a budget
one byte below the peak must be refused, the peak itself accepted.
"""
from __future__ import annotations

import json

import pytest
from _tiers import examples
from hypothesis import event, given, settings
from hypothesis import strategies as st

from remat_theory import BudgetExceededError, Chain, ChainError, simulate
from remat_theory.model.errors import InvalidScheduleError
from remat_theory.model.offload import OffloadState, simulate_offload, step
from remat_theory.model.schedule import Op, Schedule
from remat_theory.strategies import chains, valid_schedules

from _offload_reference import TwoStreamReference

def _engine_prefix(chain, tokens):
    st_ = OffloadState.initial(chain)
    timings = []
    for k, t in enumerate(tokens):
        r = step(chain, st_, Op.parse(t))
        if isinstance(r, str):
            return k, st_, timings
        st_, tm = r
        timings.append(tm)
    return None, st_, timings


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
            # a refused op leaves the reference unchanged (the brute force of
            # test_offload_solvers.py reuses its copy after one)
            assert vars(ref) == vars(snapshot), t
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


@settings(max_examples=examples(300, 13), deadline=None)
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
    assert [(tm.stream, tm.start, tm.end, tm.memory_before, tm.peak, tm.memory_after)
            for tm in timings] == \
        [(s, pytest.approx(a), pytest.approx(b), m0, p, m1) for s, a, b, m0, p, m1 in ref.ops]
    makespan, peak = ref.result()
    assert max([chain.x_size[0]] + [tm.peak for tm in timings]) == peak
    assert st_.makespan == pytest.approx(makespan)
    if ref.bwd_next == -1:
        r = simulate(chain, " ".join(tokens))
        assert r.peak_memory == peak and r.makespan == pytest.approx(makespan)
        assert simulate(chain, " ".join(tokens), budget=peak).peak_memory == peak
        if peak - 1 >= chain.x_size[0]:
            with pytest.raises(BudgetExceededError):
                simulate(chain, " ".join(tokens), budget=peak - 1)


@settings(max_examples=examples(150, 14), deadline=None)
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
    Fall0 [0,1], Fall1 [1,2] (reads x1 in t1); Offt1 copies [1,2.5]; Fall2 waits for it:
    [2.5,3.5]; Offt2 copies [2.5,4] (Fall2 read x2 in t2 until 3.5); the loss waits: [4,4];
    Pret2 [4,5.5] after the loss; B2 reads x2 in t2: [5.5,6.5]; Pret1 waits for B2's end:
    [6.5,8]; B1 [8,9]; B0 [9,10].  Memory in issue order: Fall2 first releases t1, the loss
    t2; the peak is B2's (x0 4, t3 6, d3 4, t2 6 back, d2 4: 24), below store-all's 30."""
    c = _chain()
    r = simulate(c, "Fall0 Fall1 Offt1 Fall2 Offt2 Loss Pret2 B2 Pret1 B1 B0")
    rows = [(s.op, s.stream, s.start, s.start + s.time, s.memory_before, s.peak,
             s.memory_after) for s in r.profile]
    assert rows == [("Fall0", "compute", 0, 1, 4, 10, 10), ("Fall1", "compute", 1, 2, 10, 16, 16),
                    ("Offt1", "channel", 1, 2.5, 16, 16, 16),
                    ("Fall2", "compute", 2.5, 3.5, 10, 16, 16),
                    ("Offt2", "channel", 2.5, 4, 16, 16, 16),
                    ("Loss", "compute", 4, 4, 10, 14, 14),
                    ("Pret2", "channel", 4, 5.5, 14, 20, 20),
                    ("B2", "compute", 5.5, 6.5, 20, 24, 14),
                    ("Pret1", "channel", 6.5, 8, 14, 20, 20),
                    ("B1", "compute", 8, 9, 20, 24, 14), ("B0", "compute", 9, 10, 14, 18, 8)]
    assert r.makespan == 10 and r.peak_memory == 24 < c.store_all_memory() == 30
    assert len(r.compute_steps) == 7 and len(r.channel_steps) == 4
    assert json.dumps(r.to_dict())
    # prefetching t1 one op earlier overlaps it with B2: one unit faster, 6 bytes more
    r2 = simulate(c, "Fall0 Fall1 Offt1 Fall2 Offt2 Loss Pret2 Pret1 B2 B1 B0")
    assert r2.makespan == 9 and r2.peak_memory == 30


@pytest.mark.parametrize("text, step, match", [
    ("Fall0 Offx0", 1, "x0 is never offloaded"),
    ("Fall0 Offx1", 1, "x1 is not on the device"),
    ("Fall0 Pret1", 1, "t1 is not on the host .it is on the device"),
    ("Fall0 Offt1 Offt1", 2, "t1 is not on the device .it is on the host"),
    ("Fall0 Offt1 Fall1", 2, "t1 on the host: prefetch first"),
    ("Fall0 Offt4", 1, "value index 4 is out of range 1..3"),
    # offloaded, prefetched and offloaded again with no compute op between: the first
    # device copy is still leaving (one copy each, or the memory would be counted once)
    ("Fck0 Offx1 Prex1 Offx1", 3, "x1 was offloaded since the last compute op"),
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
    with pytest.raises(BudgetExceededError, match="exceeds the budget 23") as e:
        simulate(c, text, budget=23)
    assert e.value.step == 7 and e.value.op == "B2" and e.value.peak == 24


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
