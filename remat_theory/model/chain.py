"""The chain: per-stage costs of a network seen as a sequence of stages (docs/model.md).

A chain has ``L >= 1`` forward stages F_0..F_{L-1} followed by a loss stage.  Stage i reads
x_i and produces x_{i+1}; its tape t_{i+1} (what autograd saves for B_i) includes x_{i+1},
unless the optional ``output_saved[i]`` is false: then no backward reads x_{i+1} (a Linear
saves its input, not its output; a ReLU after it saves its own output), x_{i+1} is a plain
value outside the tape, and the tape holds ``tape_size[i] - x_size[i+1]`` bytes.

Units: times in seconds (or any consistent unit), sizes in bytes (integers).
The model is the one of Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, "Optimal
checkpointing for heterogeneous chains" (Rotor), with the loss freeing its plain input.
"""
from __future__ import annotations

import codecs
import json
import math
import numbers
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import reduce
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from remat_theory.model import fields as _fields
from remat_theory.model.errors import ChainError
from remat_theory.model.fields import FIELDS, KINDS
from remat_theory.model.validation import check_array_and_numpy, format_number

__all__ = ["Chain", "FORMAT", "MAX_TOTAL_TIME", "MAX_TOTAL_SIZE", "format_number",
           "decode_text"]

FORMAT = "remat-chain/1"

#: Largest allowed ``(sum(fwd_time) + sum(fall_time)) * L + sum(bwd_time)`` (seconds, or the
#: chain's time unit).
#: Recompute-all runs O(L^2) forwards, so this bounds the makespan of the schedules the
#: solvers build; far above any real network (1e18 s, or 31 years in nanoseconds), and below
#: the magnitudes MILP solvers treat as infinite (HiGHS: 1e20), so every makespan stays a
#: finite, meaningful float.
MAX_TOTAL_TIME = 1e18

#: Largest allowed sum of every size and overhead of a chain (bytes): 2**53 (8 PiB), so that
#: every sum of sizes a solver forms is exact as a float64 as well as an int64.
MAX_TOTAL_SIZE = 2 ** 53


def _check_totals(chain: "Chain") -> None:
    """Reject magnitudes whose sums would overflow or lose meaning in a solver, naming the
    field and index at which the running total first passes the cap (:data:`MAX_TOTAL_TIME`,
    :data:`MAX_TOTAL_SIZE`); every value on its own is already finite.

    Time: every time field weighted by its ``time_weight`` (:mod:`remat_theory.model.fields`):
    ``(sum(fwd_time) + sum(fall_time)) * L + sum(bwd_time)``, as recompute-all runs O(L^2)
    forwards; a field equal to the field it defaults to is counted through that one (so the
    error names a field of the file).  Size: every size field (a defaulted one likewise).
    """
    L = chain.length
    weight: dict[str, int] = {}
    for f in _fields.of_kind("time"):
        w = L if f.time_weight == "L" else int(f.time_weight)
        if f.default_from is not None and f.is_default(chain):
            weight[f.default_from] += w
        else:
            weight[f.name] = w
    order = sorted(weight, key=lambda n: _fields.field(n).time_weight != "L")  # stable
    formula = (" + ".join(f"sum({f.name})" for f in _fields.of_kind("time")
                          if f.time_weight == "L"))
    formula = f"({formula}) * L + " + " + ".join(
        f"sum({f.name})" for f in _fields.of_kind("time") if f.time_weight != "L")
    if _totals_fit(chain, order, weight):
        return
    total = 0.0
    for f in order:
        for i, v in enumerate(getattr(chain, f)):
            total += v * weight[f]
            if not total <= MAX_TOTAL_TIME:  # also catches an overflow to inf
                raise ChainError(
                    f"{f}[{i}] = {format_number(v)} makes the chain's total time too large: "
                    f"{formula} (recompute-all "
                    f"runs O(L^2) forwards) must be at most {MAX_TOTAL_TIME:g}")
    size = 0
    for fd in _fields.of_kind("size"):
        if fd.default_from is not None and fd.is_default(chain):
            continue
        for i, v in enumerate(getattr(chain, fd.name)):
            size += v
            if size > MAX_TOTAL_SIZE:
                raise ChainError(
                    f"{fd.name}[{i}] = {format_number(v)} makes the chain's total size too "
                    f"large: the sum of every size and overhead must be at most 2**53 bytes "
                    f"({MAX_TOTAL_SIZE:.4g})")


_DTYPES = {"size": np.int64, "time": np.float64, "flag": bool}

#: From this many stages on, the memory formulas are computed at once (numpy).
_VECTOR_MIN = 64


def _first_smaller(a: tuple, b: tuple, a_arr=None, b_arr=None) -> int | None:
    """The first index i with ``a[i] < b[i]`` (integers), None when there is none;
    ``a_arr``/``b_arr``: the same values as int64 arrays when the caller has them."""
    if len(a) >= 64:
        try:
            if a_arr is None:
                a_arr = np.fromiter(a, dtype=np.int64, count=len(a))
            if b_arr is None:
                b_arr = np.fromiter(b, dtype=np.int64, count=len(b))
            lo = a_arr < b_arr
            return int(lo.argmax()) if lo.any() else None
        except OverflowError:  # beyond int64: compared one by one
            pass
    return next((i for i, (u, v) in enumerate(zip(a, b)) if u < v), None)


def _totals_fit(chain: "Chain", order: list, weight: dict) -> bool:
    """True when the running totals of :func:`_check_totals` surely stay under both caps
    (summed at once; a margin covers the rounding of a sum in another order), so that
    the entry-by-entry pass that names the first entry over a cap is not needed.  A long
    field the checks already made a numpy array of is summed there (a million entries in
    a millisecond instead of tens)."""
    cache = chain.__dict__.get("_array_cache") or {}
    total = 0.0
    try:
        for f in order:
            arr = cache.get(f)
            part = float(arr.sum()) if arr is not None else math.fsum(getattr(chain, f))
            total += part * weight[f]
    except OverflowError:  # the entry-by-entry pass names the entry
        return False
    if not total <= MAX_TOTAL_TIME / 2:  # also false for inf and NaN
        return False
    size = 0
    for fd in _fields.of_kind("size"):
        if fd.default_from is not None and fd.is_default(chain):
            continue
        arr = cache.get(fd.name)
        # float64 sum of non-negative int64s: far below the cap, it cannot reach it
        if arr is not None and float(arr.sum(dtype=np.float64)) <= MAX_TOTAL_SIZE / 4:
            size += int(arr.sum())
        else:
            size += sum(getattr(chain, fd.name))
    return size <= MAX_TOTAL_SIZE


def _table_fields(cls):
    """Declare the dataclass fields of :class:`Chain` from the table: the required and
    base fields, then ``name``, then the optional ones (so ``Chain(fwd, bwd, x, tape, fo,
    bo, name=...)`` keeps its positional order, and a new optional field needs no line
    here)."""
    annotations = {}
    for f in _fields.BASE:
        annotations[f.name] = "tuple"
        if not f.required:
            setattr(cls, f.name, None)
    annotations["name"] = "str"
    cls.name = dataclass_field(default="chain", compare=False)
    for f in _fields.OPTIONAL:
        annotations[f.name] = "float | None" if f.scalar else "tuple"
        setattr(cls, f.name, None)
    cls.__annotations__ = annotations
    return dataclass(frozen=True)(cls)


@_table_fields
class Chain:
    """An immutable, validated chain.

    Parameters (all sequences; L = number of forward stages)
    ----------
    fwd_time : L floats, seconds.  fwd_time[i] is the time of F_i.
    bwd_time : L+1 floats, seconds.  bwd_time[i] is the time of B_i; bwd_time[L] is the
        loss (its forward and backward together).
    x_size : L+1 ints, bytes.  Size of x_i and of its gradient d_i.
    tape_size : L ints, bytes.  What the recording forward Fall_i adds: the tape t_{i+1},
        everything F_i saves for B_i, with its output x_{i+1} (so tape_size[i] >=
        x_size[i+1]).
    fwd_overhead : L ints, bytes.  Transient memory while F_i runs (default zeros).
    bwd_overhead : L+1 ints, bytes.  Transient memory while B_i / the loss runs.
    fall_time : L floats, seconds, optional.  Time of the recording forward Fall_i, where it
        differs from a no-grad forward (default: ``fwd_time``).
    fall_overhead : L ints, bytes, optional.  Transient memory while Fall_i runs (default:
        ``fwd_overhead``).  A recording forward keeps in its tape what a no-grad forward
        frees as it goes (a transformer's attention scores), so its transient differs.
    output_saved : L bools, optional (default all true).  ``output_saved[i]`` false: no
        backward reads x_{i+1} (neither B_i nor B_{i+1}; for i = L-1, only the loss reads
        x_L), as for a Linear followed by a ReLU.  Then x_{i+1} is a plain value, never
        inside t_{i+1}; the tape held is ``tape_size[i] - x_size[i+1]`` bytes
        (:attr:`tape_held`); Fall_{i+1} frees x_{i+1} after reading it, and B_{i+1} does not
        need it (docs/model.md, the operation table).
    bandwidth : a number, bytes per second, optional (default None: no copy channel).
        The speed of the channel that copies values between device and host, each way
        (the two-stream model of docs/model.md, "Offloading"; remat_theory.model.offload).
        None is the model without offloading, every answer unchanged; 0 is a channel on
        which no copy ever ends.
    name : free text.

    ``fall_time`` and ``fall_overhead`` are always populated after construction; a chain
    built without them means exactly what it meant before they existed
    (:attr:`has_fall_costs` is False); the same holds for ``output_saved``
    (:attr:`has_unsaved_outputs` is False).
    """

    # The fields are declared from remat_theory.model.fields.FIELDS by @_table_fields.

    def __post_init__(self) -> None:
        fwd = self.fwd_time
        if isinstance(fwd, (str, bytes)) or not hasattr(fwd, "__len__"):
            raise ChainError(f"fwd_time must be a list of numbers, got {type(fwd).__name__}")
        L = len(fwd)
        if L < 1:
            raise ChainError("fwd_time is empty: a chain needs at least one stage")
        set_ = object.__setattr__
        values: dict = {}
        arrays: dict = {}  # numpy arrays the checks made (Chain.array's cache)
        for f in FIELDS:
            raw = getattr(self, f.name)
            if f.scalar:  # one number, or its default (None: absent)
                raw = f.default if raw is None else raw
                values[f.name] = None if raw is None else KINDS[f.kind](f.name, None, raw)
            else:
                if raw is None:  # its default: entries checked already, or the constant's
                    values[f.name] = f.default_for(values, L)
                    if values[f.name] is None:
                        raise ChainError(f"{f.name} must be a list of "
                                         f"{'booleans' if f.kind == 'flag' else 'numbers'}, "
                                         f"got NoneType")
                    if f.default_from in arrays:
                        arrays[f.name] = arrays[f.default_from]
                    elif f.default_from is None and L >= _VECTOR_MIN:  # a constant
                        arr = np.full(f.size(L), f.default, dtype=_DTYPES[f.kind])
                        arr.flags.writeable = False
                        arrays[f.name] = arr
                else:
                    values[f.name], arr = check_array_and_numpy(f.name, raw, f.size(L),
                                                                KINDS[f.kind])
                    if arr is not None:
                        arr.flags.writeable = False
                        arrays[f.name] = arr
            set_(self, f.name, values[f.name])
        if not isinstance(self.name, str):
            raise ChainError(f"name = {self.name!r} is not a string")
        set_(self, "_array_cache", arrays)
        x_arr = arrays.get("x_size")
        i = _first_smaller(self.tape_size, self.x_size[1:], arrays.get("tape_size"),
                           None if x_arr is None else x_arr[1:])
        if i is not None:
            raise ChainError(
                f"tape_size[{i}] = {self.tape_size[i]} is smaller than x_size[{i + 1}] = "
                f"{self.x_size[i + 1]} (the tape of F_{i} includes its output x_{i + 1})"
            )
        _check_totals(self)
        set_(self, "tape_held", self.tape_size if all(self.output_saved) else tuple(
            tp if keep else tp - x for tp, x, keep in
            zip(self.tape_size, self.x_size[1:], self.output_saved)))
        # bit i (1 <= i <= L) set: t_i holds x_i (a backward reads it), so x_i can be read there
        bits = np.zeros(L + 1, dtype=bool)
        bits[1:] = self.output_saved
        set_(self, "saved_mask", int.from_bytes(np.packbits(bits, bitorder="little").tobytes(),
                                                "little"))

    # ------------------------------------------------------------------ basics
    @property
    def length(self) -> int:
        """L, the number of forward stages."""
        return len(self.fwd_time)

    def __len__(self) -> int:
        return self.length

    @property
    def has_fall_costs(self) -> bool:
        """True when the recording forward's time or overhead differs from the no-grad one's
        at some stage (the chain uses the optional ``fall_time`` / ``fall_overhead``)."""
        return self.uses("fall-costs")

    @property
    def has_unsaved_outputs(self) -> bool:
        """True when some stage's output is read by no backward (``output_saved`` has a
        false entry); False means the classic operation table, unchanged."""
        return self.uses("unsaved-outputs")

    def fields_used(self) -> tuple:
        """The optional fields (:mod:`remat_theory.model.fields`) whose value here differs
        from their default: what a solver must model to answer on this chain."""
        return tuple(f.name for f in _fields.OPTIONAL if not f.is_default(self))

    def uses(self, variation: str) -> bool:
        """True when the chain gives a field of ``variation`` (``"fall-costs"``,
        ``"unsaved-outputs"``) a value of its own."""
        return _fields.variation(variation).used_by(self)

    @property
    def has_bandwidth(self) -> bool:
        """True when the chain has a copy channel (``bandwidth`` given): offloads and
        prefetches are then operations of its schedules (docs/model.md, "Offloading")."""
        return self.bandwidth is not None

    def saved(self, i: int) -> bool:
        """Whether x_i is read by a backward (x_0 always: it is never freed anyway)."""
        return i == 0 or self.output_saved[i - 1]

    def replace(self, **changes) -> "Chain":
        """A copy with some fields changed (validated like any chain)."""
        values = {f.name: getattr(self, f.name) for f in FIELDS}
        values["name"] = self.name
        values.update(changes)
        return Chain(**values)

    @classmethod
    def homogeneous(cls, length: int, fwd_time: float = 1.0, bwd_time: float = 1.0,
                    x_size: int = 1, tape_size: int | None = None, loss_time: float = 0.0,
                    name: str | None = None) -> "Chain":
        """A chain whose stages are all equal (the setting of Revolve and Gruslys et al.)."""
        if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 1:
            raise ChainError(f"length = {length!r} must be an integer >= 1")
        tape = x_size if tape_size is None else tape_size
        return cls(
            fwd_time=[fwd_time] * length,
            bwd_time=[bwd_time] * length + [loss_time],
            x_size=[x_size] * (length + 1),
            tape_size=[tape] * length,
            name=name or f"homogeneous-{length}",
        )

    def with_name(self, name: str) -> "Chain":
        return self.replace(name=name)

    def scaled_sizes(self, divisor: int) -> "Chain":
        """The chain with every size divided by ``divisor`` (which must divide them all), and
        every rate (bytes per second: ``bandwidth``) too, so that every copy time, and so
        every makespan, is unchanged: the same problem in units of ``divisor`` bytes."""
        sizes = tuple(f.name for f in _fields.of_kind("size"))
        for f in sizes:
            for i, v in enumerate(getattr(self, f)):
                if v % divisor:
                    raise ChainError(f"{f}[{i}] = {v} is not divisible by {divisor}")
        rates = {f.name: getattr(self, f.name) / divisor for f in _fields.of_kind("rate")
                 if getattr(self, f.name) is not None}
        return self.replace(**{f: [v // divisor for v in getattr(self, f)] for f in sizes},
                            **rates)

    def size_gcd(self) -> int:
        """Greatest common divisor of all sizes and overheads (1 if all are zero)."""
        if self.length >= _VECTOR_MIN:  # exact: every size is below 2**53
            g = 0
            for f in _fields.of_kind("size"):
                g = math.gcd(g, int(np.gcd.reduce(self.array(f.name))))
            return g or 1
        g = reduce(math.gcd, (v for f in _fields.of_kind("size") for v in getattr(self, f.name)),
                   0)
        return g or 1

    # ------------------------------------------------------------------ memory helpers
    def store_all_memory(self) -> int:
        """Peak memory (bytes) of store-all (Fall every stage, Loss, B every stage).

        Closed form; the tests check it against the simulator.
        """
        L = self.length
        if L >= _VECTOR_MIN:
            return self._store_all_memory_np()
        x, tp, fo, bo = self.x_size, self.tape_size, self.fall_overhead, self.bwd_overhead
        peak = x[0]
        held = x[0]
        for i in range(L):
            peak = max(peak, held + tp[i] + fo[i])
            held += tp[i]  # t_{i+1}, with x_{i+1} inside or beside it
            if i >= 1 and not self.output_saved[i - 1]:
                held -= x[i]  # Fall_i frees the unsaved x_i it read
        peak = max(peak, held + x[L] + bo[L])
        held += x[L]  # d_L; a saved x_L lives inside t_L, which stays
        if not self.output_saved[L - 1]:
            held -= x[L]  # the loss frees a plain x_L
        for i in range(L - 1, -1, -1):
            peak = max(peak, held + x[i] + bo[i])
            held += x[i] - x[i + 1] - self.tape_held[i]
        return peak

    def array(self, name: str) -> np.ndarray:
        """A field (or ``tape_held``) as a read-only numpy array (int64 sizes, float64
        times, bool flags), made once per chain: sums of sizes stay exact below 2**53."""
        cache = self.__dict__.get("_array_cache")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_array_cache", cache)
        a = cache.get(name)
        if a is None and name == "tape_held" and self.tape_held is self.tape_size:
            a = cache["tape_held"] = self.array("tape_size")
        if a is None:
            kind = "size" if name == "tape_held" else _fields.field(name).kind
            a = np.asarray(getattr(self, name), dtype=_DTYPES[kind])
            a.flags.writeable = False
            cache[name] = a
        return a

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_array_cache", None)  # made again on demand
        return state

    def _arrays(self) -> tuple:
        a = self.array
        return (a("x_size"), a("tape_size"), a("fall_overhead"), a("bwd_overhead"),
                a("tape_held"), ~a("output_saved"))

    def _store_all_memory_np(self) -> int:
        """:meth:`store_all_memory` at once (numpy; exact: every sum stays below 2**55)."""
        L = self.length
        x, tp, fo, bo, th, unsaved = self._arrays()
        freed = np.zeros(L, dtype=np.int64)  # Fall_i frees an unsaved x_i (i >= 1)
        freed[1:] = np.where(unsaved[:-1], x[1:L], 0)
        after = int(x[0]) + np.cumsum(tp - freed)
        before = np.concatenate(([int(x[0])], after[:-1]))
        peak = max(int(x[0]), int((before + tp + fo).max()))
        held = int(after[-1])
        peak = max(peak, held + int(x[L]) + int(bo[L]))
        held += int(x[L]) - (int(x[L]) if unsaved[L - 1] else 0)
        change = (x[:L] - x[1:] - th)[::-1]  # B_{L-1}, ..., B_0
        held_before = held + np.concatenate(([0], np.cumsum(change)[:-1]))
        return max(peak, int((held_before + x[L - 1::-1] + bo[L - 1::-1]).max()))

    def memory_lower_bound(self) -> int:
        """A budget below which no schedule is valid (bytes).

        Every schedule runs B_i holding at least x_0, d_{i+1}, t_{i+1} and, when a backward
        reads it, x_i (plain, or inside t_i, which is then no smaller), runs the loss holding
        x_L, and runs some Fall_i producing t_{i+1} while holding x_i.  The maximum of those
        necessary peaks is a lower bound; the exact smallest feasible budget is computed by
        the solvers.
        """
        L = self.length
        x, tp, fo, bo = self.x_size, self.tape_size, self.fall_overhead, self.bwd_overhead
        bound = x[0] + x[L] + x[L] + bo[L]
        if L >= _VECTOR_MIN:  # the same maximum at once (numpy; exact below 2**55)
            xa, tpa, foa, boa, tha, unsaved = self._arrays()
            inp = xa[:L].copy()
            inp[0] = 0
            read = np.where(np.concatenate(([False], unsaved[:-1])), 0, inp)
            return max(bound, int((x[0] + inp + tpa + foa).max()),
                       int((x[0] + xa[1:] + tha + read + xa[:L] + boa[:L]).max()))
        for i in range(L):
            inp = x[i] if i > 0 else 0  # x_0 is already counted
            bound = max(bound, x[0] + inp + tp[i] + fo[i])
            read = inp if self.saved(i) else 0
            bound = max(bound, x[0] + x[i + 1] + self.tape_held[i] + read + x[i] + bo[i])
        return bound

    def total_fwd_time(self) -> float:
        return math.fsum(self.fwd_time)

    def total_bwd_time(self) -> float:
        return math.fsum(self.bwd_time)

    def ideal_makespan(self) -> float:
        """Makespan with no recomputation: every forward once (recording), every backward once.

        A lower bound on every schedule's makespan: each B_i needs the tape of a Fall_i."""
        return math.fsum(self.fall_time + self.bwd_time)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        """The JSON form; an optional field only where it differs from its default (``fall_time``
        where it differs from ``fwd_time``), so a chain without them writes what it always
        wrote."""
        d = {"format": FORMAT, "name": self.name}
        for f in FIELDS:
            if not f.optional or not f.is_default(self):
                value = getattr(self, f.name)
                d[f.name] = value if f.scalar else list(value)
        return d

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def from_dict(cls, data: Mapping) -> "Chain":
        if not isinstance(data, Mapping):
            raise ChainError(f"a chain must be a JSON object, got {type(data).__name__}")
        fmt = data.get("format")
        if fmt != FORMAT:
            raise ChainError(f"format = {fmt!r} is unknown (expected {FORMAT!r})")
        known = set(_fields.names()) | {"format", "name"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ChainError(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
        for f in FIELDS:
            if f.required and f.name not in data:
                raise ChainError(f"missing field {f.name!r}")
            if f.scalar and f.name in data and data[f.name] is None:
                # null is not "absent": a file that says "bandwidth": null most likely
                # meant a number (and got no channel, silently, before this check)
                raise ChainError(f"{f.name} = null: give a number, or leave the field out "
                                 f"({f.name}: {f.doc})")
        name = data.get("name", "chain")
        if name is None:
            name = "chain"
        return cls(name=name, **{f.name: data.get(f.name) for f in FIELDS})

    @classmethod
    def from_json(cls, text: str) -> "Chain":
        """Parse a chain from JSON text: a malformed document, a duplicated key, numbers
        beyond what Python reads and nesting too deep are :class:`ChainError` naming where."""
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as e:
            raise ChainError(f"malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
        except RecursionError:
            raise ChainError("malformed chain: JSON nested too deeply") from None
        except ValueError as e:  # integers longer than Python's digit limit, duplicate keys
            raise ChainError(str(e) if isinstance(e, ChainError) else
                             f"malformed JSON: {str(e).split(';')[0]}") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> "Chain":
        """Read a chain file (UTF-8, with or without a byte-order mark, or UTF-16/UTF-32 with
        one, as Windows tools write); errors name the file."""
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise ChainError(f"cannot read chain file {str(p)!r}: {e.strerror or e}") from None
        try:
            return cls.from_json(decode_text(raw))
        except ChainError as e:
            raise ChainError(f"{p.name}: {e}") from None


_BOMS = (  # longest first: the UTF-32-LE mark begins with the UTF-16-LE one
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32"), (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16"), (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16"),
)


def decode_text(raw: bytes) -> str:
    """Decode a chain file's bytes: UTF-8 with or without a byte-order mark, or UTF-16 /
    UTF-32 with one.  Anything else is a :class:`ChainError` giving the byte offset of the
    first byte that is not text in that encoding."""
    for bom, codec, label in _BOMS:
        if raw.startswith(bom):
            try:
                return raw[len(bom):].decode(codec)
            except UnicodeDecodeError as e:
                raise ChainError(f"not valid {label} text (it starts with a {label} byte-order "
                                 f"mark): bad bytes at byte offset {len(bom) + e.start}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ChainError(f"not UTF-8 text: byte 0x{raw[e.start]:02x} at byte offset {e.start} "
                         f"(save the file as UTF-8)") from None
    nul = raw.find(b"\0")
    if nul >= 0:  # JSON never holds a raw NUL: UTF-16/32 without a mark, or binary data
        raise ChainError(f"not UTF-8 text: byte 0x00 at byte offset {nul} (UTF-16 or UTF-32 "
                         f"needs a byte-order mark; or save the file as UTF-8)")
    return text


def _unique_keys(pairs: list) -> dict:
    """``object_pairs_hook`` for :func:`json.loads`: a key given twice is an error naming it
    (plain ``json`` keeps the last one silently)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise ChainError(f"duplicate key {k!r} in a JSON object")
        out[k] = v
    return out
