"""Independent checker of optimality certificates (``remat-proof/1``, proofs/certified.md).

A certificate says: this schedule, at this budget, is optimal over all schedules of the
chain model (docs/model.md; without offloading or Drop).  The checker believes nothing the solver
that wrote it computed.  It imports no solver: the schedule is replayed by the model's
simulator (the referee every solver answers to), and the lower bound is re-derived here:

* ``kind = "ideal"``: every ``B_i`` and the loss run once, and every ``Fall_i`` at least
  once (``B_i`` reads ``t_{i+1}``, which only ``Fall_i`` makes), so no schedule is faster
  than ``sum(fall_time) + sum(bwd_time)``; the schedule's makespan must equal it.
* ``kind = "lp-tree"``: the rows of the moment relaxation (proofs/ilp.md section 9,
  Theorem 3: every valid schedule is a 0/1 point of them with an objective at most its
  makespan; section 10 for unsaved outputs) are rebuilt here from the chain, from the text
  of those sections, and the
  certificate's tree is walked: an inner node ``{"var", "children": [at 0, at 1]}`` splits
  on one binary, a ``{"fix": {var: v}, "y", "child"}`` node closes each ``var = 1 - v``
  with the multipliers ``y`` and goes on with every ``var = v`` (``{"steps": [{"fix",
  "y"}, ...], "child"}``: a chain of such nodes spelled flat; a step ``{"fix": {var: v},
  "tree"}`` closes ``var = 1 - v`` with a subtree instead: probing), and a leaf ``{"y"}``
  closes its box.  A box closes when the Lagrangian bound
  ``sum_r y_r side_r + sum_j min over the box of (c - A^T y)_j x_j`` (weak duality; ``y_r``
  >= 0 on a ``>=`` row, <= 0 on a ``<=`` row, free on ``=``), computed in exact rational
  arithmetic, exceeds ``makespan - delta`` (``delta``: the gcd of the times when they are
  all integers, so a faster schedule is ``delta`` faster) or reaches ``makespan`` (``delta``
  0).  Every 0/1 point lies in some box, so no schedule is faster than the one given.
* ``remat-proof/2``: as /1, plus a list ``cuts`` derived here before the tree is walked
  (:func:`add_cuts`: Chvátal-Gomory or mixed-integer rounding cuts, each from its
  multipliers, valid at every 0/1 point of the rows whatever the multipliers are); cut k
  is the row ``cut_k``, which later cuts and the tree's multipliers may use.

    python proofs/check_certificate.py proofs/certified/*.json

prints one line per file and exits nonzero if any is rejected.
"""
from __future__ import annotations

import json
import math
import sys
from fractions import Fraction
from pathlib import Path

if __package__ in (None, ""):  # run as a script from anywhere: the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remat_theory.model.chain import Chain  # noqa: E402
from remat_theory.model.simulator import simulate  # noqa: E402

FORMAT = "remat-proof/1"
#: remat-proof/2: as /1, plus an optional list ``cuts`` of Chvátal-Gomory cuts (below)
FORMATS = (FORMAT, "remat-proof/2")


class Rejected(Exception):
    """The certificate does not prove what it says (the message says why)."""


def _fr(v) -> Fraction:
    return Fraction(v) if not isinstance(v, float) else Fraction(v)


def granularity(chain: Chain) -> Fraction:
    times = list(chain.fwd_time) + list(chain.fall_time) + list(chain.bwd_time)
    if all(float(t).is_integer() for t in times):
        g = 0
        for t in times:
            g = math.gcd(g, int(t))
        return Fraction(g)
    return Fraction(0)


def moment_rows(chain: Chain, budget: int):
    """The moment relaxation at ``budget`` (section 10 for unsaved outputs), sizes divided by the gcd of
    every size and overhead and the budget floored to it (valid for 0/1 points: every
    left side is then an integer).  Returns ``(rows, cost, constant)``: ``rows`` maps a
    label to ``(coefficients {var: Fraction}, lower, upper)`` (None: no side), ``cost``
    maps every variable to its objective coefficient."""
    L = chain.length
    g = 0
    for f in (chain.x_size, chain.tape_size, chain.fwd_overhead, chain.bwd_overhead,
              chain.fall_overhead):
        for v in f:
            g = math.gcd(g, int(v))
    g = g or 1
    x = [v // g for v in chain.x_size]
    def sv(i):  # x_i is read by a backward (x_0 always)
        return i == 0 or bool(chain.output_saved[i - 1])

    # an unsaved x_{j+1} is not inside t_{j+1}: the tape holds the rest
    tp = [(chain.tape_size[j] - (0 if sv(j + 1) else chain.x_size[j + 1])) // g
          for j in range(L)]
    bo = [v // g for v in chain.bwd_overhead]
    M = budget // g
    cost = {}
    for r in range(L, -1, -1):
        for i in range(min(r, L - 1) + 1):
            cost[f"c_{i}_{r}"] = _fr(chain.fwd_time[i])
            cost[f"z_{i}_{r}"] = _fr(chain.fall_time[i])
        for i in range(min(r, L - 1)):
            cost[f"a_{i}_{r}"] = Fraction(0)
    for q in range(L, -1, -1):
        for j in range(min(q, L - 1) + 1):
            cost[f"h_{j}_{q}"] = Fraction(0)
        for i in range(1, q + 1):
            cost[f"g_{i}_{q}"] = Fraction(0)
    rows = {}

    def row(label, terms, lo=None, up=None):
        coef = {}
        for k, v in terms:
            if k not in cost:
                raise AssertionError(f"row {label} names an unknown variable {k}")
            coef[k] = coef.get(k, 0) + Fraction(v)
        if any(a.denominator != 1 for a in coef.values()):
            raise Rejected(f"row {label}: a coefficient that is not an integer")
        rows[label] = (coef, lo, up)

    for q in range(L, -1, -1):  # section 9, rows 1-2: the moments
        if q < L:
            row(f"tape_at_b_{q}", [(f"h_{q}_{q}", 1)], 1, 1)
        if q >= 1 and sv(q):
            row(f"x_at_b_{q}", [(f"g_{q}_{q}", 1), (f"h_{q - 1}_{q}", 1)], 1, None)
        elif q == L:  # the loss reads an unsaved x_L, plain only
            row(f"x_at_b_{q}", [(f"g_{q}_{q}", 1)], 1, None)
        terms = [(f"h_{j}_{q}", tp[j]) for j in range(min(q, L - 1) + 1)]
        terms += [(f"g_{i}_{q}", x[i]) for i in range(1, q + 1)]
        terms += [(f"c_{r}_{r}", x[r + 1]) for r in range(q, L)]  # dead x_{r+1}
        fixed = x[0] + (x[q + 1] if q < L else 0) + x[q] + bo[q]
        row(f"peak_b_{q}", terms, None, M - fixed)
    for r in range(L, -1, -1):  # rows 3-7: the phases
        top = min(r, L - 1)
        for j in range(top + 1):
            t = [(f"h_{j}_{r}", 1), (f"z_{j}_{r}", -1)]
            if r < L:
                t.append((f"h_{j}_{r + 1}", -1))
            row(f"keep_t_{j}_{r}", t, None, 0)
        for i in range(1, r + 1):
            t = [(f"g_{i}_{r}", 1), (f"c_{i - 1}_{r}", -1)]
            if not sv(i):  # a Fall makes an unsaved output as a plain value too
                t.append((f"z_{i - 1}_{r}", -1))
            if r < L:
                t.append((f"g_{i}_{r + 1}", -1))
            row(f"keep_x_{i}_{r}", t, None, 0)
        if r == L:
            for i in range(L):
                row(f"first_{i}", [(f"c_{i}_{L}", 1), (f"z_{i}_{L}", 1)], 1, None)
        else:
            for j in range(r):
                t = [(f"h_{j}_{r + 1}", 1), (f"h_{j}_{r}", -1)]
                if sv(j + 1):  # an Fn_{j+1} reading x_{j+1} out of t_{j+1} frees it
                    t.append((f"c_{j + 1}_{r}", -1))
                row(f"free_t_{j}_{r}", t, None, 0)
            for i in range(1, r + 1):
                t = [(f"g_{i}_{r + 1}", 1), (f"g_{i}_{r}", -1), (f"c_{i}_{r}", -1)]
                if not sv(i):  # a Fall reading an unsaved input frees it
                    t.append((f"z_{i}_{r}", -1))
                row(f"free_x_{i}_{r}", t, None, 0)
            for j in range(top + 1):  # t_{j+1} of an unsaved output: only B_j frees it
                if not sv(j + 1):
                    row(f"no_fall_{j}_{r}", [(f"z_{j}_{r}", 1), (f"h_{j}_{r + 1}", 1)],
                        None, 1)
            for i in range(1, top + 1):
                src = [(f"g_{i}_{r + 1}", -1), (f"c_{i - 1}_{r}", -1), (f"z_{i - 1}_{r}", -1)]
                if sv(i):  # an unsaved x_i is never read out of t_i
                    src.append((f"h_{i - 1}_{r + 1}", -1))
                row(f"in_c_{i}_{r}", [(f"c_{i}_{r}", 1)] + src, None, 0)
                row(f"in_z_{i}_{r}", [(f"z_{i}_{r}", 1)] + src, None, 0)
        for i in range(top + 1):
            if i == r:
                continue
            a = [(f"a_{i}_{r}", -1)] if i < top else []
            if i + 1 <= r:
                row(f"end_c_{i}_{r}", [(f"c_{i}_{r}", 1), (f"g_{i + 1}_{r}", -1)] + a, None, 0)
            row(f"end_z_{i}_{r}", [(f"z_{i}_{r}", 1), (f"h_{i}_{r}", -1)]
                + (a if sv(i + 1) else []), None, 0)
            if not sv(i + 1):  # the plain unsaved x_{i+1} beside the Fall's tape
                t = [(f"z_{i}_{r}", 1), (f"g_{i + 1}_{r}", -1)] + a
                if r < L:
                    t.append((f"g_{i + 1}_{r + 1}", -1))
                row(f"end_zx_{i}_{r}", t, None, 0)
        for i in range(top):
            t = [(f"a_{i}_{r}", 1), (f"c_{i + 1}_{r}", -1)]
            if not sv(i + 1):
                t.append((f"z_{i + 1}_{r}", -1))
            row(f"fn_{i}_{r}", t, None, 0)
            t = [(f"a_{i}_{r}", 1)]
            if i + 2 <= min(r, L):
                t.append((f"g_{i + 2}_{r}", -1))
            if not sv(i + 1):  # a Fall_{i+1} freed it: its tape is held at r (or freed)
                t.append((f"h_{i + 1}_{r}", -1))
            if i + 1 < top:
                t.append((f"a_{i + 1}_{r}", -1))
            if r < L and i + 1 == r:
                t.append((f"c_{r}_{r}", -1))
            row(f"chain_{i}_{r}", t, None, 0)
    constant = sum((_fr(b) for b in chain.bwd_time), Fraction(0))
    return rows, cost, constant


def _exp2(f: Fraction) -> int:
    """k with ``f * 2**k`` an integer (``f`` a binary fraction, as every float is)."""
    den = f.denominator
    if den & (den - 1):
        raise Rejected(f"{f} is not a binary fraction")
    return den.bit_length() - 1


def _signed_row(rows, label, v, u: Fraction, *, lower_if_positive: bool, where: str):
    """Row ``label``'s coefficients and the side a multiplier ``u`` (given as ``v``) uses:
    the lower side for a positive ``u`` in a Lagrangian bound, the upper one in a cut's
    combination (and the other way round for a negative ``u``); Rejected on an unknown row or
    on a sign whose side the row lacks.  (``None`` as the side for ``u == 0``.)"""
    if label not in rows:
        raise Rejected(f"{where}multiplier on an unknown row {label!r}")
    coef, lo, up = rows[label]
    if u == 0:
        return coef, None
    side = (lo if u > 0 else up) if lower_if_positive else (up if u > 0 else lo)
    if side is None:
        raise Rejected(f"{where}multiplier {v} on row {label} has the sign of a side it lacks")
    return coef, side


def lagrangian(rows, cost, constant, y: dict, box: dict) -> Fraction:
    """The bound of the module docstring for multipliers ``y`` (label -> number) over
    ``box`` (var -> (lo, hi) in {0, 1}); raises Rejected on a multiplier of the wrong sign.
    Exact: every number is a binary fraction (floats are), so all of it is done in integers
    scaled by one power of two."""
    ys = []
    for label, v in y.items():
        yv = Fraction(v)
        coef, side = _signed_row(rows, label, v, yv, lower_if_positive=True, where="")
        if yv == 0:
            continue
        ys.append((yv, coef, Fraction(side)))
    K = max([_exp2(constant)] + [_exp2(c) for c in cost.values()]
            + [_exp2(yv) + _exp2(sd) for yv, _, sd in ys] + [_exp2(yv) for yv, _, _ in ys])

    def n(f: Fraction) -> int:
        return f.numerator << (K - _exp2(f))

    total = n(constant)
    d = {}
    for yv, coef, side in ys:
        yi = n(yv)
        total += n(yv * side)
        for k, a in coef.items():  # integer coefficients (sizes, 0/1)
            d[k] = d.get(k, 0) - yi * int(a)
    for k, c in cost.items():
        dk = n(c) + d.get(k, 0)
        lo, hi = box.get(k, (0, 1))
        total += min(dk * lo, dk * hi)
    return Fraction(total, 1 << K)


def _number(v) -> Fraction:
    """A multiplier: a JSON number or the text ``"p/q"`` (exact)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise Rejected(f"multiplier {v!r} is not a number")
    try:
        return Fraction(v)
    except (ValueError, OverflowError, ZeroDivisionError) as e:
        raise Rejected(f"multiplier {v!r} is not a finite number") from e


def _cg_cut(k, cut, rows, cost):
    """The Chvátal-Gomory cut ``{"rows": {label: u}, "bounds": {var: v}}`` (``add_cuts``)."""
    alpha, beta = {}, Fraction(0)
    for label, v in cut.get("rows", {}).items():
        u = _number(v)
        coef, side = _signed_row(rows, label, v, u, lower_if_positive=False,
                                 where=f"cut {k}: ")
        if u == 0:
            continue
        beta += u * Fraction(side)
        for var, a in coef.items():
            alpha[var] = alpha.get(var, 0) + u * a
    for var, v in cut.get("bounds", {}).items():
        if var not in cost:
            raise Rejected(f"cut {k}: bound multiplier on an unknown variable {var!r}")
        w = _number(v)
        if w < 0:
            raise Rejected(f"cut {k}: bound multiplier {v} on {var} is negative")
        alpha[var] = alpha.get(var, 0) + w
        beta += w
    return {var: Fraction(math.floor(a)) for var, a in alpha.items()}, Fraction(math.floor(beta))


def _mir_cut(k, cut, rows, cost):
    """The mixed-integer rounding cut ``{"kind": "mir", "grid": G, "rows": {label: [W,
    side]}, "bounds": {var: V}}`` (``add_cuts``)."""
    scale = Fraction(1, 2 ** int(cut.get("grid", 0)))
    alpha, beta, slack = {}, Fraction(0), []
    for label, ws in cut.get("rows", {}).items():
        if label not in rows:
            raise Rejected(f"cut {k}: multiplier on an unknown row {label!r}")
        if not isinstance(ws, list) or len(ws) != 2 or ws[1] not in ("up", "lo"):
            raise Rejected(f"cut {k}: row {label}: expected [multiplier, 'up' or 'lo']")
        w = _number(ws[0]) * scale
        coef, lo, up = rows[label]
        side = up if ws[1] == "up" else lo
        if side is None:
            raise Rejected(f"cut {k}: row {label} has no {ws[1]} side")
        side = Fraction(side)
        if side.denominator != 1:
            raise Rejected(f"cut {k}: row {label}'s side {side} is not an integer")
        beta += w * side
        for var, a in coef.items():
            alpha[var] = alpha.get(var, 0) + w * a
        if lo is None or up is None or lo != up:  # an equality's slack is 0
            sig = 1 if ws[1] == "up" else -1  # s = sig (side - a x) >= 0, an integer
            slack.append((w * sig, coef, side, sig))
    bounds = []
    for var, V in cut.get("bounds", {}).items():  # x + t = 1, t >= 0 an integer
        if var not in cost:
            raise Rejected(f"cut {k}: bound multiplier on an unknown variable {var!r}")
        w = _number(V) * scale
        alpha[var] = alpha.get(var, 0) + w
        beta += w
        bounds.append((var, w))
    f = beta - math.floor(beta)
    if f == 0:
        raise Rejected(f"cut {k}: the aggregated right side {beta} is an integer")

    def F(a):
        return math.floor(a) + max(Fraction(0), a - math.floor(a) - f) / (1 - f)

    out = {var: F(a) for var, a in alpha.items()}
    rhs = Fraction(math.floor(beta))
    for g, coef, side, sig in slack:
        c = F(g)
        rhs -= c * sig * side
        for var, a in coef.items():
            out[var] = out.get(var, 0) - c * sig * a
    for var, w in bounds:
        c = F(w)
        out[var] = out.get(var, 0) - c
        rhs -= c
    return out, rhs


def _coprime(ints: dict, R: int):
    g = 0
    for a in list(ints.values()) + [R]:
        g = math.gcd(g, a)
    g = g or 1
    return {var: a // g for var, a in ints.items() if a // g}, R // g


def add_cuts(rows, cost, cuts) -> int:
    """Derive every cut of ``cuts`` in order and add it to ``rows`` as ``cut_k`` (an upper
    side only, the row scaled to coprime integers); earlier cuts are rows for later ones.
    Two kinds (proofs/certified.md, "Cuts"); every variable is 0/1, every row has integer
    coefficients and sides, so every slack is a nonnegative integer:

    * Chvátal-Gomory (the default): signed row multipliers ``u`` (a positive one uses the
      row's upper side, a negative one its lower side) and bound multipliers ``v >= 0`` on
      ``x_j <= 1`` give ``alpha x <= beta`` (``alpha = sum u_r a_r + v``, ``beta = sum u_r
      side_r + sum v_j``); as ``x >= 0`` is integer, ``sum floor(alpha_j) x_j <= floor(beta)``.
    * ``"mir"``: multipliers ``W / 2**grid`` of any sign on row equations ``a_r x + s_r =
      up_r`` (side "up") or ``a_r x - s_r = lo_r`` ("lo") and on ``x_j + t_j = 1`` give an
      equation ``sum a_i y_i = beta`` over nonnegative integers ``y`` (``x``, ``s``, ``t``);
      with ``f = frac(beta) > 0``, ``sum F(a_i) y_i <= floor(beta)`` where ``F(a) = floor(a)
      + max(0, frac(a) - f) / (1 - f)`` (mixed-integer rounding), and ``s``, ``t`` are
      substituted back.
    Returns the number of cuts."""
    if not isinstance(cuts, list):
        raise Rejected("cuts must be a list")
    for k, cut in enumerate(cuts):
        if not isinstance(cut, dict) or set(cut) - {"rows", "bounds", "kind", "grid",
                                                           "divide"}:
            raise Rejected(f"cut {k}: expected an object with rows and bounds")
        kind = cut.get("kind", "cg")
        if kind == "cg":
            coef, rhs = _cg_cut(k, cut, rows, cost)
        elif kind == "mir":
            coef, rhs = _mir_cut(k, cut, rows, cost)
        else:
            raise Rejected(f"cut {k}: kind {kind!r} (known: cg, mir)")
        den = rhs.denominator
        for a in coef.values():
            den = den * a.denominator // math.gcd(den, a.denominator)
        ints = {var: int(a * den) for var, a in coef.items() if a}
        R = int(rhs * den)
        ints, R = _coprime(ints, R)
        if "divide" in cut:  # floor(C / d) x <= floor(R / d): valid as x >= 0 is integer
            d = cut["divide"]
            if isinstance(d, bool) or not isinstance(d, int) or d < 1:
                raise Rejected(f"cut {k}: divide = {d!r} must be a positive integer")
            ints, R = _coprime({var: a // d for var, a in ints.items()}, R // d)
        label = f"cut_{k}"
        if label in rows:
            raise Rejected(f"cut {k}: its label {label} is a row already")
        rows[label] = ({var: Fraction(a) for var, a in ints.items() if a}, None, Fraction(R))
    return len(cuts)


def _walk(node, rows, cost, constant, box, closes, counts, depth=0):
    if depth > 100_000:
        raise Rejected("tree too deep")
    if "children" in node:
        var = node["var"]
        if var not in cost or box.get(var, (0, 1))[0] == box.get(var, (0, 1))[1]:
            raise Rejected(f"branch on {var!r}, not a free variable of the box")
        if len(node["children"]) != 2:
            raise Rejected(f"branch on {var} needs two children")
        old = box.get(var)
        for v, child in zip((0, 1), node["children"]):
            box[var] = (v, v)
            _walk(child, rows, cost, constant, box, closes, counts, depth + 1)
        if old is None:
            del box[var]
        else:
            box[var] = old
        return
    if "fix" in node or "steps" in node:
        # a fix node, or a list of them spelled flat (each step's boxes in the box the
        # steps before it left): every fixing's other value closed, then the child
        steps = [node] if "fix" in node else node["steps"]
        if not isinstance(steps, list) or not steps:
            raise Rejected("steps must be a non-empty list of fixings")
        olds = {}
        for step in steps:
            fixed = step["fix"]
            if ("y" in step) == ("tree" in step):
                raise Rejected("a fixing needs either multipliers y or a tree")
            if "tree" in step and len(fixed) != 1:
                raise Rejected("a fixing closed by a tree fixes one variable")
            for var, v in fixed.items():
                if var not in cost or v not in (0, 1) or box.get(var, (0, 1))[0] == \
                        box.get(var, (0, 1))[1]:
                    raise Rejected(f"fixing of {var!r}, not a free variable of the box")
                olds[var] = box.get(var)
                box[var] = (1 - v, 1 - v)
                if "tree" in step:  # the box with the other value closed by a subtree
                    _walk(step["tree"], rows, cost, constant, box, closes, counts, depth + 1)
                else:
                    val = lagrangian(rows, cost, constant, step["y"], box)
                    counts["boxes"] += 1
                    if not closes(val):
                        raise Rejected(f"{var} = {1 - v} not closed: bound {float(val)}")
                box[var] = (v, v)
        _walk(node["child"], rows, cost, constant, box, closes, counts, depth + 1)
        for var, old in olds.items():
            if old is None:
                del box[var]
            else:
                box[var] = old
        return
    if "y" not in node:
        raise Rejected("a node that is neither a branch, a fixing nor a leaf")
    val = lagrangian(rows, cost, constant, node["y"], box)
    counts["boxes"] += 1
    counts["least"] = min(counts.get("least", val), val)
    if not closes(val):
        raise Rejected(f"a leaf not closed: bound {float(val)}")


def check(cert: dict) -> dict:
    """Verify ``cert`` (a parsed certificate); returns what was checked, raises Rejected."""
    if cert.get("format") not in FORMATS:
        raise Rejected(f"format = {cert.get('format')!r}, expected one of {FORMATS}")
    if "cuts" in cert and cert["format"] == FORMAT:
        raise Rejected(f"cuts in a {FORMAT} certificate (they came with remat-proof/2)")
    chain = Chain.from_dict(cert["chain"])
    if chain.bandwidth is not None:
        raise Rejected("a chain with a copy channel (offloading): not covered")
    budget = int(cert["budget"])
    sim = simulate(chain, cert["schedule"], budget)  # raises on an invalid schedule
    if sim.peak_memory > budget:
        raise Rejected(f"peak {sim.peak_memory} over the budget {budget}")
    makespan = _fr(sim.makespan)
    if abs(float(makespan) - float(cert["makespan"])) > 1e-9 * max(1.0, float(makespan)):
        raise Rejected(f"replayed makespan {sim.makespan} is not the certificate's "
                       f"{cert['makespan']}")
    kind = cert.get("kind")
    if kind == "ideal":
        ideal = sum((_fr(t) for t in list(chain.fall_time) + list(chain.bwd_time)),
                    Fraction(0))
        if makespan > ideal:
            raise Rejected(f"makespan {float(makespan)} above the ideal {float(ideal)}")
        return {"kind": kind, "makespan": float(makespan), "bound": float(ideal)}
    if kind != "lp-tree":
        raise Rejected(f"kind = {kind!r}: this checker knows 'ideal' and 'lp-tree'")
    rows, cost, constant = moment_rows(chain, budget)
    ncuts = add_cuts(rows, cost, cert.get("cuts", []))
    delta = granularity(chain)

    def closes(val):
        return val > makespan - delta if delta > 0 else val >= makespan

    counts = {"boxes": 0}
    _walk(cert["tree"], rows, cost, constant, {}, closes, counts)
    return {"kind": kind, "makespan": float(makespan), "boxes": counts["boxes"], "cuts": ncuts,
            "least_leaf_bound": float(counts["least"]) if "least" in counts else None,
            "delta": float(delta)}


def main(argv=None) -> int:
    paths = (argv if argv is not None else sys.argv[1:])
    bad = 0
    for p in paths:
        try:
            res = check(json.loads(Path(p).read_text()))
            print(f"{p}: accepted {res}")
        except (Rejected, Exception) as e:  # noqa: BLE001  every failure is a rejection
            bad += 1
            print(f"{p}: REJECTED: {type(e).__name__}: {e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
