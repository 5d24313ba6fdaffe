"""Build the instance library (remat_theory/data/library.json), deterministically.

    python benchmarks/build_library.py                      # everything, 5 s per exact solve
    python benchmarks/build_library.py --time-limit 10      # a longer proof limit
    python benchmarks/build_library.py --no-networks        # without torch (network classes left out)
    python benchmarks/build_library.py --out /tmp/lib.json --quick   # a few of each class

Classes (docs/library.md): random heterogeneous chains of several lengths
(``random-small``, ``random-8``, ``random-12``, ``random-30``; ``random-variations`` with
the optional fields ``fall-costs`` and ``unsaved-outputs``), the package's families
(``family-resnet``, ``family-transformer``, ``family-rnn``), members of the parametric hard
families of ``remat hard --family`` built on theory certificates (``hard-repeat``,
``hard-compose``, ``hard-drive``), the certificates of proofs/certificates that are a chain
and a budget of the canonical model (``certificate-<name>``), and chains of transformers
models at layer granularity from fake-tensor profiles (``network-<preset>-small``: the
preset's family at a small configuration with 6 layers; ``network-<preset>``: the published
configuration), timed by the H100 cost model of remat_theory/torch/realsize/devices.py.
Budgets run from the smallest feasible one to store-all.  Each instance is solved by
remat_theory.analysis.library_build.solve_instance; the seeds, lengths and budgets depend
on nothing else, so the file is the same on every run but for solves that meet the time
limit on a slower machine.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from remat_theory.analysis import certificates, families  # noqa: E402
from remat_theory.analysis.hard_families import FamilySpec, member  # noqa: E402
from remat_theory.analysis.library import FORMAT, OPTIMAL, dumps, from_dict  # noqa: E402
from remat_theory.analysis.library_build import (budget_ladder, instance_record,  # noqa: E402
                                                 solve_instance, store_all_makespan)
from remat_theory.model.errors import RematError  # noqa: E402
from solvers.feasibility import smallest_feasible_budget  # noqa: E402

OUT = os.path.join(ROOT, "remat_theory", "data", "library.json")
CERTS = os.path.join(ROOT, "proofs", "certificates")

# (class, family, lengths, seeds, budget fractions)
RANDOM = [
    ("random-small", "random", (3, 4, 5, 6), range(5), (0.0, 0.15, 0.45, 1.0)),
    ("random-8", "random", (7, 8), range(5), (0.0, 0.15, 0.45)),
    ("random-12", "random", (12,), range(6), (0.0, 0.2, 0.5)),
    ("random-30", "random", (30,), range(4), (0.0, 0.2, 0.5)),
    ("family-resnet", "resnet", (6, 10), range(3), (0.0, 0.2, 0.5)),
    ("family-transformer", "transformer", (6, 10), range(3), (0.0, 0.2, 0.5)),
    ("family-rnn", "rnn", (8, 16), range(2), (0.0, 0.2, 0.5)),
    # random chains with the optional fields a profiled network has (docs/model.md): the
    # recording forward's own costs, outputs no backward reads, and both (by seed)
    ("random-variations", "random", (4, 6), range(6), (0.0, 0.2, 0.5)),
]
VARIATIONS = (("fall-costs",), ("unsaved-outputs",), ("fall-costs", "unsaved-outputs"))
# (class, base certificate, family, members)
HARD = [
    ("hard-repeat", "persistence_gap", FamilySpec("repeat", stage=1), range(4)),
    ("hard-compose", "hard_weak_gap_L3_unsaved", FamilySpec("compose"), range(3)),
    ("hard-drive", "hard_dp_gap_L4", FamilySpec("drive", field="x_size", index=1), range(4)),
]
# (preset, batch, seq) at the published size, and the presets profiled small (6 layers)
NETWORKS = [("llama-2-7b", 1, 2048), ("gpt2-xl", 4, 1024), ("bert-large", 8, 512),
            ("vit-l/16", 32, 1), ("mistral-7b", 1, 4096), ("t5-large", 8, 512),
            ("llama-2-70b", 1, 4096)]
SMALL = ("llama-2-7b", "gpt2-xl", "bert-large", "vit-l/16", "t5-large", "bart-large",
         "qwen2-7b", "mistral-7b")
DEVICE = "H100-80GB"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Builder:
    def __init__(self, time_limit: float):
        self.time_limit = time_limit
        self.records = []

    def add(self, cls: str, chain, budgets, source: str, name: str) -> None:
        for b in budgets:
            t0 = time.perf_counter()
            solved = solve_instance(chain, b, self.time_limit)
            rec = instance_record(f"{cls}/{name}/b{b}", cls, chain, b, solved, source)
            self.records.append(rec)
            log(f"{rec['id']}: L={chain.length} {solved['status']} best {solved['best']['makespan']:.6g} "
                f"({solved['best']['solver']}) bound {solved['bound']['value']:.6g} "
                f"({solved['bound']['solver']}) {time.perf_counter() - t0:.1f} s")

    def ladder(self, cls, chain, fractions, source, name) -> None:
        budgets, how = budget_ladder(chain, fractions)
        self.add(cls, chain, budgets, f"{source}; smallest budget by {how}", name)


def build_random(b: Builder, quick: bool) -> None:
    for cls, fam, lengths, seeds, fracs in RANDOM:
        for L in lengths:
            for s in (list(seeds)[:1] if quick else seeds):
                kw = {"overheads": s % 2 == 0} if fam != "homogeneous" else {}
                chain = families.make(fam, L, s, **kw)
                how = f"families.make({fam!r}, {L}, seed={s}, {kw})"
                if cls == "random-variations":
                    names = VARIATIONS[s % len(VARIATIONS)]
                    chain = families.with_variations(chain, names, s)
                    how += f", with_variations({', '.join(names)}, seed={s})"
                b.ladder(cls, chain, fracs, how, f"L{L}-s{s}")


def build_hard(b: Builder, quick: bool) -> None:
    for cls, base, spec, members in HARD:
        chain0 = certificates.load(os.path.join(CERTS, base + ".json")).chain
        for n in (list(members)[:2] if quick else members):
            c = member(chain0, spec, n)
            if c is None:
                continue
            b.ladder(cls, c.replace(name=f"{base}-{spec.kind}-n{n}"), (0.0, 0.2, 0.5),
                     f"hard_families.member({base}, {spec.label()}, n={n})", f"{base}-n{n}")


def build_certificates(b: Builder, quick: bool) -> None:
    paths = sorted(glob.glob(os.path.join(CERTS, "*.json")))
    for path in (paths[:4] if quick else paths):
        stem = os.path.basename(path)[:-5]
        cert = certificates.load(path)
        if cert.chain.has_bandwidth:
            log(f"{stem}: skipped (a copy channel: offload instances are not in this library)")
            continue
        cls = f"certificate-{stem}"
        smallest, how = smallest_feasible_budget(cert.chain)
        if cert.budget < smallest:
            log(f"{stem}: budget {cert.budget} is below the canonical model's smallest feasible "
                f"budget {smallest} ({how}; the certificate is about Drop): its ladder only")
            b.ladder(cls, cert.chain, (0.0, 1.0), f"proofs/certificates/{stem}.json chain",
                     "ladder")
            continue
        certificates.replay(cert)  # every recorded schedule through the simulator
        opt = [k for k, e in cert.solutions.items() if e["status"] == OPTIMAL
               and e["optimal_for"] == "all" and e["schedule"] is not None]
        if opt:
            certificates.reprove(cert, labels=opt[:1])  # the recorded solver proves it again
            e = cert.solutions[opt[0]]
            solved = {"best": {"makespan": e["makespan"], "solver": e["solver"],
                               "schedule": list(e["schedule"])},
                      "bound": {"value": e["makespan"],
                                "solver": f"{e['solver']} (certificate {stem}, solved again)"},
                      "status": OPTIMAL}
            b.records.append(instance_record(f"{cls}/b{cert.budget}", cls, cert.chain,
                                             cert.budget, solved, f"proofs/certificates/{stem}.json"))
            log(f"{cls}/b{cert.budget}: certificate optimum {e['makespan']}")
        else:
            b.add(cls, cert.chain, [cert.budget], f"proofs/certificates/{stem}.json", "cert")
        if cert.chain.length <= 12:  # the same chain from its smallest budget to store-all
            budgets, how = budget_ladder(cert.chain, (0.0, 1.0))
            b.add(cls, cert.chain, [x for x in budgets if x != cert.budget],
                  f"proofs/certificates/{stem}.json chain; smallest budget by {how}", "ladder")


def network_chain(preset: str, batch: int, seq: int, small: bool):
    """A preset's chain from fake tensors, timed by the cost model (needs torch)."""
    from remat_theory.torch.realsize.chain import real_size_profile
    from remat_theory.torch.realsize.devices import device_named
    from remat_theory.torch.realsize.planner import timed
    from remat_theory.torch.realsize.presets import LAYER_FIELDS, TINY, spec_of
    overrides = None
    if small:
        overrides = dict(TINY[preset])
        for f in LAYER_FIELDS:
            if f in overrides:
                overrides[f] = 6 if f in ("num_hidden_layers", "n_layer") else 3
    spec = spec_of(preset, overrides)
    rs = real_size_profile(spec, batch, seq, "fp32" if small else "bf16")
    chain = timed(rs, device_named(DEVICE)).chain
    return chain.replace(name=f"{preset}{'-small' if small else ''} b{batch} s{seq}")


def build_networks(b: Builder, quick: bool) -> None:
    for preset in (SMALL[:2] if quick else SMALL):
        t0 = time.perf_counter()
        chain = network_chain(preset, 2, 32, small=True)
        log(f"{preset} small: {chain.length} stages, profiled in {time.perf_counter() - t0:.1f} s")
        b.ladder(f"network-{preset.replace('/', '')}-small", chain, (0.0, 0.2, 0.5),
                 f"{preset} at a small configuration (6 layers), batch 2, seq 32, fp32, {DEVICE} "
                 f"cost model", "b2-s32")
    for preset, batch, seq in (NETWORKS[:1] if quick else NETWORKS):
        t0 = time.perf_counter()
        chain = network_chain(preset, batch, seq, small=False)
        log(f"{preset}: {chain.length} stages, profiled in {time.perf_counter() - t0:.1f} s")
        b.ladder(f"network-{preset.replace('/', '')}", chain, (0.0, 0.1, 0.3, 1.0),
                 f"{preset}, batch {batch}, seq {seq}, bf16, {DEVICE} cost model",
                 f"b{batch}-s{seq}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=5.0,
                    help="seconds per exact solve (default 5)")
    ap.add_argument("--out", default=OUT, help="output file (default: the shipped library)")
    ap.add_argument("--no-networks", action="store_true", help="leave out the network classes "
                    "(they need torch and transformers)")
    ap.add_argument("--quick", action="store_true", help="a few instances of each class")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    b = Builder(args.time_limit)
    build_random(b, args.quick)
    build_hard(b, args.quick)
    build_certificates(b, args.quick)
    if not args.no_networks:
        build_networks(b, args.quick)
    data = {"format": FORMAT,
            "description": "remat instance library: chains and budgets with the best known "
                           "makespan and a proved lower bound (docs/library.md)",
            "built_with": {"command": "python benchmarks/build_library.py"
                                      + (f" --time-limit {args.time_limit:g}"),
                           "time_limit": args.time_limit, "networks": not args.no_networks,
                           "device_cost_model": DEVICE},
            "instances": b.records}
    lib = from_dict(data, "built library")  # the loader's checks on what is written
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(dumps(data) + "\n")
    log(f"{len(lib)} instances, {lib.proved} proved optimal ({lib.proved / len(lib):.1%}), "
        f"{len(lib.classes())} classes, {time.perf_counter() - t0:.0f} s -> "
        f"{os.path.relpath(os.path.abspath(args.out), ROOT)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RematError as e:
        print(f"build_library: error: {e}", file=sys.stderr)
        sys.exit(2)
