"""The smallest feasible budget of a chain, with where the number comes from.

- ``exhaustive``: bottleneck search over ALL schedules (exact), for chains of up to
  ``max_exhaustive_stages`` stages;
- ``dp``: the persistent DP's exact minimum over persistent schedules, beyond that.  It is
  a budget at which a schedule exists, so an upper bound on the true minimum; equality with
  the global minimum is conjectured with evidence (proofs/persistent_dp.md);
- ``memory lower bound``: :meth:`Chain.memory_lower_bound`, a bound no schedule beats.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain

EXACT = "exhaustive"
PERSISTENT = "dp"
LOWER_BOUND = "memory lower bound"


def smallest_feasible_budget(chain: Chain, max_exhaustive_stages: int = 8) -> tuple[int, str]:
    """``(budget, source)``; see the module docstring for the sources."""
    from solvers.exhaustive import min_feasible_budget

    if chain.length <= max_exhaustive_stages:
        return min_feasible_budget(chain, max_stages=max_exhaustive_stages), EXACT
    from solvers.dp import min_feasible_budget as persistent_min

    return persistent_min(chain), PERSISTENT
