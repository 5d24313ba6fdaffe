"""A branch and bound over the moment relaxation's LP that leaves a certificate behind.

The moment relaxation (:mod:`solvers.ilp.relaxation`, proofs/ilp.md section 9) is a MILP
whose optimum is a lower bound on every valid schedule's makespan.  HiGHS proves that bound
by its own branch and bound, which leaves nothing a third party can check.  This module
runs a plain one over the same rows, in HiGHS's LP solver, and records, at every leaf, the
row multipliers ``y`` that close it: for ``min c x`` subject to ``lo <= A x <= up`` and the
leaf's variable bounds, every ``y`` (nonnegative on a row whose lower side it uses,
nonpositive on an upper side) gives the Lagrangian bound

    LB(y) = sum_r (y_r lo_r if y_r > 0 else y_r up_r) + sum_j min over x_j of (c - A^T y)_j x_j,

valid whatever ``y`` is (weak duality), so the checker (proofs/check_certificate.py) needs
neither the LP solver nor trust in it: it rebuilds the rows from the chain on its own,
evaluates ``LB`` in exact rational arithmetic, checks the tree covers every 0/1 point and
that every leaf's bound exceeds ``cutoff - granularity`` (no schedule is faster than the one
in hand).  An infeasible leaf carries a scaled Farkas ray, which is such a ``y`` too.

A leaf is closed when ``LB`` exceeds ``cutoff - delta``: ``delta`` is the gcd of the times
when every time is an integer (a makespan faster than ``cutoff`` is then at most
``cutoff - delta``), otherwise a tolerance-free ``0`` (``LB`` must reach ``cutoff``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import highspy
import numpy as np
import pulp

from remat_theory.model.chain import Chain

from solvers.bounds import cg_cuts, propagate
from solvers.ilp import relaxation
from solvers.ilp.relaxation import granularity


@dataclass
class LpRows:
    """The moment relaxation at one budget as arrays: columns (names, costs), rows (labels,
    lower and upper sides, CSR coefficients), and the objective's constant."""

    names: list
    cost: np.ndarray
    labels: list
    lo: np.ndarray
    up: np.ndarray
    starts: np.ndarray
    index: np.ndarray
    value: np.ndarray
    constant: float
    #: per row, the factor its row in HiGHS is divided by (cut rows are normalised there):
    #: HiGHS's dual y_h is y_h / hscale on these rows (None: all 1)
    hscale: np.ndarray | None = None
    #: the rows HiGHS holds, in its order (None: all): the others are cuts it dropped
    active: np.ndarray | None = None

    def scales(self) -> np.ndarray:
        return np.ones(len(self.labels)) if self.hscale is None else self.hscale

    def from_highs(self, y_h) -> np.ndarray:
        """HiGHS's row duals (or dual ray) as multipliers of these rows."""
        y_h = np.asarray(y_h, dtype=float)
        if self.active is None:
            return y_h / self.scales()
        y = np.zeros(len(self.labels))
        y[self.active] = y_h / self.scales()[self.active]
        return y

    def column(self, name: str) -> int:
        return self._col[name]

    def __post_init__(self):
        self._col = {n: k for k, n in enumerate(self.names)}


def lp_rows(chain: Chain, budget: int) -> LpRows:
    """The rows of :func:`solvers.ilp.relaxation.build_relaxation` at ``budget`` (sizes
    divided by their gcd, the budget floored to it: the relaxation's own scaling)."""
    g = chain.size_gcd()
    model = relaxation.build_relaxation(chain.scaled_sizes(g), budget // g)
    names = [v.name for v in model.prob.variables()]
    col = {n: k for k, n in enumerate(names)}
    cost = np.zeros(len(names))
    for v, coef in model.prob.objective.items():
        cost[col[v.name]] += coef
    labels, lo, up, starts, index, value = [], [], [], [0], [], []
    for label, row in model.rows:
        k = -row.constant
        if row.sense == pulp.LpConstraintLE:
            lo.append(-np.inf), up.append(k)
        elif row.sense == pulp.LpConstraintGE:
            lo.append(k), up.append(np.inf)
        else:
            lo.append(k), up.append(k)
        labels.append(label)
        for v, coef in row.items():
            if coef:
                index.append(col[v.name])
                value.append(float(coef))
        starts.append(len(index))
    return LpRows(names, cost, labels, np.array(lo), np.array(up), np.array(starts),
                  np.array(index, dtype=np.int32), np.array(value), model.constant)


def clip(rows: LpRows, y: np.ndarray) -> np.ndarray:
    """``y`` with every multiplier of a sign its row cannot take set to 0 (still a valid
    ``y``: the bound is defined for every such vector), and every multiplier of magnitude
    1e-12 or less too (the certificate does not write those: the bound evaluated here is
    the bound of the multipliers written)."""
    y = np.where(np.abs(y) > 1e-12, y, 0.0)
    return np.where(y > 0, np.where(np.isfinite(rows.lo), y, 0.0),
                    np.where(np.isfinite(rows.up), y, 0.0))


def lagrangian(rows: LpRows, y: np.ndarray, lb: np.ndarray, ub: np.ndarray,
               with_cost: bool = True) -> float:
    """``LB(y)`` of the module docstring in floating point (the checker redoes it exactly);
    ``with_cost`` False: the bound of a Farkas ray (zero costs, no constant)."""
    return lagrangian_terms(rows, y, lb, ub, with_cost)[0]


def lagrangian_terms(rows: LpRows, y: np.ndarray, lb: np.ndarray, ub: np.ndarray,
                     with_cost: bool = True) -> tuple:
    """``(LB(y), d)``: the bound and the reduced costs ``d = c - A^T y`` (``y`` clipped to
    the signs its rows allow: :func:`clip`)."""
    y = clip(rows, y)
    side = np.where(y > 0, np.where(np.isfinite(rows.lo), rows.lo, 0.0),
                    np.where(np.isfinite(rows.up), rows.up, 0.0))
    counts = np.diff(rows.starts)
    terms = np.repeat(y, counts) * rows.value
    n = len(rows.names)
    aty = np.bincount(rows.index, terms, n)
    cost = rows.cost if with_cost else np.zeros(n)
    d = cost - aty
    ys = y * side
    total = math.fsum(ys) + math.fsum(np.minimum(d * lb, d * ub))
    constant = rows.constant if with_cost else 0.0
    total += constant
    # a bound on the floating-point error of all that, so that the value returned is below
    # the exact LB(y) the checker computes (its rows are exact integers in floats): each
    # product y_r side_r is rounded once and summed exactly (fsum); each d_j is a sum of
    # count_j rounded products, rounded again when subtracted from c_j (recursive summation:
    # at most (count_j + 2) eps times the sum of the magnitudes); d_j times a bound of 0 or
    # 1 is exact and those are summed exactly; adding the constant rounds once more
    eps = float(np.finfo(float).eps)
    per_col = np.bincount(rows.index, minlength=n)[:n] + 2.0
    mags = np.bincount(rows.index, np.abs(terms), n) + np.abs(cost)
    err = eps * (math.fsum(np.abs(ys)) + math.fsum(per_col * mags)
                 + 2.0 * (abs(total) + abs(constant)))
    return total - err, d


#: rounds of root cuts after a reduced-cost fixing (and propagation) that fixed something
ROOT_RESTARTS = 3


@dataclass
class TreeResult:
    proven: bool  # every leaf closed: no schedule faster than the cutoff
    tree: dict | None  # the certificate's tree (module docstring), when proven
    bound: float | None  # the cutoff if proven; None when stopped
    nodes: int
    seconds: float
    stopped: str | None = None  # "time_limit", "node_limit", "integral" (a point below)
    stats: dict = field(default_factory=dict)
    cuts: list = field(default_factory=list)  # the cuts' derivations (cg_cuts), cut_k in y


def highs_lp(rows: LpRows) -> "highspy.Highs":
    """The LP of ``rows`` (every column in [0, 1]) in a silent, single-threaded HiGHS
    without presolve, not yet solved."""
    n, m = len(rows.names), len(rows.labels)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("presolve", "off")
    h.setOptionValue("threads", 1)
    h.addVars(n, np.zeros(n), np.ones(n))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), rows.cost)
    h.addRows(m, rows.lo, rows.up, len(rows.index), rows.starts[:-1].astype(np.int32),
              rows.index, rows.value)
    return h


def sparse(rows: LpRows, y: np.ndarray) -> dict:
    """``y`` as a certificate writes it: by row label, clipped to the signs the rows allow
    (:func:`clip`), zeros left out."""
    y = clip(rows, y)
    return {rows.labels[k]: float(y[k]) for k in np.flatnonzero(np.abs(y) > 1e-12)}


def reduced_cost_fixes(d: np.ndarray, lb: np.ndarray, ub: np.ndarray, slack: float,
                       margin: float) -> dict:
    """``{column: value}``: the free columns whose reduced cost ``d`` alone, at their other
    value, lifts the box's bound by more than ``slack`` (what it lacks to close) — each
    takes the value it has at the LP's bound (reduced-cost fixing)."""
    free = lb < ub
    fixes = {int(j): 0 for j in np.flatnonzero(free & (d > slack + margin))}
    fixes.update({int(j): 1 for j in np.flatnonzero(free & (-d > slack + margin))})
    return fixes


def with_steps(steps: list, child: dict) -> dict:
    """``child`` behind the fixing ``steps``, as one flat ``steps`` node when ``child``
    starts with fixings too (never two fixing nodes in a row)."""
    if not steps:
        return child
    if "fix" in child:
        first = [{k: child[k] for k in ("fix", "y", "tree") if k in child}]
        return {"steps": steps + first, "child": child["child"]}
    if "steps" in child:
        return {"steps": steps + child["steps"], "child": child["child"]}
    return {"steps": steps, "child": child}


def root_reduce(rows: LpRows, h, target: float, margin: float, lb=None, ub=None, *,
                time_limit: float | None = None, rounds: int = 20) -> "propagate.Presolved":
    """Propagation and probing, then the LP of the box they leave and reduced-cost fixing
    (a column whose reduced cost alone lifts the bound past the cutoff takes its other
    value, the step's multipliers the LP's duals), then propagation and probing again in
    the smaller box, round after round until nothing is fixed (HiGHS's root does the same:
    fixing by reduced cost, then presolving again; on llama-2-7b's 25% budget that is 38% of
    its columns, once HiGHS's first cuts have raised its bound).  A box the LP closes first
    needs no steps (the smallest certificate: its leaf).  From the box
    ``[lb, ub]`` (default: every column free); ``h``: the LP of ``rows``
    (:func:`solvers.bounds.lp_tree.highs_lp`), left with the returned box's bounds."""
    t0 = time.perf_counter()
    n = len(rows.names)
    lb = np.zeros(n) if lb is None else np.array(lb, dtype=float)
    ub = np.ones(n) if ub is None else np.array(ub, dtype=float)
    steps, stats = [], {"rounds": 0, "reduced_cost_fixed": 0, "propagated": 0, "probed": 0}
    leaf = None
    h.changeColsBounds(n, np.arange(n, dtype=np.int32), lb, ub)
    h.run()  # a box its LP closes needs no steps (the smallest certificate)
    if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
        y = rows.from_highs(h.getSolution().row_dual)
        if lagrangian(rows, y, lb, ub) > target + margin:
            return propagate.Presolved([], lb, ub, {"y": sparse(rows, y)}, stats)
    for _ in range(rounds):
        left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
        pre = propagate.presolve(rows, target, margin, lb, ub, time_limit=left)
        stats["rounds"] += 1
        stats["propagated"] += pre.stats["propagated"]
        stats["probed"] += pre.stats["probed"]
        steps += pre.steps
        lb, ub = pre.lb, pre.ub
        if pre.leaf is not None:
            leaf = pre.leaf
            break
        if left is not None and time.perf_counter() - t0 >= time_limit:
            break
        h.changeColsBounds(n, np.arange(n, dtype=np.int32), lb, ub)
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            break  # the tree's root handles it (an infeasible LP: its Farkas ray)
        y = rows.from_highs(h.getSolution().row_dual)
        val, d = lagrangian_terms(rows, y, lb, ub, True)
        if val > target + margin:
            leaf = {"y": sparse(rows, y)}
            break
        fixes = reduced_cost_fixes(d, lb, ub, target + margin - val, margin)
        if not fixes:
            break
        steps.append({"fix": {rows.names[j]: v for j, v in fixes.items()},
                      "y": sparse(rows, y)})
        stats["reduced_cost_fixed"] += len(fixes)
        lb, ub = lb.copy(), ub.copy()
        for j, v in fixes.items():
            lb[j] = ub[j] = v
    h.changeColsBounds(n, np.arange(n, dtype=np.int32), lb, ub)
    stats["fixed"] = int(np.sum(lb == ub))
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return propagate.Presolved(steps, lb, ub, leaf, stats)


def prove_cutoff(chain: Chain, budget: int, cutoff: float, *, time_limit: float | None = None,
                 max_nodes: int = 200_000, branching: str = "state",
                 strong: int = 8, cuts: int = 0, cut_seconds: float | None = None,
                 node_cuts: int = 0, node_cut_depth: int = 0,
                 suggest: int = 0, probe_seconds: float | None = 0.0) -> TreeResult:
    """Branch and bound over the moment relaxation's LP: is every 0/1 point of it worth more
    than ``cutoff - granularity`` (module docstring)?  Depth first, branching on the most
    fractional variable (``branching="state"``: of the moment-state variables h and g first,
    which decide what every phase must recompute), a leaf closed by its LP's multipliers
    (or its Farkas ray).  Strong branching doubles as probing: a child its LP closes fixes
    the column the other way (a fix node with that child's multipliers), both children
    closed close the box.  The tree is returned when every leaf closed.  ``cuts``: rounds
    of Gomory mixed-integer cuts added at the root first (:mod:`solvers.bounds.cg_cuts`, at most ``cut_seconds``), whose rows
    the multipliers may then use (``TreeResult.cuts``: their derivations); ``node_cuts``
    rounds more at every node not closed down to depth ``node_cut_depth`` (cuts valid
    everywhere, derived from the node's LP).  ``suggest``: rounds of Chvátal-Gomory cuts in
    the directions of HiGHS's root cuts first (:func:`solvers.bounds.cg_cuts.suggested_rounds`:
    each re-derived from multipliers an LP finds, nothing of HiGHS's trusted), within the
    same ``cut_seconds``.  ``probe_seconds`` (0: off; None: no limit): when the root cuts
    leave the root open (or none are asked for), bound propagation, probing and
    reduced-cost fixing there (:func:`root_reduce`, :mod:`solvers.bounds.propagate`), every
    fixing a step of the tree, then cuts again and the tree in the box they leave."""
    t0 = time.perf_counter()
    rows = lp_rows(chain, budget)
    delta = granularity(chain)
    target = cutoff - delta  # a leaf closes when its LB exceeds this (strictly)
    # floating-point slack (the checker is exact): far below the granularity
    margin = 1e-9 * max(1.0, abs(cutoff))
    if delta > 0:
        margin = min(margin, delta / 16)
    n, m = len(rows.names), len(rows.labels)
    h = highs_lp(rows)
    nodes = 0
    stats = {"leaves_lp": 0, "leaves_ray": 0, "columns": n, "rows": m}
    derivations = []
    probing = probe_seconds is None or probe_seconds > 0
    root_steps, lb, ub = [], np.zeros(n), np.ones(n)

    def reduce(phase):
        """Propagation, probing and reduced-cost fixing at the root, from the box so far
        (:func:`root_reduce`): the leaf closing it, or None."""
        nonlocal lb, ub
        spent = time.perf_counter() - t0
        seconds = None if probe_seconds is None else max(0.0, probe_seconds - spent)
        pre = root_reduce(rows, h, target, margin, lb, ub, time_limit=seconds)
        stats.setdefault("presolve", {})[phase] = pre.stats
        root_steps.extend(pre.steps)
        lb, ub = pre.lb.copy(), pre.ub.copy()
        return pre.leaf

    def closed_at_root(leaf):
        stats["cuts"] = len(derivations)
        return TreeResult(True, with_steps(root_steps, leaf), cutoff, 1,
                          time.perf_counter() - t0, None, stats, derivations)

    if probing and not (cuts or suggest):
        leaf = reduce("root")
        if leaf is not None:
            return closed_at_root(leaf)
    if cuts or suggest:
        # the suggested cuts first, then the tableau's from the point they leave (the other
        # way round, the tableau's dense cuts change what HiGHS suggests, and on the network
        # chains the root no longer closes: docs/ilp.md, "Certificates, round two"); then,
        # when probing and the root is still open, propagation, probing and fixing by
        # reduced cost in the box the cuts leave, and cuts again there, while that fixes
        # something (HiGHS's root restarts the same way); cuts first, so that a root they
        # close needs no fixing steps (a certificate of one box, checked in a second)
        history, suggested = [], []
        for again in range(1 + (ROOT_RESTARTS if probing else 0)):
            h.run()
            before = len(derivations)
            phases = ["suggest"] * bool(suggest and not again) + ["gmi"] * bool(cuts)
            for phase in phases:
                if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                    break
                if h.getInfo().objective_function_value + rows.constant > target + margin:
                    break
                spent = time.perf_counter() - t0
                seconds = None if cut_seconds is None else max(0.0, cut_seconds - spent)
                if phase == "gmi":
                    rows, more, hist = cg_cuts.cut_rounds(h, rows, rounds=cuts,
                                                          time_limit=seconds,
                                                          target=target + margin)
                else:
                    rows, more, hist = cg_cuts.suggested_rounds(h, rows, rounds=suggest,
                                                                time_limit=seconds,
                                                                target=target + margin)
                    suggested.extend(more)
                derivations.extend(more)
                history.append([phase] + hist)
            m = len(rows.labels)
            if not probing or (again and len(derivations) == before):
                break
            if h.getModelStatus() == highspy.HighsModelStatus.kOptimal and \
                    h.getInfo().objective_function_value + rows.constant > target + margin:
                break  # the cuts close the root: no fixings needed (the smallest certificate)
            fixed = int(np.sum(lb == ub))
            leaf = reduce(f"after cuts {again + 1}")
            if leaf is not None:
                return closed_at_root(leaf)
            if int(np.sum(lb == ub)) == fixed:
                break
        stats.update(cuts=len(derivations), suggested_cuts=len(suggested), cut_bounds=history,
                     cut_seconds=round(time.perf_counter() - t0, 3))
    state = np.array([nm[0] in "hg" for nm in rows.names])

    def close(y_like, with_cost):
        return lagrangian(rows, y_like, lb, ub, with_cost)

    def left():
        """Seconds left of the time limit (None: no limit)."""
        return None if time_limit is None else time_limit - (time.perf_counter() - t0)

    def ray_leaf():
        """A leaf closed by the Farkas ray of an infeasible node LP (scaled past the
        target), or None."""
        _, has, ray = h.getDualRay()
        if not has:
            return None
        for sign in (1.0, -1.0):
            yr = sign * rows.from_highs(ray)
            gain = close(yr, False)
            if gain > 1e-9:
                base = close(np.zeros(m), True)
                t = (target - base + 1.0 + margin) / gain
                y = yr * max(t, 1.0)
                if close(y, True) > target + margin:
                    stats["leaves_ray"] += 1
                    return {"y": sparse(rows, y)}
        return None

    def run_lp():
        """Solve the node's LP (warm, then once more from scratch if that ends badly):
        None when optimal, a leaf when infeasible with a usable ray."""
        for attempt in range(2):
            if attempt:
                stats["lp_restarts"] = stats.get("lp_restarts", 0) + 1
                h.clearSolver()
            h.run()
            st = h.getModelStatus()
            if st == highspy.HighsModelStatus.kInfeasible:
                leaf = ray_leaf()
                if leaf is not None:
                    return leaf
            elif st == highspy.HighsModelStatus.kOptimal:
                return None
        raise _Stop("lp_failed")  # no optimum, nor an infeasibility proof it can use

    def solve_node(depth):
        """``(leaf, column to branch on, LP value, fixings, y)``: a leaf dict when the node
        closes; else the most fractional column and the columns whose reduced cost alone
        closes their other value (fixed at ``y``'s side: reduced-cost fixing)."""
        nonlocal rows, m
        h.changeColsBounds(n, np.arange(n, dtype=np.int32), lb, ub)
        for cutting in (True, False):
            leaf = run_lp()
            if leaf is not None:
                return leaf, None, math.inf, {}, None
            sol = h.getSolution()
            y = rows.from_highs(sol.row_dual)
            val, d = lagrangian_terms(rows, y, lb, ub, True)
            if val > target + margin:
                stats["leaves_lp"] += 1
                return {"y": sparse(rows, y)}, None, val, {}, None
            if not (cutting and node_cuts and nodes > 1 and depth <= node_cut_depth):
                break
            rows, more, _ = cg_cuts.cut_rounds(h, rows, rounds=node_cuts,
                                               target=target + margin, time_limit=left())
            m = len(rows.labels)
            derivations.extend(more)
            if not more:
                break
        x = np.asarray(sol.col_value)
        frac = np.abs(x - np.round(x))
        free = lb < ub
        fixes = reduced_cost_fixes(d, lb, ub, target + margin - val, margin)
        frac[~free] = 0.0
        if branching == "state" and frac[state].max(initial=0.0) >= 1e-7:
            frac = np.where(state, frac, 0.0)
        k = int(np.argmax(frac))
        if strong > 1 and frac[k] >= 1e-7:
            k = pick_strong(frac, fixes)
        if frac[k] < 1e-7:
            raise _Stop("integral")  # a 0/1 point below the cutoff: this relaxation
            # cannot prove it
        return None, k, val, fixes, y

    def child_value(k, v):
        """``(LP value with column k at v, leaf)``: the value is inf when infeasible;
        ``leaf`` the multipliers closing that box when they do (else None)."""
        old = lb[k], ub[k]
        lb[k] = ub[k] = v
        h.changeColBounds(k, v, v)
        try:
            h.run()
            st = h.getModelStatus()
            if st == highspy.HighsModelStatus.kInfeasible:
                return math.inf, ray_leaf()
            if st != highspy.HighsModelStatus.kOptimal:
                return -math.inf, None
            val = h.getInfo().objective_function_value + rows.constant
            if val > target + margin:
                y = rows.from_highs(h.getSolution().row_dual)
                if lagrangian(rows, y, lb, ub) > target + margin:
                    return val, {"y": sparse(rows, y)}
            return val, None
        finally:
            lb[k], ub[k] = old
            h.changeColBounds(k, old[0], old[1])

    probed = []  # (column, value, leaf): children strong branching found closed

    def pick_strong(frac, fixes):
        """Strong branching: of the ``strong`` most fractional columns (not about to be
        fixed), the one whose weaker child rises most (products of the two rises).  A
        child its multipliers close is recorded in ``probed`` (the column is then fixed
        the other way: probing)."""
        order = [int(j) for j in np.argsort(-frac)[:strong + len(fixes)]
                 if frac[j] >= 1e-7 and int(j) not in fixes][:strong]
        stats["strong_lps"] = stats.get("strong_lps", 0) + 2 * len(order)
        base = h.getInfo().objective_function_value + rows.constant
        best, best_score = order[0], -1.0
        probed.clear()
        for j in order:
            if left() is not None and left() <= 0:
                break
            (v0, leaf0), (v1, leaf1) = child_value(j, 0), child_value(j, 1)
            if leaf0 is not None:
                probed.append((j, 0, leaf0))
            if leaf1 is not None:
                probed.append((j, 1, leaf1))
            score = max(min(v0 - base, 1e9), 1e-6) * max(min(v1 - base, 1e9), 1e-6)
            if score > best_score:
                best, best_score = j, score
        return best

    def expand(depth):
        """The subtree of the current box.  Probing and reduced-cost fixing repeat at the
        same node without recursion (a probing dive of hundreds of rounds is one node of
        ``steps``); only a branch recurses, so the depth is the number of branchings."""
        nonlocal nodes
        steps = []  # ({name: value}, y) in the order applied: each closes the other values
        saved = {}
        try:
            while True:
                nodes += 1
                if time_limit is not None and time.perf_counter() - t0 > time_limit:
                    raise _Stop("time_limit")
                if nodes > max_nodes:
                    raise _Stop("node_limit")
                probed.clear()
                leaf, k, val, fixes, y = solve_node(depth)
                if leaf is not None:
                    node = leaf
                    break
                closed = [(j, v, lf) for j, v, lf in probed if j not in fixes]
                probed.clear()
                if fixes:
                    stats["fixed"] = stats.get("fixed", 0) + len(fixes)
                    # the rows grow below (node cuts): the multipliers are taken now
                    steps.append(({rows.names[j]: v for j, v in fixes.items()},
                                  sparse(rows, y)))
                    for j, v in fixes.items():
                        saved.setdefault(j, (lb[j], ub[j]))
                        lb[j] = ub[j] = v
                sides = {}
                for j, v, lf in closed:
                    sides.setdefault(j, {})[v] = lf
                both = [j for j, d in sides.items() if len(d) == 2]
                if both:  # both children closed: so is this box
                    j = both[0]
                    stats["probe_closed"] = stats.get("probe_closed", 0) + 1
                    node = {"var": rows.names[j], "children": [sides[j][0], sides[j][1]]}
                    break
                if closed:  # probing: fix each column the other way, then this box again
                    for j, v, lf in closed:
                        saved.setdefault(j, (lb[j], ub[j]))
                        lb[j] = ub[j] = 1 - v
                        steps.append(({rows.names[j]: 1 - v}, lf["y"]))
                    stats["probe_fixed"] = stats.get("probe_fixed", 0) + len(closed)
                    continue
                children = []
                for v in (0, 1):
                    old = lb[k], ub[k]
                    lb[k] = ub[k] = v
                    try:
                        children.append(expand(depth + 1))
                    finally:
                        lb[k], ub[k] = old
                node = {"var": rows.names[k], "children": children}
                break
        finally:
            for j, (a, b) in saved.items():
                lb[j], ub[j] = a, b
        if len(steps) == 1:
            (fix, y_fix), = steps
            return {"fix": fix, "y": y_fix, "child": node}
        if steps:
            return {"steps": [{"fix": fix, "y": y_fix} for fix, y_fix in steps], "child": node}
        return node

    try:
        tree = expand(0)
    except _Stop as s:
        stats["cuts"] = len(derivations)
        return TreeResult(False, None, None, nodes, time.perf_counter() - t0, s.why, stats)
    except RecursionError:
        return TreeResult(False, None, None, nodes, time.perf_counter() - t0, "depth", stats)
    stats["cuts"] = len(derivations)
    tree = with_steps(root_steps, tree)
    return TreeResult(True, tree, cutoff, nodes, time.perf_counter() - t0, None, stats,
                      derivations)


class _Stop(Exception):
    def __init__(self, why):
        super().__init__(why)
        self.why = why
