"""The smallest feasible budget of a chain, with where the number comes from.

- ``exhaustive``: bottleneck search over ALL schedules (exact), for chains within exhaustive
  search's size guard (its registered default ``max_stages``, or ``max_exhaustive_stages``);
- ``dp-weak`` / ``dp``: the smallest budget of the weakly persistent (else persistent)
  schedules, reported by that DP at an infeasible budget, beyond.  It is a budget at which a
  schedule exists, so an upper bound on the true minimum, and can exceed it (forward
  overheads, unsaved outputs: docs/solvers.md);
- ``memory lower bound``: :meth:`Chain.memory_lower_bound`, a bound no schedule beats, when
  neither DP is registered.

:func:`check_feasible` is the check before a solve: it raises
:class:`~remat_theory.model.errors.InfeasibleBudgetError` (with the smallest feasible
budget and its source as attributes) when no schedule at all fits the budget.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InfeasibleBudgetError, RematError, SolverContractError

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
        except (RematError, SolverContractError):
            continue
        if sol.min_budget is not None:
            return sol.min_budget, name
    return lb, LOWER_BOUND


#: Above this many stages :func:`check_feasible` reports an infeasible budget with the memory
#: lower bound only: the persistent DP's exact minimum is O(L^3) (about 100 s on 2,000 stages).
SMALLEST_BUDGET_MAX_STAGES = 200


def check_feasible(chain: Chain, budget: int) -> None:
    """Raise :class:`InfeasibleBudgetError` when ``budget`` is below what every schedule
    needs; return None otherwise (or when only a solver can tell, see below).

    The error's ``smallest_feasible`` is the smallest feasible budget with its ``source``
    (exact within exhaustive search's size guard; beyond, the weak DP's minimum, a budget
    at which a schedule exists) and ``lower_bound`` the memory lower bound.  Above
    :data:`SMALLEST_BUDGET_MAX_STAGES` stages only budgets below the lower bound are
    refused (``smallest_feasible`` None); a budget at or above the lower bound on a chain
    longer than exhaustive search's guard is left to the solver.

    >>> from remat_theory import Chain
    >>> check_feasible(Chain.homogeneous(3), 1)
    Traceback (most recent call last):
    ...
    remat_theory.model.errors.InfeasibleBudgetError: budget 1 is below what any schedule needs: the smallest feasible budget is 5
    """
    lb = chain.memory_lower_bound()
    if budget >= lb and (chain.length > DEFAULT_MAX_STAGES or chain.has_bandwidth):
        # the solver decides (and reports its own smallest budget); with a copy channel,
        # offloading can fit below the single-stream minimum (proofs/offload.md O.1)
        return
    if chain.length > SMALLEST_BUDGET_MAX_STAGES:  # the DP's minimum would take minutes
        raise InfeasibleBudgetError(
            f"budget {budget} is below what any schedule needs: every schedule needs at least "
            f"{lb} bytes (Chain.memory_lower_bound)", budget, None, source=LOWER_BOUND,
            lower_bound=lb)
    smallest, source = smallest_feasible_budget(chain)
    if budget >= smallest:
        return
    if source == EXACT:
        what = f"the smallest feasible budget is {smallest}"
    else:
        what = (f"every schedule needs at least {lb} bytes, and the smallest feasible budget "
                f"found ({source}, over its own class) is {smallest}")
    raise InfeasibleBudgetError(f"budget {budget} is below what any schedule needs: {what}",
                                budget, smallest, source=source, lower_bound=lb)
