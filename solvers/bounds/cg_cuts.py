"""Gomory mixed-integer cuts with their derivations, for the certificate's tree
(proofs/certified.md, "Cuts").

Every variable of the moment relaxation is 0/1 and every row has integer coefficients and
sides, so every row's slack (``up_r - a_r x`` or ``a_r x - lo_r``) and every bound's slack
(``t_j = 1 - x_j``) is a nonnegative integer at every 0/1 point.  Multipliers of any sign
on row equations and on ``x_j + t_j = 1`` aggregate them into one equation
``sum_i a_i y_i = beta`` over nonnegative integers ``y``; with ``f = frac(beta) > 0``, the
mixed-integer rounding (MIR) inequality ``sum_i F(a_i) y_i <= floor(beta)``,
``F(a) = floor(a) + max(0, frac(a) - f) / (1 - f)``, holds at every such point, and with the
slacks substituted back it is a row over ``x``.  Whatever the multipliers, the cut is
valid, so the checker needs only them: it re-derives the row exactly and adds it to the
rows the tree's multipliers may use.  Later cuts may use earlier ones as rows.

Where the multipliers come from (not the checker's business): the tableau.  For a basic
column with a fractional value, the row of the basis inverse aggregates the rows into
``x_i + sum over nonbasic of abar_j w_j = xbar_i`` (``w``: the nonbasic columns, those at
their upper bound complemented, and the tight rows' slacks); its MIR cut is Gomory's
mixed-integer cut, which cuts off the LP point.  The multipliers are rounded to multiples
of ``2**-GRID`` (any rounding is still a valid cut: MIR is continuous enough that the cut
stays nearly as deep), the cut is derived here in exact integer arithmetic, and one whose
coefficients grow past ``2**SMALL`` is divided by an integer and rounded down (a
Chvátal-Gomory step, valid as ``x >= 0`` is integer) so every row stays exact in floats.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import highspy
import numpy as np

_BS = highspy.HighsBasisStatus


GRID = 30  # MIR multipliers are rounded to multiples of 2**-GRID
#: a cut whose largest coefficient passes 2**SMALL is divided by an integer and rounded down
#: (a Chvátal-Gomory step), so that every row stays small and exact in floating point
SMALL = 16


def _primitive(coefs: dict, rhs: int):
    g = 0
    for a in list(coefs.values()) + [rhs]:
        g = math.gcd(g, a)
    if g > 1:
        coefs = {c: a // g for c, a in coefs.items()}
        rhs //= g
    return coefs, rhs


def shrink(coefs: dict, rhs: int):
    """``(coefs, rhs, divide)``: a cut with its largest coefficient above ``2**SMALL`` divided
    by ``divide`` and rounded down (valid for ``x >= 0`` integer), then made primitive;
    ``divide`` is None when it is small already."""
    big = max((abs(a) for a in coefs.values()), default=0)
    if big <= 1 << SMALL:
        return coefs, rhs, None
    d = -(-big // (1 << SMALL))
    coefs = {c: a // d for c, a in coefs.items() if a // d}
    coefs, rhs = _primitive(coefs, rhs // d)
    return coefs, rhs, d


def mir_derive(row_coefs, row_sides, w: dict, v: dict):
    """The mixed-integer rounding cut of the aggregation ``w`` (row index -> ``(W, side)``,
    the multiplier ``W / 2**GRID`` on the row's equation with its slack at ``side``, "up" or
    "lo") and ``v`` (column -> ``V``, the multiplier ``V / 2**GRID`` on ``x_j + t_j = 1``),
    as the primitive integer row ``(coefs {col: int}, rhs)``, or None when the aggregated
    right side is an integer (proofs/certified.md, "Cuts")."""
    one = 1 << GRID
    alpha, beta, slack = {}, 0, []
    for r, (W, side) in w.items():
        lo, up = row_sides[r]
        S = int(up if side == "up" else lo)
        beta += W * S
        for c, a in row_coefs[r].items():
            alpha[c] = alpha.get(c, 0) + W * a
        if lo != up:  # an equality's slack is 0
            slack.append((r, W if side == "up" else -W, S, 1 if side == "up" else -1))
    for c, V in v.items():
        alpha[c] = alpha.get(c, 0) + V
        beta += V
    fN = beta % one
    if fN == 0:
        return None
    p = one - fN

    def Fp(a):  # p * F(a / 2**GRID)
        return (a >> GRID) * p + max(0, (a % one) - fN)

    coefs = {c: Fp(a) for c, a in alpha.items()}
    rhs = (beta >> GRID) * p
    for r, g, S, sig in slack:  # s_r = sig (S - a_r x)
        k = Fp(g)
        if k:
            rhs -= k * sig * S
            for c, a in row_coefs[r].items():
                coefs[c] = coefs.get(c, 0) - k * sig * a
    for c, V in v.items():  # t_c = 1 - x_c
        k = Fp(V)
        coefs[c] = coefs.get(c, 0) - k
        rhs -= k
    return _primitive({c: a for c, a in coefs.items() if a}, rhs)


def separate(h, active, row_coefs, row_sides, row_scales, x, max_candidates: int,
             min_efficacy: float = 1e-4):
    """Gomory mixed-integer cuts at the LP point ``x`` of ``h`` (module docstring), each the
    MIR cut of a tableau row: a list of ``(efficacy, coefs, rhs, w, v, divide)``, most
    effective first, duplicates dropped.  ``active[k]``: the row of ``row_coefs`` that is
    row k of ``h``, divided there by ``row_scales[k]``."""
    basis = h.getBasis()
    rstat, cstat = basis.row_status, basis.col_status
    _, basic = h.getBasicVariables()
    frac = np.abs(x - np.round(x))
    cand = sorted(((frac[j], pos, int(j)) for pos, j in enumerate(basic)
                   if j >= 0 and frac[j] > 0.01), reverse=True)[:max_candidates]
    # complemented (x_j + t_j = 1): the columns at an upper bound of 1 (not those held at 0)
    # (and the nonbasic columns at 1 whatever their status: one fixed at 1 in a node's box
    # may sit "at its lower bound" 1)
    at_upper = [c for c, st in enumerate(cstat) if st != _BS.kBasic and x[c] > 0.5]
    one = float(1 << GRID)
    found, seen = [], set()
    for _, pos, _j in cand:
        _, lam = h.getBasisInverseRow(pos)
        lam = np.asarray(lam) / row_scales
        nz = np.flatnonzero(np.abs(lam) > 1e-9)
        for t in (1.0, -1.0):
            w = {}
            for k in nz:
                r = int(active[k])
                lo, up = row_sides[r]
                if rstat[k] == _BS.kUpper and math.isfinite(up):
                    side = "up"
                elif rstat[k] == _BS.kLower and math.isfinite(lo):
                    side = "lo"
                elif lo == up:
                    side = "up"
                else:
                    continue
                W = int(round(t * float(lam[k]) * one))
                if W:
                    w[r] = (W, side)
            if not w:
                continue
            alpha = {}
            for r, (W, _) in w.items():
                for c, a in row_coefs[r].items():
                    alpha[c] = alpha.get(c, 0) + W * a
            v = {c: -alpha[c] for c in at_upper if alpha.get(c)}  # complemented
            cut = mir_derive(row_coefs, row_sides, w, v)
            if cut is None:
                continue
            coefs, rhs, divide = shrink(*cut)
            norm = math.sqrt(sum(float(a) ** 2 for a in coefs.values()))
            if not norm:
                continue
            eff = (sum(a * x[c] for c, a in coefs.items()) - rhs) / norm
            key = (tuple(sorted(coefs.items())), rhs)
            if eff > min_efficacy and key not in seen:
                seen.add(key)
                found.append((eff, coefs, rhs, w, v, divide))
    found.sort(key=lambda c: -c[0])
    return found


def cut_rounds(h, rows, *, rounds: int = 8, time_limit: float | None = None,
               max_candidates: int = 60, max_cuts: int = 60, min_gain: float = 1e-3,
               target: float | None = None, purge: bool = True, stall: int = 0):
    """Rounds of :func:`separate` on the solved LP ``h`` over ``rows`` (an
    :class:`solvers.bounds.lp_tree.LpRows`, whose rows ``h`` holds in that order): each
    round's cuts are added to ``h`` and to the rows, and ``h`` re-solved; with ``purge``,
    cuts left slack by a round are deleted from ``h`` (they stay in the rows, and in the
    certificate, where later cuts may use them).  Stops after ``rounds``, past
    ``time_limit`` seconds, when more than ``stall`` rounds in a row raise the bound less
    than ``min_gain`` (on a degenerate LP a round may only move the point), or when the
    bound passes ``target``.  Returns ``(rows with the cuts and ``active``, derivations,
    history)``: ``derivations`` is the certificate's ``cuts`` list, cut k labelled
    ``cut_k``; ``rows.active`` the rows ``h`` still holds, in its order."""
    t0 = time.perf_counter()
    m = len(rows.labels)
    first_cut = sum(1 for label in rows.labels if label.startswith("cut_"))
    row_coefs = [{int(c): int(a) for c, a in zip(rows.index[rows.starts[r]:rows.starts[r + 1]],
                                                  rows.value[rows.starts[r]:rows.starts[r + 1]])}
                 for r in range(m)]
    row_sides = [(rows.lo[r], rows.up[r]) for r in range(m)]
    labels = list(rows.labels)
    # row k of h is row active[k] of the rows
    active = list(range(m)) if rows.active is None else [int(r) for r in rows.active]
    scales = list(rows.scales())
    new_idx, new_val, new_up, derivations = [], [], [], []
    value = h.getInfo().objective_function_value + rows.constant
    history = [round(value, 6)]
    stalled = 0
    for _ in range(rounds):
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
        if target is not None and value > target:
            break
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            break
        x = np.asarray(h.getSolution().col_value)
        found = separate(h, active, row_coefs, row_sides,
                         np.array([scales[r] for r in active]), x, max_candidates)
        if not found:
            break
        for _, coefs, rhs, w, v, divide in found[:max_cuts]:
            label = f"cut_{first_cut + len(derivations)}"
            derivations.append({"kind": "mir", "grid": GRID,
                                "rows": {labels[r]: [W, side] for r, (W, side) in w.items()},
                                "bounds": {rows.names[c]: V for c, V in v.items()}})
            if divide is not None:
                derivations[-1]["divide"] = divide
            idx = np.array(sorted(coefs), dtype=np.int32)
            val = np.array([float(coefs[c]) for c in idx])
            scale = float(np.abs(val).max())
            h.addRow(-np.inf, float(rhs) / scale, len(idx), idx, val / scale)
            active.append(len(labels))
            scales.append(scale)
            row_coefs.append(dict(coefs))
            row_sides.append((-np.inf, float(rhs)))
            labels.append(label)
            new_idx.append(idx)
            new_val.append(val)
            new_up.append(float(rhs))
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            break
        new_value = h.getInfo().objective_function_value + rows.constant
        history.append(round(new_value, 6))
        gain, value = new_value - value, new_value
        if purge:
            rstat = h.getBasis().row_status
            slack = [k for k, r in enumerate(active) if r >= m and rstat[k] == _BS.kBasic]
            # (only this call's cuts: those of earlier calls stay for the rest of the tree)
            if slack:
                h.deleteRows(len(slack), np.array(slack, dtype=np.int32))
                gone = set(slack)
                active = [r for k, r in enumerate(active) if k not in gone]
                h.run()
        stalled = stalled + 1 if gain < min_gain else 0
        if stalled > stall:
            break
    if not derivations:
        return replace(rows, active=np.array(active, dtype=np.int64)), [], history
    k = len(derivations)
    counts = [len(i) for i in new_idx]
    ext = replace(rows, labels=labels,
                  lo=np.concatenate([rows.lo, np.full(k, -np.inf)]),
                  up=np.concatenate([rows.up, np.array(new_up)]),
                  starts=np.concatenate([rows.starts, rows.starts[-1] + np.cumsum(counts)]),
                  index=np.concatenate([rows.index] + new_idx).astype(np.int32),
                  value=np.concatenate([rows.value] + new_val),
                  hscale=np.array(scales), active=np.array(active, dtype=np.int64))
    return ext, derivations, history


# --- Chvátal-Gomory cuts in directions HiGHS suggests -------------------------------------
#
# HiGHS's MIP separators (run at its root on the same rows, presolve off, no heuristics) find
# sparse cuts with small integer coefficients that the tableau's cuts above miss (on the
# network chains they close the root).  HiGHS says nothing of how a cut was derived, and the
# certificate trusts none of it: a cut ``alpha x <= beta`` only gives a direction, and a
# Chvátal-Gomory derivation of a cut at least as strong is looked for by an LP (the CG-LP):
#
#     min  sum_r u_r side_r + sum_j v_j   s.t.  sum_r u_r a_r + v >= alpha,  v >= 0,
#
# ``u_r >= 0`` on a row's upper side, ``<= 0`` on its lower side.  A solution of value below
# ``beta + 1`` gives the CG cut ``floor(sum_r u_r a_r + v) x <= floor(value)``, which implies
# ``alpha x <= beta`` for x >= 0 (its coefficients are at least alpha's, which are integers).
# The multipliers are rounded to multiples of ``2**-GRID`` and the bound multipliers then
# raised by what the rounding took (so every coefficient stays at least alpha's); the cut is
# derived from them in exact integer arithmetic, as the checker derives it
# (proofs/certified.md, "Cuts": the Chvátal-Gomory kind).  Cuts that are not of rank one
# over the rows (and the cuts found so far) are skipped.

_NO_HEURISTICS = {"mip_heuristic_effort": 0.0, "mip_heuristic_run_feasibility_jump": False,
                  "mip_heuristic_run_root_reduced_cost": False,
                  "mip_heuristic_run_zi_round": False, "mip_heuristic_run_shifting": False,
                  "mip_heuristic_run_rins": False, "mip_heuristic_run_rens": False}


def highs_root_cuts(rows, time_limit: float | None = None) -> list:
    """The cuts in HiGHS's cut pool after its root node on ``rows`` as a 0/1 program
    (presolve off, no primal heuristics, so no incumbent's reduced-cost fixing shapes them):
    a list of ``(columns, coefficients, upper side)`` with integer coefficients and side
    (others are dropped).  Directions only: nothing of them is trusted."""
    n, m = len(rows.names), len(rows.labels)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("presolve", "off")
    h.setOptionValue("threads", 1)
    h.setOptionValue("mip_max_nodes", 1)
    if time_limit is not None:
        h.setOptionValue("time_limit", max(0.1, float(time_limit)))
    for key, val in _NO_HEURISTICS.items():
        h.setOptionValue(key, val)
    h.addVars(n, np.zeros(n), np.ones(n))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), rows.cost)
    h.addRows(m, rows.lo, rows.up, len(rows.index), rows.starts[:-1].astype(np.int32),
              rows.index, rows.value)
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32),
                            np.array([highspy.HighsVarType.kInteger] * n))
    pool = {}

    def grab(event):
        for c in event.cuts:
            lo, up = c.bounds
            vals = np.asarray(c.vals, dtype=float)
            if not math.isfinite(up) or math.isfinite(lo) or not len(vals):
                continue
            ints = np.round(vals)
            if np.abs(vals - ints).max() > 1e-9:
                continue  # only integer directions (the CG-LP's alpha)
            key = (tuple(int(i) for i in c.idxs), tuple(int(a) for a in ints))
            pool[key] = math.floor(up + 1e-9)

    h.cbMipGetCutPool.subscribe(grab)
    h.run()
    return [(np.array(k[0], dtype=np.int32), np.array(k[1], dtype=float), up)
            for k, up in pool.items()]


class CgLp:
    """The CG-LP of the module's last section over the rows of an ``LpRows``, grown with
    every cut found (a later cut may use earlier ones)."""

    def __init__(self, rows):
        self.n = n = len(rows.names)
        self.h = h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("presolve", "off")
        h.setOptionValue("threads", 1)
        h.addRows(n, np.full(n, -np.inf), np.full(n, np.inf), 0, np.zeros(n, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(0))
        h.addCols(n, np.ones(n), np.zeros(n), np.full(n, np.inf), n,
                  np.arange(n, dtype=np.int32), np.arange(n, dtype=np.int32), np.ones(n))
        self.cols = []  # column n + k: (row, +1 upper side / -1 lower side)
        self.row_coefs, self.row_sides = [], []
        for r in range(len(rows.labels)):
            s, e = rows.starts[r], rows.starts[r + 1]
            self.add_row({int(c): int(a) for c, a in zip(rows.index[s:e], rows.value[s:e])},
                         rows.lo[r], rows.up[r])

    def add_row(self, coefs: dict, lo: float, up: float):
        r = len(self.row_coefs)
        self.row_coefs.append(coefs)
        self.row_sides.append((lo, up))
        idx = np.array(list(coefs), dtype=np.int32)
        val = np.array([float(a) for a in coefs.values()])
        for sign, side in ((1, up), (-1, lo)):
            if math.isfinite(side) and len(idx):
                self.h.addCol(sign * float(side), 0.0, np.inf, len(idx), idx, sign * val)
                self.cols.append((r, sign))

    def derive(self, cols, alpha, beta: int):
        """A CG cut at least as strong as ``alpha x <= beta`` (``alpha`` integer on
        ``cols``): ``(coefs, rhs, u, v)`` with ``u`` {row: U} and ``v`` {col: V} (multiples
        of ``2**-GRID``, ``U > 0`` on a row's upper side), or None."""
        n = self.n
        lo = np.zeros(n)
        lo[cols] = alpha
        self.h.changeRowsBounds(n, np.arange(n, dtype=np.int32), lo, np.full(n, np.inf))
        self.h.run()
        if self.h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        if self.h.getInfo().objective_function_value >= beta + 1 - 1e-7:
            return None
        x = np.asarray(self.h.getSolution().col_value)
        one = 1 << GRID
        U = {}
        for k in np.flatnonzero(x[n:] > 1e-12):
            r, sign = self.cols[k]
            U[r] = U.get(r, 0) + sign * int(round(float(x[n + k]) * one))
        U = {r: W for r, W in U.items() if W}
        need = {int(c): int(a) * one for c, a in zip(cols, alpha)}
        acc = {}
        for r, W in U.items():
            for c, a in self.row_coefs[r].items():
                acc[c] = acc.get(c, 0) + W * a
        V = {}
        # every coefficient at least alpha's (0 off ``cols``): the bound multipliers make
        # up what rounding took
        for c in set(need) | set(acc) | {int(j) for j in np.flatnonzero(x[:n] > 1e-12)}:
            Vc = max(0, int(round(float(x[c]) * one)))
            Vc = max(Vc, need.get(c, 0) - acc.get(c, 0))
            if Vc > 0:
                V[c] = Vc
                acc[c] = acc.get(c, 0) + Vc
        B = sum(V.values())
        for r, W in U.items():
            lo_r, up_r = self.row_sides[r]
            B += W * int(up_r if W > 0 else lo_r)
        coefs = {c: a >> GRID for c, a in acc.items() if a >> GRID}
        rhs = B >> GRID
        if rhs > beta:
            return None
        coefs, rhs = _primitive(coefs, rhs)
        return coefs, rhs, U, V


def suggested_rounds(h, rows, *, rounds: int = 3, time_limit: float | None = None,
                     target: float | None = None):
    """Rounds of HiGHS's root cuts (:func:`highs_root_cuts`) re-derived as Chvátal-Gomory
    cuts (:class:`CgLp`), on the solved LP ``h`` over ``rows`` (as :func:`cut_rounds`: the
    cuts go into ``h`` and the rows, labelled on from the rows' last cut).  A round stops the
    loop when it derives nothing or the bound passes ``target``.  Returns ``(rows, derivations,
    history)`` as :func:`cut_rounds` does."""
    t0 = time.perf_counter()
    first_cut = sum(1 for label in rows.labels if label.startswith("cut_"))
    labels = list(rows.labels)
    active = list(range(len(labels))) if rows.active is None else [int(r) for r in rows.active]
    scales = list(rows.scales())
    value = h.getInfo().objective_function_value + rows.constant
    history = [round(value, 6)]
    cglp = None
    new_idx, new_val, new_up, derivations = [], [], [], []
    seen = set()
    cur = rows
    for _ in range(rounds):
        left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
        if (left is not None and left <= 0) or (target is not None and value > target):
            break
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            break
        pool = highs_root_cuts(cur, None if left is None else 0.5 * left)
        if cglp is None:
            cglp = CgLp(rows)
        x = np.asarray(h.getSolution().col_value)
        added = 0
        for cols, alpha, beta in pool:
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                break
            if float(np.dot(alpha, x[cols])) <= beta + 1e-6:
                continue  # not violated at the LP point
            got = cglp.derive(cols, alpha, beta)
            if got is None:
                continue
            coefs, rhs, U, V = got
            key = (tuple(sorted(coefs.items())), rhs)
            if key in seen or not coefs:
                continue
            seen.add(key)
            label = f"cut_{first_cut + len(derivations)}"
            one = float(1 << GRID)
            derivations.append({"rows": {labels[r]: W / one for r, W in U.items()},
                                "bounds": {rows.names[c]: Vc / one for c, Vc in V.items()}})
            idx = np.array(sorted(coefs), dtype=np.int32)
            val = np.array([float(coefs[c]) for c in idx])
            scale = float(np.abs(val).max())
            h.addRow(-np.inf, float(rhs) / scale, len(idx), idx, val / scale)
            cglp.add_row(dict(coefs), -np.inf, float(rhs))
            active.append(len(labels))
            scales.append(scale)
            labels.append(label)
            new_idx.append(idx)
            new_val.append(val)
            new_up.append(float(rhs))
            added += 1
        if not added:
            break
        cur = _extend(rows, labels, new_idx, new_val, new_up, scales, active)
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            break
        value = h.getInfo().objective_function_value + rows.constant
        history.append(round(value, 6))
    if not derivations:
        return replace(rows, active=np.array(active, dtype=np.int64)), [], history
    return _extend(rows, labels, new_idx, new_val, new_up, scales, active), derivations, history


def _extend(rows, labels, new_idx, new_val, new_up, scales, active):
    """``rows`` with the cut rows ``new_*`` appended (upper sides only)."""
    k = len(new_idx)
    counts = [len(i) for i in new_idx]
    return replace(rows, labels=list(labels),
                   lo=np.concatenate([rows.lo, np.full(k, -np.inf)]),
                   up=np.concatenate([rows.up, np.array(new_up, dtype=float)]),
                   starts=np.concatenate([rows.starts, rows.starts[-1] + np.cumsum(counts)]),
                   index=np.concatenate([rows.index] + list(new_idx)).astype(np.int32),
                   value=np.concatenate([rows.value] + list(new_val)),
                   hscale=np.array(scales), active=np.array(active, dtype=np.int64))
