"""The persistent dynamic program (Rotor), exact with respect to the simulator.

Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, "Optimal checkpointing for heterogeneous
chains: how to train deep neural networks with limited memory" (2019/2020), section 4: the
optimal *persistent* schedule of a chain is found by a dynamic program over segments.  This
module re-derives that program from the operation table of docs/model.md (the
simulator), case by case, so that its memory accounting matches every operation's peak
exactly; ``proofs/persistent_dp.md`` states the recurrence, the class it is optimal for
(:func:`remat_theory.model.persistence.is_persistent`) and the proof.

Subproblem W(s, t, m), 0 <= s <= t <= L: the live gradient is d_{t+1} (none when t = L: the
loss has not run), x_s is available *without being owned* (x_0, or x_s inside a held tape
t_s), nothing of stages s+1..t is held; run the backward of stages t..s (the loss when
t = L) and stop with d_s live.  ``m`` (memory units) is the budget minus everything held
that the segment does not own; the segment owns d_{t+1} (size g = x[t+1], or 0 when t = L)
and, at the end, d_s.  A segment whose x_s is a *plain* x_s (s >= 1) that it owns and frees
with B_s has exactly the same peaks shifted by x[s], so its value is W(s, t, m - x[s]): one
table serves both forms.

Recurrence (every peak is a row of the operation table):

* t = s = L (loss, x_L unowned): Loss, peak x[L] + bo[L].
* t = s < L: Fall_s (peak g + tape[s] + fo[s]), B_s (peak tape[s] + x[s+1] + x[s] + bo[s]).
* option A, s < t: Fall_s (peak g + tape[s] + fo[s]); then W(s+1, t, m - tape[s]) with x_{s+1}
  inside t_{s+1}; then B_s (peak tape[s] + x[s+1] + x[s] + bo[s]).
* option B, s < k <= t: Fck_s Fn_{s+1} .. Fn_{k-1} (peaks g + x[s+1] + fo[s] and
  g + x[j] + x[j+1] + fo[j]), leaving a plain x_k; then W(k, t, m - x[k]) (plain x_k owned
  by the child, freed by B_k or by the loss); then W(s, k-1, m).

The answer is W(0, L, budget - x[0]) (x_0 is always held, never freed).

Outputs no backward reads (the chain's ``output_saved``; proofs/persistent_dp.md 2.10):
t_{s+1} holds th[s] = ``tape_held[s]``, an unsaved x_s is a plain value the segment owns
(counted outside m, as in the plain form) and Fall_s frees it, so option A's child runs at
m - dA[s], dA[s] = th[s] + ux[s+1] - ux[s], and B_s needs bneed[s] = th[s] + x[s+1] + x[s]
- ux[s] + bo[s] (ux[i] = x[i] when x_i is unsaved, else 0).  All saved: the formulas above.

Tables (``solvers/dp_table.py``): the table is computed for every memory value at once,
by one of two kernels that give the same values (option ``kernel``,
``solvers/dp_kernel.py``): numba, one compiled loop nest over a compact store of each
segment's useful window (the default when numba imports), or numpy (a blocked min-plus
reduction per segment).  When every unit size shares a factor (common in ``slots`` mode,
where sizes are rounded to whole slots) the chain is divided by it first: the same answers
on a table that many times smaller.  Choices are not stored: the schedule is rebuilt by
recomputing the choice at the memory value actually used by each segment on the optimal
path.  Time O(L^3 M), memory O(L^2 M).

Limits: ``time_limit`` (seconds) bounds the whole run; the clock is read once per table row,
and when it runs out the solver returns status ``time_limit`` with the ideal makespan as
its lower bound.  A table over 8 GiB, or (with a time limit) an estimate over ten times
the limit, is refused before any work, naming a ``slots`` value that fits
(:class:`~remat_theory.model.errors.SolverLimitError`).

Barriers (option ``barriers``): the forward passes across a barrier j (s <= j < k - 1) get
``fp[s, k]`` above any memory value, so option B, the min-memory table and the rebuilt
choice all leave them out; the value table only reduces the passes that remain
(``UnitChain.pass_cap``).  The answer is then optimal among the persistent schedules with
no such pass, and claims nothing about the whole class.

Memory modes: exact integers (every size and the budget divided by the chain's size gcd) or
``slots=S`` (sizes rounded *up* to multiples of budget/S: every schedule found fits in the
real budget; ``info`` reports the slot size, the rounding loss and the budget for which the
result is guaranteed to be at least as good as the exact persistent optimum).
"""
from __future__ import annotations

import math

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import EQ, InternalError, Remedy, SolverError, SolverOptionError
from remat_theory.model.solution import (CLASS_NONE, CLASS_PERSISTENT, FEASIBLE, INFEASIBLE,
                                         OPTIMAL, Solution)

from solvers._dp_tables import NEVER, Deadline, UnitChain, refuse_if_too_big, slot_info
from solvers.dp_front import DPParts, solve_front
from solvers.dp_kernel import KERNEL, resolve_kernel
from solvers.dp_table import (FusedTable, PersistentTable, min_memory_table, skewed_min_memory,
                              skewed_saturation, table_dtype)
from solvers.registry import Option, register

__all__ = ["PersistentTable", "FusedTable", "UnitChain", "min_feasible_budget",
           "min_memory_table", "skewed_min_memory", "skewed_saturation", "slot_info",
           "solve_dp", "solve_units", "table_dtype"]

INF = math.inf

#: Min-plus steps per second the up-front estimate assumes (an optimistic figure for this
#: implementation on one core: ``benchmarks/bench_dp.py scale`` measures the real one), so
#: that only runs clearly past the time limit are refused.
ASSUMED_RATE = 4e9
#: The numpy kernel's measured rate in the same steps (about 1e9 to 1.5e9 per second, 120
#: to 1,000 stages): what option kernel = auto weighs against compiling.
NUMPY_RATE = 1e9

def min_units(uc: UnitChain) -> int:
    """Smallest budget (units) at which a persistent schedule exists."""
    return int(uc.x[0] + skewed_min_memory(uc)[0, uc.L])


def min_feasible_budget(chain: Chain, barriers=()) -> int:
    """The smallest budget (bytes) at which ANY persistent schedule of ``chain`` exists
    (with ``barriers``, :func:`solve_dp`'s option: any without a pass across them).

    Exact: computed on sizes divided by their gcd by the DP's own min-memory recursion
    (:func:`min_memory_table`).  Persistent schedules are a subset of all schedules, so this
    is >= the global smallest feasible budget; the tests compare the two by exhaustive
    search (on small chains they have always been equal so far; see proofs/persistent_dp.md).
    """
    if not isinstance(chain, Chain):
        raise SolverError(f"chain must be a Chain, got {type(chain).__name__}")
    barriers = BARRIERS.check(barriers, "barriers", "dp", chain)
    uc, g = UnitChain.exact(chain, barriers)
    return min_units(uc) * g


def work_estimate(L: int, M: int, itemsize: int) -> tuple[float, float]:
    """(table bytes, min-plus steps) of the value table for L stages and m = 0..M: the
    table has one row of M + 1 values per segment; the steps are an upper bound (every
    split of every segment at every memory value; the saturation window only lowers it)."""
    cells = (L + 1) * (L + 2) / 2
    tri = L * (L + 1) * (L + 2) / 6
    return cells * (M + 1) * itemsize, tri * (M + 1)


def _fit_slots(L: int, itemsize: int):
    cells = (L + 1) * (L + 2) / 2
    tri = max(1.0, L * (L + 1) * (L + 2) / 6)

    def fit(max_bytes, max_steps):
        return int(min(max_bytes / (cells * itemsize), max_steps / tri))
    return fit


def solve_units(uc: UnitChain, budget_units: int, deadline: Deadline = NEVER,
                time_limit: float | None = None, slots: int | None = None, kernel: str = "auto"):
    """Optimal persistent makespan and schedule for a budget in units, or (inf, None).

    Returns ``(makespan, schedule, min_units)``: ``min_units`` is the smallest feasible
    budget in the units of ``uc``.  A common factor of every unit size is divided out first
    (:meth:`UnitChain.divided`).  Raises :class:`SolverError` up front when the table is
    too big (:func:`solvers._dp_tables.refuse_if_too_big`), ``DeadlineExpired`` when
    ``deadline`` passes.  ``kernel``: the option (``solvers/dp_kernel.py``)."""
    g = uc.size_gcd()
    x0 = int(uc.x[0])
    ucd = uc.divided(g)
    L = ucd.L
    M = (budget_units - x0) // g if budget_units >= x0 else -1
    # Above store-all's peak the optimum is the ideal makespan: no need for a wider table.
    M = min(M, max(0, ucd.store_all_units() - int(ucd.x[0])))
    dtype = table_dtype(ucd)
    itemsize = np.dtype(dtype).itemsize
    table_bytes, steps = work_estimate(L, max(M, 0), itemsize)
    refuse_if_too_big("dp", table_bytes, steps, ASSUMED_RATE, time_limit, L, M + 1, slots,
                      _fit_slots(L, itemsize))
    kern = resolve_kernel(kernel, "dp", steps / NUMPY_RATE)
    table_class = FusedTable if kern == "numba" else PersistentTable
    mms = skewed_min_memory(ucd, deadline, kern)
    least = g * (int(ucd.x[0]) + int(mms[0, L]))
    if M < int(mms[0, L]):
        return INF, None, least
    table = table_class(ucd, M, dtype, mms, deadline)
    value = table.value(0, L, M)
    if value == INF:  # pragma: no cover - mm says it is feasible
        raise InternalError("solver 'dp': the table disagrees with min-memory")
    return value, table.schedule(M), least


#: The ``barriers`` option (:func:`solve_dp`).
BARRIERS = Option("indices", "stages j after which no checkpointed forward pass goes on (no "
                  "recomputed segment holds both j and j+1); optimal only among such "
                  "persistent schedules (status feasible, no class claimed)", minimum=0,
                  maximum="L-2")

#: What an answer with barriers is optimal among (``info["optimal_among"]``).
AMONG_BARRIERS = "persistent schedules with no forward pass across a barrier"


def _with_barriers(sol: Solution, barriers: tuple) -> Solution:
    """``sol`` (solved on a chain whose passes across ``barriers`` were left out) with no
    claim about the persistent class: a proof of optimality (or of infeasibility) holds only
    among the persistent schedules without such a pass, which ``info`` and the message say;
    ``min_budget`` is the smallest budget of those."""
    where = f"after stage{'s' if len(barriers) > 1 else ''} {', '.join(map(str, barriers))}"
    info = {**sol.info, "barriers": list(barriers)}
    if sol.status == OPTIMAL:
        info["optimal_among"] = AMONG_BARRIERS
        return sol.replace(status=FEASIBLE, optimal_for=CLASS_NONE, bound=None, info=info,
                           message=f"optimal among {AMONG_BARRIERS} (barriers {where}); not "
                                   f"proven optimal among all persistent schedules")
    if sol.status == INFEASIBLE:
        slots = " with sizes rounded up to slots" if info.get("memory") == "slots" else ""
        return sol.replace(optimal_for=CLASS_NONE, info=info, message=(
            f"no persistent schedule without a forward pass across the barriers {where} fits "
            f"in {sol.budget}{slots}; the smallest budget at which one does (exact memory) is "
            f"{sol.min_budget}"))
    if sol.status == FEASIBLE and sol.bound is not None:  # slot_bound: over the same schedules
        info["lower_bound_among"] = (sol.bound, AMONG_BARRIERS)
    note = f"barriers {where}: no forward pass crosses them"
    return sol.replace(optimal_for=CLASS_NONE, bound=None if sol.status == FEASIBLE else sol.bound,
                       info=info, message=f"{sol.message}; {note}" if sol.message else note)


@register("dp", optimal_for=CLASS_PERSISTENT, exact=True,
          description="Rotor persistent dynamic program, exact integer memory or slots.",
          variants={"dp-slots": {"slots": 64}},
          supports=("fall_time", "fall_overhead", "output_saved"),
          options={"slots": Option("int", "round sizes up to budget/slots (valid, optimal for "
                                   "the rounded sizes only; status feasible)", minimum=1,
                                   none=True),
                   "slot_bound": Option("bool", "with slots, also solve with sizes rounded "
                                        "down: a lower bound on the exact persistent "
                                        "optimum (status optimal where the two agree)"),
                   "time_limit": Option("seconds", "for the whole run, table building "
                                        "included (status time_limit past it)", none=True),
                   "barriers": BARRIERS, "kernel": KERNEL})
def solve_dp(chain: Chain, budget: int, *, slots: int | None = None,
             slot_bound: bool = False, time_limit: float | None = None,
             barriers: tuple = (), kernel: str = "auto") -> Solution:
    """Optimal persistent schedule (Beaumont et al., Rotor, section 4), exact in memory.

    Options
    -------
    slots : None for exact integer memory (sizes divided by their gcd), or S >= 1 to count
        memory in S slots of budget/S bytes, sizes rounded up (faster and smaller for large
        budgets; the result is valid at the real budget but optimal only for the rounded
        sizes: status ``feasible``).
    slot_bound : with ``slots``, also run the DP with sizes rounded *down*: a relaxation
        whose optimum is a lower bound on the exact persistent optimum (``bound``); when the
        two agree the status is ``optimal``.
    time_limit : seconds for the whole run (tables and rebuild), or None.  When it runs out
        the status is ``time_limit``, with no schedule and the ideal makespan as bound.
        With a limit, a run estimated at more than ten times it is refused up front
        (:class:`SolverLimitError` with the estimate and a ``slots`` value that fits), as is
        any table over 8 GiB.
    barriers : stage indices j (0 <= j <= L - 2) where no checkpointed forward pass goes on
        from stage j to stage j+1: no pass ``Fck_s Fn_{s+1} .. Fn_{k-1}`` with s <= j < k - 1
        (no ``Fn_{j+1}`` at all), so no recomputed segment holds both stages; ``Fck_{j+1}``
        and ``Fall_{j+1}`` are allowed.  The table leaves those passes out
        (:class:`UnitChain`, ``fp`` above any memory), so the answer is optimal among the
        persistent schedules without them: status ``feasible`` (``optimal_for`` none, no
        bound), ``info["optimal_among"]`` and the message saying so, ``info["barriers"]``;
        ``min_budget`` is the smallest budget of those schedules.  Empty (the default): the
        plain DP.
    """
    deadline = Deadline(time_limit)  # options checked by the registry (the schema above)
    barriers = BARRIERS.check(barriers, "barriers", "dp", chain)  # called directly too
    sol = _solve(chain, budget, slots, slot_bound, deadline, barriers, kernel)
    return _with_barriers(sol, barriers) if barriers else sol


def _solve(chain: Chain, budget: int, slots: int | None, slot_bound: bool, deadline: Deadline,
           barriers: tuple, kernel: str) -> Solution:
    """:func:`solve_dp` on the chain whose passes across ``barriers`` are left out, with the
    persistent class's claims (:func:`_with_barriers` withdraws them)."""
    if slot_bound and slots is None:
        raise SolverOptionError("solver 'dp': option slot_bound needs slots",
                                remedies=(Remedy(options=(("slots", EQ, None),)),))
    resolve_kernel(kernel, "dp")  # kernel = 'numba' without numba: refused before any work

    def units(uc, budget_units, deadline, slots):
        return solve_units(uc, budget_units, deadline, deadline.limit, slots, kernel)

    parts = DPParts("dp", CLASS_PERSISTENT, "persistent",
                    # a float32 value per segment at least
                    lambda stages: work_estimate(stages, 0, 4)[0], units,
                    lambda uc, deadline: min_units(uc))
    return solve_front(parts, chain, budget, slots, deadline, barriers, slot_bound)
