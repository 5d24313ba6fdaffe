"""Parametric families for ``remat hard --family``: where a random search of small chains
cannot see growth, drive one parameter and watch the ratio.

A family starts from a *base* chain (a certificate's, or any chain file) and builds its
``n``-th member for ``n = 0, 1, ..., steps``:

* ``drive`` (``field``, ``index``): one entry driven to its limit, ``v * factor**n``
  (``factor**n - 1`` from a zero entry: 0, 1, 3, 7, ... for factor 2); a tape follows its
  activation when that grows past it, and an activation driven past its tape lifts the tape;
* ``repeat`` (``stage``, ``block``): the stage repeated ``n`` more times
  (:func:`remat_theory.analysis.hard_instances.repeat_stage`, ``L + n`` stages), as ``H_r``
  repeats its middle stage (claim 6); with ``block = k`` the stages ``stage..stage+k-1``
  repeated as a block (``L + k n`` stages), as ``G_L`` stacks its two-stage gadget (claim
  12, Theorem C.15: ``--stage 2 --block 2`` on ``G_4`` gives ``G_L``);
* ``compose``: ``n + 1`` copies of the base's stages in a row (block ``j`` reads the last
  activation of block ``j - 1``), as ``G_k`` composes its blocks; with ``costly_first``
  the copies after the first have every time 0 (as in ``G_k``, where only ``F_0`` costs),
  so a makespan counts the runs of the first block's stages.

Each member is scored over **every** budget by
:func:`remat_theory.analysis.hard_objectives.score_chain` (the class DP against exhaustive
search at the last budget of each of the class's steps, or the smallest budgets), so a
trend is a list of ``(n, L, ratio, budget)``; members past the exact solver's reach
(:data:`remat_theory.analysis.hard_objectives.OPT_MAX_STAGES` stages, or the per-budget time
limit) end the trend rather than score without a proven OPT.  :func:`best_certificate`
writes the best member with OPT's and the class's schedules.

With ``all_times`` (chains without recording costs, objectives ``dp-weak-gap`` and
``dp-gap``) a member is scored over **every** forward-time vector at once
(:mod:`remat_theory.analysis.classic_times`: the exact supremum of the class's optimum over
the unrestricted one, proofs/classic_model.md C.8); its row then carries the member with the
time vector that attains the ratio, so the certificate replays that ratio with exhaustive
search and the class DP.  A ``drive fwd_time`` family is then unnecessary: its limit is
one of the time vectors covered.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from remat_theory.analysis.hard_instances import (build_chain, chain_values, hold_outputs,
                                                  repeat_stage)
from remat_theory.analysis.hard_objectives import (OPT_MAX_STAGES, GapConfig, Hit, certificate,
                                                   score_chain)
from remat_theory.model import fields as chain_fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.validation import check_int

KINDS = ("drive", "repeat", "compose")


@dataclass(frozen=True)
class FamilySpec:
    """Which family: ``kind`` (one of :data:`KINDS`); ``field``/``index`` for ``drive``
    (an entry of a numeric field of the table); ``factor`` (``drive``: the growth per
    step, an integer >= 2); ``stage`` for ``repeat``; ``costly_first`` for ``compose``."""

    kind: str
    field: str | None = None
    index: int | None = None
    factor: int = 2
    stage: int | None = None
    costly_first: bool = False
    block: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise RematError(f"family kind = {self.kind!r} is unknown (known: {', '.join(KINDS)})")
        if self.kind == "drive":
            names = [f.name for f in chain_fields.FIELDS if f.kind in ("time", "size")
                     and not f.scalar]
            if self.field not in names:
                raise RematError(f"family drive: field = {self.field!r} must be one of "
                                 f"{', '.join(names)}")
            check_int(self.index, "index", minimum=0)
            check_int(self.factor, "factor", minimum=2)
        if self.kind == "repeat":
            check_int(self.stage, "stage", minimum=0)
        check_int(self.block, "block", minimum=1)

    def label(self) -> str:
        if self.kind == "drive":
            return f"drive {self.field}[{self.index}] x{self.factor}"
        if self.kind == "repeat":
            return (f"repeat stage {self.stage}" if self.block == 1 else
                    f"repeat stages {self.stage}-{self.stage + self.block - 1}")
        return "compose (times in the first block only)" if self.costly_first else "compose"


def _drive(base: Chain, spec: FamilySpec, n: int) -> Chain | None:
    v = chain_values(base)
    vals = v[spec.field]
    if spec.index >= len(vals):
        raise RematError(f"family drive: index = {spec.index} is outside {spec.field} "
                         f"(length {len(vals)})")
    old = vals[spec.index]
    new = old * spec.factor ** n if old else spec.factor ** n - 1
    vals[spec.index] = float(new) if isinstance(old, float) else int(new)
    mirror = {f.default_from: f.name for f in chain_fields.OPTIONAL if f.default_from}
    g = mirror.get(spec.field)  # a field defaulting to this one follows it where equal
    if g is not None and v[g][spec.index] == old:
        v[g][spec.index] = vals[spec.index]
    return build_chain(hold_outputs(v), base.name)  # a tape at least the output it holds


def _compose(base: Chain, k: int, costly_first: bool) -> Chain | None:
    L = base.length
    v = chain_values(base)
    new = {}
    for f in chain_fields.FIELDS:
        a = v[f.name]
        rest = [0.0] * L if costly_first and f.kind == "time" else a[:L]
        if f.scalar:
            new[f.name] = a
        elif f.per == "activation":
            new[f.name] = a[:1] + a[1:] * k
        elif len(a) == L + 1:  # a backward array: the loss stays last
            new[f.name] = a[:L] + rest * (k - 1) + a[L:]
        else:
            new[f.name] = a + rest * (k - 1)
    return build_chain(new, base.name)


def member(base: Chain, spec: FamilySpec, n: int) -> Chain | None:
    """The ``n``-th member of the family (``n = 0``: the base itself)."""
    check_int(n, "n", minimum=0)
    if spec.kind == "drive":
        return _drive(base, spec, n)
    if spec.kind == "compose":
        return _compose(base, n + 1, spec.costly_first)
    if spec.stage + spec.block > base.length:
        raise RematError(f"family repeat: stage = {spec.stage}, block = {spec.block} reaches "
                         f"outside the chain ({base.length} stages)")
    c = base
    for _ in range(n):
        c = repeat_stage(c, spec.stage, spec.block)
        if c is None:
            return None
    return c


@dataclass
class Row:
    n: int
    stages: int
    score: float | None
    budget: int | None
    values: dict = field(default_factory=dict)
    seconds: float = 0.0
    chain: dict | None = None


_ALL_TIMES_CLASS = {"dp-weak-gap": "weak", "dp-gap": "persistent"}


def _all_times_score(c: Chain, cfg: GapConfig):
    """The member's largest ratio over every budget and every forward-time vector, its
    budget and the member with that time vector (or the member itself when the class never
    loses); None when the class has no schedule below store-all's peak."""
    from remat_theory.analysis import classic_times
    rows = classic_times.budget_ratios(c, _ALL_TIMES_CLASS[cfg.objective])
    if not rows:
        return None
    b, r, f = max(rows, key=lambda x: (x[1], -x[0]))
    if f is None:
        return 1.0, b, c, {"ratio": "1"}
    # the time vector f: every time per stage (the forwards; a recording forward costs
    # its forward on this model) is f, every time per boundary (the backwards) zero
    v = chain_values(c)
    for fd in chain_fields.of_kind("time"):
        if fd.name in v or not fd.optional:
            v[fd.name] = ([float(t) for t in f] if fd.size(c.length) == c.length
                          else [0.0] * fd.size(c.length))
    return float(r), b, build_chain(v, c.name), {"ratio": str(r), "forward_times": list(f)}


def trend(base: Chain, spec: FamilySpec, cfg: GapConfig, steps: int,
          seconds: float | None = None, all_times: bool = False,
          max_stages: int = OPT_MAX_STAGES) -> list:
    """Score members ``0..steps`` in order (stopping past the exact solver's reach, at an
    unscorable member, when ``seconds`` have passed, or past ``max_stages`` stages); one
    :class:`Row` each.  With ``all_times``, each member over every forward-time vector
    (module docstring)."""
    check_int(steps, "steps", minimum=0)
    if all_times and cfg.objective not in _ALL_TIMES_CLASS:
        raise RematError(f"all_times scores dp-weak-gap or dp-gap, not {cfg.objective}")
    if all_times and base.has_fall_costs:
        raise RematError("all_times needs a chain without recording costs (fall_time and "
                         "fall_overhead equal to the no-grad forward's)")
    t0 = time.perf_counter()
    rows = []
    for n in range(steps + 1):
        if seconds is not None and time.perf_counter() - t0 > seconds:
            break
        c = member(base, spec, n)
        if c is None or c.length > min(OPT_MAX_STAGES, max_stages):
            break
        t1 = time.perf_counter()
        if all_times:
            a = _all_times_score(c, cfg)
            if a is None:
                break
            rows.append(Row(n, c.length, a[0], a[1], a[3], round(time.perf_counter() - t1, 3),
                            a[2].to_dict()))
            continue
        s = score_chain(c, cfg)
        if s is None or s.budget is None:
            break
        rows.append(Row(n, c.length, s.score, s.budget, dict(s.values),
                        round(time.perf_counter() - t1, 3), c.to_dict()))
    return rows


def growth(rows: list) -> str:
    """A word on the trend: ``rising``, ``flat``, ``falling`` or ``mixed`` (scores in
    order of ``n``; equal within 1e-9 counts as flat)."""
    s = [r.score for r in rows if r.score is not None and math.isfinite(r.score)]
    if len(s) < 2:
        return "flat"
    d = [b - a for a, b in zip(s, s[1:])]
    if all(abs(x) <= 1e-9 for x in d):
        return "flat"
    if all(x >= -1e-9 for x in d):
        return "rising"
    if all(x <= 1e-9 for x in d):
        return "falling"
    return "mixed"


def best_certificate(rows: list, spec: FamilySpec, cfg: GapConfig, what: str):
    """The certificate of the best row (ties: the largest ``n``, the longest chain that
    keeps the ratio), or None."""
    ok = [r for r in rows if r.score is not None]
    if not ok:
        return None
    r = max(ok, key=lambda r: (r.score, r.n))
    hit = Hit(r.score, r.chain, r.budget, 0, r.values)
    return certificate(hit, cfg, description=f"{what}: family {spec.label()}, member n = "
                                             f"{r.n} ({r.stages} stages)")


__all__ = ["KINDS", "FamilySpec", "member", "trend", "growth", "Row", "best_certificate"]
