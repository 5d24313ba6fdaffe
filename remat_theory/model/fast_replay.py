"""The simulator's verdict on a long schedule, computed at once (numpy): same rules, same answer.

:func:`replay_totals` answers what :func:`~remat_theory.model.simulator.simulate` answers
about a schedule (its makespan and peak memory, or the :class:`InvalidScheduleError` naming
the first bad step with the same reason) without replaying it operation by operation: the
registry checks every answer with it, and on a chain of 1,000,000 stages the reference
replay takes minutes (its state is two big-integer bitmasks, 30-100 us an operation).
The reference simulator stays the referee: tests/test_fast_replay.py checks that both
answer the same (makespan to the last bit, peak, the step and message of a refusal) on
random chains, on every solver's schedules and on mutated invalid schedules.

How.  Every operation's effect on a held value, when the operation is valid, is a fixed
outcome that does not depend on the state, except one: ``Fn_i`` frees x_i where it read it
(plain, or inside the tape t_i).  So

1. the gradient index before each operation (``bwd_next``) follows from the order of the
   backward operations alone;
2. whether a plain x_j is held before operation k is the outcome of the last operation
   before k that sets or frees x_j (a sort by (j, k) and a binary search);
3. the tapes likewise, ``Fn_i``'s free of t_i being known once step 2 has said whether x_i
   was held plain;
4. each operation's validity, memory change, peak and time then follow elementwise; memory
   is a cumulative sum of integers (exact) and the makespan a cumulative sum of the
   operations' times in order from 0.0 (the very additions of the reference).

Before the first invalid operation every state computed so is the reference's (each earlier
operation was valid).  At the first invalid operation (or the first over the budget) the
state before it is rebuilt as the reference's :class:`State` and the reference's own step
(:func:`~remat_theory.model.simulator.checked_step`) raises the error, so its message is the
reference's by construction.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Callable, Iterable, NamedTuple

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.offload import simulate_offload
from remat_theory.model.schedule import B, DROP, FALL, FCK, FN, LOSS, Schedule
from remat_theory.model.simulator import (State, check_budget, check_final, check_x0,
                                          checked_step, replay_arguments, simulate)

__all__ = ["Totals", "replay_totals", "encode"]

#: Below this many operations :func:`replay_totals` runs the reference simulator itself.
MIN_OPS = 256

# integer codes of the operation kinds
C_FN, C_FCK, C_FALL, C_LOSS, C_B, C_DROPX, C_DROPT, C_OTHER = range(8)
_CODE = {FN: C_FN, FCK: C_FCK, FALL: C_FALL, LOSS: C_LOSS, B: C_B}
_kinds = attrgetter("kind")
_indices = attrgetter("index")


class Totals(NamedTuple):
    """What the registry needs of a replay: the makespan and the peak memory."""

    makespan: float
    peak_memory: int


def encode(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """``(kind codes, stage indices)`` of a schedule (int8 and int64 arrays; the loss's
    index is 0; a transfer is :data:`C_OTHER`, a drop :data:`C_DROPX` or :data:`C_DROPT`)."""
    ops = schedule.ops
    kinds = list(map(_kinds, ops))
    code = np.fromiter(map(_CODE.get, kinds, [C_OTHER] * len(kinds)), dtype=np.int8,
                       count=len(kinds))
    drops = np.flatnonzero(code == C_OTHER)
    for k in drops.tolist():
        op = ops[k]
        if op.kind == DROP:
            code[k] = C_DROPX if op.target == "x" else C_DROPT
    index = list(map(_indices, ops))
    for k in np.flatnonzero(code == C_LOSS).tolist():
        index[k] = 0
    return code, np.array(index, dtype=np.int64)


def replay_totals(chain: Chain, schedule: Schedule | str | Iterable, budget: int | None = None,
                  allow_drop: bool = False, check: Callable[[str], None] | None = None
                  ) -> Totals:
    """The makespan and peak :func:`simulate` measures, or the error it raises; see the
    module docstring.  Short schedules are replayed by the reference itself, and long ones
    with transfers by the two-stream simulator's (:func:`~remat_theory.model.offload.
    simulate_offload`, without its profile).

    ``check(what)``, when given, is called between the steps of the computation (a
    deadline's check, which raises to stop the replay): each step is a few vectorised
    passes, about a second for 3 million operations; the two-stream replay calls it every
    8,192 operations."""
    schedule = replay_arguments(chain, schedule)
    for s, c, d, totals in _MEMO:  # the same objects (immutable) replayed a moment ago
        if s is schedule and c is chain and d == allow_drop and (
                budget is None or totals.peak_memory <= check_budget(budget)):
            return totals
    totals = _replay_totals(chain, schedule, budget, allow_drop, check)
    _MEMO.insert(0, (schedule, chain, allow_drop, totals))
    del _MEMO[MEMO_SIZE:]
    return totals


# The last replays: a valid schedule's makespan and peak do not depend on the budget, so a
# replay under any budget at or above its peak answers the same (the registry replays what
# a solver replayed already, and auto's answer is a sub-solve's).
_MEMO: list = []
MEMO_SIZE = 4


def _replay_totals(chain, schedule, budget, allow_drop, check) -> Totals:
    code = idx = None
    check = check or _no_check
    if len(schedule) >= MIN_OPS:
        check(WHAT)
        try:
            code, idx = encode(schedule)
        except OverflowError:  # a stage index beyond int64: the reference refuses it
            code = None
    if code is None or len(code) == 0 or (code == C_OTHER).any():  # short, empty, transfers
        if code is not None and any(op.is_transfer for op in schedule):
            # the two-stream model: its replay, without a profile, checking as it goes
            r = simulate_offload(chain, schedule, budget, allow_drop, check=check,
                                 profile=False)
        else:
            r = simulate(chain, schedule, budget, allow_drop)
        return Totals(r.makespan, r.peak_memory)
    budget = check_budget(budget)
    check_x0(chain, budget)
    return _replay(chain, schedule, code, idx, budget, allow_drop, check)


WHAT = "replaying the schedule in the simulator (the referee)"


def _no_check(what: str) -> None:
    return None


def _arrays(chain: Chain) -> dict:
    """The chain's fields as numpy arrays, padded by one entry so that an index one past
    the end reads a zero (its operation is refused before the value matters)."""
    def pad(name, dtype, extra=2):  # the chain's cached array (made once per chain)
        values = chain.array(name)
        return np.concatenate([values.astype(dtype, copy=False), np.zeros(extra, dtype=dtype)])

    L = chain.length
    a = {
        "x": pad("x_size", np.int64),
        "tape": pad("tape_size", np.int64),
        "held": pad("tape_held", np.int64),
        "fo": pad("fwd_overhead", np.int64),
        "ao": pad("fall_overhead", np.int64),
        "bo": pad("bwd_overhead", np.int64),
        "ft": pad("fwd_time", np.float64),
        "at": pad("fall_time", np.float64),
        "bt": pad("bwd_time", np.float64),
        "out_saved": pad("output_saved", bool),
    }
    saved = np.ones(L + 3, dtype=bool)  # saved(j): j == 0 or output_saved[j-1]
    saved[1:L + 1] = a["out_saved"][:L]
    a["saved"] = saved
    return a


def _last_outcome(n_values: int, ev_val: np.ndarray, ev_step: np.ndarray, ev_out: np.ndarray,
                  initial: np.ndarray, q_val: np.ndarray, q_step: np.ndarray,
                  n_steps: int) -> np.ndarray:
    """For each query (value j, step k): the outcome of the last event on j at a step before
    k, or ``initial[j]`` when there is none."""
    span = n_steps + 1
    keys = ev_val.astype(np.int64) * span + ev_step
    order = np.argsort(keys, kind="stable")
    keys, outs, vals = keys[order], ev_out[order], ev_val[order]
    q = q_val.astype(np.int64) * span + q_step
    p = np.searchsorted(keys, q, side="left") - 1
    pc = np.maximum(p, 0)
    hit = (p >= 0) & (vals[pc] == q_val) if len(keys) else np.zeros(len(q), dtype=bool)
    return np.where(hit, outs[pc] if len(keys) else False, initial[q_val])


def _replay(chain: Chain, schedule: Schedule, code: np.ndarray, idx: np.ndarray,
            budget: int | None, allow_drop: bool, check: Callable[[str], None]) -> Totals:
    L = chain.length
    N = len(code)
    a = _arrays(chain)
    steps = np.arange(N, dtype=np.int64)
    fwd = code <= C_FALL
    is_fn, is_fck, is_fall = code == C_FN, code == C_FCK, code == C_FALL
    is_loss, is_b = code == C_LOSS, code == C_B
    is_dx, is_dt = code == C_DROPX, code == C_DROPT
    # the index an operation touches: stage i (forward, backward), L (the loss), the value
    # (a drop); clipped so that out-of-range ones (refused below) index the padding
    i = np.where(is_loss, L, np.minimum(idx, L + 1))

    # 1. bwd_next before each operation
    bwd_op = is_loss | is_b
    after = np.where(is_loss, L - 1, i - 1)
    last = np.maximum.accumulate(np.where(bwd_op, steps, -1))
    before_last = np.concatenate([[-1], last[:-1]])
    bwd = np.where(before_last >= 0, after[np.maximum(before_last, 0)], L)

    check(WHAT)
    # 2. plain values: events (value, step, outcome)
    out_i = a["out_saved"][np.minimum(i, L + 1)]
    out_prev = a["out_saved"][np.maximum(i - 1, 0)]
    ev = [
        (i + 1, (is_fn | is_fck) & (i < L), True),  # Fn/Fck_i: x_{i+1} held
        (i, is_fn & (i >= 1) & (i < L), False),  # Fn_i: x_i freed (or was not held)
        (i + 1, is_fall & (i < L) & ~out_i & (bwd > i), True),  # Fall_i: unsaved x_{i+1}
        (i, is_fall & (i >= 1) & (i < L) & ~out_prev, False),  # Fall_i: unsaved x_i freed
        (i, is_loss, False),  # the loss frees a plain x_L
        (i, is_b & (i >= 1) & (i < L), False),  # B_i frees a plain x_i
        (i, is_dx & (i >= 1) & (i <= L), False),  # Dropx_i
    ]
    ev_val = np.concatenate([v[m] for v, m, _ in ev])
    ev_step = np.concatenate([steps[m] for _, m, _ in ev])
    ev_out = np.concatenate([np.full(int(m.sum()), o) for _, m, o in ev])
    init_plain = np.zeros(L + 3, dtype=bool)
    init_plain[0] = True
    ip = np.minimum(i, L + 2)
    ip1 = np.minimum(i + 1, L + 2)
    q_val = np.concatenate([ip, ip1])
    q_step = np.concatenate([steps, steps])
    got = _last_outcome(L + 3, ev_val, ev_step, ev_out, init_plain, q_val, q_step, N)
    plain_i, plain_i1 = got[:N], got[N:]

    check(WHAT)
    # 3. tapes (t_j, 1 <= j <= L; index 0 never held)
    tv = [
        (i + 1, is_fall & (i < L), True),  # Fall_i: t_{i+1}
        (i + 1, is_b & (i < L), False),  # B_i frees t_{i+1}
        (i, is_dt & (i >= 1) & (i <= L), False),  # Dropt_i
        (i, is_fn & (i >= 1) & (i < L) & ~plain_i, False),  # Fn_i read x_i from t_i
    ]
    tev_val = np.concatenate([v[m] for v, m, _ in tv])
    tev_step = np.concatenate([steps[m] for _, m, _ in tv])
    tev_out = np.concatenate([np.full(int(m.sum()), o) for _, m, o in tv])
    init_tape = np.zeros(L + 3, dtype=bool)
    got = _last_outcome(L + 3, tev_val, tev_step, tev_out, init_tape, q_val, q_step, N)
    tape_i, tape_i1 = got[:N], got[N:]

    check(WHAT)
    # 4. validity (any reason: the reference's step names it)
    saved_i = a["saved"][ip]
    avail = plain_i | (tape_i & saved_i)
    in_range = i < L
    bad = np.zeros(N, dtype=bool)
    bad |= fwd & (~in_range | (bwd < i) | ~avail)
    bad |= is_fall & tape_i1
    bad |= (is_fn | is_fck) & plain_i1
    bad |= is_loss & ((bwd != L) | ~avail)
    bad |= is_b & (~in_range | (bwd != i) | ~tape_i1 | (saved_i & ~avail))
    drops = is_dx | is_dt
    if not allow_drop:
        bad |= drops
    bad |= is_dx & ((idx > L) | (idx == 0) | ~plain_i)
    bad |= is_dt & ((idx > L) | (idx == 0) | ~tape_i)
    bad |= code == C_OTHER

    check(WHAT)
    # memory: change and extra peak of each operation
    x, held = a["x"], a["held"]
    xi, xi1 = x[ip], x[ip1]
    im1 = np.maximum(i - 1, 0)
    zero = np.int64(0)
    delta = np.zeros(N, dtype=np.int64)
    extra = np.zeros(N, dtype=np.int64)
    fnck = is_fn | is_fck
    delta += np.where(fnck, xi1, zero)
    delta -= np.where(is_fn & (i >= 1), np.where(plain_i, xi, held[im1]), zero)
    extra += np.where(fnck, xi1 + a["fo"][ip], zero)
    delta += np.where(is_fall, held[ip], zero)
    delta += np.where(is_fall & ~out_i & ~plain_i1 & (bwd > i), xi1, zero)
    delta -= np.where(is_fall & (i >= 1) & ~out_prev, xi, zero)
    extra += np.where(is_fall, a["tape"][ip] + a["ao"][ip], zero)
    delta += np.where(is_loss, xi - np.where(plain_i, xi, zero), zero)
    extra += np.where(is_loss, xi + a["bo"][ip], zero)
    delta += np.where(is_b, xi - xi1 - held[ip] - np.where(plain_i & (i >= 1), xi, zero), zero)
    extra += np.where(is_b, xi + a["bo"][ip], zero)
    delta -= np.where(is_dx, xi, zero)
    delta -= np.where(is_dt, held[im1], zero)
    after_mem = int(chain.x_size[0]) + np.cumsum(delta)
    mem_before = np.concatenate([[int(chain.x_size[0])], after_mem[:-1]])
    peaks = mem_before + extra

    check(WHAT)
    first_bad = int(bad.argmax()) if bad.any() else N
    if budget is not None:
        over = peaks[:first_bad] > budget
        if over.any():
            first_bad = int(over.argmax())
    if first_bad < N:
        state = _state_before(L, first_bad, ev_val, ev_step, ev_out, init_plain,
                              tev_val, tev_step, tev_out, init_tape, int(bwd[first_bad]), N)
        checked_step(chain, state, int(mem_before[first_bad]), first_bad,
                     schedule[first_bad], budget, allow_drop)
        raise AssertionError(  # pragma: no cover - the fast replay and the reference disagree
            f"fast replay: step {first_bad} refused here but accepted by the simulator")
    final_bwd = int(after[last[-1]]) if N and last[-1] >= 0 else L
    check_final(chain, State(1, 0, final_bwd))
    times = np.zeros(N + 1, dtype=np.float64)
    times[1:] = np.where(is_fall, a["at"][ip], np.where(fnck, a["ft"][ip], np.where(
        bwd_op, a["bt"][ip], 0.0)))
    makespan = float(np.cumsum(times)[-1])
    peak = max(int(chain.x_size[0]), int(peaks.max()))
    return Totals(makespan, peak)


def _state_before(L, k, ev_val, ev_step, ev_out, init_plain, tev_val, tev_step, tev_out,
                  init_tape, bwd_next, N) -> State:
    """The reference's :class:`State` before step ``k`` (every earlier step valid)."""
    vals = np.arange(L + 1, dtype=np.int64)
    ks = np.full(L + 1, k, dtype=np.int64)
    plain = _last_outcome(L + 3, ev_val, ev_step, ev_out, init_plain, vals, ks, N)
    tapes = _last_outcome(L + 3, tev_val, tev_step, tev_out, init_tape, vals, ks, N)
    tapes[0] = False

    def as_int(bits):
        return int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")

    return State(as_int(plain), as_int(tapes), bwd_next)
