"""The chains of ``remat hard``'s gap objectives (:mod:`.hard_objectives`): drawn
(:func:`random_chain`), moved one entry at a time (:func:`mutate`), and held to a
:class:`~remat_theory.analysis.hard_objectives.GapConfig`'s constraints (:func:`constrain`,
:func:`satisfies`).  The functions take any ``cfg`` with GapConfig's fields.

Every field is handled by what the table says of it (:mod:`remat_theory.model.fields`:
its kind, ``per``, ``transient``, ``default_from`` and variation), never by its name, so a
new field of these kinds or variations is drawn, moved and constrained as it comes.
"""
from __future__ import annotations

import numpy as np

from remat_theory.analysis.hard_instances import (HOLDS_OUTPUT, build_chain, chain_values,
                                                  delete_stage, hold_outputs, output_floor,
                                                  repeat_stage, set_value)
from remat_theory.model import fields as chain_fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError

__all__ = ["DRAWN_VARIATIONS", "satisfies", "constrain", "make_chain", "random_chain",
           "mutate"]

# The fields come from the table (remat_theory.model.fields), in its order: the times, the
# transient overheads (``overheads``), the optional fields of the variations drawn here
# (``fall-costs`` when ``fall_costs``, ``unsaved-outputs`` unless ``all_saved``); no other
# variation is drawn (not offload's bandwidth: a result never offloads).  Nothing below
# names a field: a new one of these kinds or variations is drawn and moved as it comes.
DRAWN_VARIATIONS = ("fall-costs", "unsaved-outputs")
_TIMES = tuple(f.name for f in chain_fields.of_kind("time"))
_OVERHEADS = tuple(f.name for f in chain_fields.FIELDS if f.transient)
_DRAWN = tuple(f for f in chain_fields.OPTIONAL if f.variation in DRAWN_VARIATIONS)
_FALL_COSTS = tuple(f for f in _DRAWN if f.variation == "fall-costs")
_FLAGS = tuple(f for f in _DRAWN if f.kind == "flag")
# (no-grad field, recording field) pairs of transients: the recording forward's own
# overhead beside the no-grad one it defaults to (fwd_overhead, fall_overhead)
_TRANSIENT_PAIRS = tuple((f.default_from, f.name) for f in _FALL_COSTS
                         if f.transient and f.default_from is not None)


# ---------------------------------------------------------------------- constraints

def satisfies(chain: Chain, cfg) -> bool:
    """Whether ``chain`` meets every constraint of ``cfg``."""
    if any(t < cfg.min_time for f in _TIMES for t in getattr(chain, f)):
        return False
    if cfg.fall_at_least_fwd and any(
            a < b for f in _FALL_COSTS if f.kind == "time" and f.default_from
            for a, b in zip(getattr(chain, f.name), getattr(chain, f.default_from))):
        return False
    if cfg.all_saved and not all(f.is_default(chain) for f in _FLAGS):
        return False
    if not cfg.fall_costs and not all(f.is_default(chain) for f in _FALL_COSTS):
        return False
    if not cfg.overheads and any(any(getattr(chain, f)) for f in _OVERHEADS):
        return False
    return True


def constrain(vals: dict, cfg) -> dict:
    """Project the field lists ``vals`` (layout of :func:`hard_search.chain_values`) onto
    ``cfg``'s constraints, in place; returns ``vals``."""
    for f in _TIMES:
        vals[f] = [float(max(cfg.min_time, t)) for t in vals[f]]
    if not cfg.fall_costs:  # recording costs back to their no-grad defaults
        for f in _FALL_COSTS:
            vals[f.name] = (list(vals[f.default_from]) if f.default_from is not None
                            else [f.default] * len(vals[f.name]))
    if cfg.fall_at_least_fwd:
        for f in _FALL_COSTS:
            if f.kind == "time" and f.default_from is not None:
                vals[f.name] = [max(a, b) for a, b in zip(vals[f.name], vals[f.default_from])]
    if cfg.all_saved:
        for f in _FLAGS:
            vals[f.name] = [f.default] * len(vals[f.name])
    if not cfg.overheads:
        for f in _OVERHEADS:
            vals[f] = [0] * len(vals[f])
    return hold_outputs(vals)


def make_chain(vals: dict, cfg) -> Chain | None:
    """The chain of ``vals`` projected onto ``cfg``'s constraints (None: invalid)."""
    return build_chain(constrain(vals, cfg), "hard")


# ---------------------------------------------------------------------- drawing and moving

def _fresh_time(rng, cfg) -> float:
    return float(max(cfg.min_time, int(rng.integers(0, cfg.max_time + 1))))


def random_chain(rng: np.random.Generator, cfg) -> Chain:
    """A random chain, or (half the time) a structured one: one or two early stages with
    large forward times, small times elsewhere, overheads as large as sizes.

    Each field is drawn by what the table says of it (:mod:`remat_theory.model.fields`),
    never by its name: a time as a fresh time (structured: small, the first one or two
    entries of a forward's time large); an activation in ``[1, max_size]`` (structured:
    from 0); a stage size that holds its output as that output plus up to
    ``max_size // 2 + 1``; a transient in ``[0, max_size // 2]``; then the optional fields
    of :data:`DRAWN_VARIATIONS`: a flag off its default with probability 0.4, and, with
    probability 0.5 per variation (``fall-costs`` only when ``cfg.fall_costs``), a field
    defaulting to another differing from it (a time a few units above, a transient drawn
    afresh).  With recording costs and overheads, 40% of chains have one or two stages
    whose no-grad transient is large and recording transient small (:func:`_split_transient`)."""
    L = int(rng.integers(cfg.min_stages, cfg.max_stages + 1))
    structured = rng.random() < 0.5
    S = cfg.max_size
    lo = max(cfg.min_time, 0)
    heavy = int(rng.integers(1, min(2, L) + 1))  # structured: the early stages made slow
    vals: dict = {}
    for f in chain_fields.BASE:
        n = f.size(L)
        if f.kind == "time" and structured:
            v = [float(lo + int(rng.integers(0, 2))) for _ in range(n)]
            if f.time_weight == "L":  # a forward: its first stages slow
                for i in range(heavy):
                    v[i] = float(int(rng.integers(cfg.max_time, 3 * cfg.max_time + 1)))
        elif f.kind == "time":
            v = [_fresh_time(rng, cfg) for _ in range(n)]
        elif f.transient:
            v = [int(a) for a in rng.integers(0, S // 2 + 1, n)]
        elif f.per == "activation":
            v = [int(a) for a in rng.integers(0 if structured else 1, S + 1, n)]
        else:  # a stage size that holds its output (the tape): above it
            v = [int(rng.integers(0, S // 2 + 2)) for _ in range(n)]
        vals[f.name] = v
    for f in chain_fields.BASE:
        if f.name in HOLDS_OUTPUT:
            vals[f.name] = [e + output_floor(vals, f.name, i) for i, e in enumerate(vals[f.name])]
    for f in chain_fields.OPTIONAL:  # every optional field at its default first
        vals[f.name] = ([f.default] if f.scalar else
                        list(vals[f.default_from]) if f.default_from is not None
                        else [f.default] * f.size(L))
    for name in DRAWN_VARIATIONS:
        if name == "fall-costs" and not cfg.fall_costs:
            continue
        own = [f for f in _DRAWN if f.variation == name]
        for f in own:
            if f.kind == "flag":
                vals[f.name] = [bool(not f.default if u < 0.4 else f.default)
                                for u in rng.random(f.size(L))]
        if any(f.default_from is not None for f in own) and rng.random() < 0.5:
            for f in own:
                if f.default_from is None:
                    continue
                if f.kind == "time":
                    vals[f.name] = [float(max(t, t + int(rng.integers(-2, 3))))
                                    for t in vals[f.default_from]]
                else:
                    vals[f.name] = [int(a) for a in rng.integers(0, S // 2 + 1, f.size(L))]
    if cfg.fall_costs and cfg.overheads and _TRANSIENT_PAIRS and rng.random() < 0.4:
        for i in rng.choice(L, size=int(rng.integers(1, min(2, L) + 1)), replace=False):
            for nograd, recording in _TRANSIENT_PAIRS:
                vals[nograd][i], vals[recording][i] = _split_transient(rng, S)
    c = make_chain(vals, cfg)
    if c is None:  # pragma: no cover - constrain keeps every field valid
        raise RematError("internal error: a drawn chain is invalid")
    return c


def _split_transient(rng: np.random.Generator, S: int) -> tuple[int, int]:
    """(no-grad overhead, recording overhead) of a stage whose recording forward keeps its
    intermediates in the tape: a large transient without grad, a small one with it (the
    mechanism of proofs/weak_gap.md)."""
    return int(rng.integers(S, 4 * S + 1)), int(rng.integers(0, 2))


def mutate(rng: np.random.Generator, chain: Chain, cfg) -> Chain:
    """One local move (module docstring); the result satisfies the constraints."""
    vals = chain_values(chain)
    L = chain.length
    if cfg.fall_costs and cfg.overheads and _TRANSIENT_PAIRS and rng.random() < 0.04:
        i = int(rng.integers(L))
        for nograd, recording in _TRANSIENT_PAIRS:
            vals[nograd][i], vals[recording][i] = _split_transient(rng, cfg.max_size)
        return make_chain(vals, cfg) or chain
    u = rng.random()
    if u < 0.05 and L < cfg.max_stages:
        c = repeat_stage(chain, int(rng.integers(L)))
        return c if c is not None and satisfies(c, cfg) else chain
    if u < 0.10 and L > cfg.min_stages:
        c = delete_stage(chain, int(rng.integers(L)), bool(rng.random() < 0.5))
        return c if c is not None and satisfies(c, cfg) else chain
    if u < 0.16 and not cfg.all_saved and _FLAGS:
        flag = _FLAGS[int(rng.integers(len(_FLAGS)))].name
        i = int(rng.integers(len(vals[flag])))
        vals[flag][i] = not vals[flag][i]
        return make_chain(vals, cfg) or chain
    fields = [f.name for f in chain_fields.BASE if cfg.overheads or not f.transient]
    if cfg.fall_costs:
        fields += [f.name for f in _FALL_COSTS
                   if f.kind != "flag" and (cfg.overheads or not f.transient)]
    f = fields[int(rng.integers(len(fields)))]
    i = int(rng.integers(len(vals[f])))
    is_time = f in _TIMES
    hi = 4 * (cfg.max_time if is_time else cfg.max_size)
    old = vals[f][i]
    w = rng.random()
    if w < 0.5:
        new = old + int(rng.choice([-2, -1, 1, 2]))
    elif w < 0.7:
        new = int(rng.integers(0, (cfg.max_time if is_time else cfg.max_size) + 1))
    elif w < 0.85:
        new = old * 2 if rng.random() < 0.5 else old // 2
    else:
        new = hi if rng.random() < 0.5 else 0
    new = max(0, min(int(new), hi))
    # a field defaulting to this one (a recording cost equal to the no-grad one) follows it;
    # a tape stays at least the output it holds (constrain)
    set_value(vals, f, i, float(new) if is_time else new)
    return make_chain(vals, cfg) or chain
