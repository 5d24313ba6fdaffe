"""Schedule-building helpers shared by the baseline solvers (not a solver module).

Every classical strategy on a chain is built from three pieces, written here once in the
operations of the model (docs/model.md):

* an *advance* from a held activation x_a to x_c without keeping anything on the way
  (``Fck_a Fn_{a+1} .. Fn_{c-1}``: x_a stays, x_c is held at the end, the activations in
  between are freed as soon as they are read);
* a *stored segment* [a, b): every stage of it run as ``Fall`` (its tape kept), the loss if
  b = L, then the backwards ``B_{b-1} .. B_a`` (the last one frees the plain x_a);
* a *segment-checkpoint schedule*: activations x_c for a set of checkpoints are kept during
  one forward sweep, and every segment between two checkpoints is run again as a stored
  segment during the backward sweep (what ``checkpoint_sequential``, Chen et al.'s sqrt(n)
  plan and their greedy planner all produce).

:func:`segments_cost` computes the makespan and the peak memory of a segment-checkpoint
schedule in O(L) (numpy), exactly as the simulator would (the tests compare the two), so
that solvers can search over many checkpoint sets without replaying each one.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import (InternalError, InvalidScheduleError, RematError,
                                       SolverContractError)
from remat_theory.model.fast_replay import MIN_OPS, replay_totals
from remat_theory.model.schedule import B, FALL, FCK, FN, LOSS_OP, Op, Schedule, stage_ops
from remat_theory.model.simulator import State, transition
from remat_theory.model.solution import Solution

from solvers._deadline import check as deadline_check
from solvers._options import Option

BUILDING = "building the schedule"


def shared_ops(kind: str, n: int) -> list[Op]:
    """:func:`~remat_theory.model.schedule.stage_ops` (the shared ops of stages 0..n-1 of
    ``kind``: slice it, never modify it), its missing ops made in chunks between which the
    current deadline is checked (a million ops take a second under load)."""
    have = len(stage_ops(kind, 0))
    while have < n:
        deadline_check(BUILDING)
        have = min(n, have + 4 * CHECK_EVERY)
        stage_ops(kind, have)
    return stage_ops(kind, n)


def advance(a: int, c: int) -> list[Op]:
    """Ops taking a held x_a to a held x_c (c > a), keeping x_a and nothing in between."""
    if c <= a:
        raise InternalError(f"advance from {a} to {c}: the target must be after the source")
    # ops are immutable: one object per stage is shared by every schedule (sliced)
    return [shared_ops(FCK, a + 1)[a]] + shared_ops(FN, c)[a + 1:c]


def stored_segment(chain: Chain, a: int, b: int) -> list[Op]:
    """Ops running [a, b) with every tape kept, then its backwards (x_a held, d_b live)."""
    ops = shared_ops(FALL, b)[a:b]
    if b == chain.length:
        ops.append(LOSS_OP)
    ops.extend(reversed(shared_ops(B, b)[a:b]))
    return ops


def unfold(root, expand, check=None) -> Schedule:
    """The schedule a dynamic program's table stands for, rebuilt from its choices: the one
    rebuild loop of ``dp``, ``dp-weak`` and ``gruslys`` (iterative: no recursion limit on
    long chains).

    ``root``: the subproblem of the whole chain.  ``expand(item)`` returns ``(now, later)``:
    the operations the subproblem ``item`` runs first, then what follows them in order,
    each a subproblem (expanded in turn) or an :class:`Op` (emitted as it is).  ``check()``
    is called once per subproblem (a deadline's check)."""
    ops: list[Op] = []
    stack: list = [root]
    count = 0
    while stack:
        item = stack.pop()
        if isinstance(item, Op):
            ops.append(item)
            continue
        if check is not None:
            check()
        count += 1
        if count & 0xFFF == 0:
            deadline_check(BUILDING)
        now, later = expand(item)
        ops.extend(now)
        stack.extend(reversed(later))
    return Schedule(ops)


def normalize_checkpoints(chain: Chain, checkpoints: Iterable[int]) -> list[int]:
    """Sorted, distinct checkpoint positions in 1..L-1 (0 is x_0, always kept)."""
    cps = sorted(set(int(c) for c in checkpoints))
    for c in cps:
        if not 1 <= c <= chain.length - 1:
            raise RematError(f"checkpoint {c} is outside 1..{chain.length - 1}")
    return cps


def segments_schedule(chain: Chain, checkpoints: Sequence[int]) -> Schedule:
    """The segment-checkpoint schedule for checkpoints 0 < c_1 < .. < c_k < L.

    Forward sweep: advance x_0 -> x_{c_1} -> .. -> x_{c_k} keeping each x_{c_j}; then the
    last segment [c_k, L) stored, the loss and its backwards; then, for j = k-1 .. 0, the
    segment [c_j, c_{j+1}) run again stored and its backwards.  Every stage before c_k runs
    twice, the others once.
    """
    cps = normalize_checkpoints(chain, checkpoints)
    bounds = [0] + cps + [chain.length]
    ops: list[Op] = []
    mark = 0
    for j in range(len(cps)):
        ops.extend(advance(bounds[j], bounds[j + 1]))
        if len(ops) - mark > CHECK_EVERY:
            mark = len(ops)
            deadline_check(BUILDING)
    for j in range(len(bounds) - 2, -1, -1):
        ops.extend(stored_segment(chain, bounds[j], bounds[j + 1]))
        if len(ops) - mark > CHECK_EVERY:
            mark = len(ops)
            deadline_check(BUILDING)
    deadline_check(BUILDING)
    return Schedule(ops)


#: The ``time_limit`` option of the baselines whose only long step is building their schedule
#: (and its replay): the registry enforces it (solvers.registry.solve), the builders here
#: check it as they go.
TIME_LIMIT = Option("seconds", "for the whole call, the referee's replay of the answer "
                    "included: past it, time_limit with no schedule", none=True)


#: Operations built between two checks of the current deadline (a few tens of ms).
CHECK_EVERY = 1 << 14


class _Arrays:
    """The chain's arrays as numpy vectors (int64 sizes, float times), cached per chain."""

    def __init__(self, chain: Chain):
        self.L = chain.length
        self.x = np.asarray(chain.x_size, dtype=np.int64)
        self.tp = np.asarray(chain.tape_size, dtype=np.int64)
        self.fo = np.asarray(chain.fwd_overhead, dtype=np.int64)
        self.fao = np.asarray(chain.fall_overhead, dtype=np.int64)
        self.bo = np.asarray(chain.bwd_overhead, dtype=np.int64)
        self.fwd = np.asarray(chain.fwd_time, dtype=float)
        self.th = np.asarray(chain.tape_held, dtype=np.int64)
        self.TH = np.concatenate(([0], np.cumsum(self.th)))  # TH[i] = th[0] + .. + th[i-1]
        # U[i]: the size of x_i where no backward reads it (a plain value Fall_i frees), else 0
        self.U = np.asarray([0] + [0 if keep else x for keep, x in
                                   zip(chain.output_saved, chain.x_size[1:])], dtype=np.int64)
        self.ideal = chain.ideal_makespan()


def chain_arrays(chain: Chain) -> _Arrays:
    return _Arrays(chain)


def segments_cost(chain: Chain, checkpoints: Sequence[int],
                  arrays: _Arrays | None = None) -> tuple[float, int]:
    """(makespan, peak memory) of :func:`segments_schedule` without building it.

    Derivation (operation table of docs/model.md): with ``P_j`` = x_0 plus the sizes of
    the checkpoints x_{c_1} .. x_{c_j} (held while segment j = [c_j, c_{j+1}) runs):
    the advance op of stage i in segment j peaks at ``P_j + x_{i+1} + fo_i`` (Fck, i = c_j)
    or ``P_j + x_i + x_{i+1} + fo_i`` (Fn); in the stored run of segment j, with g_j the
    live gradient d_{c_{j+1}} (none for the last segment before the loss), Fall_i peaks at
    ``P_j + g_j + tp[c_j..i-1] + tp_i + fao_i`` (fall_overhead), B_i at
    ``P_j + x_{i+1} + tp[c_j..i] + x_i + bo_i`` and the loss at
    ``P_k + tp[c_k..L-1] + x_L + bo_L``.  The makespan is the ideal one (one Fall and one B
    per stage) plus one no-grad forward of every stage before c_k.

    With unsaved outputs (``output_saved``), ``tp`` in the sums is the tape held
    (``tape_held``); an unsaved x_i made by Fall_{i-1} is plain until Fall_i reads and
    frees it (so it adds ``U_i`` = x_i to Fall_i's peak, i > c_j); an unsaved checkpoint
    x_{c_j} is freed by Fall_{c_j} (``- U_{c_j}`` from then on); the loss frees a plain
    x_L, and a rerun segment's last Fall discards its unsaved output (B_{c_{j+1}} has run).
    """
    a = arrays if arrays is not None else _Arrays(chain)
    L = a.L
    cps = np.asarray(checkpoints, dtype=np.int64)
    bounds = np.concatenate(([0], cps, [L]))
    nseg = len(bounds) - 1
    P = a.x[0] + np.concatenate(([0], np.cumsum(a.x[cps])))  # P[j] for segment j
    idx = np.arange(L)
    seg = np.searchsorted(bounds, idx, side="right") - 1  # segment of each stage
    start = bounds[seg]
    Pi = P[seg]
    g = np.where(seg < nseg - 1, a.x[bounds[np.minimum(seg + 1, nseg)]], 0)
    later = idx > start  # Fall_i is not the first of its segment
    freed = np.where(later, a.U[start], 0)  # an unsaved checkpoint, freed by its Fall
    run_before = a.TH[idx] - a.TH[start] + np.where(later, a.U[idx], 0)
    run_tp = a.TH[idx + 1] - a.TH[start]  # tapes of the segment held once Fall_i is done
    last_start = int(bounds[-2])
    peak = max(int(a.x[0]),
               int(np.max(Pi + g + run_before - freed + a.tp + a.fao)),
               int(np.max(Pi - a.U[start] + a.x[idx + 1] + run_tp + a.x[idx] + a.bo[:L])),
               int(P[-1] - a.U[last_start] + a.TH[L] - a.TH[last_start] + a.U[L]
                   + a.x[L] + a.bo[L]))
    last = int(bounds[-2])
    if last > 0:
        adv = idx[:last]
        fn_in = np.where(adv == start[:last], 0, a.x[adv])
        peak = max(peak, int(np.max(Pi[:last] + fn_in + a.x[adv + 1] + a.fo[adv])))
    makespan = a.ideal + math.fsum(a.fwd[:last])
    return makespan, peak


def replay(chain: Chain, schedule: Schedule, check=None) -> tuple[float, int]:
    """(makespan, peak) of a schedule, by the simulator's rules (no budget, no profile:
    the registry replays the schedule in full afterwards); a long one by the simulator's
    vectorised replay (:func:`remat_theory.model.fast_replay.replay_totals`, equal to the
    reference), ``check(what)`` called between its steps (a deadline's check)."""
    if len(schedule) >= MIN_OPS:
        try:
            totals = replay_totals(chain, schedule, check=check or deadline_check)
        except InvalidScheduleError as e:
            raise SolverContractError(f"built an invalid schedule: {e}") from None
        return totals.makespan, totals.peak_memory
    state, memory = State.initial(chain), chain.x_size[0]
    peak, clock = memory, 0.0
    for k, op in enumerate(schedule):
        r = transition(chain, state, memory, op)
        if isinstance(r, str):
            raise SolverContractError(f"built an invalid schedule: step {k} ({op.token}): {r}")
        state, memory = r.state, r.memory_after
        peak = max(peak, r.peak)
        clock += r.time
    if not state.is_final():
        raise SolverContractError("built a schedule that does not end with d0 computed")
    return clock, peak


def fixed_schedule_solution(name: str, chain: Chain, budget: int, schedule: Schedule,
                            message: str = "", info: dict | None = None) -> Solution:
    """A solver whose schedule does not depend on the budget: feasible iff its peak fits.

    Its peak (measured by the simulator) is then exactly the smallest budget at which the
    solver succeeds, so ``min_budget`` is reported in both cases.
    """
    makespan, peak = replay(chain, schedule)
    info = dict(info or {})
    if peak > budget:
        return Solution.infeasible(name, budget, min_budget=peak,
                                   message=f"its schedule peaks at {peak} > budget {budget}"
                                           + (f"; {message}" if message else ""), info=info)
    return Solution.feasible(name, budget, schedule, makespan, peak, min_budget=peak,
                             message=message, info=info)
