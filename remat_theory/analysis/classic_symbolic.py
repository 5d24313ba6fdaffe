"""The classic rows for **every real size** at once: schedules with symbolic peaks.

On a chain without recording costs, which operations are valid in which state does not
depend on the sizes (docs/model.md: availability only), and the memory held in a state, and
the peak of an operation, are sums of sizes: **linear forms** in the sizes, with non-negative
integer coefficients.  So for a fixed number of stages ``L`` and a *parametrization* of the
sizes (each field of the chain a sum of non-negative real parameters, e.g. every entry its
own parameter, or one parameter per field for homogeneous chains) a schedule has

* a count vector ``n`` (its forward operations per stage; the makespan is ``n.f + sum(b)``,
  proofs/classic_model.md Lemma C.9), and
* a finite set of peak forms: its peak at the sizes ``s`` is ``max_j l_j . s``.

A schedule ``A`` **dominates** ``B`` when ``n(A) <= n(B)`` and every peak form of ``A`` is
coefficientwise at most some form of ``B``: then at every size vector ``s >= 0`` ``A`` fits
every budget ``B`` fits and is no slower at any time vector.  :func:`labels` walks the
simulator's own state graph (``transition``; class rules from
:func:`remat_theory.model.persistence.violation`) and keeps, per node, the labels ``(n,
forms)`` no other label of the node dominates; it returns the complete schedules' labels:
every schedule of the class is dominated by one of them (proofs/classic_model.md, Lemma
C.12).

:func:`check_weak_equals_all` then decides a **sufficient condition** (Theorem C.13) for
"``DP_weak = OPT`` at every size vector, every budget where the weak class has a schedule,
and every time vector": for every label ``S`` of all schedules and every weak label ``W'``
whose count is not below ``n(S)``, some weak label ``W`` with ``n(W) <= n(S)`` has every
form below a form of ``S`` or of ``W'``.  (At sizes ``s`` and budget ``M >= peak_S(s)``
where some weak schedule ``W'`` fits, ``W`` then fits ``M`` and is no slower than ``S``.)
The condition involves no number but the coefficients, so a pass is a proof for all real
sizes of the parametrization; a failure names the pair, which may or may not be a real loss
(the criterion compares form by form).  :func:`ratio_bound` bounds the ratio where it fails
(Theorem C.14), exactly; a chain attaining the bound makes it the supremum over every real
size of the parametrization.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from fractions import Fraction

from remat_theory.model import persistence
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import FALL, FCK, FN, LOSS_OP, Bwd, Fall, Fck, Fn
from remat_theory.model.simulator import State, state_memory, transition
from remat_theory.model.validation import check_int


@dataclass(frozen=True)
class Params:
    """A parametrization of a chain's sizes: ``names[k]`` is a parameter and ``units[k]``
    the chain whose sizes are that parameter's coefficients (the parameter 1, the others
    0); a chain of the family is ``sum_k s_k * units[k]`` for reals ``s_k >= 0``."""

    stages: int
    names: tuple
    units: tuple

    def chain(self, values) -> Chain:
        """The member at integer parameter ``values`` (for tests and certificates)."""
        if len(values) != len(self.names):
            raise RematError(f"values has {len(values)} entries, the parametrization "
                             f"{len(self.names)}")
        L = self.stages
        acc = {"x_size": [0] * (L + 1), "tape_size": [0] * L, "fwd_overhead": [0] * L,
               "bwd_overhead": [0] * (L + 1)}
        for v, u in zip(values, self.units):
            check_int(v, "parameter value", minimum=0)
            for f in acc:
                acc[f] = [a + v * b for a, b in zip(acc[f], getattr(u, f))]
        return Chain(name="symbolic", fwd_time=[1.0] * L, bwd_time=[0.0] * (L + 1), **acc)


def _unit(L: int, x=(), e=(), fo=(), bo=()) -> Chain:
    """The chain with 1 at the listed entries of ``x_size`` (tapes follow: ``tape_size[i] =
    x_size[i+1] + e_i``), tape excess ``e``, ``fwd_overhead`` ``fo``, ``bwd_overhead`` ``bo``."""
    xs = [int(i in x) for i in range(L + 1)]
    return Chain(name="unit", fwd_time=[1.0] * L, bwd_time=[0.0] * (L + 1), x_size=xs,
                 tape_size=[xs[i + 1] + int(i in e) for i in range(L)],
                 fwd_overhead=[int(i in fo) for i in range(L)],
                 bwd_overhead=[int(i in bo) for i in range(L + 1)])


def free_params(L: int, fwd_overhead: bool = True, bwd_overhead: bool = True) -> Params:
    """Every entry its own parameter: ``x_1..x_L``, the tape excesses ``e_0..e_{L-1}``
    (``tape_size[i] = x_{i+1} + e_i``), ``fwd_overhead``, ``bwd_overhead`` (each family of
    overheads left out, i.e. 0, when its flag is False); ``x_0 = 0`` (Lemma C.1 folds it into
    ``bwd_overhead[0]`` and the budget)."""
    check_int(L, "stages", minimum=1)
    names, units = [], []
    for i in range(1, L + 1):
        names.append(f"x{i}"), units.append(_unit(L, x=(i,)))
    for i in range(L):
        names.append(f"e{i}"), units.append(_unit(L, e=(i,)))
    if fwd_overhead:
        for i in range(L):
            names.append(f"fo{i}"), units.append(_unit(L, fo=(i,)))
    if bwd_overhead:
        for i in range(L + 1):
            names.append(f"bo{i}"), units.append(_unit(L, bo=(i,)))
    return Params(L, tuple(names), tuple(units))


def homogeneous_params(L: int, fwd_overhead: bool = True, bwd_overhead: bool = True) -> Params:
    """Homogeneous chains: every stage alike (``x_1 = .. = x_L = x``, every tape ``x + e``,
    one ``fwd_overhead`` ``fo`` and one ``bwd_overhead`` ``bo`` for ``B_1 .. B_{L-1}``);
    the input ``x_0``, ``bwd_overhead[0]`` and the loss's overhead ``bo_L`` are parameters of
    their own (the input is not a stage; ``bo_0`` also carries a folded ``x_0``, Lemma
    C.1).  Times are free: every time vector is covered by the count vectors."""
    check_int(L, "stages", minimum=1)
    names = ["x0", "x", "e"]
    units = [_unit(L, x=(0,)), _unit(L, x=tuple(range(1, L + 1))), _unit(L, e=tuple(range(L)))]
    if fwd_overhead:
        names.append("fo"), units.append(_unit(L, fo=tuple(range(L))))
    if bwd_overhead:
        names += ["bo0", "bo", "boL"]
        units += [_unit(L, bo=(0,)), _unit(L, bo=tuple(range(1, L))), _unit(L, bo=(L,))]
    return Params(L, tuple(names), tuple(units))


def _le(a: tuple, b: tuple) -> bool:
    return all(p <= q for p, q in zip(a, b))


def covered(forms, by) -> bool:
    """Every form of ``forms`` is coefficientwise at most some form of ``by``: then
    ``max forms <= max by`` at every ``s >= 0``."""
    return all(any(_le(f, g) for g in by) for f in forms)


def dominates(a, b) -> bool:
    """Label ``a = (n, forms)`` dominates ``b`` (module docstring)."""
    return _le(a[0], b[0]) and covered(a[1], b[1])


_W = 8  # bits per packed coefficient: 7 for the value, 1 guard (see _Packed)


class _Packed:
    """Vectors of small non-negative integers packed into one int, ``_W`` bits a field, so
    that "coefficientwise at most" is one subtraction: with the guard bit of every field set
    in ``b | H``, no field borrows from the next, and a field keeps its guard bit iff
    ``b_i >= a_i``."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.H = sum(1 << (_W * k + _W - 1) for k in range(length))

    def pack(self, v) -> int:
        r = 0
        for k, x in enumerate(v):
            if not 0 <= x < 1 << (_W - 1):
                raise RematError(f"coefficient {x} is outside 0..{(1 << (_W - 1)) - 1}: the "
                                 f"chain is too long for the packed labels")
            r |= x << (_W * k)
        return r

    def unpack(self, r: int) -> tuple:
        m = (1 << _W) - 1
        return tuple((r >> (_W * k)) & m for k in range(self.length))

    def le(self, a: int, b: int) -> bool:
        H = self.H
        return ((b | H) - a) & H == H


def labels(params: Params, schedule_class: str = persistence.ALL,
           max_labels: int = 2_000_000) -> list:
    """The labels ``(n, forms, ops)`` of complete schedules of ``schedule_class`` such that
    every schedule of the class is dominated by one of them (``ops``: one schedule with that
    label, as tokens).  Raises :class:`RematError` past ``max_labels`` settled labels."""
    if not persistence.is_class(schedule_class):
        raise RematError(f"schedule_class = {schedule_class!r} is unknown")
    L = params.stages
    units = params.units
    c0 = units[0]
    PF, PN = _Packed(len(units)), _Packed(L)
    fle = PF.le
    fwd = [(Fn(i), Fck(i), Fall(i)) for i in range(L)]
    bwd = [Bwd(i) for i in range(L)]
    s0 = State.initial(c0)
    mem_cache: dict = {}
    step_cache: dict = {}

    def mem(state):
        m = mem_cache.get(state)
        if m is None:
            m = mem_cache[state] = tuple(state_memory(u, state) for u in units)
        return m

    HF, HN = PF.H, PN.H

    def dom(a, b):  # packed labels (n, forms): nle and fle inlined (the walk's hot spot)
        if ((b[0] | HN) - a[0]) & HN != HN:
            return False
        bf = [g | HF for g in b[1]]
        return all(any((g - f) & HF == HF for g in bf) for f in a[1])

    def steps(node):
        """The operations allowed at ``node``: (op, packed form, packed count step, next)."""
        out = step_cache.get(node)
        if out is not None:
            return out
        state, mark = node
        m = mem(state)
        u = state.bwd_next
        cand = [LOSS_OP] if u == L else [bwd[u]] if u >= 0 else []
        for i in range(min(u, L - 1) + 1):
            cand.extend(fwd[i])
        out = []
        for op in cand:
            if persistence.violation(c0, state, mark, op, schedule_class) is not None:
                continue
            rs = [transition(uc, state, mk, op) for uc, mk in zip(units, m)]
            if isinstance(rs[0], str):
                continue
            inc = 1 << (_W * op.index) if op.kind in (FN, FCK, FALL) else 0
            nxt = (rs[0].state, persistence.next_mark(op, schedule_class, mark))
            out.append((op.token, PF.pack([r.peak for r in rs]), inc, nxt))
        step_cache[node] = out
        return out

    start = (s0, persistence.NO_FRESH)
    settled: dict = {}
    final = []
    tie = itertools.count()
    heap = [(0, next(tie), 0, frozenset([PF.pack(mem(s0))]), (), start)]
    count = 0
    while heap:
        tot, _, n, forms, ops, node = heapq.heappop(heap)
        seen = settled.setdefault(node, [])
        lab = (n, forms)
        if any(dom(m, lab) for m in seen):
            continue
        seen.append(lab)
        count += 1
        if count > max_labels:
            raise RematError(f"labels: more than max_labels = {max_labels} labels settled")
        if node[0].is_final():
            final.append((n, forms, ops))
            continue
        for tok, peak, inc, nxt in steps(node):
            if any(fle(peak, g) for g in forms):
                nf = forms
            else:
                nf = frozenset([g for g in forms if not fle(g, peak)] + [peak])
            if (n + inc) & PN.H:
                raise RematError("a count passed the packed labels' range")
            heapq.heappush(heap, (tot + (inc != 0), next(tie), n + inc, nf, ops + (tok,), nxt))
    out = []
    for lab in final:  # the complete labels no other complete label dominates
        if any(dom(o, lab) for o in out):
            continue
        out = [o for o in out if not dom(lab, o)] + [lab]
    return [(PN.unpack(n), frozenset(PF.unpack(f) for f in forms), ops) for n, forms, ops in out]


def check_weak_equals_all(params: Params, weak_class: str = persistence.WEAK,
                          all_labels: list | None = None, class_labels: list | None = None
                          ) -> dict:
    """The sufficient condition of the module docstring, decided: ``{"all": number of labels
    of every schedule, "weak": of the class, "dominated": labels of every schedule some class
    label dominates outright, "failures": the pairs (S, W') the condition fails on, as
    schedules}``.  No failure: at every real size vector of ``params``, every budget where
    the class has a schedule and every forward-time vector, the class's optimum is OPT."""
    A = labels(params, persistence.ALL) if all_labels is None else all_labels
    W = labels(params, weak_class) if class_labels is None else class_labels
    failures, dominated = [], 0
    for s in A:
        below = [w for w in W if _le(w[0], s[0])]
        if any(covered(w[1], s[1]) for w in below):
            dominated += 1
            continue
        for w2 in W:
            if _le(w2[0], s[0]):
                continue
            if not any(covered(w[1], s[1] | w2[1]) for w in below):
                failures.append({"all": " ".join(s[2]), "counts": list(s[0]),
                                 "class_fitting": " ".join(w2[2])})
    return {"params": list(params.names), "all": len(A), "weak": len(W),
            "dominated": dominated, "failures": failures}


__all__ = ["Params", "free_params", "homogeneous_params", "labels", "covered", "dominates",
           "check_weak_equals_all"]


def ratio_bound(params: Params, weak_class: str = persistence.WEAK,
                all_labels: list | None = None, class_labels: list | None = None) -> dict:
    """An upper bound, exact, on ``DP_class / OPT`` over every real size vector of
    ``params``, every budget where the class has a schedule and every forward-time vector
    (proofs/classic_model.md, Theorem C.14): the largest over the labels ``S`` of every
    schedule and the class labels ``W'`` of the game value (Theorem C.10) of ``n(S)`` against
    the count vectors of ``W'`` and of every class label whose forms ``S`` and ``W'`` cover
    (those fit wherever ``S`` and ``W'`` do).  Returns ``{"bound": Fraction, "worst": [(S ops,
    W' ops, forced count vectors)], "all": .., "weak": ..}``."""
    from remat_theory.analysis.classic_times import game_value
    A = labels(params, persistence.ALL) if all_labels is None else all_labels
    W = labels(params, weak_class) if class_labels is None else class_labels
    best, worst = Fraction(1), []
    for s in A:
        if any(_le(w[0], s[0]) and covered(w[1], s[1]) for w in W):
            continue  # a class label dominates S: ratio 1 against it
        for w2 in W:
            union = s[1] | w2[1]
            cs = sorted({w[0] for w in W if covered(w[1], union)} | {w2[0]})
            if any(_le(c, s[0]) for c in cs):
                continue
            cs = [c for c in cs if not any(d != c and _le(d, c) for d in cs)]
            # val <= the value against any single c (max_i c_i / a_i): skip what cannot win
            if min(max(Fraction(ci, ai) for ci, ai in zip(c, s[0])) for c in cs) < best:
                continue
            v, _ = game_value(s[0], cs)
            if v > best:
                best, worst = v, []
            if v == best:
                worst.append((" ".join(s[2]), " ".join(w2[2]), cs))
    return {"bound": best, "worst": worst, "all": len(A), "weak": len(W)}


def peak_at(forms, values) -> int:
    """The peak of a label's forms at the parameter ``values``."""
    return max(sum(c * v for c, v in zip(f, values)) for f in forms)


def ratios_at(values, all_labels: list, class_labels: list) -> list:
    """``(budget, ratio, time vector)`` at every budget where the feasible labels change
    (below the largest peak), the ratio over every forward-time vector, computed from the
    labels alone at the parameter ``values`` (budgets where the class has no schedule are
    skipped): what :func:`remat_theory.analysis.classic_times.budget_ratios` finds on the
    chain ``params.chain(values)`` with the simulator."""
    from remat_theory.analysis.classic_times import time_free_ratio, vectors_at
    A = [(n, peak_at(f, values)) for n, f, _ in all_labels]
    C = [(n, peak_at(f, values)) for n, f, _ in class_labels]
    out = []
    for b in sorted({p for _, p in A} | {p for _, p in C}):
        cs = vectors_at(C, b)
        if cs:
            r, f = time_free_ratio(vectors_at(A, b), cs)
            out.append((b, r, f))
    return out


__all__ += ["ratio_bound", "peak_at", "ratios_at"]
