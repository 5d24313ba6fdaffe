"""Windows of phases, each solved exactly as a MILP, joined by prices (proofs/phase_lagrange.md,
"Windows").

The phases are cut into windows of ``width`` consecutive phases.  A window is the moment
relaxation (solvers/ilp/relaxation.py, proofs/ilp.md section 9) restricted to its phases and
to the moments they touch: its moment rows, its phase rows, and the bytes of dead values of
other windows dropped from its peak rows.  Two adjacent windows share one moment; each has
its own copy of that moment's h and g variables, and the copies' agreement is relaxed with
prices (+ on the upper window's copy, - on the lower one's).  For any prices, the sum of the
windows' minima (HiGHS's dual bounds) plus the backward times is a lower bound on every
valid schedule's makespan.  Inside a window nothing is relaxed beyond the moment relaxation,
so the windows recover the integrality that the phase blocks' prices
(:mod:`solvers.bounds.phase_lagrange`) lose; those prices are the starting point, and a few
subgradient steps on the shared moments follow.  Chains whose outputs are all saved.
"""
from __future__ import annotations

import math
import re
import time

import numpy as np
import pulp

from remat_theory.model.chain import Chain

from solvers.ilp import backends, relaxation

_MOMENT_ROW = re.compile(r"(tape_at_b|x_at_b|peak_b)_(\d+)$")


class _Model:  # what backends.run_model needs
    def __init__(self, prob):
        self.prob, self.constant = prob, 0.0


def windows_of(L: int, width: int) -> list:
    """Phases L..0 cut into consecutive (lo, hi) ranges of ``width`` phases, top down."""
    out, hi = [], L
    while hi >= 0:
        lo = max(0, hi - width + 1)
        out.append((lo, hi))
        hi = lo - 1
    return out


class Windows:
    def __init__(self, chain: Chain, budget: int, width: int):
        if chain.has_unsaved_outputs:
            raise ValueError("window_lagrange: chains with unsaved outputs are not handled")
        self.chain, self.L = chain, chain.length
        g = chain.size_gcd()
        self.full = relaxation.build_relaxation(chain.scaled_sizes(g), budget // g)
        self.windows = windows_of(self.L, width)
        self.parts = [self._build(lo, hi) for lo, hi in self.windows]

    def _build(self, lo: int, hi: int):
        L, full = self.L, self.full
        moments = set(range(lo, min(hi + 1, L) + 1))
        phases = set(range(lo, hi + 1))

        def inside(name):
            fam, _, b = name.split("_")
            return int(b) in (moments if fam in ("h", "g") else phases)

        prob = pulp.LpProblem(f"window_{lo}_{hi}", pulp.LpMinimize)
        var = {}

        def v(x):
            if x.name not in var:
                var[x.name] = prob.add_variable(x.name, cat=pulp.LpBinary)
            return var[x.name]

        for label, row in full.rows:
            m = _MOMENT_ROW.match(label)
            if m:
                if int(m.group(2)) not in moments:
                    continue
            else:
                r = L if label.startswith("first_") else int(label.rsplit("_", 1)[1])
                if r not in phases:
                    continue
            terms = []
            for x, coef in row.items():
                if inside(x.name):
                    terms.append((v(x), coef))
                elif not (label.startswith("peak_b") and coef > 0
                          and row.sense == pulp.LpConstraintLE):
                    raise AssertionError(f"window row {label} reads {x.name} outside")
                # else: a dead value of another window, dropped from a <= peak row
            prob += pulp.LpConstraint(pulp.LpAffineExpression(terms, constant=row.constant),
                                      sense=row.sense, rhs=0), label
        cost = []
        ft, fa = self.chain.fwd_time, self.chain.fall_time
        for r in phases:
            for i in range(min(r, L - 1) + 1):
                for fam, t in (("c", ft), ("z", fa)):
                    if t[i]:
                        cost.append((v(full.var[f"{fam}_{i}_{r}"]), t[i]))
        return {"lo": lo, "hi": hi, "prob": prob, "var": var, "cost": cost}

    def _items(self, q: int):
        """(variable name, price row, k) of moment q's items: g_k_q (plain x_k), h_{k-1}_q."""
        L = self.L
        out = [(f"g_{k}_{q}", 0, k) for k in range(1, q + 1)]
        out += [(f"h_{k - 1}_{q}", 1, k) for k in range(1, min(q + 1, L) + 1)]
        return out

    def solve(self, mu_p, mu_t, seconds_each: float | None, start: dict | None = None):
        """(sum of the windows' dual bounds, [each window's values of its copies])."""
        L = self.L
        mu = (mu_p, mu_t)
        total, copies = 0.0, []
        scale = max(1.0, self.chain.ideal_makespan())
        for part in self.parts:
            lo, hi, var = part["lo"], part["hi"], part["var"]
            obj = list(part["cost"])
            if lo >= 1:  # the upper window's copy of moment lo
                obj += [(var[nm], float(mu[row][lo, k])) for nm, row, k in self._items(lo)]
            if hi + 1 <= L:  # the lower window's copy of moment hi + 1
                obj += [(var[nm], -float(mu[row][hi + 1, k]))
                        for nm, row, k in self._items(hi + 1)]
            part["prob"].setObjective(pulp.LpAffineExpression(obj))
            st = None if start is None else {k: val for k, val in start.items() if k in var}
            res = backends.run_model(_Model(part["prob"]), "highs", seconds_each, st, 1, scale)
            if res.infeasible:
                return math.inf, None  # no schedule fits (every schedule is a point of it)
            if res.bound is None:
                return -math.inf, None
            total += min(res.bound, res.objective) if res.proven and res.objective is not None \
                else res.bound
            copies.append({nm: round(x.varValue or 0) for nm, x in var.items()
                           if nm[0] in "gh"})
        return total, copies


def window_bound(chain: Chain, budget: int, *, width: int = 5, upper: float,
                 schedule=None, mu=None, time_limit: float | None = None,
                 seconds_each: float = 30.0, iterations: int = 50) -> dict:
    """The windows' bound (backward times included), from prices ``mu`` (``(mu_p, mu_t)`` of
    :func:`solvers.bounds.phase_lagrange.lagrangian_bound`; zero when None), improved by
    subgradient steps aimed at ``upper`` until ``time_limit``."""
    t0 = time.perf_counter()
    L = chain.length
    W = Windows(chain, budget, width)
    bwd = math.fsum(chain.bwd_time)
    mu_p, mu_t = (np.zeros((L + 2, L + 2)), np.zeros((L + 2, L + 2))) if mu is None \
        else (mu[0].copy(), mu[1].copy())
    start = relaxation.relaxation_point(chain, schedule) if schedule is not None else None
    best, theta, it, history = -math.inf, 1.0, 0, []
    for it in range(1, iterations + 1):
        left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
        if left is not None and left <= 0:
            break
        each = seconds_each if left is None else max(0.01, min(seconds_each, left))
        val, copies = W.solve(mu_p, mu_t, each, start)
        if not math.isfinite(val):
            if val == math.inf:
                return {"bound": math.inf, "infeasible": True, "iterations": it,
                        "seconds": time.perf_counter() - t0}
            break
        best = max(best, val)
        history.append(val + bwd)
        if best + bwd >= upper - 1e-9:
            break
        gp, gt = np.zeros_like(mu_p), np.zeros_like(mu_t)
        for part, cp in zip(W.parts, copies):
            lo, hi = part["lo"], part["hi"]
            if lo >= 1:
                for nm, row, k in W._items(lo):
                    (gp, gt)[row][lo, k] += cp.get(nm, 0)
            if hi + 1 <= L:
                for nm, row, k in W._items(hi + 1):
                    (gp, gt)[row][hi + 1, k] -= cp.get(nm, 0)
        norm = float((gp ** 2).sum() + (gt ** 2).sum())
        if norm == 0:
            break
        step = theta * max(upper - bwd - val, 1e-6) / norm
        mu_p += step * gp
        mu_t += step * gt
        theta *= 0.8
    return {"bound": best + bwd, "infeasible": False, "iterations": it,
            "seconds": time.perf_counter() - t0, "windows": len(W.parts), "history": history}
