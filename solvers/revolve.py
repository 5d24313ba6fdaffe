"""Revolve: binomial checkpointing, Griewank and Walther, "Algorithm 799: revolve: an
implementation of checkpointing for the reverse or adjoint mode of computational
differentiation", ACM TOMS 26(1), 2000 (and Griewank 1992, "Achieving logarithmic growth
of temporal and spatial complexity in reverse automatic differentiation").

Their setting: l equal steps, c checkpoint slots (one holds the initial state), a step
costs 1.  The fewest *advances* (forward steps run without recording, to move a state
forward) needed to reverse all l steps is, with beta(c, r) = C(c + r, c) and r the
unique integer with beta(c, r - 1) < l <= beta(c, r) (Griewank 1992; restated in the TOMS paper):

    t(l, c) = r l - beta(c + 1, r - 1).

Each of the l steps is in addition run once *recording* (revolve's ``firsturn`` /
``youturn``), immediately before its reverse step; those are not advances.

Mapping to this model: a step is a stage F_i; an advance is ``Fck``/``Fn``; the recording
run of step i is ``Fall_i`` immediately followed by ``B_i`` (and the loss for the last
step).  The schedule is the binomial recursion: to reverse [a, b) with s slots (x_a already
held), advance to a + m keeping x_{a+m} in a slot, reverse [a + m, b) with s - 1 slots,
then [a, a + m) with s; a single step is ``Fall_a (Loss) B_a``.  The split m is any value
with both halves in their optimal ranks (m <= beta(s, r-1), l - m <= beta(s-1, r)), which
makes the count of ``Fck``+``Fn`` equal t(L, s) exactly (checked in the tests for every
l <= 200, s <= 10, and t(1000, 50) = 1948) and the count of ``Fall`` equal L.  Revolve
never records during its first sweep, so even with unlimited slots it runs 2L - 1
forwards where store-all runs L: that is the algorithm, not a modelling artefact.

Slots on a heterogeneous chain: revolve assumes equal states; a user sizes every slot for
the largest activation X = max x_size.  With s slots the schedule never holds more than
x_0, s further activations, one tape, two gradients and the op's transient memory, so it
fits in the *slot budget*

    M(s) = x_0 + s X + max(3X + FO, X + T + FAO, 2X + T + BO)

(T the largest tape, FO / FAO / BO the largest no-grad forward / recording forward /
backward overhead).  Option ``slots``
fixes s; by default s is the largest value in 1..L with M(s) <= budget (a user's choice),
and the solver is infeasible below M(1), which is then ``min_budget``.  With an explicit
``slots`` the schedule does not depend on the budget and ``min_budget`` is its peak.
"""
from __future__ import annotations

from math import comb

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import Schedule
from remat_theory.model.solution import Solution

from solvers._deadline import check as deadline_check
from solvers._schedules import BUILDING, TIME_LIMIT, advance, replay, stored_segment
from solvers.registry import Option, register


def beta(c: int, r: int) -> int:
    """beta(c, r) = C(c + r, c): the most steps c slots reverse with r repetitions."""
    if r < 0 or c < 0:
        return 0
    return comb(c + r, c)


def repetition_rank(l: int, c: int) -> int:
    """The r with beta(c, r - 1) < l <= beta(c, r) (l >= 1, c >= 1)."""
    r = 0
    while beta(c, r) < l:
        r += 1
    return r


def revolve_advances(l: int, c: int) -> int:
    """Griewank-Walther closed form t(l, c) = r l - beta(c + 1, r - 1)."""
    if l < 1 or c < 1:
        raise RematError(f"t(l, c) needs l >= 1 and c >= 1, got l = {l}, c = {c}")
    r = repetition_rank(l, c)
    return r * l - beta(c + 1, r - 1)


def revolve_split(l: int, c: int) -> int:
    """Length m of the left part when reversing l >= 2 steps with c >= 1 slots.

    Both halves must be in their optimal rank: m in [beta(c, r-2), beta(c, r-1)] and
    l - m in [beta(c-1, r-1), beta(c-1, r)]; then m + t(l-m, c-1) + t(m, c) = t(l, c)
    (t is linear in l inside a rank and continuous at its ends, and
    beta(c+1, r-1) = beta(c+1, r-2) + beta(c, r-1)).
    """
    r = repetition_rank(l, c)
    return max(beta(c, r - 2), l - beta(c - 1, r), 1)


def revolve_schedule(chain: Chain, slots: int) -> Schedule:
    """The binomial schedule with ``slots`` slots (x_0 in one of them)."""
    ops = []
    stack = [(0, chain.length, slots)]
    count = 0
    while stack:
        count += 1
        if not count & 0xFFF:
            deadline_check(BUILDING)
        a, b, s = stack.pop()
        if b - a == 1:
            ops.extend(stored_segment(chain, a, b))
            continue
        m = revolve_split(b - a, s)
        ops.extend(advance(a, a + m))
        stack.append((a, a + m, s))  # reversed after the right part
        stack.append((a + m, b, s - 1))
    return Schedule(ops)


def slot_budget(chain: Chain, slots: int) -> int:
    """M(s): a budget (bytes) in which revolve with ``slots`` slots always fits."""
    X = max(chain.x_size)
    T = max(chain.tape_size)
    FO, FAO = max(chain.fwd_overhead), max(chain.fall_overhead)
    BO = max(chain.bwd_overhead)
    return chain.x_size[0] + slots * X + max(3 * X + FO, X + T + FAO, 2 * X + T + BO)


@register("revolve", optimal_for="none", supports=("fall_time", "fall_overhead", "output_saved"),
          options={"slots": Option("int", "checkpoint slots to use (default: as many as the "
                                   "budget holds)", minimum=1, none=True),
                   "time_limit": TIME_LIMIT},
          description="Griewank-Walther binomial checkpointing (Algorithm 799), slots sized for the largest activation.")
def solve_revolve(chain: Chain, budget: int, *, slots: int | None = None,
                  time_limit: float | None = None) -> Solution:
    L = chain.length
    if slots is not None:
        s = slots
        schedule = revolve_schedule(chain, s)
        makespan, peak = replay(chain, schedule)
        adv = revolve_advances(L, s)
        info = {"slots": s, "advances": adv, "slot_budget": slot_budget(chain, s)}
        if peak > budget:
            return Solution.infeasible("revolve", budget, min_budget=peak,
                                       message=f"slots={s}: the schedule peaks at {peak} > "
                                               f"budget {budget}", info=info)
        return Solution.feasible("revolve", budget, schedule, makespan, peak, min_budget=peak,
                                 message=f"slots={s}: {adv} advances + {L} recording forwards",
                                 info=info)
    smallest = slot_budget(chain, 1)
    if smallest > budget:
        return Solution.infeasible("revolve", budget, min_budget=smallest,
                                   message=f"even one slot needs a slot budget of {smallest} "
                                f"(slots sized for the largest activation, {max(chain.x_size)})")
    # the most slots whose budget fits: M(s) = M(0) + s X is linear in s (one O(L) pass,
    # not one per slot: 10,000 stages took 30 s here)
    X = max(chain.x_size)
    s = L if X == 0 else max(1, min(L, (budget - slot_budget(chain, 0)) // X))
    schedule = revolve_schedule(chain, s)
    makespan, peak = replay(chain, schedule)
    adv = revolve_advances(L, s)
    return Solution.feasible("revolve", budget, schedule, makespan, peak, min_budget=smallest,
                    message=f"slots={s} (slot budget {slot_budget(chain, s)}): {adv} advances + "
                            f"{L} recording forwards",
                    info={"slots": s, "advances": adv, "slot_budget": slot_budget(chain, s)})
