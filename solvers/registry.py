"""The solver registry: the one home of every solver's facts, and the one entry point.

Every solver has the signature ``solve(chain, budget, **options)`` and returns a
:class:`~remat_theory.model.solution.Solution`.  :func:`solve` validates the input, times
the solver, and replays the schedule it returns through the simulator, so that no solver's
claim is ever trusted on its own word (the networkx ``validate_flows`` habit).

Facts about a solver live in its :func:`register` call and nowhere else: the class it is
optimal for, whether it is exact, the longest chain it is practical for in a sweep
(``max_stages``) and as the exact reference of a comparison (``reference_max_stages``), its
named variants (a label standing for fixed options, e.g. ``exhaustive-monotone``), whether
its schedules may use Drop (``may_drop``), the classes it can be asked to be optimal for,
the optional chain fields it models (``supports``), its options' schema (``options``:
type, range, doc; checked here before it runs), and a note for the command line before a
solve that may run long.  Every layer above
(verify, compare, solve, hard search, benchmarks, plots, the torch confirmation) reads them
from here, so adding a solver is adding one module to :mod:`solvers`.

Solvers of your own
-------------------
Wherever a solver name is accepted, so is ``package.module:function``: the function is
imported and run exactly like a built-in (its schedule replayed, classified and
cross-checked by ``remat verify``).  An installed distribution can also declare solvers in
the entry-point group ``remat.solvers`` (``name = package.module:function``, in
``pyproject.toml`` under ``[project.entry-points."remat.solvers"]``); they are loaded on
the registry's first use and listed by ``remat solvers``.  The target may be a function
(registered under the entry point's name as a heuristic) or a module that calls
:func:`register` itself (then its own facts apply).

Such a function may return a :class:`Solution`, or just a schedule: a
:class:`~remat_theory.model.schedule.Schedule`, a list of op tokens, a token string, or None
when it finds none.  The registry replays a bare schedule to fill in the makespan and the
peak (status ``feasible``); None becomes ``infeasible`` with no claim about any class.

Errors: misuse (an unknown solver, path or option) raises
:class:`~remat_theory.model.errors.SolverOptionError`; a false answer (an invalid schedule,
a makespan or peak the simulator does not measure, a result of the wrong type) raises
:class:`~remat_theory.model.errors.SolverContractError`.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import math
import os
import pkgutil
import time
from typing import Callable, Mapping

from remat_theory.model import classes as schedule_classes
from remat_theory.model import fields as chain_fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import (EQ, InvalidScheduleError, Note, PluginError, RematError,
                                       Remedy, ScheduleParseError, SolverContractError,
                                       SolverError, SolverLimitError, SolverOptionError)
from remat_theory.model.schedule import DROP, Schedule
from remat_theory.model.fast_replay import replay_totals
from remat_theory.model.simulator import check_budget
from remat_theory.model.solution import CLASS_NONE, TIME_LIMIT, Solution
from remat_theory.model.validation import check_int

from solvers._deadline import Deadline, DeadlineExpired
from solvers._deadline import check as deadline_check
from solvers._deadline import current_is as deadline_current_is

# Option is re-exported for the registrations: ``from solvers.registry import Option, register``
from solvers._options import (Option, as_heuristic, check_all, defaults_of,  # noqa: F401
                              option_error, options_of, schema_of, supports_of,
                              takes_any_option)
# the records the registry keeps, and where each built-in solver is registered; variant is
# re-exported for the registrations as Option is
from solvers._replay_share import (REPLAY_GRACE_S, REPLAY_OVERRUN,  # noqa: F401
                                   replay_reserve, share_note, with_reserve)
from solvers._info import BUILTIN_MODULES, NoteHook, SolverInfo, Variant, variant  # noqa: F401

# Relative tolerance between a solver's claimed makespan and the simulated one: the two
# are sums of the same floats in possibly different orders, nothing more.
MAKESPAN_RTOL = 1e-9
ENTRY_POINT_GROUP = "remat.solvers"

_REGISTRY: dict[str, SolverInfo] = {}
_VARIANTS: dict[str, Variant] = {}
_EXTERNAL: dict[str, SolverInfo] = {}  # module:function paths loaded so far
_LOADED = False
_PLUGINS_LOADED = False


def _stage_limit(value, what: str, name: str) -> int | None:
    if value is None:
        return None
    return check_int(value, what, minimum=1, error=SolverError, owner=f"solver {name!r}:")


def _variants_of(name: str, variants: Mapping | None, opts: tuple) -> tuple:
    out = []
    for label, spec in (variants or {}).items():
        if not isinstance(spec, Mapping):
            raise SolverError(f"solver {name!r}: variant {label!r} must be a dict of options")
        if isinstance(spec.get("options"), Mapping):  # a variant(...) declaration
            extra = set(spec) - {"options", "max_stages", "in_verify"}
            if extra:
                raise SolverError(f"solver {name!r}: variant {label!r} has unknown field "
                                  f"{sorted(extra)[0]!r}")
            options = spec["options"]
            cap, default = spec.get("max_stages"), bool(spec.get("in_verify", False))
        else:
            options, cap, default = spec, None, False
        bad = [k for k in options if k not in opts]
        if bad:
            raise SolverError(f"solver {name!r}: variant {label!r} sets option {bad[0]!r}, "
                              f"which the solver does not take")
        out.append(Variant(label, name, tuple(sorted(options.items())),
                           _stage_limit(cap, f"variant {label!r} max_stages", name), default))
    return tuple(out)


def register(name: str, *, optimal_for: str, exact: bool = False, description: str = "",
             max_stages: int | None = None, reference_max_stages: int | None = None,
             variants: Mapping | None = None, may_drop: bool = False,
             classes: tuple = (), note: NoteHook | None = None, supports: tuple = (),
             options: Mapping | None = None, delegates: bool = False):
    """Decorator: register ``func(chain, budget, **options)`` under ``name``.

    Parameters
    ----------
    name : the registry name.
    optimal_for : key of the class its answers are optimal for by default
        (:mod:`remat_theory.model.classes`; ``"none"`` for a heuristic).
    exact : an exact optimizer (its claims are cross-checked as proofs).
    description : one line for ``remat solvers`` (default: the docstring's first paragraph).
    max_stages : the longest chain it is practical for in a sweep of many instances
        (``remat verify``, plots, the quality benchmark, the torch confirmation); None: no
        limit.  Longer chains are skipped there, and said to be.
    reference_max_stages : the longest chain on which it serves as the exact reference (the
        OPT of ``remat compare`` and ``remat hard``), where one solve may take seconds.
    variants : ``{label: {option: value}}`` (or ``{label: variant(...)}``): labels that
        stand for this solver with fixed options, accepted wherever a solver name is.
    may_drop : its schedules may use Drop operations (the explicit-deletion extension).
    classes : keys of every class an option can make it optimal for (default: optimal_for).
    note : ``note(chain, budget, options)`` -> a :class:`~remat_theory.model.errors.Note`
        before a solve that may run long (or None); the command line prints it.
    supports : the optional chain fields it models (names of
        :func:`remat_theory.model.fields.optional_names`: ``fall_time``, ``fall_overhead``,
        ``output_saved``).  A chain that gives any other optional field a value of its own
        is refused (:func:`unsupported`); default none, so a new field is never assumed.
    options : ``{option: Option(...)}`` (:class:`solvers._options.Option`): each keyword
        option's type, range and one-line doc, checked by :func:`solve` before the solver
        runs (the default is the signature's).
    delegates : its answers are those of other solvers run through :func:`solve` (each
        replayed there): its time limit keeps nothing back for a replay of its own.
    """

    def deco(func):
        if name in _REGISTRY and _REGISTRY[name].func is not func:
            raise SolverError(f"solver name {name!r} is registered twice")
        opts = options_of(func, name)
        doc = description or (inspect.getdoc(func) or "").split("\n\n")[0].replace("\n", " ")
        vs = _variants_of(name, variants, opts)
        schema = schema_of(name, options, opts)
        for v in vs:  # a variant's fixed options obey the schema too
            try:
                check_all(schema, v.option_dict, name)
            except RematError as e:
                raise SolverError(f"variant {v.label!r}: {e}") from None
        for v in vs:
            if v.label in _REGISTRY or (v.label in _VARIANTS and _VARIANTS[v.label].solver != name):
                raise SolverError(f"variant label {v.label!r} of {name!r} is already taken")
        keys = tuple(dict.fromkeys((optimal_for,) + tuple(classes)))
        for k in keys:
            if not schedule_classes.is_class_name(k):
                raise SolverError(f"solver {name!r}: class {k!r} is unknown")
        _REGISTRY[name] = SolverInfo(
            name, func, optimal_for, exact, doc, opts,
            _stage_limit(max_stages, "max_stages", name),
            _stage_limit(reference_max_stages, "reference_max_stages", name),
            vs, bool(may_drop), keys, note, defaults=defaults_of(func, opts),
            any_options=takes_any_option(func), supports=supports_of(name, supports),
            schema=schema, delegates=bool(delegates))
        for v in vs:
            _VARIANTS[v.label] = v
        return func

    return deco


def _load_all() -> None:
    """Import every module of :mod:`solvers` (each registers its solvers), then the
    entry points, once each."""
    global _LOADED
    if not _LOADED:
        # The modules beside this file, found without importing the package from here
        # (solvers/__init__.py imports this module: no import cycle).
        for mod in pkgutil.iter_modules([os.path.dirname(os.path.abspath(__file__))]):
            if not mod.name.startswith("_") and mod.name != "registry":
                importlib.import_module(f"solvers.{mod.name}")
        _LOADED = True
    if not _PLUGINS_LOADED:
        load_entry_points()


def load_entry_points(force: bool = False) -> list[str]:
    """Register the solvers of the entry-point group ``remat.solvers`` (done once on first
    use; ``force`` scans again, for a distribution installed since).  Returns the names
    registered by this call.  A broken entry point raises :class:`SolverOptionError`
    naming it."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED and not force:
        return []
    _PLUGINS_LOADED = True
    added = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _REGISTRY:
            continue
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 - any import failure is the plug-in's, named
            raise option_error(f"entry point {ep.name} = {ep.value} (group "
                                    f"{ENTRY_POINT_GROUP}) cannot be loaded: "
                                    f"{type(e).__name__}: {e}") from None
        if ep.name not in _REGISTRY:  # a module that registered itself needs nothing more
            if not callable(obj) or inspect.ismodule(obj):
                raise option_error(f"entry point {ep.name} = {ep.value} (group "
                                        f"{ENTRY_POINT_GROUP}) is neither a solver function nor "
                                        f"a module registering {ep.name!r}")
            _REGISTRY[ep.name] = _external_info(ep.name, obj)
        added.append(ep.name)
    return added


def _external_info(name: str, func) -> SolverInfo:
    try:
        opts = options_of(func, name)
    except (TypeError, ValueError):
        opts = ()
    doc = (inspect.getdoc(func) or "").split("\n\n")[0].replace("\n", " ")
    return SolverInfo(name, func, CLASS_NONE, False, doc or f"plug-in solver {name}", opts,
                      classes=(CLASS_NONE,), external=True,
                      defaults=defaults_of(func, opts) if opts else {},
                      any_options=takes_any_option(func))


def is_path(name: str) -> bool:
    """True for the ``package.module:function`` form of a solver name."""
    return isinstance(name, str) and ":" in name


def load_path(path: str) -> SolverInfo:
    """The :class:`SolverInfo` of ``package.module:function`` (imported once, then cached).
    A bad module or attribute raises :class:`SolverOptionError` naming it."""
    if path in _EXTERNAL:
        return _EXTERNAL[path]
    module, _, attr = path.partition(":")
    if not module or not attr or not all(p.isidentifier() for p in module.split(".")) \
            or not all(p.isidentifier() for p in attr.split(".")):
        raise option_error(f"solver {path!r} is not a name nor a 'package.module:function' "
                                f"path")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise option_error(f"solver {path!r}: cannot import module {module!r} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise option_error(f"solver {path!r}: module {module!r} has no attribute "
                                    f"{attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise option_error(f"solver {path!r}: {attr!r} is a {type(obj).__name__}, not a "
                                f"function solve(chain, budget, **options)")
    info = _REGISTRY.get(path) or next((i for i in _REGISTRY.values() if i.func is obj), None)
    if info is None:
        info = _external_info(path, obj)
    _EXTERNAL[path] = info
    return info


def names() -> list[str]:
    """Registered solver names (built-in modules and entry points), sorted."""
    _load_all()
    return sorted(_REGISTRY)


def variants() -> dict[str, Variant]:
    """Every registered variant, by label."""
    _load_all()
    return {label: v for label, v in _VARIANTS.items() if v.solver in _REGISTRY}


def verify_labels() -> list[str]:
    """What the default ``remat verify`` runs: every registered solver, then the variants
    declared ``in_verify``."""
    return names() + [label for label, v in variants().items() if v.in_verify]


def _known(name: str) -> bool:
    return name in _REGISTRY or (name in _VARIANTS and _VARIANTS[name].solver in _REGISTRY)


def get(name: str) -> SolverInfo:
    """The :class:`SolverInfo` of a registered name, a variant label (its solver's info) or
    a ``package.module:function`` path; :class:`SolverOptionError` names an unknown one."""
    if not _known(name) and name in BUILTIN_MODULES:
        importlib.import_module(f"solvers.{BUILTIN_MODULES[name]}")
    if not _known(name):
        _load_all()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _VARIANTS:
        return _REGISTRY[_VARIANTS[name].solver]
    if is_path(name):
        return load_path(name)
    known = sorted(_REGISTRY) + sorted(_VARIANTS)
    raise option_error(f"unknown solver {name!r} (known: {', '.join(known)}; or a "
                            f"'package.module:function' path)")


def resolve(label: str) -> tuple[SolverInfo, dict, int | None]:
    """``(info, fixed options, max_stages)`` of a name, variant label or path: what running
    ``label`` means, and the longest chain it is practical for in a sweep."""
    info = get(label)
    v = _VARIANTS.get(label) if label not in _REGISTRY else None
    if v is None:
        return info, {}, info.max_stages
    return info, v.option_dict, v.max_stages if v.max_stages is not None else info.max_stages


def note(chain: Chain, budget: int | None, label: str, options: Mapping | None = None
         ) -> Note | None:
    """The solver's own :class:`~remat_theory.model.errors.Note` before a solve that may run
    long (None when it has nothing to say), its remedies followed by the other exact solvers
    of the same class that serve as the reference on this chain (``reference_max_stages``)
    and may be faster."""
    info, fixed, _ = resolve(label)
    if info.note is None:
        return None
    found = info.note(chain, budget, {**fixed, **dict(options or {})})
    if not found:
        return None
    if isinstance(found, str):  # a plug-in's note in words
        found = Note(found)
    remedies = list(found.remedies)
    for other in (get(n) for n in names()):
        if other.name != info.name and other.exact and other.optimal_for == info.optimal_for \
                and other.reference_for(chain):
            guard = ((("max_stages", EQ, chain.length),) if "max_stages" in other.options
                     else ())
            remedies.append(Remedy(solver=other.name, options=guard, note=(
                f"also exact over {info.optimal_for} schedules and often much faster up to "
                f"about {other.reference_max_stages} stages")))
    return Note(found.text, tuple(remedies))


def check_options(label: str, options: Mapping) -> SolverInfo:
    """Raise :class:`SolverOptionError` naming the first option ``label``'s solver does not
    take; returns its info."""
    info = get(label)
    if info.any_options:
        return info
    bad = [k for k in options if k not in info.options]
    if bad:
        accepted = ", ".join(info.options) or "none"
        raise option_error(f"solver {label!r} does not take option {bad[0]!r} (it takes: "
                                f"{accepted})")
    return info


def unsupported(label: str, chain: Chain) -> tuple:
    """The optional fields ``chain`` uses (values of its own) that ``label``'s solver does
    not model (its registered ``supports``); empty when it models them all."""
    info = get(label)
    return tuple(f for f in chain.fields_used() if f not in info.supports)


def models(label: str, variation: str) -> bool:
    """True when ``label``'s solver models every field of ``variation``."""
    info = get(label)
    return all(f in info.supports for f in chain_fields.variation(variation).fields)


def _refuse_fields(label: str, missing: tuple) -> Exception:
    others = [n for n in names() if all(f in _REGISTRY[n].supports for f in missing)]
    return option_error(
        f"solver {label!r} does not model the chain field {missing[0]} (the chain gives it "
        f"values of its own; {label} models: {', '.join(get(label).supports) or 'none'}); "
        f"solvers that model {', '.join(missing)}: {', '.join(others) or 'none'}")


def verify_solution(chain: Chain, sol: Solution, budget: int | None, check=None) -> None:
    """Replay ``sol.schedule`` and check the solver's claims; raise
    :class:`SolverContractError` if one is false.  A long schedule is replayed by the
    simulator's vectorised replay (:mod:`remat_theory.model.fast_replay`: the same answer
    as :func:`simulate`, tested against it), ``check(what)`` called between its steps."""
    if sol.schedule is None:
        return
    try:
        sim = _replayed(chain, sol.schedule, budget, sol.allows_drop, check)
    except InvalidScheduleError as e:
        raise SolverContractError(f"solver {sol.solver!r} returned an invalid schedule: {e}") from None
    if sol.makespan is None or not math.isclose(sol.makespan, sim.makespan,
                                                rel_tol=MAKESPAN_RTOL, abs_tol=1e-12):
        raise SolverContractError(f"solver {sol.solver!r} claims makespan {sol.makespan} but the "
                                  f"simulator measures {sim.makespan}")
    if sol.peak_memory != sim.peak_memory:
        raise SolverContractError(f"solver {sol.solver!r} claims peak {sol.peak_memory} but the "
                                  f"simulator measures {sim.peak_memory}")


def _replayed(chain: Chain, schedule, budget, allow_drop: bool, check):
    """The referee's replay (remembered for the last few schedules: the answer of a solver
    that replayed it already, or of a sub-solve of ``auto``, is not replayed again)."""
    return replay_totals(chain, schedule, budget, allow_drop=allow_drop, check=check)


def _as_solution(chain: Chain, budget: int, label: str, info: SolverInfo, out,
                 check=None) -> Solution:
    """A solver's return value as a :class:`Solution`: a bare schedule (Schedule, tokens, a
    token string) is replayed to fill in makespan and peak; None is infeasible (no claim)."""
    if isinstance(out, Solution):
        if out.schedule is None or isinstance(out.schedule, Schedule):
            return out
        try:  # a plug-in's Solution holding tokens: the one schedule type from here on
            schedule = (Schedule.parse(out.schedule) if isinstance(out.schedule, str)
                        else Schedule.parse(" ".join(str(t) for t in out.schedule)))
        except (ScheduleParseError, TypeError) as e:
            raise SolverContractError(f"solver {label!r} returned an unreadable schedule: "
                                      f"{e}") from None
        return out.replace(schedule=schedule)
    if out is None:
        return Solution.infeasible(label, budget, message=f"{label} found no schedule")
    try:
        if isinstance(out, Schedule):
            schedule = out
        elif isinstance(out, str):
            schedule = Schedule.parse(out)
        elif isinstance(out, (list, tuple)):
            schedule = Schedule.parse(" ".join(str(t) for t in out))
        else:
            raise SolverContractError(f"solver {label!r} returned {type(out).__name__}, not a "
                                      f"Solution, a schedule or None")
    except ScheduleParseError as e:
        raise SolverContractError(f"solver {label!r} returned an unreadable schedule: {e}") from None
    uses_drop = any(op.kind == DROP for op in schedule)
    try:
        sim = _replayed(chain, schedule, budget, uses_drop, check)
    except InvalidScheduleError as e:
        raise SolverContractError(f"solver {label!r} returned an invalid schedule: {e}") from None
    return Solution.feasible(label, budget, schedule, sim.makespan, sim.peak_memory,
                             allows_drop=uses_drop)


def _call_plugin(info: SolverInfo, label: str, chain: Chain, budget: int, options: dict):
    """Call a plug-in solver: its own exceptions (besides remat's, which say what they
    are) and a signature that does not take ``(chain, budget, **options)`` are the
    plug-in's, reported as a :class:`PluginError` naming it."""
    try:
        inspect.signature(info.func).bind(chain, budget, **options)
    except TypeError as e:
        raise PluginError(f"plug-in solver {label!r} cannot be called as solve(chain, budget"
                          f"{''.join(f', {k}=...' for k in options)}): {e}",
                          plugin=label) from None
    except ValueError:  # no signature to read (a builtin): just call it
        pass
    try:
        return info.func(chain, budget, **options)
    except (RematError, DeadlineExpired, SolverContractError, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - the plug-in's own bug, named as its
        raise PluginError(f"plug-in solver {label!r} raised {type(e).__name__}: {e}",
                          plugin=label) from e


def checked_options(chain: Chain, solver: str, options: Mapping) -> tuple[SolverInfo, dict]:
    """``(info, options)``: ``solver``'s info and ``options`` (its variant's fixed ones
    under them) checked against its schema and normalised, as :func:`solve` does before
    any work; :class:`SolverOptionError` names the first bad one."""
    info, fixed, _ = resolve(solver)
    options = {**fixed, **options}
    check_options(solver, options)
    return info, check_all(info.schema, options, info.name, chain)


def solve(chain: Chain, budget: int, solver: str = "store-all", **options) -> Solution:
    """Solve ``chain`` under ``budget`` (bytes) with the named solver, then verify.

    Parameters
    ----------
    chain : Chain
    budget : int
        Memory budget in bytes.
    solver : str
        A registered name, a variant label (its fixed options apply; explicit options
        override them) or a ``package.module:function`` path.
    **options
        The solver's keyword options (:attr:`SolverInfo.options` lists them).

    Returns
    -------
    Solution
        Its schedule (if any) replayed through the simulator: makespan and peak are the
        simulated ones.

    Raises
    ------
    SolverOptionError
        Unknown solver, path or option, a bad option value (checked against the
        solver's option schema before it runs), or a chain field the solver does not
        model (a plug-in without a registration answers there as a heuristic).
    SolverContractError
        The solver returned an invalid schedule or a claim the simulator refutes.

    Examples
    --------
    >>> from remat_theory import Chain
    >>> chain = Chain.homogeneous(3)
    >>> solve(chain, chain.store_all_memory(), "exhaustive-persistent").status
    'optimal'
    """
    if not isinstance(chain, Chain):
        raise RematError(f"chain must be a Chain, got {type(chain).__name__}")
    budget = check_budget(budget)
    if budget is None:
        raise RematError("budget is required")
    info, options = checked_options(chain, solver, options)
    missing = unsupported(solver, chain)
    if missing and not info.external:
        raise _refuse_fields(solver, missing)
    t0 = time.perf_counter()
    limit = options.get("time_limit") if "time_limit" in info.options else None
    # the solve and the referee's replay together, with part of the overrun a limit allows
    # (10% and 2 s: issue #29), so that a solver that used its whole share still has its
    # short answer replayed; the rest of the overrun is the command's start and output
    whole = Deadline(None if limit is None else limit * (1 + REPLAY_OVERRUN) + REPLAY_GRACE_S,
                     start=t0)
    reserve = replay_reserve(chain, limit) if limit is not None and not info.delegates else 0.0
    if reserve:  # the solver's share: what the replay of its answer leaves
        options["time_limit"] = limit - reserve
    try:
        with deadline_current_is(Deadline(options.get("time_limit"), start=t0)
                                 if limit is not None else None):
            if info.external:
                out = _call_plugin(info, solver, chain, budget, options)
            else:
                out = info.func(chain, budget, **options)
    except DeadlineExpired as e:
        return Solution.time_limit(solver, budget, wall_time=time.perf_counter() - t0,
                                   message=f"{e}: no schedule (not proven optimal)"
                                           + share_note(limit, reserve))
    except SolverLimitError as e:
        if not reserve:
            raise
        raise with_reserve(e, chain, limit, reserve) from None
    elapsed = time.perf_counter() - t0
    try:
        with deadline_current_is(whole if limit is not None else None):
            check = deadline_check if limit is not None else None
            sol = _as_solution(chain, budget, solver, info, out, check=check)
            if not sol.wall_time:
                sol = sol.replace(wall_time=elapsed)
            verify_solution(chain, sol, budget, check=check)
            if reserve and sol.status == TIME_LIMIT:
                sol = sol.replace(message=sol.message + share_note(limit, reserve))
    except DeadlineExpired as e:
        found = out.schedule if isinstance(out, Solution) else out
        size = f" ({len(found)} operations)" if hasattr(found, "__len__") else ""
        return Solution.time_limit(
            solver, budget, wall_time=time.perf_counter() - t0,
            message=f"schedule found{size}, but the referee's replay did not finish within "
                    f"the time limit ({e}): not verified, so not reported; not proven optimal")
    return as_heuristic(sol, missing) if missing else sol


@contextlib.contextmanager
def registered(name: str, func: Callable[..., Solution], **kwargs):
    """Register ``func`` under ``name`` for the duration of a ``with`` block: for testing
    a solver of your own with ``remat verify``'s machinery, or a deliberately wrong one."""
    _load_all()
    register(name, **kwargs)(func)
    try:
        yield name
    finally:
        info = _REGISTRY.pop(name, None)
        for v in (info.variants if info else ()):
            _VARIANTS.pop(v.label, None)
