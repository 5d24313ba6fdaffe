"""``dp-offload``: a dynamic program for persistent rematerialization with offloading of
segment inputs, exact in the two-stream model (proofs/offload.md, 11.3; docs/model.md,
"Offloading").

The class (``persistent+offload``, :mod:`remat_theory.model.classes`) extends the
persistent schedules of the Rotor DP (``solvers/dp.py``; Beaumont, Eyraud-Dubois,
Herrmann, Joly, Shilova) with one move, in the spirit of Beaumont, Eyraud-Dubois and
Shilova, "Efficient combination of rematerialization and offloading for training DNNs"
(NeurIPS 2021), whose model is not ours (their DP is not reproduced here): a segment
(s, t) whose input x_s sits in a *container* C (a plain x_s it owns, or the tape t_s its
parent recorded; never x_0) may send C to the host right after its first forward has read
it, and fetch it back right before the next op that reads it:

* option A-off: ``Fall_s Off(C) [child (s+1, t)] Pre(C) B_s``;
* option B-off: ``Fck_s Off(C) Fn_{s+1} .. Fn_{k-1} [child (k, t)] Pre(C) [part (s, k-1)]``.

While C is on the host, the child (and the forward pass after Fck_s) has C's bytes more.
The copy of C starts when the segment starts and overlaps its first forward; the next op
waits for it; the prefetch starts when the child's last op ends, and the op that reads C
waits for it.  A segment may offload its container only when it starts *fresh*: right
after C was made or prefetched (a child of option A or B, or the second part after a
prefetch); then the channel is free exactly at its start and every time below is a
constant of the segment (proofs/offload.md, O.10), so the DP's value is the referee's
makespan.

Tables over memory units m (budget minus everything the segment does not own, as in
``dp``; the container is never the segment's own):

* ``K(s, t, m)``: C stays on the device;
* ``Ot(s, t, m)`` / ``Op(s, t, m)``: C, a tape t_s (``tape_held[s-1]`` bytes) or a plain
  x_s (``x_size[s]``), is offloaded once;
* ``Ft = min(K, Ot)``, ``Fp = min(K, Op)``: what a fresh child may do.

Recurrence (g = x[t+1], or 0 when t = L; c the container's units, tc = its copy time):

* base cases as in ``dp`` (the loss; ``Fall_s B_s``); ``Ot``/``Op`` are infinite there;
* ``K`` option A: ``fall[s] + Ft(s+1, t, m - dA[s]) + bwd[s]``;
* ``K`` option B: ``cf[k] - cf[s] + Fp(k, t, m - x[k]) + K(s, k-1, m)`` (pass under m);
* ``O`` option A-off: ``max(fall[s], tc) + Ft(s+1, t, m + c - dA[s]) + tc + bwd[s]``;
* ``O`` option B-off: ``max(fwd[s], tc) + cf[k] - cf[s+1] + Fp(k, t, m + c - x[k]) + tc
  + F(s, k-1, m)`` (Fck_s under m, Fn_{s+1} .. Fn_{k-1} under m + c; F of C's own form).

Outputs no backward reads (``output_saved``) as in ``dp`` (proofs/persistent_dp.md 2.10):
``dA[s] = th[s] + ux[s+1] - ux[s]``, B_s's need ``bneed[s]``; the container of option A's
child is then the plain unsaved x_{s+1} (``Fp`` instead of ``Ft``), and a segment whose
input is an unsaved plain x_s has no option A-off (``Fall_s`` frees x_s).

The answer is ``K(0, L, budget - x[0])``.  Memory: exact integers (sizes divided by their
gcd) or ``slots`` (sizes rounded up to budget/S, as ``dp`` does; every schedule found fits
the real budget).  Times are the real copy times ``bytes / bandwidth``.  Every table is
computed for all m at once (numpy rows); lookups above the largest segment's store-all
peak read the row's last entry, which is the segment's ideal time there (exact).  O(L^3 M)
time, O(L^2 M) memory; the choices are kept (int16) to rebuild the schedule.  Without
``bandwidth`` (or at 0 with positive sizes) no transfer is possible and the answer is the
persistent optimum of ``dp``.
"""
from __future__ import annotations

import math

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InternalError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, OffT, OffX, PreT, PreX
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import CLASS_NONE, FEASIBLE, OPTIMAL, Solution

from solvers._dp_tables import (NEVER, Deadline, DeadlineExpired, UnitChain, all_sizes,
                                refuse_by_length, refuse_if_too_big, slot_info, time_up)
from solvers._schedules import unfold
from solvers.dp import skewed_saturation
from solvers.registry import Option, register

NAME = "dp-offload"
CLASS = "persistent+offload"
CLASS_NO_REMAT = "store-all+offload"  # recompute=False
INF = math.inf
#: Min-plus steps per second assumed by the up-front refusal (solvers._dp_tables).
ASSUMED_RATE = 5e8
_A, _BASE = -1, 0  # choice codes; k >= 1 is option B's split


def copy_time(chain: Chain, size: int) -> float:
    """Seconds to copy ``size`` bytes one way (the referee's rule: 0 for 0 bytes; never
    without a channel or at bandwidth 0)."""
    if size == 0 and chain.bandwidth is not None:
        return 0.0
    if not chain.bandwidth:
        return INF
    return size / chain.bandwidth


class OffloadTable:
    """The tables of the module docstring for m = 0..W-1 (W - 1 at least every segment's
    store-all peak), and their choices."""

    def __init__(self, uc: UnitChain, chain: Chain, deadline: Deadline = NEVER,
                 recompute: bool = True):
        self.uc, self.chain = uc, chain
        L = self.L = uc.L
        sat = skewed_saturation(uc)
        self.W = W = int(max(1, sat.max() + 1))
        x = [int(v) for v in uc.x]
        th = [int(v) for v in uc.th]
        dA = self.dA = [int(v) for v in uc.dA]  # option A's child runs at m - dA[s]
        un = self.un = [bool(v) for v in uc.un]  # x_i unsaved (a plain value Fall_i frees)
        fp = uc.fp
        step = [int(v) for v in uc.step]
        tx = [copy_time(chain, b) for b in chain.x_size]  # plain x_s
        tt = [INF] + [copy_time(chain, b) for b in chain.tape_held]  # tape t_s
        self.cu = {"p": x, "t": [0] + th}  # the container's units, by form
        self.ct = {"p": tx, "t": tt}
        cf = [float(v) for v in uc.cf]
        fall, bwd, fwd = ([float(v) for v in a] for a in (uc.fall, uc.bwd, uc.fwd))
        K, O = {}, {"p": {}, "t": {}}
        CK, CO = {}, {"p": {}, "t": {}}
        Fr = {"p": {}, "t": {}}

        def at(row, d):  # out[m] = row[min(m + d, W - 1)]; inf where m + d < 0
            out = np.empty(W)
            if d >= 0:
                if d < W:
                    out[:W - d] = row[d:]
                    out[W - d:] = row[-1]
                else:
                    out[:] = row[-1]
            else:
                e = -d
                if e >= W:
                    out[:] = INF
                else:
                    out[:e] = INF
                    out[e:] = row[:W - e]
            return out

        def take(best, choice, cand, code, lo=0):
            if lo > 0:
                cand[:min(lo, W)] = INF
            better = cand < best
            best[better] = cand[better]
            choice[better] = code

        def fresh(form, s, t):
            return K[s, t] if s == 0 or (s, t) not in O[form] else Fr[form][s, t]

        for n in range(L + 1):
            deadline.check(f"building the tables (segments of length {n} of {L})")
            for s in range(L + 1 - n):
                t = s + n
                g = x[t + 1] if t < L else 0
                kb = np.full(W, INF)
                kc = np.zeros(W, dtype=np.int16)
                if n == 0:
                    if t == L:
                        need, time_ = x[L] + int(uc.bo[L]), float(bwd[L])
                    else:
                        need = max(g + int(uc.tape[s] + uc.fao[s]), int(uc.bneed[s]))
                        time_ = fall[s] + bwd[s]
                    if need < W:
                        kb[need:] = time_
                    K[s, t], CK[s, t] = kb, kc
                    continue
                fneed = max(g + int(uc.tape[s] + uc.fao[s]), int(uc.bneed[s]))
                # option A (the child's container: t_{s+1}, or an unsaved plain x_{s+1})
                cf_ = "p" if un[s + 1] else "t"
                take(kb, kc, at(fresh(cf_, s + 1, t), -dA[s]) + (fall[s] + bwd[s]), _A, fneed)
                # option B (none without recomputation: only option A, store-all's shape)
                for k in range(s + 1, t + 1 if recompute else s + 1):
                    cand = at(fresh("p", k, t), -x[k]) + K[s, k - 1] + (cf[k] - cf[s])
                    take(kb, kc, cand, k, g + int(fp[s, k]))
                K[s, t], CK[s, t] = kb, kc
                if s == 0:
                    continue
                for form in ("p", "t"):
                    c, tc = self.cu[form][s], self.ct[form][s]
                    if tc == INF:
                        continue
                    ob = np.full(W, INF)
                    oc = np.zeros(W, dtype=np.int16)
                    if not (form == "p" and un[s]):  # Fall_s frees an unsaved x_s
                        cand = at(fresh(cf_, s + 1, t), c - dA[s]) + (
                            max(fall[s], tc) + tc + bwd[s])
                        take(ob, oc, cand, _A, fneed)
                    run = 0  # largest Fn_j step of the pass so far (j = s+1 .. k-1)
                    for k in range(s + 1, t + 1 if recompute else s + 1):
                        if k > s + 1:
                            run = max(run, step[k - 1])
                        cand = (at(fresh("p", k, t), c - x[k]) + fresh(form, s, k - 1)
                                + (max(fwd[s], tc) + (cf[k] - cf[s + 1]) + tc))
                        lo = max(g + x[s + 1] + int(uc.fo[s]), g + run - c)
                        take(ob, oc, cand, k, lo)
                    O[form][s, t], CO[form][s, t] = ob, oc
                    Fr[form][s, t] = np.minimum(kb, ob)
        self.K, self.O, self.CK, self.CO, self.Fr = K, O, CK, CO, Fr
        self.deadline = deadline

    def value(self, m: int) -> float:
        if m < 0:
            return INF
        return float(self.K[0, self.L][min(m, self.W - 1)])

    def schedule(self, m: int):
        """The optimal schedule of ``K(0, L, m)``, rebuilt from the stored choices."""
        uc, L, W = self.uc, self.L, self.W
        x, dA, un = [int(v) for v in uc.x], self.dA, self.un

        def off(form, s):
            return OffX(s) if form == "p" else OffT(s)

        def pre(form, s):
            return PreX(s) if form == "p" else PreT(s)

        def expand(item):
            _, kind, form, s, t, m = item  # kind: "K", "O" or "F" (fresh: the better)
            m = min(m, W - 1)
            if kind == "F":
                if s == 0 or (s, t) not in self.O[form] or \
                        self.K[s, t][m] <= self.O[form][s, t][m]:
                    kind = "K"
                else:
                    kind = "O"
            if kind == "K":
                c = int(self.CK[s, t][m])
                if s == t:
                    return ([LOSS_OP] if s == L else [Fall(s), Bwd(s)]), ()
                if c == _A:
                    return [Fall(s)], (("seg", "F", "p" if un[s + 1] else "t", s + 1, t,
                                        m - dA[s]), Bwd(s))
                return ([Fck(s)] + [Fn(j) for j in range(s + 1, c)],
                        (("seg", "F", "p", c, t, m - x[c]), ("seg", "K", form, s, c - 1, m)))
            cu = self.cu[form][s]
            c = int(self.CO[form][s, t][m])
            if c == _A:
                return [Fall(s), off(form, s)], (("seg", "F", "p" if un[s + 1] else "t", s + 1,
                                                  t, m + cu - dA[s]), pre(form, s), Bwd(s))
            return ([Fck(s), off(form, s)] + [Fn(j) for j in range(s + 1, c)],
                    (("seg", "F", "p", c, t, m + cu - x[c]), pre(form, s),
                     ("seg", "F", form, s, c - 1, m)))

        return unfold(("seg", "K", "t", 0, L, m), expand,
                      lambda: self.deadline.check("rebuilding the schedule"))


def min_units(uc: UnitChain, chain: Chain, recompute: bool = True) -> int:
    """The smallest budget (units of ``uc``) at which the class has a schedule: the same
    recurrence over least feasible memory instead of time (feasibility is monotone in m)."""
    L = uc.L
    x, th = [int(v) for v in uc.x], [int(v) for v in uc.th]
    dA, un = [int(v) for v in uc.dA], [bool(v) for v in uc.un]
    cu = {"p": x, "t": [0] + th}
    ok = {"p": [copy_time(chain, b) < INF for b in chain.x_size],
          "t": [False] + [copy_time(chain, b) < INF for b in chain.tape_held]}
    fp = uc.fp
    K, O = {}, {}

    def fresh(form, s, t):
        return min(K[s, t], O.get((form, s, t), INF)) if s else K[s, t]

    for n in range(L + 1):
        for s in range(L + 1 - n):
            t = s + n
            g = x[t + 1] if t < L else 0
            fneed = max(g + int(uc.tape[s] + uc.fao[s]), int(uc.bneed[s])) if s < L else 0
            if n == 0:
                K[s, t] = x[L] + int(uc.bo[L]) if t == L else fneed
                continue
            cf_ = "p" if un[s + 1] else "t"
            best = max(fneed, fresh(cf_, s + 1, t) + dA[s])
            for k in range(s + 1, t + 1 if recompute else s + 1):
                best = min(best, max(g + int(fp[s, k]), fresh("p", k, t) + x[k], K[s, k - 1]))
            K[s, t] = best
            if s == 0:
                continue
            for form in ("p", "t"):
                if not ok[form][s]:
                    continue
                c = cu[form][s]
                best = (INF if form == "p" and un[s] else
                        max(fneed, fresh(cf_, s + 1, t) + dA[s] - c))
                run = 0
                for k in range(s + 1, t + 1 if recompute else s + 1):
                    if k > s + 1:
                        run = max(run, int(uc.step[k - 1]))
                    best = min(best, max(g + x[s + 1] + int(uc.fo[s]), g + run - c,
                                         fresh("p", k, t) + x[k] - c, fresh(form, s, k - 1)))
                O[form, s, t] = best
    return int(uc.x[0]) + max(0, K[0, L])


def _refuse_if_too_big(L: int, W: int, slots, time_limit) -> None:
    cells = 3 * (L + 1) * (L + 2) / 2
    steps = 3 * L * (L + 1) * (L + 2) / 6 * W

    def fit(max_bytes, max_steps):
        return int(min(max_bytes / (cells * 10), max_steps / max(1.0, steps / W)))

    refuse_if_too_big(NAME, cells * W * 10, steps, ASSUMED_RATE, time_limit, L, W, slots, fit)


def solve_units(uc: UnitChain, chain: Chain, budget_units: int, deadline: Deadline = NEVER,
                slots: int | None = None, recompute: bool = True):
    """``(makespan, schedule, table)`` at a budget in units of ``uc`` (inf, None, None when
    the class has no schedule there)."""
    x0 = int(uc.x[0])
    if budget_units < x0:
        return INF, None, None
    # the whole chain's saturation (sat[0, L], O(L)) bounds W from below: a refusal on it
    # comes before the O(L^2) saturation table (2 s at 10,000 stages)
    P, fall_term, b_term, loss_term = uc.store_all_terms()
    whole = max(int(loss_term), int(fall_term.max(initial=0)), int(b_term.max(initial=0)))
    _refuse_if_too_big(uc.L, max(1, whole - int(P[0]) + 1), slots, deadline.limit)
    W = int(max(1, skewed_saturation(uc).max() + 1))
    _refuse_if_too_big(uc.L, W, slots, deadline.limit)
    table = OffloadTable(uc, chain, deadline, recompute)
    m = budget_units - x0
    value = table.value(m)
    if value == INF:
        return INF, None, table
    return value, table.schedule(m), table


@register(NAME, optimal_for=CLASS, exact=True,
          description="Persistent dynamic program with offloading of segment inputs (a "
                      "chain with bandwidth; O(L^3 M)): optimal over persistent+offload, "
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
                                        "past it)", none=True)})
def solve_dp_offload(chain: Chain, budget: int, *, slots: int | None = None,
                     recompute: bool = True, time_limit: float | None = None) -> Solution:
    """Optimal schedule of the class ``persistent+offload`` (module docstring): exact in
    memory by default; with ``slots``, sizes rounded up to budget/slots bytes (valid at the
    real budget, optimal for the rounded sizes: status ``feasible`` unless every size is a
    whole number of slots)."""
    deadline = Deadline(time_limit)
    # the saturation table ((L+1)^2 int64) and one memory value per cell at least: refused
    # from the length before any O(L) work or allocation
    L = chain.length
    refuse_by_length(NAME, L, max(3 * (L + 1) * (L + 2) / 2 * 10, (L + 1) ** 2 * 8))
    uc_exact, gcd = UnitChain.exact(chain)
    info = {"bandwidth": chain.bandwidth, "recompute": recompute}
    cls = CLASS if recompute else CLASS_NO_REMAT
    try:
        if slots is None:
            info.update(memory="exact", unit=gcd)
            uc, units, exact = uc_exact, budget // gcd, True
        else:
            info.update(memory="slots", **slot_info(chain, budget, slots))
            uc, units = UnitChain.rounded(chain, budget, slots), slots
            exact = budget == 0 or all(v * slots % budget == 0 for v in all_sizes(chain))
        makespan, schedule, table = solve_units(uc, chain, units, deadline, slots, recompute)
    except DeadlineExpired as e:
        return time_up(NAME, cls, chain, budget, deadline, e.what, info)
    least = min_units(uc_exact, chain, recompute) * gcd
    if schedule is None:
        claim = cls if exact or budget < least else CLASS_NONE
        return Solution.infeasible(NAME, budget, optimal_for=claim, min_budget=least,
                                   info=info,
                                   message=f"no {cls} schedule fits in {budget}; the "
                                           f"smallest feasible budget of the class is {least}")
    sim = simulate(chain, schedule)
    if not math.isclose(sim.makespan, makespan, rel_tol=1e-9, abs_tol=1e-9):
        raise InternalError(f"{NAME}: the table says {makespan} but the referee measures "
                            f"{sim.makespan} for {schedule}")
    info["transfers"] = sum(op.is_transfer for op in schedule)
    if exact:
        return Solution.optimal(NAME, budget, schedule, sim.makespan, sim.peak_memory,
                                bound=sim.makespan, optimal_for=cls, info=info,
                                min_budget=least)
    return Solution(NAME, FEASIBLE, schedule, sim.makespan, sim.peak_memory, budget,
                    optimal_for=CLASS_NONE, info=info,
                    message="slots mode: optimal for the rounded sizes, not proven optimal "
                            "at the real budget")
