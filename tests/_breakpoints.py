"""The budgets where the exhaustive optimum of a chain changes, found by bisection
(tests/test_ilp.py, tests/test_ilp_bound.py).  Not part of the package.

The optimum over all schedules never increases with the budget (a schedule valid under a
budget is valid under every larger one), so where it is equal at both ends of a range of
budgets it is equal inside it: only ranges whose ends differ are split.  That finds every
change with O(changes x log(budgets)) searches instead of one search per budget, and the
same answer as the budget-by-budget scan."""
from __future__ import annotations

from solvers.exhaustive import min_feasible_budget, search


def breakpoints(chain) -> dict:
    """``{budget: optimum}`` at every budget where the exhaustive optimum changes and one
    below each (``None`` below the smallest feasible budget)."""
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    known: dict = {}

    def value(b: int):
        if b not in known:
            known[b] = search(chain, b)[1]
        return known[b]

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
