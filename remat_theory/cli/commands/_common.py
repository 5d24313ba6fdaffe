"""Helpers shared by subcommands: budget parsing, chain loading, JSON output."""
from __future__ import annotations

import argparse
import contextlib
import decimal
import json
import math
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

from remat_theory.analysis.progress import Progress
from remat_theory.model import fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import ChainError, RematError
from remat_theory.cli.render import printable


_DIGITS = re.compile(r"[0-9]+\Z")
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_MAX_EXPONENT = 4000  # digits of an integer written in scientific form (int() stops at 4,300)


def plain_int(text: str, what: str, minimum: int | None = None) -> int:
    """An integer written in ASCII digits only: no sign but a leading ``-`` (refused when
    below ``minimum``), no ``_`` separators, no spaces, no other script's digits (Python's
    ``int`` takes all four).  Errors name ``what`` and the text."""
    body = text[1:] if text.startswith("-") else text
    if not _DIGITS.match(body):
        raise argparse.ArgumentTypeError(f"{what} {printable(text)!r} is not an integer "
                                         f"(ASCII digits 0-9 only)")
    if len(body) > _MAX_EXPONENT:
        raise argparse.ArgumentTypeError(f"{what} has {len(body)} digits: too large")
    v = int(text)
    if minimum is not None and v < minimum:
        raise argparse.ArgumentTypeError(f"{what} {v} must be an integer >= {minimum}")
    return v


def plain_float(text: str, what: str) -> float:
    """A number in plain decimal or scientific notation (``0.5``, ``2``, ``1e-3``): no
    ``_``, no spaces, no ``nan``/``inf``, ASCII digits only."""
    if not _DECIMAL.match(text):
        raise argparse.ArgumentTypeError(f"{what} {printable(text)!r} is not a number (plain "
                                         f"decimal or scientific notation, e.g. 0.5 or 1e-3)")
    v = float(text)
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{what} {printable(text)!r} is too large")
    return v


def budget_arg(text: str) -> int:
    """argparse type for a budget in bytes: a non-negative integer in plain decimal
    (``4000000``) or scientific notation with an integer value (``4e6``, ``1.5e9``); no
    ``_``, spaces, signs or other scripts' digits."""
    if text.startswith("-") and _DECIMAL.match(text):
        raise argparse.ArgumentTypeError(f"budget {text} is negative")
    if _DIGITS.match(text):
        if len(text) > _MAX_EXPONENT:
            raise argparse.ArgumentTypeError(f"budget has {len(text)} digits: too large")
        return int(text)
    if _DECIMAL.match(text) and not text.startswith("+"):
        try:
            d = decimal.Decimal(text)
        except decimal.InvalidOperation:  # pragma: no cover - the pattern is a decimal
            d = None
        if d is not None and d.adjusted() <= _MAX_EXPONENT and d == d.to_integral_value():
            return int(d)
    raise argparse.ArgumentTypeError(f"budget {printable(text)!r} is not an integer number of "
                                     f"bytes (plain digits 0-9, or scientific notation with an "
                                     f"integer value such as 4e9)")


def positive_float(text: str) -> float:
    v = plain_float(text, "value")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return v


def positive_int(text: str) -> int:
    return plain_int(text, "value", minimum=1)


def seed_arg(text: str) -> int:
    """argparse type for a random seed: an integer >= 0 (numpy's generators take no
    negative seed)."""
    return plain_int(text, "seed", minimum=0)


def name_list(text: str) -> tuple:
    """argparse type for names separated by commas (or spaces)."""
    items = tuple(t for t in (s.strip() for s in text.replace(" ", ",").split(",")) if t)
    if not items:
        raise argparse.ArgumentTypeError(f"{text!r} names nothing")
    return items


#: Image formats ``remat plot`` and the torch plots can write (matplotlib's raster and
#: vector back ends that need nothing else installed).
IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff",
                  ".webp")


def _first_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_file(path: str, flag: str, suffixes: tuple | None = None) -> Path:
    """Check before any work that ``path`` can be written as a file: not a folder, in a
    folder that exists and is writable (not under a file), with one of ``suffixes`` when
    given.  Raises :class:`RematError` naming ``flag``, the path and the problem."""
    p = Path(path)
    shown = printable(str(path))
    if not str(path):
        raise RematError(f"{flag}: the path is empty")
    if p.is_dir():
        raise RematError(f"{flag} {shown!r} is a folder; give a file name")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise RematError(f"{flag} {shown!r}: unknown file type {p.suffix or '(no suffix)'!r}; "
                         f"use one of {', '.join(suffixes)}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        found = _first_existing(parent)
        if found.exists() and not found.is_dir():
            raise RematError(f"{flag} {shown!r} is under {printable(str(found))!r}, which is a "
                             f"file, not a folder")
        raise RematError(f"{flag} {shown!r}: the folder {printable(str(parent))!r} does not "
                         f"exist")
    if not parent.is_dir():
        raise RematError(f"{flag} {shown!r} is under {printable(str(parent))!r}, which is a "
                         f"file, not a folder")
    if not os.access(parent, os.W_OK):
        raise RematError(f"{flag} {shown!r}: the folder {printable(str(parent))!r} is not "
                         f"writable")
    return p


def check_output_dir(path: str, flag: str) -> Path:
    """Check before any work that ``path`` is, or can be created as, a writable folder (a
    missing folder is created at the end, with its parents): not a file, not under a file."""
    p = Path(path)
    shown = printable(str(path))
    if not str(path):
        raise RematError(f"{flag}: the path is empty")
    if p.exists() and not p.is_dir():
        raise RematError(f"{flag} {shown!r} is a file, not a folder")
    found = _first_existing(p)
    if not found.is_dir():
        raise RematError(f"{flag} {shown!r} is under {printable(str(found))!r}, which is a file, "
                         f"not a folder")
    if not os.access(found, os.W_OK):
        raise RematError(f"{flag} {shown!r}: {printable(str(found))!r} is not writable")
    return p


def default_output_dir(command: str) -> Path:
    """A new folder for a command's files when no ``--out`` is given: under the system's
    temporary folder, never in the repository or the current folder (its path is printed)."""
    return Path(tempfile.mkdtemp(prefix=f"remat-{command}-{time.strftime('%Y%m%d-%H%M%S')}-"))


def variation_list(text: str) -> tuple:
    """argparse type for ``--variations a,b``: names of the chain-field variations
    (:data:`remat_theory.model.fields.VARIATIONS`), checked."""
    try:
        return fields.parse_variations(text)
    except ChainError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def variations_help() -> str:
    """The variations, one clause each, for a ``--variations`` help text."""
    return "; ".join(f"{v.name}: {v.doc}" for v in fields.VARIATIONS.values())


def load_chain(path: str) -> Chain:
    return Chain.load(path)


#: A list with more entries than this, at the top level of a JSON document, is written on
#: one line by json's C encoder (a schedule of millions of tokens: seconds with ``indent``).
LONG_LIST = 1000


def print_json(obj) -> None:
    """``obj`` as indented JSON on stdout; long top-level lists (a schedule's tokens) on one
    line each, so that a million-stage answer prints in a fraction of a second."""
    long = {}
    if isinstance(obj, dict):
        marker = f"@@remat-list-{os.getpid()}-{id(obj)}-"
        shown = {}
        for k, v in obj.items():
            if isinstance(v, list) and len(v) > LONG_LIST:
                shown[k] = f"{marker}{len(long)}@@"
                long[json.dumps(shown[k])] = json.dumps(v, default=_default)
            else:
                shown[k] = v
        obj = shown
    text = json.dumps(obj, indent=1, default=_default)
    for quoted, body in long.items():
        text = text.replace(quoted, body, 1)
    sys.stdout.write(text)
    sys.stdout.write("\n")


def _default(o):
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"cannot serialize {type(o).__name__}")


@contextlib.contextmanager
def stdout_to_stderr(active: bool = True):
    """Send everything written to file descriptor 1 to stderr meanwhile (worker processes
    started inside inherit it), so that banners printed by native solver libraries cannot
    corrupt a JSON document printed on stdout afterwards."""
    if not active:
        yield
        return
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real descriptor 1 (embedded interpreters): nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def torch_device(device: str, threads: int | None, command: str):
    """Import the torch floor for a torch subcommand and resolve ``--device`` (auto, cpu,
    cuda) and ``--threads``; returns ``(torch, device)``.  Missing torch or CUDA is a
    one-line error."""
    try:
        from remat_theory.torch import device as torch_floor
    except ImportError:
        raise RematError(f"remat {command} needs torch (pip install torch==2.13.0, or the "
                         f"build for your machine)") from None
    return torch_floor.torch, torch_floor.resolve_device(device, threads)


def progress_wanted(json_output: bool) -> bool:
    """Whether a command may draw a progress *bar* on stderr: not under ``--json``, and only
    when stdout and stderr are both terminals (a redirected or captured run stays quiet)."""
    if json_output:
        return False
    try:
        return bool(sys.stdout.isatty() and sys.stderr.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Ticker:
    """While a long call runs, show on a terminal how long it has been running (and, with a
    time limit, a bar to it): ``with Ticker("solve: ilp", limit=60): ...``.

    ``notes`` (lines for stderr) are printed when the call has run for :attr:`delay` seconds
    on a terminal, or by :meth:`print_notes` once the command knows it succeeded; never
    before an error, so that a user error stays one line.

    Quiet unless ``enabled`` and stderr is a terminal, or ``lines`` (then, off a terminal,
    one plain line every :attr:`Progress.line_interval` seconds, for logs and CI); draws
    nothing for the first :attr:`delay` seconds, so quick calls print nothing.  A daemon
    thread redraws the line twice a second; the line is erased at the end.
    """

    delay = 2.0
    interval = 0.5

    def __init__(self, desc: str, limit: float | None = None, enabled: bool = True,
                 stream=None, notes=(), lines: bool = False) -> None:
        self.desc, self.limit = desc, limit
        self.notes = list(notes)  # printed once the call has run a while, or has succeeded
        self.stream = stream if stream is not None else sys.stderr
        try:
            tty = bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            tty = False
        self.tty = tty
        self.enabled = enabled and (tty or lines)
        self._stop = None
        self._thread = None
        self._drawn = False

    def _line(self, elapsed: float) -> str:
        if self.limit:
            bar = Progress(total=max(1, int(round(self.limit))), desc=self.desc, enabled=False)
            bar.start -= elapsed  # the bar's clock starts where ours did
            bar.done = min(bar.total, int(elapsed))
            return bar.line() + f" (time limit {self.limit:g} s)"
        return f"{self.desc}: running for {elapsed:.0f} s"

    def _run(self) -> None:
        t0 = time.monotonic()
        if not self.tty:  # a log: a plain line now and then, nothing to erase
            while not self._stop.wait(Progress.line_interval):
                try:
                    print(self._line(time.monotonic() - t0), file=self.stream, flush=True)
                except (ValueError, OSError):
                    return
            return
        if self._stop.wait(self.delay):
            return
        self._print_notes()
        while True:
            try:
                self.stream.write("\r" + self._line(time.monotonic() - t0) + "\x1b[K")
                self.stream.flush()
                self._drawn = True
            except (ValueError, OSError):
                return
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "Ticker":
        if self.enabled:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _print_notes(self) -> None:
        notes, self.notes = self.notes, []
        for n in notes:
            print(n, file=self.stream, flush=True)

    def print_notes(self) -> None:
        """Print the notes not printed yet: call it once the command is known to succeed."""
        self._print_notes()

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if self._drawn:
                try:
                    self.stream.write("\r\x1b[K")
                    self.stream.flush()
                except (ValueError, OSError):
                    pass
