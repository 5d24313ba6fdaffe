"""Look for a chain attaining the bound of Theorem C.14 (proofs/classic_model.md C.12) with a
MILP over integer parameters: how certificates/classic_weak_gap_L4.json was found.

    python benchmarks/classic_realize.py --params free:4:bo0 --pairs 30

For each pair ``(S, W')`` of the bound (a label of every schedule and a weak label, largest
game value first) and its time vector ``f`` (the game's maximiser), the MILP asks for integer
parameters in ``0..--max-value`` and a budget ``M`` such that ``S`` and ``W'`` fit ``M`` and
every weak label faster than ``r * n(S).f`` at ``f`` has some peak form above ``M`` (a binary
per form), for ``r`` the pair's value, then 2, then 1.  A solution is checked with the labels
(:func:`remat_theory.analysis.classic_symbolic.ratios_at`) and, with ``--certificate FILE``,
re-solved by exhaustive search and ``dp-weak`` and written as a certificate.  A search, not a
proof: no solution found says nothing.
"""
from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path

import highspy
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from classic_symbolic import params_of  # noqa: E402

from remat_theory.analysis import classic_symbolic as cs  # noqa: E402
from remat_theory.analysis.classic_times import game_value  # noqa: E402
from remat_theory.analysis.hard_objectives import GapConfig, Hit, certificate  # noqa: E402


def _le(a, b) -> bool:
    return all(x <= y for x, y in zip(a, b))


def pairs(A, W) -> list:
    """``(value, S, W', g)`` for every pair of the bound with a value above 1, largest first."""
    out = []
    for s in A:
        if any(_le(w[0], s[0]) and cs.covered(w[1], s[1]) for w in W):
            continue
        for w2 in W:
            union = s[1] | w2[1]
            forced = sorted({w[0] for w in W if cs.covered(w[1], union)} | {w2[0]})
            if any(_le(c, s[0]) for c in forced):
                continue
            v, g = game_value(s[0], forced)
            if v > 1:
                out.append((v, s, w2, g))
    return sorted(out, key=lambda x: -x[0])


def milp(d: int, S, Wp, bad, max_value: int, seconds: float):
    """Integer parameters and budget: S's and W''s forms <= M, each label of ``bad`` with
    some form >= M + 1; None if HiGHS finds none in time."""
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", seconds)
    inf, big = highspy.kHighsInf, float(max_value * 40 + 1)
    h.addVars(d + 1, np.zeros(d + 1), np.full(d + 1, float(max_value * 40)))
    for k in range(d + 1):
        h.changeColIntegrality(k, highspy.HighsVarType.kInteger)

    def row(coefs, lo, up):
        idx = np.array([k for k, c in coefs if c], dtype=np.int32)
        h.addRow(lo, up, len(idx), idx, np.array([float(c) for k, c in coefs if c]))

    for form in list(S[1]) + list(Wp[1]):
        row([(k, form[k]) for k in range(d)] + [(d, -1)], -inf, 0)
    col = d + 1
    for w in bad:
        ys = []
        for form in w[1]:
            h.addVar(0, 1)
            h.changeColIntegrality(col, highspy.HighsVarType.kInteger)
            row([(k, form[k]) for k in range(d)] + [(d, -1), (col, -big)], 1 - big, inf)
            ys.append(col)
            col += 1
        row([(j, 1) for j in ys], 1, inf)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    x = h.getSolution().col_value
    return [int(round(v)) for v in x[:d]]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", required=True, help="as benchmarks/classic_symbolic.py --only")
    p.add_argument("--pairs", type=int, default=30, help="try the N best pairs")
    p.add_argument("--max-value", type=int, default=200)
    p.add_argument("--seconds", type=float, default=20.0, help="per MILP")
    p.add_argument("--certificate", help="write the best chain found as a certificate")
    a = p.parse_args(argv)
    P = params_of(a.params)
    A, W = cs.labels(P, "all"), cs.labels(P, "weak")
    ps = pairs(A, W)
    print(f"{a.params}: {len(A)} / {len(W)} labels, {len(ps)} pairs above 1, best "
          f"{ps[0][0] if ps else 1}", flush=True)
    best = None
    for v, S, Wp, g in ps[:a.pairs]:
        f = [gi / ai for gi, ai in zip(g, S[0])]
        for r in sorted({v, Fraction(2), Fraction(1)}, reverse=True):
            if r > v:
                continue
            bad = [w for w in W if sum(x * y for x, y in zip(w[0], f)) <
                   r * sum(x * y for x, y in zip(S[0], f))]
            vals = milp(len(P.names), S, Wp, bad, a.max_value, a.seconds)
            if vals is None:
                continue
            b, ratio, tv = max(cs.ratios_at(vals, A, W), key=lambda x: x[1])
            print(f"value {v}, r {r}: parameters {vals}, budget {b}, ratio {ratio}, times {tv}",
                  flush=True)
            if best is None or ratio > best[1]:
                best = (vals, ratio, b, tv)
            break
        if best is not None and best[1] >= v:
            break
    if best is None:
        print("nothing found")
        return 1
    if a.certificate:
        vals, ratio, b, tv = best
        d = P.chain(vals).to_dict()
        d["fwd_time"] = [float(t) for t in tv]
        cert = certificate(Hit(0.0, d, b), GapConfig(objective="dp-weak-gap", all_saved=True),
                           description=f"benchmarks/classic_realize.py --params {a.params}: "
                           f"parameters {dict(zip(P.names, vals))}, times {tv}",
                           claim=f"DP_weak/OPT = {ratio} on the classic model "
                                 f"({P.stages} stages)")
        cert.save(a.certificate)
        print(f"{a.certificate}: ratio {cert.facts['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
