"""The growth of ``DP_weak/OPT`` on the classic model (proofs/classic_model.md, C.15).

    python benchmarks/classic_growth.py family --max-stages 80 --out benchmarks/results/classic_growth.json
    python benchmarks/classic_growth.py ladder --stages 4 5 6 7 8 --certificate-dir proofs/certificates
    python benchmarks/classic_growth.py search --stages 6 --seed 1 --restarts 1 --evals 500 --certificate-dir proofs/certificates

``family``: ``dp-weak``'s makespan on ``G_L`` (``remat_theory.analysis.classic_growth``) for
``L = 4, 6, .., --max-stages``, the witness's makespan and peak, and exhaustive search's OPT up
to ``--exhaustive-max`` stages; CPU seconds per solve.

``ladder``: the construction of the 5-stage certificate.  One gadget (stages ``L-2, L-1``,
``x_L = 0``) above a *ladder* (stages ``0..L-3``): a MILP over integer sizes, tapes,
overheads and budget asks for the witness ``Fall_0 .. Fall_(L-3) Fck_(L-2) Fall_(L-1)
Fn_(L-1) Loss Fall_(L-2) B_(L-1) .. B_0`` (one run of stage 0) to fit, for a weakly
persistent schedule running stage 0 ``L - 1`` times to fit, and for the inequalities of the
lower bound (C.15, "the ladder") to hold, with the smallest budget.  It is feasible for
``L = 4, 5`` and infeasible from ``L = 6`` on (the passes through the ladder with a
gradient held cannot be cheap while the ladder's recordings are dear).  With
``--certificate-dir``, the solution at 5 stages is written as
``classic_weak_gap_L5.json`` (OPT and ``dp-weak`` solved again).

``search``: a local search over integer sizes, tape excesses, overheads and budget (times
``1, 0, .., 0``, no backward overheads), scoring ``dp-weak`` over exhaustive OPT, from seeds
(``G_L`` for even ``L``; at 6 stages also the 5-stage certificate with one stage repeated);
``--restarts`` restarts of ``--evals`` moves each (a move is kept when the score does not
fall), deterministic for a seed.  With ``--certificate-dir``, the best chain is written as
``classic_weak_gap_L<L>.json``.  A search, not a proof: no gain found says nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import highspy
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import solvers  # noqa: E402
from remat_theory import Chain, simulate  # noqa: E402
from remat_theory.analysis import classic_growth as CG  # noqa: E402


def family(max_stages: int, exhaustive_max: int) -> list:
    rows = []
    for L in range(4, max_stages + 1, 2):
        g = L // 2
        chain, M = CG.growth_chain(g)
        sim = simulate(chain, CG.growth_witness(g), M)
        t = time.process_time()
        weak = solvers.solve(chain, M, "dp-weak").makespan
        row = {"stages": L, "budget": M, "witness": sim.makespan, "witness_peak": sim.peak_memory,
               "dp_weak": weak, "lower_bound": CG.growth_lower_bound(g),
               "dp_weak_cpu_s": round(time.process_time() - t, 3)}
        if L <= exhaustive_max:
            t = time.process_time()
            row["opt"] = solvers.solve(chain, M, "exhaustive", max_stages=L).makespan
            row["opt_cpu_s"] = round(time.process_time() - t, 3)
        rows.append(row)
        print(row, flush=True)
    return rows


# ---------------------------------------------------------------------- the ladder MILP

def ladder_milp(L: int, max_value: int = 10 ** 4, seconds: float = 60.0):
    """Integer parameters of a ladder-and-gadget chain of ``L`` stages (dict), or the
    solver's status when there are none."""
    s = L - 2
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", seconds)
    col = {}

    def var(name, lo):
        col[name] = len(col)
        h.addVar(lo, max_value)
        h.changeColIntegrality(col[name], highspy.HighsVarType.kInteger)

    for j in range(1, L):
        var(f"x{j}", 1)
    for j in range(1, L):
        var(f"t{j}", 1)  # |t_j|, the tape of stage j - 1; |t_L| = 0
    for j in range(L):
        var(f"f{j}", 0)
    var("M", 0)

    def X(j):
        return {} if j in (0, L) else {f"x{j}": 1}

    def T(j):
        return {} if j == L else {f"t{j}": 1}

    def F(j):
        return {f"f{j}": 1}

    def TT(j):
        return add(*[T(i) for i in range(1, j + 1)])

    def add(*ds):
        out = {}
        for d in ds:
            for k, v in d.items():
                out[k] = out.get(k, 0) + v
        return out

    def row(expr, lo, up):
        e = {k: v for k, v in add(expr).items() if v}
        h.addRow(lo, up, len(e), np.array([col[k] for k in e], dtype=np.int32),
                 np.array([float(v) for v in e.values()]))

    def fits(*ds):  # a peak within M
        row(add(*ds, {"M": -1}), -highspy.kHighsInf, 0.0)

    def over(*ds):  # a peak above M
        row(add(*ds, {"M": -1}), 1.0, highspy.kHighsInf)

    for j in range(1, L):
        row(add(X(j), {f"t{j}": -1}), -highspy.kHighsInf, 0.0)  # x_j <= |t_j|
        row(add(X(1), {f"x{j}": -1}), -highspy.kHighsInf, 0.0)  # x_1 is the smallest value
    # the witness: one run of stage 0
    for j in range(s):
        fits(TT(j + 1), F(j))
    fits(TT(s), X(s + 1), F(s))
    fits(TT(s), X(s + 1), F(s + 1))
    fits(TT(s), T(s + 1), F(s))
    for j in range(s + 1):
        fits(TT(j + 1), X(j + 1), X(j))
    # a weakly persistent schedule with L - 1 runs: a pass to x_s, the gadget, then for
    # j = s..2 a pass to x_(j-1) beside d_j, Fall_(j-1), B_(j-1); at the end Fall_0, B_0
    for k in range(s):
        fits(X(k), X(k + 1), F(k))
    fits(X(s), T(s + 1), F(s))
    fits(X(s), T(s + 1), F(s + 1))
    fits(X(s), T(s + 1), X(s + 1), X(s + 1))
    fits(X(s), T(s + 1), X(s + 1), X(s))
    for j in range(2, s + 1):
        for k in range(j - 1):
            fits(X(j), X(k), X(k + 1), F(k))
        fits(X(j), X(j - 1), T(j), F(j - 1))
        fits(X(j - 1), T(j), X(j), X(j - 1))
    fits(X(1), T(1), F(0))
    # the lower bound (C.15, the ladder): no value but the gadget's plain x_s beside the
    # gadget's recordings, none but the plain x_(j-1) beside Fall_(j-1) after B_j
    over(X(s), T(s + 1), F(s + 1), X(1))
    over(X(s), X(s + 1), T(s + 1), F(s), X(1))
    for j in range(2, s + 1):
        over(X(j), X(j - 1), T(j), F(j - 1), X(1))
    over(X(2), T(1), T(2), F(1))
    cost = np.zeros(len(col))
    cost[col["M"]] = 1.0
    h.changeColsCost(len(col), np.arange(len(col), dtype=np.int32), cost)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        return h.modelStatusToString(status)
    v = h.getSolution().col_value
    return {k: int(round(v[i])) for k, i in col.items()}


def ladder_chain(L: int, p: dict) -> tuple[Chain, int]:
    x = [0] + [p[f"x{j}"] for j in range(1, L)] + [0]
    tape = [p[f"t{j}"] for j in range(1, L)] + [0]
    return Chain(fwd_time=[1.0] + [0.0] * (L - 1), bwd_time=[0.0] * (L + 1), x_size=x,
                 tape_size=tape, fwd_overhead=[p[f"f{j}"] for j in range(L)],
                 bwd_overhead=[0] * (L + 1), name=f"classic-ladder-L{L}"), p["M"]


def ladder(stages: list, certificate_dir: str | None) -> list:
    rows = []
    for L in stages:
        p = ladder_milp(L)
        row = {"stages": L}
        if isinstance(p, str):
            row["milp"] = p
        else:
            chain, M = ladder_chain(L, p)
            row.update(milp="optimal", chain=chain.to_dict(), budget=M,
                       dp_weak=solvers.solve(chain, M, "dp-weak").makespan,
                       opt=solvers.solve(chain, M, "exhaustive", max_stages=L).makespan)
            if certificate_dir and L == 5:
                from remat_theory.analysis.hard_objectives import GapConfig, Hit, certificate

                cert = certificate(
                    Hit(0.0, chain.to_dict(), M), GapConfig(objective="dp-weak-gap", all_saved=True),
                    description="benchmarks/classic_growth.py ladder --stages 5: a gadget "
                                "(stages 3-4, x_5 = 0) above a ladder (stages 0-2), the MILP's "
                                "smallest budget; OPT by exhaustive search",
                    claim="DP_weak/OPT = 4 on the classic model (5 stages)")
                path = Path(certificate_dir) / "classic_weak_gap_L5.json"
                cert.save(path)
                row["certificate"] = path.name
        rows.append(row)
        print(row, flush=True)
    return rows


# ---------------------------------------------------------------------- the local search

def _search_chain(L: int, p: dict) -> Chain:
    x = [0] + p["x"] + [p["xl"]]
    return Chain(fwd_time=[1.0] + [0.0] * (L - 1), bwd_time=[0.0] * (L + 1), x_size=x,
                 tape_size=[x[j + 1] + p["e"][j] for j in range(L)], fwd_overhead=list(p["fo"]),
                 bwd_overhead=[0] * (L + 1), name=f"classic-search-L{L}")


def _params(chain: Chain, M: int) -> dict:
    x, L = list(chain.x_size), chain.length
    return {"x": x[1:-1], "xl": x[-1], "e": [chain.tape_size[i] - x[i + 1] for i in range(L)],
            "fo": list(chain.fwd_overhead), "M": M}


def search(L: int, seed: int, restarts: int, evals: int, certificate_dir: str | None) -> dict:
    import random

    rng = random.Random(seed)

    def score(p):
        c = _search_chain(L, p)
        w = solvers.solve(c, p["M"], "dp-weak").makespan
        if w is None:
            return 0.0
        o = solvers.solve(c, p["M"], "exhaustive", max_stages=L, time_limit=5)
        return w / o.makespan if o.status == "optimal" and o.makespan else 0.0

    def mutate(p):
        q = {k: (list(v) if isinstance(v, list) else v) for k, v in p.items()}
        for _ in range(rng.randint(1, 3)):
            k = rng.choice(["x", "e", "fo", "fo", "M", "xl"])
            d = rng.choice([-2, -1, 1, 2, rng.randint(-6, 6)])
            if k in ("M", "xl"):
                q[k] = max(0, q[k] + d)
            else:
                i = rng.randrange(len(q[k]))
                q[k][i] = max(0, q[k][i] + d)
        return q

    seeds = []
    if L % 2 == 0:
        seeds.append(_params(*CG.growth_chain(L // 2)))
    if L == 6:
        x5, t5, f5 = [0, 1, 2, 2, 4, 0], [2, 2, 2, 8, 0], [0, 15, 14, 6, 10]
        for i in range(5):
            x = x5[:i + 1] + [x5[i + 1]] + x5[i + 1:]
            t, f = t5[:i] + [t5[i]] + t5[i:], f5[:i] + [f5[i]] + f5[i:]
            seeds.append({"x": x[1:-1], "xl": x[-1], "e": [t[j] - x[j + 1] for j in range(L)],
                          "fo": f, "M": 20})
    if not seeds:
        raise SystemExit(f"no seed for {L} stages")
    best = None
    for _ in range(restarts):
        p = rng.choice(seeds)
        s = score(p)
        for _ in range(evals):
            q = mutate(p)
            sq = score(q)
            if sq >= s:
                p, s = q, sq
        if best is None or s > best[0]:
            best = (s, p)
        print({"score": s, "params": p}, flush=True)
    s, p = best
    out = {"stages": L, "seed": seed, "ratio": s, "chain": _search_chain(L, p).to_dict(),
           "budget": p["M"]}
    if certificate_dir and s > 1:
        from remat_theory.analysis.hard_objectives import GapConfig, Hit, certificate

        cmd = (f"benchmarks/classic_growth.py search --stages {L} --seed {seed} "
               f"--restarts {restarts} --evals {evals}")
        cert = certificate(Hit(0.0, out["chain"], p["M"]),
                           GapConfig(objective="dp-weak-gap", all_saved=True),
                           description=f"{cmd}: a local search from seeded chains; OPT by "
                                       f"exhaustive search",
                           claim=f"DP_weak/OPT = {s:g} on the classic model ({L} stages)")
        path = Path(certificate_dir) / f"classic_weak_gap_L{L}.json"
        cert.save(path)
        out["certificate"] = path.name
    print(out, flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("family")
    f.add_argument("--max-stages", type=int, default=40)
    f.add_argument("--exhaustive-max", type=int, default=10)
    f.add_argument("--out")
    lad = sub.add_parser("ladder")
    lad.add_argument("--stages", type=int, nargs="+", default=[4, 5, 6, 7, 8])
    lad.add_argument("--certificate-dir")
    lad.add_argument("--out")
    se = sub.add_parser("search")
    se.add_argument("--stages", type=int, default=6)
    se.add_argument("--seed", type=int, default=1)
    se.add_argument("--restarts", type=int, default=1)
    se.add_argument("--evals", type=int, default=500)
    se.add_argument("--certificate-dir")
    se.add_argument("--out")
    a = p.parse_args(argv)
    if a.cmd == "family":
        rows = family(a.max_stages, a.exhaustive_max)
        cmd = (f"python benchmarks/classic_growth.py family --max-stages {a.max_stages} "
               f"--exhaustive-max {a.exhaustive_max}")
    elif a.cmd == "ladder":
        rows = ladder(a.stages, a.certificate_dir)
        cmd = f"python benchmarks/classic_growth.py ladder --stages {' '.join(map(str, a.stages))}"
    else:
        rows = [search(a.stages, a.seed, a.restarts, a.evals, a.certificate_dir)]
        cmd = (f"python benchmarks/classic_growth.py search --stages {a.stages} --seed {a.seed} "
               f"--restarts {a.restarts} --evals {a.evals}")
    if a.out:
        Path(a.out).write_text(json.dumps({"command": cmd, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
