"""The smallest feasible budget of a chain, with where the number comes from.

- ``exhaustive``: bottleneck search over ALL schedules (exact), for chains within exhaustive
  search's size guard (its registered default ``max_stages``, or ``max_exhaustive_stages``);
- ``dp-weak`` / ``dp``: the smallest budget of the weakly persistent (else persistent)
  schedules, reported by that DP at an infeasible budget, beyond.  It is a budget at which a
  schedule exists, so an upper bound on the true minimum, and can exceed it (forward
  overheads, unsaved outputs: docs/solvers.md);
- ``memory lower bound``: :meth:`Chain.memory_lower_bound`, a bound no schedule beats, when
  neither DP is registered.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError

from solvers import registry
from solvers.exhaustive import DEFAULT_MAX_STAGES, min_feasible_budget

EXACT = "exhaustive"
LOWER_BOUND = "memory lower bound"
CLASS_DPS = ("dp-weak", "dp")  # largest class first: its minimum is the smaller one


def smallest_feasible_budget(chain: Chain, max_exhaustive_stages: int | None = None
                             ) -> tuple[int, str]:
    """``(budget, source)``; see the module docstring for the sources.

    ``max_exhaustive_stages`` (default: exhaustive search's own size guard,
    :data:`solvers.exhaustive.DEFAULT_MAX_STAGES`): the longest chain on which the exact
    bottleneck search runs.
    """
    limit = DEFAULT_MAX_STAGES if max_exhaustive_stages is None else max_exhaustive_stages
    if chain.length <= limit:
        return min_feasible_budget(chain, max_stages=max(limit, chain.length)), EXACT
    lb = chain.memory_lower_bound()
    known = registry.names()
    for name in CLASS_DPS:
        if name not in known:
            continue
        try:
            sol = registry.solve(chain, max(0, lb - 1), name)
        except RematError:
            continue
        if sol.min_budget is not None:
            return sol.min_budget, name
    return lb, LOWER_BOUND
