"""A Lagrangian lower bound over phase blocks (issue 40, tight budgets): proofs/phase_lagrange.md.

Every valid schedule is cut at its moments (just before the loss and before each B_q) into
phases; phase r runs between B_{r+1} and B_r (phase L: from the start to the loss).  Block r
sees the state held at its two moments (two *copies*: the moment r+1 where it starts, the
moment r where it ends) and what phase r must run to go from the one to the other:

* items: a plain x_k (1 <= k <= q) and a tape t_k (1 <= k <= min(q+1, L)) held at moment q;
* the end moment's peak, as the simulator counts it at B_r (or the loss);
* every item held at the end and not at the start was made in the phase, by an op of stage
  k-1 (Fall for a tape, Fn/Fck for a plain value), and an op of stage i runs only where
  x_i is available: held at the phase's start (plain or inside t_i) or made in the phase;
  so the phase runs every stage from the nearest available input up; each op is charged
  once: Fall_i for a tape made, Fn_i/Fck_i for a plain value made, min of the two for a
  stage run only to pass its output on;
* items may be dropped for free (a relaxation: the bound holds for all+drop as well).

The blocks share only the moments' items; relaxing that equality with prices ``mu`` (one
per item and moment) makes them independent, and each block's minimum is an exact dynamic
program over the stages (top down: "must x_k be available", end memory used).  For EVERY
``mu`` the sum of the block minima plus the backward times is a lower bound on every valid
schedule's makespan (weak duality; proofs/phase_lagrange.md); subgradient ascent searches
for good prices.  Only chains whose outputs are all saved (the classic table) are handled.
"""
from __future__ import annotations

import math
import time

import numpy as np

from remat_theory.model.chain import Chain

INF = float("inf")
_KERNEL = None  # None: not tried; False: numba unavailable; else the compiled module


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        try:
            import numba  # noqa: F401  (only whether it imports)
        except ImportError:  # numba missing: the numpy program, the same minima
            _KERNEL = False
        else:
            from solvers.bounds import phase_lagrange_numba
            _KERNEL = phase_lagrange_numba
    return _KERNEL or None


class Blocks:
    """The block programs of ``chain`` (sizes divided by their gcd) at ``budget``."""

    def __init__(self, chain: Chain, budget: int, drops: bool = False, both: bool = False,
                 kernel: str = "auto"):
        self.drops = drops
        self.both = both
        self.kernel = kernel
        if chain.has_unsaved_outputs:
            raise ValueError("phase_lagrange: chains with unsaved outputs are not handled")
        g = chain.size_gcd()
        self.chain = chain
        self.L = L = chain.length
        self.x = [v // g for v in chain.x_size]
        self.T = [v // g for v in chain.tape_held]
        self.bo = [-(-v // g) for v in chain.bwd_overhead]  # rounding up keeps it valid
        self.M = budget // g
        self.f = list(chain.fwd_time)
        self.F = list(chain.fall_time)
        self.m = [min(a, b) for a, b in zip(self.f, self.F)]
        x, bo, M = self.x, self.bo, self.M
        self._x = np.array(self.x, dtype=np.int64)
        self._free = np.full((4, L + 2), -1, dtype=np.int64)
        self._T = np.array(self.T, dtype=np.int64)
        self._f, self._F, self._m = (np.array(v, dtype=np.float64) for v in (self.f, self.F, self.m))
        # cap[r]: bytes the items held at moment r may take (block r's end copy)
        self.cap = [M - (x[0] + (x[r + 1] if r < L else 0) + x[r] + bo[r]) for r in range(L + 1)]

    def feasible(self) -> bool:
        return all(c >= 0 for c in self.cap)

    def solve_block(self, r: int, mu_p: np.ndarray, mu_t: np.ndarray, want_point=False,
                    force=None):
        """Minimum of block r and, with ``want_point``, a minimizer's items (as
        :meth:`_solve_block_numpy`), by the compiled kernel when numba imports.  ``force``:
        an int array [4, L + 2] (rows: start plain, start tapes, end plain, end tapes; -1
        free, 0 or 1 the item's value), None for none."""
        if force is None:
            force = self._free
        kern = _kernel() if self.kernel != "numpy" else None
        if kern is None:
            return self._solve_block_numpy(r, mu_p, mu_t, want_point, force)
        cap = self.cap[r]
        capS = self.cap[r + 1] if (self.both and r < self.L) else 0
        if cap < 0 or capS < 0:
            return INF, None
        point = np.zeros((4, self.L + 2) if want_point else (4, 0), dtype=np.int64)
        best = kern.solve_block(r, self.L, self._x, self._T, self._f, self._F, self._m,
                                np.ascontiguousarray(mu_p, dtype=np.float64),
                                np.ascontiguousarray(mu_t, dtype=np.float64),
                                cap, capS, self.drops, point, force)
        if not want_point or not math.isfinite(best):
            return float(best), None
        return float(best), tuple({int(k) for k in np.flatnonzero(row)} for row in point)

    def _solve_block_numpy(self, r: int, mu_p: np.ndarray, mu_t: np.ndarray, want_point=False,
                           force=None):
        """Minimum of block r at prices ``mu_p[q, k]``, ``mu_t[q, k]`` (moment q's plain x_k
        and tape t_k; row 0 unused: moment 0 has one copy), and, with ``want_point``, the
        items of a minimizer: (start plain, start tapes, end plain, end tapes) as sets.

        DP state between index k and k-1: (pend, fn): stage k-1 runs (so x_{k-1} must be
        available), and (canonical model, ``drops`` off) stage k-1 runs an Fn, whose plain
        output x_k must then be held at the end (made in the phase) or freed by an Fn_k."""
        L, x, T, f, F, m = self.L, self.x, self.T, self.f, self.F, self.m
        drops = self.drops
        cap = self.cap[r]
        initial = r == L
        # the start copy's peak too (``both``): a second memory axis
        capS = self.cap[r + 1] if (self.both and not initial) else 0
        if cap < 0 or capS < 0:
            return INF, None
        top = L if initial else min(r + 2, L)
        V = np.full((4, capS + 1, cap + 1), INF)
        V[2 if initial else 0, 0, 0] = 0.0
        trace = []
        endq, startq = r, r + 1
        for k in range(top, 0, -1):
            ps_ok = (not initial) and k <= r + 1
            ts_ok = (not initial) and k <= min(r + 2, L)
            pe_ok = k <= (L if initial else r)
            te_ok = k <= (L if initial else r + 1)
            nV = np.full((4, capS + 1, cap + 1), INF)
            code = np.full((4, capS + 1, cap + 1), -1, dtype=np.int64)
            if force is None:
                force = self._free
            for ps in ((0, 1) if ps_ok else (0,)):
                if force[0, k] >= 0 and ps != force[0, k]:
                    continue
                for ts in ((0, 1) if ts_ok else (0,)):
                    if force[1, k] >= 0 and ts != force[1, k]:
                        continue
                    wS = ((x[k] if ps else 0) + (T[k - 1] if ts else 0)) if capS else 0
                    if wS > capS:
                        continue
                    if not initial:
                        if k == r + 2 and not ts:
                            continue  # t_{r+2} is read by B_{r+1}
                        if k == r + 1 and not (ps or ts):
                            continue  # x_{r+1} is read by B_{r+1}
                    for pe in ((0, 1) if pe_ok else (0,)):
                        if force[2, k] >= 0 and pe != force[2, k]:
                            continue
                        for te in ((0, 1) if te_ok else (0,)):
                            if force[3, k] >= 0 and te != force[3, k]:
                                continue
                            if not initial and k == r + 1 and not te:
                                continue  # t_{r+1} is read by B_r
                            if k == (L if initial else r) and k >= 1 and not (pe or te):
                                continue  # x_r (x_L for the loss) is read at the end
                            w = (x[k] if pe else 0) + (T[k - 1] if te else 0)
                            if w > cap:
                                continue
                            price = 0.0
                            if endq >= 1:
                                price += (mu_p[endq, k] if pe else 0.0) + (mu_t[endq, k] if te else 0.0)
                            if not initial:
                                price -= (mu_p[startq, k] if ps else 0.0) + (mu_t[startq, k] if ts else 0.0)
                            dropped = (not initial) and k <= r and \
                                ((ps and not pe) or (ts and not te))
                            combo = ((ps * 2 + ts) * 2 + pe) * 2 + te
                            for s_in in range(4):
                                pend, fn = s_in >> 1, s_in & 1
                                if not np.isfinite(V[s_in]).any():
                                    continue
                                if dropped and not drops and not fn:
                                    continue  # only an Fn_k frees a value of stage k
                                if initial:
                                    pc, tc = pe, te
                                    avail = False
                                elif k == r + 2:
                                    pc = tc = 0
                                    avail = True
                                else:
                                    avail = bool(ts) or (bool(ps) and k <= r)
                                    pc = 1 if (pe and not ps) else 0
                                    tc = 1 if (te and not ts) else 0
                                for fn_new in (0, 1):
                                    if fn_new:
                                        if drops or k == r + 2:
                                            continue
                                        # Fn_{k-1} makes a plain x_k: held at the end (made
                                        # here), freed by an Fn_k, or dead (k-1 == r)
                                        if not (pc or fn or k - 1 == r):
                                            continue
                                    if k == r + 2:
                                        run, cost = 0, 0.0
                                    else:
                                        need = bool(pend) and not avail
                                        run = 1 if (pc or tc or fn_new or need) else 0
                                        plain_op = pc or fn_new
                                        cost = (F[k - 1] if tc else 0.0) \
                                            + (f[k - 1] if plain_op else 0.0) \
                                            + (m[k - 1] if (run and not (plain_op or tc)) else 0.0)
                                    s_out = run * 2 + fn_new
                                    src = V[s_in, :capS + 1 - wS, :cap + 1 - w] + (cost + price)
                                    dst = nV[s_out, wS:, w:]
                                    better = src < dst
                                    if better.any():
                                        dst[better] = src[better]
                                        code[s_out, wS:, w:][better] = combo * 4 + s_in
            V = nV
            trace.append(code)
        best = float(V.min())
        if not want_point or not math.isfinite(best):
            return best, None
        s_cur, memS, mem = np.unravel_index(int(V.argmin()), V.shape)
        sp, st, ep, et = set(), set(), set(), set()
        ks = list(range(top, 0, -1))
        for idx in range(len(ks) - 1, -1, -1):
            k = ks[idx]
            c = int(trace[idx][s_cur, memS, mem])
            s_in = c & 3
            combo = c >> 2
            te, pe, ts, ps = combo & 1, (combo >> 1) & 1, (combo >> 2) & 1, (combo >> 3) & 1
            for flag, bag in ((ps, sp), (ts, st), (pe, ep), (te, et)):
                if flag:
                    bag.add(k)
            mem -= (x[k] if pe else 0) + (T[k - 1] if te else 0)
            if capS:
                memS -= (x[k] if ps else 0) + (T[k - 1] if ts else 0)
            s_cur = s_in
        return best, (sp, st, ep, et)

    def value(self, mu_p, mu_t, want_points=False):
        """Sum of the block minima (forward part of the bound) and, with ``want_points``,
        each block's minimizer."""
        tot, pts = 0.0, []
        for r in range(self.L + 1):
            v, p = self.solve_block(r, mu_p, mu_t, want_points)
            tot += v
            pts.append(p)
        return tot, pts


def lagrangian_bound(chain: Chain, budget: int, *, upper: float | None = None,
                     drops: bool = False, both: bool = False, patience: int = 40,
                     iterations: int = 300, time_limit: float | None = None,
                     verbose: bool = False) -> dict:
    """Subgradient ascent on the prices; returns the best bound found (backward times
    included) with its prices.  ``upper``: a makespan in hand (Polyak steps aim at it; the
    ascent stops once the bound reaches it)."""
    t0 = time.perf_counter()
    L = chain.length
    bl = Blocks(chain, budget, drops, both)
    bwd = math.fsum(chain.bwd_time)
    if not bl.feasible():
        return {"bound": INF, "infeasible": True, "iterations": 0, "seconds": 0.0}
    mu_p = np.zeros((L + 2, L + 2))
    mu_t = np.zeros((L + 2, L + 2))
    best, best_mu = -INF, (mu_p.copy(), mu_t.copy())
    target = (upper - bwd) if upper is not None else None
    theta, stall = 1.0, 0
    history = []
    it = 0
    for it in range(1, iterations + 1):
        val, pts = bl.value(mu_p, mu_t, want_points=True)
        if not math.isfinite(val):
            return {"bound": INF, "infeasible": True, "iterations": it,
                    "seconds": time.perf_counter() - t0}
        if val > best + 1e-9:
            best, best_mu, stall = val, (mu_p.copy(), mu_t.copy()), 0
        else:
            stall += 1
            if stall >= patience:
                theta, stall = theta / 2, 0
        history.append(val)
        if verbose and it % 10 == 0:
            print(it, round(val + bwd, 3), round(best + bwd, 3), theta, flush=True)
        if target is not None and best + bwd >= upper - 1e-9:
            break
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
        # subgradient: end copy of moment q (block q) minus start copy (block q-1)
        gp = np.zeros_like(mu_p)
        gt = np.zeros_like(mu_t)
        for q in range(1, L + 1):
            _, _, ep, et = pts[q]
            sp, st, _, _ = pts[q - 1]
            for k in ep:
                gp[q, k] += 1
            for k in et:
                gt[q, k] += 1
            for k in sp:
                gp[q, k] -= 1
            for k in st:
                gt[q, k] -= 1
        norm = float((gp ** 2).sum() + (gt ** 2).sum())
        if norm == 0:
            best = max(best, val)
            break  # the copies agree: the minimizers form one point
        aim = target if target is not None else best + max(1.0, abs(best)) * 0.05
        step = theta * max(aim - val, 1e-6) / norm
        mu_p += step * gp
        mu_t += step * gt
        if theta < 1e-5:
            break
    # a margin for rounding: the bound is made of fewer than 8 (L+2)^2 float additions, each
    # of partial sums no larger than ``mag`` (the times and prices in magnitude), so it is
    # within 8 (L+2)^2 u mag of the exact value (u = 2^-53; proofs/phase_lagrange.md,
    # "Rounding"); twice that is subtracted by the callers that claim it
    mag = math.fsum(map(abs, chain.fwd_time)) + math.fsum(map(abs, chain.fall_time)) \
        + bwd + float(np.abs(best_mu[0]).sum() + np.abs(best_mu[1]).sum())
    margin = 16 * (L + 2) ** 2 * 2.0 ** -53 * max(1.0, mag)
    return {"bound": best + bwd, "margin": margin, "infeasible": False,
            "iterations": it, "seconds": time.perf_counter() - t0, "mu": best_mu,
            "history": history}
