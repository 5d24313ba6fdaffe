"""Complete enumeration of the classic model at small sizes (proofs/classic_model.md).

The *classic model* is the Rotor papers' own: every output saved, no recording costs
(``fall_time = fwd_time``, ``fall_overhead = fwd_overhead``), transient overheads allowed.
For ``L`` stages and a size bound ``k`` this module visits **every** chain with

* ``x_size[0] = 0`` and ``x_size[1..L]`` in ``0..k``,
* ``tape_size[i] = x_size[i+1] + e_i`` with ``e_i`` in ``0..k``,
* ``fwd_overhead`` in ``0..k`` (``fwd_overhead = 0`` with ``zero_fwd_overhead``),
* ``bwd_overhead`` in ``0..k`` (``bwd_overhead = 0`` with ``zero_bwd_overhead``),
* ``bwd_time = 0`` and ``fwd_time`` in a grid (default ``{0, 1}^L`` but all zeros),
* with ``unsaved``, every ``output_saved`` in ``{true, false}^L`` (the row "unsaved
  outputs, no recording costs"; the classic model is the pattern of all ``true``),

and, for each, every budget where a measure can change (below).  Lemma C.1 and C.2 of
proofs/classic_model.md say why ``x_size[0] = 0`` and ``bwd_time = 0`` lose nothing: a
chain with ``x_size[0] = a`` is the chain with ``0`` there, ``a`` more on ``bwd_overhead[0]``
and a budget ``a`` smaller, schedule by schedule; backward times add one constant to every
makespan, which can only lower a ratio above 1 and never changes which schedule is optimal.

Measures (each a question of proofs/README's open rows):

* ``weak``: ``dp-weak`` against exhaustive search.  For each time vector, the weak DP's
  profile (:func:`remat_theory.analysis.hard_objectives.class_profile`) is read at the
  **last** budget of each of its steps, where OPT (non-increasing in the budget) is
  smallest: the class loses somewhere on the step iff it loses there.
* ``budget``: the smallest budget of ``dp-weak`` and of ``dp`` against the smallest budget
  ``m*`` of any schedule (exhaustive bottleneck search; times play no part); every chain
  also checks ``m* <= weak <= persistent <= m* + max_i x_i`` (Theorem C.4).
* ``monotone`` (chains with ``fwd_overhead = 0`` only, the "one run without forward
  overheads" row): exhaustive search restricted to one weakly increasing run of forwards
  per phase (``schedule_class="monotone"``) against the unrestricted search, at every
  budget from the smallest one of any schedule to store-all.

The space is cut into shards of consecutive configurations; :func:`enumerate_classic` runs
them with :func:`remat_theory.analysis.parallel.parallel_map` and appends one JSON line per
finished shard to its output file, so an interrupted run resumes where it stopped (shards
already in the file are skipped; the file's first line fixes the configuration and a
different one is refused).
"""
from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import solvers
from solvers import dp as _dp
from solvers import dp_weak as _dpw
from solvers import exhaustive as _ex

from remat_theory.analysis.hard_objectives import class_profile
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.validation import check_int

MEASURES = ("weak", "budget", "monotone")
FORMAT = "remat-classic-enum/1"
KEEP = 200  # records kept per shard and measure (largest ratios first): every loss, in practice


@dataclass(frozen=True)
class EnumConfig:
    """One enumeration: ``stages`` (L), ``max_size`` (k), the forward-time values tried
    per stage, the measures, and whether forward / backward overheads are fixed at 0."""

    stages: int
    max_size: int
    times: tuple = (0, 1)
    measures: tuple = ("weak", "budget")
    zero_fwd_overhead: bool = False
    zero_bwd_overhead: bool = False
    unsaved: bool = False

    def __post_init__(self) -> None:
        check_int(self.stages, "stages", minimum=1)
        check_int(self.max_size, "max_size", minimum=0)
        object.__setattr__(self, "times", tuple(self.times))
        object.__setattr__(self, "measures", tuple(self.measures))
        if self.stages > 6:
            raise RematError(f"stages = {self.stages}: a complete enumeration is meant for at "
                             f"most 6 stages (the space grows as (k+1)^(5L))")
        if not self.times or any(not isinstance(t, int) or t < 0 for t in self.times):
            raise RematError(f"times = {self.times!r} must be non-negative integers")
        for m in self.measures:
            if m not in MEASURES:
                raise RematError(f"measure {m!r} is unknown (known: {', '.join(MEASURES)})")
        if "monotone" in self.measures and not self.zero_fwd_overhead:
            raise RematError("measure 'monotone' is the row 'one run without forward "
                             "overheads': it needs zero_fwd_overhead=True")

    def size(self) -> int:
        """The number of memory configurations (chains up to their times)."""
        k1, L = self.max_size + 1, self.stages
        fo = 1 if self.zero_fwd_overhead else k1 ** L
        bo = 1 if self.zero_bwd_overhead else k1 ** (L + 1)
        return k1 ** L * k1 ** L * fo * bo * (2 ** L if self.unsaved else 1)

    def time_vectors(self) -> list:
        return [v for v in itertools.product(self.times, repeat=self.stages) if any(v)]


def memory_config(cfg: EnumConfig, index: int) -> dict:
    """The ``index``-th memory configuration (mixed radix, last field fastest)."""
    if not 0 <= index < cfg.size():
        raise RematError(f"index = {index} is outside 0..{cfg.size() - 1}")
    L, k1 = cfg.stages, cfg.max_size + 1
    digits = []
    n_fo = 0 if cfg.zero_fwd_overhead else L
    n_bo = 0 if cfg.zero_bwd_overhead else L + 1
    pattern = 0
    if cfg.unsaved:
        index, pattern = divmod(index, 2 ** L)
    for _ in range(n_bo + n_fo + L + L):
        index, d = divmod(index, k1)
        digits.append(d)
    digits.reverse()
    saved = [not (pattern >> i) & 1 for i in range(L)]
    x = [0] + digits[:L]
    ex = digits[L:2 * L]
    fo = digits[2 * L:2 * L + n_fo] if n_fo else [0] * L
    bo = digits[2 * L + n_fo:] if n_bo else [0] * (L + 1)
    return {"x_size": x, "tape_size": [x[i + 1] + ex[i] for i in range(L)],
            "fwd_overhead": fo, "bwd_overhead": bo, "output_saved": saved}


def chain_of(mem: dict, fwd: tuple, name: str = "classic") -> Chain:
    L = len(fwd)
    return Chain(name=name, fwd_time=[float(t) for t in fwd], bwd_time=[0.0] * (L + 1),
                 x_size=mem["x_size"], tape_size=mem["tape_size"],
                 fwd_overhead=mem["fwd_overhead"], bwd_overhead=mem["bwd_overhead"],
                 output_saved=mem.get("output_saved"))


def _record(chain: Chain, budget: int, **values) -> dict:
    return {"chain": chain.to_dict(), "budget": budget, **values}


def _weak(chain: Chain, out: dict) -> None:
    steps = class_profile(chain, "dp-weak")
    for k in range(len(steps) - 1):
        b, v = steps[k + 1][0] - 1, steps[k][1]
        opt = solvers.solve(chain, b, "exhaustive").makespan
        out["checks"] += 1
        if v > opt + 1e-9:
            out["losses"] += 1
            ratio = v / opt if opt > 0 else math.inf
            out["records"].append(_record(chain, b, ratio=ratio, weak=v, opt=opt))


def _budget(chain: Chain, out: dict) -> None:
    g = _ex.min_feasible_budget(chain)
    w, p = _dpw.min_feasible_budget(chain), _dp.min_feasible_budget(chain)
    out["checks"] += 1
    if w < g or p < w or p > g + max(chain.x_size[1:]):
        # class inclusion, and Theorem C.4 (proofs/classic_model.md): p <= m* + max x_i
        raise RematError(f"budget order broken on {chain.to_dict()}: global {g}, weak {w}, "
                         f"persistent {p}")  # pragma: no cover - a solver disagreement
    if p > g:
        out["losses"] += 1
        out["records"].append(_record(chain, g, ratio=p / max(g, 1), ratio_weak=w / max(g, 1),
                                      global_min=g, weak_min=w, persistent_min=p))


def _monotone(chain: Chain, out: dict) -> None:
    g = _ex.min_feasible_budget(chain)
    for b in range(g, chain.store_all_memory() + 1):
        opt = solvers.solve(chain, b, "exhaustive").makespan
        one = solvers.solve(chain, b, "exhaustive", schedule_class="monotone")
        out["checks"] += 1
        if one.makespan is None or one.makespan > opt + 1e-9:
            out["losses"] += 1
            r = math.inf if one.makespan is None or opt <= 0 else one.makespan / opt
            out["records"].append(_record(chain, b, ratio=r, one_run=one.makespan, opt=opt))


def run_shard(task: tuple) -> dict:
    """Examine configurations ``lo..hi-1`` of ``cfg``: per measure, the instances checked,
    the losses, and the :data:`KEEP` largest records."""
    cfg, shard, lo, hi = task
    t0 = time.process_time()
    res = {m: {"checks": 0, "losses": 0, "records": []} for m in cfg.measures}
    vectors = cfg.time_vectors()
    for idx in range(lo, hi):
        mem = memory_config(cfg, idx)
        if "budget" in res:
            _budget(chain_of(mem, vectors[0]), res["budget"])
        for fwd in vectors:
            chain = chain_of(mem, fwd)
            if "weak" in res:
                _weak(chain, res["weak"])
            if "monotone" in res:
                _monotone(chain, res["monotone"])
        for m in res.values():
            m["records"] = sorted(m["records"], key=lambda r: -r["ratio"])[:KEEP]
    return {"shard": shard, "lo": lo, "hi": hi, "cpu_s": round(time.process_time() - t0, 3),
            **{m: _json_safe(v) for m, v in res.items()}}


def _json_safe(v):
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_safe(x) for x in v]
    return v


def _header(cfg: EnumConfig, shard_size: int) -> dict:
    return {"format": FORMAT, "config": asdict(cfg), "shard_size": shard_size,
            "configs": cfg.size(), "time_vectors": len(cfg.time_vectors())}


def enumerate_classic(cfg: EnumConfig, out: str | Path, *, shard_size: int = 200,
                      workers: int | None = 1, max_shards: int | None = None,
                      progress: bool = False) -> dict:
    """Run (or resume) the enumeration, appending finished shards to ``out``; returns
    :func:`summarize` of the file.  ``max_shards`` bounds the shards run by this call."""
    from remat_theory.analysis.parallel import parallel_map

    check_int(shard_size, "shard_size", minimum=1)
    out = Path(out)
    head = _header(cfg, shard_size)
    done = set()
    if out.exists() and out.stat().st_size:
        lines = out.read_text().splitlines()
        first = json.loads(lines[0])
        if {k: first.get(k) for k in head} != json.loads(json.dumps(head)):
            raise RematError(f"{out}: written by another enumeration ({first.get('config')}, "
                             f"shard size {first.get('shard_size')}); use another file")
        done = {json.loads(x)["shard"] for x in lines[1:] if x.strip()}
    else:
        out.write_text(json.dumps(head) + "\n")
    n = cfg.size()
    todo = [(cfg, s, lo, min(n, lo + shard_size))
            for s, lo in enumerate(range(0, n, shard_size)) if s not in done]
    if max_shards is not None:
        todo = todo[:max_shards]
    # run in batches so that finished shards reach the file as they end
    batch = max(1, (workers or 1) * 4)
    for i in range(0, len(todo), batch):
        for r in parallel_map(run_shard, todo[i:i + batch], workers=workers,
                              progress=progress, desc="classic enumeration"):
            with out.open("a") as f:
                f.write(json.dumps(r) + "\n")
    return summarize(out)


def _count(recs: list, key) -> dict:
    out: dict = {}
    for r in recs:
        out[key(r)] = out.get(key(r), 0) + 1
    return dict(sorted(out.items()))


def summarize(path: str | Path) -> dict:
    """Totals over the shards of an enumeration file: configurations covered (and whether
    all are), per measure the checks, losses and the largest records."""
    lines = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    head, shards = lines[0], lines[1:]
    covered = sum(s["hi"] - s["lo"] for s in shards)
    total = {"config": head["config"], "configs": head["configs"], "covered": covered,
             "complete": covered == head["configs"], "shards": len(shards),
             "time_vectors": head["time_vectors"],
             "cpu_s": round(sum(s["cpu_s"] for s in shards), 1)}
    for m in head["config"]["measures"]:
        recs = [r for s in shards for r in s[m]["records"]]
        key = lambda r: -(math.inf if r["ratio"] == "inf" else r["ratio"])  # noqa: E731
        losses = sum(s[m]["losses"] for s in shards)
        total[m] = {"checks": sum(s[m]["checks"] for s in shards), "losses": losses,
                    # where the class loses: every record kept (all of them when
                    # records_complete), counted by ratio and by forward-time vector
                    "records_complete": len(recs) == losses,
                    "by_ratio": _count(recs, lambda r: str(r["ratio"] if r["ratio"] == "inf"
                                                           else round(r["ratio"], 4))),
                    "by_times": _count(recs, lambda r: str(r["chain"]["fwd_time"])),
                    "best": sorted(recs, key=key)[:KEEP]}
    return total


__all__ = ["MEASURES", "EnumConfig", "memory_config", "chain_of", "run_shard",
           "enumerate_classic", "summarize"]
