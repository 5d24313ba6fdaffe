"""``ilp``: an exact time-expanded MILP (PuLP; HiGHS in-process, CBC as fallback) with no
persistence assumption.

The formulation, its normal form and the proof that the normal form loses no optimal
schedule are in ``proofs/ilp.md``; this docstring is the short version.

Phases.  Backward operations run in the fixed order Loss, B_{L-1}, ..., B_0, so every
schedule is L+1 *phases*: phase p (p = L, L-1, ..., 0) is the run of forward operations
after the previous backward operation, closed by its own backward operation (the loss for
p = L, B_p otherwise).  In phase p only stages 0..min(p, L-1) may run forward.

Passes.  Inside a phase, the forward operations are cut into *passes*: maximal runs of
strictly increasing stage index.  A pass is modelled as one sweep over the stages
0..min(p, L-1), choosing at each stage nothing, ``Fn``, ``Fck`` or ``Fall``.  With ``K``
passes per phase the model contains exactly the schedules whose phases have at most ``K``
increasing runs.  Every valid schedule has at most J(J+1)/2 + 1 increasing runs in phase p,
where J = p+1 (J = L in the loss phase), so that many passes lose nothing: ``passes=None``,
the default, is exact over all schedules (proofs/ilp.md, Lemma 4 and Theorem 1), but its
O(L^4) binaries make it slow beyond 6 stages.  ``passes=1`` alone (each stage at most once
per phase, the Checkmate-style normal form) is lossy; ``passes=1, pairs=True`` (one
*weakly* increasing run per phase: a pass may run two operations of one stage back to back)
is the fast mode: exactly the optimum of that class (equal to
``exhaustive(schedule_class="monotone")``), never worse than ``dp-weak``, but lossy over all
schedules (proofs/ilp.md section 5: a 4-stage chain at 16 against 15); its answers say
``optimal_for="weak-runs<=1"``.

Certification (the default, ``certify``).  Before any of these models, the moment
relaxation of :mod:`.ilp_bound` (O(L^2) binaries, a lower bound on every schedule,
proofs/ilp.md section 9) is solved from the weak DP's schedule; when its bound reaches the
makespan of that schedule, or of the fast mode's optimum, the schedule is optimal over all
schedules and the proven model is never built.  That is what reaches 20-30 stages.

Variables (all binary, per phase p, pass k, stage s): ``n`` (Fn_s reading the plain x_s,
which it frees), ``nt`` (Fn_s reading x_s from the tape t_s, which it frees; allowed only
when no plain x_s is held: the simulator's rule), ``ck`` (Fck_s), ``all`` (Fall_s).  The
values held between passes (plain x_j, tapes t_j) are continuous [0, 1] variables forced to
integer values by equalities; held memory before every operation is a continuous variable
forced by an exact equality (created minus freed bytes), and every operation's peak (held
+ output + overhead, DESIGN section 1) is bounded by the budget.  Values that are dead in a
phase get no variables.  Objective: the sum of the times of the chosen operations, plus the
constant backward times.

Numerics: sizes are divided by their gcd; no cost noise, no loosened tolerances: the
relative MIP gap is 0 and the absolute gap is 1e-9 times the makespan scale, the registry's
own float tolerance.  ``optimal`` is reported only when the solver's own model status says
proven optimal (HiGHS ``kOptimal``; CBC solution status ``Optimal``), never from PuLP's
``LpStatus`` string.
"""
from __future__ import annotations

import math
import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass, field

import pulp

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError, SolverError
from remat_theory.model.schedule import B, FALL, FCK, FN, LOSS, LOSS_OP, Bwd, Fall, Fck, Fn, Schedule
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import (CLASS_ALL, FEASIBLE, INFEASIBLE, OPTIMAL, TIME_LIMIT,
                                   Solution)

from solvers import registry
from solvers.registry import register

NAME = "ilp"
SOLVERS = ("highs", "cbc")
DEFAULT_PASSES = None  # the number proven sufficient (proofs/ilp.md, Theorem 1)


class IlpError(SolverError):
    """The MILP solver failed or returned something that cannot be decoded."""


# --------------------------------------------------------------------------- model
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


def _allowed(L: int, p: int, s: int, pairs: bool) -> tuple:
    """Operation kinds the model allows at stage s in phase p (proofs/ilp.md, Lemmas 1-2).

    In phase p < L, a plain x_{p+1} is dead as soon as it exists (nothing may read or free it
    after B_{p+1}); so Fck_p there is pure waste and is excluded, while Fn_p is kept because it
    frees its input.  Fn_0 frees nothing (x_0 is never freed): it is the same operation as
    Fck_0 and is not duplicated.  ``pairs`` adds the two-operation blocks of one stage
    (section 5): Fall+Fn (from plain or from tape), Fall+Fck, Fn+Fall.
    """
    dead_ck = p < L and s == p
    kinds = []
    if s >= 1:
        kinds += ["n", "nt"]
    if not dead_ck:
        kinds.append("ck")
    kinds.append("all")
    if pairs:
        if s >= 1:
            kinds += ["alln", "allnt", "nall"]
        if not dead_ck:
            kinds.append("allck")
    return tuple(kinds)


# per kind: (creates plain x_{s+1}, creates t_{s+1}, frees plain x_s, frees t_s, operations)
_EFFECT = {
    "n": (1, 0, 1, 0, 1), "nt": (1, 0, 0, 1, 1), "ck": (1, 0, 0, 0, 1), "all": (0, 1, 0, 0, 1),
    "alln": (1, 1, 1, 0, 2), "allnt": (1, 1, 0, 1, 2), "allck": (1, 1, 0, 0, 2),
    "nall": (1, 1, 1, 0, 2),
}
_OPS = {"n": (Fn,), "nt": (Fn,), "ck": (Fck,), "all": (Fall,), "alln": (Fall, Fn),
        "allnt": (Fall, Fn), "allck": (Fall, Fck), "nall": (Fn, Fall)}


def _peak_extra(chain: Chain, s: int, kind: str) -> int:
    """Bytes above the held memory at the highest point of ``kind`` at stage s (its outputs
    and the overhead; for Fn+Fall the Fall runs after x_s was freed)."""
    x, tp, fo = chain.x_size, chain.tape_size, chain.fwd_overhead
    if kind in ("n", "nt", "ck"):
        return x[s + 1] + fo[s]
    if kind == "all":
        return tp[s] + fo[s]
    if kind == "nall":
        return x[s + 1] + fo[s] + max(0, tp[s] - x[s])
    return tp[s] + x[s + 1] + fo[s]


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
    return _base(chain, p) + inp + _peak_extra(chain, s, kind)


def build_model(chain: Chain, budget: int | None, passes: int | None,
                name: str = "remat", pairs: bool = False) -> Model:
    """The K-pass MILP for ``chain`` (sizes in their final units) under ``budget``.

    Phase p gets ``min(passes, phase_pass_bound(L, p))`` passes (``passes=None``: the bound,
    which loses no schedule at all: proofs/ilp.md, Theorem 1).  ``pairs=True`` lets a pass
    run two operations of the same stage in a row (weakly increasing runs, section 5).

    ``budget=None`` builds the min-budget variant: the budget is an integer variable and the
    objective minimizes it (used to report ``min_budget`` when a budget is infeasible).
    """
    L = chain.length
    x, tp = chain.x_size, chain.tape_size
    fo, bo = chain.fwd_overhead, chain.bwd_overhead
    ft = chain.fwd_time
    prob = pulp.LpProblem(name, pulp.LpMinimize)
    if budget is None:
        Mv = prob.add_variable("budget", lowBound=x[0], cat=pulp.LpInteger)
        M = Mv
    else:
        Mv = None
        M = budget
    ops: dict = {}
    order: list = []
    cons = []

    infeasible = []

    def add(c, label):
        # constraints left without variables (operations removed by _least_peak) are
        # decided here: a true one is dropped, a false one makes the model infeasible
        if isinstance(c, bool) or (isinstance(c, pulp.LpConstraint) and len(c) == 0):
            ok = c if isinstance(c, bool) else c.valid()
            if not ok:
                infeasible.append(label)
            return
        cons.append((c, label))

    # State of the values at the start of the current pass: plain x_j, tapes t_j (dict j ->
    # expression / variable / constant 0 or 1).
    P = {j: 0 for j in range(1, L + 1)}
    T = {j: 0 for j in range(1, L + 1)}
    mem = x[0]  # held bytes at the start of the current pass (x_0 always held)
    cost = []
    for p in range(L, -1, -1):
        stages = _stages(L, p)
        top = stages[-1]
        bound_p = phase_pass_bound(L, p)
        K = bound_p if passes is None else min(passes, bound_p)
        # values alive in phase p: plain x_1..x_{top+1}, tapes t_1..t_{top+1}
        pass_any = []  # per pass: stage -> expression "an operation of this stage runs"
        for k in range(K):
            pos_any = {}
            cur_P, cur_T = dict(P), dict(T)  # state as the sweep goes (expressions)
            mb = mem
            for s in stages:
                kinds = _allowed(L, p, s, pairs)
                if budget is not None:
                    kinds = tuple(kd for kd in kinds if _least_peak(chain, p, s, kd) <= budget)
                v = {}
                for kd in kinds:
                    var = prob.add_variable(f"o_{p}_{k}_{s}_{kd}", cat=pulp.LpBinary)
                    ops[(p, k, s, kd)] = var
                    v[kd] = var
                    cost.append((var, ft[s] * _EFFECT[kd][4]))
                order.append((p, k, s))
                tag = f"{p}_{k}_{s}"

                def total(i):
                    return pulp.lpSum(var for kd, var in v.items() if _EFFECT[kd][i])

                anyop = pulp.lpSum(v.values())
                make_x, make_t, free_x, free_t = total(0), total(1), total(2), total(3)
                add(anyop <= 1, f"one_{tag}")
                if s >= 1:
                    # x_s available here: held at the start of the pass, or made by the
                    # stage s-1 operation of this pass (counted once, although a pair makes
                    # both x_s and t_s): a valid inequality tightening the relaxation
                    add(anyop - P[s] - T[s] - pos_any.get(s - 1, 0) <= 0, f"once_{tag}")
                if s >= 1:
                    Ps, Ts = cur_P[s], cur_T[s]
                    # x_s must be available (plain or inside t_s)
                    add(anyop - Ps - Ts <= 0, f"avail_{tag}")
                    # Fn frees the plain x_s when one is held, otherwise the tape t_s
                    add(free_x - Ps <= 0, f"nplain_{tag}")
                    add(free_t - Ts <= 0, f"ntape_{tag}")
                    add(free_t + Ps <= 1, f"ntonly_{tag}")
                    if "nall" in v:  # Fn frees the plain x_s, then Fall reads t_s
                        add(v["nall"] - Ts <= 0, f"nall_{tag}")
                    cur_P[s] = Ps - free_x
                    cur_T[s] = Ts - free_t
                    freed = x[s] * free_x + tp[s - 1] * free_t
                else:
                    freed = 0
                out = x[s + 1] * make_x + tp[s] * make_t
                add(mb + pulp.lpSum(_peak_extra(chain, s, kd) * var for kd, var in v.items())
                    - M <= 0, f"peak_{tag}")
                # creation of x_{s+1} / t_{s+1}; creating a held value is invalid
                cur_P[s + 1] = cur_P[s + 1] + make_x
                cur_T[s + 1] = cur_T[s + 1] + make_t
                add(cur_P[s + 1] <= 1, f"newx_{tag}")
                add(cur_T[s + 1] <= 1, f"newt_{tag}")
                nxt = prob.add_variable(f"m_{tag}", lowBound=_base(chain, p))
                add(nxt - mb - out + freed == 0, f"mem_{tag}")
                mb = nxt
                pos_any[s] = anyop
            pass_any.append(pos_any)
            # state variables at the end of the pass
            for j in range(1, top + 2):
                for nm, src_, dst in (("P", cur_P, P), ("T", cur_T, T)):
                    e = src_[j]
                    if isinstance(e, int):
                        dst[j] = e
                        continue
                    sv = prob.add_variable(f"{nm}_{p}_{k}_{j}", lowBound=0, upBound=1)
                    add(sv - e == 0, f"st{nm}_{p}_{k}_{j}")
                    dst[j] = sv
            mem = mb
        # Passes are the maximal runs (symmetry breaking, proofs/ilp.md section 3): if the
        # first operation of pass k+1 is at stage s, pass k has one at a stage >= s (> s when
        # a pass may repeat a stage).  So empty passes come last and a run is never split.
        for k in range(1, K):
            cur, prev = pass_any[k], pass_any[k - 1]
            for s in stages:
                later = [prev[r] for r in stages if r >= s]
                add(cur[s] - pulp.lpSum(cur[r] for r in stages if r < s)
                    - pulp.lpSum(later) <= 0, f"maxrun_{p}_{k}_{s}")
        if K > 1:
            add(pulp.lpSum(pulp.lpSum(a.values()) for a in pass_any) <= phase_op_bound(L, p),
                f"nops_{p}")
        # the backward operation closing phase p
        if p == L:
            add(P[L] + T[L] >= 1, "loss_avail")
            add(mem + x[L] + bo[L] - M <= 0, "peak_loss")
            after = mem + x[L] - x[L] * P[L]
            P[L] = 0
        else:
            add(T[p + 1] >= 1, f"bwd_tape_{p}")
            if p >= 1:
                add(P[p] + T[p] >= 1, f"bwd_avail_{p}")
            add(mem + x[p] + bo[p] - M <= 0, f"peak_b_{p}")
            after = mem + x[p] - x[p + 1] - tp[p] - (x[p] * P[p] if p >= 1 else 0)
            T[p + 1] = 0
            if p >= 1:
                P[p] = 0
            P[p + 1] = 0  # dead if held: its bytes stay in ``mem``; no variable any more
        mv = prob.add_variable(f"mb_{p}", lowBound=0)
        add(mv - after == 0, f"memb_{p}")
        mem = mv
    constant = math.fsum(chain.bwd_time)
    if Mv is None:
        prob += pulp.lpSum(c * v for v, c in cost)  # the constant is added when reading
    else:
        prob += Mv
    for c, label in cons:
        prob += c, label
    if infeasible:
        dummy = prob.add_variable("infeasible", lowBound=0, upBound=0)
        prob += dummy >= 1, "infeasible_" + infeasible[0]
    return Model(chain, passes, prob, ops, Mv, constant, order, pairs)


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


def _kind(op, state) -> str:
    """The model's kind for a single forward op run from ``state``."""
    s = op.index
    if op.kind == FALL:
        return "all"
    if op.kind == FCK or s == 0:
        return "ck"  # Fn_0 is Fck_0 (Lemma 1)
    return "n" if state.plain >> s & 1 else "nt"


_PAIR = {("all", "n"): "alln", ("all", "nt"): "allnt", ("all", "ck"): "allck",
         ("ck", "all"): "allck", ("n", "all"): "nall"}


def encode(model: Model, schedule: Schedule) -> dict | None:
    """Variable values placing ``schedule`` in the model, or None if it does not fit
    (more runs in a phase than passes, or an operation the normal form excludes).

    Used for warm starts (the DPs' schedules have one increasing run per phase: checked by
    the tests, not assumed) and by the tests of Theorem 1.  (With pairs, Fck+Fall is placed
    as Fall+Fck: same peaks, same state after.)
    """
    from remat_theory.model.simulator import State, transition  # local: model helpers only

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
            kd = _kind(op, state)
            pair = _PAIR.get((last_kind, kd)) if model.pairs and s == last_s else None
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


# --------------------------------------------------------------------------- solving
def _phase_width(L: int, p: int) -> int:
    """J_p: the stages of the values phase p tracks (x_j, t_j for j = 1..J_p)."""
    return L if p == L else p + 1


def phase_op_bound(L: int, p: int) -> int:
    """Most forward operations any valid schedule runs in phase p (proofs/ilp.md, Lemma 3):
    J(J+3)/2 with J = p+1 for p < L and J = L for the loss phase (the created values split
    into chains of Fn operations, each ending at a value held when the phase closes: at most
    j values in the chain of a plain x_j, one in that of a tape).  The bound is attained."""
    J = _phase_width(L, p)
    return J * (J + 3) // 2


def phase_pass_bound(L: int, p: int) -> int:
    """Most increasing runs any valid schedule has in phase p (proofs/ilp.md, Lemma 4):
    J(J+1)/2 + 1, J as in :func:`phase_op_bound` (an Fn-chain of k operations meets k
    distinct non-increasing stretches of the phase).  The bound is attained.  So that many
    passes lose no schedule at all."""
    J = _phase_width(L, p)
    return J * (J + 1) // 2 + 1


DEFAULT_MAX_BINARIES = 100_000


def binaries_bound(chain: Chain, passes: int | None, pairs: bool) -> int:
    """An upper bound on the operation binaries of the K-pass model (before operations that
    exceed the budget are removed): what the model's size is decided by, computed without
    building it.  The proven model (``passes=None``) grows as L^4: about 3,900 at 8 stages,
    16,000 at 12, half a million at 30."""
    L = chain.length
    total = 0
    for p in range(L, -1, -1):
        k = phase_pass_bound(L, p) if passes is None else min(passes, phase_pass_bound(L, p))
        for s in range(min(p, L - 1) + 1):
            total += k * len(_allowed(L, p, s, pairs))
    return total


def passes_sufficient(chain: Chain) -> int:
    """Passes per phase with which the model contains every valid schedule: the largest
    :func:`phase_pass_bound`, L(L+1)/2 + 1 (proofs/ilp.md, Theorem 1)."""
    L = chain.length
    return L * (L + 1) // 2 + 1


@dataclass
class RunResult:
    proven: bool  # the solver proved its answer (optimal, or infeasible)
    infeasible: bool
    has_solution: bool
    objective: float | None
    bound: float | None
    status_text: str


class _WarmHighs(pulp.HiGHS):
    """PuLP's in-process HiGHS, plus a MIP start (PuLP's class does not pass one)."""

    def __init__(self, start: dict | None = None, **kw):
        super().__init__(**kw)
        self._start = start

    def callSolver(self, lp):
        import highspy

        h = lp.solverModel
        if self._start:
            import numpy as np
            pairs = [(v.index, float(self._start[v.name])) for v in lp.variables()
                     if v.name in self._start]
            idx = np.array([i for i, _ in pairs], dtype=np.int32)
            val = np.array([x for _, x in pairs], dtype=np.float64)
            h.setSolution(len(pairs), idx, val)
        if self.threads is not None:
            # HiGHS keeps one thread scheduler per process; a different thread count needs
            # a fresh one (otherwise run() fails with an option error)
            highspy.Highs.resetGlobalScheduler(True)
        self.run_status = h.run()


_BANNER_DONE = False


def _silence_highs_banner() -> None:
    """HiGHS prints a two-line banner on the C stdout the first time a solver object is made
    in a process, before any option can turn output off; it would corrupt the JSON that
    ``remat solve --json`` prints.  Make that first object with file descriptor 1 pointed at
    /dev/null."""
    global _BANNER_DONE
    if _BANNER_DONE:
        return
    import sys

    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    _BANNER_DONE = True


def _run_highs(model: Model, time_limit, start, threads, scale, presolve: str = "on") -> RunResult:
    import highspy

    _silence_highs_banner()

    t0 = time.perf_counter()
    opts = dict(mip_rel_gap=0.0, mip_abs_gap=1e-9 * scale, mip_feasibility_tolerance=1e-9,
                presolve=presolve)
    solver = _WarmHighs(start=start, msg=False, timeLimit=time_limit, threads=threads, **opts)
    model.prob.solve(solver)
    h = model.prob.solverModel
    st = h.getModelStatus()
    if solver.run_status == highspy.HighsStatus.kError or st in (
            highspy.HighsModelStatus.kNotset, highspy.HighsModelStatus.kLoadError,
            highspy.HighsModelStatus.kModelError, highspy.HighsModelStatus.kSolveError,
            highspy.HighsModelStatus.kPresolveError, highspy.HighsModelStatus.kPostsolveError):
        raise IlpError(f"ilp: HiGHS failed ({h.modelStatusToString(st)})")
    info = h.getInfo()
    MS = highspy.HighsModelStatus
    has = info.primal_solution_status == 2  # kSolutionStatusFeasible
    if has and presolve == "on":
        # HiGHS 1.16, given a MIP start, was seen to report an "optimal" objective (and an
        # equal dual bound) that the returned point does not have: presolve's objective
        # offset lost.  The point is what the objective is read from; if the reported value
        # differs, nothing the run says is trusted, and it is solved again without presolve.
        at_point = pulp.value(model.prob.objective)
        if at_point is None or abs(at_point - info.objective_function_value) > 1e-9 * scale:
            left = None if time_limit is None else \
                max(0.01, time_limit - (time.perf_counter() - t0))
            return _run_highs(model, left, start, threads, scale, presolve="off")
    bound = info.mip_dual_bound
    bound = None if bound is None or not math.isfinite(bound) else bound
    obj = info.objective_function_value + model.constant if has else None
    if bound is not None:
        bound += model.constant
    return RunResult(proven=st in (MS.kOptimal, MS.kInfeasible), infeasible=st == MS.kInfeasible,
                     has_solution=has, objective=obj, bound=bound,
                     status_text=h.modelStatusToString(st))


_CBC_BOUND = re.compile(r"best possible\s+(-?[0-9.eE+]+)")
_CBC_BOUND2 = re.compile(r"Lower bound:\s+(-?[0-9.eE+]+)")


def _run_cbc(model: Model, time_limit, start, threads, scale) -> RunResult:
    """CBC through PuLP.  The bundled CBC binary sometimes dies reading a MIP start (seen
    with PuLP 3.3: no solution file, empty log, well before the time limit); then it is
    run once more without the start, and the caller still keeps the start's schedule as
    its incumbent."""
    if start:
        t0 = time.perf_counter()
        try:
            return _run_cbc_once(model, time_limit, start, threads, scale)
        except pulp.PulpSolverError:
            left = None if time_limit is None else max(1.0, time_limit - (time.perf_counter() - t0))
            return _run_cbc_once(model, left, None, threads, scale)
    return _run_cbc_once(model, time_limit, None, threads, scale)


def _run_cbc_once(model: Model, time_limit, start, threads, scale) -> RunResult:
    if start:
        for v in model.prob.variables():
            if v.name in start:
                v.setInitialValue(start[v.name])
            elif v.cat == pulp.LpBinary:
                v.setInitialValue(0)
    fd, log = tempfile.mkstemp(suffix=".log")
    os.close(fd)
    try:
        with warnings.catch_warnings():  # PuLP 3.3 announces a rename of its bundled CBC
            warnings.simplefilter("ignore", DeprecationWarning)
            solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, gapRel=0.0,
                                       gapAbs=1e-9 * scale, threads=threads,
                                       warmStart=bool(start), logPath=log)
        model.prob.solve(solver)
        with open(log) as f:
            text = f.read()
    finally:
        os.unlink(log)
    sol_status = model.prob.sol_status
    proven_opt = sol_status == pulp.LpSolutionOptimal
    infeasible = sol_status == pulp.LpSolutionInfeasible and "infeasible" in text.lower()
    has = sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    obj = pulp.value(model.prob.objective) + model.constant if has else None
    bound = None
    m = _CBC_BOUND.findall(text) or _CBC_BOUND2.findall(text)
    if m:
        bound = float(m[-1]) + model.constant
    if proven_opt:
        bound = obj
    return RunResult(proven=proven_opt or infeasible, infeasible=infeasible, has_solution=has,
                     objective=obj, bound=bound, status_text=pulp.LpSolution[sol_status])


def run_model(model, solver, time_limit, start, threads, scale) -> RunResult:
    """Solve ``model``: anything with ``prob`` and ``constant`` (the K-pass model, or the
    moment relaxation of :mod:`.ilp_bound`)."""
    if solver == "highs":
        return _run_highs(model, time_limit, start, threads, scale)
    return _run_cbc(model, time_limit, start, threads, scale)


def _incumbent(chain: Chain, budget: int, use_dp: bool):
    """A valid schedule to start from, and its makespan, or (None, None): the weak DP, then
    the persistent DP, when registered; store-all when it fits."""
    names = registry.names()
    if use_dp:
        for nm in ("dp-weak", "dp"):
            if nm in names:
                try:
                    sol = registry.solve(chain, budget, nm)
                except RematError:
                    continue
                if sol.schedule is not None:
                    return sol.schedule, sol.makespan, nm
    if chain.store_all_memory() <= budget:
        from solvers.store_all import store_all_schedule
        sched = store_all_schedule(chain)
        return sched, chain.ideal_makespan(), "store-all"
    return None, None, None


STAGED_PASSES = 2  # the restricted model solved first for a larger one's warm start
STAGED_SHARE, STAGED_CAP = 0.25, 30.0  # of its time limit, and at most this many seconds


def _staged_incumbent(chain: Chain, budget: int, time_limit, solver, threads, info: dict):
    """A warm start for a model with more passes: the optimum (or the incumbent at its time
    limit) of two weakly increasing runs per phase, a class the larger model contains, as
    ``(schedule, makespan)`` or ``(None, None)``.  It is found in about a second where the
    larger model is used (a few stages); it can be strictly better than the weak DP's
    schedule, and it can exist where no DP schedule fits (proofs/ilp.md section 8)."""
    cap = STAGED_CAP if time_limit is None else min(STAGED_CAP, STAGED_SHARE * time_limit)
    try:
        sub = solve_ilp(chain, budget, time_limit=cap, mip_solver=solver,
                        passes=STAGED_PASSES, pairs=True, warm_start=True, threads=threads)
    except RematError:
        return None, None
    info["staged"] = {"passes": STAGED_PASSES, "pairs": True, "status": sub.status,
                      "makespan": sub.makespan, "wall_time": round(sub.wall_time, 3)}
    return sub.schedule, sub.makespan


PULP_SUPPORTED = ((3, 3, 1), (4,))  # [lowest, first unsupported): as pyproject.toml pins it


def _version_tuple(text: str) -> tuple:
    parts = []
    for piece in text.split(".")[:3]:
        digits = re.match(r"\d+", piece)
        parts.append(int(digits.group()) if digits else 0)
    return tuple(parts)


def _check_pulp() -> None:
    """The solver is written against PuLP 3.3 (``add_variable``; CBC bundled as
    ``PULP_CBC_CMD``; ``solve()`` returning an int).  PuLP 4 changes all three, so an
    environment with another PuLP than the one pyproject.toml pins gets a clear error here
    instead of a failure deep inside a solve."""
    version = pulp.__version__
    lo, hi = PULP_SUPPORTED
    if not lo <= _version_tuple(version) < hi:
        raise SolverError(f"ilp: PuLP {version} is installed; this solver needs PuLP >= 3.3.1 "
                          f"and < 4 (pip install 'pulp>=3.3.1,<4')")


def _check_options(time_limit, solver, passes, warm_start, threads, max_binaries=DEFAULT_MAX_BINARIES):
    _check_pulp()
    if isinstance(max_binaries, bool) or not isinstance(max_binaries, int) or max_binaries < 1:
        raise SolverError(f"ilp: max_binaries = {max_binaries!r} must be an integer >= 1")
    if solver not in SOLVERS:
        raise SolverError(f"ilp: mip_solver = {solver!r} is unknown (known: {', '.join(SOLVERS)})")
    if time_limit is not None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) \
                or not math.isfinite(time_limit) or time_limit <= 0:
            raise SolverError(f"ilp: time_limit = {time_limit!r} must be a positive number of seconds")
    if passes is not None and (isinstance(passes, bool) or not isinstance(passes, int) or passes < 1):
        raise SolverError(f"ilp: passes = {passes!r} must be an integer >= 1 (or None)")
    if not isinstance(warm_start, bool):
        raise SolverError(f"ilp: warm_start = {warm_start!r} must be True or False")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise SolverError(f"ilp: threads = {threads!r} must be an integer >= 1")


PROVEN_QUICK_STAGES = 5  # the proven model: seconds up to here, minutes to hours above


def _long_solve_note(chain: Chain, options) -> str | None:
    """A note before a solve that may run very long: the default mode on more than
    :data:`PROVEN_QUICK_STAGES` stages with no time limit, which falls back to the proven
    model (O(L^4) binaries, proofs/ilp.md section 8) whenever the moment relaxation leaves a
    gap (section 9)."""
    if options.get("passes") is not None or options.get("time_limit") is not None:
        return None
    if chain.length <= PROVEN_QUICK_STAGES:
        return None
    return (f"remat: note: ilp first tries to prove the weak DP's or the fast mode's schedule "
            f"optimal with the moment relaxation (seconds on random chains of 20-30 stages); "
            f"where that leaves a gap it solves the proven model, which on {chain.length} stages "
            f"can take minutes to hours (about {PROVEN_QUICK_STAGES} stages take seconds), "
            f"or, from 20 stages, answers 'feasible' with a bound; --time-limit SECONDS "
            f"returns the best schedule and bound found by then, and --solver ilp-fast "
            f"(-o passes=1 -o pairs=true) is the fast mode (optimal among schedules with one "
            f"weakly increasing run per phase)")


@register(NAME, optimal_for=CLASS_ALL, exact=True,
          description="Exact over all schedules: a lower-bound MILP (the moment relaxation) "
                      "certifies the weak DP's or the fast mode's schedule, else the "
                      "time-expanded MILP proven lossless decides (PuLP; HiGHS or CBC).",
          # In a sweep: the smallest-feasible-budget MILP (at infeasible budgets) and tight
          # budgets take much longer from about 5 stages on.  As a reference: the proven
          # model stays under the default max_binaries up to 19 stages.
          max_stages=4, reference_max_stages=19,
          classes=("all", "weak-runs<=1", "weak-runs<=2"),
          variants={"ilp-cbc": {"options": {"mip_solver": "cbc"}, "max_stages": 4},
                    "ilp-fast": {"options": {"passes": 1, "pairs": True}, "max_stages": 12,
                                 "in_verify": True},
                    "ilp-proven": {"options": {"certify": False}, "max_stages": 4,
                                   "in_verify": True},
                    "ilp-weak-runs2": {"options": {"passes": 2, "pairs": True}, "max_stages": 8}},
          note=lambda chain, budget, options: _long_solve_note(chain, options))
def solve_ilp(chain: Chain, budget: int, *, time_limit: float | None = None,
              mip_solver: str = "highs", passes: int | None = DEFAULT_PASSES,
              pairs: bool = False, warm_start: bool = True, threads: int = 1,
              max_binaries: int = DEFAULT_MAX_BINARIES, certify: bool | None = None) -> Solution:
    """Optimal schedule over every schedule with at most ``passes`` increasing runs of forward
    operations per phase (``passes=None``, the default: over all schedules, proofs/ilp.md;
    ``pairs=True``: weakly increasing runs; ``passes=1, pairs=True`` is the fast mode).
    ``time_limit`` in seconds; ``mip_solver`` "highs" (in-process highspy) or "cbc" (the
    option cannot be called ``solver``: that is the registry's own argument).

    ``certify`` (default: on for ``passes=None``, off otherwise): prove optimality over all
    schedules with the moment relaxation (:mod:`.ilp_bound`, proofs/ilp.md section 9), a
    lower bound on every schedule's makespan.  The weak DP's schedule, then the fast mode's
    optimum, is optimal as soon as the bound reaches its makespan; only when it does not is
    the proven time-expanded model solved (with the bound as a cut), and where that model
    is too large the answer is ``feasible`` with the bound (``info["certificate"]`` says
    which step decided).  With ``passes`` set and ``certify=True``, the class optimum is
    reported as optimal over all schedules when the bound reaches it.

    ``warm_start`` seeds the solver with the DP schedule (or store-all) as incumbent; the
    proven model (and a model with more than two weakly increasing runs) first solves two
    weakly increasing runs per phase and starts from that optimum when it is better
    (``info["staged"]``).  ``max_binaries``: refuse (SolverError) to build a model with more
    operation binaries than this (:func:`binaries_bound`), rather than exhaust memory: the
    proven model passes it up to 19 stages."""
    solver = mip_solver
    _check_options(time_limit, solver, passes, warm_start, threads, max_binaries)
    if not isinstance(pairs, bool):
        raise SolverError(f"ilp: pairs = {pairs!r} must be True or False")
    if certify is not None and not isinstance(certify, bool):
        raise SolverError(f"ilp: certify = {certify!r} must be True, False or None (default)")
    if certify is None:
        certify = passes is None
    size = binaries_bound(chain, passes, bool(pairs))
    too_big = None
    if size > max_binaries:
        mode = "the proven model (passes=None)" if passes is None else f"passes={passes}"
        too_big = (f"ilp: {mode} for {chain.length} stages has up to {size:,} operation "
                   f"binaries, above max_binaries = {max_binaries:,}")
        if not (certify and passes is None):
            raise SolverError(
                f"{too_big}; use the fast mode (passes=1, pairs=True: optimal among schedules "
                f"with one weakly increasing forward run per phase, "
                f"{binaries_bound(chain, 1, True):,} binaries) or raise max_binaries")
    t0 = time.perf_counter()
    if certify and passes is None:
        return _certified(chain, budget, time_limit, solver, pairs, warm_start, threads, t0,
                          too_big)
    sol = _solve_passes(chain, budget, time_limit, solver, passes, pairs, warm_start, threads, t0)
    if certify and sol.status == OPTIMAL and sol.optimal_for != CLASS_ALL:
        sol = _certify_answer(chain, budget, sol, time_limit, solver, threads, t0)
    return sol


def _left(time_limit, t0):
    return None if time_limit is None else max(0.01, time_limit - (time.perf_counter() - t0))


def _certify_answer(chain, budget, sol, time_limit, solver, threads, t0) -> Solution:
    """``sol`` (optimal for its class) made optimal over all schedules when the moment
    relaxation reaches its makespan; otherwise unchanged, with what the bound proved."""
    from solvers.ilp_bound import lower_bound

    lb = lower_bound(chain, budget, schedule=sol.schedule, time_limit=_left(time_limit, t0),
                     mip_solver=solver, threads=threads)
    info = dict(sol.info, relaxation=lb.as_info())
    if _reaches(lb, sol.makespan, chain):
        info["certificate"] = "moment relaxation"
        return sol.replace(optimal_for=CLASS_ALL, info=info, wall_time=time.perf_counter() - t0,
                           message="proven optimal over all schedules (the moment relaxation "
                                   "reaches the makespan)")
    return sol.replace(info=info, wall_time=time.perf_counter() - t0)


def _reaches(lb, makespan: float, chain: Chain) -> bool:
    """Whether the relaxation's proven bound is the makespan (the registry's float tolerance).
    A bound above the makespan of a valid schedule, or a proof of infeasibility next to one,
    would contradict Theorem 3: that is an error, never an answer."""
    tol = 1e-9 * max(1.0, chain.ideal_makespan())
    if lb.infeasible or (lb.value is not None and lb.value > makespan + tol):
        raise IlpError(f"ilp: the moment relaxation ({lb.as_info()}) contradicts a valid "
                       f"schedule of makespan {makespan}")
    return lb.value is not None and lb.value >= makespan - tol


def _certified(chain, budget, time_limit, solver, pairs, warm_start, threads, t0,
               too_big) -> Solution:
    """The default exact mode (proofs/ilp.md section 9): weak DP, moment relaxation, fast
    mode, and the proven model only when the cheaper steps leave a gap."""
    from solvers.ilp_bound import lower_bound

    info = {"solver": solver, "passes": None, "pairs": pairs, "certify": True}
    if budget < chain.x_size[0]:
        return _certified_infeasible(chain, budget, time_limit, solver, threads, t0, info,
                                     too_big)
    best = _incumbent(chain, budget, True)  # (schedule, makespan, source)
    lb = lower_bound(chain, budget, schedule=best[0], time_limit=_left(time_limit, t0),
                     mip_solver=solver, threads=threads)
    info["relaxation"] = lb.as_info()
    if lb.infeasible and best[0] is None:
        return _certified_infeasible(chain, budget, time_limit, solver, threads, t0, info,
                                     too_big)
    if best[0] is not None and _reaches(lb, best[1], chain):
        return _certified_answer(chain, budget, best, lb, "moment relaxation", info, t0)
    fast = _solve_passes(chain, budget, _left(time_limit, t0), solver, 1, True, warm_start,
                         threads, time.perf_counter(),
                         seed=best if best[0] is not None else None)
    info["fast_mode"] = {"status": fast.status, "makespan": fast.makespan,
                         "wall_time": round(fast.wall_time, 3)}
    if fast.schedule is not None and (best[0] is None or fast.makespan < best[1]):
        best = (fast.schedule, fast.makespan, "ilp passes=1 pairs=True")
    if best[0] is not None and _reaches(lb, best[1], chain):
        return _certified_answer(chain, budget, best, lb, "moment relaxation", info, t0)
    lower = lb.value
    if too_big is None:
        sol = _solve_passes(chain, budget, _left(time_limit, t0), solver, None, pairs,
                            warm_start, threads, t0, seed=best if best[0] is not None else None,
                            lower=lower)
        merged = dict(info, **sol.info)
        merged["certificate"] = "proven model" if sol.status in (OPTIMAL, INFEASIBLE) else None
        return sol.replace(info=merged, wall_time=time.perf_counter() - t0)
    if best[0] is None:
        raise SolverError(f"{too_big}; the moment relaxation does not prove the budget "
                          f"infeasible and neither the weak DP nor the fast mode found a schedule: "
                          f"raise max_binaries to search all schedules")
    sim = simulate(chain, best[0], budget)
    bound = chain.ideal_makespan() if lower is None else max(lower, chain.ideal_makespan())
    bound = min(bound, sim.makespan)
    info["certificate"] = None
    info["incumbent_from"] = best[2]
    why = "time limit" if time_limit is not None and time.perf_counter() - t0 >= time_limit \
        else "the moment relaxation stops below it and the proven model is too large"
    status = TIME_LIMIT if why == "time limit" else FEASIBLE
    return Solution(NAME, status, best[0], sim.makespan, sim.peak_memory, budget, bound=bound,
                    optimal_for=CLASS_ALL, info=info, wall_time=time.perf_counter() - t0,
                    message=f"not proven optimal ({why}): bound {bound}, makespan {sim.makespan}")


def _certified_answer(chain, budget, best, lb, how, info, t0) -> Solution:
    schedule, makespan, source = best
    sim = simulate(chain, schedule, budget)
    if not math.isclose(sim.makespan, makespan, rel_tol=1e-9, abs_tol=1e-9):
        raise IlpError(f"ilp: the {source} schedule's makespan {makespan} differs from the "
                       f"simulated {sim.makespan}")
    info = dict(info, certificate=how, incumbent_from=source)
    return Solution(NAME, OPTIMAL, schedule, sim.makespan, sim.peak_memory, budget,
                    bound=sim.makespan, optimal_for=CLASS_ALL, info=info,
                    wall_time=time.perf_counter() - t0,
                    message=f"proven optimal over all schedules: the {source} schedule reaches "
                            f"the {how}'s lower bound")


def _certified_infeasible(chain, budget, time_limit, solver, threads, t0, info,
                          too_big) -> Solution:
    """No schedule fits (proven by the relaxation, or below x_0): the smallest budget, by the
    proven min-budget model where it is affordable, else between the min-budget relaxation's
    bound and the weak DP's / fast mode's smallest budget."""
    from solvers.ilp_bound import min_budget_bound

    if too_big is None:
        g = chain.size_gcd()
        K = passes_sufficient(chain)
        sol = _infeasible(chain, budget, chain.scaled_sizes(g), g, K, False, solver, time_limit,
                          threads, dict(info), CLASS_ALL, t0)
        how = "moment relaxation" if "relaxation" in info else "budget below x_0"
        return sol.replace(info=dict(sol.info, certificate=how))
    low = min_budget_bound(chain, time_limit=_left(time_limit, t0), mip_solver=solver,
                           threads=threads)
    ups = []
    if "dp-weak" in registry.names():
        mb = registry.solve(chain, 0, "dp-weak").min_budget
        if mb is not None:
            ups.append(mb)
    fast = _solve_passes(chain, 0, _left(time_limit, t0), solver, 1, True, True, threads,
                         time.perf_counter())
    if fast.min_budget is not None:
        ups.append(fast.min_budget)
    found = min(ups, default=None)
    info = dict(info, certificate="moment relaxation" if "relaxation" in info else "budget below x_0")
    msg = f"no schedule fits in {budget}"
    mb = None
    if found is not None and low is not None and low >= found:
        mb = found
        msg += f"; the smallest feasible budget is {mb}"
    elif found is not None:
        lowb = max(budget + 1, low or 0)
        info["min_budget_found"], info["min_budget_bound"] = found, lowb
        msg += (f"; a schedule fits in {found}, not proven the smallest: the smallest "
                f"feasible budget is between {lowb} and {found}")
    return Solution(NAME, INFEASIBLE, None, None, None, budget, optimal_for=CLASS_ALL,
                    min_budget=mb, info=info, wall_time=time.perf_counter() - t0, message=msg)


def _solve_passes(chain: Chain, budget: int, time_limit, solver, passes, pairs, warm_start,
                  threads, t0, seed=None, lower=None) -> Solution:
    """The K-pass model (``passes=None``: the proven number).  ``seed``: the
    ``(schedule, makespan, source)`` to start from instead of solving the DPs again (the
    caller's best schedule so far); ``lower``: a proven lower bound on the
    optimum (the moment relaxation's), added as a cut on the objective."""
    rep = pairs
    g = chain.size_gcd()
    sc = chain.scaled_sizes(g)
    M = budget // g
    K = passes_sufficient(chain) if passes is None else passes
    exact_all = K >= passes_sufficient(chain)
    cls = CLASS_ALL if exact_all else (f"weak-runs<={K}" if pairs else f"runs<={K}")
    scale = max(1.0, chain.ideal_makespan())
    info = {"solver": solver, "passes": K, "pairs": pairs, "gcd": g, "allow_drop": False}
    if budget < chain.x_size[0]:
        return _infeasible(chain, budget, sc, g, K, rep, solver, time_limit, threads, info, cls, t0)
    model = build_model(sc, M, K, pairs=rep)
    start = warm = None
    if warm_start:
        # the caller's seed already is the best of the DPs' schedules (no second DP solve)
        sched, ms, src = seed if seed is not None else _incumbent(chain, budget, True)
        if _staged(K, pairs, exact_all):
            sub, sub_ms = _staged_incumbent(chain, budget, time_limit, solver, threads, info)
            if sub is not None and (ms is None or sub_ms < ms):
                sched, ms, src = sub, sub_ms, f"ilp passes={STAGED_PASSES} pairs=True"
        if sched is not None:
            start = encode(model, sched)
            warm = sched
            info["warm_start"] = src if start is not None else f"{src} (does not fit the passes)"
            info["incumbent"] = ms
    if lower is not None:
        # a proven lower bound on every schedule: a valid cut (it is no normal-form argument)
        model.prob += model.prob.objective >= lower - model.constant - 1e-9 * scale, "relaxation"
        info["relaxation_cut"] = lower
    info["variables"] = len(model.prob.variables())
    info["constraints"] = model.prob.numConstraints()
    left = None if time_limit is None else max(0.01, time_limit - (time.perf_counter() - t0))
    res = run_model(model, solver, left, start, threads, scale)
    info["solver_status"] = res.status_text
    if res.infeasible:
        return _infeasible(chain, budget, sc, g, K, rep, solver, time_limit, threads, info, cls, t0)
    if not res.has_solution and warm is None:
        bound = chain.ideal_makespan() if res.bound is None else max(res.bound, chain.ideal_makespan())
        return Solution(NAME, TIME_LIMIT, None, None, None, budget, bound=bound,
                        optimal_for=cls, info=info, wall_time=time.perf_counter() - t0,
                        message=f"time limit reached with no schedule found ({res.status_text})")
    if res.has_solution and (res.proven or warm is None or res.objective <= info["incumbent"]):
        schedule = decode(model)
    else:
        # Stopped (time limit) with nothing better than the warm start, or before loading it
        # (CBC may also reject a start that sets only the binaries): the warm start, a valid
        # schedule, is the incumbent.
        schedule = warm
        res.objective = info["incumbent"]
        info["incumbent_from"] = "warm start"
    try:
        sim = simulate(chain, schedule, budget)
    except RematError as e:
        raise IlpError(f"ilp: the decoded MILP solution is not a valid schedule ({e}); "
                       f"solver status {res.status_text}") from None
    if not math.isclose(sim.makespan, res.objective, rel_tol=1e-7, abs_tol=1e-7):
        raise IlpError(f"ilp: the MILP objective {res.objective} differs from the decoded "
                       f"schedule's makespan {sim.makespan}")
    # Every schedule runs each operation at least once: the ideal makespan is a bound even
    # when the solver stopped before proving one.
    bound = chain.ideal_makespan() if res.bound is None else max(res.bound, chain.ideal_makespan())
    if lower is not None:
        bound = max(bound, lower)
    bound = min(bound, sim.makespan)
    info["mip_gap"] = max(0.0, (sim.makespan - bound) / sim.makespan) if sim.makespan else 0.0
    status = OPTIMAL if res.proven else TIME_LIMIT
    if status == OPTIMAL:
        bound = sim.makespan if bound is None else bound
    msg = "proven optimal" if status == OPTIMAL else \
        f"time limit: not proven optimal (bound {bound}, makespan {sim.makespan})"
    if status == OPTIMAL and not exact_all:
        msg += (f" among schedules with at most {K} {'weakly ' if pairs else ''}increasing "
                f"forward runs per phase")
    return Solution(NAME, status, schedule, sim.makespan, sim.peak_memory, budget, bound=bound,
                    optimal_for=cls, info=info, wall_time=time.perf_counter() - t0, message=msg)


def _staged(K: int, pairs: bool, exact_all: bool) -> bool:
    """Whether the model is first seeded from two weakly increasing runs per phase: the
    proven model, and any pairs model with more passes than that (a class containing it)."""
    return exact_all or (pairs and K > STAGED_PASSES)


def _min_budget_seed(chain: Chain, model: Model, sched, g: int) -> dict | None:
    """The MIP start of the min-budget ``model`` for ``sched``: its operations, and its peak
    (in units of g) as the budget."""
    start = encode(model, sched) if sched is not None else None
    if start is not None:
        start["budget"] = -(-simulate(chain, sched).peak_memory // g)
    return start


def _infeasible(chain, budget, sc, g, K, rep, solver, time_limit, threads, info, cls,
                t0) -> Solution:
    """Infeasible budget: the smallest feasible budget, by the min-budget MILP.

    Seeds: the weak DP's schedule at its own smallest budget (else store-all), and, for the
    models seeded from two weakly increasing runs per phase, that class's smallest budget
    and schedule.  Every peak is a multiple of g and ``budget`` is proven infeasible, so a
    schedule found at the first multiple of g above ``budget`` proves the smallest budget
    even when the solver stops at its time limit; otherwise an unproven answer is reported
    as found (``info["min_budget_found"]``) with its lower bound, never as ``min_budget``."""
    sched = None
    if "dp-weak" in registry.names():
        try:
            low = registry.solve(chain, 0, "dp-weak").min_budget
            sched = registry.solve(chain, low, "dp-weak").schedule if low is not None else None
        except RematError:
            sched = None
    if sched is None:
        sched, _, _ = _incumbent(chain, 10 ** 18, False)
    if _staged(K, rep, K >= passes_sufficient(chain)):
        cap = STAGED_CAP if time_limit is None else min(STAGED_CAP, STAGED_SHARE * time_limit)
        sub = build_model(sc, None, STAGED_PASSES, name="remat_min_budget_staged", pairs=True)
        ts = time.perf_counter()
        r2 = run_model(sub, solver, cap, _min_budget_seed(chain, sub, sched, g), threads, 1.0)
        if r2.has_solution:
            two = decode(sub)
            try:
                peak = simulate(chain, two).peak_memory
            except RematError as e:
                raise IlpError(f"ilp: the decoded min-budget solution is not a valid schedule "
                               f"({e}); solver status {r2.status_text}") from None
            info["staged_min_budget"] = {"passes": STAGED_PASSES, "pairs": True,
                                         "proven": r2.proven, "budget": peak,
                                         "wall_time": round(time.perf_counter() - ts, 3)}
            if sched is None or peak < simulate(chain, sched).peak_memory:
                sched = two
    model = build_model(sc, None, K, name="remat_min_budget", pairs=rep)
    start = _min_budget_seed(chain, model, sched, g)
    left = None if time_limit is None else max(0.01, time_limit - (time.perf_counter() - t0))
    res = run_model(model, solver, left, start, threads, 1.0)
    above = (budget // g + 1) * g  # the smallest budget that might still be feasible
    # the smallest budget known to fit: the solver's, or its start's (CBC may drop a start)
    known = [start["budget"] * g] if start is not None else []
    if res.has_solution:
        known.append(int(round(model.budget_var.varValue)) * g)
    found = min(known, default=None)
    mb = found if found is not None and (res.proven or found == above) else None
    msg = f"no schedule fits in {budget}"
    if mb is not None:
        msg += f"; the smallest feasible budget is {mb}"
    elif found is not None:
        low = above
        if res.bound is not None and math.isfinite(res.bound):
            low = max(low, math.ceil(res.bound - model.constant - 1e-9) * g)
        info["min_budget_found"], info["min_budget_bound"] = found, low
        msg += (f"; a schedule fits in {found}, not proven the smallest (time limit): the "
                f"smallest feasible budget is between {low} and {found}")
    return Solution(NAME, INFEASIBLE, None, None, None, budget, optimal_for=cls, min_budget=mb,
                    info=info, wall_time=time.perf_counter() - t0, message=msg)
