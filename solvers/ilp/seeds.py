"""Schedules the ``ilp`` solver starts from: the weak DP's, the persistent DP's, store-all.

They are MIP starts (an incumbent from the first second) and the schedules the moment
relaxation tries to prove optimal.  Under a time limit a DP runs only when its estimated
time fits in a share of what is left (:func:`dp_seconds`): dp-weak's O(L^4 M) table took
minutes at 100 stages with numpy's kernel (seconds with the compiled one).
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError, SolverContractError

from solvers import registry
from solvers._deadline import Deadline
from solvers.store_all import store_all_schedule

STAGED_PASSES = 2  # the restricted model solved first for a larger one's warm start
STAGED_SHARE, STAGED_CAP = 0.25, 30.0  # of its time limit, and at most this many seconds

#: Share of the time left that a DP's estimated time may take (the rest is for the MILPs).
DP_SHARE = 0.3
DP_ALWAYS = 0.5


def staged(K: int, pairs: bool, exact_all: bool) -> bool:
    """Whether a K-pass model is first seeded from two weakly increasing runs per phase: the
    proven model, and any pairs model with more passes than that (a class containing it).
    Only when K > STAGED_PASSES: with as many passes or fewer the two-run model is no
    smaller class, and seeding a model from itself never ends (a 1-stage chain, whose proven
    model has two passes, recursed until the stack overflowed)."""
    return K > STAGED_PASSES and (exact_all or pairs)


def dp_seconds(chain: Chain, budget: int, name: str) -> float:
    """A generous estimate of the seconds ``name`` ("dp" or "dp-weak") takes on ``chain`` at
    ``budget``.  The persistent DP runs about L^3/6 numpy operations, the weak DP about L^4/6,
    each on a row of M+1 values (M: the budget in units of the sizes' gcd, capped at
    store-all).  Measured on one core of a 2-core machine: dp 3.3 s at 300 stages (M = 60);
    dp-weak 0.24 s at 20 stages (M = 72), 2.5 s at 40 (M = 12 to 70), 9.4 s at 60 (M = 20),
    170 s at 100 (M = 30; the tables outgrow the caches); the estimate is 1.2 to 3 times
    those.  With millions of units (sizes in bytes with no common factor) a unit costs more
    (rows outgrow the caches): dp-weak 9.7 s on 5 stages at M = 3.5 million, 2.7e-8 s per
    cell and unit, hence 5e-8 here."""
    g = chain.size_gcd() or 1
    M = max(1, min(budget, chain.store_all_memory()) // g)
    L = chain.length
    if name == "dp":
        numpy_s = L ** 3 / 6 * (1.5e-6 + 2e-9 * M)
    else:
        numpy_s = (L ** 4 / 6 * (1e-5 + 1e-8 * M + 5e-8 * max(0, M - 100_000))
                   * max(1.0, L / 60))
    return min(numpy_s, _kernel_seconds(L, M, name))


#: The compiled kernels' rates assumed by :func:`dp_seconds`, in each DP's own steps (its
#: ``work_estimate``), and what loading them costs: measured dp-weak 1.2 s at 60 and 100
#: stages at the smallest budget (M about 60), 2.1 s at 100 stages and M = 331 (where the
#: estimate from numpy's old rates said 23-370 s, so prove and ilp fell back to the
#: persistent DP's schedule under a minute's limit); dp 17.6 s at 1,000 stages, M = 1,000.
COMPILED_RATE = {"dp": 1e9, "dp-weak": 5e8}
COMPILED_LOAD_SECONDS = 2.0


#: How far above numpy's measured rate (each DP's NUMPY_RATE) the estimate goes.
NUMPY_SLACK = 5.0


def _kernel_seconds(L: int, M: int, name: str) -> float:
    """A generous estimate of the DP's seconds with the kernel option ``auto`` picks there,
    from the DP's own step count: the compiled kernel's (loading it included), or numpy's
    at :data:`NUMPY_SLACK` times its measured rate."""
    from solvers import dp, dp_weak
    from solvers.dp_kernel import resolve_kernel
    if name == "dp":
        steps = dp.work_estimate(L, M, 8)[1]
        numpy_rate = dp.NUMPY_RATE
    else:
        steps = dp_weak.work_estimate(L, M)[1]
        numpy_rate = dp_weak.NUMPY_RATE
    slow = 6.0 if M > 100_000 else 1.0  # rows past the caches
    if resolve_kernel("auto", name, steps / numpy_rate) != "numba":
        return DP_ALWAYS + NUMPY_SLACK * slow * steps / numpy_rate
    return COMPILED_LOAD_SECONDS + slow * steps / COMPILED_RATE[name]


def _affordable(deadline: Deadline, seconds: float) -> bool:
    """A DP runs when its estimate fits in :data:`DP_SHARE` of the time left, or is below
    :data:`DP_ALWAYS` seconds (what the limit may be overrun by)."""
    return seconds <= DP_ALWAYS or deadline.fits(seconds, DP_SHARE)


def _dp_limit(deadline: Deadline) -> float | None:
    """The time limit a seed DP runs under: its share of what is left (never below
    :data:`DP_ALWAYS`, what a cheap DP may overrun by); None without a limit."""
    share = deadline.share(DP_SHARE)
    return None if share is None else max(DP_ALWAYS, share)


def affordable(chain: Chain, budget: int, name: str, deadline: Deadline) -> bool:
    """Whether DP ``name`` on ``chain`` at ``budget`` may run under ``deadline``."""
    return _affordable(deadline, dp_seconds(chain, budget, name))


def incumbent(chain: Chain, budget: int, use_dp: bool, deadline: Deadline | None = None):
    """A valid schedule to start from, and its makespan and source, or (None, None, None):
    the weak DP, then the persistent DP, when registered (and, under ``deadline``, when its
    estimated time fits); store-all when it fits the budget."""
    deadline = deadline or Deadline(None)
    names = registry.names()
    if use_dp:
        for nm in ("dp-weak", "dp"):
            if nm not in names or not _affordable(deadline, dp_seconds(chain, budget, nm)):
                continue
            try:
                # the estimate can be wrong: the DP gets its share of the time as a limit
                sol = registry.solve(chain, budget, nm, time_limit=_dp_limit(deadline))
            except (RematError, SolverContractError):
                continue
            if sol.schedule is not None:
                return sol.schedule, sol.makespan, nm
    if chain.store_all_memory() <= budget:
        return store_all_schedule(chain), chain.ideal_makespan(), "store-all"
    return None, None, None


def smallest_weak_schedule(chain: Chain, deadline: Deadline | None = None):
    """The weak DP's schedule at its own smallest budget (a seed for the min-budget models),
    else None (not registered, too slow for ``deadline``, or failed)."""
    deadline = deadline or Deadline(None)
    if "dp-weak" not in registry.names():
        return None
    # the smallest budget is found on the table up to store-all, then solved again there
    if not _affordable(deadline, 2 * dp_seconds(chain, chain.store_all_memory(), "dp-weak")):
        return None
    try:
        low = registry.solve(chain, 0, "dp-weak", time_limit=_dp_limit(deadline)).min_budget
        return registry.solve(chain, low, "dp-weak", time_limit=_dp_limit(deadline)
                              ).schedule if low is not None else None
    except (RematError, SolverContractError):
        return None
