"""Helpers shared by subcommands: budget parsing, chain loading, JSON output."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import threading
import time

from remat_theory.analysis.progress import Progress
from remat_theory.model import fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import ChainError, RematError
from solvers.exhaustive import DEFAULT_MAX_STAGES as EXHAUSTIVE_GUARD
from solvers.feasibility import EXACT, smallest_feasible_budget


def _number(text: str, convert, noun: str, ok, requirement: str):
    """argparse type helper: ``convert(text)``, which must satisfy ``ok``; errors name the
    text and what was expected."""
    try:
        v = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
    if not ok(v):
        raise argparse.ArgumentTypeError(f"{text!r} {requirement}")
    return v


def budget_arg(text: str) -> int:
    """argparse type for a budget in bytes: a plain non-negative integer."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"budget {text!r} is not an integer number of bytes") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"budget {v} is negative")
    return v


def positive_float(text: str) -> float:
    return _number(text, float, "a number", lambda v: math.isfinite(v) and v > 0,
                   "must be a positive number")


def positive_int(text: str) -> int:
    return _number(text, int, "an integer", lambda v: v >= 1, "must be an integer >= 1")


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


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=1, default=_default)
    sys.stdout.write("\n")


def _default(o):
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"cannot serialize {type(o).__name__}")


#: Above this many stages an infeasible budget is reported with the memory lower bound
#: only: the persistent DP's exact minimum is O(L^3) (about 100 s on 2,000 stages).
SMALLEST_BUDGET_MAX_STAGES = 200


def check_budget_feasible_at_all(chain: Chain, budget: int) -> None:
    """Raise when the budget is below what every schedule needs, naming the smallest
    feasible budget (exact within exhaustive search's size guard; beyond, the lower bound
    and the weak DP's minimum, which is feasible: :mod:`solvers.feasibility`)."""
    lb = chain.memory_lower_bound()
    if budget >= lb and chain.length > EXHAUSTIVE_GUARD:
        return  # the solver decides (and reports its own smallest budget)
    if chain.length > SMALLEST_BUDGET_MAX_STAGES:  # the DP's minimum would take minutes
        raise RematError(f"budget {budget} is below what any schedule needs: every schedule "
                         f"needs at least {lb} bytes (Chain.memory_lower_bound)")
    smallest, source = smallest_feasible_budget(chain)
    if budget >= smallest:
        return
    if source == EXACT:
        what = f"the smallest feasible budget is {smallest}"
    else:
        what = (f"every schedule needs at least {lb} bytes, and the smallest feasible budget "
                f"found ({source}, over its own class) is {smallest}")
    raise RematError(f"budget {budget} is below what any schedule needs: {what}")


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
    """Whether a command may draw progress on stderr: not under ``--json``, and only when
    stdout and stderr are both terminals (a redirected or captured run stays quiet)."""
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

    Quiet unless ``enabled`` and stderr is a terminal (so ``--json``, pipes, logs and test
    captures stay clean); draws nothing for the first :attr:`delay` seconds, so quick calls
    print nothing.  A daemon thread redraws the line twice a second; the line is erased at
    the end.
    """

    delay = 2.0
    interval = 0.5

    def __init__(self, desc: str, limit: float | None = None, enabled: bool = True,
                 stream=None, notes=()) -> None:
        self.desc, self.limit = desc, limit
        self.notes = list(notes)  # printed once the call has run a while, or has succeeded
        self.stream = stream if stream is not None else sys.stderr
        try:
            tty = bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            tty = False
        self.enabled = enabled and tty
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
