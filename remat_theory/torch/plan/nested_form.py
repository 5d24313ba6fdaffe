"""The nested form of a persistent schedule: ordinary autograd plus nested checkpoints.

A persistent schedule (every one the DP finds) is a tree (:func:`nested_form`): each stage
is kept (``Fall .. B``) or starts a checkpointed segment (``Fck Fn ..``, replayed later).
:func:`~remat_theory.torch.run.nested.run_nested` runs it as ordinary autograd with one non-reentrant
``torch.utils.checkpoint`` per checkpointed segment, so that autograd's own engine runs the
backward: what :class:`~remat_theory.torch.modules.checkpointed.CheckpointedSequential` runs.
:class:`~remat_theory.torch.run.executor.ScheduleExecutor` runs any schedule operation by
operation instead (the referee).
"""
from __future__ import annotations

from dataclasses import dataclass

from remat_theory.model.errors import RematError
from remat_theory.model.schedule import FALL, FCK, FN, LOSS, B, Schedule


__all__ = ["Checkpointed", "End", "Kept", "NotNestedError", "Segment", "checkpoint_state_bytes",
           "keeps_rng_state", "nested_form", "nested_schedule", "opened_segments",
           "recomputed_stages"]


@dataclass(frozen=True)
class Kept:
    """``Fall_s`` first, ``rest`` (the segment [s+1, t)), ``B_s`` last: stage s runs with
    autograd recording in the forward and keeps its tape until its backward."""

    s: int
    rest: "Segment"


@dataclass(frozen=True)
class Checkpointed:
    """``Fck_s Fn_{s+1} .. Fn_{k-1}``, then ``rest`` (segment [k, t)), then ``inner`` (the
    segment [s, k) replayed once d_k is known): stages s..k-1 keep only x_s in the forward
    and are recomputed, as ``inner`` says, when the backward reaches them."""

    s: int
    k: int
    rest: "Segment"
    inner: "Segment"


@dataclass(frozen=True)
class End:
    """The end of a segment: nothing left to run (x_t is its output).  ``loss``: this is the
    end of the chain's forward, where the schedule runs ``Loss`` (False at the end of a
    replayed segment, even one that ends at x_L)."""

    t: int
    loss: bool = False


Segment = Kept | Checkpointed | End


class NotNestedError(RematError):
    """The schedule does not have the nested (persistent) form; says at which operation."""


def nested_form(schedule, length: int) -> Segment:
    """The segment tree of a persistent schedule (Rotor's recursive form, Beaumont et al.
    2019, section 4): every stage is either kept (``Fall_s``, the rest, ``B_s``) or starts
    a checkpointed segment (``Fck_s Fn..``, the rest, the segment replayed).

    Raises :class:`NotNestedError` naming the first operation that does not fit (a schedule
    of a non-persistent solver, or with explicit deletions)."""
    ops = list(schedule)
    pos = 0

    def fail(why: str):
        tok = ops[pos].token if pos < len(ops) else "the end"
        text = " ".join(o.token for o in ops)
        text = text if len(text) <= 300 else text[:300] + " ..."
        raise NotNestedError(f"the schedule is not nested at operation {pos} ({tok}): {why}; "
                             f"schedule: {text}")

    def take(kind, index):
        nonlocal pos
        if pos < len(ops) and ops[pos].kind == kind and ops[pos].index == index:
            pos += 1
            return True
        return False

    def segment(s: int, t: int, loss: bool) -> Segment:
        # x_s is held; run [s, t) so that d_s is produced (after the Loss, if ``loss``).
        if s == t:
            if loss and not take(LOSS, None):
                fail("expected Loss")
            return End(t, loss)
        if take(FALL, s):
            rest = segment(s + 1, t, loss)
            if not take(B, s):
                fail(f"expected B{s}")
            return Kept(s, rest)
        if take(FCK, s):
            k = s + 1
            while k < t and take(FN, k):
                k += 1
            rest = segment(k, t, loss)
            inner = segment(s, k, False)
            return Checkpointed(s, k, rest, inner)
        fail(f"expected Fall{s} or Fck{s}")

    tree = segment(0, length, True)
    if pos != len(ops):
        fail("operations after B0")
    return tree


def recomputed_stages(tree: Segment) -> int:
    """Number of stage forwards the nested form recomputes (as in the schedule)."""
    if isinstance(tree, Kept):
        return recomputed_stages(tree.rest)
    if isinstance(tree, Checkpointed):
        return (tree.k - tree.s) + recomputed_stages(tree.rest) + recomputed_stages(tree.inner)
    return 0


def keeps_rng_state(node: "Checkpointed", draws) -> bool:
    """Whether the checkpoint of segment [s, k) keeps the generator state."""
    return draws is None or any(draws[node.s:node.k])


def opened_segments(tree: Segment) -> list:
    """The checkpointed segments a forward of ``tree`` calls: those on its chain of
    ``rest`` links and, inside each, those its own function calls (its ``inner``)."""
    out = []
    while not isinstance(tree, End):
        if isinstance(tree, Checkpointed):
            out.append(tree)
            out.extend(opened_segments(tree.inner))
        tree = tree.rest
    return out


def checkpoint_state_bytes(tree: Segment, draws, state_bytes: int) -> list:
    """Per operation of :func:`nested_schedule`'s schedule, the bytes of random generator
    states that :func:`run_nested` holds (``state_bytes`` each; only checkpoints that keep
    one, ``draws`` as in :func:`run_nested`).

    A non-reentrant checkpoint saves the generator's state at its call and keeps it as long
    as the graph of its first forward lives, to the end of its backward.  Its function is
    the segment's nested form, so its first forward calls the checkpoints nested in it, and
    the states of those first calls live from the outer call to the end of their own
    backwards (the backward runs on the first forward's graph).  A replay (the schedule's
    replay of a segment, before its first backward) runs inside ``torch.random.fork_rng``,
    which keeps one more state, and calls the nested checkpoints again, whose states go with
    the replayed graph when the replay ends."""
    live: list = []  # per operation, states held
    back: list = []  # per operation, whether it is a backward
    pos: dict = {}  # id(node) -> (call, replay start, replay end) operation indices
    top: list = []  # checkpointed segments called by the outermost forward

    def op(backward: bool) -> None:
        live.append(0)
        back.append(backward)

    def emit(node: Segment, outer: bool) -> None:
        while True:
            if isinstance(node, Kept):
                op(False)
                emit(node.rest, outer)
                op(True)
                return
            if isinstance(node, Checkpointed):
                call = len(live)
                if outer:
                    top.append(node)
                for _ in range(node.k - node.s):
                    op(False)
                emit(node.rest, outer)
                start = len(live)
                emit(node.inner, False)
                pos[id(node)] = (call, start, len(live))
                return
            if node.loss:
                op(False)
            return

    emit(tree, True)

    def keep(node) -> int:
        return int(keeps_rng_state(node, draws))

    for n in top:  # first calls: from the outer call to the end of each one's backward
        for d in [n] + opened_segments(n.inner):
            for j in range(pos[id(n)][0], pos[id(d)][2]):
                live[j] += keep(d)
    for x in _all_checkpointed(tree):  # replays: fork_rng's state and the nested calls
        _, start, end = pos[id(x)]
        extra = keep(x) + sum(keep(e) for e in opened_segments(x.inner))
        j = start
        while j < end and not back[j]:
            live[j] += extra
            j += 1
    return [n * state_bytes for n in live]


def _all_checkpointed(tree: Segment) -> list:
    if isinstance(tree, Kept):
        return _all_checkpointed(tree.rest)
    if isinstance(tree, Checkpointed):
        return [tree] + _all_checkpointed(tree.rest) + _all_checkpointed(tree.inner)
    return []


def nested_schedule(tree: Segment, length: int) -> Schedule:
    """The schedule a nested form stands for (the inverse of :func:`nested_form`)."""
    ops: list = []

    def emit(node: Segment) -> None:
        if isinstance(node, Kept):
            ops.append(f"Fall{node.s}")
            emit(node.rest)
            ops.append(f"B{node.s}")
        elif isinstance(node, Checkpointed):
            ops.append(f"Fck{node.s}")
            ops.extend(f"Fn{j}" for j in range(node.s + 1, node.k))
            emit(node.rest)
            emit(node.inner)
        elif node.loss:
            ops.append(LOSS)

    emit(tree)
    return Schedule(ops)
