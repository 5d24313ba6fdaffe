"""Helpers shared by subcommands: budget parsing, chain loading, JSON output."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from solvers.exhaustive import DEFAULT_MAX_STAGES as EXHAUSTIVE_GUARD
from solvers.feasibility import EXACT, smallest_feasible_budget


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
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return v


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer >= 1")
    return v


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


def check_budget_feasible_at_all(chain: Chain, budget: int) -> None:
    """Raise when the budget is below what every schedule needs, naming the smallest
    feasible budget (exact within exhaustive search's size guard; beyond, the lower bound
    and the weak DP's minimum, which is feasible: :mod:`solvers.feasibility`)."""
    lb = chain.memory_lower_bound()
    if budget >= lb and chain.length > EXHAUSTIVE_GUARD:
        return  # the solver decides (and reports its own smallest budget)
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
    """Import torch for a torch subcommand and resolve ``--device`` (auto, cpu, cuda) and
    ``--threads``; returns ``(torch, device)``.  Missing torch or CUDA is a one-line error."""
    try:
        import torch
    except ImportError:
        raise RematError(f"remat {command} needs torch (pip install torch==2.13.0, or the "
                         f"build for your machine)") from None
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise RematError(f"--device {device!r}: expected cpu, cuda or auto")
    if device == "cuda" and not torch.cuda.is_available():
        raise RematError("--device cuda: no CUDA device is available (use --device cpu or auto)")
    if threads:
        torch.set_num_threads(threads)
    return torch, device
