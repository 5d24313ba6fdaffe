"""The two-run question (proofs/two_runs.md, issue 40 item 2): a local search for a chain on
which two weakly increasing runs of forward operations per phase miss the optimum over all
schedules.

Objective of a chain (:func:`score`): over its smallest feasible budget and every breakpoint
of the unrestricted optimum OPT (found by bisection, :func:`opt_breakpoints`, so every
budget is covered: the restricted class is non-increasing in the budget, so on each step of
OPT it is worst at the step's first budget), the largest ``class(M) / OPT(M)`` of the class
``weak-runs<=2`` (infinite where the class has no schedule and OPT has one), and the same of
``weak-runs<=1`` as a guide: a chain where two runs miss is a chain where one run misses, so
the search prefers chains where one run misses by more.  Both classes and OPT come from
exhaustive search (``solvers.exhaustive``: A* over the simulator's states, restricted to the
class for the classes), so nothing here models a schedule.

The chains (:func:`draw`) are those of ``remat hard``'s gap objectives
(:func:`remat_theory.analysis.hard_gap_chains.random_chain`, every optional field of the
``fall-costs`` and ``unsaved-outputs`` variations, overheads), drawn with times up to
``max_time`` (default 40) and sizes up to ``max_size``, or (a third of the time) a *skewed*
chain: one stage with a huge tape, or sizes alternating large and small.  A restart walks
from its chain by :func:`remat_theory.analysis.hard_gap_chains.mutate` and keeps a move
when the score does not drop (lexicographic: two-run ratio, then one-run ratio).  With
``runs = K`` (:class:`TwoRunsConfig`) the same search compares ``weak-runs<=K`` instead,
guided by ``weak-runs<=K-1``: ``K = 3`` asks whether three runs suffice, starting from the
chains where two miss.

:func:`loss_transient_chain` draws the family of the first counterexample (a loss transient,
large unsaved activations with small tapes, large recording transients), and
:func:`family_sweep` compares smallest feasible budgets on it (``models``: with every output
saved, without recording costs, or both).  :func:`certificate` writes the
``remat-certificate/1`` of a miss (proofs/certificates/two_runs_*.json).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from solvers import exhaustive as _ex

from remat_theory.analysis.hard_gap_chains import mutate, random_chain
from remat_theory.analysis.hard_instances import build_chain, chain_values
from remat_theory.model.chain import Chain

TWO = "weak-runs<=2"
ONE = "weak-runs<=1"


@dataclass(frozen=True)
class TwoRunsConfig:
    """The chains drawn (the fields ``hard_gap_chains`` reads) and the search's limits."""

    min_stages: int = 3
    max_stages: int = 5
    max_time: int = 40
    max_size: int = 12
    min_time: float = 0.0
    fall_at_least_fwd: bool = False
    all_saved: bool = False
    fall_costs: bool = True
    overheads: bool = True
    search_seconds: float = 10.0  # one exhaustive search; an unproven one skips the chain
    runs: int = 2  # the class compared: weak-runs<=runs (the guide: weak-runs<=runs-1)

    @property
    def classes(self) -> tuple:
        """(the class searched for a miss, the guide class; None when ``runs`` is 1)."""
        return (f"weak-runs<={self.runs}",
                f"weak-runs<={self.runs - 1}" if self.runs > 1 else None)


@dataclass
class Score:
    """What :func:`score` found on one chain."""

    two: float  # the largest weak-runs<=K / OPT over the budgets (inf: class infeasible)
    one: float  # the same for weak-runs<=K-1 (K = cfg.runs; 2 and 1 by default)
    breakpoints: int
    misses: list = field(default_factory=list)  # (class, budget, OPT, class value)

    @property
    def key(self) -> tuple:
        return (self.two, self.one)


class Unproven(Exception):
    """An exhaustive search stopped at its time limit: the chain is not scored."""


def _value(chain: Chain, budget: int, cls: str, cfg: TwoRunsConfig):
    sched, makespan, _peak, _bound, proven = _ex.search(chain, budget, schedule_class=cls,
                                                        time_limit=cfg.search_seconds)
    if not proven:
        raise Unproven(cls)
    return None if sched is None else makespan


def opt_breakpoints(chain: Chain, cfg: TwoRunsConfig) -> list[tuple[int, float]]:
    """``[(M, OPT(M))]`` at OPT's smallest feasible budget and at each budget where OPT
    drops, up to store-all (bisection on the non-increasing step function)."""
    lo = _ex.min_feasible_budget(chain, max_stages=_ex.REFERENCE_MAX_STAGES)
    hi = max(lo, chain.store_all_memory())
    memo: dict = {}

    def opt(b):
        if b not in memo:
            memo[b] = _value(chain, b, "all", cfg)
        return memo[b]

    out = [(lo, opt(lo))]

    def split(a, b):  # OPT(a) > OPT(b): every drop in (a, b]
        if opt(a) == opt(b):
            return
        if b == a + 1:
            out.append((b, opt(b)))
            return
        m = (a + b) // 2
        split(a, m)
        split(m, b)

    split(lo, hi)
    return sorted(out)


def _ratio(got, best) -> float:
    if got is None:
        return math.inf
    if got <= best * (1 + 1e-9):
        return 1.0
    return got / best if best > 0 else math.inf


def score(chain: Chain, cfg: TwoRunsConfig) -> Score:
    """The objective of the module docstring on ``chain`` (raises :class:`Unproven`)."""
    bps = opt_breakpoints(chain, cfg)
    res = Score(1.0, 1.0, len(bps))
    main, guide = cfg.classes
    for cls in (main, guide):
        if cls is None:
            continue
        worst = 1.0
        for b, best in bps:
            r = _ratio(_value(chain, b, cls, cfg), best)
            if r > 1.0:
                res.misses.append((cls, b, best, None if math.isinf(r) else r * best))
            worst = max(worst, r)
        if cls == main:
            res.two = worst
        else:
            res.one = worst
    return res


def skewed_chain(rng: np.random.Generator, cfg: TwoRunsConfig) -> Chain:
    """A drawn chain made lopsided: one stage's tape made huge, or activations alternating
    large and small (the shapes the earlier searches, with sizes in a small range, missed)."""
    c = random_chain(rng, cfg)
    vals = chain_values(c)
    L = c.length
    S = cfg.max_size
    if rng.random() < 0.5:
        i = int(rng.integers(L))
        vals["tape_size"][i] = int(vals["tape_size"][i] + rng.integers(2 * S, 5 * S + 1))
    else:
        big = int(rng.integers(2))
        for j in range(1, L + 1):
            vals["x_size"][j] = (int(rng.integers(S, 3 * S + 1)) if j % 2 == big
                                 else int(rng.integers(0, 2)))
        vals["tape_size"] = [max(t, vals["x_size"][i + 1]) for i, t in
                             enumerate(vals["tape_size"])]
    return build_chain(vals, "two-runs") or c


def draw(rng: np.random.Generator, cfg: TwoRunsConfig) -> Chain:
    return skewed_chain(rng, cfg) if rng.random() < 1 / 3 else random_chain(rng, cfg)


def walk(cfg: TwoRunsConfig, seed: int, seconds: float, steps_per_restart: int = 40,
         starts: list | None = None, max_chains: int | None = None) -> dict:
    """Restarts of a local search (module docstring) for ``seconds``.  ``starts``: chains to
    start from (cycled) before the drawn ones.  Returns the counts and every chain where two
    runs miss (``two_run_misses``) with its misses."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    scored = unproven = one_run_region = breakpoints = 0
    misses: list = []
    best = None
    starts = list(starts or [])
    by_length: dict = {}
    while time.perf_counter() - t0 < seconds and (max_chains is None or scored < max_chains):
        cur = starts.pop(0) if starts else draw(rng, cfg)
        try:
            cur_s = score(cur, cfg)
        except Unproven:
            unproven += 1
            continue
        scored += 1
        breakpoints += cur_s.breakpoints
        for _ in range(steps_per_restart):
            if time.perf_counter() - t0 >= seconds or (max_chains and scored >= max_chains):
                break
            nxt = mutate(rng, cur, cfg)
            if nxt.length > cfg.max_stages or nxt.length < 2:
                continue
            try:
                s = score(nxt, cfg)
            except Unproven:
                unproven += 1
                continue
            scored += 1
            breakpoints += s.breakpoints
            if s.one > 1.0:
                one_run_region += 1
                by_length[nxt.length] = by_length.get(nxt.length, 0) + 1
            if s.two > 1.0:
                misses.append({"chain": nxt.to_dict(), "misses": [m for m in s.misses
                                                                    if m[0] == cfg.classes[0]]})
            if s.key >= cur_s.key:
                cur, cur_s = nxt, s
        if best is None or cur_s.key > best[1]:
            best = (cur.to_dict(), cur_s.key)
    return {"scored": scored, "unproven": unproven, "breakpoints": breakpoints,
            "one_run_misses": one_run_region,
            "one_run_misses_by_length": dict(sorted(by_length.items())),
            "best": None if best is None else {"chain": best[0], "two": best[1][0],
                                                "one": best[1][1]},
            "two_run_misses": misses, "seconds": round(time.perf_counter() - t0, 1)}


# ---------------------------------------------------------------------- certificates

# (label, solver, options): the unrestricted optimum and both classes by exhaustive search
# (restricted to the class for the classes: the class is decided operation by operation,
# proofs/ilp.md Theorem 2'), the certificate's solutions, which every certificate test
# re-proves in the default tier; and the MILPs (the default ``ilp``, exact over all
# schedules, Theorem 1; the two- and three-pass models, exactly the classes, Theorem 2'),
# recorded under ``facts["milp"]`` (seconds each: re-proved by the slow tests of
# tests/test_two_runs.py, not by every certificate test).
CERTIFIED = (("opt", "exhaustive", {}),
             ("exhaustive-weak-runs2", "exhaustive", {"schedule_class": TWO}),
             ("exhaustive-weak-runs3", "exhaustive", {"schedule_class": "weak-runs<=3"}))
MILPS = (("ilp", "ilp", {}),
         ("ilp-weak-runs2", "ilp", {"passes": 2, "pairs": True}),
         ("ilp-weak-runs3", "ilp", {"passes": 3, "pairs": True}))


def certificate(chain: Chain, budget: int, claim: str, description: str,
                time_limit: float = 600.0):
    """A ``remat-certificate/1`` of ``chain`` at ``budget``: the answers of
    :data:`CERTIFIED` as its solutions, each through ``solvers.solve`` (so replayed by the
    simulator), and as facts the smallest feasible budgets of all schedules and of both
    classes and the answers of :data:`MILPS` (``facts["milp"]``: label to solver, options,
    status, optimal_for, makespan, min_budget, schedule)."""
    import solvers
    from remat_theory.analysis.certificates import Certificate, solution_entry

    sols = {label: solution_entry(solvers.solve(chain, budget, name, **opts), opts)
            for label, name, opts in CERTIFIED}
    milp = {}
    for label, name, opts in MILPS:
        o = dict(opts, time_limit=time_limit)
        e = solution_entry(solvers.solve(chain, budget, name, **o), opts)
        milp[label] = {k: e[k] for k in ("solver", "options", "status", "optimal_for",
                                         "makespan", "min_budget", "schedule")}
    facts = {"min_budget_all": _ex.min_feasible_budget(chain),
             "min_budget_weak_runs_2": _ex.min_feasible_budget(chain, schedule_class=TWO),
             "min_budget_weak_runs_3": _ex.min_feasible_budget(chain,
                                                               schedule_class="weak-runs<=3"),
             "milp": milp}
    return Certificate(chain=chain, budget=budget, solutions=sols, claim=claim,
                       description=description, facts=facts)


# ---------------------------------------------------------------------- the structured family

def loss_transient_chain(rng: np.random.Generator, L: int, model: str = "any") -> Chain:
    """A chain of the shape of the counterexample (proofs/two_runs.md, "The structure that
    needs the third run"), every time 0 (the question is the smallest budget): activations
    drawn large (or tiny), tapes a little above their output, recording transients large
    (or tiny), a backward overhead anywhere and often a large one, outputs unsaved with
    probability 0.6.  ``model``: ``"saved"`` every output saved, ``"no-fall-costs"``
    ``fall_overhead = fwd_overhead``, ``"classic"`` both, ``"any"`` neither."""
    S = int(rng.choice([10, 20, 30]))

    def r(lo, hi):
        return int(rng.integers(lo, hi + 1))

    def pick(*options):
        return options[int(rng.integers(len(options)))]

    x = [pick(0, 0, r(0, 2))] + [pick(r(S // 2, 2 * S), r(0, 3), r(S // 2, 2 * S))
                                 for _ in range(L)]
    if rng.random() < 0.5:
        x[L] = pick(0, r(0, 3))
    saved = [bool(rng.random() < 0.4) for _ in range(L)]
    tape = [x[i + 1] + pick(r(0, 3), r(0, S)) for i in range(L)]
    fall_o = [pick(r(0, 3), r(S // 2, 3 * S)) for _ in range(L)]
    fwd_o = [pick(0, 0, r(0, S)) for _ in range(L)]
    bwd_o = [pick(0, 0, r(0, S), r(S, 4 * S)) for _ in range(L + 1)]
    if model in ("saved", "classic"):
        saved = [True] * L
    if model in ("no-fall-costs", "classic"):
        fwd_o = list(fall_o)
    return Chain([0.0] * L, [0.0] * (L + 1), x, tape, fwd_o, bwd_o, fall_overhead=fall_o,
                 output_saved=saved, name="loss-transient")


MODELS = ("any", "saved", "no-fall-costs", "classic")


def family_sweep(seed: int, seconds: float, L: int, model: str = "any", runs: int = 2,
                 max_chains: int | None = None) -> dict:
    """Draw :func:`loss_transient_chain` for ``seconds``; on each, the smallest feasible
    budget over all schedules against that of ``weak-runs<=runs-1`` and, where that one
    misses, of ``weak-runs<=runs`` (exhaustive search, :func:`solvers.exhaustive.min_feasible_budget`)."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    n = guide = 0
    found = []
    while time.perf_counter() - t0 < seconds and (max_chains is None or n < max_chains):
        c = loss_transient_chain(rng, L, model)
        n += 1
        lo = _ex.min_feasible_budget(c, max_stages=_ex.REFERENCE_MAX_STAGES)
        if runs > 1 and _ex.min_feasible_budget(
                c, schedule_class=f"weak-runs<={runs - 1}",
                max_stages=_ex.REFERENCE_MAX_STAGES) == lo:
            continue
        guide += 1
        k = _ex.min_feasible_budget(c, schedule_class=f"weak-runs<={runs}",
                                    max_stages=_ex.REFERENCE_MAX_STAGES)
        if k > lo:
            found.append({"chain": c.to_dict(), "min_budget_all": lo,
                          f"min_budget_weak_runs_{runs}": k})
    return {"chains": n, "guide_misses": guide, "misses": found, "model": model, "stages": L,
            "runs": runs, "seconds": round(time.perf_counter() - t0, 1)}
