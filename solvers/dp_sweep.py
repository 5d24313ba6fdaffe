"""The persistent and weak DPs at many budgets of one chain, from one table.

``dp`` and ``dp-weak`` fill a table over every memory value from 0 to the budget: the
optimum at any smaller budget is already in it (W(0, L, m) at a smaller m).  A sweep over
budgets (a makespan-memory curve, a test that compares each budget with an oracle) thus
needs one table per chain, not one per budget.  :func:`sweep` builds it for the largest
budget asked and reads every answer from it: the same makespans and the same schedules as
``solvers.solve(chain, budget, "dp")`` (or ``"dp-weak"``) at each budget, exact memory.

It returns raw answers (makespan and schedule), not :class:`Solution` objects, and does
not replay the schedules: callers that need the registry's checks call ``solvers.solve``.

Example: a 5-stage homogeneous chain (activations of 1 byte, tapes of 2), from below its
smallest feasible budget to its store-all peak, where the makespan is the ideal one:

>>> from remat_theory import Chain
>>> from solvers.dp_sweep import sweep
>>> chain = Chain.homogeneous(5, tape_size=2)
>>> answers = sweep(chain, range(5, chain.store_all_memory() + 1))
>>> [answers[b][0] for b in sorted(answers)]
[inf, 20.0, 15.0, 14.0, 13.0, 12.0, 12.0, 11.0, 10.0]
>>> answers[chain.store_all_memory()][0] == chain.ideal_makespan()
True
>>> print(answers[6][1])  # at the smallest budget: recompute everything from x0
Fck0 Fn1 Fn2 Fn3 Fall4 Loss B4 Fck0 Fn1 Fn2 Fall3 B3 Fck0 Fn1 Fall2 B2 Fck0 Fall1 B1 Fall0 B0
"""
from __future__ import annotations

import math
from typing import Iterable

from remat_theory.model.chain import Chain
from remat_theory.model.errors import SolverOptionError
from remat_theory.model.schedule import Schedule

from solvers._dp_tables import MAX_TABLE_BYTES, UnitChain
from solvers.dp_kernel import resolve_kernel

__all__ = ["sweep"]

SOLVERS = ("dp", "dp-weak")


def sweep(chain: Chain, budgets: Iterable[int], solver: str = "dp", kernel: str = "auto"
          ) -> dict[int, tuple[float, Schedule | None]]:
    """``{budget: (makespan, schedule)}`` of ``solver`` (``"dp"`` or ``"dp-weak"``, exact
    memory) at each budget in bytes, ``(inf, None)`` where no schedule of its class fits;
    one table, built for the largest budget (capped at the store-all peak) by ``kernel``
    (the solvers' option, ``solvers/dp_kernel.py``)."""
    if solver not in SOLVERS:
        raise SolverOptionError(f"sweep: solver = {solver!r} is not one of {', '.join(SOLVERS)}")
    budgets = sorted(set(budgets))
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, int) or b < 0:
            raise SolverOptionError(f"sweep: budget {b!r} is not a non-negative integer")
    resolve_kernel(kernel, solver)  # kernel = 'numba' without numba: refused before any work
    uc, gcd = UnitChain.exact(chain)
    g = uc.size_gcd()
    ucd = uc.divided(g)
    x0 = int(uc.x[0])
    top = max(0, ucd.store_all_units() - int(ucd.x[0]))

    def units(budget: int) -> int:
        """The table column of ``budget`` (as ``solve_units`` computes it), -1 below x_0."""
        bu = budget // gcd
        return min((bu - x0) // g, top) if bu >= x0 else -1

    M = max([units(b) for b in budgets] + [0])
    L = ucd.L
    if solver == "dp":
        import numpy as np

        from solvers.dp import NUMPY_RATE, FusedTable, PersistentTable, table_dtype, work_estimate

        dtype = table_dtype(ucd)
        size, steps = work_estimate(L, M, np.dtype(dtype).itemsize)
        fused = resolve_kernel(kernel, solver, steps / NUMPY_RATE) == "numba"
    else:
        from solvers.dp_weak import WeakTable, work_estimate

        size, _ = work_estimate(L, M)
    if size > MAX_TABLE_BYTES:
        raise SolverOptionError(
            f"sweep: {solver} on {L} stages up to {M + 1} memory units needs "
            f"{size / 2 ** 30:.1f} GiB of table (limit {MAX_TABLE_BYTES / 2 ** 30:.0f} GiB); "
            f"solve budget by budget with slots instead")
    if solver == "dp":
        table = (FusedTable if fused else PersistentTable)(ucd, M, dtype)
        value = table.value
    else:
        table = WeakTable(ucd, M, kernel=kernel)
        value = table.w
    out: dict[int, tuple[float, Schedule | None]] = {}
    for b in budgets:
        m = units(b)
        v = value(0, L, m) if m >= 0 else math.inf
        out[b] = (v, None) if v == math.inf else (v, table.schedule(m))
    return out
