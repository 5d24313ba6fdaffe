"""The *moment relaxation*: a small MILP whose optimum is a lower bound on the makespan of
every valid schedule (no normal form, no persistence assumption).

``ilp`` uses it to prove a schedule optimal over all schedules without the proven
time-expanded model, whose O(L^4) binaries stop it near 7 stages: when the bound reaches
the makespan of a schedule in hand, that schedule is optimal.  The proof that every valid
schedule is a point of this MILP, constraint by constraint, is proofs/ilp.md section 9.

Only the states at the *moments* (just before the loss and before each B_q) are modelled,
plus, per phase, which kinds of value each stage creates:

* ``h[j, q]``: the tape t_{j+1} is held at moment q; ``g[i, q]``: the plain x_i is held;
* ``c[i, r]``: phase r runs an Fn_i or Fck_i (it creates a plain x_{i+1});
  ``z[i, r]``: phase r runs a Fall_i; ``c[r, r]`` is ``dead[r]``: the plain x_{r+1} made
  in phase r < L, dead at once, whose bytes stay held to the end;
* ``a[i, r]``: some value of stage i+1 created in phase r is freed in phase r (by Fn_{i+1},
  or by a Fall_{i+1} reading an unsaved x_{i+1}).

Objective: sum of f_i c[i, r] + F_i z[i, r] (f_i = fwd_time[i], the time of Fn_i and Fck_i;
F_i = fall_time[i], that of Fall_i) plus the backward times: each variable at 1 stands for
at least one forward operation of its kind, so the objective never exceeds the makespan of
the schedule it comes from.  Memory is checked at the moments only (the backward peaks);
what happens inside a phase is only constrained through which values it creates and frees.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import pulp

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import B, FALL, FCK, FN, LOSS, Schedule
from remat_theory.model.simulator import State, transition

from solvers._deadline import Deadline, DeadlineExpired
from solvers.ilp import backends


@dataclass
class Relaxation:
    """The built relaxation; ``prob``, ``constant`` and ``budget_var`` as in
    :class:`solvers.ilp.model.Model` (so the same solver drivers run it)."""

    chain: Chain  # sizes already divided by their gcd
    prob: pulp.LpProblem
    var: dict = field(default_factory=dict)  # name -> variable
    constant: float = 0.0
    budget_var: pulp.LpVariable | None = None
    rows: list = field(default_factory=list)  # (label, constraint), as added


def _names(L: int):
    """The name of every variable of the relaxation for L stages (family_index_phase)."""
    for q in range(L, -1, -1):
        for j in range(min(q, L - 1) + 1):
            yield f"h_{j}_{q}"
        for i in range(1, q + 1):
            yield f"g_{i}_{q}"
    for r in range(L, -1, -1):
        top = min(r, L - 1)
        for i in range(top + 1):
            yield f"z_{i}_{r}"
            yield f"c_{i}_{r}"  # c_r_r is dead[r] for r < L
        for i in range(top):
            yield f"a_{i}_{r}"


def binaries(L: int) -> int:
    """The number of binaries of the relaxation for L stages, ``len(list(_names(L)))`` in
    closed form (about 2.5 L^2): h and g at each moment, c, z and a per phase."""
    h_and_g = L * (L + 1) + L  # h: L(L+1)/2 + L, g: L(L+1)/2
    c_and_z = L * (L + 1) + 2 * L
    a = L * (L - 1) // 2 + L - 1
    return h_and_g + c_and_z + a


class _Vars:
    """The relaxation's variables by family: ``h(j, q)``, ``g(i, q)``, ``c(i, r)``,
    ``z(i, r)``, and ``a(i, r)`` (None where the family has no such variable)."""

    def __init__(self, var: dict):
        self.var = var

    def h(self, j, q):
        return self.var[f"h_{j}_{q}"]

    def g(self, i, q):
        return self.var[f"g_{i}_{q}"]

    def c(self, i, r):
        return self.var[f"c_{i}_{r}"]

    def z(self, i, r):
        return self.var[f"z_{i}_{r}"]

    def a(self, i, r):
        return self.var.get(f"a_{i}_{r}")


def _moment_rows(chain: Chain, v: _Vars, M, q: int) -> list:
    """The rows at moment q (just before B_q, or the loss for q = L): what it reads, and its
    peak (rows 1-2 of proofs/ilp.md section 9)."""
    L, x, tp, bo = chain.length, chain.x_size, chain.tape_held, chain.bwd_overhead
    h, g, c = v.h, v.g, v.c
    rows = []
    if q < L:
        rows.append((h(q, q) == 1, f"tape_at_b_{q}"))  # B_q reads t_{q+1}
    if q >= 1 and chain.saved(q):
        rows.append((g(q, q) + h(q - 1, q) >= 1, f"x_at_b_{q}"))  # x_q, plain or in t_q
    elif q == L:  # the loss reads an unsaved x_L (B_q does not read an unsaved x_q)
        rows.append((g(q, q) >= 1, f"x_at_b_{q}"))
    held = (x[0] + (x[q + 1] if q < L else 0)
            + pulp.lpSum(tp[j] * h(j, q) for j in range(min(q, L - 1) + 1))
            + pulp.lpSum(x[i] * g(i, q) for i in range(1, q + 1))
            + pulp.lpSum(x[r + 1] * c(r, r) for r in range(q, L)))  # dead x_{r+1}
    rows.append((held + x[q] + bo[q] - M <= 0, f"peak_b_{q}"))
    return rows


def _phase_rows(chain: Chain, v: _Vars, r: int) -> list:
    """The rows of phase r: how the values held at moment r come from those held at r+1 and
    those phase r makes and frees (rows 3-7 of proofs/ilp.md section 9; section 10 for
    unsaved outputs: a Fall also makes a plain unsaved output and frees a plain unsaved
    input, and an unsaved x_i is never read out of t_i, so t_i is freed by B_{i-1} only)."""
    L = chain.length
    h, g, c, z, a = v.h, v.g, v.c, v.z, v.a
    sv = chain.saved
    rows = []
    top = min(r, L - 1)
    for j in range(top + 1):  # a tape held at moment r was held at r+1 or made in phase r
        rows.append((h(j, r) - (h(j, r + 1) if r < L else 0) - z(j, r) <= 0, f"keep_t_{j}_{r}"))
    for i in range(1, r + 1):  # the same for a plain value (made by a Fall too if unsaved)
        made = c(i - 1, r) + (0 if sv(i) else z(i - 1, r))
        rows.append((g(i, r) - (g(i, r + 1) if r < L else 0) - made <= 0, f"keep_x_{i}_{r}"))
    if r == L:
        for i in range(L):  # every stage runs before the loss
            rows.append((c(i, L) + z(i, L) >= 1, f"first_{i}"))
    else:
        for j in range(r):  # a value held at r+1 and gone at r was freed by an Fn (or Fall)
            fn = c(j + 1, r) if sv(j + 1) else 0
            rows.append((h(j, r + 1) - h(j, r) - fn <= 0, f"free_t_{j}_{r}"))
        for i in range(1, r + 1):
            freer = c(i, r) + (0 if sv(i) else z(i, r))
            rows.append((g(i, r + 1) - g(i, r) - freer <= 0, f"free_x_{i}_{r}"))
        for j in range(top + 1):  # a tape no Fn frees, held when the phase starts: no Fall_j
            if not sv(j + 1):
                rows.append((z(j, r) + h(j, r + 1) <= 1, f"no_fall_{j}_{r}"))
        for i in range(1, top + 1):  # x_i available: held when the phase starts, or made in it
            src = g(i, r + 1) + (h(i - 1, r + 1) if sv(i) else 0) + c(i - 1, r) + z(i - 1, r)
            rows.append((c(i, r) - src <= 0, f"in_c_{i}_{r}"))
            rows.append((z(i, r) - src <= 0, f"in_z_{i}_{r}"))
    # a value made in phase r is held at moment r or freed in the phase (by an Fn, or a Fall
    # of an unsaved input, which makes a value one stage up: Fn-chains end at held values)
    for i in range(top + 1):
        if i == r:
            continue
        ai = a(i, r)
        extra = ai if ai is not None else 0
        if i + 1 <= r:
            rows.append((c(i, r) - g(i + 1, r) - extra <= 0, f"end_c_{i}_{r}"))
        # its tape: freed in the phase only by an Fn_{i+1} reading it, never when x_{i+1}
        # is unsaved (a[i, r] then stands for the plain x_{i+1} only)
        rows.append((z(i, r) - h(i, r) - (extra if sv(i + 1) else 0) <= 0, f"end_z_{i}_{r}"))
        if not sv(i + 1):  # the plain unsaved x_{i+1} beside the Fall's tape (i < r here)
            before = g(i + 1, r + 1) if r < L else 0  # kept: held when the phase started
            rows.append((z(i, r) - g(i + 1, r) - extra - before <= 0, f"end_zx_{i}_{r}"))
    for i in range(top):
        freer = c(i + 1, r) + (0 if sv(i + 1) else z(i + 1, r))
        rows.append((a(i, r) - freer <= 0, f"fn_{i}_{r}"))
        rhs = []
        if i + 2 <= min(r, L):
            rhs.append(g(i + 2, r))
        if not sv(i + 1):  # a Fall_{i+1} freed it: its t_{i+2} is held at r (or freed: a)
            rhs.append(h(i + 1, r))
        if a(i + 1, r) is not None:
            rhs.append(a(i + 1, r))
        if r < L and i + 1 == r:
            rhs.append(c(r, r))
        rows.append((a(i, r) - pulp.lpSum(rhs) <= 0, f"chain_{i}_{r}"))
    return rows


def build_relaxation(chain: Chain, budget: int | None, name: str = "remat_moments",
                     deadline: Deadline | None = None) -> Relaxation:
    """The moment relaxation of ``chain`` (sizes in their final units) at ``budget``;
    ``budget=None`` builds the min-budget variant (an integer budget variable, minimized),
    whose optimum is a lower bound on the smallest feasible budget.  ``deadline`` is
    checked before the build (against :func:`.backends.build_seconds`) and once per phase
    (:class:`~solvers._deadline.DeadlineExpired` when it passes)."""
    deadline = deadline or Deadline(None)
    what = f"building the moment relaxation ({chain.length} stages)"
    deadline.require(backends.build_seconds(binaries(chain.length)), what)
    L = chain.length
    prob = pulp.LpProblem(name, pulp.LpMinimize)
    var = {nm: prob.add_variable(nm, cat=pulp.LpBinary) for nm in _names(L)}
    v = _Vars(var)
    Mv = None
    if budget is None:
        Mv = prob.add_variable("budget", lowBound=chain.x_size[0], cat=pulp.LpInteger)
    M = Mv if budget is None else budget
    rows = []
    for q in range(L, -1, -1):
        deadline.check(what)
        rows += _moment_rows(chain, v, M, q)
    for r in range(L, -1, -1):
        deadline.check(what)
        rows += _phase_rows(chain, v, r)
    ft, fa = chain.fwd_time, chain.fall_time
    cost = pulp.lpSum((ft if k == "c" else fa)[i] * var[f"{k}_{i}_{r}"]
                      for r in range(L, -1, -1) for i in range(min(r, L - 1) + 1)
                      for k in ("c", "z"))
    prob += (Mv if budget is None else cost)
    for row, label in rows:
        prob += row, label
    return Relaxation(chain, prob, var, math.fsum(chain.bwd_time) if budget is not None else 0.0,
                      Mv, [(label, row) for row, label in rows])


def relaxation_point(chain: Chain, schedule: Schedule) -> dict:
    """The relaxation's variables for a valid ``schedule`` (the map of proofs/ilp.md
    section 9): what the tests check satisfies every row, with an objective no larger than
    the makespan.  Raises :class:`RematError` if the schedule is not valid."""
    L = chain.length
    val = {nm: 0 for nm in _names(L)}
    state, mem = State.initial(chain), chain.x_size[0]
    r = L
    made_x = made_t = 0  # bitmasks: values created in the current phase and still held
    for op in schedule:
        if op.kind in (LOSS, B):
            q = L if op.kind == LOSS else op.index
            for j in range(min(q, L - 1) + 1):
                val[f"h_{j}_{q}"] = state.tapes >> (j + 1) & 1
            for i in range(1, q + 1):
                val[f"g_{i}_{q}"] = state.plain >> i & 1
            r = q - 1
            made_x = made_t = 0
        elif op.kind in (FN, FCK, FALL):
            i = op.index
            val[f"{'z' if op.kind == FALL else 'c'}_{i}_{r}"] = 1
        tr = transition(chain, state, mem, op)
        if isinstance(tr, str):
            raise RematError(f"relaxation_point: the schedule is not valid at {op}: {tr}")
        if op.kind in (FN, FCK, FALL):
            # a value of stage i made in this phase and freed by this operation (an Fn, or
            # a Fall reading an unsaved x_i): a[i-1, r]
            freed_x = state.plain & ~tr.state.plain
            freed_t = state.tapes & ~tr.state.tapes
            if (freed_x & made_x) or (freed_t & made_t):
                val[f"a_{i - 1}_{r}"] = 1
            made_x = (made_x & ~freed_x) | (tr.state.plain & ~state.plain)
            made_t = (made_t & ~freed_t) | (tr.state.tapes & ~state.tapes)
        state, mem = tr.state, tr.memory_after
    return val


def objective_of(chain: Chain, point: dict) -> float:
    """The relaxation's objective at ``point`` (backward times included)."""
    L = chain.length
    return math.fsum(chain.fwd_time[i] * point[f"c_{i}_{r}"]
                     + chain.fall_time[i] * point[f"z_{i}_{r}"]
                     for r in range(L, -1, -1) for i in range(min(r, L - 1) + 1)) \
        + math.fsum(chain.bwd_time)


def violated_rows(model: Relaxation, point: dict, tol: float = 1e-9) -> list:
    """Names of the rows of ``model`` that ``point`` violates (a budget variable, if any,
    must be in ``point`` as ``"budget"``)."""
    values = dict(point)
    bad = []
    for label, row in model.rows:
        lhs = math.fsum(coef * values[v.name] for v, coef in row.items()) + row.constant
        sense = row.sense
        if (sense == pulp.LpConstraintLE and lhs > tol) or \
                (sense == pulp.LpConstraintGE and lhs < -tol) or \
                (sense == pulp.LpConstraintEQ and abs(lhs) > tol):
            bad.append(label)
    return bad


@dataclass
class Bound:
    """What a solve of the relaxation proved.

    ``value``: a proven lower bound on every valid schedule's makespan (the relaxation's
    optimum, or its dual bound when the time limit stopped it; None if nothing was proven);
    ``infeasible``: proven that no schedule fits the budget."""

    value: float | None
    infeasible: bool
    proven_optimal: bool  # the relaxation itself was solved to optimality
    status_text: str
    wall_time: float

    def as_info(self) -> dict:
        return {"bound": self.value, "infeasible": self.infeasible,
                "solved": self.proven_optimal, "status": self.status_text,
                "wall_time": round(self.wall_time, 3)}


def lower_bound(chain: Chain, budget: int, *, schedule: Schedule | None = None,
                time_limit: float | None = None, mip_solver: str = "highs",
                threads: int = 1, cuts: tuple = ()) -> Bound:
    """Solve the moment relaxation of ``chain`` at ``budget``.

    ``cuts``: families of extra rows of :mod:`solvers.ilp.cuts` to add (none by default).

    ``schedule`` (valid at ``budget``): its point (:func:`relaxation_point`) is the MIP
    start, so the search starts with an incumbent worth at most its makespan; when the
    relaxation's optimum is that makespan, the solver only has to close the bound, which is
    what a proof of the schedule's optimality needs (often several times faster).

    ``time_limit`` bounds building and solving together; when it passes during the build,
    :class:`~solvers._deadline.DeadlineExpired` is raised (nothing was proven)."""
    deadline = Deadline(time_limit)
    t0 = deadline.start
    g = chain.size_gcd()
    sc = chain.scaled_sizes(g)
    scale = max(1.0, chain.ideal_makespan())
    if budget < chain.x_size[0]:
        return Bound(None, True, True, "budget below x_0", time.perf_counter() - t0)
    model = build_relaxation(sc, budget // g, deadline=deadline)
    start = relaxation_point(chain, schedule) if schedule is not None else None
    if cuts:
        from solvers.ilp import cuts as extra
        extra.add_cuts(model, budget // g, cuts)
        start = extra.cut_point(chain, schedule, start) if start is not None else None
    deadline.check("starting the moment relaxation's solve")
    res = backends.run_model(model, mip_solver, deadline.remaining(0.01), start, threads, scale)
    wall = time.perf_counter() - t0
    if res.infeasible:
        return Bound(None, True, True, res.status_text, wall)
    if res.proven:
        # the dual bound, not the incumbent: they differ by at most the MIP gap tolerance
        value = res.objective if res.bound is None else min(res.objective, res.bound)
        return Bound(value, False, True, res.status_text, wall)
    return Bound(res.bound, False, False, res.status_text, wall)


def granularity(chain: Chain) -> float:
    """The gcd of every time when all are integers (a faster makespan is then at least this
    much faster), else 0."""
    times = list(chain.fwd_time) + list(chain.fall_time) + list(chain.bwd_time)
    if all(float(t).is_integer() for t in times):
        g = 0
        for t in times:
            g = math.gcd(g, int(t))
        return float(g)
    return 0.0


#: HiGHS's own ``mip_feasibility_tolerance``, the default of :func:`capped_bound`
HIGHS_DEFAULT_TOLERANCE = 1e-6


def capped_bound(chain: Chain, budget: int, makespan: float, *,
                 time_limit: float | None = None, mip_solver: str = "highs",
                 threads: int = 1,
                 feasibility_tolerance: float = HIGHS_DEFAULT_TOLERANCE) -> Bound:
    """The relaxation asked whether any of its points is faster than ``makespan`` (that of
    a valid schedule), its objective a row ``objective <= makespan - delta/2`` (``delta``:
    the gcd of the integer times, :func:`granularity`, which must
    be positive) and still minimized under it.  Infeasible: no schedule is faster than
    ``makespan``, and ``value`` is ``makespan``.  The same question as
    :func:`lower_bound` from a schedule of that makespan, asked so that the solver can use
    the objective as a constraint (its propagation, its cuts); docs/ilp.md ("Round five")
    says what it gains.  Stopped by the time limit, ``value`` is ``min(dual bound,
    makespan)``: a point is either above the cap (so at least ``makespan``, see below) or
    worth at least the dual bound.  A point found is a relaxation point below
    ``makespan``, never a schedule (``status_text`` says so; ``value`` as when stopped):
    this relaxation then cannot prove ``makespan``.

    ``feasibility_tolerance``: HiGHS's ``mip_feasibility_tolerance`` for this run (its own
    default, 1e-6, where the driver's minimization uses 1e-9: at 1e-9 the capped model on
    net 80 stalls where it passes at 1e-6).  Why an infeasibility answer stays a proof
    under the looser tolerance:

    * every variable is binary and every objective coefficient and the constant are times,
      multiples of ``delta``: at each 0/1 point the objective is a multiple of ``delta``,
      so a point is either at most ``makespan - delta`` (slack at least ``delta/2`` on the
      cap row) or at least ``makespan`` (the cap violated by at least ``delta/2``); the
      cap's level halfway leaves no 0/1 point within any tolerance below ``delta/2`` of
      the row, and HiGHS's rounding of an integral row's side (floor(side + tolerance))
      makes it ``makespan - delta`` exactly, the same set of 0/1 points;
    * a looser tolerance only admits more points: HiGHS's LP relaxations take it as their
      primal feasibility tolerance, its propagation deduces infeasibility only from a
      violation larger than it, and it rounds integer bounds outward by it.  Each step
      that ends in "infeasible" is more conservative at 1e-6 than at 1e-9; what a looser
      tolerance can do is accept a point that is not one (a near-integral or slightly
      violating point), and that answer is "a point found", which proves nothing;
    * the dual bound is a bound over the (larger) set of tolerated points, so at most the
      bound over the 0/1 points.

    What remains is floating-point arithmetic, as in every run of the driver; the driver's
    guards stay (:func:`solvers.ilp.backends.run_model`: the objective read at the
    returned point, a run whose reported objective differs solved again without
    presolve).  There is no MIP start here (the schedule's point violates the cap), so the
    incumbent watch of :class:`~solvers.ilp.backends._WarmHighs` has nothing to watch: any
    incumbent is a point below the cap."""
    delta = granularity(chain)
    if delta <= 0:
        raise RematError("capped_bound: the times are not all integers (no granularity "
                         "to cap the objective below the makespan)")
    if not 1e-10 <= feasibility_tolerance < 1:
        raise RematError(f"capped_bound: feasibility_tolerance = {feasibility_tolerance!r} "
                         f"must be in [1e-10, 1)")
    deadline = Deadline(time_limit)
    t0 = deadline.start
    g = chain.size_gcd()
    if budget < chain.x_size[0]:
        return Bound(None, True, True, "budget below x_0", time.perf_counter() - t0)
    model = build_relaxation(chain.scaled_sizes(g), budget // g, deadline=deadline)
    level = makespan - delta / 2 - model.constant
    model.prob += (model.prob.objective <= level, "objective_cap")
    deadline.check("starting the capped moment relaxation's solve")
    res = backends.run_model(model, mip_solver, deadline.remaining(0.01), None, threads,
                             max(1.0, chain.ideal_makespan()),
                             feasibility_tolerance=feasibility_tolerance)
    wall = time.perf_counter() - t0
    if res.infeasible:
        return Bound(float(makespan), False, True,
                     f"capped: no point of the relaxation at or below {makespan - delta:g}",
                     wall)
    bound = None if res.bound is None else min(res.bound, float(makespan))
    if res.has_solution:
        return Bound(bound, False, False, f"capped: a relaxation point at {res.objective:g}, "
                     f"below {makespan:g}: this relaxation cannot prove it", wall)
    return Bound(bound, False, False, f"capped: {res.status_text}", wall)


def min_budget_bound(chain: Chain, *, time_limit: float | None = None,
                     mip_solver: str = "highs", threads: int = 1) -> int | None:
    """A proven lower bound on the smallest feasible budget (bytes) from the min-budget
    relaxation, or None if the solver proved nothing in time (``time_limit`` bounds building
    and solving; None also when it passes during the build)."""
    deadline = Deadline(time_limit)
    g = chain.size_gcd()
    try:
        model = build_relaxation(chain.scaled_sizes(g), None, name="remat_moments_min_budget",
                                 deadline=deadline)
        deadline.check("starting the min-budget relaxation's solve")
    except DeadlineExpired:
        return None
    res = backends.run_model(model, mip_solver, deadline.remaining(0.01), None, threads, 1.0)
    if res.proven and res.has_solution:
        return int(round(model.budget_var.varValue)) * g
    if res.bound is not None and math.isfinite(res.bound):
        return math.ceil(res.bound - 1e-9) * g
    return None
