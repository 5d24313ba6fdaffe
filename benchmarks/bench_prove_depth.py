"""Proofs at depth (issue 40, item 4): how often is the weak DP's schedule proven optimal over
all schedules, how fast, and with what gap where not, on deep chains at five budgets.

Chains:

* ``random L``: ``families.make("random", L, seed)`` (the chains of ``bench_ilp.py speed``
  and ``bench_prove.py``);
* ``net L``: a real network's profile carried to real depth: the transformer blocks of
  ``benchmarks/results/offload_chains/transformer-small.json`` (profiled on CPU, one stage
  per block, every field as measured: overheads, recording costs, unsaved outputs) repeated
  to ``L`` blocks between its own first and last stage, times rounded to integer
  microseconds (so a certificate's bound closes on integers, proofs/certified.md) and sizes
  rounded up to units of 256 KiB (byte-exact, the weak DP's table would need terabytes);
* ``--preset NAME``: one of the package's own families at its published depth
  (``remat_theory.torch.realsize`` presets: llama-2-7b has 32 layers, gpt2-xl 48,
  llama-2-70b 80), profiled on fake tensors (no GPU, nothing downloaded) at batch 1,
  sequence 2048, bf16, one stage per layer, with the H100-80GB device model's times rounded
  to integer microseconds and sizes rounded up to units of half the smallest activation.

Budgets: five, evenly spaced from the weak DP's smallest feasible budget to store-all (both
included).  Each instance: ``prove`` with ``checkable=true`` under ``--time-limit``; an
``optimal`` answer's certificate is written to ``--cert-dir`` and checked by
``proofs/check_certificate.py`` in a separate process (which imports no solver).  One JSON
object per instance; ``--out`` writes them all with the command and the machine's load.

    python benchmarks/bench_prove_depth.py --random 30 60 100 --net 32 48 80 --seeds 1 \
        --time-limit 60 --out benchmarks/results/prove_depth.json
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import solvers  # noqa: E402
from remat_theory.analysis.families import make  # noqa: E402
from remat_theory.model.chain import Chain  # noqa: E402

NET = ROOT / "benchmarks" / "results" / "offload_chains" / "transformer-small.json"
CHECKER = ROOT / "proofs" / "check_certificate.py"
UNIT = 256 * 1024  # the network chains' size unit (bytes): byte-exact tables are too big


def net_chain(blocks: int) -> Chain:
    """The profiled transformer carried to ``blocks`` blocks (module docstring)."""
    d = json.loads(NET.read_text())
    L0 = len(d["fwd_time"])
    body = list(range(1, L0 - 1))  # the block stages; 0 is the embedding, L0-1 the head

    def stages(key, n):  # per-stage fields (length L, or L+1 with the loss)
        v = d[key]
        mid = [v[body[k % len(body)]] for k in range(blocks)]
        return [v[0]] + mid + v[L0 - 1:n]

    out = {"format": "remat-chain/1", "name": f"transformer-small-x{blocks}"}
    for key in ("fwd_time", "fall_time", "fwd_overhead", "fall_overhead", "tape_size",
                "output_saved"):
        out[key] = stages(key, L0)
    for key in ("bwd_time", "bwd_overhead"):
        out[key] = stages(key, L0 + 1)
    x = d["x_size"]  # x_0, the block outputs, the head's output
    out["x_size"] = [x[0]] + [x[body[k % len(body)]] for k in range(blocks)] + x[L0 - 1:]
    return _rounded(out, UNIT)


def _rounded(d: dict, unit: int) -> Chain:
    """The chain of ``d`` (a chain's dict, times in seconds, sizes in bytes) with its times
    in whole microseconds and its sizes rounded up to whole ``unit``s (a tape never below
    the output it holds)."""
    for key in ("fwd_time", "fall_time", "bwd_time"):
        if key in d:
            d[key] = [float(round(t * 1e6)) for t in d[key]]
    for key in ("x_size", "tape_size", "fwd_overhead", "fall_overhead", "bwd_overhead"):
        if key in d:
            d[key] = [-(-v // unit) for v in d[key]]
    d["tape_size"] = [max(t, d["x_size"][i + 1]) for i, t in enumerate(d["tape_size"])]
    return Chain.from_dict(d)


PRESET_DEVICE = "H100-80GB"


def preset_chain(name: str, batch: int = 1, seq: int = 2048) -> Chain:
    """The realsize preset ``name`` as a chain (module docstring)."""
    from remat_theory.torch.realsize.chain import real_size_profile
    from remat_theory.torch.realsize.devices import device_named
    from remat_theory.torch.realsize.planner import timed
    from remat_theory.torch.realsize.presets import spec_of
    prof = timed(real_size_profile(spec_of(name), batch, seq), device_named(PRESET_DEVICE))
    d = prof.chain.to_dict()
    unit = max(1, min(d["x_size"]) // 2)
    d["name"] = f"{name} (b{batch}, s{seq}, {PRESET_DEVICE}, unit {unit} B)"
    return _rounded(d, unit)


def budgets(chain: Chain) -> list:
    lo = solvers.solve(chain, 0, "dp-weak").min_budget
    hi = chain.store_all_memory()
    return sorted({lo + (hi - lo) * k // 4 for k in range(5)})


def instances(args):
    for L in args.random:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            yield f"random {L}", seed, make("random", L, seed)
    for blocks in args.net:
        yield f"net {blocks + 2}", 0, net_chain(blocks)
    for name in getattr(args, "preset", None) or []:
        yield name, 0, preset_chain(name)


def check(path: Path) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(CHECKER), str(path)], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return {"accepted": p.returncode == 0, "check_seconds": round(time.perf_counter() - t0, 2),
            "checker": (p.stdout.strip() or p.stderr.strip()).replace(
                str(path.parent) + os.sep, "DIR" + os.sep)[-300:]}


def _subset(tokens):
    """``--only`` as {chain name without spaces: {budget indices}} (None: every instance);
    each token ``NAME:K[,K...]``, e.g. ``random30:2,3`` or ``net32:0``."""
    if not tokens:
        return None
    out = {}
    for tok in tokens:
        name, _, ks = tok.partition(":")
        if not ks:
            raise SystemExit(f"--only {tok!r}: expected NAME:K[,K...] (e.g. random30:2,3)")
        out.setdefault(name, set()).update(int(k) for k in ks.split(","))
    return out


def run(args) -> list:
    cert_dir = Path(args.cert_dir or tempfile.mkdtemp(prefix="remat-proofs-"))
    cert_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    only = _subset(args.only)
    for name, seed, chain in instances(args):
        key = name.replace(" ", "")
        if only is not None and key not in only:
            continue
        bs = budgets(chain)
        for k, b in enumerate(bs):
            if only is not None and k not in only[key]:
                continue
            t0 = time.perf_counter()
            opts = {} if args.lagrange is None else {"lagrange": args.lagrange}
            if args.lagrange_window is not None:
                opts["lagrange_window"] = args.lagrange_window
            if getattr(args, "cap", False):
                opts["cap"] = True
                if getattr(args, "cap_tolerance", None) is not None:
                    opts["cap_tolerance"] = args.cap_tolerance
            sol = solvers.solve(chain, b, "prove", time_limit=args.time_limit, checkable=True,
                                **opts)
            secs = time.perf_counter() - t0
            row = {"chain": name, "stages": chain.length, "seed": seed, "budget_index": k,
                   "budget": b, "status": sol.status, "makespan": sol.makespan,
                   "bound": sol.bound, "seconds": round(secs, 2),
                   "proved_seconds": sol.info.get("proved_seconds"),
                   "gap": None if sol.makespan is None or sol.bound is None else
                   round((sol.makespan - sol.bound) / sol.makespan, 5),
                   "certificate": sol.info.get("certificate"),
                   "relaxation": sol.info.get("relaxation"),
                   "lagrange": sol.info.get("lagrange"),
                   "bounded_search": sol.info.get("bounded_search"),
                   "proof_search": sol.info.get("proof_search")}
            ps = sol.info.get("proof_search") or {}
            row.update(cert_seconds=ps.get("seconds"), cert_nodes=ps.get("nodes"),
                       cert_cuts=ps.get("cuts"), cert_stopped=ps.get("stopped"))
            proof = sol.info.get("proof")
            if proof is not None:
                path = cert_dir / f"{name.replace(' ', '')}_s{seed}_b{k}.json"
                path.write_text(json.dumps(proof))
                row.update(check(path), proof_bytes=path.stat().st_size)
            row["load_1min"] = os.getloadavg()[0]
            print(json.dumps({k2: v for k2, v in row.items()
                              if k2 not in ("relaxation", "bounded_search", "proof_search",
                                            "lagrange")}),
                  flush=True)
            rows.append(row)
    return rows


def write_certificate(family: str, L, seed: int, k: int, path: str, cuts=None,
                      node_cuts=None, time_limit=None) -> None:
    """The certificate of the weak DP's schedule of ``make(family, L, seed)`` (``family``
    "preset": :func:`preset_chain` of the preset named ``L``; "net": :func:`net_chain` of
    ``L`` blocks) at the k-th of the five
    budgets (``--certify``), written to ``path``."""
    from solvers.bounds.certified import certificate
    chain = (preset_chain(L) if family == "preset" else net_chain(int(L)) if family == "net"
             else make(family, int(L), seed))
    b = budgets(chain)[k]
    sol = solvers.solve(chain, b, "dp-weak")
    opts = {key: v for key, v in (("cuts", cuts), ("node_cuts", node_cuts)) if v is not None}
    cert, info = certificate(chain, b, sol.schedule, time_limit=time_limit, **opts)
    if cert is None:
        raise SystemExit(f"no certificate: {info}")
    cert["command"] = " ".join(["python", "benchmarks/bench_prove_depth.py"] + sys.argv[1:])
    Path(path).write_text(json.dumps(cert) + "\n")
    print(json.dumps(info))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--certify", nargs=5, metavar=("FAMILY", "L", "SEED", "K", "PATH"),
                    help="only write the certificate of one instance (budget index K; "
                         "FAMILY preset: L is the preset's name; net: L blocks)")
    ap.add_argument("--cut-rounds", type=int, default=None,
                    help="with --certify: rounds of root cuts (default: the producer's)")
    ap.add_argument("--node-cut-rounds", type=int, default=None,
                    help="with --certify: rounds of cuts at shallow nodes")
    ap.add_argument("--certify-time-limit", type=float, default=None, metavar="S",
                    help="with --certify: stop the certificate search after S seconds "
                         "(default: none)")
    ap.add_argument("--random", type=int, nargs="*", default=[30, 60, 100])
    ap.add_argument("--net", type=int, nargs="*", default=[30, 46, 78],
                    help="transformer blocks (the chain has two stages more)")
    ap.add_argument("--preset", nargs="*", default=[],
                    help="package families at their depth: llama-2-7b (32 layers), gpt2-xl "
                         "(48), llama-2-70b (80)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="the random chains' seeds are FIRST_SEED .. FIRST_SEED+SEEDS-1")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--cert-dir", default=None)
    ap.add_argument("--only", nargs="*", default=None, metavar="NAME:K",
                    help="only these instances: chain name without spaces and budget "
                         "indices 0-4, e.g. random30:2,3 net32:0")
    ap.add_argument("--lagrange", type=float, default=None, metavar="S",
                    help="prove -o lagrange=S: the phase-block Lagrangian bound first, S s")
    ap.add_argument("--lagrange-window", type=int, default=None, metavar="W",
                    help="prove -o lagrange_window=W (with --lagrange)")
    ap.add_argument("--cap", action="store_true",
                    help="prove -o cap=true: the relaxation's objective a row capped below "
                         "the weak DP's makespan")
    ap.add_argument("--cap-tolerance", type=float, default=None, metavar="TOL",
                    help="prove -o cap_tolerance=TOL (with --cap; default HiGHS's 1e-6)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.certify:
        f, L, seed, k, path = a.certify
        write_certificate(f, L, int(seed), int(k), path, a.cut_rounds, a.node_cut_rounds,
                          a.certify_time_limit)
        return
    t0 = time.perf_counter()
    rows = run(a)
    res = {"command": " ".join(["python", "benchmarks/bench_prove_depth.py"] + sys.argv[1:]),
           "cpus": os.cpu_count(), "wall_seconds": round(time.perf_counter() - t0, 1),
           "runs": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
