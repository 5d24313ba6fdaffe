"""``dp-offload``: a dynamic program for persistent rematerialization with offloading,
exact in the two-stream model (proofs/offload.md, 11.3; docs/model.md, "Offloading").

The class (``persistent+offload``, :mod:`remat_theory.model.classes`) extends the
persistent schedules of the Rotor DP (``solvers/dp.py``; Beaumont, Eyraud-Dubois,
Herrmann, Joly, Shilova) with transfers, in the spirit of Beaumont, Eyraud-Dubois and
Shilova, "Efficient combination of rematerialization and offloading for training DNNs"
(NeurIPS 2021), whose model is not ours (their DP is not reproduced here).  A segment
(s, t) whose input x_s sits in a *container* C (a plain x_s it owns, or the tape t_s its
parent recorded; never x_0) may send C to the host and fetch it back before the next op
that reads it:

* option A: ``Fall_s E [child (s+1, t)] P B_s``;
* option B-off: ``Fck_s Off(C) Fn_{s+1} .. Fn_{k-1} [child (k, t)] Pre(C) [part (s, k-1)]``.

In option A (O.10, O.16) each of C and the tape t_{s+1} of an unsaved output (B_s reads
it, nothing else does) is kept, offloaded right after Fall_s (``E``: "early", its copy
overlapping Fall_s) or right after the child's first op ("late": its copy overlaps that op
too, the value held during it); each one that moved is prefetched right before B_s
(``P``) or right before the child's last op (its copy overlapping that op, the value held
during it).  C moves only in a segment that starts *fresh* (right after C was made or
prefetched), and not late in a child that itself takes late offloads.  *Evictions* (O.18):
a segment that keeps its input, whose input and output are saved, may run ``Fall_s [child]
B_s`` or ``Fck_s [child] B_s`` where the child sends its container away for good and
``Fall_s`` recreates it right before the child's ``B_{s+1}`` (or ``Fck_s`` does, as a plain
x_{s+1}, and ``Fall_s`` runs again before B_s; the evicting child may move its own tape).
*Deferrals* (O.25, :mod:`solvers.offload.dp_defer`): a child offered late offloads that
moves nothing itself may pass them on to its own child (option A, or option B with its
part kept), down to the loss.  Every time is then
a constant of the choices (O.10, O.16): a fresh segment starts with the channel free; a
child taking late offloads starts with it busy for a known ``delta``; a child whose parent
prefetches early ends with its last op stretched to ``max(time, copies)``.

Tables over memory units m (budget minus everything the segment does not own, as in
``dp``; the container is never the segment's own):

* ``K(s, t, m)``: C stays on the device; ``Ot``/``Op(s, t, m)``: C, a tape t_s or a plain
  x_s, moves; ``F = min(K, O)``: what a fresh child may do;
* ``RK``/``RO``: option B's rest after ``Fck_s`` (the pass, the child, the part), kept or
  with C on the host: option B is ``fwd[s] + RK(m)`` and ``max(fwd[s], tc) + tc +
  RO(m)``;
* ``pend(s, t, delta, c, pre)``: a child whose parent's late offloads follow its first op
  (c units more from its second op on); ``qpre(s, t, form, tau, cp)``: a child whose
  parent prefetches ``cp`` units in ``tau`` seconds right before its last op;
  ``evict(s, t, form)``: a child whose container its parent's forward recreates.  All are
  built on demand from the tables of shorter segments and memoized (kept: a deferral asks
  for the pending rows of every shorter segment with the same end); their parameters
  take a bounded number of values per stage and origin (O.16, O.25).

Each candidate is a row over m (a shifted lookup plus a constant, infinite below its
memory threshold); a cell is their minimum.  Outputs no backward reads (``output_saved``)
as in ``dp`` (proofs/persistent_dp.md 2.10).  The answer is ``K(0, L, budget - x[0])``.
Memory: exact integers (sizes divided by their gcd) or ``slots`` (sizes rounded up to
budget/S, as ``dp`` does; every schedule found fits the real budget).  Times are the real
copy times ``bytes / bandwidth``.  Lookups above the largest segment's store-all peak read
the row's last entry, the segment's ideal time there (exact).  No choice is stored: the
rebuild recomputes a cell's candidates at one m.  Without ``bandwidth`` (or at 0 with
positive sizes) no transfer is possible and the answer is the persistent optimum of
``dp``.
"""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InternalError
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import Solution

from solvers._dp_tables import NEVER, Deadline, UnitChain, refuse_if_too_big
from solvers.dp import skewed_saturation
from solvers.dp_front import DPParts, solve_front
from solvers.dp_kernel import KERNEL, resolve_kernel
from solvers.offload.dp_min_budget import min_units
from solvers.offload.dp_table import NAME, OffloadTable
from solvers.registry import Option, register

CLASS = "persistent+offload"
CLASS_NO_REMAT = "store-all+offload"  # recompute=False
INF = math.inf
#: Min-plus steps per second assumed by the up-front refusal (solvers._dp_tables).
ASSUMED_RATE = 5e8
#: The numpy kernel's measured rate in the same steps (about 3e7 to 6e7 per second at 20
#: and 40 stages): what option kernel = auto weighs against compiling.
NUMPY_RATE = 3e7


def _refuse_if_too_big(L: int, W: int, slots, time_limit) -> float:
    # eight float64 rows of W per segment (K, O and F by container form, option B's rests
    # by form and move, O.26), and the pending and prefetching children's rows, kept: they
    # grow with the origins a deferral passes down (O.25; measured 54 per segment on a
    # 40-stage random chain, 11 on a 30-stage transformer), each with option B's splits
    cells = (L + 1) * (L + 2) / 2
    per_unit = 8 * (8 + 1.5 * L) * cells
    steps = (17 * L * (L + 1) * (L + 2) / 6 + 1.5 * L * L * cells) * W

    def fit(max_bytes, max_steps):
        return int(min(max_bytes / per_unit, max_steps / max(1.0, steps / W)))

    refuse_if_too_big(NAME, per_unit * W, steps, ASSUMED_RATE, time_limit, L, W, slots, fit)
    return steps


def class_min_budget(chain: Chain, recompute: bool = True) -> int:
    """The smallest budget (bytes) at which the class ``persistent+offload`` (with
    ``recompute=False``, ``store-all+offload``) has a schedule of ``chain``: a budget at
    which a schedule of the two-stream model exists."""
    uc, gcd = UnitChain.exact(chain)
    return min_units(uc, chain, recompute) * gcd


def solve_units(uc: UnitChain, chain: Chain, budget_units: int, deadline: Deadline = NEVER,
                slots: int | None = None, recompute: bool = True, kernel: str = "auto"):
    """``(makespan, schedule, table)`` at a budget in units of ``uc`` (inf, None, None when
    the class has no schedule there).  ``kernel``: the option (``"auto"``, ``"numpy"`` or
    ``"numba"``), how option B's splits are reduced (the same rows either way:
    solvers/offload/dp_split.py)."""
    x0 = int(uc.x[0])
    if budget_units < x0:
        return INF, None, None
    # the whole chain's saturation (sat[0, L], O(L)) bounds W from below: a refusal on it
    # comes before the O(L^2) saturation table (2 s at 10,000 stages)
    P, fall_term, b_term, loss_term = uc.store_all_terms()
    whole = max(int(loss_term), int(fall_term.max(initial=0)), int(b_term.max(initial=0)))
    _refuse_if_too_big(uc.L, max(1, whole - int(P[0]) + 1), slots, deadline.limit)
    W = int(max(1, skewed_saturation(uc).max() + 1))
    steps = _refuse_if_too_big(uc.L, W, slots, deadline.limit)
    kernel = resolve_kernel(kernel, NAME, steps / NUMPY_RATE)
    table = OffloadTable(uc, chain, deadline, recompute, kernel)
    m = budget_units - x0
    value = table.value(m)
    if value == INF:
        return INF, None, table
    return value, table.schedule(m), table


@register(NAME, optimal_for=CLASS, exact=True,
          description="Persistent dynamic program with offloading (segment inputs and "
                      "unsaved outputs' tapes, early, late or deferred, prefetched "
                      "early or not, or evicted and recomputed; a chain with "
                      "bandwidth): optimal over persistent+offload, "
                      "exact integer memory or slots.",
          variants={"dp-offload-slots": {"slots": 64},
                    "dp-offload-only": {"recompute": False}},
          classes=(CLASS, CLASS_NO_REMAT),
          supports=("fall_time", "fall_overhead", "output_saved", "bandwidth"),
          options={"slots": Option("int", "round sizes up to budget/slots (valid, optimal for "
                                   "the rounded sizes only; status feasible)", minimum=1,
                                   none=True),
                   "recompute": Option("bool", "allow recomputation (false: option A only, "
                                       "store-all with offloads: class "
                                       "persistent-no-remat+offload)"),
                   "time_limit": Option("seconds", "for the whole run (status time_limit "
                                        "past it)", none=True),
                   "kernel": KERNEL})
def solve_dp_offload(chain: Chain, budget: int, *, slots: int | None = None,
                     recompute: bool = True, time_limit: float | None = None,
                     kernel: str = "auto") -> Solution:
    """Optimal schedule of the class ``persistent+offload`` (module docstring): exact in
    memory by default; with ``slots``, sizes rounded up to budget/slots bytes (valid at the
    real budget, optimal for the rounded sizes: status ``feasible`` unless every size is a
    whole number of slots)."""
    resolve_kernel(kernel, NAME)  # 'numba' without numba: refused before any work
    info = {"bandwidth": chain.bandwidth, "recompute": recompute}
    cls = CLASS if recompute else CLASS_NO_REMAT

    def units(uc, budget_units, deadline, slots):
        makespan, schedule, _ = solve_units(uc, chain, budget_units, deadline, slots, recompute,
                                            kernel)
        # in exact memory the class's smallest budget comes with every answer
        return makespan, schedule, None if slots else min_units(uc, chain, recompute)

    def least_units(uc, deadline):
        return min_units(uc, chain, recompute)

    def replay(chain, schedule, makespan):
        sim = simulate(chain, schedule)
        if not math.isclose(sim.makespan, makespan, rel_tol=1e-9, abs_tol=1e-9):
            raise InternalError(f"{NAME}: the table says {makespan} but the referee measures "
                                f"{sim.makespan} for {schedule}")
        return sim.makespan, sim.peak_memory, {
            "transfers": sum(op.is_transfer for op in schedule)}

    # the saturation table ((L+1)^2 int64) and one memory value per cell at least: refused
    # from the length before any O(L) work or allocation
    parts = DPParts(NAME, cls, cls,
                    lambda L: max(8 * 8 * (L + 1) * (L + 2) / 2, (L + 1) ** 2 * 8),
                    units, least_units, replay=replay,
                    least_words="the smallest feasible budget of the class")
    return solve_front(parts, chain, budget, slots, Deadline(time_limit), info=info)
