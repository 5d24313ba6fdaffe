"""The time-expanded MILP of the ``ilp`` solver: building it, and mapping schedules to and
from its variables (proofs/ilp.md, sections 1-5).

Phases.  Backward operations run in the fixed order Loss, B_{L-1}, ..., B_0, so every
schedule is L+1 *phases*: phase p (p = L, L-1, ..., 0) is the run of forward operations
after the previous backward operation, closed by its own backward operation (the loss for
p = L, B_p otherwise).  In phase p only stages 0..min(p, L-1) may run forward.

Passes.  Inside a phase, the forward operations are cut into *passes*: maximal runs of
strictly increasing stage index.  A pass is modelled as one sweep over the stages
0..min(p, L-1), choosing at each stage nothing, ``Fn``, ``Fck`` or ``Fall`` (with ``pairs``,
also a block of two operations of that stage).  With ``K`` passes per phase the model
contains exactly the schedules whose phases have at most ``K`` (weakly) increasing runs;
J(J+1)/2 + 1 passes in phase p (J = p+1, J = L in the loss phase) lose no schedule at all
(Lemma 4 and Theorem 1).

Variables (all binary, per phase p, pass k, stage s): ``n`` (Fn_s reading the plain x_s,
which it frees), ``nt`` (Fn_s reading x_s from the tape t_s, which it frees; allowed only
when no plain x_s is held: the simulator's rule), ``ck`` (Fck_s), ``all`` (Fall_s).  The
values held between passes (plain x_j, tapes t_j) are continuous [0, 1] variables forced to
integer values by equalities; held memory before every operation is a continuous variable
forced by an exact equality (created minus freed bytes), and every operation's peak (held
+ output + overhead, docs/model.md) is bounded by the budget.  Values that are dead in a
phase get no variables.  Objective: the sum of the times of the chosen operations, plus the
constant backward times.

Unsaved outputs (``chain.output_saved``, proofs/ilp.md section 10): an unsaved x_s is read
from its plain copy only (no ``nt``), and a Fall frees it; a Fall of an unsaved x_{s+1}
also makes it as a plain value where the simulator does (``all``), or keeps the copy held
(``allk``); tapes hold ``tape_held`` bytes; the bounds on passes and operations per phase
grow with the tape chains through such Falls.  With every output saved the model is the
classic one, row for row.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pulp

from remat_theory.model.chain import Chain
from remat_theory.model.schedule import B, FALL, FCK, FN, LOSS, LOSS_OP, Bwd, Fall, Fck, Fn, Schedule
from remat_theory.model.simulator import State, transition

from solvers._deadline import Deadline
from solvers.ilp.backends import build_seconds


@dataclass
class Model:
    """A built MILP and what is needed to decode it."""

    chain: Chain  # sizes already divided by their gcd
    passes: int
    prob: pulp.LpProblem
    ops: dict  # (p, k, s, kind) -> binary variable
    budget_var: pulp.LpVariable | None  # the budget itself when it is minimized
    constant: float  # sum of backward times (in the objective as a constant)
    order: list = field(default_factory=list)  # (p, k, s) in schedule order
    pairs: bool = False  # two-operation blocks of one stage allowed (weakly increasing runs)


def _stages(L: int, p: int) -> range:
    return range(0, min(p, L - 1) + 1)


def _allowed(L: int, p: int, s: int, pairs: bool, ckall: bool = False,
             saved_in: bool = True, out_plain: bool = False) -> tuple:
    """Operation kinds the model allows at stage s in phase p (proofs/ilp.md, Lemmas 1-2).

    In phase p < L, a plain x_{p+1} is dead as soon as it exists (nothing may read or free it
    after B_{p+1}); so Fck_p there is pure waste and is excluded, while Fn_p is kept because it
    frees its input.  Fn_0 frees nothing (x_0 is never freed): it is the same operation as
    Fck_0 and is not duplicated.  ``pairs`` adds the two-operation blocks of one stage
    (section 5): Fall+Fn (from plain or from tape), Fall+Fck, Fn+Fall; and ``ckall`` the
    block Fck+Fall, needed only where it can peak lower than Fall+Fck (a stage whose
    recording forward has the smaller overhead: :func:`_ckall_stage`).

    Unsaved outputs (proofs/ilp.md section 10): ``saved_in`` false when x_s is unsaved (no
    ``nt``: it is never inside t_s; Fall_s frees it); ``out_plain`` true when Fall_s here
    also makes a plain unsaved x_{s+1}, unless one is held: then the kind ``allk`` is the
    Fall that keeps that copy.  The blocks are then the valid ones that no single Fall
    dominates (Fck+Fall where Fall_s frees x_s, Fn+Fall where it keeps x_{s+1}).
    """
    dead_ck = p < L and s == p
    kinds = []
    if s >= 1:
        kinds += ["n", "nt"] if saved_in else ["n"]
    if not dead_ck:
        kinds.append("ck")
    kinds.append("all")
    if out_plain:
        kinds.append("allk")
    if pairs:
        if saved_in and not out_plain:
            if s >= 1:
                kinds += ["alln", "allnt", "nall"]
            if not dead_ck:
                kinds.append("allck")
                if ckall:
                    kinds.append("ckall")
        elif saved_in:  # Fall then anything makes x_{s+1} twice; Fn then Fall keeps it
            if s >= 1:
                kinds.append("nall")
        elif not out_plain and not dead_ck:  # Fall_s frees x_s: only Fck_s may come first
            kinds.append("ckall")
    return tuple(kinds)


def _stage_flags(chain: Chain, p: int, s: int) -> tuple:
    """``(saved_in, out_plain)`` of stage s in phase p (:func:`_allowed`): whether x_s is
    saved, and whether Fall_s makes a plain x_{s+1} (unsaved, and B_{s+1} not yet run:
    s < p, or the loss phase)."""
    out_plain = not chain.output_saved[s] and (p == chain.length or s < p)
    return chain.saved(s), out_plain


def _kinds(chain: Chain, p: int, s: int, pairs: bool) -> tuple:
    """The kinds at stage s of phase p of ``chain`` (:func:`_allowed` with its flags)."""
    saved_in, out_plain = _stage_flags(chain, p, s)
    return _allowed(chain.length, p, s, pairs, pairs and _ckall_stage(chain, s),
                    saved_in, out_plain)


def _ckall_stage(chain: Chain, s: int) -> bool:
    """Whether Fck_s then Fall_s can peak lower than Fall_s then Fck_s (same time, same
    values after): Fall+Fck peaks at t + max(fall_overhead, x + fwd_overhead) above the held
    memory, Fck+Fall at x + max(fwd_overhead, t + fall_overhead), so the first is never
    higher unless fwd_overhead[s] > fall_overhead[s] (proofs/ilp.md section 5)."""
    return chain.fwd_overhead[s] > chain.fall_overhead[s]


# per kind: (creates plain x_{s+1}, creates t_{s+1}, frees plain x_s, frees t_s, operations)
# for saved x_s and x_{s+1} (:func:`_effect` gives them for any stage)
_EFFECT = {
    "n": (1, 0, 1, 0, 1), "nt": (1, 0, 0, 1, 1), "ck": (1, 0, 0, 0, 1), "all": (0, 1, 0, 0, 1),
    "alln": (1, 1, 1, 0, 2), "allnt": (1, 1, 0, 1, 2), "allck": (1, 1, 0, 0, 2),
    "nall": (1, 1, 1, 0, 2), "ckall": (1, 1, 0, 0, 2), "allk": (0, 1, 0, 0, 1),
}
_OPS = {"n": (Fn,), "nt": (Fn,), "ck": (Fck,), "all": (Fall,), "alln": (Fall, Fn),
        "allnt": (Fall, Fn), "allck": (Fall, Fck), "nall": (Fn, Fall), "ckall": (Fck, Fall),
        "allk": (Fall,)}


def _effect(chain: Chain, p: int, s: int, kind: str) -> tuple:
    """:data:`_EFFECT` of ``kind`` at stage s of phase p: a Fall frees an unsaved x_s (it
    read the plain copy), and ``all`` makes a plain unsaved x_{s+1} where
    :func:`_stage_flags` says so (``allk`` keeps the one held instead)."""
    e = _EFFECT[kind]
    if kind not in ("all", "allk", "ckall") or not chain.has_unsaved_outputs:
        return e
    saved_in, out_plain = _stage_flags(chain, p, s)
    make_x = 1 if kind == "ckall" or (kind == "all" and out_plain) else 0
    return (make_x, 1, 0 if saved_in else 1, 0, e[4])


def _op_time(chain: Chain, s: int, kind: str) -> float:
    """The time of the operations of ``kind`` at stage s (a block counts both): a Fall takes
    ``fall_time[s]``, an Fn or Fck ``fwd_time[s]``."""
    if kind in ("all", "allk"):
        return chain.fall_time[s]
    if _EFFECT[kind][4] == 2:
        return chain.fall_time[s] + chain.fwd_time[s]
    return chain.fwd_time[s]


def _peak_extra(chain: Chain, s: int, kind: str) -> int:
    """Bytes above the held memory at the highest point of ``kind`` at stage s: its outputs
    and its overhead (``fall_overhead[s]`` for the Fall, ``fwd_overhead[s]`` for an Fn or
    Fck); a block peaks at the higher of its two operations, the second one's with the
    first one's output held (for Fn+Fall, without the x_s the Fn freed)."""
    x, tp, fo, fa = chain.x_size, chain.tape_size, chain.fwd_overhead, chain.fall_overhead
    if kind in ("n", "nt", "ck"):
        return x[s + 1] + fo[s]
    if kind in ("all", "allk"):
        return tp[s] + fa[s]
    if kind == "nall":
        return max(x[s + 1] + fo[s], x[s + 1] - x[s] + tp[s] + fa[s])
    if kind == "ckall":
        return max(x[s + 1] + fo[s], x[s + 1] + tp[s] + fa[s])
    return max(tp[s] + fa[s], tp[s] + x[s + 1] + fo[s])  # Fall first, then Fn / Fck


def _base(chain: Chain, p: int) -> int:
    """Bytes held throughout phase p by every schedule: x_0, and the live gradient d_{p+1}."""
    return chain.x_size[0] + (chain.x_size[p + 1] if p < chain.length else 0)


def _least_peak(chain: Chain, p: int, s: int, kind: str) -> int:
    """A lower bound on the peak of ``kind`` at stage s in phase p: the bytes always held in
    the phase, its input (the plain x_s, or t_s when it reads the tape), and its extra peak.
    Operations above the budget get no variable (they are invalid in every schedule)."""
    x, tp = chain.x_size, chain.tape_size
    if s == 0:
        inp = 0
    elif kind in ("nt", "allnt"):
        inp = tp[s - 1]
    elif kind == "nall":
        inp = x[s] + tp[s - 1]  # the Fn reads the plain x_s, the Fall then reads t_s
    else:
        inp = x[s]
    if kind == "allk":
        inp += x[s + 1]  # it keeps a plain x_{s+1} held
    return _base(chain, p) + inp + _peak_extra(chain, s, kind)


# ----------------------------------------------------------------------- the bounds
def _phase_width(L: int, p: int) -> int:
    """J_p: the stages of the values phase p tracks (x_j, t_j for j = 1..J_p)."""
    return L if p == L else p + 1


def _unsaved_extra(L: int, p: int, output_saved) -> int:
    """What unsaved outputs add to the bounds of phase p (proofs/ilp.md section 10): the
    Fn-chain ending at a tape t_j may run through a Fall_{j-1} that frees an unsaved x_{j-1},
    and then has up to j operations instead of one: sum of j - 1 over the tapes t_j,
    2 <= j <= J_p, with x_{j-1} unsaved.  0 when ``output_saved`` is None (all saved)."""
    if output_saved is None:
        return 0
    J = _phase_width(L, p)
    return sum(j - 1 for j in range(2, J + 1) if not output_saved[j - 2])


def phase_op_bound(L: int, p: int, output_saved=None) -> int:
    """Most forward operations any valid schedule runs in phase p (proofs/ilp.md, Lemma 3):
    J(J+3)/2 with J = p+1 for p < L and J = L for the loss phase (the created values split
    into chains of Fn operations, each ending at a value held when the phase closes: at most
    j values in the chain of a plain x_j, one in that of a tape).  The bound is attained.
    ``output_saved`` (the chain's, None: all saved) adds :func:`_unsaved_extra`."""
    J = _phase_width(L, p)
    return J * (J + 3) // 2 + _unsaved_extra(L, p, output_saved)


def phase_pass_bound(L: int, p: int, output_saved=None) -> int:
    """Most increasing runs any valid schedule has in phase p (proofs/ilp.md, Lemma 4):
    J(J+1)/2 + 1, J as in :func:`phase_op_bound` (an Fn-chain of k operations meets k
    distinct non-increasing stretches of the phase).  The bound is attained.  So that many
    passes lose no schedule at all.  ``output_saved`` as in :func:`phase_op_bound`."""
    J = _phase_width(L, p)
    return J * (J + 1) // 2 + 1 + _unsaved_extra(L, p, output_saved)


def _saved_or_none(chain: Chain):
    """``chain.output_saved`` when some output is unsaved, else None (the classic bounds)."""
    return chain.output_saved if chain.has_unsaved_outputs else None


def passes_sufficient(chain: Chain) -> int:
    """Passes per phase with which the model contains every valid schedule: the largest
    :func:`phase_pass_bound`, L(L+1)/2 + 1 when every output is saved (proofs/ilp.md,
    Theorem 1)."""
    L = chain.length
    saved = _saved_or_none(chain)
    return max(phase_pass_bound(L, p, saved) for p in (L, L - 1))


def _kinds_in_phase(L: int, p: int, pairs: bool, ckall_prefix: list | None = None) -> int:
    """``sum(len(_allowed(L, p, s, pairs, ckall)) for s in _stages(L, p))`` in closed form:
    every stage has ``ck`` and ``all`` (and, with pairs, ``allck``), stages >= 1 also ``n``,
    ``nt`` (and ``alln``, ``allnt``, ``nall``); phase p < L drops ``ck`` (and ``allck``) at
    stage p.  ``ckall_prefix[j]``: the stages below j with a ``ckall`` block (pairs only)."""
    J = min(p, L - 1) + 1
    per_stage = 3 if pairs else 2
    per_later = 5 if pairs else 2
    dead = (2 if pairs else 1) if p < L else 0
    n = J * per_stage + (J - 1) * per_later - dead
    if pairs and ckall_prefix is not None:
        n += ckall_prefix[J]
        if p < L:  # stage p drops its ckall with its ck
            n -= ckall_prefix[p + 1] - ckall_prefix[p]
    return n


def _ckall_prefix(chain: Chain) -> list:
    out = [0]
    for s in range(chain.length):
        out.append(out[-1] + int(_ckall_stage(chain, s)))
    return out


def binaries_bound(chain: Chain, passes: int | None, pairs: bool) -> int:
    """An upper bound on the operation binaries of the K-pass model (before operations that
    exceed the budget are removed): what the model's size is decided by, computed without
    building it, in O(L) (O(L^2) with unsaved outputs).  The proven model (``passes=None``)
    grows as L^4: about 3,900 at 8 stages, 16,000 at 12, half a million at 30."""
    L = chain.length
    saved = _saved_or_none(chain)
    prefix = _ckall_prefix(chain) if pairs else None
    total = 0
    for p in range(L, -1, -1):
        bound = phase_pass_bound(L, p, saved)
        k = bound if passes is None else min(passes, bound)
        if saved is None:
            kinds = _kinds_in_phase(L, p, pairs, prefix)
        else:
            kinds = sum(len(_kinds(chain, p, s, pairs)) for s in _stages(L, p))
        total += k * kinds
    return total


# ----------------------------------------------------------------------- building
class _Builder:
    """Builds the K-pass model phase by phase (:func:`build_model`).

    The state of the values at the start of the current pass is ``P`` (plain x_j) and ``T``
    (tapes t_j), j -> expression, variable or constant 0/1; ``mem`` is the held memory at
    the start of the current pass.  Rows are collected in ``cons`` and added at the end (so
    that the objective is set first, as PuLP wants)."""

    def __init__(self, chain: Chain, budget: int | None, passes: int | None, name: str,
                 pairs: bool, deadline: Deadline):
        self.chain, self.budget, self.passes, self.pairs = chain, budget, passes, pairs
        self.deadline = deadline
        self.L = L = chain.length
        self.prob = pulp.LpProblem(name, pulp.LpMinimize)
        if budget is None:
            self.Mv = self.prob.add_variable("budget", lowBound=chain.x_size[0],
                                             cat=pulp.LpInteger)
            self.M = self.Mv
        else:
            self.Mv, self.M = None, budget
        self.ops: dict = {}
        self.order: list = []
        self.cons: list = []
        self.infeasible: list = []
        self.cost: list = []
        self.P = {j: 0 for j in range(1, L + 1)}
        self.T = {j: 0 for j in range(1, L + 1)}
        self.mem = chain.x_size[0]  # x_0 always held

    def add(self, c, label: str) -> None:
        # constraints left without variables (operations removed by _least_peak) are
        # decided here: a true one is dropped, a false one makes the model infeasible
        if isinstance(c, bool) or (isinstance(c, pulp.LpConstraint) and len(c) == 0):
            ok = c if isinstance(c, bool) else c.valid()
            if not ok:
                self.infeasible.append(label)
            return
        self.cons.append((c, label))

    def build(self) -> Model:
        for p in range(self.L, -1, -1):
            self._phase(p)
        chain, prob = self.chain, self.prob
        constant = math.fsum(chain.bwd_time)
        if self.Mv is None:
            prob += pulp.lpSum(c * v for v, c in self.cost)  # the constant is added when reading
        else:
            prob += self.Mv
        for c, label in self.cons:
            prob += c, label
        if self.infeasible:
            dummy = prob.add_variable("infeasible", lowBound=0, upBound=0)
            prob += dummy >= 1, "infeasible_" + self.infeasible[0]
        return Model(chain, self.passes, prob, self.ops, self.Mv, constant, self.order,
                     self.pairs)

    def _phase(self, p: int) -> None:
        L, stages = self.L, _stages(self.L, p)
        bound_p = phase_pass_bound(L, p, _saved_or_none(self.chain))
        K = bound_p if self.passes is None else min(self.passes, bound_p)
        # values alive in phase p: plain x_1..x_{top+1}, tapes t_1..t_{top+1}
        pass_any = []
        for k in range(K):
            self.deadline.check(f"building the MILP {self.prob.name} ({self.L} stages)")
            pass_any.append(self._pass(p, k, stages))
        self._max_runs(p, K, stages, pass_any)
        self._close_phase(p)

    def _pass(self, p: int, k: int, stages: range) -> dict:
        """One sweep over the stages of phase p; returns stage -> "an operation runs"."""
        pos_any: dict = {}
        cur_P, cur_T = dict(self.P), dict(self.T)  # state as the sweep goes (expressions)
        mb = self.mem
        for s in stages:
            mb = self._stage(p, k, s, cur_P, cur_T, mb, pos_any)
        # state variables at the end of the pass
        for j in range(1, stages[-1] + 2):
            for nm, src_, dst in (("P", cur_P, self.P), ("T", cur_T, self.T)):
                e = src_[j]
                if isinstance(e, int):
                    dst[j] = e
                    continue
                sv = self.prob.add_variable(f"{nm}_{p}_{k}_{j}", lowBound=0, upBound=1)
                self.add(sv - e == 0, f"st{nm}_{p}_{k}_{j}")
                dst[j] = sv
        self.mem = mb
        return pos_any

    def _stage(self, p, k, s, cur_P, cur_T, mb, pos_any):
        """Stage s of pass k of phase p: its operation binaries and rows; updates the state
        ``cur_P``/``cur_T`` in place and returns the held-memory variable after it."""
        chain, add = self.chain, self.add
        x, th = chain.x_size, chain.tape_held
        kinds = _kinds(chain, p, s, self.pairs)
        if self.budget is not None:
            kinds = tuple(kd for kd in kinds if _least_peak(chain, p, s, kd) <= self.budget)
        v = {}
        for kd in kinds:
            var = self.prob.add_variable(f"o_{p}_{k}_{s}_{kd}", cat=pulp.LpBinary)
            self.ops[(p, k, s, kd)] = var
            v[kd] = var
            self.cost.append((var, _op_time(chain, s, kd)))
        self.order.append((p, k, s))
        tag = f"{p}_{k}_{s}"

        def total(i):
            return pulp.lpSum(var for kd, var in v.items() if _effect(chain, p, s, kd)[i])

        anyop = pulp.lpSum(v.values())
        make_x, make_t, free_x, free_t = total(0), total(1), total(2), total(3)
        add(anyop <= 1, f"one_{tag}")
        if s >= 1:
            self._read(p, k, s, v, anyop, free_x, free_t, cur_P, cur_T, pos_any)
            freed = x[s] * free_x + th[s - 1] * free_t
        else:
            freed = 0
        out = x[s + 1] * make_x + th[s] * make_t
        add(mb + pulp.lpSum(_peak_extra(chain, s, kd) * var for kd, var in v.items())
            - self.M <= 0, f"peak_{tag}")
        if "allk" in v:  # the Fall that keeps the plain unsaved x_{s+1} held
            add(v["allk"] - cur_P[s + 1] <= 0, f"keep_{tag}")
        # creation of x_{s+1} / t_{s+1}; creating a held value is invalid
        cur_P[s + 1] = cur_P[s + 1] + make_x
        cur_T[s + 1] = cur_T[s + 1] + make_t
        add(cur_P[s + 1] <= 1, f"newx_{tag}")
        add(cur_T[s + 1] <= 1, f"newt_{tag}")
        nxt = self.prob.add_variable(f"m_{tag}", lowBound=_base(chain, p))
        add(nxt - mb - out + freed == 0, f"mem_{tag}")
        pos_any[s] = anyop
        return nxt

    def _read(self, p, k, s, v, anyop, free_x, free_t, cur_P, cur_T, pos_any) -> None:
        """The rows of stage s >= 1 on its input x_s, and what it frees (``cur_P[s]``,
        ``cur_T[s]`` updated in place).  An unsaved x_s is read from its plain copy only."""
        add, tag = self.add, f"{p}_{k}_{s}"
        saved = self.chain.saved(s)
        tape_start = self.T[s] if saved else 0
        # x_s available here: held at the start of the pass, or made by the stage s-1
        # operation of this pass (counted once, although a pair makes both x_s and t_s):
        # a valid inequality tightening the relaxation
        add(anyop - self.P[s] - tape_start - pos_any.get(s - 1, 0) <= 0, f"once_{tag}")
        Ps, Ts = cur_P[s], cur_T[s]
        # x_s must be available (plain or, when saved, inside t_s)
        add(anyop - Ps - (Ts if saved else 0) <= 0, f"avail_{tag}")
        # Fn frees the plain x_s when one is held, otherwise the tape t_s
        add(free_x - Ps <= 0, f"nplain_{tag}")
        if saved:
            add(free_t - Ts <= 0, f"ntape_{tag}")
            add(free_t + Ps <= 1, f"ntonly_{tag}")
        if "nall" in v:  # Fn frees the plain x_s, then Fall reads t_s
            add(v["nall"] - Ts <= 0, f"nall_{tag}")
        cur_P[s] = Ps - free_x
        cur_T[s] = Ts - free_t

    def _max_runs(self, p: int, K: int, stages: range, pass_any: list) -> None:
        """Passes are the maximal runs (symmetry breaking, proofs/ilp.md section 3): if the
        first operation of pass k+1 is at stage s, pass k has one at a stage >= s (> s when
        a pass may repeat a stage).  So empty passes come last and a run is never split."""
        for k in range(1, K):
            cur, prev = pass_any[k], pass_any[k - 1]
            for s in stages:
                later = [prev[r] for r in stages if r >= s]
                self.add(cur[s] - pulp.lpSum(cur[r] for r in stages if r < s)
                         - pulp.lpSum(later) <= 0, f"maxrun_{p}_{k}_{s}")
        if K > 1:
            self.add(pulp.lpSum(pulp.lpSum(a.values()) for a in pass_any)
                     <= phase_op_bound(self.L, p, _saved_or_none(self.chain)), f"nops_{p}")

    def _close_phase(self, p: int) -> None:
        """The backward operation closing phase p (the loss for p = L, B_p otherwise).  An
        unsaved x_L is read from its plain copy only; B_p does not read an unsaved x_p."""
        chain, add, L, P, T, mem, M = self.chain, self.add, self.L, self.P, self.T, self.mem, self.M
        x, th, bo = chain.x_size, chain.tape_held, chain.bwd_overhead
        if p == L:
            add(P[L] + (T[L] if chain.saved(L) else 0) >= 1, "loss_avail")
            add(mem + x[L] + bo[L] - M <= 0, "peak_loss")
            after = mem + x[L] - x[L] * P[L]
            P[L] = 0
        else:
            add(T[p + 1] >= 1, f"bwd_tape_{p}")
            if p >= 1 and chain.saved(p):
                add(P[p] + T[p] >= 1, f"bwd_avail_{p}")
            add(mem + x[p] + bo[p] - M <= 0, f"peak_b_{p}")
            after = mem + x[p] - x[p + 1] - th[p] - (x[p] * P[p] if p >= 1 else 0)
            T[p + 1] = 0
            if p >= 1:
                P[p] = 0
            P[p + 1] = 0  # dead if held: its bytes stay in ``mem``; no variable any more
        mv = self.prob.add_variable(f"mb_{p}", lowBound=0)
        add(mv - after == 0, f"memb_{p}")
        self.mem = mv


def build_model(chain: Chain, budget: int | None, passes: int | None,
                name: str = "remat", pairs: bool = False,
                deadline: Deadline | None = None) -> Model:
    """The K-pass MILP for ``chain`` (sizes in their final units) under ``budget``.

    Phase p gets ``min(passes, phase_pass_bound(L, p))`` passes (``passes=None``: the bound,
    which loses no schedule at all: proofs/ilp.md, Theorem 1).  ``pairs=True`` lets a pass
    run two operations of the same stage in a row (weakly increasing runs, section 5).

    ``budget=None`` builds the min-budget variant: the budget is an integer variable and the
    objective minimizes it (used to report ``min_budget`` when a budget is infeasible).
    ``deadline``: checked before the build (against :func:`.backends.build_seconds`) and once
    per pass; raises :class:`~solvers._deadline.DeadlineExpired` when the model cannot be
    built (and loaded) in the time left.
    """
    deadline = deadline or Deadline(None)
    deadline.require(build_seconds(binaries_bound(chain, passes, pairs)),
                     f"building the MILP {name} ({chain.length} stages)")
    return _Builder(chain, budget, passes, name, pairs, deadline).build()


# ----------------------------------------------------------------------- decoding
def decode(model: Model) -> Schedule:
    """The schedule encoded by the current variable values (binaries rounded)."""
    L = model.chain.length
    ops = []
    last_p = None
    for p, k, s in model.order:
        if last_p is not None and p != last_p:
            ops.append(LOSS_OP if last_p == L else Bwd(last_p))
        last_p = p
        for kd in _EFFECT:
            var = model.ops.get((p, k, s, kd))
            if var is not None and var.varValue is not None and var.varValue > 0.5:
                ops.extend(make(s) for make in _OPS[kd])
    ops.append(Bwd(0))
    return Schedule(ops)


def _kind(chain: Chain, op, state) -> str:
    """The model's kind for a single forward op run from ``state``."""
    s = op.index
    if op.kind == FALL:
        # a Fall that keeps the plain unsaved x_{s+1} held (B_{s+1} not run yet)
        keep = (not chain.output_saved[s] and state.plain >> (s + 1) & 1
                and state.bwd_next > s)
        return "allk" if keep else "all"
    if op.kind == FCK or s == 0:
        return "ck"  # Fn_0 is Fck_0 (Lemma 1)
    return "n" if state.plain >> s & 1 else "nt"


_PAIR = {("all", "n"): "alln", ("all", "nt"): "allnt", ("all", "ck"): "allck",
         ("ck", "all"): "allck", ("n", "all"): "nall", ("n", "allk"): "nall"}


def encode(model: Model, schedule: Schedule) -> dict | None:
    """Variable values placing ``schedule`` in the model, or None if it does not fit
    (more runs in a phase than passes, or an operation the normal form excludes).

    Used for warm starts (the DPs' schedules have one increasing run per phase: checked by
    the tests, not assumed) and by the tests of Theorem 1.  (With pairs, Fck+Fall is placed
    as Fall+Fck, same state after and never a higher peak, where the model has no Fck+Fall
    block: :func:`_ckall_stage`.)
    """
    L = model.chain.length
    chain = model.chain
    state = State.initial(chain)
    mem = chain.x_size[0]
    values = {v.name: 0 for v in model.ops.values()}
    p, k, last_s, last_var, last_kind = L, 0, None, None, None
    for op in schedule:
        if op.kind in (LOSS, B):
            p = L - 1 if op.kind == LOSS else op.index - 1
            k, last_s, last_var, last_kind = 0, None, None, None
        elif op.kind in (FN, FCK, FALL):
            s = op.index
            kd = _kind(chain, op, state)
            pair = _PAIR.get((last_kind, kd)) if model.pairs and s == last_s else None
            if pair == "allck" and last_kind == "ck" and (p, k, s, "ckall") in model.ops:
                pair = "ckall"
            if pair is not None:
                values[last_var.name] = 0
                kd, last_kind = pair, None  # a block holds two operations at most
            else:
                if last_s is not None and s <= last_s:
                    k += 1
                last_kind = kd
            last_s = s
            var = model.ops.get((p, k, s, kd))
            if var is None:
                return None
            values[var.name] = 1
            last_var = var
        else:
            return None
        tr = transition(chain, state, mem, op)
        if isinstance(tr, str):
            return None
        state, mem = tr.state, tr.memory_after
    return values
