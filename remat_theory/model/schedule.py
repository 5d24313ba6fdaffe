"""Operations and schedules, with their token form (docs/model.md).

Tokens: ``Fn{i}``, ``Fck{i}``, ``Fall{i}``, ``Loss``, ``B{i}``; and, only in the optional
explicit-deletion extension, ``Dropx{i}`` / ``Dropt{i}`` (free a held plain x_i / tape t_i
at zero cost); and, only on a chain with a ``bandwidth`` (the two-stream model of
docs/model.md, "Offloading"), the transfers ``Offx{i}`` / ``Offt{i}`` (copy x_i / t_i to
the host) and ``Prex{i}`` / ``Pret{i}`` (copy it back).  A schedule's text is its tokens
separated by spaces (commas also accepted).
"""
from __future__ import annotations

import gc
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Iterator, Sequence

from remat_theory.model.errors import ScheduleParseError

FN, FCK, FALL, LOSS, B, DROP = "Fn", "Fck", "Fall", "Loss", "B", "Drop"
OFF, PRE = "Off", "Pre"  # transfers of the two-stream model (remat_theory.model.offload)
FORWARD_KINDS = (FN, FCK, FALL)
TRANSFER_KINDS = (OFF, PRE)
TARGET_KINDS = (DROP, OFF, PRE)  # ops that name a value x_i or t_i
KINDS = (FN, FCK, FALL, LOSS, B, DROP, OFF, PRE)

_STAGE_KINDS = frozenset((FN, FCK, FALL, B))  # ops with a stage index and no target

# Stage indices in ASCII digits, without leading zeros (``Fall٠`` and ``Fall00`` are no
# tokens: ``\d`` would match every script's digits).
_TOKEN = re.compile(r"^(Fn|Fck|Fall|B)(0|[1-9][0-9]*)$|^(Loss)$"
                    r"|^(Drop|Off|Pre)([xt])(0|[1-9][0-9]*)$")
# a token with a badly written index
_LOOSE = re.compile(r"^(Fn|Fck|Fall|B|Drop[xt]|Off[xt]|Pre[xt])(\d+)$")
_SEPARATORS = re.compile(r"[ \t\r\n]+")  # between tokens: ASCII whitespace only


@dataclass(frozen=True, order=True)
class Op:
    """One operation.  ``index`` is the stage i (None for Loss); ``target`` is ``"x"`` or
    ``"t"`` for a Drop, an offload or a prefetch (the value x_i or t_i it frees or moves),
    None otherwise."""

    kind: str
    index: int | None = None
    target: str | None = None

    def __post_init__(self) -> None:
        if (self.kind in _STAGE_KINDS and type(self.index) is int and self.index >= 0
                and self.target is None):  # the common case, checked at once
            return
        if self.kind not in KINDS:
            raise ScheduleParseError(f"unknown operation kind {self.kind!r}")
        if self.kind == LOSS:
            if self.index is not None:
                raise ScheduleParseError("Loss takes no stage index")
        elif isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise ScheduleParseError(f"{self.kind} needs a stage index >= 0, got {self.index!r}")
        if self.kind in TARGET_KINDS:
            if self.target not in ("x", "t"):
                raise ScheduleParseError(f"{self.kind} target must be 'x' or 't', got "
                                         f"{self.target!r}")
        elif self.target is not None:
            raise ScheduleParseError(f"{self.kind} takes no target")

    @cached_property  # an op is immutable: its token is made once (schedules share ops)
    def token(self) -> str:
        if self.kind == LOSS:
            return LOSS
        if self.kind in TARGET_KINDS:
            return f"{self.kind}{self.target}{self.index}"
        return f"{self.kind}{self.index}"

    def __str__(self) -> str:
        return self.token

    @property
    def is_forward(self) -> bool:
        return self.kind in FORWARD_KINDS

    @property
    def is_transfer(self) -> bool:
        """An offload or a prefetch: it runs on the copy channel, not the compute stream."""
        return self.kind in TRANSFER_KINDS

    @classmethod
    def parse(cls, token: str) -> "Op":
        m = _TOKEN.match(token)
        if not m and isinstance(token, str):
            loose = _LOOSE.match(token)
            if loose:
                digits = loose.group(2)
                why = ("has a leading zero" if digits.isascii()
                       else "must be written in ASCII digits 0-9")
                raise ScheduleParseError(f"op token {token[:30]!r}: stage index {digits[:20]!r} "
                                         f"{why}")
            sep = next((c for c in token if c in ",;|" or c.isspace()), None)
            if sep is not None and len(token) > 1:
                raise ScheduleParseError(f"op token {token[:30]!r}: tokens are separated by "
                                         f"spaces, and {sep!r} is no part of a token")
        if not m:
            raise ScheduleParseError(
                f"unknown op token {token!r} (expected Fn<i>, Fck<i>, Fall<i>, Loss, B<i>, "
                f"Dropx<i>, Dropt<i>, Offx<i>, Offt<i>, Prex<i> or Pret<i>)")
        digits = m.group(2) or m.group(6) or ""
        if len(digits) > 18:  # int() refuses above 4,300 digits; no chain is that long
            raise ScheduleParseError(f"op token {token[:30]!r}...: stage index of "
                                     f"{len(digits)} digits is out of range")
        if m.group(1):
            return cls(m.group(1), int(m.group(2)))
        if m.group(3):
            return cls(LOSS)
        return cls(m.group(4), int(m.group(6)), m.group(5))


def Fn(i: int) -> Op:
    return Op(FN, i)


def Fck(i: int) -> Op:
    return Op(FCK, i)


def Fall(i: int) -> Op:
    return Op(FALL, i)


def Bwd(i: int) -> Op:
    return Op(B, i)


def DropX(i: int) -> Op:
    return Op(DROP, i, "x")


def DropT(i: int) -> Op:
    return Op(DROP, i, "t")


def OffX(i: int) -> Op:
    return Op(OFF, i, "x")


def OffT(i: int) -> Op:
    return Op(OFF, i, "t")


def PreX(i: int) -> Op:
    return Op(PRE, i, "x")


def PreT(i: int) -> Op:
    return Op(PRE, i, "t")


LOSS_OP = Op(LOSS)

_STAGE_OPS: dict = {FN: [], FALL: [], B: [], FCK: []}


def stage_ops(kind: str, n: int) -> list:
    """The ops of ``kind`` (``Fn``, ``Fck``, ``Fall`` or ``B``) of stages ``0 .. n-1``, as
    a list shared by every caller (never modify it; slice it): a schedule of millions of
    operations is then built by slicing, its ops made once per stage and process.  Each
    op equals ``Op(kind, i)``; it is made without the checks of :class:`Op`, which its
    kind and index pass by construction."""
    ops = _STAGE_OPS[kind]
    if len(ops) < n:
        collecting = gc.isenabled()
        gc.disable()  # a million long-lived objects: the collector's passes would double it
        try:
            new = object.__new__
            for i in range(len(ops), n):
                op = new(Op)
                op.__dict__.update(kind=kind, index=i, target=None)
                ops.append(op)
        finally:
            if collecting:
                gc.enable()
    return ops


class Schedule(Sequence):
    """An immutable sequence of operations."""

    __slots__ = ("_ops",)

    def __init__(self, ops: Iterable[Op | str] = ()):
        ops = tuple(ops)
        if set(map(type, ops)) <= {Op}:  # operations only (the solvers' case): at once
            self._ops = ops
            return
        items = []
        for k, o in enumerate(ops):
            if isinstance(o, str):
                try:
                    o = Op.parse(o)
                except ScheduleParseError as e:
                    raise ScheduleParseError(f"token {k}: {e}") from None
            elif not isinstance(o, Op):
                raise ScheduleParseError(f"token {k}: {o!r} is not an operation")
            items.append(o)
        self._ops = tuple(items)

    @classmethod
    def parse(cls, text: str) -> "Schedule":
        """Parse the token form, e.g. ``"Fck0 Fn1 Fall2 Loss B2 ..."`` (ASCII whitespace
        between tokens; a comma is refused, as are non-ASCII digits and leading zeros).

        >>> s = Schedule.parse("Fck0 Fn1  Fall2\tLoss B2")
        >>> s.tokens(), len(s)
        (['Fck0', 'Fn1', 'Fall2', 'Loss', 'B2'], 5)
        >>> Schedule.parse(str(s)) == s
        True
        >>> Schedule.parse("Fck0,Fn1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        remat_theory.model.errors.ScheduleParseError: token 0: ...
        """
        if not isinstance(text, str):
            raise ScheduleParseError(f"schedule text must be a string, got {type(text).__name__}")
        return cls(t for t in _SEPARATORS.split(text) if t)

    def tokens(self) -> list[str]:
        return [o.token for o in self._ops]

    def __str__(self) -> str:
        return " ".join(self.tokens())

    def __repr__(self) -> str:
        return f"Schedule.parse({str(self)!r})"

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return Schedule(self._ops[k])
        return self._ops[k]

    def __eq__(self, other) -> bool:
        if isinstance(other, Schedule):
            return self._ops == other._ops
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._ops)

    def __add__(self, other: "Schedule | Sequence[Op]") -> "Schedule":
        return Schedule(self._ops + tuple(other))

    @property
    def ops(self) -> tuple:
        return self._ops

    def count(self, kind: str) -> int:  # type: ignore[override]
        return sum(1 for o in self._ops if o.kind == kind)

    def forward_count(self) -> int:
        """Number of forward operations (any kind)."""
        return sum(1 for o in self._ops if o.is_forward)
