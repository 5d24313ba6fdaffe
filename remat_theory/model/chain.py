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
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any, Mapping, Sequence

from remat_theory.model.errors import ChainError

FORMAT = "remat-chain/1"

_FIELDS = ("fwd_time", "bwd_time", "x_size", "tape_size", "fwd_overhead", "bwd_overhead",
           "fall_time", "fall_overhead", "output_saved", "bandwidth")

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


def format_number(v) -> str:
    """A number as an error message shows it: as written when short (``-2.0``, ``7``),
    else compactly (``1e+308``, ``1.235e+20``), never a 309-digit integer."""
    text = repr(v)
    if len(text) <= 12:
        return text
    try:
        return f"{float(v):.4g}"
    except OverflowError:  # an integer beyond the float range: mantissa and exponent by hand
        digits = str(abs(int(v)))
        mantissa = f"{digits[0]}.{digits[1:4]}".rstrip("0").rstrip(".")
        return f"{'-' if v < 0 else ''}{mantissa}e+{len(digits) - 1}"
    except (TypeError, ValueError):
        return text[:37] + "..."


def _not_a_number(field_name: str, index: int, value: Any) -> ChainError:
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return ChainError(f"{field_name}[{index}] = {text} is not a number")


def _check_time(field_name: str, index: int, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _not_a_number(field_name, index, value)
    try:
        v = float(value)
    except OverflowError:  # an integer beyond the float range
        raise ChainError(f"{field_name}[{index}] = {format_number(value)} is not finite") from None
    if math.isnan(v):
        raise ChainError(f"{field_name}[{index}] is NaN")
    if math.isinf(v):
        raise ChainError(f"{field_name}[{index}] = {v} is not finite")
    if v < 0:
        raise ChainError(f"{field_name}[{index}] = {format_number(v)} is negative")
    return v


def _check_size(field_name: str, index: int, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _not_a_number(field_name, index, value)
    if isinstance(value, numbers.Integral):
        v = int(value)
    else:
        f = float(value)
        if math.isnan(f):
            raise ChainError(f"{field_name}[{index}] is NaN")
        if math.isinf(f):
            raise ChainError(f"{field_name}[{index}] = {f} is not finite")
        if not f.is_integer():
            raise ChainError(f"{field_name}[{index}] = {format_number(value)} is not an integer "
                             f"(sizes are bytes)")
        v = int(f)
    if v < 0:
        raise ChainError(f"{field_name}[{index}] = {format_number(v)} is negative")
    return v


def _check_flag(field_name: str, index: int, value: Any) -> bool:
    """A boolean entry (JSON ``true`` / ``false``; numpy booleans too), never a number."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    raise ChainError(f"{field_name}[{index}] = {text} is not a boolean (true or false)")


def _check_bandwidth(value: Any) -> float:
    """The optional ``bandwidth`` (bytes per second): a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        text = repr(value)
        raise ChainError(f"bandwidth = {text[:37] + '...' if len(text) > 40 else text} is not "
                         f"a number (bytes per second)")
    try:
        v = float(value)
    except OverflowError:
        raise ChainError(f"bandwidth = {format_number(value)} is not finite") from None
    if math.isnan(v):
        raise ChainError("bandwidth is NaN")
    if math.isinf(v):
        raise ChainError(f"bandwidth = {v} is not finite (leave it out for no copy channel)")
    if v < 0:
        raise ChainError(f"bandwidth = {format_number(value)} is negative")
    return v


def _check_array(field_name: str, values: Any, length: int, checker) -> tuple:
    what = "booleans" if checker is _check_flag else "numbers"
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not hasattr(values, "__len__"):
        raise ChainError(f"{field_name} must be a list of {what}, got {type(values).__name__}")
    try:
        values = list(values)
    except TypeError:
        raise ChainError(f"{field_name} must be a list of {what}, got "
                         f"{type(values).__name__}") from None
    if len(values) != length:
        raise ChainError(f"{field_name} has length {len(values)}, expected {length}")
    return tuple(checker(field_name, i, v) for i, v in enumerate(values))


def _check_totals(chain: "Chain") -> None:
    """Reject magnitudes whose sums would overflow or lose meaning in a solver, naming the
    field and index at which the running total first passes the cap (:data:`MAX_TOTAL_TIME`,
    :data:`MAX_TOTAL_SIZE`); every value on its own is already finite.

    Time: ``(sum(fwd_time) + sum(fall_time)) * L + sum(bwd_time)``, as recompute-all runs
    O(L^2) forwards; a ``fall_time`` equal to the default ``fwd_time`` is counted through
    ``fwd_time`` (so the error names a field of the file).  Size: every size and overhead.
    """
    L = chain.length
    own_fall = chain.fall_time != chain.fwd_time
    times = [("fwd_time", L if own_fall else 2 * L), ("bwd_time", 1)]
    if own_fall:
        times.insert(1, ("fall_time", L))
    total = 0.0
    for f, weight in times:
        for i, v in enumerate(getattr(chain, f)):
            total += v * weight
            if not total <= MAX_TOTAL_TIME:  # also catches an overflow to inf
                raise ChainError(
                    f"{f}[{i}] = {format_number(v)} makes the chain's total time too large: "
                    f"(sum(fwd_time) + sum(fall_time)) * L + sum(bwd_time) (recompute-all "
                    f"runs O(L^2) forwards) must be at most {MAX_TOTAL_TIME:g}")
    sizes = ["x_size", "tape_size", "fwd_overhead", "bwd_overhead"]
    if chain.fall_overhead != chain.fwd_overhead:
        sizes.append("fall_overhead")
    size = 0
    for f in sizes:
        for i, v in enumerate(getattr(chain, f)):
            size += v
            if size > MAX_TOTAL_SIZE:
                raise ChainError(
                    f"{f}[{i}] = {format_number(v)} makes the chain's total size too large: "
                    f"the sum of every size and overhead must be at most 2**53 bytes "
                    f"({MAX_TOTAL_SIZE:.4g})")


@dataclass(frozen=True)
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

    fwd_time: tuple
    bwd_time: tuple
    x_size: tuple
    tape_size: tuple
    fwd_overhead: tuple = None  # type: ignore[assignment]
    bwd_overhead: tuple = None  # type: ignore[assignment]
    name: str = field(default="chain", compare=False)
    fall_time: tuple = None  # type: ignore[assignment]
    fall_overhead: tuple = None  # type: ignore[assignment]
    output_saved: tuple = None  # type: ignore[assignment]
    bandwidth: float | None = None

    def __post_init__(self) -> None:
        fwd = self.fwd_time
        if isinstance(fwd, (str, bytes)) or not hasattr(fwd, "__len__"):
            raise ChainError(f"fwd_time must be a list of numbers, got {type(fwd).__name__}")
        L = len(fwd)
        if L < 1:
            raise ChainError("fwd_time is empty: a chain needs at least one stage")
        set_ = object.__setattr__
        set_(self, "fwd_time", _check_array("fwd_time", fwd, L, _check_time))
        set_(self, "bwd_time", _check_array("bwd_time", self.bwd_time, L + 1, _check_time))
        set_(self, "x_size", _check_array("x_size", self.x_size, L + 1, _check_size))
        set_(self, "tape_size", _check_array("tape_size", self.tape_size, L, _check_size))
        fo = self.fwd_overhead if self.fwd_overhead is not None else [0] * L
        bo = self.bwd_overhead if self.bwd_overhead is not None else [0] * (L + 1)
        set_(self, "fwd_overhead", _check_array("fwd_overhead", fo, L, _check_size))
        set_(self, "bwd_overhead", _check_array("bwd_overhead", bo, L + 1, _check_size))
        ft = self.fall_time if self.fall_time is not None else self.fwd_time
        fao = self.fall_overhead if self.fall_overhead is not None else self.fwd_overhead
        set_(self, "fall_time", _check_array("fall_time", ft, L, _check_time))
        set_(self, "fall_overhead", _check_array("fall_overhead", fao, L, _check_size))
        saved = self.output_saved if self.output_saved is not None else (True,) * L
        set_(self, "output_saved", _check_array("output_saved", saved, L, _check_flag))
        if self.bandwidth is not None:
            set_(self, "bandwidth", _check_bandwidth(self.bandwidth))
        if not isinstance(self.name, str):
            raise ChainError(f"name = {self.name!r} is not a string")
        for i in range(L):
            if self.tape_size[i] < self.x_size[i + 1]:
                raise ChainError(
                    f"tape_size[{i}] = {self.tape_size[i]} is smaller than x_size[{i + 1}] = "
                    f"{self.x_size[i + 1]} (the tape of F_{i} includes its output x_{i + 1})"
                )
        _check_totals(self)
        set_(self, "tape_held", tuple(
            tp if keep else tp - x for tp, x, keep in
            zip(self.tape_size, self.x_size[1:], self.output_saved)))
        # bit i (1 <= i <= L) set: t_i holds x_i (a backward reads it), so x_i can be read there
        set_(self, "saved_mask", sum(1 << (i + 1) for i, keep in enumerate(self.output_saved)
                                     if keep))

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
        return self.fall_time != self.fwd_time or self.fall_overhead != self.fwd_overhead

    @property
    def has_unsaved_outputs(self) -> bool:
        """True when some stage's output is read by no backward (``output_saved`` has a
        false entry); False means the classic operation table, unchanged."""
        return not all(self.output_saved)

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
        fields = dict(fwd_time=self.fwd_time, bwd_time=self.bwd_time, x_size=self.x_size,
                      tape_size=self.tape_size, fwd_overhead=self.fwd_overhead,
                      bwd_overhead=self.bwd_overhead, name=self.name,
                      fall_time=self.fall_time, fall_overhead=self.fall_overhead,
                      output_saved=self.output_saved, bandwidth=self.bandwidth)
        fields.update(changes)
        return Chain(**fields)

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
        """The chain with every size divided by ``divisor`` (which must divide them all)."""
        sizes = ("x_size", "tape_size", "fwd_overhead", "bwd_overhead", "fall_overhead")
        for f in sizes:
            for i, v in enumerate(getattr(self, f)):
                if v % divisor:
                    raise ChainError(f"{f}[{i}] = {v} is not divisible by {divisor}")
        return self.replace(**{f: [v // divisor for v in getattr(self, f)] for f in sizes})

    def size_gcd(self) -> int:
        """Greatest common divisor of all sizes and overheads (1 if all are zero)."""
        g = reduce(math.gcd, self.x_size + self.tape_size + self.fwd_overhead + self.bwd_overhead
                   + self.fall_overhead, 0)
        return g or 1

    # ------------------------------------------------------------------ memory helpers
    def store_all_memory(self) -> int:
        """Peak memory (bytes) of store-all (Fall every stage, Loss, B every stage).

        Closed form; the tests check it against the simulator.
        """
        L = self.length
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
        """The JSON form; ``fall_time`` / ``fall_overhead`` only where they differ from the
        no-grad forward's, so a chain without them writes what it always wrote."""
        d = {
            "format": FORMAT,
            "name": self.name,
            "fwd_time": list(self.fwd_time),
            "bwd_time": list(self.bwd_time),
            "x_size": list(self.x_size),
            "tape_size": list(self.tape_size),
            "fwd_overhead": list(self.fwd_overhead),
            "bwd_overhead": list(self.bwd_overhead),
        }
        if self.fall_time != self.fwd_time:
            d["fall_time"] = list(self.fall_time)
        if self.fall_overhead != self.fwd_overhead:
            d["fall_overhead"] = list(self.fall_overhead)
        if self.has_unsaved_outputs:
            d["output_saved"] = list(self.output_saved)
        if self.bandwidth is not None:
            d["bandwidth"] = self.bandwidth
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
        known = set(_FIELDS) | {"format", "name"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ChainError(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
        for f in ("fwd_time", "bwd_time", "x_size", "tape_size"):
            if f not in data:
                raise ChainError(f"missing field {f!r}")
        name = data.get("name", "chain")
        if name is None:
            name = "chain"
        return cls(
            fwd_time=data["fwd_time"], bwd_time=data["bwd_time"], x_size=data["x_size"],
            tape_size=data["tape_size"], fwd_overhead=data.get("fwd_overhead"),
            bwd_overhead=data.get("bwd_overhead"), name=name,
            fall_time=data.get("fall_time"), fall_overhead=data.get("fall_overhead"),
            output_saved=data.get("output_saved"), bandwidth=data.get("bandwidth"),
        )

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
