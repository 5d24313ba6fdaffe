"""What the registry (:mod:`solvers.registry`) records of each solver: :class:`SolverInfo`,
the :class:`Variant` labels that stand for a solver with fixed options, and
:data:`BUILTIN_MODULES`, the module that registers each built-in name.  Plain records:
the registry fills them in :func:`~solvers.registry.register` and reads them everywhere
else."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from remat_theory.model.chain import Chain
from remat_theory.model.solution import Solution

NoteHook = Callable[[Chain, int, Mapping], "str | None"]


@dataclass(frozen=True)
class Variant:
    """A label standing for a registered solver with fixed options (``ilp-fast`` is ``ilp``
    with ``passes=1, pairs=True``).

    label : the name it is asked for by (in :func:`solve` and on the command line).
    solver : the registered solver it runs.
    options : the fixed options.
    max_stages : longest chain it is practical for in a sweep; None: the solver's.
    in_verify : run by the default ``remat verify`` (besides every registered solver).
    """

    label: str
    solver: str
    options: tuple  # sorted (name, value) pairs: hashable and picklable
    max_stages: int | None = None
    in_verify: bool = False

    @property
    def option_dict(self) -> dict:
        return dict(self.options)


def variant(options: Mapping, *, max_stages: int | None = None, in_verify: bool = False) -> dict:
    """A variant declaration for :func:`register`'s ``variants`` (label -> this), when it
    needs more than its options: its own ``max_stages``, or a place in the default verify.
    (The same as writing the dict ``{"options": ..., "max_stages": ..., "in_verify": ...}``.)"""
    return {"options": dict(options), "max_stages": max_stages, "in_verify": in_verify}


@dataclass(frozen=True)
class SolverInfo:
    """What the registry knows about a solver (see :func:`register` for each field)."""

    name: str
    func: Callable[..., Solution]
    optimal_for: str  # class of schedules it is optimal for ("none" for heuristics)
    exact: bool  # True for exact optimizers (dp, dp-weak, ilp, exhaustive)
    description: str
    options: tuple  # names of keyword options it accepts
    max_stages: int | None = None
    reference_max_stages: int | None = None
    variants: tuple = ()  # Variant, ...
    may_drop: bool = False
    classes: tuple = ()  # class keys it can be optimal for (optimal_for first)
    note: NoteHook | None = field(default=None, compare=False)
    external: bool = False  # a plug-in (module:function or an entry point)
    defaults: Mapping = field(default_factory=dict, compare=False)  # option -> default value
    any_options: bool = False  # it takes **options: every option name is passed through
    supports: tuple = ()  # the optional chain fields it models (remat_theory.model.fields)
    schema: Mapping = field(default_factory=dict, compare=False)  # option -> Option
    delegates: bool = False  # answers with other solvers' replayed answers (auto)

    def option_help(self) -> list[str]:
        """One line per option: its type and range, its default and what it does."""
        out = []
        for name in self.options:
            spec = self.schema.get(name)
            has, default = name in self.defaults, self.defaults.get(name)
            if spec is None:
                out.append(f"{name}: (no schema)" + (f" (default {default!r})" if has else ""))
            else:
                out.append(spec.help(name, default, has))
        return out

    def practical_for(self, chain: Chain) -> bool:
        """True when ``chain`` is within :attr:`max_stages` (or there is no limit)."""
        return self.max_stages is None or chain.length <= self.max_stages

    def reference_for(self, chain: Chain) -> bool:
        """True when the solver serves as the exact reference on ``chain``."""
        return self.reference_max_stages is not None and chain.length <= self.reference_max_stages


#: The module of :mod:`solvers` that registers each built-in solver and variant label:
#: :func:`get` imports that module alone on first use (solving with ``store-all`` alone
#: then imports neither the ILP's PuLP and HiGHS nor the other solvers); a name not listed
#: here is found by importing them all.  tests/test_registry.py checks every entry.
BUILTIN_MODULES = {
    "auto": "auto", "chen-sqrt": "chen", "chen-greedy": "chen", "dp": "dp",
    "dp-slots": "dp", "dp-offload": "offload.dp", "dp-offload-slots": "offload.dp",
    "dp-offload-only": "offload.dp", "dp-weak": "dp_weak", "dp-weak-slots": "dp_weak",
    "dtr": "dtr", "exhaustive": "exhaustive", "exhaustive-persistent": "exhaustive",
    "exhaustive-weak": "exhaustive", "exhaustive-monotone": "exhaustive",
    "exhaustive-weak-runs2": "exhaustive", "exhaustive-drop": "exhaustive",
    "exhaustive-offload": "offload.exhaustive", "exhaustive-offload-only": "offload.exhaustive",
    "gruslys": "gruslys", "ilp": "ilp.solver", "ilp-cbc": "ilp.solver",
    "ilp-fast": "ilp.solver", "ilp-proven": "ilp.solver", "ilp-weak-runs2": "ilp.solver",
    "ilp-offload": "offload.ilp", "save-on-cpu": "offload.baselines",
    "offload-all": "offload.baselines", "periodic": "periodic", "prove": "prove",
    "recompute-all": "recompute_all", "revolve": "revolve", "store-all": "store_all",
}
