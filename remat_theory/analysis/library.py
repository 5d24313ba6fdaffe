"""The instance library: chains and budgets with the best known makespan and a proved bound.

A library file (``remat-library/1``) is one JSON object::

    {"format": "remat-library/1",
     "description": "...", "built_with": {...},
     "instances": [
       {"id": "random-small/r4-s1/b23",    # unique in the library
        "class": "random-small",           # the class the docs' tables group by
        "source": "uniform_random(4, seed=1)",
        "chain": {... remat-chain/1 ...},
        "budget": 23,                      # bytes
        "variations": [],                  # optional chain fields the chain uses
        "model": {},                       # model options: {} is the canonical model
        "best": {"makespan": 31.0, "solver": "exhaustive", "schedule": ["Fck0", ...]},
        "bound": {"value": 31.0, "solver": "exhaustive"},   # or null
        "status": "optimal"}               # optimal (bound == best) | open
     ]}

``bound`` is a lower bound on the makespan of every valid schedule of the canonical model
under the budget (class ``all``), with what proved it; ``status`` is ``optimal`` exactly
when it equals the best makespan (relative tolerance 1e-9).  Nothing in a file is trusted
on its word: :func:`load` checks the schema and the bound's relation to the best makespan,
and :func:`replay_best` replays the recorded schedule through the simulator.

The library shipped with the package is ``remat_theory/data/library.json``, read with
:mod:`importlib.resources` (no torch needed to load it, whatever chains it holds);
``benchmarks/build_library.py`` rebuilds it.
"""
from __future__ import annotations

import importlib.resources
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InvalidScheduleError, RematError
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import SimulationResult, check_budget, simulate

FORMAT = "remat-library/1"
OPTIMAL, OPEN = "optimal", "open"
STATUSES = (OPTIMAL, OPEN)
RTOL = 1e-9  # makespans are sums of the same floats, possibly in another order
SHIPPED = ("data", "library.json")  # inside the remat_theory package
MODEL_OPTIONS = ()  # model options an instance may set ({}: the canonical model)
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/+=-]*$")

__all__ = ["FORMAT", "OPTIMAL", "OPEN", "Instance", "Library", "LibraryError", "load",
           "from_dict", "instance_from_dict", "replay_best", "shipped", "dumps", "same"]


class LibraryError(RematError):
    """A library file is malformed, or an instance's record does not hold."""


def same(a: float, b: float) -> bool:
    """``a == b`` up to the reordering of float sums."""
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-12)


@dataclass(frozen=True)
class Instance:
    """One instance (the module docstring's fields; ``cls`` is the JSON ``class``)."""

    id: str
    cls: str
    chain: Chain
    budget: int
    best_makespan: float
    best_solver: str
    best_schedule: tuple
    bound: float | None
    bound_solver: str | None
    status: str
    source: str = ""
    variations: tuple = ()
    model: dict = field(default_factory=dict)

    @property
    def proved(self) -> bool:
        return self.status == OPTIMAL

    def to_dict(self) -> dict:
        return {"id": self.id, "class": self.cls, "source": self.source,
                "chain": self.chain.to_dict(), "budget": self.budget,
                "variations": list(self.variations), "model": dict(self.model),
                "best": {"makespan": self.best_makespan, "solver": self.best_solver,
                         "schedule": list(self.best_schedule)},
                "bound": (None if self.bound is None else
                          {"value": self.bound, "solver": self.bound_solver}),
                "status": self.status}


@dataclass(frozen=True)
class Library:
    instances: tuple
    description: str = ""
    built_with: dict = field(default_factory=dict)
    source: str = ""

    def __len__(self) -> int:
        return len(self.instances)

    @property
    def proved(self) -> int:
        return sum(i.proved for i in self.instances)

    def classes(self) -> list:
        """Class names in the order they first appear."""
        return list(dict.fromkeys(i.cls for i in self.instances))

    def select(self, classes=None, ids=None, max_stages=None) -> "Library":
        """The instances of the named classes (a name ending in ``*`` is a prefix), with
        the named ids, of at most ``max_stages`` stages (None: no filter)."""
        def keep(i):
            if classes is not None and not any(
                    i.cls.startswith(c[:-1]) if c.endswith("*") else i.cls == c for c in classes):
                return False
            if ids is not None and i.id not in ids:
                return False
            return max_stages is None or i.chain.length <= max_stages
        return Library(tuple(i for i in self.instances if keep(i)), self.description,
                       self.built_with, self.source)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "description": self.description,
                "built_with": self.built_with,
                "instances": [i.to_dict() for i in self.instances]}


def _number(v, where: str, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise LibraryError(f"{where}: {what} = {v!r} must be a finite number >= 0")
    return float(v)


def _text(d: Mapping, key: str, where: str, optional: bool = False) -> str:
    v = d.get(key, "" if optional else None)
    if not isinstance(v, str) or (not optional and not v):
        raise LibraryError(f"{where}: {key} = {v!r} must be a non-empty string")
    return v


def instance_from_dict(d, where: str = "instance") -> Instance:
    """Parse and check one instance record; :class:`LibraryError` names the field."""
    if not isinstance(d, Mapping):
        raise LibraryError(f"{where}: must be a JSON object, got {type(d).__name__}")
    for key in ("id", "class", "chain", "budget", "best", "bound", "status"):
        if key not in d:
            raise LibraryError(f"{where}: missing field {key!r}")
    iid = _text(d, "id", where)
    if not _ID.match(iid):
        raise LibraryError(f"{where}: id = {iid!r} has characters outside [A-Za-z0-9_.:/+=-]")
    where = f"instance {iid!r}"
    cls = _text(d, "class", where)
    try:
        chain = Chain.from_dict(d["chain"])
        budget = check_budget(d["budget"])
    except RematError as e:
        raise LibraryError(f"{where}: {e}") from None
    if budget is None:
        raise LibraryError(f"{where}: budget = None must be an integer number of bytes")
    best = d["best"]
    if not isinstance(best, Mapping):
        raise LibraryError(f"{where}: best = {best!r} must be an object")
    makespan = _number(best.get("makespan"), where, "best.makespan")
    solver = _text(best, "solver", f"{where}: best")
    sched = best.get("schedule")
    if not isinstance(sched, list) or not sched or not all(isinstance(t, str) for t in sched):
        raise LibraryError(f"{where}: best.schedule must be a non-empty list of op tokens")
    bound = d["bound"]
    if bound is None:
        value, bsolver = None, None
    elif isinstance(bound, Mapping):
        value = _number(bound.get("value"), where, "bound.value")
        bsolver = _text(bound, "solver", f"{where}: bound")
        if value > makespan and not same(value, makespan):
            raise LibraryError(f"{where}: bound.value = {value!r} is above best.makespan = "
                               f"{makespan!r} (a lower bound cannot exceed a schedule's makespan)")
    else:
        raise LibraryError(f"{where}: bound = {bound!r} must be null or an object")
    status = d["status"]
    if status not in STATUSES:
        raise LibraryError(f"{where}: status = {status!r} must be one of {', '.join(STATUSES)}")
    closed = value is not None and same(value, makespan)
    if (status == OPTIMAL) != closed:
        raise LibraryError(f"{where}: status = {status!r} but bound {value!r} and best makespan "
                           f"{makespan!r} {'agree' if closed else 'differ'}")
    model = d.get("model", {})
    if not isinstance(model, Mapping) or any(k not in MODEL_OPTIONS for k in model):
        raise LibraryError(f"{where}: model = {model!r} has options outside "
                           f"{list(MODEL_OPTIONS)} ({{}}: the canonical model)")
    variations = d.get("variations", [])
    if not isinstance(variations, list) or not all(isinstance(v, str) for v in variations):
        raise LibraryError(f"{where}: variations must be a list of names")
    return Instance(iid, cls, chain, budget, makespan, solver, tuple(sched), value, bsolver,
                    status, _text(d, "source", where, optional=True), tuple(variations),
                    dict(model))


def from_dict(data, source: str = "library") -> Library:
    """Parse and check a whole library object (format, unique ids, every instance)."""
    if not isinstance(data, Mapping):
        raise LibraryError(f"{source}: must be a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise LibraryError(f"{source}: format = {data.get('format')!r} is unknown "
                           f"(expected {FORMAT!r})")
    items = data.get("instances")
    if not isinstance(items, list):
        raise LibraryError(f"{source}: instances must be a list")
    out, seen = [], set()
    for k, d in enumerate(items):
        inst = instance_from_dict(d, f"{source}: instances[{k}]")
        if inst.id in seen:
            raise LibraryError(f"{source}: instance id {inst.id!r} appears twice")
        seen.add(inst.id)
        out.append(inst)
    built = data.get("built_with", {})
    return Library(tuple(out), str(data.get("description", "")),
                   dict(built) if isinstance(built, Mapping) else {}, source)


def shipped():
    """The shipped library file (an :mod:`importlib.resources` traversable)."""
    return importlib.resources.files("remat_theory").joinpath(*SHIPPED)


def _read(path) -> tuple[str, str]:
    name = getattr(path, "name", str(path))
    try:
        return path.read_text(encoding="utf-8"), name
    except OSError as e:
        raise LibraryError(f"cannot read library {name!r}: {e.strerror or e}") from None


def _parse(text: str, name: str) -> Library:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise LibraryError(f"{name}: malformed JSON at line {e.lineno}: {e.msg}") from None
    return from_dict(data, name)


def load(path: str | Path | None = None) -> Library:
    """The library at ``path`` (a file, or a folder whose ``*.json`` files are merged in
    name order); None: the shipped one."""
    if path is None:
        return _parse(*_read(shipped()))
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.json"))
        if not files:
            raise LibraryError(f"library folder {p.name!r} holds no .json file")
        parts = [_parse(*_read(f)) for f in files]
        merged = {"format": FORMAT, "instances": [i.to_dict() for lib in parts
                                                  for i in lib.instances]}
        lib = from_dict(merged, p.name)
        return Library(lib.instances, parts[0].description, parts[0].built_with, p.name)
    if not p.exists():
        raise LibraryError(f"library {str(path)!r} does not exist")
    return _parse(*_read(p))


def replay_best(inst: Instance) -> SimulationResult:
    """Replay the recorded best schedule under the instance's budget; raise
    :class:`LibraryError` if it is invalid or its makespan is not the recorded one."""
    try:
        sim = simulate(inst.chain, Schedule(list(inst.best_schedule)), inst.budget)
    except InvalidScheduleError as e:
        raise LibraryError(f"instance {inst.id!r}: best.schedule is invalid: {e}") from None
    if not same(sim.makespan, inst.best_makespan):
        raise LibraryError(f"instance {inst.id!r}: best.makespan = {inst.best_makespan!r} but "
                           f"the simulator measures {sim.makespan!r}")
    return sim


def dumps(lib: Library | Mapping) -> str:
    """JSON with one key per line but lists of numbers or tokens kept on one line."""
    data = lib.to_dict() if isinstance(lib, Library) else lib
    text = json.dumps(data, indent=1)
    return re.sub(r"\[\s*((?:[^\[\]{}\s][^\[\]{}]*?)?)\s*\]",
                  lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
