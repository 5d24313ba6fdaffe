"""Bound propagation and probing over the moment relaxation's rows, every fixing written as a
certificate step (proofs/certified.md): what HiGHS's presolve does before its root, in a form
the independent checker re-verifies.

Every column is 0/1 and every row has integer coefficients and sides.  In a box (some
columns fixed), a row ``a x <= up`` whose least activity over the box plus ``a_k`` exceeds
``up`` cannot have ``x_k = 1`` (for ``a_k > 0``; symmetrically for the other signs and the
lower side): the box with ``x_k = 1`` violates the row at every point, and the multiplier
``y_r = -t`` on that row alone closes it for ``t`` large enough (Lemma C.1:
``LB = t * violation + ...``, the violation an integer at least 1).  The objective is a row
too: a column whose cost, added to the least cost of the box, passes the cutoff is fixed to
0, the box with it at 1 closed by ``y = 0`` (``LB`` is then the box's least cost).  So each
fixing is a step ``{"fix": {col: v}, "y": y}`` of the certificate's tree, and a chain of
them is what propagation derives.

*Probing* sets a free column to one value and propagates: when that ends in a violated row,
the column takes the other value, and the box it left is closed by the steps of that
propagation and a leaf on the violated row, a subtree: the step
``{"fix": {col: 1 - v}, "tree": T}``.  On the smallest budgets of the homogeneous families
this is what closes the relaxation at its root (llama-2-70b's smallest budget: 12,807 of
16,439 columns fixed, 73 of them by probing, and the LP of what is left reaches the
makespan; docs/ilp.md "Round seven"), where the LP and Gomory cuts alone stay far below.

Every step is checked here (:func:`_bound`, a bound below the checker's exact one) before
it is kept; a step that does not close its box stops the propagation where it is (every
step before it stands).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

_TOL = 1e-6  # rows are integer: a violation is at least 1, a fit leaves a slack >= 0


class _Box:
    """Activities of every row over the box ``[lb, ub]``, kept as columns are fixed, with a
    trail to undo (probing)."""

    def __init__(self, rows, cost_cap: float, lb, ub):
        self.rows = rows
        n, m = len(rows.names), len(rows.labels)
        self.n, self.m = n, m
        cost = np.asarray(rows.cost, dtype=float)
        cidx = np.flatnonzero(cost)
        # the objective as row m: cost x <= cost_cap (cost_cap = cutoff - constant, margins in)
        rid = np.concatenate([np.repeat(np.arange(m), np.diff(rows.starts)),
                              np.full(len(cidx), m)])
        col = np.concatenate([rows.index, cidx]).astype(np.int64)
        val = np.concatenate([rows.value, cost[cidx]])
        self.lo = np.append(rows.lo, -np.inf)
        self.up = np.append(rows.up, cost_cap)
        # per row, entries by decreasing |a| (a row is scanned only down to its slack)
        order = np.lexsort((-np.abs(val), rid))
        rid, col, val = rid[order], col[order], val[order]
        starts = np.searchsorted(rid, np.arange(m + 2))
        self.row_cols = [col[starts[r]:starts[r + 1]].tolist() for r in range(m + 1)]
        self.row_vals = [val[starts[r]:starts[r + 1]].tolist() for r in range(m + 1)]
        by_col = np.argsort(col, kind="stable")
        cstarts = np.searchsorted(col[by_col], np.arange(n + 1))
        self.col_rows = [rid[by_col[cstarts[j]:cstarts[j + 1]]].tolist() for j in range(n)]
        self.col_vals = [val[by_col[cstarts[j]:cstarts[j + 1]]].tolist() for j in range(n)]
        self.lb = [int(v) for v in lb]
        self.ub = [int(v) for v in ub]
        lo_c = np.where(val > 0, val * np.asarray(lb)[col], val * np.asarray(ub)[col])
        hi_c = np.where(val > 0, val * np.asarray(ub)[col], val * np.asarray(lb)[col])
        self.minact = np.bincount(rid, lo_c, m + 1).tolist()
        self.maxact = np.bincount(rid, hi_c, m + 1).tolist()
        self.lo_l, self.up_l = self.lo.tolist(), self.up.tolist()
        self.trail = []  # (col, value, reason): reason (row, side) or None (a decision); the
        # row None is the objective (index m here)

    def fix(self, j: int, v: int, reason, queue: list) -> None:
        self.lb[j] = self.ub[j] = v
        self.trail.append((j, v, reason))
        minact, maxact = self.minact, self.maxact
        for r, a in zip(self.col_rows[j], self.col_vals[j]):
            if a > 0:
                minact[r] += a * v
                maxact[r] -= a * (1 - v)
            else:
                minact[r] -= a * (1 - v)
                maxact[r] += a * v
            queue.append(r)

    def undo(self, depth: int) -> None:
        minact, maxact = self.minact, self.maxact
        while len(self.trail) > depth:
            j, v, _ = self.trail.pop()
            for r, a in zip(self.col_rows[j], self.col_vals[j]):
                if a > 0:
                    minact[r] -= a * v
                    maxact[r] += a * (1 - v)
                else:
                    minact[r] += a * (1 - v)
                    maxact[r] -= a * v
            self.lb[j], self.ub[j] = 0, 1

    def propagate(self, queue: list):
        """Propagate to a fixpoint from the rows in ``queue``: None, or the violated
        ``(row, side)`` (row None: the objective)."""
        lb, ub, lo, up = self.lb, self.ub, self.lo_l, self.up_l
        minact, maxact = self.minact, self.maxact
        seen = set()
        while queue:
            r = queue.pop()
            if r in seen:
                continue
            seen.add(r)
            row = None if r == self.m else r  # row m is the objective
            if minact[r] > up[r] + _TOL:
                return (row, "up")
            if maxact[r] < lo[r] - _TOL:
                return (row, "lo")
            s_up, s_lo = up[r] - minact[r], maxact[r] - lo[r]
            least = min(s_up, s_lo) + _TOL
            more = []
            for k, a in zip(self.row_cols[r], self.row_vals[r]):
                if abs(a) <= least:
                    break
                if lb[k] == ub[k]:
                    continue
                if abs(a) > s_up + _TOL:
                    more.append((k, 0 if a > 0 else 1, (row, "up")))
                elif abs(a) > s_lo + _TOL:
                    more.append((k, 1 if a > 0 else 0, (row, "lo")))
            for k, v, why in more:
                if lb[k] == ub[k]:
                    if lb[k] != v:
                        return why
                    continue
                self.fix(k, v, why, queue)
                seen.discard(r)  # its own activity moved: look at it again
                queue.append(r)
                for rr in self.col_rows[k]:
                    seen.discard(rr)
        return None


def _bound(rows, r, yr: float, lb, ub) -> float:
    """``LB(y)`` (Lemma C.1) for ``y`` zero but on row ``r`` (``r = None``: ``y = 0``), less a
    bound on its floating-point error (so it is below the checker's exact value): only the
    row's columns have a reduced cost other than their cost."""
    cost = rows.cost
    base = np.minimum(cost * lb, cost * ub)
    terms = [rows.constant, math.fsum(base)]
    mags = abs(rows.constant) + float(np.abs(base).sum())
    if r is not None:
        cols = rows.index[rows.starts[r]:rows.starts[r + 1]]
        a = rows.value[rows.starts[r]:rows.starts[r + 1]]
        side = rows.up[r] if yr < 0 else rows.lo[r]
        d = cost[cols] - yr * a
        new = np.minimum(d * lb[cols], d * ub[cols])
        terms += [yr * side, -math.fsum(base[cols]), math.fsum(new)]
        mags += abs(yr * side) + float(np.abs(new).sum()) + float(np.abs(yr * a).sum())
    eps = float(np.finfo(float).eps)
    return math.fsum(terms) - 8.0 * (len(cost) + 8) * eps * (mags + 1.0)


def _multipliers(rows, box_lb, box_ub, reason, target: float, margin: float):
    """The ``y`` (dict by row label) closing the box ``[box_lb, box_ub]``, in which
    ``reason`` = ``(row, side)`` is violated (row None is the objective: ``y = {}``), or
    None when no scaling of that row closes it in floating point."""
    r, side = reason
    if r is None:
        return {} if _bound(rows, None, 0.0, box_lb, box_ub) > target + margin else None
    sign = -1.0 if side == "up" else 1.0
    a = rows.value[rows.starts[r]:rows.starts[r + 1]]
    cols = rows.index[rows.starts[r]:rows.starts[r + 1]]
    scale = abs(target) + abs(rows.constant) + float(np.abs(rows.cost).sum()) + 1.0
    t = max(scale, float(np.max(rows.cost[cols] / np.abs(a), initial=0.0)) + 1.0)
    for _ in range(8):
        if _bound(rows, r, sign * t, box_lb, box_ub) > target + margin:
            return {rows.labels[r]: float(sign * t)}
        t *= 16
    return None


@dataclass
class Presolved:
    """What :func:`presolve` found: ``steps`` (certificate steps from the starting box,
    in order), the box they leave (``lb``, ``ub``), ``leaf`` (a leaf closing that box when
    propagation found it empty, else None) and ``stats``."""

    steps: list
    lb: np.ndarray
    ub: np.ndarray
    leaf: dict | None
    stats: dict


def _replay(rows, trail, lb, ub, target, margin):
    """The trail as steps from the box ``[lb, ub]`` (arrays, left at the end box), each
    checked; stops at the first that does not close (returns the steps so far and False)."""
    steps = []
    for j, v, reason in trail:
        lb[j] = ub[j] = 1 - v
        y = _multipliers(rows, lb, ub, reason, target, margin)
        if y is None:
            lb[j], ub[j] = 0.0, 1.0
            return steps, False
        lb[j] = ub[j] = v
        steps.append({"fix": {rows.names[j]: v}, "y": y})
    return steps, True


def presolve(rows, target: float, margin: float, lb, ub, *,
             time_limit: float | None = None) -> Presolved:
    """Propagate and probe over ``rows`` (a :class:`solvers.bounds.lp_tree.LpRows`) from the
    box ``[lb, ub]`` against the cutoff ``target`` (a box closes when its bound exceeds
    ``target + margin``): see the module docstring."""
    t0 = time.perf_counter()
    lb = np.array(lb, dtype=float)
    ub = np.array(ub, dtype=float)
    box = _Box(rows, target + margin - rows.constant, lb, ub)
    stats = {"propagated": 0, "probed": 0, "probes": 0}
    steps = []
    start_lb, start_ub = lb.copy(), ub.copy()

    def flush():
        """Write the trail so far as checked steps; False when one did not close."""
        nonlocal steps
        done, ok = _replay(rows, box.trail, start_lb, start_ub, target, margin)
        steps += done
        stats["propagated"] += len(done)
        box.trail.clear()
        return ok

    def leaf_for(reason, lb_, ub_):
        y = _multipliers(rows, lb_, ub_, reason, target, margin)
        return None if y is None else {"y": y}

    conflict = box.propagate(list(range(box.m + 1)))
    if conflict is not None:
        if not flush():
            return Presolved(steps, start_lb, start_ub, None, stats)
        leaf = leaf_for(conflict, start_lb, start_ub)
        return Presolved(steps, start_lb, start_ub, leaf, stats)
    if not flush():
        return Presolved(steps, start_lb, start_ub, None, stats)
    changed = True
    while changed:
        changed = False
        for j in range(box.n):
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                stats["stopped"] = "time_limit"
                changed = False
                break
            if box.lb[j] == box.ub[j]:
                continue
            for v in (1, 0):
                stats["probes"] += 1
                depth = len(box.trail)
                queue = []
                box.fix(j, v, None, queue)
                conflict = box.propagate(queue)
                if conflict is None:
                    box.undo(depth)
                    continue
                # the box with x_j = v is empty: its steps and leaf, then x_j = 1 - v
                sub = box.trail[depth + 1:]
                box.undo(depth)
                plb, pub = start_lb.copy(), start_ub.copy()
                plb[j] = pub[j] = v
                sub_steps, ok = _replay(rows, sub, plb, pub, target, margin)
                leaf = leaf_for(conflict, plb, pub) if ok else None
                if leaf is None:
                    continue  # not closed in floating point: leave the column free
                tree = {"steps": sub_steps, "child": leaf} if sub_steps else leaf
                steps.append({"fix": {rows.names[j]: 1 - v}, "tree": tree})
                start_lb[j] = start_ub[j] = 1 - v
                stats["probed"] += 1
                changed = True
                queue = []
                box.fix(j, 1 - v, None, queue)
                box.trail.clear()  # written above, as the probe's step
                conflict = box.propagate(queue)
                ok = flush()
                if conflict is not None and ok:
                    leaf = leaf_for(conflict, start_lb, start_ub)
                    stats["seconds"] = round(time.perf_counter() - t0, 3)
                    return Presolved(steps, start_lb, start_ub, leaf, stats)
                if not ok or conflict is not None:
                    stats["seconds"] = round(time.perf_counter() - t0, 3)
                    return Presolved(steps, start_lb, start_ub, None, stats)
                break
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    stats["fixed"] = int(np.sum(start_lb == start_ub))
    return Presolved(steps, start_lb, start_ub, None, stats)
