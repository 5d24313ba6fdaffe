"""Certificate files: an instance, the schedules solvers found on it, and what they prove.

A certificate (``proofs/certificates/*.json``) and a ``remat hard`` corpus file share one
layout, ``remat-certificate/1``::

    {
      "format": "remat-certificate/1",
      "claim": "persistence-gap",            # which claim of proofs/ it supports (free text)
      "description": "...",
      "chain": { ... remat-chain/1 ... },
      "budget": 42,                          # bytes
      "solutions": {                         # one entry per solver compared, by label
        "opt": {"solver": "exhaustive", "options": {}, "status": "optimal",
                "optimal_for": "all", "makespan": 31.0, "peak_memory": 40,
                "bound": 31.0, "allow_drop": false, "schedule": ["Fck0", ...]},
        "dp":  {...}
      },
      "facts": {"ratio": 1.12, ...}          # derived numbers the claim quotes
    }

:func:`replay` runs every schedule through the simulator and checks the recorded makespan
and peak; :func:`reprove` runs the recorded solvers again (through the registry, which
replays their answers too) and checks that every status and optimal makespan recurs.  A
certificate is evidence only through these two functions: nothing in the file is trusted.
"""
from __future__ import annotations

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
from remat_theory.model.solution import OPTIMAL, Solution

FORMAT = "remat-certificate/1"

# Recorded and simulated makespans are sums of the same floats, possibly reordered.
_RTOL = 1e-9


class CertificateError(RematError):
    """A certificate file is malformed, or its content does not replay / re-prove."""


@dataclass(frozen=True)
class Certificate:
    """An instance with the solutions recorded on it (see the module docstring)."""

    chain: Chain
    budget: int
    solutions: dict
    claim: str = ""
    description: str = ""
    facts: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "claim": self.claim,
            "description": self.description,
            "chain": self.chain.to_dict(),
            "budget": self.budget,
            "solutions": self.solutions,
            "facts": self.facts,
        }

    def to_json(self) -> str:
        return dumps(self.to_dict())

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.to_json() + "\n")
        return p

    def makespan(self, label: str) -> float | None:
        return self.solutions[label]["makespan"]


def dumps(obj) -> str:
    """JSON with one key per line but lists of numbers or tokens kept on one line."""
    text = json.dumps(obj, indent=1)
    return re.sub(r"\[\s*((?:[^\[\]{}\s][^\[\]{}]*?)?)\s*\]",
                  lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)


def solution_entry(sol: Solution, options: Mapping | None = None) -> dict:
    """The JSON entry of one solver's answer (``options``: those it was called with)."""
    return {
        "solver": sol.solver,
        "options": dict(options or {}),
        "status": sol.status,
        "optimal_for": sol.optimal_for,
        "makespan": sol.makespan,
        "peak_memory": sol.peak_memory,
        "bound": sol.bound,
        "min_budget": sol.min_budget,
        "allow_drop": sol.allows_drop,
        "wall_time": round(sol.wall_time, 6),
        "schedule": None if sol.schedule is None else sol.schedule.tokens(),
    }


def from_dict(data: Mapping, source: str = "certificate") -> Certificate:
    """Parse and validate a certificate object; errors name the field."""
    if not isinstance(data, Mapping):
        raise CertificateError(f"{source}: must be a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise CertificateError(f"{source}: format = {data.get('format')!r} is unknown "
                               f"(expected {FORMAT!r})")
    for key in ("chain", "budget", "solutions"):
        if key not in data:
            raise CertificateError(f"{source}: missing field {key!r}")
    try:
        chain = Chain.from_dict(data["chain"])
        budget = check_budget(data["budget"])
    except RematError as e:
        raise CertificateError(f"{source}: {e}") from None
    sols = data["solutions"]
    if not isinstance(sols, Mapping) or not sols:
        raise CertificateError(f"{source}: solutions must be a non-empty object")
    for label, entry in sols.items():
        if not isinstance(entry, Mapping):
            raise CertificateError(f"{source}: solutions[{label!r}] is not an object")
        for key in ("solver", "status", "makespan", "schedule"):
            if key not in entry:
                raise CertificateError(f"{source}: solutions[{label!r}] lacks {key!r}")
    return Certificate(chain, budget, {k: dict(v) for k, v in sols.items()},
                       str(data.get("claim", "")), str(data.get("description", "")),
                       dict(data.get("facts", {})))


def load(path: str | Path) -> Certificate:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise CertificateError(f"cannot read certificate {p.name!r}: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CertificateError(f"{p.name}: malformed JSON at line {e.lineno}: {e.msg}") from None
    return from_dict(data, p.name)


def replay(cert: Certificate) -> dict:
    """Simulate every recorded schedule under the certificate's budget.

    Returns ``{label: SimulationResult}`` for the entries that have a schedule; raises
    :class:`CertificateError` if one is invalid or its recorded makespan or peak differs
    from the simulated one.
    """
    out: dict[str, SimulationResult] = {}
    for label, entry in cert.solutions.items():
        tokens = entry.get("schedule")
        if tokens is None:
            continue
        try:
            sim = simulate(cert.chain, Schedule(tokens), cert.budget,
                           allow_drop=bool(entry.get("allow_drop", False)))
        except InvalidScheduleError as e:
            raise CertificateError(f"solutions[{label!r}]: the schedule is invalid: {e}") from None
        rec = entry.get("makespan")
        if rec is None or not math.isclose(rec, sim.makespan, rel_tol=_RTOL, abs_tol=1e-12):
            raise CertificateError(f"solutions[{label!r}]: recorded makespan {rec} but the "
                                   f"simulator measures {sim.makespan}")
        if entry.get("peak_memory") is not None and entry["peak_memory"] != sim.peak_memory:
            raise CertificateError(f"solutions[{label!r}]: recorded peak {entry['peak_memory']} "
                                   f"but the simulator measures {sim.peak_memory}")
        out[label] = sim
    return out


def reprove(cert: Certificate, labels=None) -> dict:
    """Run the recorded solvers again (with their recorded options) and compare.

    For every entry (or those in ``labels``): the status must recur, and an ``optimal``
    makespan must recur exactly (up to float summation order).  Returns ``{label:
    Solution}``.  Needs the solvers, so it lives above the model floor only at call time.
    """
    import solvers  # the solver floor; imported here so the model floor stays solver-free

    out = {}
    for label, entry in cert.solutions.items():
        if labels is not None and label not in labels:
            continue
        sol = solvers.solve(cert.chain, cert.budget, entry["solver"], **entry.get("options", {}))
        if sol.status != entry["status"]:
            raise CertificateError(f"solutions[{label!r}]: solver {entry['solver']} now says "
                                   f"{sol.status}, the certificate says {entry['status']}")
        if entry["status"] == OPTIMAL and not math.isclose(
                sol.makespan, entry["makespan"], rel_tol=_RTOL, abs_tol=1e-12):
            raise CertificateError(f"solutions[{label!r}]: solver {entry['solver']} now proves "
                                   f"{sol.makespan}, the certificate says {entry['makespan']}")
        out[label] = sol
    return out


__all__ = ["FORMAT", "Certificate", "CertificateError", "solution_entry", "from_dict", "load",
           "replay", "reprove"]
