"""Classes of schedules: one vocabulary for every layer (docs/model.md, proofs/).

A :class:`ScheduleClass` has

- a ``key``: its serialized name, the value of :attr:`Solution.optimal_for` in JSON output
  (``"persistent"``, ``"weakly-persistent"``, ``"weak-runs<=1"``, ``"all"``, ...);
- a ``rule``: the name of the rules of :mod:`remat_theory.model.persistence` that decide
  membership, which is also the value of exhaustive search's ``schedule_class`` option
  (``"persistent"``, ``"weak"``, ``"monotone"``, ``"weak-runs<=K"``, ``"all"``);
- a ``label`` for people and a ``rank``: the classes of the inclusion chain ::

      persistent ⊆ weakly-persistent ⊆ weak-runs<=1 ⊆ weak-runs<=2 ⊆ ... ⊆ all ⊆ all+drop

  are ranked in that order, so ``a ⊆ b`` iff ``a.rank <= b.rank``.  ``run+falls`` (a
  refuted candidate normal form) and ``none`` (a heuristic's "no claim") have no rank and
  are subsets only of themselves.

:func:`schedule_class` accepts either spelling (key or rule name, or a ScheduleClass) and
returns the one object, which is how the two vocabularies that grew apart (``weak`` /
``weakly-persistent``, ``monotone`` / ``weak-runs<=1``) are bridged in exactly one place.
:func:`classify` gives the smallest ranked class a schedule belongs to, decided by the
rules, never by what a solver says.
"""
from __future__ import annotations

from dataclasses import dataclass

from remat_theory.model import persistence
from remat_theory.model.errors import InvalidScheduleError, RematError
from remat_theory.model.schedule import DROP, Schedule
from remat_theory.model.simulator import simulate
from remat_theory.model.validation import check_int

__all__ = ["ScheduleClass", "PERSISTENT", "WEAK", "MONOTONE", "RUNS2", "ALL", "ALL_DROP",
           "RUN_FALLS", "NONE", "OFFLOAD", "NO_REMAT", "PERSISTENT_OFFLOAD", "STORE_ALL_OFFLOAD", "RANKED", "schedule_class", "weak_runs", "subset", "classify",
           "is_class_name"]

# Rank of ``all``: above every weak-runs<=K class (K is at most a chain's length in practice).
_ALL_RANK = 10 ** 6


@dataclass(frozen=True)
class ScheduleClass:
    """A class of schedules (module docstring).

    Attributes
    ----------
    key : serialized name (``Solution.optimal_for``).
    rule : name of the rules of :mod:`remat_theory.model.persistence` that decide
        membership (exhaustive search's ``schedule_class`` option); None for ``none``.
    label : a short description for people.
    rank : position in the inclusion chain (None: outside it).
    allows_drop : True for ``all+drop``: its schedules may use Drop operations.
    """

    key: str
    rule: str | None
    label: str
    rank: int | None
    allows_drop: bool = False

    def __str__(self) -> str:
        return self.key

    def subset_of(self, other: "ScheduleClass | str") -> bool:
        """True when every schedule of this class is also in ``other``."""
        other = schedule_class(other)
        if self == other:
            return True
        n = offload_ops_limit(self.key)
        if n is not None:  # at most n ops: inside all+offload and the longer limits
            m = offload_ops_limit(other.key)
            return other.key == OFFLOAD_KEY or m is not None and n <= m
        if self.key == STORE_ALL_OFFLOAD_KEY:  # inside both offload classes below
            return other.key in (OFFLOAD_KEY, NO_REMAT_KEY, PERSISTENT_OFFLOAD_KEY)
        if other.key == OFFLOAD_KEY:  # the two-stream model contains every canonical schedule
            return self.key in (NO_REMAT_KEY, PERSISTENT_OFFLOAD_KEY) or \
                self.rank is not None and self.rank <= _ALL_RANK
        if other.key == PERSISTENT_OFFLOAD_KEY:  # persistent schedules offload nothing
            return self.key == "persistent"
        return self.rank is not None and other.rank is not None and self.rank <= other.rank

    def contains(self, chain, schedule) -> bool:
        """True when ``schedule`` is valid on ``chain`` (no budget) and obeys the class's
        rules.  ``none`` contains nothing: it is the absence of a claim."""
        if self.rule is None:
            return False
        if not isinstance(schedule, Schedule):
            schedule = Schedule.parse(schedule) if isinstance(schedule, str) else Schedule(schedule)
        transfers = any(op.is_transfer for op in schedule)
        n = offload_ops_limit(self.key)
        if n is not None:
            if len(schedule) > n:
                return False
            return _replays(chain, schedule)
        if self.key in (PERSISTENT_OFFLOAD_KEY, STORE_ALL_OFFLOAD_KEY):
            if not is_persistent_offload(chain, schedule):
                return False
            if self.key == STORE_ALL_OFFLOAD_KEY and (
                    any(op.kind in ("Fn", "Fck") for op in schedule)
                    or schedule.count("Fall") != chain.length):  # an eviction recomputes
                return False
            return _replays(chain, schedule)
        if self.key in (OFFLOAD_KEY, NO_REMAT_KEY):
            if not _replays(chain, schedule):
                return False
            return self.key == OFFLOAD_KEY or all(op.kind not in ("Fn", "Fck", "Drop")
                                                  for op in schedule) and \
                schedule.count("Fall") == chain.length
        if transfers:
            return False
        if self.rule == persistence.ALL:
            if not self.allows_drop and any(op.kind == DROP for op in schedule):
                return False
            return _replays(chain, schedule, allow_drop=self.allows_drop)
        return persistence.is_class_member(chain, schedule, self.rule)


PERSISTENT = ScheduleClass("persistent", persistence.PERSISTENT,
                           "persistent (Rotor): checkpoints kept until their backward", 0)
WEAK = ScheduleClass("weakly-persistent", persistence.WEAK,
                     "weakly persistent: checkpoints may be released early", 1)
MONOTONE = ScheduleClass("weak-runs<=1", persistence.MONOTONE,
                         "monotone: forward stages never decrease inside a phase", 2)
ALL = ScheduleClass("all", persistence.ALL, "every valid schedule of the canonical model",
                    _ALL_RANK)
ALL_DROP = ScheduleClass("all+drop", persistence.ALL,
                         "every valid schedule, explicit deletions (Drop) allowed",
                         _ALL_RANK + 1, allows_drop=True)
OFFLOAD_KEY, NO_REMAT_KEY = "all+offload", "no-remat+offload"
PERSISTENT_OFFLOAD_KEY = "persistent+offload"
# all+offload<=N: the schedules of the two-stream model of at most N operations (ilp-offload,
# proofs/offload.md O.13); the name with a literal N is the family, in registrations.
OFFLOAD_OPS_PREFIX = OFFLOAD_KEY + "<="
OFFLOAD_OPS_FAMILY = OFFLOAD_OPS_PREFIX + "N"
STORE_ALL_OFFLOAD_KEY = "store-all+offload"
# The two-stream model (docs/model.md, "Offloading"): every valid schedule with transfers
# allowed; and its schedules without recomputation (each stage's forward once, a Fall).
# Outside the rank chain (all+drop and all+offload are incomparable); subset_of knows that
# every canonical class is inside all+offload.
OFFLOAD = ScheduleClass(OFFLOAD_KEY, persistence.ALL,
                        "every valid schedule of the two-stream model (offload, prefetch)", None)
NO_REMAT = ScheduleClass(NO_REMAT_KEY, persistence.ALL,
                         "two-stream schedules without recomputation (offloading only)", None)
# Persistent schedules whose segments may offload their input once (solvers/offload/dp.py,
# proofs/offload.md O.10): decided by is_persistent_offload, a parser of that grammar.
PERSISTENT_OFFLOAD = ScheduleClass(PERSISTENT_OFFLOAD_KEY, persistence.ALL,
                                   "persistent, each segment may offload its input once "
                                   "(dp-offload)", None)
# Its schedules without recomputation: store-all, each tape (or unsaved output) offloaded
# after the next forward read it and prefetched right before its backward, or kept.
STORE_ALL_OFFLOAD = ScheduleClass(STORE_ALL_OFFLOAD_KEY, persistence.ALL,
                                  "store-all, each segment input offloaded once or kept "
                                  "(dp-offload-only)", None)
RUN_FALLS = ScheduleClass(persistence.RUN_FALLS, persistence.RUN_FALLS,
                          "one weakly increasing run per phase, then only Fall", None)
NONE = ScheduleClass("none", None, "no claim (a heuristic)", None)


def _replays(chain, schedule, allow_drop: bool = False) -> bool:
    """Whether the referee replays ``schedule`` on ``chain`` without refusing it."""
    try:
        simulate(chain, schedule, allow_drop=allow_drop)
    except InvalidScheduleError:
        return False
    return True


def weak_runs(k: int) -> ScheduleClass:
    """At most ``k`` weakly increasing runs of forward stages per phase (k = 1: monotone)."""
    k = check_int(k, "weak-runs<=K: K", minimum=1)
    if k == 1:
        return MONOTONE
    key = f"{persistence.RUNS_PREFIX}{k}"
    return ScheduleClass(key, key, f"at most {k} weakly increasing forward runs per phase",
                         1 + k)


RUNS2 = weak_runs(2)
# The classes a schedule is classified into, smallest first (``classify``).
RANKED = (PERSISTENT, WEAK, MONOTONE, RUNS2, ALL, ALL_DROP)
_BY_NAME = {c.key: c for c in RANKED + (RUN_FALLS, NONE, OFFLOAD, NO_REMAT,
                                         PERSISTENT_OFFLOAD, STORE_ALL_OFFLOAD)}
_BY_NAME.update({c.rule: c for c in RANKED + (RUN_FALLS,) if c.rule != persistence.ALL})


def schedule_class(name: "str | ScheduleClass") -> ScheduleClass:
    """The class named ``name``: a key (``"weakly-persistent"``), a rule name (``"weak"``),
    ``"weak-runs<=K"`` for any K >= 1, or a ScheduleClass (returned as is).  Raises
    :class:`RematError` naming an unknown name."""
    if isinstance(name, ScheduleClass):
        return name
    if name == OFFLOAD_OPS_FAMILY:
        return ScheduleClass(name, None, "schedules of the two-stream model of at most N "
                             "operations (a family: each answer names its N)", None)
    n = offload_ops_limit(name)
    if n is not None:
        return ScheduleClass(name, persistence.ALL, f"schedules of the two-stream model of "
                             f"at most {n} operations", None)
    found = _BY_NAME.get(name) if isinstance(name, str) else None
    if found is not None:
        return found
    k = persistence.runs_limit(name) if isinstance(name, str) else None
    if k is not None:
        return weak_runs(k)
    raise RematError(f"schedule class {name!r} is unknown (known: "
                     f"{', '.join(c.key for c in RANKED + (RUN_FALLS, NONE))}, their rule names "
                     f"{', '.join(persistence.CLASSES)}, or '{persistence.RUNS_PREFIX}K')")


def is_class_name(name) -> bool:
    """True when :func:`schedule_class` knows ``name``."""
    try:
        schedule_class(name)
    except RematError:
        return False
    return True


def subset(a: "str | ScheduleClass", b: "str | ScheduleClass") -> bool:
    """True when every schedule of class ``a`` is also in class ``b`` (False for an unknown
    name: no claim can be compared with it)."""
    if not (is_class_name(a) and is_class_name(b)):
        return False
    return schedule_class(a).subset_of(b)


def classify(chain, schedule) -> ScheduleClass:
    """The smallest class of :data:`RANKED` that ``schedule`` belongs to (``all+drop`` when
    it uses Drop operations; with transfers, ``no-remat+offload`` or else ``all+offload``), decided by the rules of :mod:`remat_theory.model.persistence`."""
    if any(op.is_transfer for op in schedule):  # no recomputation: the smaller class
        if NO_REMAT.contains(chain, schedule):
            return NO_REMAT
        return PERSISTENT_OFFLOAD if PERSISTENT_OFFLOAD.contains(chain, schedule) else OFFLOAD
    if any(op.kind == DROP for op in schedule):
        return ALL_DROP
    for cls in RANKED[:4]:
        if cls.contains(chain, schedule):
            return cls
    return ALL


def is_persistent_offload(chain, schedule) -> bool:
    """True when the tokens of ``schedule`` follow the grammar of the class
    ``persistent+offload`` (proofs/offload.md, O.10, O.16 and O.18): segment (s, t) is the
    loss (s = t = L), ``Fall_s B_s`` (s = t < L), option A ``Fall_s E <s+1, t> P B_s`` or
    option B ``Fck_s [Off C] Fn_{s+1} .. Fn_{k-1} <k, t> [Pre C] <s, k-1>``.  C is the
    segment's input container (the tape t_s, or a plain x_s: after Fck, or where the output
    is unsaved), moved only by a segment that starts fresh (after C was made or
    prefetched), never x_0.  In option A, C and the tape t_{s+1} of an unsaved output (it
    holds no input) are each kept, offloaded right after Fall_s (E: ``Off C`` then ``Off
    t_{s+1}``) or *late*: right after the child's first op, before the child's own
    offload; each value that moved is prefetched (``Pre t_{s+1}`` before ``Pre C``) right
    before B_s (P) or *early*: right before the child's last op, after the child's own
    prefetches, when the child is the loss, ``Fall B`` or option A.  A child that takes
    late offloads is not the loss and does not move its own container late.  *Evictions*:
    a segment that keeps its input, takes no late offload and no prefetch ahead, and whose
    input and output are saved may run ``Fall_s <child> B_s`` or ``Fck_s <child> B_s``
    where the child moves its container (right after its first op or one op later), moves
    no tape, and has ``Fall_s`` instead of the prefetch right before its last op.  O.25
    adds: a segment offered late offloads that moves nothing itself may pass them on to its
    child (option A, or option B with its part kept, the parent's prefetches then taken
    before the part's last op), down to the loss, which may take them right after it; the
    container recreated as a plain x by ``Fck_s``, then ``Fall_s`` before ``B_s``; the
    evicting child's tape moved as in option A, prefetched right before the recomputing
    forward.
    Validity is the simulator's to decide."""
    ops = list(schedule)
    L = chain.length
    pos = [0]

    def peek():
        return ops[pos[0]] if pos[0] < len(ops) else None

    def is_(op, kind, index, target=None):
        return op is not None and op.kind == kind and op.index == index and \
            (target is None or op.target == target)

    def expect(kind, index, target=None):
        op = peek()
        if op is None or op.kind != kind or (index is not None and op.index != index) or \
                (target is not None and op.target != target):
            raise ValueError
        pos[0] += 1

    def take_late(late):
        """The parent's late offloads offered to this segment, consumed in order where they
        follow its first op."""
        got = []
        for kind, index, target in late:
            if is_(peek(), kind, index, target):
                pos[0] += 1
                got.append((kind, index, target))
        return got

    def take_pre(pre):
        """The parent's prefetches taken right before this segment's last op (any of them,
        in order)."""
        got = []
        for v in pre:
            if is_(peek(), *v):
                pos[0] += 1
                got.append(tuple(v))
        return got

    def redo(ev, form):
        """The parent's forward recreating an evicted container, if it is next: "Fall",
        or "Fck" (a plain x, O.25) where the container is a tape; else None."""
        if ev is None:
            return None
        if is_(peek(), "Fall", ev):
            return "Fall"
        return "Fck" if form == "t" and is_(peek(), "Fck", ev) else None

    def seg(s, t, fresh, form, late=(), pre=None, ev=None, dfr=()):
        """Parse segment (s, t); ``late``: the parent's offloads it may take after its
        first op; ``dfr``: offloads of an ancestor passed on by segments that moved nothing
        (O.25), taken the same way, or by the loss right after it; ``pre(taken)``: the
        parent's prefetches it may take before its last op (None: none); ``ev``: the
        parent's stage when its forward may recreate this segment's container right before
        the last op (an eviction).  Returns (late or passed offloads taken, prefetches
        taken, the recreating forward's kind when the container was evicted, else None)."""
        if s == t:
            if t == L:
                early = take_pre(pre([]) if pre else [])
                expect("Loss", None)
                return (take_late(dfr) if not early else []), early, None
            expect("Fall", s)
            got = take_late(list(late) + list(dfr))
            if not got and is_(peek(), "Off", s, form):
                pos[0] += 1
                kind = redo(ev, form)
                if kind is None:
                    raise ValueError
                pos[0] += 1
                expect("B", s)
                return got, [], kind
            early = take_pre(pre(got) if pre else [])
            expect("B", s)
            return got, early, None
        op = peek()
        if op is None or op.index != s or op.kind not in ("Fall", "Fck"):
            raise ValueError
        pos[0] += 1
        got = take_late(list(late) + list(dfr))
        pending = bool(got)
        # nothing taken: the offers may be passed on to the child (a segment that moves
        # nothing itself, O.25)
        down = [] if got else list(late) + list(dfr)
        off = fresh and s >= 1 and is_(peek(), "Off", s, form)
        if off:
            pos[0] += 1
        # an eviction by this segment: it keeps its input, takes no late offload, and its
        # output is saved (the recreated tape holds it)
        ev_child = (s if not pending and not off and chain.saved(s + 1) and chain.saved(s)
                    else None)
        if op.kind == "Fall":
            unsaved = not chain.saved(s + 1)  # t_{s+1} holds no input: a tape that may move
            t_early = unsaved and is_(peek(), "Off", s + 1, "t")
            if t_early:
                pos[0] += 1
            offer = []
            if fresh and s >= 1 and not off and not pending:
                offer.append(("Off", s, form))
            if unsaved and not t_early:
                offer.append(("Off", s + 1, "t"))

            def mine(taken):  # what this segment moved, in prefetch order
                return ((["Pre", s + 1, "t"],) if t_early or ("Off", s + 1, "t") in taken
                        else ()) + ((["Pre", s, form],) if off or ("Off", s, form) in taken
                                    else ())

            taken, early, evicted = seg(s + 1, t, True, "x" if unsaved else "t", offer, mine,
                                        ev_child, down)
            passed = [v for v in taken if v in down]
            if passed:  # O.25: this segment moved nothing and passed the offloads on
                if off or t_early or len(passed) != len(taken) or evicted:
                    raise ValueError
                early_parent = take_pre(pre(passed) if pre else [])
                expect("B", s)
                return passed, early_parent, None
            moved = mine(taken)
            if evicted:
                if moved:
                    raise ValueError
            elif ev is not None and not got and (off or ("Off", s, form) in taken) and \
                    not early:
                # this segment's own container evicted: its parent's forward instead of
                # the prefetch, after the tape t_{s+1}'s prefetch if it moved (O.25)
                save = pos[0]
                back = [v for v in moved if tuple(v) not in early]
                if back and back[0][2] == "t" and back[0][1] == s + 1 and is_(peek(), *back[0]):
                    pos[0] += 1
                    back = back[1:]
                kind = redo(ev, form)
                if kind is not None and all(v[2] == form and v[1] == s for v in back):
                    pos[0] += 1
                    expect("B", s)
                    return got, [], kind
                pos[0] = save
            for v in moved:
                if tuple(v) not in early:
                    expect(*v)
            early_parent = take_pre(pre(got) if pre else [])
            if evicted and early_parent:
                raise ValueError
            if evicted == "Fck":  # recreated as a plain x_{s+1}: t_{s+1} again for B_s
                expect("Fall", s)
            expect("B", s)
            return got, early_parent, None
        k = s + 1  # option B: its last op is its part's, offered no prefetch
        while k < t and (o := peek()) is not None and o.kind == "Fn" and o.index == k:
            pos[0] += 1
            k += 1
        # O.26: C (fresh, not pending) may be offloaded right after the child's first op
        # instead, and prefetched right before the child's last op
        own_ok = fresh and s >= 1 and not pending
        boffer = [("Off", s, form)] if own_ok and not off and k < L else []

        def bpre(taken):
            return (["Pre", s, form],) if off or ("Off", s, form) in taken else ()

        got_k, early_k, evicted = seg(k, t, True, "x", boffer, bpre if own_ok else None,
                                      ev_child if k == s + 1 else None,
                                      down if not off else ())
        passed = [v for v in got_k if v in down]
        moved = off or bool([v for v in got_k if v in boffer])
        if passed:  # O.25: passed on; the part kept, taking the parent's prefetches
            if evicted or moved or early_k:
                raise ValueError
            _, early, _ = seg(s, k - 1, False, form, (), (lambda _: pre(passed)) if pre
                              else None)
            return passed, early, None
        if evicted:
            if evicted != "Fall" or moved or early_k or \
                    pre is not None and take_pre(pre(got)):
                raise ValueError
            expect("B", s)
            return got, [], None
        if moved and ("Pre", s, form) not in early_k:
            expect("Pre", s, form)
        seg(s, k - 1, moved, form)
        return got, [], None

    try:
        seg(0, L, False, "t")
    except (ValueError, IndexError, RecursionError):
        return False
    return pos[0] == len(ops)


def offload_ops_limit(key) -> int | None:
    """N for the class ``all+offload<=N`` (N >= 1); None for any other name."""
    if isinstance(key, str) and key.startswith(OFFLOAD_OPS_PREFIX):
        rest = key[len(OFFLOAD_OPS_PREFIX):]
        if rest.isdigit() and int(rest) >= 1:
            return int(rest)
    return None


def family(key: str) -> str:
    """The name a registration uses for a class: ``all+offload<=N`` for every
    ``all+offload<=n``, the key itself otherwise."""
    return OFFLOAD_OPS_FAMILY if offload_ops_limit(key) is not None else key
