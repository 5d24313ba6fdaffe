"""Cross-check every solver against every other: the package's main job (``remat verify``).

Three independent ways to reach an optimum (persistent DP, ILP, exhaustive search) and a
set of baselines each answer the same instances; every schedule is replayed through the
simulator (by :func:`solvers.solve`), and the answers must satisfy every relation that the
theory says holds between them.  A relation that fails is a *violation*: a bug in some
solver (or in the theory), never a number to average away.

Relations checked on each instance ``(chain, budget)``
------------------------------------------------------
Schedules belong to classes ordered by inclusion::

    persistent  ⊆  weakly-persistent  ⊆  weak-runs<=1  ⊆  weak-runs<=2  ⊆  all  ⊆  all+drop

(``weak-runs<=K``: at most K weakly increasing runs of forward stages per phase, classes of
:mod:`remat_theory.model.persistence`; K = 1, the *monotone* class, is the normal form of the
ILP's fast mode.)

Every schedule is classified by the rules of :mod:`remat_theory.model.persistence` (the smallest
class it lies in, :func:`remat_theory.model.classes.classify`; ``all+drop`` when it uses
Drop ops), whatever solver produced it.  The solvers run are the registry's: every
registered solver and the variants declared for verify, each on chains up to its registered
``max_stages``.  A
*claim* is what a solution proves about a class C (its ``optimal_for``): "the optimum of C
is v" (status ``optimal``), "every schedule of C takes at least b" (``bound``; over the class
``info["bound_over"]`` instead when the solution names one), "no schedule of C fits"
(status ``infeasible``).  Then:

0. an exact solver's schedule lies in the class it claims to be optimal for;
1. every schedule is valid under the budget and its claimed makespan and peak are the
   simulated ones (the registry raises :class:`SolverContractError` otherwise; any other
   exception a solver raises on valid input counts too, except misuse,
   :class:`SolverOptionError`, which stops the sweep as bad input, and a limit,
   :class:`SolverLimitError`, recorded as status ``refused``: no claim);
2. no schedule of a class C' ⊆ C is shorter than an optimum or a bound claimed for C
   (relative tolerance 1e-9).  This contains: exact solvers of the same class agree,
   ``exhaustive <= ilp`` (equal when both are proven), ``ilp <= dp-weak <= dp``, the fast
   ILP equals the exhaustive search of its class, and no heuristic beats the proven
   optimum;
3. no schedule of a class C' ⊆ C exists where a solver claims C infeasible (so all exact
   solvers agree on feasibility, and no heuristic fits where the optimum says none does);
4. the smallest feasible budgets (``min_budget``) that exact solvers report are equal
   within a class and do not increase from a class to a larger one, and are consistent
   with the instance's own status (above the budget when infeasible, at most it when not);
5. across the budgets of one chain, each exact solver's proven optimum does not increase
   with the budget, and it never says infeasible above a budget where it found a schedule.

The *gap* of a solver on an instance is ``makespan / optimum - 1``, where the optimum is the
proven optimum of class ``all`` (exhaustive search or a proven ILP); instances with no
proven optimum have no gap.

Budgets per chain: ``lb - 1`` where ``lb`` is :meth:`Chain.memory_lower_bound` (infeasible
for every schedule); the smallest feasible budget ``m`` the exact solvers report there
(and ``m - 1``, which must be infeasible, when ``m`` is the optimum of class ``all``); then
``budgets_per_chain`` budgets from ``m`` to store-all, denser near ``m`` (tight budgets are
where solvers differ and where the ILP works hardest).

This module sits on the solver floor (like the command line): it imports :mod:`solvers`
and is not imported by the core package.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

import solvers
from remat_theory.analysis import families
from remat_theory.analysis.parallel import TaskFailedError, parallel_map
from remat_theory.analysis.verify_report import format_table, summarize
from remat_theory.model import classes, fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import (InfeasibleBudgetError, RematError, SolverContractError,
                                       SolverError, SolverLimitError, SolverOptionError)
from remat_theory.model.solution import CLASS_NONE, INFEASIBLE, OPTIMAL
from remat_theory.model.validation import check_int
from solvers import registry


__all__ = ["VerifyConfig", "ChainTask", "make_tasks", "verify_chain", "run_verify",
           "summarize", "format_table", "CLASS_RANK", "class_subset", "default_max_stages_for"]

#: The status of a solve a solver refused before any work (a limit of the solver: SolverLimitError).
REFUSED = "refused"
RTOL = 1e-9  # relative tolerance between makespans: sums of the same floats, nothing more

# Inclusion order of the classes a schedule is classified into (Solution.optimal_for keys),
# from remat_theory.model.classes.
CLASS_RANK = {c.key: k for k, c in enumerate(classes.RANKED)}

DEFAULT_FAMILIES = ("random", "resnet", "transformer", "rnn", "homogeneous")


def default_max_stages_for(labels=None) -> tuple:
    """``((label, max stages), ...)``: the longest chain each solver or variant runs on in
    a sweep, as registered (:func:`solvers.registry.register`'s ``max_stages``); labels
    with no limit are left out.  ``labels`` default: every solver and variant."""
    if labels is None:
        labels = registry.names() + list(registry.variants())
    out = []
    for label in labels:
        cap = registry.resolve(label)[2]
        if cap is not None:
            out.append((label, cap))
    return tuple(out)


def class_subset(a: str, b: str) -> bool:
    """True when every schedule of class ``a`` is also in class ``b``
    (:func:`remat_theory.model.classes.subset`)."""
    return classes.subset(a, b)


def _lt(a: float, b: float) -> bool:
    """a < b beyond floating-point noise."""
    return a < b - RTOL * max(1.0, abs(a), abs(b))


# --------------------------------------------------------------------------- tasks
VARIATION_MODES = ("half", "all")


def variation_modes(spec) -> tuple:
    """``((name, mode), ...)`` in table order from ``"fall-costs,unsaved-outputs=all"`` (or
    an iterable of such items): each a variation of :data:`remat_theory.model.fields.VARIATIONS`,
    ``=half`` (the default: on the trials whose bit says so, so that the variations listed
    meet in every combination, none included) or ``=all`` (every chain)."""
    if spec is None:
        return ()
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    modes = {}
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:
            name, mode = item
        elif isinstance(item, str):
            name, _, mode = item.strip().partition("=")
            mode = mode or "half"
        else:
            raise RematError(f"variations: {item!r} is not NAME or NAME=half|all")
        if not name:
            continue
        fields.variation(name)  # ChainError naming the known ones
        if mode not in VARIATION_MODES:
            raise RematError(f"variations: {name}={mode} is not one of "
                             f"{', '.join(f'{name}={m}' for m in VARIATION_MODES)}")
        modes[name] = mode
    return tuple((n, modes[n]) for n in fields.VARIATIONS if n in modes)


@dataclass(frozen=True)
class ChainTask:
    """One chain of the sweep and how to check it (small and picklable: the chain is built
    in the worker from ``family``, ``length`` and ``seed``)."""

    family: str
    length: int
    seed: int
    solvers: tuple
    budgets_per_chain: int = 4
    time_limit: float | None = None
    max_stages_for: tuple = ()  # overrides of the registered limits: ((label, stages), ...)
    overheads: bool = True
    integer_times: bool = True
    variations: tuple = ()  # names of the variations drawn on this chain (fields.VARIATIONS)

    def chain(self) -> Chain:
        kwargs = {}
        if self.family == "random":
            kwargs = {"overheads": self.overheads, "integer_times": self.integer_times}
        elif self.family in ("resnet", "transformer", "rnn"):
            kwargs = {"overheads": self.overheads}
        chain = families.make(self.family, self.length, self.seed, **kwargs)
        return families.with_variations(chain, self.variations, self.seed)

    def __repr__(self) -> str:
        return (f"ChainTask({self.family}, L={self.length}, seed={self.seed}, "
                f"overheads={self.overheads}, integer_times={self.integer_times}"
                + (f", variations={','.join(self.variations)})" if self.variations else ")"))


#: Longest chain of a sweep: past it the class DPs alone (O(L^3) and O(L^4) tables) are
#: refused or run for hours, and generating the chains takes longer than the sweep's point.
MAX_STAGES = 2_000


@dataclass
class VerifyConfig:
    """Parameters of a sweep (the options of ``remat verify``)."""

    seed: int = 0
    min_stages: int = 2
    max_stages: int = 7
    trials: int = 6  # chains per family
    families: tuple = DEFAULT_FAMILIES
    solvers: tuple | None = None  # None: every registered solver
    budgets_per_chain: int = 4
    time_limit: float | None = 10.0  # per solve, for solvers that take a time limit
    # ((label or name, max stages), ...): replaces the registered limit of those labels
    max_stages_for: tuple = ()
    workers: int | None = None
    scheduler: object = None
    progress: bool = True
    # Optional chain fields to draw (:func:`variation_modes`): "fall-costs,unsaved-outputs"
    # draws the k-th variation listed (table order) on the trials whose bit k is set, so the
    # variations meet in every combination; "NAME=all" draws it on every chain.
    variations: str | tuple = ()

    def check(self) -> None:
        for name in ("min_stages", "max_stages", "trials", "budgets_per_chain"):
            check_int(getattr(self, name), name, minimum=1)
        if self.min_stages > self.max_stages:
            raise RematError(f"stage range {self.min_stages}:{self.max_stages} is empty "
                             "(min above max)")
        if self.max_stages > MAX_STAGES:  # before any chain is built (seconds per 100,000)
            raise RematError(f"max_stages = {self.max_stages:,} is above {MAX_STAGES:,}: a sweep "
                             f"solves every chain with every solver and its exact reference; "
                             f"time one long chain with remat solve --time-limit, or sweep "
                             f"MIN:MAX up to {MAX_STAGES:,}")
        check_int(self.seed, "seed", minimum=0)
        if self.time_limit is not None and not (self.time_limit > 0 and math.isfinite(self.time_limit)):
            raise RematError(f"time_limit = {self.time_limit!r} must be a positive number of seconds")
        variation_modes(self.variations)  # raises naming a bad one
        if not self.families:
            raise RematError("families is empty")
        for f in self.families:
            families.family(f)  # raises ChainError naming it
        for item in self.max_stages_for:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise RematError(f"max_stages_for entry {item!r} is not (solver, stages >= 1)")
            check_int(item[1], f"max_stages_for[{item[0]!r}]", minimum=1)


def resolve_solvers(requested) -> tuple:
    """``(label, solver, options)`` for each solver to run: ``requested`` (registry names,
    variant labels or ``package.module:function`` paths) checked, or what the registry says
    the default verify runs (:func:`solvers.registry.verify_labels`).  The solver of a
    variant is its registry name; a registered name or a path stands for itself."""
    if requested is None:
        labels = registry.verify_labels()
    else:
        labels = []
        for label in requested:
            registry.get(label)  # raises SolverOptionError naming it and the known names
            if label not in labels:
                labels.append(label)
        if not labels:
            raise RematError("no solver selected")
    out = []
    for label in labels:
        v = registry.variants().get(label) if label not in registry.names() else None
        name, opts = (v.solver, v.options) if v is not None else (label, ())
        out.append((label, name, tuple(opts)))
    return tuple(out)


def schedule_class_of(chain: Chain, schedule) -> str:
    """The key of the smallest class of :data:`CLASS_RANK` that ``schedule`` belongs to,
    decided by the rules (:func:`remat_theory.model.classes.classify`), not by what a
    solver says."""
    return classes.classify(chain, schedule).key


def make_tasks(cfg: VerifyConfig) -> list[ChainTask]:
    """The chains of a sweep, in a fixed order; each task's seed derives from ``cfg.seed``,
    the family and the trial number only (never from the worker that runs it)."""
    cfg.check()
    names = resolve_solvers(cfg.solvers)
    modes = variation_modes(cfg.variations)
    every = tuple(n for n, mode in modes if mode == "all")
    bits = tuple(n for n, mode in modes if mode == "half")  # the k-th: on where trial bit k is
    tasks = []
    span = cfg.max_stages - cfg.min_stages + 1
    for fi, fam in enumerate(cfg.families):
        for trial in range(cfg.trials):
            ss = np.random.SeedSequence([int(cfg.seed), fi, trial])
            rng = np.random.default_rng(ss)
            if fam == "homogeneous":  # the seed does not change it: vary its length instead
                length = cfg.min_stages + trial % span
            else:
                length = int(rng.integers(cfg.min_stages, cfg.max_stages + 1))
            chain_seed = int(ss.generate_state(1)[0])
            tasks.append(ChainTask(
                family=fam, length=length, seed=chain_seed, solvers=names,
                budgets_per_chain=cfg.budgets_per_chain, time_limit=cfg.time_limit,
                max_stages_for=tuple(cfg.max_stages_for),
                overheads=trial % 2 == 0, integer_times=trial % 4 != 3,
                variations=tuple(n for n, _ in modes
                                 if n in every or trial >> bits.index(n) & 1)))
    return tasks


# --------------------------------------------------------------------------- solving
def _solve_record(chain: Chain, budget: int, spec: tuple, task: ChainTask) -> dict | None:
    """Run one solver on one instance; a dict describing what it answered (or how it
    failed), or None when the solver is skipped on this chain."""
    label, name, opts = spec
    info = solvers.get(name)
    caps = dict(task.max_stages_for)
    cap = caps.get(label, caps.get(name)) if (label in caps or name in caps) \
        else registry.resolve(label)[2]
    if cap is not None and chain.length > cap:
        return None
    on = chain
    missing = () if info.external else registry.unsupported(name, chain)
    if missing:
        if not all(fields.field(f).extends for f in missing):
            return None  # a field it does not model (its registered supports): refused, skipped
        # fields whose absence is a sub-model (bandwidth): it answers on the chain without
        # them, over its own classes, and its schedule is one of the chain's (the relations
        # then check the solvers that model them against it: O.1, offloading never hurts)
        on = chain.replace(**{f: None for f in missing})
    options = dict(opts)
    guard = info.defaults.get("max_stages")
    if guard is not None and chain.length > guard:  # a cap raised past a size guard: lift it
        options["max_stages"] = chain.length
    if task.time_limit is not None and "time_limit" in info.options:
        options["time_limit"] = task.time_limit
    rec = {"solver": label, "exact": info.exact, "status": None, "makespan": None,
           "peak_memory": None, "bound": None, "optimal_for": CLASS_NONE, "min_budget": None,
           "wall_time": 0.0, "error": None, "schedule_class": None, "message": "",
           "bound_over": None}
    t0 = time.perf_counter()
    try:
        sol = solvers.solve(on, budget, name, **options)
    except InfeasibleBudgetError as e:  # a solver saying "infeasible" by raising
        rec.update(status=INFEASIBLE, min_budget=e.smallest_feasible,
                   optimal_for=info.optimal_for if info.exact else CLASS_NONE,
                   wall_time=time.perf_counter() - t0, message=str(e))
        return rec
    except SolverOptionError:
        raise  # misuse (a bad option of a variant or plug-in): bad input, not a finding
    except SolverLimitError as e:  # refused before any work: neither bad input nor a finding
        rec.update(status=REFUSED, message=str(e), wall_time=time.perf_counter() - t0)
        return rec
    except (SolverContractError, SolverError) as e:  # a false answer, or another failure
        rec.update(status="error", error=f"{e}", wall_time=time.perf_counter() - t0)
        return rec
    except Exception as e:  # noqa: BLE001 - a crash on valid input is a finding, not a stop
        rec.update(status="error", error=f"{type(e).__name__}: {e}",
                   wall_time=time.perf_counter() - t0)
        return rec
    rec.update(status=sol.status, makespan=sol.makespan, peak_memory=sol.peak_memory,
               bound=sol.bound, optimal_for=sol.optimal_for or CLASS_NONE,
               min_budget=sol.min_budget, wall_time=sol.wall_time, message=sol.message,
               bound_over=(sol.info or {}).get("bound_over"))
    if sol.schedule is not None:
        rec["schedule_class"] = schedule_class_of(chain, sol.schedule)
    return rec


def _budgets(chain: Chain, probe: list, k: int) -> tuple[list, list]:
    """Feasible-side and infeasible-side budgets for ``chain`` from the probe at lb - 1."""
    lb, top = chain.memory_lower_bound(), chain.store_all_memory()
    global_min = [r["min_budget"] for r in probe if r["exact"] and r["min_budget"] is not None
                  and r["optimal_for"] == "all"]
    any_min = [r["min_budget"] for r in probe if r["exact"] and r["min_budget"] is not None]
    if global_min:
        m = min(global_min)
    elif any_min:
        m = min(any_min)
    else:
        m = lb
    m = max(m, lb)
    m = min(m, top)  # store-all always fits at top
    extra_infeasible = [m - 1] if global_min and m - 1 > lb - 1 else []
    if k == 1:
        fracs = [0.0]
    else:
        fracs = [(j / (k - 1)) ** 2 for j in range(k)]
    feas = sorted({m + int(round((top - m) * f)) for f in fracs})
    return feas, extra_infeasible


def _check_instance(chain_name: str, budget: int, recs: list) -> list:
    """Violations of relations 1-4 among the answers ``recs`` on one instance."""
    out = []

    def viol(relation, names, detail):
        out.append({"chain": chain_name, "budget": budget, "relation": relation,
                    "solvers": sorted(set(names)), "detail": detail})

    for r in recs:
        if r["status"] == "error":
            viol("valid schedule and true claims", [r["solver"]], r["error"])
    ok = [r for r in recs if r["status"] != "error"]
    scheds = [r for r in ok if r["schedule_class"] is not None]
    for r in scheds:
        cls = r["optimal_for"]
        if r["exact"] and cls in CLASS_RANK and not class_subset(r["schedule_class"], cls):
            viol("schedule lies in the class it claims", [r["solver"]],
                 f"{r['solver']} claims {cls} but its schedule is only {r['schedule_class']}")
    for c in ok:
        cls = c["optimal_for"]
        if cls == CLASS_NONE or cls is None:
            continue
        if c["status"] == OPTIMAL and c["makespan"] is not None:
            for s in scheds:
                if s is not c and class_subset(s["schedule_class"], cls) and _lt(s["makespan"], c["makespan"]):
                    viol("no schedule beats a proven optimum of its class",
                         [c["solver"], s["solver"]],
                         f"{c['solver']} claims the optimum over {cls} is {c['makespan']:.10g} but "
                         f"{s['solver']} found a {s['schedule_class']} schedule of {s['makespan']:.10g}")
        # a bound over another class than the answer's (info["bound_over"], e.g. ilp-offload's
        # over all schedules beside an optimum over those of at most N ops) is checked there
        bcls = c.get("bound_over") or cls
        if c["bound"] is not None and (c["status"] != OPTIMAL or bcls != cls):
            for s in scheds:
                if class_subset(s["schedule_class"], bcls) and _lt(s["makespan"], c["bound"]):
                    viol("no schedule beats a proven lower bound of its class",
                         [c["solver"], s["solver"]],
                         f"{c['solver']} proves every {bcls} schedule takes >= {c['bound']:.10g} but "
                         f"{s['solver']} found one of {s['makespan']:.10g}")
        if c["status"] == INFEASIBLE:
            for s in scheds:
                if class_subset(s["schedule_class"], cls):
                    viol("no schedule where its class is proven infeasible",
                         [c["solver"], s["solver"]],
                         f"{c['solver']} says no {cls} schedule fits in {budget} but "
                         f"{s['solver']} found a {s['schedule_class']} schedule "
                         f"(peak {s['peak_memory']}, makespan {s['makespan']:.10g})")
    # Smallest feasible budgets reported by exact solvers.
    mins = [r for r in ok if r["exact"] and r["min_budget"] is not None
            and r["optimal_for"] in CLASS_RANK]
    for r in mins:
        if r["status"] == INFEASIBLE and r["min_budget"] <= budget:
            viol("min_budget consistent with the status", [r["solver"]],
                 f"{r['solver']} says {budget} is infeasible but reports the smallest feasible "
                 f"budget {r['min_budget']}")
        if r["schedule_class"] is not None and r["min_budget"] > budget:
            viol("min_budget consistent with the status", [r["solver"]],
                 f"{r['solver']} found a schedule at {budget} but reports the smallest feasible "
                 f"budget {r['min_budget']}")
    for a in mins:
        for b in mins:
            if a is b:
                continue
            ca, cb = a["optimal_for"], b["optimal_for"]
            if ca == cb:
                bad = a["min_budget"] != b["min_budget"] and a["solver"] < b["solver"]
            else:  # a's class strictly inside b's: it cannot fit in less memory
                bad = class_subset(ca, cb) and a["min_budget"] < b["min_budget"]
            if bad:
                viol("smallest feasible budgets agree across classes", [a["solver"], b["solver"]],
                     f"{a['solver']} ({ca}) reports {a['min_budget']}, "
                     f"{b['solver']} ({cb}) reports {b['min_budget']}")
    return out


def _check_monotone(chain_name: str, instances: list) -> list:
    """Relation 5: each solver's proven optimum is non-increasing in the budget."""
    out = []
    by_solver: dict = {}
    for inst in instances:
        for r in inst["results"]:
            if r["exact"] and r["status"] != "error":
                by_solver.setdefault(r["solver"], []).append((inst["budget"], r))
    for name, seq in by_solver.items():
        seq.sort(key=lambda x: x[0])
        for i, (b1, r1) in enumerate(seq):
            for b2, r2 in seq[i + 1:]:
                if b2 <= b1:
                    continue
                if r1["status"] == OPTIMAL and r2["status"] == OPTIMAL and \
                        r1["optimal_for"] == r2["optimal_for"] and _lt(r1["makespan"], r2["makespan"]):
                    out.append({"chain": chain_name, "budget": b2,
                                "relation": "optimum non-increasing in the budget", "solvers": [name],
                                "detail": f"{name}: optimum {r1['makespan']:.10g} at budget {b1} but "
                                          f"{r2['makespan']:.10g} at the larger budget {b2}"})
                if r1["schedule_class"] is not None and r2["status"] == INFEASIBLE and \
                        r2["optimal_for"] != CLASS_NONE:
                    out.append({"chain": chain_name, "budget": b2,
                                "relation": "feasibility monotone in the budget", "solvers": [name],
                                "detail": f"{name}: a schedule at budget {b1} but infeasible at the "
                                          f"larger budget {b2}"})
    return out


def verify_chain(task: ChainTask) -> dict:
    """Check one chain at all its budgets (the unit of work of a sweep; runs in a worker).

    Returns a plain dict (picklable, JSON-ready): the chain, each instance's answers and
    reference optimum, and the violations found.
    """
    t0 = time.perf_counter()
    chain = task.chain()
    lb = chain.memory_lower_bound()
    instances = []

    def run_instance(budget: int, kind: str) -> dict:
        recs = [r for r in (_solve_record(chain, budget, n, task) for n in task.solvers)
                if r is not None]
        proven = [r["makespan"] for r in recs if r["status"] == OPTIMAL and
                  r["optimal_for"] == "all" and r["makespan"] is not None]
        opt = min(proven) if proven else None
        for r in recs:
            r["gap"] = None
            if opt is not None and r["schedule_class"] is not None:
                r["gap"] = (r["makespan"] / opt - 1.0) if opt > 0 else 0.0
        inst = {"budget": budget, "kind": kind, "optimum": opt, "results": recs}
        inst["violations"] = _check_instance(chain.name, budget, recs)
        instances.append(inst)
        return inst

    probe_budget = max(0, lb - 1)
    probe = run_instance(probe_budget, "below-lower-bound")
    feas, infeas = _budgets(chain, probe["results"], task.budgets_per_chain)
    for b in infeas:
        if b != probe_budget:
            run_instance(b, "below-min-budget")
    for b in feas:
        run_instance(b, "feasible")
    for v in _check_monotone(chain.name, instances):
        next(i for i in instances if i["budget"] == v["budget"])["violations"].append(v)
    violations = [v for inst in instances for v in inst["violations"]]
    return {"task": repr(task), "chain": chain.name, "family": task.family,
            "length": chain.length, "chain_data": chain.to_dict(),
            "lower_bound": lb, "store_all": chain.store_all_memory(),
            "instances": instances, "violations": violations,
            "wall_time": time.perf_counter() - t0}


# --------------------------------------------------------------------------- sweep
def run_verify(cfg: VerifyConfig) -> dict:
    """Run the whole sweep (in parallel) and return the report (a JSON-ready dict)."""
    solvers.names()  # import every solver module before any worker starts
    tasks = make_tasks(cfg)
    t0 = time.perf_counter()
    try:
        chains = parallel_map(verify_chain, tasks, workers=cfg.workers, scheduler=cfg.scheduler,
                              progress=cfg.progress, desc="verify")
    except TaskFailedError as e:
        if isinstance(e.error, SolverOptionError):  # misuse: say it as itself, bad input
            raise e.error from None
        raise
    wall = time.perf_counter() - t0
    summary = summarize(chains, [spec[0] for spec in tasks[0].solvers] if tasks else ())
    violations = [v for c in chains for v in c["violations"]]
    return {
        "config": {"seed": cfg.seed, "stages": [cfg.min_stages, cfg.max_stages],
                   "trials": cfg.trials, "families": list(cfg.families),
                   "solvers": [spec[0] for spec in tasks[0].solvers] if tasks else [],
                   "budgets_per_chain": cfg.budgets_per_chain, "time_limit": cfg.time_limit,
                   "max_stages_for": {**dict(default_max_stages_for(
                       [spec[0] for spec in tasks[0].solvers] if tasks else [])),
                                      **dict(cfg.max_stages_for)}},
        "chains": len(chains),
        "instances": sum(len(c["instances"]) for c in chains),
        "solves": sum(len(i["results"]) for c in chains for i in c["instances"]),
        "violations": violations,
        "ok": not violations,
        "wall_time": wall,
        "summary": summary,
        "details": chains,
    }


