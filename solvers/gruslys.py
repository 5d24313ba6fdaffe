"""The BPTT dynamic programs of Gruslys, Munos, Danihelka, Lanctot, Graves 2016,
"Memory-efficient backpropagation through time" (NIPS 2016), mapped onto the chain.

Their setting: a homogeneous recurrent core unrolled for t steps; memory is
counted in slots of one hidden state, an internal state (everything the core's backward
needs) takes alpha slots; cost is the number of forward operations of the core.  With m
slots, the fewest forwards C(t, m) obey

* BPTT-HSM (hidden state memorization): C(t, m) = min_y [ y + C(t-y, m-1) + C(y, m) ];
* BPTT-ISM (internal state memorization): C(t, m) = min_y [ y + C(t-y, m-alpha) + C(y-1, m) ];
* BPTT-MSM (mixed state memorization): the smaller of the two at every (t, m).

Mapping (option ``variant`` = ``hidden``, ``internal`` or ``mixed``, default mixed): the
hidden state is the activation x_i, the internal state of step i is the tape t_{i+1}.  A
subproblem reverses the stages [a, b) with x_a held and m free units of memory:

* a *leaf* (one stage): ``Fall_a (Loss) B_a``, 1 forward;
* a *hidden-state checkpoint* at a + k (1 <= k < l): advance to x_{a+k}, keep it (1 unit),
  reverse [a+k, b) with m - 1 units, then [a, a+k) with m: k + C(l-k, m-1) + C(k, m);
* an *internal-state checkpoint* at a + j: advance to x_{a+j}, run ``Fall_{a+j}`` and keep
  t_{a+j+1} (alpha units, plus 1 for x_{a+j} which B_{a+j} also needs when j > 0), reverse
  [a+j+1, b) from the tape, run ``B_{a+j}`` with no recomputation, then reverse [a, a+j):
  j + 1 + C(l-j-1, m - alpha - [j > 0]) + C(j, m).  With j = 0 this is the Rotor ``Fall``
  option; with their y = j + 1 it is their ISM recursion.

They assume a homogeneous chain.  On a heterogeneous one this solver does what a user of
their DP would: one unit is the largest activation X = max x_size, alpha = ceil(T / X)
with T the largest tape, and every forward counts 1 (the DP minimizes the number of
forward operations, which is the makespan when all forward times equal their mean; the
reported makespan is the simulated one with the real times).  The units the budget allows
are m = floor((budget - x_0 - R) / X), where R = max(3X + FO, X + T + FAO, 2X + T + BO)
covers what the running operation adds (the live gradient, an activation being advanced and
its successor, a leaf's tape, the gradient being produced, overheads); every schedule then
peaks at most at x_0 + m X + R <= budget.  The table is computed with numpy for every (l, m)
in O(L^2 m) time.  With ``hidden`` and m units the forward count equals revolve's
t(L, m) + L (the tests check it: HSM is binomial checkpointing).
"""
from __future__ import annotations

import math

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import Remedy, SolverContractError, SolverLimitError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Schedule
from remat_theory.model.solution import Solution

from solvers._deadline import Deadline, DeadlineExpired
from solvers._schedules import advance, replay, stored_segment, unfold
from solvers.registry import Option, register

VARIANTS = ("hidden", "internal", "mixed")
NEVER = Deadline(None)
_LEAF, _HIDDEN, _INTERNAL = 0, 1, 2


def units(chain: Chain) -> tuple[int, int, int]:
    """(unit size X in bytes, alpha in units, reserve R in bytes) of the slot accounting."""
    if chain.length >= 64:  # the chain's int64 arrays: a million stages in milliseconds
        X, T, FO, FAO, BO = (int(chain.array(f).max()) for f in (
            "x_size", "tape_size", "fwd_overhead", "fall_overhead", "bwd_overhead"))
        X = max(X, 1)
    else:
        X = max(max(chain.x_size), 1)
        T = max(chain.tape_size)
        FO, FAO, BO = max(chain.fwd_overhead), max(chain.fall_overhead), max(chain.bwd_overhead)
    alpha = -(-T // X)
    R = max(3 * X + FO, X + T + FAO, 2 * X + T + BO)
    return X, alpha, R


def memory_units(chain: Chain, budget: int) -> int:
    """Units m the budget leaves after x_0 and the reserve (negative: not even a leaf fits)."""
    X, _, R = units(chain)
    return (budget - chain.x_size[0] - R) // X


def min_units(length: int, alpha: int, variant: str) -> int:
    """Fewest units with a finite C(L, m): 0 for one stage; else 1 if hidden-state
    checkpoints are allowed (recompute from x_0), else alpha for two stages and
    alpha + 1 beyond (a chain of internal checkpoints at the end of each segment)."""
    if length == 1:
        return 0
    if variant != "internal":
        return 1
    return alpha if length == 2 else alpha + 1


#: Largest table (bytes: C, kind and arg, 13 per entry) built; above it the solver refuses.
MAX_TABLE_BYTES = 2 * 2 ** 30


def gruslys_table(length: int, m: int, alpha: int, variant: str, deadline: Deadline = NEVER):
    """C[l, u] (forwards to reverse l stages with u units, inf if impossible) for l <= length,
    u <= m, and the choice (kind, offset) at each entry; ``deadline`` is checked once per
    row (:class:`DeadlineExpired`)."""
    L, M = length, m
    INF = math.inf
    C = np.full((L + 1, M + 1), INF)
    C[0, :] = 0.0
    if L >= 1:
        C[1, :] = 1.0
    kind = np.zeros((L + 1, M + 1), dtype=np.int8)
    arg = np.zeros((L + 1, M + 1), dtype=np.int32)
    hidden = variant in ("hidden", "mixed")
    internal = variant in ("internal", "mixed")
    for l in range(2, L + 1):
        deadline.check(f"building the table (row {l} of {L})")
        best = np.full(M + 1, INF)
        bkind = np.zeros(M + 1, dtype=np.int8)
        barg = np.zeros(M + 1, dtype=np.int32)

        def take(lo, vals, k, off):
            better = vals < best[lo:]
            best[lo:][better] = vals[better]
            bkind[lo:][better] = k
            barg[lo:][better] = off[better] if isinstance(off, np.ndarray) else off

        if hidden and M >= 1:
            K = np.arange(1, l)
            vals = K[:, None] + C[l - K, :M] + C[K, 1:]
            pick = np.argmin(vals, axis=0)
            take(1, vals[pick, np.arange(M)], _HIDDEN, K[pick])
        if internal:
            if M >= alpha:  # j = 0: the tape of stage a, x_a is held already
                take(alpha, 1.0 + C[l - 1, :M + 1 - alpha], _INTERNAL, 0)
            if M >= alpha + 1:
                J = np.arange(1, l)
                vals = J[:, None] + 1.0 + C[l - J - 1, :M - alpha] + C[J, alpha + 1:]
                pick = np.argmin(vals, axis=0)
                take(alpha + 1, vals[pick, np.arange(M - alpha)], _INTERNAL, J[pick])
        C[l], kind[l], arg[l] = best, bkind, barg
    return C, kind, arg


def gruslys_schedule(chain: Chain, m: int, alpha: int, kind, arg) -> Schedule:
    """Follow the table's choices from (0, L, m) into a schedule
    (:func:`solvers._schedules.unfold`)."""
    L = chain.length

    def expand(item):
        _, a, b, u = item
        l = b - a
        if l == 0:
            return ([LOSS_OP] if b == L else []), ()  # the tape just recorded holds x_L
        if l == 1:
            return stored_segment(chain, a, b), ()
        k, off = int(kind[l, u]), int(arg[l, u])
        if k == _HIDDEN:
            return advance(a, a + off), (("rev", a + off, b, u - 1), ("rev", a, a + off, u))
        if k == _INTERNAL:
            y = a + off
            return ((advance(a, y) if off else []) + [Fall(y)],
                    (("rev", y + 1, b, u - alpha - (1 if off else 0)), Bwd(y), ("rev", a, y, u)))
        # pragma: no cover - l >= 2 entries with a finite cost always have a choice
        raise SolverContractError(f"gruslys: no choice recorded for {l} stages and {u} units")

    return unfold(("rev", 0, L, m), expand)


@register("gruslys", optimal_for="none", supports=("fall_time", "fall_overhead", "output_saved"),
          options={"variant": Option("choice", "which of the paper's dynamic programs",
                                     choices=VARIANTS),
                   "time_limit": Option("seconds", "stops the O(L^2 m) table (status "
                                        "time_limit, no schedule)", none=True)},
          description="Gruslys et al. 2016 BPTT dynamic programs (hidden / internal / mixed states), unit slots.")
def solve_gruslys(chain: Chain, budget: int, *, variant: str = "mixed",
                  time_limit: float | None = None) -> Solution:
    """The DP of the variant (module docstring); ``time_limit`` (seconds) stops the O(L^2 m)
    table (status ``time_limit``, no schedule), and a table over :data:`MAX_TABLE_BYTES` is
    refused up front."""
    deadline = Deadline(time_limit)
    L = chain.length
    X, alpha, R = units(chain)
    m = memory_units(chain, budget)
    need = min_units(L, alpha, variant)
    smallest = chain.x_size[0] + R + need * X
    info = {"variant": variant, "unit": X, "alpha": alpha, "reserve": R}
    if m < need:
        return Solution.infeasible("gruslys", budget, min_budget=smallest,
                        message=f"{variant}: the budget leaves {max(m, 0)} units of {X} bytes, "
                                f"{need} needed",
                        info=info)
    # Beyond this many units every option is available everywhere: more cannot help.
    cap = (L - 1) * (alpha + 1) + 1
    mm = min(m, cap)
    table = 13 * (L + 1) * (mm + 1)
    if table > MAX_TABLE_BYTES:
        raise SolverLimitError(
            f"solver 'gruslys': {L:,} stages with {mm:,} units of {X} bytes would need a table "
            f"of {table / 2 ** 30:.1f} GiB (limit {MAX_TABLE_BYTES / 2 ** 30:.0f} GiB)",
            solver="gruslys", estimate_bytes=table,
            remedies=(Remedy(solver="revolve", note="binomial checkpointing, any length"),
                      Remedy(solver="chen-sqrt", note="about sqrt(L) segments, any length")))
    try:
        C, kind, arg = gruslys_table(L, mm, alpha, variant, deadline)
    except DeadlineExpired as e:
        return Solution.time_limit("gruslys", budget, info=info,
                                   message=f"{e}: no schedule (not proven optimal)")
    forwards = C[L, mm]
    if not math.isfinite(forwards):  # pragma: no cover - min_units guarantees a finite entry
        raise SolverContractError(f"gruslys: no finite cost with {mm} units although {need} suffice")
    schedule = gruslys_schedule(chain, mm, alpha, kind, arg)
    makespan, peak = replay(chain, schedule)
    info.update(units=mm, forwards=int(forwards))
    return Solution.feasible("gruslys", budget, schedule, makespan, peak, min_budget=smallest,
                    message=f"{variant}: {mm} units of {X} bytes (alpha = {alpha}), "
                            f"{int(forwards)} forwards",
                    info=info)
