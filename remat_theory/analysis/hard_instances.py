"""Instances of ``remat hard`` as field lists, and hypothesis-style shrinking.

An instance is a chain (every field as a list, :func:`chain_values`, rebuilt by
:func:`build_chain`) and a budget.  :func:`shrink` replaces it by the first simpler
candidate (:func:`candidates`: fewer stages first, then fewer flags off their default,
smaller values, a smaller budget; the order is :func:`complexity`) that keeps a property,
until none does.  :func:`repeat_stage` and :func:`delete_stage` are the stage moves that
the local searches (:mod:`remat_theory.analysis.hard_search`,
:mod:`remat_theory.analysis.hard_objectives`) and the families
(:mod:`remat_theory.analysis.hard_families`) share.
"""
from __future__ import annotations

import math
import time
from typing import Callable

from remat_theory.model import fields as chain_fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError

# The fields come from the table (remat_theory.model.fields): every one is carried through
# each move and shrink pass.
BASE_TIME = tuple(f.name for f in chain_fields.BASE if f.kind == "time")
BASE_SIZE = tuple(f.name for f in chain_fields.BASE if f.kind == "size")
# a field that defaults to another (fall_time to fwd_time) follows it while equal
MIRROR = {f.default_from: f.name for f in chain_fields.FIELDS if f.default_from is not None}
# the activation field (x_i, one entry per activation), and the stage sizes that hold the
# stage's output x_{i+1} (a base size per stage that is not a transient: the tape), hence are
# never below it (the chain's own check, Chain validation)
ACTIVATION = next(f.name for f in chain_fields.BASE if f.kind == "size" and f.per == "activation")
HOLDS_OUTPUT = tuple(f.name for f in chain_fields.BASE
                     if f.kind == "size" and f.per == "stage" and not f.transient)


def output_floor(vals: dict, f: str, i: int) -> int:
    """The least entry ``i`` of field ``f`` may take: the output x_{i+1} for a stage size
    that holds it (:data:`HOLDS_OUTPUT`), else 0."""
    return int(vals[ACTIVATION][i + 1]) if f in HOLDS_OUTPUT else 0


def hold_outputs(vals: dict) -> dict:
    """Raise every entry of :data:`HOLDS_OUTPUT` to the output it holds, in place (after an
    activation changed); returns ``vals``."""
    for f in HOLDS_OUTPUT:
        vals[f] = [max(v, output_floor(vals, f, i)) for i, v in enumerate(vals[f])]
    return vals

def chain_values(chain: Chain) -> dict:
    """Every field as a list: times, sizes (ints), flags; a field of one number (a rate)
    as a list of that one value (None where absent)."""
    return {f.name: [getattr(chain, f.name)] if f.scalar else
            [int(v) if f.kind == "size" else v for v in getattr(chain, f.name)]
            for f in chain_fields.FIELDS}


def set_value(vals: dict, f: str, i: int, new) -> None:
    """``vals[f][i] = new``; a field defaulting to ``f`` (``fall_time`` to ``fwd_time``)
    follows it where equal (a chain without recording costs of its own keeps none)."""
    g = MIRROR.get(f)
    if g is not None and vals[g][i] == vals[f][i]:
        vals[g][i] = new
    vals[f][i] = new


def build_chain(vals: dict, name: str = "hard") -> Chain | None:
    try:
        return Chain(name=name, **{f.name: vals[f.name][0] if f.scalar and f.name in vals
                                   else vals.get(f.name) for f in chain_fields.FIELDS})
    except RematError:
        return None




def complexity(chain: Chain, budget: int) -> tuple:
    """Shrink order: fewer stages, then fewer flag entries off their default (unsaved
    outputs), then smaller sum of values (an optional field counts its distance from its
    default: recording costs where they differ from the no-grad ones), then smaller budget."""
    vals = chain_values(chain)
    flags = 0
    total = sum(sum(vals[n]) for n in BASE_TIME + BASE_SIZE)
    for f in chain_fields.OPTIONAL:
        default = (vals[f.default_from] if f.default_from is not None
                   else [f.default] * len(vals[f.name]))
        if f.kind == "flag":
            flags += sum(1 for a, b in zip(vals[f.name], default) if a != b)
        elif f.scalar:  # one number: counts 1 where given
            total += vals[f.name] != default
        else:
            total += sum(abs(a - b) for a, b in zip(vals[f.name], default))
    return (chain.length, flags, total, budget)


def repeat_stage(chain: Chain, i: int, block: int = 1) -> Chain | None:
    """The chain with forward stage i repeated: F_i, then a copy of it whose input is x_{i+1}
    (activation x_{i+1} appears twice).  ``block = k``: the stages i..i+k-1 repeated as a
    block, the copy of F_i reading x_{i+k} (activations x_{i+1}..x_{i+k} appear twice)."""
    k = block
    v = chain_values(chain)
    new = {f.name: (v[f.name] if f.scalar else
                    v[f.name][:i + k + 1] + v[f.name][i + 1:] if f.per == "activation"
                    else v[f.name][:i + k] + v[f.name][i:]) for f in chain_fields.FIELDS}
    return build_chain(new, chain.name)


def delete_stage(chain: Chain, i: int, keep_output: bool) -> Chain | None:
    """The chain without forward stage i (keep_output: x_{i+1} replaces x_i as its input)."""
    L = chain.length
    if L <= 1:
        return None
    v = chain_values(chain)
    drop_x = i if keep_output else i + 1
    if drop_x == L + 1 or (drop_x == 0 and not keep_output):
        return None
    new = {f.name: (v[f.name] if f.scalar else
                    v[f.name][:drop_x] + v[f.name][drop_x + 1:] if f.per == "activation"
                    else v[f.name][:i] + v[f.name][i + 1:]) for f in chain_fields.FIELDS}
    return build_chain(hold_outputs(new), chain.name)  # a tape at least its new output


def candidates(chain: Chain, budget: int):
    """Simpler instances, simplest first (hypothesis-style shrink passes)."""
    L = chain.length
    for i in range(L):
        for keep_output in (False, True):
            c = delete_stage(chain, i, keep_output)
            if c is None:
                continue
            lb_drop = chain.memory_lower_bound() - c.memory_lower_bound()
            for b in sorted({budget, budget - lb_drop, c.store_all_memory() - 1}):
                if b >= 0:
                    yield c, b
    vals = chain_values(chain)
    for fd in chain_fields.OPTIONAL:  # flags back to the classic table, one entry at a time
        if fd.kind != "flag":
            continue
        for i, v in enumerate(vals[fd.name]):
            if v != fd.default:
                w = {k: list(x) for k, x in vals.items()}
                w[fd.name][i] = fd.default
                c = build_chain(w, chain.name)
                if c is not None:
                    yield c, budget
                    yield c, budget + c.memory_lower_bound() - chain.memory_lower_bound()
    for fd in chain_fields.OPTIONAL:  # other optional fields back to their default, whole
        if fd.kind == "flag":
            continue
        default = (vals[fd.default_from] if fd.default_from is not None
                   else [fd.default] * len(vals[fd.name]))
        if vals[fd.name] != default:
            w = {k: list(x) for k, x in vals.items()}
            w[fd.name] = list(default)
            c = build_chain(w, chain.name)
            if c is not None:
                yield c, budget
    for f in BASE_TIME + BASE_SIZE:
        for i, v in enumerate(vals[f]):
            v = int(v)
            floor = output_floor(vals, f, i)
            for new in sorted({floor, floor + 1, (v + floor) // 2, v - 1}):
                if new < floor or new >= v:
                    continue
                w = {k: list(x) for k, x in vals.items()}
                set_value(w, f, i, float(new) if f in BASE_TIME else new)
                hold_outputs(w)
                c = build_chain(w, chain.name)
                if c is None:
                    continue
                if f in BASE_SIZE:
                    yield c, budget - (v - new)
                yield c, budget
    time_fields = tuple(f.name for f in chain_fields.of_kind("time"))
    times = [int(t) for f in time_fields for t in vals[f]]
    g = math.gcd(*times) if any(times) else 0
    if g > 1:
        w = {k: list(x) for k, x in vals.items()}
        for f in time_fields:
            w[f] = [float(int(t) // g) for t in w[f]]
        c = build_chain(w, chain.name)
        if c is not None:
            yield c, budget
    gs = math.gcd(chain.size_gcd(), budget)
    if gs > 1:
        yield chain.scaled_sizes(gs), budget // gs
    for b in (budget - 1,):
        if b >= 0:
            yield chain, b


def shrink(chain: Chain, budget: int, keep: Callable[[Chain, int], bool],
           deadline: float | None = None, max_steps: int = 10_000) -> tuple[Chain, int]:
    """Greedy shrinking: repeatedly replace the instance by the first simpler candidate
    that still satisfies ``keep`` until none does (or the deadline, a
    ``time.perf_counter()`` value, passes).  Values must be integers."""
    for _ in range(max_steps):
        if deadline is not None and time.perf_counter() > deadline:
            break
        here = complexity(chain, budget)
        for c, b in candidates(chain, budget):
            if b < 0 or complexity(c, b) >= here:
                continue
            if deadline is not None and time.perf_counter() > deadline:
                return chain, budget
            if keep(c, b):
                chain, budget = c, b
                break
        else:
            break
    return chain, budget


__all__ = ["BASE_TIME", "BASE_SIZE", "MIRROR", "chain_values", "set_value", "build_chain",
           "complexity", "repeat_stage", "delete_stage", "candidates", "shrink"]
