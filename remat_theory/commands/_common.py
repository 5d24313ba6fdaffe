"""Helpers shared by subcommands: budget parsing, chain loading, JSON output."""
from __future__ import annotations

import argparse
import json
import math
import sys

from ..chain import Chain
from ..errors import RematError


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


def smallest_feasible_budget(chain: Chain) -> tuple[int, bool]:
    """``(budget, exact)``: the smallest budget at which some schedule exists.

    Exact (bottleneck search over all schedules) for chains of up to 8 stages; for longer
    chains the persistent DP's minimum when that solver is installed (an upper bound on the
    true minimum that is also a feasible budget); else the necessary lower bound.
    """
    from solvers.exhaustive import DEFAULT_MAX_STAGES, min_feasible_budget

    if chain.length <= DEFAULT_MAX_STAGES:
        return min_feasible_budget(chain), True
    try:
        from solvers.dp import min_feasible_budget as dp_min
    except ImportError:
        return chain.memory_lower_bound(), False
    return dp_min(chain), True


def check_budget_feasible_at_all(chain: Chain, budget: int) -> None:
    """Raise when the budget is below what every schedule needs, naming the smallest
    feasible budget (or, when it cannot be computed exactly, a lower bound on it)."""
    lb = chain.memory_lower_bound()
    if budget >= lb and chain.length > 8:
        return  # cannot decide cheaply: the solver will report infeasibility itself
    smallest, exact = smallest_feasible_budget(chain)
    if budget < smallest:
        what = f"the smallest feasible budget is {smallest}" if exact else \
            f"every schedule needs at least {smallest} bytes"
        raise RematError(f"budget {budget} is below what any schedule needs: {what}")
