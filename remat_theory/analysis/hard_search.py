"""Search for hard instances: random restarts, local search, then shrinking.

An *instance* is a chain with integer stage values and a budget (bytes).  An *objective*
scores it (higher is harder):

* ``dp-gap``: makespan of the persistent DP (or of the solver named by ``solver``, e.g.
  ``dp-weak``, or a solver variant of ``remat verify`` such as ``exhaustive-monotone``, the
  optimum of the fast ILP's normal form) divided by the exact optimum OPT, the same ratio
  :mod:`remat_theory.analysis.hard_objectives` takes its largest over a chain's budgets;
  not scored where the class has no schedule (the budget gap measures that).
* ``baseline-gap``: the same ratio for a baseline heuristic (``solver`` required); ``inf``
  when OPT fits the budget but the heuristic finds no schedule.
* ``ilp-time``: the seconds the ``ilp`` solver takes to prove its optimum (only proven
  solves count), a measure of how hard the MILP finds the instance.

OPT is ``exhaustive`` (A* over simulator states, no modelling argument) when the chain is
within its registered ``reference_max_stages``, else ``ilp`` (up to its own
``reference_max_stages``) when it proves optimality; an instance whose optimum is not proven
scores nothing.

The search (:func:`search`) runs independent *restarts*, each a top-level function of its
own seed (:func:`run_restart`), spread over processes by
:func:`remat_theory.analysis.parallel.parallel_map`: each draws a random instance and hill-climbs
by changing one stage value or the budget at a time, accepting moves that do not lower
the score.  The best instance is then *shrunk* (:func:`shrink`), as hypothesis shrinks a
failing example: fewer stages first, then smaller integers, then a smaller budget, keeping
the property ``score >= keep`` throughout
(:mod:`remat_theory.analysis.hard_instances`, which also holds the instances as field lists).

A solver that returns a wrong answer (rejected by the registry's replay), or a class-
restricted solver that beats the exact optimum, is an *anomaly*: it is recorded, never
scored.  This module sits above the solver floor (it calls solvers by name).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

import solvers
from solvers import registry

from remat_theory.analysis.certificates import Certificate, solution_entry
from remat_theory.analysis.hard_instances import (build_chain, chain_values, delete_stage,
                                                  hold_outputs, repeat_stage, set_value,
                                                  shrink)
from remat_theory.model import fields as chain_fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError, SolverContractError
from remat_theory.model.solution import CLASS_ALL, INFEASIBLE, OPTIMAL
from remat_theory.model.validation import check_int

OBJECTIVES = ("dp-gap", "baseline-gap", "ilp-time")
EXACT, FALLBACK = "exhaustive", "ilp"  # the solvers of OPT, short chains first


def _reference_limit(name: str) -> int:
    """The longest chain on which ``name`` is the reference (its registered
    ``reference_max_stages``; 0 when it is not registered or has none)."""
    if name not in registry.names():
        return 0
    return registry.get(name).reference_max_stages or 0
@dataclass(frozen=True)
class SearchConfig:
    """What to search for and where.

    objective : one of :data:`OBJECTIVES`.
    solver : the solver compared with OPT (``dp-gap``: default ``dp``; ``baseline-gap``:
        required); ignored by ``ilp-time``.
    min_stages, max_stages : range of L for fresh instances.
    max_time : stage times are integers in [1, max_time] when drawn (0 allowed by moves).
    max_size : activations in [1, max_size]; tapes exceed their output by [0, max_size].
    overheads : draw transient overheads (else all zero).
    variations : names of :data:`remat_theory.model.fields.VARIATIONS` (``fall-costs``,
        ``unsaved-outputs``, or ``"a,b"``): draw their optional fields by kind, and let moves
        change them (a flag by flipping an entry); else they keep their defaults.
    ilp_time_limit : seconds for the solver of OPT (exhaustive search or ``ilp``), and for
        ``ilp`` when it is the measured solver.
    """

    objective: str = "dp-gap"
    solver: str | None = None
    min_stages: int = 3
    max_stages: int = 6
    max_time: int = 10
    max_size: int = 10
    overheads: bool = False
    ilp_time_limit: float = 30.0
    variations: tuple = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "variations", chain_fields.parse_variations(self.variations))
        if self.objective not in OBJECTIVES:
            raise RematError(f"objective = {self.objective!r} is unknown (known: "
                             f"{', '.join(OBJECTIVES)})")
        if self.objective == "baseline-gap" and not self.solver:
            raise RematError("objective baseline-gap needs a solver (--solver NAME)")
        for name in ("min_stages", "max_stages", "max_time", "max_size"):
            check_int(getattr(self, name), name, minimum=1)
        top = max(_reference_limit(EXACT), _reference_limit(FALLBACK))
        if self.max_stages > top:
            raise RematError(f"max_stages = {self.max_stages}: OPT above "
                             f"{_reference_limit(EXACT)} stages is the proven ILP model, which is "
                             f"built only up to {top} stages")
        if self.max_stages < self.min_stages:
            raise RematError(f"max_stages = {self.max_stages} is below min_stages = "
                             f"{self.min_stages}")

    @property
    def target(self) -> str:
        if self.objective == "ilp-time":
            return "ilp"
        return self.solver or "dp"

    def target_call(self) -> tuple:
        """``(solver, options)`` of the compared solver (a variant label such as
        ``exhaustive-monotone`` stands for a registered solver with fixed options; a
        ``package.module:function`` path for itself)."""
        info, opts, _ = registry.resolve(self.target)
        name = info.name if self.target not in registry.names() and not info.external \
            else self.target
        opts = dict(opts)
        if name == "ilp":
            opts["time_limit"] = self.ilp_time_limit
        return name, opts

    def check_solvers(self) -> None:
        """Raise naming the solver if one this objective needs is not registered."""
        known = solvers.names()
        if not registry.is_path(self.target) and self.target not in known \
                and self.target not in registry.variants():
            raise RematError(f"solver {self.target!r} is not available (known: "
                             f"{', '.join(known + list(registry.variants()))})")
        self.target_call()  # imports a package.module:function path, naming a bad one
        need = [EXACT]
        if self.max_stages > _reference_limit(EXACT):
            need.append(FALLBACK)
        for name in need:
            if name not in known:
                raise RematError(f"solver {name!r} is not available (known: {', '.join(known)})")
        for label in [self.target] + need:  # every solver scored must model the fields drawn
            info = registry.get(label)
            for v in self.variations:
                if not info.external and not registry.models(label, v):
                    raise RematError(f"solver {label!r} does not model the variation {v} "
                                     f"({', '.join(chain_fields.variation(v).fields)}; it "
                                     f"models: {', '.join(info.supports) or 'none'})")


@dataclass
class Evaluation:
    """The score of one instance and the solutions behind it (label -> (Solution, options))."""

    score: float | None
    solutions: dict = field(default_factory=dict)
    anomaly: str | None = None


def _opt(chain: Chain, budget: int, cfg: SearchConfig):
    opts = {"time_limit": cfg.ilp_time_limit}
    limit = _reference_limit(EXACT)
    if chain.length <= limit:
        opts["max_stages"] = limit
        return solvers.solve(chain, budget, EXACT, **opts), opts
    return solvers.solve(chain, budget, FALLBACK, **opts), opts


def evaluate(chain: Chain, budget: int, cfg: SearchConfig) -> Evaluation:
    """Score ``(chain, budget)`` for ``cfg.objective`` (None: not scorable, e.g. OPT is
    infeasible or unproven)."""
    try:
        opt, opt_opts = _opt(chain, budget, cfg)
    except (RematError, SolverContractError) as e:
        return Evaluation(None, anomaly=f"OPT solver failed: {e}")
    sols = {"opt": (opt, opt_opts)}
    if opt.status != OPTIMAL or opt.optimal_for != CLASS_ALL:
        return Evaluation(None, sols)  # only a proven optimum over all schedules is OPT
    target_name, target_opts = cfg.target_call()
    try:
        sol = solvers.solve(chain, budget, target_name, **target_opts)
    except (RematError, SolverContractError) as e:
        return Evaluation(None, sols, anomaly=f"solver {cfg.target} failed: {e}")
    sols[cfg.target] = (sol, target_opts)
    if cfg.objective == "ilp-time":
        if sol.status != OPTIMAL:
            return Evaluation(None, sols)
        if not math.isclose(sol.makespan, opt.makespan, rel_tol=1e-9, abs_tol=1e-9):
            return Evaluation(None, sols, anomaly=f"ilp proves {sol.makespan} but OPT is "
                                                  f"{opt.makespan}")
        return Evaluation(sol.wall_time, sols)
    if sol.status == INFEASIBLE:
        # dp-gap is one ratio of makespans, defined as :mod:`.hard_objectives` defines it:
        # where the class has no schedule at all there is none (that is the budget gap's,
        # ``--objective budget-gap``); a baseline without a schedule is infinitely far
        return Evaluation(None if cfg.objective == "dp-gap" else math.inf, sols)
    if sol.makespan is None:
        return Evaluation(None, sols)
    if sol.makespan < opt.makespan - 1e-9 * max(1.0, abs(opt.makespan)):
        return Evaluation(None, sols, anomaly=f"{cfg.target} ({sol.makespan}) beats the exact "
                                              f"optimum ({opt.makespan})")
    if opt.makespan <= 0:
        return Evaluation(1.0, sols)
    return Evaluation(sol.makespan / opt.makespan, sols)


# ---------------------------------------------------------------------- instances as lists

def _searched(cfg: SearchConfig) -> tuple:
    """The optional fields ``cfg`` draws and moves (those of its variations), table order."""
    return tuple(f for f in chain_fields.OPTIONAL if f.variation in cfg.variations)



def _draw(rng: np.random.Generator, f, L: int, cfg: SearchConfig) -> list:
    """Fresh entries of an optional field, by its kind: times in [1, max_time], sizes in
    [0, max_size], flags true or false with even odds, a rate (one number) copying
    max_size bytes in a quarter to four times max_time."""
    n = f.size(L)
    if f.kind == "rate":
        return float(cfg.max_size / cfg.max_time * 2.0 ** rng.uniform(-2.0, 2.0))
    if f.kind == "time":
        return [float(v) for v in rng.integers(1, cfg.max_time + 1, n)]
    if f.kind == "size":
        return [int(v) for v in rng.integers(0, cfg.max_size + 1, n)]
    return [bool(v) for v in rng.random(n) < 0.5]


def random_instance(rng: np.random.Generator, cfg: SearchConfig) -> tuple[Chain, int]:
    """A fresh random chain of cfg's shape and a budget drawn between its memory lower
    bound and its store-all peak (an infeasible budget is raised later by the caller)."""
    L = int(rng.integers(cfg.min_stages, cfg.max_stages + 1))
    t = lambda n: [float(v) for v in rng.integers(1, cfg.max_time + 1, n)]  # noqa: E731
    x = [int(v) for v in rng.integers(1, cfg.max_size + 1, L + 1)]
    tape = [x[i + 1] + int(rng.integers(0, cfg.max_size + 1)) for i in range(L)]
    if cfg.overheads:
        fo = [int(v) for v in rng.integers(0, cfg.max_size + 1, L)]
        bo = [int(v) for v in rng.integers(0, cfg.max_size + 1, L + 1)]
    else:
        fo, bo = [0] * L, [0] * (L + 1)
    optional = {f.name: _draw(rng, f, L, cfg) for f in _searched(cfg)}  # a rate: one number
    chain = Chain(t(L), t(L + 1), x, tape, fo, bo, name="hard", **optional)
    lb, top = chain.memory_lower_bound(), chain.store_all_memory()
    budget = int(lb + rng.random() * 0.6 * max(0, top - lb))
    return chain, budget


def _mutate(rng: np.random.Generator, chain: Chain, budget: int, cfg: SearchConfig):
    """One local move: change one stage value (or the budget) by a small step, or (less
    often) repeat a stage or remove one, keeping the budget: repeating the middle of a
    hard pattern is how gaps that grow with L are found (proofs/persistence_gap.md)."""
    vals = chain_values(chain)
    searched = _searched(cfg)
    fields = [f.name for f in chain_fields.BASE if f.kind != "flag"
              and (cfg.overheads or not f.transient)]
    fields += [f.name for f in searched if f.kind != "flag" and not f.scalar]
    for rate in (f for f in searched if f.scalar):
        if rng.random() < 0.1:  # a faster or slower channel
            vals[rate.name] = [float(vals[rate.name][0] * rng.choice([0.5, 0.8, 1.25, 2.0]))]
            c = build_chain(vals)
            return (c, budget) if c is not None else (chain, budget)
    for flag in (f for f in searched if f.kind == "flag"):
        if rng.random() < 0.1:  # flip one entry (whether a backward reads an output)
            i = int(rng.integers(len(vals[flag.name])))
            vals[flag.name][i] = not vals[flag.name][i]
            c = build_chain(vals)
            if c is None:
                return chain, budget
            return c, max(0, budget + c.memory_lower_bound() - chain.memory_lower_bound())
    u = rng.random()
    if u < 0.08 and chain.length < cfg.max_stages:
        i = int(rng.integers(1, chain.length + 1)) if chain.length > 1 else 1
        c = repeat_stage(chain, min(i, chain.length - 1))
        return (c, budget) if c is not None else (chain, budget)
    if u < 0.12 and chain.length > cfg.min_stages:
        c = delete_stage(chain, int(rng.integers(chain.length)), bool(rng.random() < 0.5))
        return (c, budget) if c is not None else (chain, budget)
    if rng.random() < 0.2:
        step = int(rng.choice([-3, -2, -1, 1, 2, 3]))
        return chain, max(0, budget + step)
    f = fields[int(rng.integers(len(fields)))]
    i = int(rng.integers(len(vals[f])))
    is_time = chain_fields.field(f).kind == "time"
    hi = cfg.max_time if is_time else 2 * cfg.max_size
    if rng.random() < 0.3:
        new = int(rng.integers(0 if is_time else 1, hi + 1))
    else:
        new = int(vals[f][i]) + int(rng.choice([-2, -1, 1, 2]))
    new = max(0, min(new, 3 * hi))
    set_value(vals, f, i, float(new) if is_time else new)
    hold_outputs(vals)  # a tape at least the output it holds
    c = build_chain(vals)
    if c is None:
        return chain, budget
    # keep the budget at the same distance above the memory lower bound
    b = max(0, budget + c.memory_lower_bound() - chain.memory_lower_bound())
    return c, b


def _feasible_budget(chain: Chain, budget: int, ev: Evaluation) -> int | None:
    """A feasible budget near ``budget`` when OPT said it is infeasible."""
    opt = ev.solutions.get("opt", (None,))[0]
    if opt is not None and opt.status == INFEASIBLE and opt.min_budget is not None:
        return max(budget, opt.min_budget)
    return None


@dataclass
class Found:
    """An instance with its score (picklable: the chain travels as a dict)."""

    score: float
    chain: dict
    budget: int
    seed: int = 0

    def chain_obj(self) -> Chain:
        return Chain.from_dict(self.chain)


@dataclass
class RestartResult:
    best: Found | None
    evaluations: int
    anomalies: list  # (message, chain dict, budget)


def run_restart(task: tuple) -> RestartResult:
    """One restart (a top-level function, so that processes can run it).

    ``task = (cfg, seed, seconds, max_evals)``: draw a random instance from ``seed`` and
    hill-climb for ``seconds`` (or ``max_evals`` evaluations, whichever comes first).
    """
    cfg, seed, seconds, max_evals = task
    rng = np.random.default_rng(seed)
    deadline = time.perf_counter() + seconds
    evals = 0
    anomalies = []
    cur = None  # (score, chain, budget)
    best = None

    def score_of(chain, budget):
        nonlocal evals
        evals += 1
        ev = evaluate(chain, budget, cfg)
        if ev.anomaly:
            anomalies.append((ev.anomaly, chain.to_dict(), budget))
        if ev.score is None:
            b2 = _feasible_budget(chain, budget, ev)
            if b2 is not None and b2 != budget:
                evals += 1
                ev = evaluate(chain, b2, cfg)
                if ev.anomaly:
                    anomalies.append((ev.anomaly, chain.to_dict(), b2))
                return ev.score, b2
        return ev.score, budget

    def out_of_time():
        return time.perf_counter() > deadline or (max_evals is not None and evals >= max_evals)

    while not out_of_time():
        # fresh start: at first, rarely mid-climb, and often while stuck on the plateau of
        # instances where the compared solver is optimal (score 1)
        flat = cur is not None and cfg.objective != "ilp-time" and cur[0] <= 1.0 + 1e-12
        if cur is None or rng.random() < (0.1 if flat else 0.02):
            chain, budget = random_instance(rng, cfg)
            s, budget = score_of(chain, budget)
            if s is not None:
                cur = (s, chain, budget)
        else:
            chain, budget = _mutate(rng, cur[1], cur[2], cfg)
            s, budget = score_of(chain, budget)
            if s is not None and s >= cur[0]:
                cur = (s, chain, budget)
        if cur is not None and (best is None or cur[0] > best[0]):
            best = cur
    found = None if best is None else Found(best[0], best[1].to_dict(), best[2], seed)
    return RestartResult(found, evals, anomalies[:5])


# ---------------------------------------------------------------------- the whole search

@dataclass
class SearchResult:
    config: SearchConfig
    found: list  # Found, best first (one per restart that scored anything)
    shrunk: Found | None
    evaluations: int
    anomalies: list
    wall_time: float


def _search_items(cfg: SearchConfig, seed: int, seconds: float, workers: int,
                  restart_seconds: float | None, max_evals: int | None) -> list:
    per = restart_seconds or max(2.0, min(10.0, seconds / 4))
    rounds = max(1, int(round(seconds / per)))
    n = max(workers, rounds * workers)
    per = seconds * workers / n if restart_seconds is None else per
    ss = np.random.SeedSequence(seed)
    seeds = [int(s.generate_state(1)[0]) for s in ss.spawn(n)]
    return [(cfg, s, per, max_evals) for s in seeds]


def search(cfg: SearchConfig, *, seconds: float = 60.0, seed: int = 0,
           workers: int | None = None, scheduler=None, progress: bool = True,
           shrink_fraction: float = 0.35, keep: float | None = None,
           restart_seconds: float | None = None, max_evals: int | None = None) -> SearchResult:
    """Run the restarts in parallel for about ``(1 - shrink_fraction) * seconds``, then shrink
    the best instance for the rest of the time.

    keep : the shrinker keeps ``score >= keep`` (default: the best score found, so that
        shrinking never loses hardness; for ``ilp-time``, half of it, since solve times
        vary from run to run).
    max_evals : each restart also stops after this many evaluations; the restarts and
        their seeds depend on ``seconds`` and ``workers`` only, so with a cap that binds
        before the clock the restarts find the same instances on every run.
    """
    from remat_theory.analysis.parallel import default_workers, parallel_map

    if not (isinstance(seconds, (int, float)) and seconds > 0 and math.isfinite(seconds)):
        raise RematError(f"seconds = {seconds!r} must be a positive number")
    if max_evals is not None:
        check_int(max_evals, "max_evals", minimum=1)
    cfg.check_solvers()
    t0 = time.perf_counter()
    deadline = t0 + seconds
    n_workers = workers or default_workers()
    items = _search_items(cfg, seed, seconds * (1 - shrink_fraction), n_workers,
                          restart_seconds, max_evals)
    results = parallel_map(run_restart, items, workers=n_workers, scheduler=scheduler,
                           progress=progress, desc=f"hard {cfg.objective}")
    found = sorted((r.best for r in results if r.best is not None), key=lambda f: -f.score)
    anomalies = [a for r in results for a in r.anomalies]
    evals = sum(r.evaluations for r in results)
    shrunk = None
    gap_objective = cfg.objective != "ilp-time"
    if found and not (gap_objective and found[0].score <= 1.0 + 1e-12):
        # (a ratio of 1 is no gap: there is no property worth shrinking for)
        best = found[0]
        if keep is not None:
            target = keep
        elif cfg.objective == "ilp-time":
            target = 0.5 * best.score  # solve times are noisy: keep half of the slowest
        else:
            target = best.score
        chain, budget = shrink(best.chain_obj(), best.budget,
                               lambda c, b: _keeps(c, b, cfg, target),
                               deadline=max(deadline, time.perf_counter() + 1.0))
        ev = evaluate(chain, budget, cfg)
        if ev.score is not None and ev.score >= target:
            shrunk = Found(ev.score, chain.to_dict(), budget, best.seed)
    return SearchResult(cfg, found, shrunk, evals, anomalies, time.perf_counter() - t0)


def _keeps(chain: Chain, budget: int, cfg: SearchConfig, target: float) -> bool:
    ev = evaluate(chain, budget, cfg)
    return ev.score is not None and ev.score >= target


def certificate(found: Found, cfg: SearchConfig, claim: str | None = None,
                description: str = "") -> Certificate:
    """Evaluate ``found`` again and record every solver's answer as a certificate."""
    chain = found.chain_obj()
    ev = evaluate(chain, found.budget, cfg)
    sols = {label: solution_entry(sol, opts) for label, (sol, opts) in ev.solutions.items()}
    facts = {"objective": cfg.objective, "solver": cfg.target, "score": _json_num(ev.score),
             "stages": chain.length}
    opt = ev.solutions.get("opt", (None,))[0]
    tgt = ev.solutions.get(cfg.target, (None,))[0]
    if opt is not None and tgt is not None and opt.makespan and tgt.makespan is not None:
        facts["ratio"] = tgt.makespan / opt.makespan
    return Certificate(chain, found.budget, sols, claim or f"hard-{cfg.objective}",
                       description, facts)


def _json_num(v):
    if v is None:
        return None
    if math.isinf(v):
        return "inf"
    return v


__all__ = ["OBJECTIVES", "SearchConfig", "Evaluation", "evaluate", "random_instance",
           "run_restart", "shrink", "search", "SearchResult", "Found", "certificate",
           "chain_values", "build_chain", "repeat_stage", "delete_stage"]
