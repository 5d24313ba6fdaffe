"""The budgets where the exhaustive optimum of a chain changes, found by bisection
(tests/test_ilp.py, tests/test_ilp_bound.py).  Not part of the package.

The optimum over all schedules never increases with the budget (a schedule valid under a
budget is valid under every larger one), so where it is equal at both ends of a range of
budgets it is equal inside it: only ranges whose ends differ are split.  That finds every
change with O(changes x log(budgets)) searches instead of one search per budget, and the
same answer as the budget-by-budget scan."""
from __future__ import annotations

import json

from solvers.exhaustive import min_feasible_budget, search

# Searches already run, by chain (its file form) and budget: several tests sweep the same
# chains (each search is deterministic, so a repeated one would give the same answer).
_SEARCHED: dict = {}


def _key(chain) -> str:
    return json.dumps(chain.to_dict(), sort_keys=True)


def optimal_search(chain, budget: int) -> tuple:
    """``search(chain, budget)``: exhaustive search's (schedule, makespan, ...), run once per
    chain and budget."""
    k = (_key(chain), budget)
    if k not in _SEARCHED:
        _SEARCHED[k] = search(chain, budget)
    return _SEARCHED[k]


def breakpoints(chain) -> dict:
    """``{budget: optimum}`` at every budget where the exhaustive optimum changes and one
    below each (``None`` below the smallest feasible budget)."""
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()

    def value(b: int):
        return optimal_search(chain, b)[1]

    changes: list = []

    def split(a: int, b: int) -> None:  # value(a) != value(b), a < b
        if b == a + 1:
            changes.append(b)
            return
        m = (a + b) // 2
        if value(m) != value(a):
            split(a, m)
        if value(m) != value(b):
            split(m, b)

    if value(lo) != value(hi):
        split(lo, hi)
    out = {lo - 1: None, lo: value(lo)}
    for b in sorted(changes):
        out[b - 1], out[b] = value(b - 1), value(b)
    return out
