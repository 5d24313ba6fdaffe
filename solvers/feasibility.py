"""The smallest feasible budget of a chain, with where the number comes from.

- ``exhaustive``: bottleneck search over ALL schedules (exact), for chains within exhaustive
  search's size guard (its registered default ``max_stages``, or ``max_exhaustive_stages``);
- ``dp-weak`` / ``dp``: the smallest budget of the weakly persistent (else persistent)
  schedules, reported by that DP at an infeasible budget, beyond.  It is a budget at which a
  schedule exists, so an upper bound on the true minimum, and can exceed it (forward
  overheads, unsaved outputs: docs/solvers.md);
- ``memory lower bound``: :meth:`Chain.memory_lower_bound`, a bound no schedule beats, when
  neither DP is registered.

On a chain with a copy channel (``bandwidth``) the numbers are those of the two-stream
model, where offloading can fit below every single-stream schedule (proofs/offload.md O.1):

- ``exhaustive-offload``: the bottleneck search over placements (O.3, O.23), exact, up to
  :data:`OFFLOAD_EXACT_MAX_STAGES` stages;
- ``dp-offload``: beyond, the smallest budget of the class ``persistent+offload`` (a budget
  at which a schedule exists: an upper bound on the true minimum).

:func:`check_feasible` is the check before a solve: it raises
:class:`~remat_theory.model.errors.InfeasibleBudgetError` (with the smallest feasible
budget and its source as attributes) when no schedule at all fits the budget.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.errors import (InfeasibleBudgetError, InternalError, RematError,
                                       SolverContractError)

from solvers import registry
from solvers import exhaustive
from solvers.exhaustive import min_feasible_budget

EXACT = "exhaustive"
OFFLOAD_EXACT = "exhaustive-offload"
OFFLOAD_CLASS = "dp-offload"
LOWER_BOUND = "memory lower bound"
CLASS_DPS = ("dp-weak", "dp")  # largest class first: its minimum is the smaller one
#: The longest chain with a copy channel whose smallest feasible budget is searched exactly
#: before a solve (the eager bottleneck search, O.23: at most about 2 s at 5 stages on
#: random chains, and milliseconds where the memory lower bound is reached).
OFFLOAD_EXACT_MAX_STAGES = 5


def smallest_with_channel(chain: Chain, max_exact_stages: int | None = None
                          ) -> tuple[int, str]:
    """``(budget, source)`` on a chain with a copy channel: exact (``exhaustive-offload``)
    up to ``max_exact_stages`` (default :data:`OFFLOAD_EXACT_MAX_STAGES`) stages, else the
    smallest budget of ``dp-offload``'s class (a schedule fits there), else the memory
    lower bound (valid with offloading, O.12) when that DP cannot answer."""
    from solvers.offload.dp import class_min_budget
    from solvers.offload.exhaustive import min_feasible_budget as with_channel

    limit = OFFLOAD_EXACT_MAX_STAGES if max_exact_stages is None else max_exact_stages
    if chain.length <= limit:
        return with_channel(chain), OFFLOAD_EXACT
    if chain.length > SMALLEST_BUDGET_MAX_STAGES:  # the class DP's minimum is O(L^3)
        return chain.memory_lower_bound(), LOWER_BOUND
    try:
        return class_min_budget(chain), OFFLOAD_CLASS
    except RematError:  # too large for the DP's table: what every schedule needs
        return chain.memory_lower_bound(), LOWER_BOUND


def smallest_feasible_budget(chain: Chain, max_exhaustive_stages: int | None = None
                             ) -> tuple[int, str]:
    """``(budget, source)``; see the module docstring for the sources.

    ``max_exhaustive_stages`` (default: exhaustive search's own size guard,
    :data:`solvers.exhaustive.DEFAULT_MAX_STAGES`): the longest chain on which the exact
    bottleneck search runs.
    """
    if chain.has_bandwidth:
        return smallest_with_channel(chain)
    # read at call time: the guard is exhaustive search's (and a test that lowers it there
    # must not leave a copy lowered here)
    limit = exhaustive.DEFAULT_MAX_STAGES if max_exhaustive_stages is None else \
        max_exhaustive_stages
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
    if chain.has_bandwidth:
        return _check_with_channel(chain, budget, lb)
    if budget >= lb and chain.length > exhaustive.DEFAULT_MAX_STAGES:
        return  # the solver decides (and reports its own smallest budget)
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


def _check_with_channel(chain: Chain, budget: int, lb: int) -> None:
    """:func:`check_feasible` on a chain with a copy channel: the numbers of the two-stream
    model, where offloading can fit below the single-stream minimum (proofs/offload.md
    O.1).  Up to :data:`OFFLOAD_EXACT_MAX_STAGES` stages the smallest feasible budget is
    exact (O.3, O.23); beyond, a budget at or above the memory lower bound is left to the
    solver, and one below it is refused with the smallest budget found (``dp-offload``'s
    class minimum, at which a schedule exists)."""
    from solvers.offload.min_budget import fits

    exact = chain.length <= OFFLOAD_EXACT_MAX_STAGES
    if budget >= lb and (not exact or fits(chain, budget)):
        return
    smallest, source = smallest_with_channel(chain)
    if budget >= smallest:  # fits() and the minimum are one search (O.23): a bug
        raise InternalError(f"feasibility: budget {budget} does not fit by the eager search, "
                            f"yet the smallest feasible budget it finds is {smallest}")
    if source == OFFLOAD_EXACT:
        what = (f"the smallest feasible budget is {smallest} (with offloading over the copy "
                f"channel)")
    elif source == OFFLOAD_CLASS:
        what = (f"every schedule needs at least {lb} bytes, and the smallest feasible budget "
                f"found ({source}, over its own class, with offloading) is {smallest}")
    else:
        what = f"every schedule needs at least {lb} bytes (Chain.memory_lower_bound)"
        smallest = None
    raise InfeasibleBudgetError(f"budget {budget} is below what any schedule needs: {what}",
                                budget, smallest, source=source, lower_bound=lb)
