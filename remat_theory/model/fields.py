"""The one table of chain fields, and the variations that draw the optional ones.

Every reader of a chain's fields (validation, :meth:`Chain.replace`, ``to_dict`` /
``from_dict``, scaling, the gcd of sizes, the totals check, the DPs' list of sizes, hard
search's moves, the command line) iterates over :data:`FIELDS`; nothing else lists them.

A field is a per-stage array of a ``kind`` (``time``: seconds, ``size``: bytes, ``flag``:
booleans) and a ``length`` (``"L"`` or ``"L+1"``), or one number (``length`` ``"1"``: the
``rate`` ``bandwidth``, bytes per second, None when absent).  ``optional`` fields extend the model:
absent, they take their default and the chain means exactly what it meant before they
existed, and a solver that models one says so in its registration
(``solvers.registry.register(supports=...)``); the registry refuses a chain that uses an
optional field its solver does not model.

A :class:`Variation` (``fall-costs``, ``unsaved-outputs``, ``offload``) is a name for drawing some
optional fields on a chain: ``remat verify --variations``, ``remat hard --variations``,
:func:`remat_theory.strategies.chains` and the solver contract tests iterate over
:data:`VARIATIONS`.

Adding an optional field is adding its :class:`Field` here (with ``variation=`` naming a
:class:`Variation`, new or existing) and ``supports`` to the solvers that model it
(docs/fields.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from remat_theory.model.errors import ChainError
from remat_theory.model.validation import (check_flag_entry, check_rate, check_size_entry,
                                           check_time_entry)

__all__ = ["Field", "Variation", "FIELDS", "BASE", "OPTIONAL", "VARIATIONS", "KINDS", "field",
           "variation", "names", "optional_names", "of_kind", "variation_names",
           "parse_variations"]

#: kind -> the check of one entry ``check(field_name, index, value)`` (ChainError naming both;
#: index None for a field of one number).  A ``rate`` is bytes per second: it scales with
#: the sizes (:meth:`Chain.scaled_sizes` divides it too, so every copy time is unchanged).
KINDS: dict[str, Callable[[str, Any, Any], Any]] = {
    "time": check_time_entry,
    "size": check_size_entry,
    "flag": check_flag_entry,
    "rate": check_rate,
}


@dataclass(frozen=True)
class Field:
    """One per-stage array of a chain.

    name : the attribute and JSON key.
    kind : ``time`` (seconds), ``size`` (bytes), ``flag`` (booleans) or ``rate`` (bytes per
        second): a key of :data:`KINDS`.
    length : ``"L"`` or ``"L+1"`` (a tuple of that many entries), or ``"1"``: one number
        (:attr:`scalar`), its default (None: absent) when not given.
    doc : one line (docs/model.md has the full table).
    required : must be given (no default).
    default : the value of every entry when absent (``default_from`` None).
    default_from : absent, the field equals this (earlier) field.
    optional : an extension of the model: written to JSON only where it differs from its
        default; a solver models it only if its registration lists it in ``supports``.
    variation : the :class:`Variation` that draws it (optional fields).
    per : ``stage`` (entry i belongs to stage i; an ``L+1`` field's last entry is the loss)
        or ``activation`` (entry i belongs to x_i).
    time_weight : for a time field, how often it counts in the total-time cap: ``"L"`` for a
        forward (recompute-all runs O(L^2) of them), 1 for a backward.
    transient : an overhead (memory held only while an operation runs).
    extends : absent, the field leaves a sub-model: every schedule of the chain without it is
        a schedule of the chain with it, at the same time and memory (``bandwidth``: a
        schedule without transfers never uses the channel).  ``remat verify`` then runs a
        solver that does not model it on the chain without it, and checks the solvers that
        do against that answer (proofs/offload.md, O.1: offloading never hurts).
    """

    name: str
    kind: str
    length: str
    doc: str
    required: bool = False
    default: Any = None
    default_from: str | None = None
    optional: bool = False
    variation: str | None = None
    per: str = "stage"
    time_weight: Any = 1
    transient: bool = False
    extends: bool = False

    @property
    def scalar(self) -> bool:
        """One number, not a per-stage array (``length`` ``"1"``)."""
        return self.length == "1"

    def size(self, L: int) -> int:
        """The number of entries on a chain of L stages (1 for a scalar)."""
        return 1 if self.scalar else L + 1 if self.length == "L+1" else L

    def default_for(self, values: dict, L: int) -> tuple | None:
        """The default entries given the fields validated so far (None: required)."""
        if self.default_from is not None:
            return values[self.default_from]
        if self.required:
            return None
        return (self.default,) * self.size(L)

    def is_default(self, chain) -> bool:
        """True when ``chain``'s value is this field's default (always False if required)."""
        if self.required:
            return False
        value = getattr(chain, self.name)
        if self.default_from is not None:
            return value == getattr(chain, self.default_from)
        if self.scalar:
            return value == self.default
        if isinstance(value, tuple):  # count compares with == too, at C speed
            return value.count(self.default) == len(value)
        return all(v == self.default for v in value)


#: The fields, in the order of validation, of ``Chain(...)``'s positional arguments (the
#: required and base fields, then ``name``, then the optional ones) and of the JSON form.
FIELDS: tuple[Field, ...] = (
    Field("fwd_time", "time", "L", "time of a no-grad forward of stage i (Fn_i, Fck_i)",
          required=True, time_weight="L"),
    Field("bwd_time", "time", "L+1", "time of the backward B_i; the last entry is the loss",
          required=True),
    Field("x_size", "size", "L+1", "size of the activation x_i and of its gradient d_i",
          required=True, per="activation"),
    Field("tape_size", "size", "L", "what the recording forward Fall_i adds: the tape "
          "t_{i+1}, x_{i+1} included", required=True),
    Field("fwd_overhead", "size", "L", "transient memory while a forward of stage i runs",
          default=0, transient=True),
    Field("bwd_overhead", "size", "L+1", "transient memory while B_i (last: the loss) runs",
          default=0, transient=True),
    Field("fall_time", "time", "L", "time of the recording forward Fall_i",
          default_from="fwd_time", optional=True, variation="fall-costs", time_weight="L"),
    Field("fall_overhead", "size", "L", "transient memory while Fall_i runs",
          default_from="fwd_overhead", optional=True, variation="fall-costs", transient=True),
    Field("output_saved", "flag", "L", "false where no backward reads the output x_{i+1}",
          default=True, optional=True, variation="unsaved-outputs"),
    Field("bandwidth", "rate", "1", "bytes per second of the copy channel, each way (absent: "
          "no channel; docs/model.md, Offloading)", optional=True, variation="offload",
          extends=True),
)

#: Fields declared before ``name`` in ``Chain(...)``'s positional order.
BASE = tuple(f for f in FIELDS if not f.optional)
OPTIONAL = tuple(f for f in FIELDS if f.optional)

_BY_NAME = {f.name: f for f in FIELDS}


def field(name: str) -> Field:
    """The :class:`Field` called ``name`` (ChainError naming it and the known ones)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ChainError(f"unknown chain field {name!r} (known: "
                         f"{', '.join(_BY_NAME)})") from None


def names() -> tuple[str, ...]:
    """Every field name, in table order."""
    return tuple(_BY_NAME)


def optional_names() -> tuple[str, ...]:
    """The optional fields' names (what a solver's ``supports`` may list)."""
    return tuple(f.name for f in OPTIONAL)


def of_kind(kind: str) -> tuple[Field, ...]:
    """The fields of one kind, in table order."""
    return tuple(f for f in FIELDS if f.kind == kind)


# ------------------------------------------------------------------------- variations

def _draw_fall_costs(chain, rng: np.random.Generator) -> dict:
    """A recording forward keeps in its tape what a no-grad forward frees as it goes, so
    its transient is smaller, and recording costs some time: ``fall_time[i]`` is
    ``fwd_time[i]`` times a factor in [1, 1.5], ``fall_overhead[i]`` a random part of
    ``fwd_overhead[i]`` (sometimes all of it, sometimes none)."""
    L = chain.length
    factor = 1.0 + 0.5 * rng.random(L)
    fall_time = [float(round(t * f, 3)) for t, f in zip(chain.fwd_time, factor)]
    keep = rng.choice([0.0, 0.25, 0.5, 1.0], size=L)
    fall_overhead = [int(o * k) for o, k in zip(chain.fwd_overhead, keep)]
    return {"fall_time": fall_time, "fall_overhead": fall_overhead}


def _draw_unsaved_outputs(chain, rng: np.random.Generator, fraction: float = 0.5) -> dict:
    """Each stage's output is unsaved with probability ``fraction``, at least one; sizes are
    unchanged (``tape_size`` is what Fall adds in all)."""
    L = chain.length
    saved = [bool(v) for v in rng.random(L) >= fraction]
    if all(saved):
        saved[int(rng.integers(L))] = False
    return {"output_saved": saved}


def _draw_offload(chain, rng: np.random.Generator) -> dict:
    """A copy channel on which copies are neither free nor useless: ``bandwidth`` is the
    chain's tape bytes per second of forward, ``sum(tape_size) / sum(fwd_time)``, divided
    by a factor drawn log-uniformly in [0.25, 4] (the tapes copy in a quarter to four
    times the forward's time); 1 byte per second on a chain without forward time."""
    factor = float(2.0 ** rng.uniform(-2.0, 2.0))
    fwd = math.fsum(chain.fwd_time)
    if fwd <= 0:
        return {"bandwidth": 1.0}
    return {"bandwidth": float(sum(chain.tape_size) / fwd / factor)}


@dataclass(frozen=True)
class Variation:
    """A name for drawing some optional fields on a chain.

    name : the name ``--variations`` takes (``fall-costs``).
    fields : the optional fields it draws (each :class:`Field` names it as ``variation``).
    draw : ``draw(chain, rng, **kwargs)`` -> ``{field: values}`` for a realistic chain (as a
        profiled network has them), from a chain without them; seeded by ``rng``.
    suffix : appended to the chain's name by :meth:`apply`.
    doc : one line.

    Drawing from scratch (hypothesis strategies, hard search) draws each field by its kind.
    """

    name: str
    fields: tuple
    draw: Callable
    suffix: str
    doc: str

    def apply(self, chain, seed: int = 0, **kwargs):
        """``chain`` with this variation's fields drawn (seeded, deterministic)."""
        values = self.draw(chain, np.random.default_rng(seed), **kwargs)
        return chain.replace(**values, name=f"{chain.name}-{self.suffix}")

    def used_by(self, chain) -> bool:
        """True when ``chain`` gives one of this variation's fields a value of its own."""
        return any(not field(f).is_default(chain) for f in self.fields)


#: The variations, in the order they are applied (and of bits in ``remat verify``'s trials).
VARIATIONS: dict[str, Variation] = {v.name: v for v in (
    Variation("fall-costs", ("fall_time", "fall_overhead"), _draw_fall_costs, "fall",
              "the recording forward's own costs (fall_time, fall_overhead)"),
    Variation("unsaved-outputs", ("output_saved",), _draw_unsaved_outputs, "unsaved",
              "outputs no backward reads (output_saved false)"),
    Variation("offload", ("bandwidth",), _draw_offload, "offload",
              "a copy channel to the host (bandwidth; docs/model.md, Offloading)"),
)}


def variation(name: str) -> Variation:
    """The :class:`Variation` called ``name`` (ChainError naming the known ones)."""
    try:
        return VARIATIONS[name]
    except KeyError:
        raise ChainError(f"unknown variation {name!r} (known: "
                         f"{', '.join(VARIATIONS)})") from None


def variation_names() -> tuple[str, ...]:
    return tuple(VARIATIONS)


def parse_variations(spec) -> tuple[str, ...]:
    """Variation names from ``"a,b"`` or an iterable of names: checked, deduplicated and in
    table order (:data:`VARIATIONS`), so the same set always draws the same chains."""
    if spec is None:
        return ()
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    wanted = set()
    for item in items:
        if not isinstance(item, str):
            raise ChainError(f"variation {item!r} is not a name (known: "
                             f"{', '.join(VARIATIONS)})")
        item = item.strip()
        if item:
            wanted.add(variation(item).name)
    return tuple(n for n in VARIATIONS if n in wanted)


def _check_table() -> None:
    """The table's own consistency, checked at import: a bad entry fails loudly."""
    seen = set()
    for f in FIELDS:
        problem = (f.kind not in KINDS and f"unknown kind {f.kind!r}"
                   or f.length not in ("L", "L+1", "1") and f"length {f.length!r}"
                   or f.scalar and f.default_from is not None
                   and "a field of one number has a default, not default_from"
                   or f.default_from is not None and f.default_from not in seen
                   and f"default_from {f.default_from!r} must be an earlier field"
                   or f.extends and not f.optional and "only an optional field extends"
                   or f.optional and f.variation not in VARIATIONS
                   and "an optional field needs a variation of VARIATIONS")
        if problem:
            raise TypeError(f"chain field {f.name}: {problem}")
        seen.add(f.name)
    for v in VARIATIONS.values():
        if any(_BY_NAME[n].variation != v.name for n in v.fields):
            raise TypeError(f"variation {v.name}: each of its fields must name it")


_check_table()
