"""Is the moment relaxation's branch and bound HiGHS's weakness, or the relaxation's? The
same relaxation (``solvers/ilp/relaxation.py``) of one instance, from the same MIP start
(the weak DP's schedule), given to HiGHS through the package's own driver and, where they
are installed, to SCIP (``pip install pyscipopt``) and to OR-Tools' CP-SAT (``pip install
ortools``), each for the same seconds in one run; each row says the bound it proved.

    python benchmarks/bench_mip_solvers.py --random 30 --seeds 2 --budget tight \
        --time-limit 150 --out benchmarks/results/mip_solvers_tight30.json

Neither extra solver is a dependency of the package: a solver that is not installed is
named in the row (``"not installed"``) and skipped.  The start is checked by each solver
(SCIP: ``addSol``; CP-SAT takes it as a hint only).  HiGHS 1.16 misannounces the start's
objective with presolve at tight budgets (proofs/ilp.md section 9); the package's driver
restarts such a run without presolve, and SCIP and CP-SAT have their own presolve.
``--lp`` adds the relaxation's LP optimum (HiGHS), the root every tree starts from.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import solvers  # noqa: E402
from bench_ilp import budgets_of, machine  # noqa: E402
from bench_prove_depth import budgets as five_budgets  # noqa: E402
from bench_prove_depth import net_chain  # noqa: E402
from remat_theory.analysis.families import make  # noqa: E402
from solvers.ilp import backends, relaxation  # noqa: E402

SOLVERS = ("highs", "scip", "cpsat")


def _highs(model, start, seconds, scale) -> dict:
    res = backends.run_model(model, "highs", seconds, start, 1, scale)
    return {"bound": res.bound, "incumbent": res.objective, "proven": res.proven,
            "status": res.status_text, "retries": list(res.retries)}


def _scip(mps, start, seconds, constant) -> dict:
    try:
        from pyscipopt import Model
    except ImportError:
        return {"status": "not installed (pip install pyscipopt)"}
    m = Model()
    m.hideOutput()
    m.readProblem(mps)
    m.setParam("limits/time", seconds)
    m.setParam("limits/gap", 0.0)
    m.setParam("limits/absgap", 0.0)
    sol = m.createSol()
    for v in m.getVars():
        m.setSolVal(sol, v, float(start.get(v.name, 0)))
    accepted = m.addSol(sol)
    m.optimize()
    has = m.getNSols() > 0
    return {"bound": m.getDualbound() + constant,
            "incumbent": m.getObjVal() + constant if has else None,
            "proven": m.getStatus() == "optimal", "status": m.getStatus(),
            "start_accepted": bool(accepted), "nodes": m.getNNodes()}


def _cpsat(mps, start, seconds, constant, workers) -> dict:
    try:
        from ortools.linear_solver.python import model_builder as mb
    except ImportError:
        return {"status": "not installed (pip install ortools)"}
    m = mb.ModelBuilder()
    m.import_from_mps_file(mps)
    for v in m.get_variables():
        m.add_hint(v, float(start.get(v.name, 0)))
    s = mb.Solver("sat")
    s.set_time_limit_in_seconds(seconds)
    s.set_solver_specific_parameters(f"num_workers:{workers}")
    st = s.solve(m)
    has = st in (mb.SolveStatus.OPTIMAL, mb.SolveStatus.FEASIBLE)
    return {"bound": s.best_objective_bound + constant,
            "incumbent": s.objective_value + constant if has else None,
            "proven": st == mb.SolveStatus.OPTIMAL, "status": str(st), "workers": workers}


def _lp_root(mps, constant) -> float:
    import highspy
    backends.silence_highs_banner()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.readModel(mps)
    h.setOptionValue("solve_relaxation", True)
    h.run()
    return h.getInfo().objective_function_value + constant


def versions() -> dict:
    """The versions of the solvers' Python packages that are installed."""
    from importlib import metadata
    out = {}
    for pkg in ("highspy", "pyscipopt", "ortools"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def instances(args):
    for L in args.random:
        for seed in range(args.seeds):
            chain = make("random", L, seed)
            b = budgets_of(chain)
            yield f"random {L}", seed, chain, (b[args.budget] if args.budget in b else
                                              five_budgets(chain)[int(args.budget)])
    for blocks in args.net:
        chain = net_chain(blocks)
        yield f"net {blocks + 2}", 0, chain, five_budgets(chain)[int(args.net_budget)]


def run(args) -> list:
    rows = []
    for name, seed, chain, budget in instances(args):
        weak = solvers.solve(chain, budget, "dp-weak")
        g = chain.size_gcd()
        model = relaxation.build_relaxation(chain.scaled_sizes(g), budget // g)
        start = relaxation.relaxation_point(chain, weak.schedule)
        scale = max(1.0, chain.ideal_makespan())
        row = {"chain": name, "seed": seed, "budget": budget, "weak_dp": weak.makespan,
               "binaries": relaxation.binaries(chain.length)}
        with tempfile.TemporaryDirectory() as tmp:
            mps = os.path.join(tmp, "relaxation.mps")
            model.prob.writeMPS(mps)
            if args.lp:
                row["lp_root"] = _lp_root(mps, model.constant)
            for s in args.solvers:
                t0 = time.perf_counter()
                if s == "highs":
                    out = _highs(model, start, args.time_limit, scale)
                elif s == "scip":
                    out = _scip(mps, start, args.time_limit, model.constant)
                else:
                    out = _cpsat(mps, start, args.time_limit, model.constant, args.workers)
                out["seconds"] = round(time.perf_counter() - t0, 1)
                row[s] = out
        row["load_1min"] = os.getloadavg()[0]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def instance_arguments(ap, budget: str, net_budget: str) -> None:
    """The options :func:`instances` reads (the relaxation LNS takes the same)."""
    ap.add_argument("--random", type=int, nargs="*", default=[30])
    ap.add_argument("--net", type=int, nargs="*", default=[],
                    help="transformer blocks (the chain has two stages more)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--budget", default=budget,
                    help="random chains: min, tight (10%% of the way), middle, store_all, or "
                         "0-4 (the five budgets of bench_prove_depth.py)")
    ap.add_argument("--net-budget", default=net_budget, help="network chains: 0-4")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    instance_arguments(ap, "tight", "2")
    ap.add_argument("--solvers", nargs="*", default=list(SOLVERS), choices=SOLVERS)
    ap.add_argument("--time-limit", type=float, default=150.0)
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT's workers")
    ap.add_argument("--lp", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    rows = run(args)
    if args.out:
        cmd = " ".join(["python benchmarks/bench_mip_solvers.py"] + sys.argv[1:])
        Path(args.out).write_text(json.dumps({"command": cmd, "time_limit": args.time_limit,
                                              "machine": machine(), "versions": versions(),
                                              "runs": rows}, indent=1))

if __name__ == "__main__":
    main()
