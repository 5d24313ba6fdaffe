"""What :class:`~remat_theory.torch.modules.checkpointed.CheckpointedSequential` is given:
a :class:`Budget` whose meaning is written in it, and :class:`CheckpointOptions`, the
profiling and running knobs in one frozen, validated value.

A budget is one of three things, and says which::

    Budget.step("6GiB")         # the whole training step above the resident model
    Budget.activations(2**30)   # bytes of the chain's own memory (activations, tapes, ...)
    Budget.fraction(0.5)        # a fraction in (0, 1] of each input shape's store-all peak

The constructor also takes the short forms, each of one meaning only: a ``str`` with a unit
(``"6GiB"``) is a step budget, a ``float`` in (0, 1] a fraction.  A form that could mean two
things is refused with a :class:`RematError` naming the spelling to use: a plain ``int`` (bytes
of activations, or of the whole step?  :func:`remat_theory.torch.rematerialize` reads an int
as bytes of the step, and one spelling has one meaning across both APIs), a ``str`` without a
unit, a float above 1 (bytes, or a fraction mistyped?), a bool.
"""
from __future__ import annotations

import numbers
import re
import warnings
from dataclasses import dataclass, fields
from typing import Any, Mapping

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.torch.plan.budget import format_bytes, parse_bytes

__all__ = ["Budget", "CheckpointOptions", "options_from", "LEGACY_KEYWORDS"]

STEP, ACTIVATIONS, FRACTION = "step", "activations", "fraction"


@dataclass(frozen=True)
class Budget:
    """A memory budget of the drop-in, in one of three meanings (``kind``).

    kind : ``"step"`` (``value``: bytes of the whole training step's peak above the
        resident model: activations, parameter gradients, the loss, workspaces, and the
        optimizer state when ``optimizer_state=`` is given), ``"activations"`` (bytes the
        chain counts: x_0, the activations, tapes and gradients of the stages and the loss
        stage) or ``"fraction"`` (of each input shape's store-all peak, in (0, 1]).
    value : int bytes, or the float fraction.
    """

    kind: str
    value: Any

    def __post_init__(self) -> None:
        if self.kind not in (STEP, ACTIVATIONS, FRACTION):
            raise RematError(f"Budget kind = {self.kind!r} must be 'step', 'activations' or "
                             f"'fraction'")
        v = self.value
        if self.kind == FRACTION:
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v <= 1:
                raise RematError(f"Budget.fraction value = {v!r} must be a number in (0, 1]")
            object.__setattr__(self, "value", float(v))
        else:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
                raise RematError(f"Budget.{self.kind} value = {v!r} must be a positive int "
                                 f"of bytes")
            object.__setattr__(self, "value", int(v))

    @classmethod
    def step(cls, amount) -> "Budget":
        """The whole step's peak: ``"6GiB"`` (a number and a unit: B, KB, MB, GB, KiB, MiB,
        GiB, TiB) or an int of bytes."""
        if isinstance(amount, str):
            return cls(STEP, parse_bytes(amount))
        return cls(STEP, amount)

    @classmethod
    def activations(cls, n_bytes: int) -> "Budget":
        """Bytes of the chain's own memory (what the solver's budget counts)."""
        return cls(ACTIVATIONS, n_bytes)

    @classmethod
    def fraction(cls, f: float) -> "Budget":
        """A fraction in (0, 1] of each input shape's store-all peak (1.0: plain autograd)."""
        return cls(FRACTION, f)

    @classmethod
    def of(cls, spec) -> "Budget":
        """``spec`` as a Budget: a Budget as is, or a short form of one meaning (module
        docstring); an ambiguous one raises :class:`RematError` naming the spelling to use."""
        if isinstance(spec, Budget):
            return spec
        if isinstance(spec, str):
            if not re.search(r"[a-zA-Z]\s*$", spec):
                raise RematError(f"budget = {spec!r} has no unit: write bytes of the step with "
                                 f"one ('6GiB', '{spec.strip()}B'), or Budget.activations(...) / "
                                 f"Budget.fraction(...)")
            return cls.step(spec)
        if isinstance(spec, bool) or not isinstance(spec, numbers.Real):
            raise RematError(f"budget = {spec!r} must be a Budget, bytes of the step with a "
                             f"unit (str, e.g. '6GiB'), Budget.activations(n) or a fraction "
                             f"of store-all (float in (0, 1])")
        if isinstance(spec, numbers.Integral):
            raise RematError(_int_refusal(spec))
        if not 0 < spec <= 1:
            raise RematError(f"budget = {spec!r}: a float budget is a fraction of the "
                             f"store-all peak and must be in (0, 1]; bytes are "
                             f"Budget.activations(n) or a str with a unit (Budget.step)")
        return cls(FRACTION, spec)

    def __str__(self) -> str:
        if self.kind == FRACTION:
            return f"{self.value:g} of store-all"
        return f"{format_bytes(self.value)} of the {'step' if self.kind == STEP else 'chain'}"


def _int_refusal(spec) -> str:
    """Why a plain int budget is refused, and the two spellings that say what it means."""
    n = int(spec)
    one = "; or 1.0 for the whole store-all peak (plain autograd)" if n == 1 else ""
    if n <= 0:
        return (f"budget = {spec!r} must be positive bytes, and a plain int is refused "
                f"(rematerialize() reads an int as bytes of the whole step): write "
                f"Budget.activations(n) for bytes the chain counts, or Budget.step(n) / a str "
                f"with a unit ('6GiB') for bytes of the whole training step")
    return (f"budget = {spec!r} is a plain int, refused: rematerialize() reads an int as bytes "
            f"of the whole step, and one spelling has one meaning in both APIs. Write "
            f"Budget.activations({n}) for bytes the chain counts (what the solver's budget "
            f"means), or Budget.step({n}) / a str with a unit ('{n}B', '6GiB') for bytes of "
            f"the whole training step{one}")


@dataclass(frozen=True)
class CheckpointOptions:
    """How the drop-in profiles and runs (every field optional).

    profile_repeats : timed repetitions per profile, the median taken (int >= 1, default 3).
    unit : the solver sees sizes rounded up to multiples of ``unit`` bytes (int >= 1; None,
        the default: a power of two near store-all / 2048, see :mod:`.rounding`; 1 solves
        in exact bytes).
    reprofile : on an input of a new shape/dtype/device/autocast state, profile and solve it
        (True, default) or raise :class:`RematError` (False).
    early_stop : stop each recomputation once it has produced what the backward needs
        (True, default; :func:`~remat_theory.torch.run.nested.run_nested`); False recomputes
        every forward of the schedule.
    chain : a chain profiled elsewhere for ``example_input`` (skips its profiling).
    draws_random, input_grad_bytes, loss_bytes : the rest of that profile
        (:class:`~remat_theory.torch.profiling.profiler.ProfileResult`), with ``chain``: which
        stages draw random numbers (one bool per stage; None: measured on the example
        input), the bytes B_0 holds less when the input needs no gradient, the bytes of
        the loss tensor and its seed.  :meth:`from_profile` takes all four from a profile.
    """

    profile_repeats: int = 3
    unit: int | None = None
    reprofile: bool = True
    early_stop: bool = True
    chain: Chain | None = None
    draws_random: tuple | None = None
    input_grad_bytes: int | None = None
    loss_bytes: int | None = None

    def __post_init__(self) -> None:
        def positive(name, value, minimum):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
                    or value < minimum:
                raise RematError(f"CheckpointOptions.{name} = {value!r} must be an int >= "
                                 f"{minimum}")
        positive("profile_repeats", self.profile_repeats, 1)
        if self.unit is not None:
            positive("unit", self.unit, 1)
        for name in ("reprofile", "early_stop"):
            if not isinstance(getattr(self, name), bool):
                raise RematError(f"CheckpointOptions.{name} = {getattr(self, name)!r} must be "
                                 f"True or False")
        if self.chain is not None and not isinstance(self.chain, Chain):
            raise RematError(f"CheckpointOptions.chain = {type(self.chain).__name__} must be "
                             f"a Chain")
        for name in ("input_grad_bytes", "loss_bytes"):
            value = getattr(self, name)
            if value is not None:
                positive(name, value, 0)
                if self.chain is None:
                    raise RematError(f"CheckpointOptions.{name} = {value!r} is part of a "
                                     f"profile: it goes with chain=")
        if self.draws_random is not None:
            draws = tuple(self.draws_random)
            if self.chain is None or len(draws) != self.chain.length or not all(
                    isinstance(v, (bool, numbers.Integral)) for v in draws):
                raise RematError(f"CheckpointOptions.draws_random = {self.draws_random!r} must "
                                 f"be one bool per stage of chain= "
                                 f"({'no chain' if self.chain is None else self.chain.length})")
            object.__setattr__(self, "draws_random", tuple(bool(v) for v in draws))

    @classmethod
    def from_profile(cls, profile, **others) -> "CheckpointOptions":
        """Options carrying a :class:`ProfileResult`'s chain, ``draws_random``,
        ``input_grad_bytes`` and ``loss_bytes`` (``others``: the other fields)."""
        return cls(chain=profile.chain, draws_random=tuple(profile.draws_random),
                   input_grad_bytes=profile.input_grad_bytes, loss_bytes=profile.loss_bytes,
                   **others)


#: The constructor keywords of earlier versions that are now fields of CheckpointOptions.
LEGACY_KEYWORDS = tuple(f.name for f in fields(CheckpointOptions))


def options_from(options, legacy: Mapping) -> CheckpointOptions:
    """The one path from what the constructor got to :class:`CheckpointOptions`: ``options``
    (a CheckpointOptions, a mapping of its fields, or None) or, from earlier versions, the
    same fields as keywords (``profile_repeats=1``: same meaning, a DeprecationWarning
    naming the new spelling).  Unknown keywords and both forms at once raise."""
    unknown = [k for k in legacy if k not in LEGACY_KEYWORDS]
    if unknown:
        raise RematError(f"CheckpointedSequential got unknown keyword(s) {', '.join(unknown)} "
                         f"(its own: example_input, loss_fn, device, solver_options, "
                         f"optimizer_state, bandwidth, options; CheckpointOptions fields: "
                         f"{', '.join(LEGACY_KEYWORDS)})")
    if legacy:
        if options is not None:
            raise RematError(f"give {', '.join(legacy)} in options= (CheckpointOptions), not "
                             f"beside it")
        spelled = ", ".join(f"{k}=..." for k in legacy)
        warnings.warn(f"CheckpointedSequential({spelled}) is deprecated: write "
                      f"options=CheckpointOptions({spelled})", DeprecationWarning, stacklevel=3)
        return CheckpointOptions(**legacy)
    if options is None:
        return CheckpointOptions()
    if isinstance(options, CheckpointOptions):
        return options
    if isinstance(options, Mapping):
        bad = [k for k in options if k not in LEGACY_KEYWORDS]
        if bad:
            raise RematError(f"options has unknown field(s) {', '.join(map(str, bad))} (known: "
                             f"{', '.join(LEGACY_KEYWORDS)})")
        return CheckpointOptions(**options)
    raise RematError(f"options = {options!r} must be a CheckpointOptions (or a dict of its "
                     f"fields)")
