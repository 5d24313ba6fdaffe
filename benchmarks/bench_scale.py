"""Every registered solver on long chains under a time limit: does the limit hold?

For each length L of ``--stages`` (a homogeneous chain: fwd 1, bwd 2, x 3, tape 5, budget a
quarter of store-all; with ``--bandwidth``, a copy channel too, and by default the solvers
that model it), each time limit T of ``--time-limits`` and each solver, two runs, each
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

    python benchmarks/bench_scale.py --bandwidth 5 --stages 1000,10000,100000 \
        --time-limits 2,10 --out benchmarks/results/scale_limits_offload.json

docs/solvers.md ("Time limits at scale") shows the tables of those files.
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

# One process: the chain loaded once, then each solver of the comma-separated list solved
# in turn, a JSON line each (a ``python`` run is this with one solver).
SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
import solvers
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
path, budget, tl, names = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
solvers.names()
t1 = time.perf_counter()
chain = Chain.load(path)
t2 = time.perf_counter()
for name in names.split(","):
    t3 = time.perf_counter()
    try:
        sol = solvers.solve(chain, budget, name, time_limit=tl)
        out = {"status": sol.status, "message": sol.message[:160]}
    except RematError as e:
        out = {"status": "refused", "message": str(e)[:160]}
    out.update(solver=name, wall_s=round(time.perf_counter() - t3, 3),
               load_s=round(t2 - t1, 3), import_s=round(t1 - t0, 3))
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
    out, _ = _run_script(path, budget, names, limit, kill)
    return out


def _run_script(path: Path, budget: int, names: list, limit: float, kill: float):
    """:data:`SCRIPT` in a fresh process: its lines by solver, and its stderr (None when
    killed after ``kill`` seconds)."""
    try:
        r = subprocess.run([sys.executable, "-c", SCRIPT, str(path), str(budget), f"{limit:g}",
                            ",".join(names)], capture_output=True, text=True, timeout=kill,
                           env=_env())
        text, err = r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        text = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = None
    out = {}
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[d.pop("solver")] = d
    return out, err


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
    out, err = _run_script(path, budget, [name], limit, kill)
    if name in out:
        return out[name]
    if err is None:
        return {"status": f"killed after {kill:g} s"}
    return {"status": "error", "message": (err.strip().splitlines() or [""])[-1][:200]}


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
    p.add_argument("--solvers", default=None,
                   help="comma-separated (default: every registered; with --bandwidth, every "
                        "one that models it and their variants)")
    p.add_argument("--bandwidth", type=float, default=None,
                   help="the chain's copy channel (bytes per second): the offload solvers' "
                        "runs (default: no channel)")
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

    if args.solvers:
        names = args.solvers.split(",")
    elif args.bandwidth is not None:
        names = [label for n in solvers.names() if "bandwidth" in solvers.get(n).supports
                 for label in (n, *(v.label for v in solvers.get(n).variants))]
    else:
        names = solvers.names()
    limits = [float(v) for v in args.time_limits.split(",")]
    modes = args.modes.split(",")
    rows = []
    warm_bytecode()
    with tempfile.TemporaryDirectory() as tmp:
        for L in (int(v) for v in args.stages.split(",")):
            chain = Chain.homogeneous(L, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
            if args.bandwidth is not None:
                chain = chain.replace(bandwidth=args.bandwidth)
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
                        "tape_size=5)" + ("" if args.bandwidth is None else
                                          f".replace(bandwidth={args.bandwidth:g})")
                        + ", budget store_all_memory() // 4",
               "holds": "wall_s <= 1.1 * time_limit + 2",
               "load_average_at_end": os.getloadavg(),
               "cpu_count": os.cpu_count(),
               "rows": rows}
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
