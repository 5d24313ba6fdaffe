"""Gap objectives for ``remat hard``: how far the class DPs are from the exact optimum.

Three objectives score a *chain* (not a chain and one budget):

* ``dp-gap``: the largest ``DP(M) / OPT(M)`` over the budgets ``M`` where the persistent
  DP (``dp``) has a schedule;
* ``dp-weak-gap``: the same for the weakly persistent DP (``dp-weak``);
* ``budget-gap``: the smallest budget of a class (``dp-weak`` by default, or ``dp``) divided
  by the smallest budget of any schedule.

OPT is exhaustive search (A* over simulator states: every valid schedule of the canonical
model), so chains have at most :data:`OPT_MAX_STAGES` stages (default
:data:`MAX_STAGES`).  A ratio is never scored at a budget below the class's smallest one
(that is what ``budget-gap`` measures).

**Which budgets.**  A class DP's makespan is a step function of the budget, and OPT does
not increase with it; so on each step of the class's profile the ratio is largest at the
step's last budget.  :func:`class_profile` builds the DP's table once, up to store-all,
and reads every budget off it (one table, not one solve per budget); the candidate budgets
are the last budgets of its steps (one below each breakpoint), every step from the class's
smallest budget to store-all (the first version of this module took each step's first
budget, and missed every gap that OPT opens inside a step).  OPT costs far more (an exhaustive search per budget), so the
breakpoints are tried in decreasing order of the bound ``DP(M) / ideal`` (OPT is at least
the store-all makespan), and a budget whose bound cannot beat the score wanted is never
searched: most moves of the local search are rejected by the bound alone.

**Constraints** (:class:`GapConfig`): ``min_time`` (every time, recording forwards
included, at least this), ``fall_at_least_fwd`` (a recording forward takes at least the
time of a no-grad one), ``all_saved`` (every output saved), ``fall_costs`` and
``overheads`` (whether those fields may differ from their defaults).  A chain drawn, or
moved one entry at a time, is projected onto them (:func:`constrain`); a stage repeated or
removed, and each step of the shrinking, is kept only when it satisfies them
(:func:`satisfies`): so a result satisfies them.  The fields are read from the table
(:mod:`remat_theory.model.fields`): the base fields and those of the ``fall-costs`` and
``unsaved-outputs`` variations are drawn and moved; no other optional field is drawn (no
``bandwidth``: a result never offloads).

**The search** (:func:`run_restart`, :func:`search`): restarts from random chains and from
*structured* seeds (one or two early stages with large forward times, small times
elsewhere, large overheads; with recording costs, one or two stages whose no-grad
transient is large and recording transient small: the shapes of the gaps found so far),
each a local search that changes one entry at a time (a small step, a fresh value, a
scaling by 2 or 1/2, an entry set to the largest or smallest allowed, an output flipped, a
stage repeated or removed, a stage's transients split as in the seeds) and keeps a move
when the score does not drop.  The best chain is then shrunk with
:func:`remat_theory.analysis.hard_search.shrink` at its budget (fewest stages first),
keeping its ratio, and every record is a certificate (:func:`certificate`): the chain, the
budget, OPT's schedule, the class DP's schedule (or, for ``budget-gap``, its infeasible
answer with the smallest class budget), and the values.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

import solvers
from solvers import dp as _dp
from solvers import dp_weak as _dpw
from solvers import exhaustive as _ex
from solvers.dp import UnitChain

from remat_theory.analysis.certificates import Certificate, solution_entry
from remat_theory.analysis.hard_gap_chains import (DRAWN_VARIATIONS, constrain, mutate,
                                                   random_chain, satisfies)
from remat_theory.analysis.hard_instances import shrink
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError, SolverContractError
from remat_theory.model.solution import CLASS_ALL, INFEASIBLE, OPTIMAL
from remat_theory.model.validation import check_int

OBJECTIVES = ("dp-gap", "dp-weak-gap", "budget-gap")
CLASS_SOLVERS = ("dp", "dp-weak")
MAX_STAGES = 6  # the default longest chain: exhaustive search takes under a second a budget
OPT_MAX_STAGES = 10  # the longest allowed: exhaustive search's registered reference range
@dataclass(frozen=True)
class GapConfig:
    """What to search for, and the chains allowed.

    objective : one of :data:`OBJECTIVES`.
    solver : ``budget-gap`` only: the class whose smallest budget is compared (``dp-weak``,
        the default, or ``dp``).
    min_stages, max_stages : L of the chains (default 2 to :data:`MAX_STAGES`, at most
        :data:`OPT_MAX_STAGES`).
    max_time, max_size : the range of fresh values (moves may go up to 4 times further).
    min_time : every time (``fwd_time``, ``bwd_time``, ``fall_time``) at least this.
    fall_at_least_fwd : ``fall_time[i] >= fwd_time[i]``.
    all_saved : every output saved (``output_saved`` all true).
    fall_costs : recording forwards may have their own time and overhead.
    overheads : transient overheads may be non-zero.
    opt_time_limit : seconds for one exhaustive search (an unproven OPT scores nothing).
    """

    objective: str = "dp-weak-gap"
    solver: str | None = None
    min_stages: int = 2
    max_stages: int = MAX_STAGES
    max_time: int = 10
    max_size: int = 10
    min_time: float = 0.0
    fall_at_least_fwd: bool = False
    all_saved: bool = False
    fall_costs: bool = True
    overheads: bool = True
    opt_time_limit: float = 20.0

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise RematError(f"objective = {self.objective!r} is unknown (known: "
                             f"{', '.join(OBJECTIVES)})")
        if self.solver is not None and (self.objective != "budget-gap"
                                        or self.solver not in CLASS_SOLVERS):
            raise RematError(f"solver = {self.solver!r}: objective {self.objective} "
                             + ("compares dp or dp-weak" if self.objective == "budget-gap"
                                else "fixes its solver (dp-gap: dp, dp-weak-gap: dp-weak)"))
        for name in ("min_stages", "max_stages", "max_time", "max_size"):
            check_int(getattr(self, name), name, minimum=1)
        if self.max_stages > OPT_MAX_STAGES:
            raise RematError(f"max_stages = {self.max_stages}: objective {self.objective} "
                             f"takes OPT from exhaustive search, at most {OPT_MAX_STAGES} "
                             f"stages")
        if self.max_stages < self.min_stages:
            raise RematError(f"max_stages = {self.max_stages} is below min_stages = "
                             f"{self.min_stages}")
        if not (isinstance(self.min_time, (int, float)) and math.isfinite(self.min_time)
                and self.min_time >= 0):
            raise RematError(f"min_time = {self.min_time!r} must be a non-negative number")
        if self.min_time > self.max_time:
            raise RematError(f"min_time = {self.min_time} is above max_time = {self.max_time}")

    @property
    def target(self) -> str:
        if self.objective == "dp-gap":
            return "dp"
        if self.objective == "dp-weak-gap":
            return "dp-weak"
        return self.solver or "dp-weak"


# ---------------------------------------------------------------------- values

def class_profile(chain: Chain, solver: str) -> list[tuple[int, float]]:
    """The class DP's makespan at every budget from its smallest one to store-all, as the
    steps ``[(first budget, makespan), ...]`` (makespans strictly decreasing): one table,
    built up to store-all, read at every memory value."""
    uc, g0 = UnitChain.exact(chain)
    top = uc.store_all_units()
    if solver == "dp-weak":
        ucd, g, M = _dpw.prepare_table(uc, top, None, None)
        table = _dpw.WeakTable(ucd, max(0, M))
        value = lambda m: table.w(0, ucd.L, m)  # noqa: E731
    elif solver == "dp":
        g = uc.size_gcd()
        ucd = uc.divided(g)
        M = max(0, ucd.store_all_units() - int(ucd.x[0]))
        table = _dp.PersistentTable(ucd, M, _dp.table_dtype(ucd), _dp.skewed_min_memory(ucd))
        value = lambda m: table.value(0, ucd.L, m)  # noqa: E731
    else:
        raise RematError(f"solver = {solver!r}: a class profile exists for "
                         f"{', '.join(CLASS_SOLVERS)}")
    x0 = int(ucd.x[0]) * g
    steps, last = [], math.inf
    for m in range(max(0, M) + 1):
        v = float(value(m))
        if v < last - 1e-9:
            steps.append((int((x0 + g * m) * g0), v))
            last = v
    return steps


def class_min_budget(chain: Chain, solver: str) -> int:
    return (_dpw if solver == "dp-weak" else _dp).min_feasible_budget(chain)


def global_min_budget(chain: Chain) -> int:
    """The smallest budget of any valid schedule (exhaustive bottleneck search)."""
    return _ex.min_feasible_budget(chain, max_stages=OPT_MAX_STAGES)


def opt_at(chain: Chain, budget: int, cfg: GapConfig):
    """OPT at ``budget``: the exhaustive solution, or None when not proven optimal."""
    try:
        sol = solvers.solve(chain, budget, "exhaustive", time_limit=cfg.opt_time_limit,
                            max_stages=OPT_MAX_STAGES)
    except (RematError, SolverContractError):
        return None
    if sol.status != OPTIMAL or sol.optimal_for != CLASS_ALL:
        return None
    return sol


class Anomaly(RematError):
    """A class DP below the exact optimum: a bug in one of the two, recorded, never scored."""

    def __init__(self, message: str, chain: dict, budget: int):
        super().__init__(message)
        self.chain, self.budget = chain, budget


@dataclass
class Score:
    """A chain's score, the budget where it is reached, and the values behind it."""

    score: float
    budget: int | None
    values: dict = field(default_factory=dict)  # class, opt, (budget-gap) class/global min


def score_chain(chain: Chain, cfg: GapConfig, floor: float = 0.0) -> Score | None:
    """The chain's score for ``cfg.objective``; budgets whose bound cannot reach
    ``floor`` are skipped (the result is then exact only when it is ``>= floor``).  None
    when nothing could be scored (no proven OPT)."""
    if cfg.objective == "budget-gap":
        cmin = class_min_budget(chain, cfg.target)
        lb = max(1, chain.memory_lower_bound())
        if cmin / lb < floor:
            return Score(cmin / lb, None, {"bound_only": True})
        gmin = global_min_budget(chain)
        return Score(cmin / max(gmin, 1), gmin, {"class_min": cmin, "global_min": gmin})
    ideal = chain.ideal_makespan()
    steps = class_profile(chain, cfg.target)
    if ideal <= 0:
        return None  # a zero optimum: every ratio is infinite or undefined
    # the ratio on a step is largest at its *last* budget, where OPT (non-increasing in the
    # budget) is smallest; the last step reaches store-all, where both are the ideal
    ends = [(steps[k + 1][0] - 1, steps[k][1]) for k in range(len(steps) - 1)] + steps[-1:]
    order = sorted(ends, key=lambda s: -s[1])
    best = None
    opt_below = {}  # budget -> OPT (OPT(b) >= OPT(b') for b <= b')
    for b, v in order:
        lo = max([ideal] + [o for bb, o in opt_below.items() if bb >= b])
        if v / lo < max(floor, best.score if best else 0.0) or (best and v / lo <= best.score):
            continue
        sol = opt_at(chain, b, cfg)
        if sol is None or sol.makespan is None or sol.makespan <= 0:
            continue
        opt_below[b] = sol.makespan
        if v < sol.makespan - 1e-9 * max(1.0, sol.makespan):
            raise Anomaly(f"{cfg.target} ({v}) beats the exact optimum ({sol.makespan}) at "
                          f"budget {b}", chain.to_dict(), b)
        r = v / sol.makespan
        if best is None or r > best.score:
            best = Score(r, b, {"class": v, "opt": sol.makespan})
    if best is None:
        return Score(order[0][1] / ideal, None, {"bound_only": True}) if order else None
    return best


def ratio_at(chain: Chain, budget: int, cfg: GapConfig) -> float | None:
    """The objective's value at one budget (what the shrinker keeps)."""
    if not satisfies(chain, cfg):
        return None
    if cfg.objective == "budget-gap":
        if budget != global_min_budget(chain):
            return None
        return class_min_budget(chain, cfg.target) / max(budget, 1)
    try:
        sol = solvers.solve(chain, budget, cfg.target)
    except (RematError, SolverContractError):
        return None
    if sol.status != OPTIMAL or sol.makespan is None:
        return None
    if chain.ideal_makespan() <= 0:
        return None  # a zero optimum, as in score_chain
    opt = opt_at(chain, budget, cfg)
    if opt is None or not opt.makespan:
        return None
    return sol.makespan / opt.makespan


# ---------------------------------------------------------------------- the search

@dataclass
class Hit:
    """A chain with its score and budget (picklable: the chain travels as a dict)."""

    score: float
    chain: dict
    budget: int
    seed: int = 0
    values: dict = field(default_factory=dict)

    def chain_obj(self) -> Chain:
        return Chain.from_dict(self.chain)


@dataclass
class RestartOutcome:
    best: Hit | None
    evaluations: int  # chains scored
    anomalies: list  # (message, chain dict, budget)


def run_restart(task: tuple) -> RestartOutcome:
    """``task = (cfg, seed, seconds[, max_evals])``: local search from fresh chains for
    ``seconds`` or ``max_evals`` chains scored, whichever comes first (a fresh chain when
    stuck: 60 moves without a gain, or a score of 1). An evaluation cap that binds before
    the clock makes the restart deterministic."""
    cfg, seed, seconds = task[:3]
    max_evals = task[3] if len(task) > 3 else None
    rng = np.random.default_rng(seed)
    deadline = time.perf_counter() + seconds
    evals = 0
    cur = best = None
    stale = 0
    anomalies = []
    while time.perf_counter() < deadline and (max_evals is None or evals < max_evals):
        fresh = cur is None or stale > 60 or (cur[0] <= 1.0 + 1e-12 and rng.random() < 0.3)
        chain = random_chain(rng, cfg) if fresh else mutate(rng, cur[1], cfg)
        floor = 0.0 if fresh else cur[0]
        evals += 1
        try:
            s = score_chain(chain, cfg, floor)
        except Anomaly as e:
            anomalies.append((str(e), e.chain, e.budget))
            s = None
        except (RematError, SolverContractError):
            s = None
        if s is None or s.budget is None:
            if fresh:
                cur, stale = None, 0
            else:
                stale += 1
            continue
        if fresh or s.score >= cur[0] - 1e-12:
            stale = 0 if (fresh or s.score > cur[0] + 1e-12) else stale + 1
            cur = (s.score, chain, s.budget, s.values)
        else:
            stale += 1
        if best is None or cur[0] > best[0] + 1e-12:
            best = cur
    hit = None if best is None else Hit(best[0], best[1].to_dict(), int(best[2]), seed, best[3])
    return RestartOutcome(hit, evals, anomalies[:5])


@dataclass
class GapResult:
    config: GapConfig
    found: list  # Hit, best first
    shrunk: Hit | None
    evaluations: int
    wall_time: float
    anomalies: list = field(default_factory=list)


def search(cfg: GapConfig, *, seconds: float = 60.0, seed: int = 0, workers: int | None = None,
           scheduler=None, progress: bool = True, shrink_fraction: float = 0.2,
           restart_seconds: float = 30.0, keep: float | None = None,
           max_evals: int | None = None) -> GapResult:
    """Restarts of :func:`run_restart` for about ``(1 - shrink_fraction) * seconds``, then
    shrink the best chain at its budget, keeping its score (or ``keep``).

    max_evals : each restart also stops after this many chains scored; the number of
        restarts depends on ``seconds`` and ``workers`` only, so with a cap that binds
        before the clock the search (shrinking included, unless it reaches ``seconds``)
        is the same on every run.
    """
    from remat_theory.analysis.parallel import default_workers, parallel_map

    if not (isinstance(seconds, (int, float)) and seconds > 0 and math.isfinite(seconds)):
        raise RematError(f"seconds = {seconds!r} must be a positive number")
    if max_evals is not None:
        check_int(max_evals, "max_evals", minimum=1)
    t0 = time.perf_counter()
    n_workers = workers or default_workers()
    search_s = seconds * (1 - shrink_fraction)
    per = max(1.0, min(restart_seconds, search_s))
    n = max(n_workers, int(round(search_s * n_workers / per)))
    per = search_s * n_workers / n
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(n)]
    results = parallel_map(run_restart, [(cfg, s, per, max_evals) for s in seeds],
                           workers=n_workers,
                           scheduler=scheduler, progress=progress, desc=f"hard {cfg.objective}")
    found = sorted((r.best for r in results if r.best is not None), key=lambda h: -h.score)
    evals = sum(r.evaluations for r in results)
    shrunk = None
    if found and found[0].score > 1.0 + 1e-12:
        best = found[0]
        target = best.score if keep is None else keep
        chain, budget = shrink(best.chain_obj(), best.budget,
                               lambda c, b: _keeps(c, b, cfg, target),
                               deadline=max(t0 + seconds, time.perf_counter() + 1.0))
        if cfg.objective == "budget-gap":
            budget = global_min_budget(chain)
        r = ratio_at(chain, budget, cfg)
        if r is not None and r >= target - 1e-12:
            shrunk = Hit(r, chain.to_dict(), int(budget), best.seed)
    anomalies = [a for r in results for a in r.anomalies]
    return GapResult(cfg, found, shrunk, evals, time.perf_counter() - t0, anomalies)


def _keeps(chain: Chain, budget: int, cfg: GapConfig, target: float) -> bool:
    if not satisfies(chain, cfg):
        return False
    if cfg.objective == "budget-gap":
        try:
            return (class_min_budget(chain, cfg.target)
                    / max(1, global_min_budget(chain))) >= target - 1e-12
        except (RematError, SolverContractError):
            return False
    r = ratio_at(chain, budget, cfg)
    return r is not None and r >= target - 1e-12


# ---------------------------------------------------------------------- certificates

def certificate(hit: Hit, cfg: GapConfig, description: str = "",
                claim: str | None = None) -> Certificate:
    """Solve ``hit`` again and record OPT's and the class DP's answers with their values:
    ``facts`` hold the objective, the score, the class and OPT makespans (``budget-gap``:
    the class and global smallest budgets) and the constraints the chain meets."""
    chain = hit.chain_obj()
    budget = hit.budget
    opt = solvers.solve(chain, budget, "exhaustive", max_stages=OPT_MAX_STAGES)
    target = cfg.target
    cls = solvers.solve(chain, budget, target)
    sols = {"opt": solution_entry(opt, {"max_stages": OPT_MAX_STAGES}),
            target: solution_entry(cls, {})}
    facts = {"objective": cfg.objective, "solver": target, "stages": chain.length,
             "constraints": {"min_time": cfg.min_time,
                             "fall_at_least_fwd": cfg.fall_at_least_fwd,
                             "all_saved": cfg.all_saved}}
    if cfg.objective == "budget-gap":
        cmin, gmin = class_min_budget(chain, target), global_min_budget(chain)
        if gmin != budget or (cmin > gmin) != (cls.status == INFEASIBLE):
            raise RematError(f"budget-gap certificate: budget {budget}, smallest budgets "
                             f"{cmin} ({target}) and {gmin} (every schedule), {target} says "
                             f"{cls.status}")  # pragma: no cover - a solver disagreement
        facts.update(class_min_budget=cmin, global_min_budget=gmin, score=cmin / gmin,
                     ratio=cmin / gmin)
    else:
        facts.update(class_makespan=cls.makespan, opt_makespan=opt.makespan,
                     score=cls.makespan / opt.makespan, ratio=cls.makespan / opt.makespan)
    return Certificate(chain, budget, sols, claim or f"hard-{cfg.objective}", description,
                       facts)


__all__ = ["OBJECTIVES", "DRAWN_VARIATIONS", "GapConfig", "satisfies", "constrain", "class_profile",
           "class_min_budget", "global_min_budget", "score_chain", "ratio_at", "random_chain",
           "mutate", "run_restart", "search", "GapResult", "Hit", "Anomaly", "certificate"]
