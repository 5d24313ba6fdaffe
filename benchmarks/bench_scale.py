"""Every registered solver on long chains under a time limit: does the limit hold?

For each length L of ``--stages`` (a homogeneous chain: fwd 1, bwd 2, x 3, tape 5, budget a
quarter of store-all), each time limit T of ``--time-limits`` and each solver, two runs, each
in a fresh process killed after ``--kill`` seconds:

- ``cli``: ``remat solve chain.json --budget B --solver S --time-limit T --json``, its wall
  time measured from outside: process start, imports, loading the chain, the solve, the
  referee's replay and printing the answer (the schedule included);
- ``python``: ``solvers.solve(chain, B, S, time_limit=T)`` on a chain already built, its wall
  time (the solve and the replay) measured around the call; ``load_s``: ``Chain.load`` of
  the same file.

A run *holds* when it answers (any status, or a refusal) within T + 10% + 2 s.  One JSON line
per run; ``--out`` writes them all, with the command and the machine's load, as one JSON file.

    python benchmarks/bench_scale.py --stages 1000,10000,100000,1000000 --time-limits 2,10 \
        --out benchmarks/results/scale_limits.json

docs/solvers.md ("Time limits at scale") shows the table of that file.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PY = r"""
import json, sys, time
t0 = time.perf_counter()
import solvers
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
path, budget, name, tl = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
solvers.names()
t1 = time.perf_counter()
chain = Chain.load(path)
t2 = time.perf_counter()
try:
    sol = solvers.solve(chain, budget, name, time_limit=tl)
    out = {"status": sol.status, "message": sol.message[:160]}
except RematError as e:
    out = {"status": "refused", "message": str(e)[:160]}
out.update(wall_s=round(time.perf_counter() - t2, 3), load_s=round(t2 - t1, 3),
           import_s=round(t1 - t0, 3))
print(json.dumps(out), flush=True)
"""


BATCH = r"""
import json, sys, time
import solvers
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
path, budget, tl = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
names = sys.argv[4].split(",")
solvers.names()
t0 = time.perf_counter()
chain = Chain.load(path)
load = time.perf_counter() - t0
for name in names:
    t1 = time.perf_counter()
    try:
        sol = solvers.solve(chain, budget, name, time_limit=tl)
        out = {"status": sol.status, "message": sol.message[:160]}
    except RematError as e:
        out = {"status": "refused", "message": str(e)[:160]}
    out.update(solver=name, wall_s=round(time.perf_counter() - t1, 3), load_s=round(load, 3))
    print(json.dumps(out), flush=True)
"""


def _env() -> dict:
    """The subprocesses' environment: this checkout first on the path, and Python's bytecode
    cached (in a folder of the system's temporary directory) as an installed package has
    it; a shell with PYTHONDONTWRITEBYTECODE set would otherwise compile every module of
    remat at each start (about 0.7 s of start-up)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               PYTHONPYCACHEPREFIX=os.path.join(tempfile.gettempdir(), "remat-bench-pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def warm_bytecode() -> None:
    """Compile every module the runs import once, before the first measured run."""
    subprocess.run([sys.executable, "-c", "import solvers, remat_theory.cli.main; "
                    "solvers.names(); import remat_theory.cli.commands.solve"],
                   env=_env(), capture_output=True, timeout=300)


def run_python_batch(path: Path, budget: int, names: list, limit: float, kill: float) -> dict:
    """``python`` runs of every solver in one process (the chain loaded once): each line
    as :func:`run_python`'s; a solver not reached before ``kill`` is missing."""
    env = _env()
    try:
        r = subprocess.run([sys.executable, "-c", BATCH, str(path), str(budget), f"{limit:g}",
                            ",".join(names)], capture_output=True, text=True, timeout=kill,
                           env=env)
        text = r.stdout
    except subprocess.TimeoutExpired as e:
        text = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    out = {}
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[d.pop("solver")] = d
    return out


def holds(wall: float, limit: float) -> bool:
    return wall <= limit * 1.1 + 2.0


def run_cli(path: Path, budget: int, name: str, limit: float, kill: float) -> dict:
    cmd = [sys.executable, "-m", "remat_theory.cli", "solve", str(path), "--budget", str(budget),
           "--solver", name, "--time-limit", f"{limit:g}", "--json"]
    env = _env()
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=kill, env=env)
    except subprocess.TimeoutExpired:
        return {"status": f"killed after {kill:g} s", "wall_s": round(time.perf_counter() - t0, 2)}
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(r.stdout)
        status = doc.get("status")
        message = doc.get("message") or ""
        if status == "error":
            status = "refused" if doc.get("error") == "SolverLimitError" else \
                f"error ({doc.get('error')})"
    except json.JSONDecodeError:
        status, message = f"exit {r.returncode}", (r.stderr.strip().splitlines() or [""])[-1]
    return {"status": status, "message": message[:160], "wall_s": round(wall, 3)}


def run_python(path: Path, budget: int, name: str, limit: float, kill: float) -> dict:
    env = _env()
    try:
        r = subprocess.run([sys.executable, "-c", PY, str(path), str(budget), name, f"{limit:g}"],
                           capture_output=True, text=True, timeout=kill, env=env)
    except subprocess.TimeoutExpired:
        return {"status": f"killed after {kill:g} s"}
    line = r.stdout.strip()
    if not line:
        return {"status": "error", "message": (r.stderr.strip().splitlines() or [""])[-1][:200]}
    return json.loads(line)


SHORT = {"feasible": "feas", "optimal": "opt", "infeasible": "infeas", "time_limit": "limit",
         "refused": "refused"}


def table(doc: dict) -> str:
    """Markdown: one row per solver, one column per (L, T): the status and the seconds
    from the command line / from Python, marked with '!' where the limit did not hold."""
    rows = doc["rows"]
    cols = sorted({(r["L"], r["time_limit"]) for r in rows})
    solvers_ = sorted({r["solver"] for r in rows})
    by = {(r["solver"], r["L"], r["time_limit"]): r for r in rows}

    def cell(r):
        if r is None:
            return "-"
        parts = []
        status = None
        for mode in ("cli", "python", "python-batch"):
            m = r.get(mode)
            if not m:
                continue
            status = status or SHORT.get(m.get("status"), m.get("status"))
            wall = m.get("wall_s")
            parts.append("-" if wall is None else f"{wall:.1f}" + ("" if m.get("holds") else "!"))
        return f"{status} {' / '.join(parts)}"

    head = "| solver | " + " | ".join(f"{L:,} st., T={T:g} s" for L, T in cols) + " |"
    lines = [head, "|---" * (len(cols) + 1) + "|"]
    for s in solvers_:
        lines.append(f"| `{s}` | " + " | ".join(cell(by.get((s, L, T))) for L, T in cols)
                     + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stages", default="1000,10000,100000,1000000")
    p.add_argument("--time-limits", default="2,10")
    p.add_argument("--kill", type=float, default=120.0, help="seconds before a run is killed")
    p.add_argument("--solvers", default=None, help="comma-separated (default: every registered)")
    p.add_argument("--modes", default="cli,python",
                   help="cli, python (a process per solve) and/or python-batch (the python "
                        "runs of every solver in one process per L and T, the chain loaded "
                        "once; killed after --kill seconds per solver)")
    p.add_argument("--out", default=None, help="write every line into this JSON file")
    p.add_argument("--table", default=None, metavar="FILE",
                   help="print the markdown table of a results file and exit")
    args = p.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    sys.path.insert(0, str(ROOT))
    import solvers
    from remat_theory.model.chain import Chain

    names = args.solvers.split(",") if args.solvers else solvers.names()
    limits = [float(v) for v in args.time_limits.split(",")]
    modes = args.modes.split(",")
    rows = []
    warm_bytecode()
    with tempfile.TemporaryDirectory() as tmp:
        for L in (int(v) for v in args.stages.split(",")):
            chain = Chain.homogeneous(L, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
            budget = chain.store_all_memory() // 4
            path = Path(tmp) / f"homogeneous-{L}.json"
            chain.save(path)
            del chain
            for limit in limits:
                batch = (run_python_batch(path, budget, names, limit, args.kill * len(names))
                         if "python-batch" in modes else {})
                for name in names:
                    row = {"L": L, "time_limit": limit, "solver": name, "budget": budget,
                           "load_before": round(os.getloadavg()[0], 2)}
                    for mode in modes:
                        if mode == "python-batch":
                            r = dict(batch.get(name, {"status": "not reached"}))
                        else:
                            r = (run_cli if mode == "cli" else run_python)(
                                path, budget, name, limit, args.kill)
                        wall = r.get("wall_s")
                        r["holds"] = wall is not None and holds(wall, limit)
                        row[mode] = r
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        doc = {"command": "python benchmarks/bench_scale.py " + " ".join(
                   a for a in (argv if argv is not None else sys.argv[1:])),
               "chain": "Chain.homogeneous(L, fwd_time=1.0, bwd_time=2.0, x_size=3, "
                        "tape_size=5), budget store_all_memory() // 4",
               "holds": "wall_s <= 1.1 * time_limit + 2",
               "load_average_at_end": os.getloadavg(),
               "cpu_count": os.cpu_count(),
               "rows": rows}
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
