"""Classes of schedules: persistent and weakly persistent (in normal form).

The persistent dynamic program of Beaumont et al. (Rotor, "Optimal checkpointing for
heterogeneous chains", 2019, section 4) is optimal among *persistent* schedules: every value
kept for later is kept until the backward operation that consumes it.  The journal version
of that work also considers *weakly persistent* schedules, in which a held checkpoint may be
released (and replaced by a later one) before its segment's backward completes.  This
module defines both classes precisely, as rules checked operation by operation on top of the
simulator, so that any valid schedule can be classified and so that exhaustive search can be
restricted to exactly a class (``solvers/exhaustive.py``, option ``schedule_class``).  The
proofs that ``solvers/dp.py`` and ``solvers/dp_weak.py`` are optimal in these classes are in
``proofs/persistent_dp.md`` and ``proofs/weak_persistence.md``.

Definitions (state = the simulator's state before the operation; u = ``bwd_next``, the
backward to run next, L for the loss).

* The **frontier** is the largest index i <= u such that x_i is available (a plain x_i
  held, or, for i >= 1, the tape t_i held when x_i is saved, inside it), or such that x_i is unsaved (no backward reads
  it, the chain's ``output_saved``) and its stage is *open*: t_{i+1} is held, B_i has not
  run.  x_0 is always held, so it exists.  The last clause matters only on chains with
  unsaved outputs (an unsaved x_i is never inside t_i, and Fall_i frees it): with it, the
  frontier stays at stage i from Fall_i until B_i, as it does for a saved x_i, which
  stays available until B_i.
* A plain x_i is **fresh** when the operation just before produced it (Fck_{i-1} or
  Fn_{i-1}).

A schedule is **weakly persistent** when it is valid, has no Drop, and every forward
operation F_i (Fn_i, Fck_i or Fall_i)

  (W1) reads the frontier: i is the frontier of the state it runs in;
  (W2) if it is Fn_i or Fck_i, has i < u: it never recomputes a plain x_{i+1} once
       d_{i+1} exists (such a value could never be freed again);
  (W3) if it is Fn_i with i >= 1, reads a plain x_i (it never frees a tape: every tape
       t_{i+1}, once computed, is held until B_i consumes it), and t_{i+1} is not held
       (a stage whose tape is held keeps its input until B_i; on a chain whose outputs are
       all saved this never binds: (W1) or (W2) forbids such an Fn_i first).

A schedule is **monotone** (the fast ILP's normal form, proofs/ilp.md section 5; its
``optimal_for`` is ``"weak-runs<=1"``) when it is valid, has no Drop, and

  (M1) inside each phase (the forward operations between two consecutive backward
       operations, or before the loss) the stages of the forward operations never
       decrease: F_i may follow F_j in the same phase only if i >= j.

Every weakly persistent schedule is monotone: after F_i reads the frontier i, the frontier
is i+1 (or still i when i = u), so (W1) makes the stages of a phase weakly increasing.

A schedule is **run+falls** (a candidate normal form, refuted: proofs/ilp.md section 5)
when it is valid, has no Drop, and

  (R1) inside each phase, after the first forward operation whose stage is lower than the
       stage of the one before it, every forward operation is a Fall: one weakly
       increasing run, then only tapes, made in any order.

It contains the monotone class and every counterexample to it found by the sweeps of
section 5 before the one that refutes it (``certificates/ilp_fall_tail_refuted.json``).

A schedule is **persistent** when it is weakly persistent and moreover

  (P1) every Fn_i with i >= 1 reads a fresh x_i: a plain value that is read by any other
       operation (it became a checkpoint) is then held until the backward that consumes it
       (B_i, or the loss for x_L).

So weak persistence lets a checkpoint x_i (i >= 1) that has already served be released by
Fn_i, its memory then going to the later values computed from it; persistence forbids it.
Consequences of the rules (proofs/weak_persistence.md): no schedule of either class ever
holds a plain x_i and the tape t_i together, except an unsaved x_i, which Fall_{i-1}
produces beside t_i and Fall_i frees, and every Fall_i runs exactly once.

The frontier rule (W1) is the normal form of the Rotor proof: it forbids computing values
early (before the segment that needs them is being processed), which never helps; the
persistent DP is optimal among persistent schedules in this sense, and the exhaustive
search restricted to the class finds the same optimum (tests/test_persistence.py).
"""
from __future__ import annotations

from typing import Iterable

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InvalidScheduleError, RematError
from remat_theory.model.schedule import FALL, FCK, FN, FORWARD_KINDS, DROP, Op, Schedule
from remat_theory.model.simulator import State, transition

PERSISTENT = "persistent"
WEAK = "weak"
MONOTONE = "monotone"
RUN_FALLS = "run+falls"
ALL = "all"
CLASSES = (ALL, PERSISTENT, WEAK, MONOTONE, RUN_FALLS)  # and "weak-runs<=K" for any K >= 1
RUNS_PREFIX = "weak-runs<="


def runs_limit(schedule_class: str) -> int | None:
    """K for the class of at most K weakly increasing runs per phase (``"monotone"`` is
    K = 1, ``"weak-runs<=K"`` any K >= 1); None for the other classes."""
    if schedule_class == MONOTONE:
        return 1
    if isinstance(schedule_class, str) and schedule_class.startswith(RUNS_PREFIX):
        k = schedule_class[len(RUNS_PREFIX):]
        if k.isdigit() and int(k) >= 1:
            return int(k)
    return None


def is_class(schedule_class) -> bool:
    """True for a class name this module knows (:data:`CLASSES` or ``"weak-runs<=K"``)."""
    return schedule_class in CLASSES or runs_limit(schedule_class) is not None


def rule_name(schedule_class) -> str:
    """The rule name of ``schedule_class``: a rule name as is, or the ``rule`` of a
    :class:`remat_theory.model.classes.ScheduleClass` (which names its rules here: the
    vocabulary of classes lives in :mod:`remat_theory.model.classes`, the rules here)."""
    return getattr(schedule_class, "rule", schedule_class)

NO_FRESH = -1


def frontier(chain: Chain, state: State) -> int:
    """The largest i <= bwd_next with x_i available (plain x_i, or inside tape t_i for
    i >= 1 when a backward reads x_i), or with x_i unsaved and t_{i+1} held: an open
    stage (module docstring)."""
    plain, tapes, u = state
    avail = plain | (tapes & chain.saved_mask)
    if chain.has_unsaved_outputs:
        unsaved = ~chain.saved_mask & ((2 << chain.length) - 2)  # bits 1..L
        avail |= (tapes >> 1) & unsaved
    top = min(u, chain.length)
    avail &= (1 << (top + 1)) - 1
    return avail.bit_length() - 1


def violation(chain: Chain, state: State, fresh, op: Op, schedule_class: str) -> str | None:
    """Why ``op`` breaks the rules of ``schedule_class`` in ``state``, or None if it does not.

    ``fresh`` is the class's one piece of bookkeeping (:func:`next_mark`): for the
    persistent class the index of the plain x produced by the previous operation, for the
    runs classes and run+falls the number of weakly increasing runs so far in the current
    phase and the stage of its previous forward operation (-1 when the phase has none yet).
    Validity in the model itself (needs, budget) is the simulator's business, not checked
    here.
    """
    if schedule_class == ALL:
        return None
    if op.kind == DROP:
        return f"Drop is not part of the {schedule_class} class"
    if op.kind not in FORWARD_KINDS:
        return None
    k = runs_limit(schedule_class)
    if k is not None:
        runs, last = _runs_mark(fresh)
        if op.index < last and runs + 1 > k:
            if k == 1:
                return (f"{op.token} runs after F{last} in the same phase (stages must not "
                        f"decrease)")
            return (f"{op.token} after F{last} starts weakly increasing run {runs + 1} of its "
                    f"phase (at most {k})")
        return None
    if schedule_class == RUN_FALLS:
        runs, last = _runs_mark(fresh)
        if (runs >= 2 or op.index < last) and op.kind != FALL:
            return f"{op.token} after the phase's first decrease of stage (only Fall may follow)"
        return None
    i = op.index
    f = frontier(chain, state)
    if i != f:
        return f"F{i} does not read the frontier x{f}"
    if op.kind == FALL:
        return None
    u = state.bwd_next
    if i >= u:
        return f"{op.token} recomputes x{i + 1} after d{i + 1} exists"
    if op.kind == FN and i >= 1:
        if not state.plain >> i & 1:
            return f"Fn{i} would free the tape t{i}"
        if state.tapes >> (i + 1) & 1:
            return f"Fn{i} releases x{i} while t{i + 1} is held (before B{i})"
        if schedule_class == PERSISTENT and fresh != i:
            return f"Fn{i} releases the checkpoint x{i} before B{i}"
    return None


def next_fresh(op: Op) -> int:
    """The fresh plain value after ``op`` (Fck_i / Fn_i produce a plain x_{i+1})."""
    if op.kind in (FN, FCK):
        return op.index + 1
    return NO_FRESH


def next_mark(op: Op, schedule_class: str, mark):
    """The bookkeeping ``violation`` needs after ``op`` (``mark`` is the one before it): an
    int for the persistent class (:func:`next_fresh`), a pair ``(runs, last stage)`` for the
    runs classes and run+falls inside a phase, :data:`NO_FRESH` otherwise and after a
    backward op."""
    if schedule_class == PERSISTENT:
        return next_fresh(op)
    if runs_limit(schedule_class) is not None or schedule_class == RUN_FALLS:
        if op.kind not in FORWARD_KINDS:
            return NO_FRESH
        runs, last = _runs_mark(mark)
        return (runs + (1 if op.index < last or runs == 0 else 0), op.index)
    return NO_FRESH


def _runs_mark(mark) -> tuple:
    """(weakly increasing runs so far in the phase, stage of its last forward op)."""
    return (0, -1) if mark == NO_FRESH else mark


def check_class(chain: Chain, schedule: Schedule | str | Iterable, schedule_class: str) -> None:
    """Raise :class:`InvalidScheduleError` naming the first step of ``schedule`` that is
    invalid or breaks the rules of ``schedule_class`` (``"persistent"``, ``"weak"``,
    ``"monotone"``, ``"weak-runs<=K"``, or a :class:`~remat_theory.model.classes.ScheduleClass`)."""
    schedule_class = rule_name(schedule_class)
    if not is_class(schedule_class):
        raise RematError(f"schedule_class = {schedule_class!r} is not one of {CLASSES} or "
                         f"'{RUNS_PREFIX}K'")
    if isinstance(schedule, str):
        schedule = Schedule.parse(schedule)
    elif not isinstance(schedule, Schedule):
        schedule = Schedule(schedule)
    state = State.initial(chain)
    memory = chain.x_size[0]
    fresh = NO_FRESH
    for k, op in enumerate(schedule):
        why = violation(chain, state, fresh, op, schedule_class)
        if why is not None:
            raise InvalidScheduleError(f"not {schedule_class}: {why}", k, op.token)
        r = transition(chain, state, memory, op, allow_drop=True)
        if isinstance(r, str):
            raise InvalidScheduleError(r, k, op.token)
        state, memory, fresh = r.state, r.memory_after, next_mark(op, schedule_class, fresh)
    if not state.is_final():
        raise InvalidScheduleError("the schedule ends without computing d0")


def _is_in(chain: Chain, schedule, schedule_class: str) -> bool:
    try:
        check_class(chain, schedule, schedule_class)
    except InvalidScheduleError:
        return False
    return True


def is_persistent(chain: Chain, schedule) -> bool:
    """True when ``schedule`` is valid (no budget) and persistent (module docstring)."""
    return _is_in(chain, schedule, PERSISTENT)


def is_weakly_persistent(chain: Chain, schedule) -> bool:
    """True when ``schedule`` is valid (no budget) and weakly persistent (module docstring).
    Every persistent schedule is weakly persistent."""
    return _is_in(chain, schedule, WEAK)


def is_class_member(chain: Chain, schedule, schedule_class: str) -> bool:
    """True when ``schedule`` is valid (no budget) and in ``schedule_class``."""
    return _is_in(chain, schedule, schedule_class)


def is_monotone(chain: Chain, schedule) -> bool:
    """True when ``schedule`` is valid (no budget) and monotone (module docstring): the
    normal form of the ILP's fast mode.  Every weakly persistent schedule is monotone."""
    return _is_in(chain, schedule, MONOTONE)
