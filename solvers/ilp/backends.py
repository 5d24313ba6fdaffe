"""The MIP back ends of the ``ilp`` solver: HiGHS in-process (highspy, through PuLP) and
CBC (PuLP's bundled binary), and the check of the installed PuLP.

:func:`run_model` solves anything with ``prob`` (a ``pulp.LpProblem``) and ``constant``
(the objective's constant, added when reading): the time-expanded model of
:mod:`solvers.ilp.model` or the moment relaxation of :mod:`solvers.ilp.relaxation`.

``proven`` is reported only when the solver's own model status says so (HiGHS
``kOptimal``/``kInfeasible``; CBC solution status ``Optimal``), never from PuLP's
``LpStatus`` string.
"""
from __future__ import annotations

import math
import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass

import highspy
import numpy as np
import pulp

from remat_theory.model.errors import SolverError

from solvers._highs import silence_highs_banner  # noqa: F401  (bench_ilp calls it here)

SOLVERS = ("highs", "cbc")

PULP_SUPPORTED = ((3, 3, 1), (4,))  # [lowest, first unsupported): as pyproject.toml pins it


#: Seconds per binary to build a model in PuLP and load it into the MIP solver (both pure
#: Python, neither interruptible): measured 2.3e-4 (the moment relaxation) to 3.1e-4 (the
#: fast mode) at 50-100 stages on one core of a 2-core machine; about 1.5 times that.
SECONDS_PER_BINARY = 4.5e-4


#: HiGHS's first round of root cuts was seen not to check the time limit (HiGHS 1.16, on a
#: loaded machine: 120 s past a 12 s limit on the 100-stage moment relaxation, 25,000
#: binaries; 4 s past a 6 s limit at 50 stages, 6,500 binaries).  The driver now interrupts
#: a run that passes its limit from HiGHS's MIP callback (``_WarmHighs._watch_clock``; at
#: 100 stages the callback came at most 2.2 s apart and the run stopped 1.2 s past a 12 s
#: limit), so this term only keeps room for the first LP and cut round that precede any
#: bound: seconds per squared binary (13 s at 25,000 binaries).
ROOT_SECONDS_PER_BINARY2 = 2e-8


def build_seconds(binaries: int) -> float:
    """An estimate of the seconds a model with ``binaries`` binaries needs before the time
    limit given to the MIP solver is in force: building it in PuLP and loading it into the
    solver (:data:`SECONDS_PER_BINARY`), and the solver's root cut round, which does not
    check its limit (:data:`ROOT_SECONDS_PER_BINARY2`).  Under a time limit a model whose
    estimate does not fit in the time left is not built."""
    return SECONDS_PER_BINARY * binaries + ROOT_SECONDS_PER_BINARY2 * binaries ** 2


class IlpError(SolverError):
    """The MILP solver failed or returned something that cannot be decoded."""


def _version_tuple(text: str) -> tuple:
    parts = []
    for piece in text.split(".")[:3]:
        digits = re.match(r"\d+", piece)
        parts.append(int(digits.group()) if digits else 0)
    return tuple(parts)


def check_pulp() -> None:
    """The solver is written against PuLP 3.3 (``add_variable``; CBC bundled as
    ``PULP_CBC_CMD``; ``solve()`` returning an int).  PuLP 4 changes all three, so an
    environment with another PuLP than the one pyproject.toml pins gets a clear error here
    instead of a failure deep inside a solve."""
    version = pulp.__version__
    lo, hi = PULP_SUPPORTED
    if not lo <= _version_tuple(version) < hi:
        raise SolverError(f"ilp: PuLP {version} is installed; this solver needs PuLP >= 3.3.1 "
                          f"and < 4 (pip install 'pulp>=3.3.1,<4')")


@dataclass
class RunResult:
    proven: bool  # the solver proved its answer (optimal, or infeasible)
    infeasible: bool
    has_solution: bool
    objective: float | None
    bound: float | None
    status_text: str
    #: which back end answered, and the failed attempts before it (``run_model`` retries)
    backend: str = ""
    retries: tuple = ()


class _WarmHighs(pulp.HiGHS):
    """PuLP's in-process HiGHS, plus a MIP start (PuLP's class does not pass one)."""

    def __init__(self, start: dict | None = None, **kw):
        super().__init__(**kw)
        self._start = start

    def actualSolve(self, lp):
        # PuLP's HiGHS asks for ``lp.variables()`` three times per solve (build, read, reset)
        # and the start once more; each call walks every row and sorts every variable by name
        # (a tenth of a small model's solve).  The model does not change during a solve, so
        # the list is made once and answered for the solve's duration.
        variables = lp.variables()
        lp.variables = lambda: variables
        try:
            return super().actualSolve(lp)
        finally:
            del lp.variables

    #: set by the callbacks when HiGHS reported an incumbent whose objective is not the
    #: objective at its own point (the run was then interrupted at once)
    misreported = False

    def callSolver(self, lp):
        h = lp.solverModel
        self.misreported = False
        self.overran = False
        if self._start:
            pairs = [(v.index, float(self._start[v.name])) for v in lp.variables()
                     if v.name in self._start]
            idx = np.array([i for i, _ in pairs], dtype=np.int32)
            val = np.array([x for _, x in pairs], dtype=np.float64)
            h.setSolution(len(pairs), idx, val)
            self._watch_incumbents(h)
        self._watch_clock(h)
        if self.threads is not None:
            # HiGHS keeps one thread scheduler per process; a different thread count needs
            # a fresh one (otherwise run() fails with an option error)
            highspy.Highs.resetGlobalScheduler(True)
        self.run_status = h.run()
        h.cbMipImprovingSolution.unsubscribe_by_data(self)
        h.cbMipInterrupt.unsubscribe_by_data(self)

    #: seconds past ``timeLimit`` after which the run is interrupted from the callback
    OVERRUN_GRACE = 1.0

    def _watch_clock(self, h):
        """HiGHS checks its time limit between the steps of its MIP search, not inside
        every one of them (its first round of root cuts on a deep relaxation was seen to
        run far past the limit); its MIP interrupt callback is called often within them,
        so the run is interrupted there once the limit is passed by :data:`OVERRUN_GRACE`
        seconds.  An interrupted run keeps its dual bound (a bound is valid at any point
        of the search) and is not proven."""
        limit = self.timeLimit
        misreport = bool(self._start)
        if limit is None and not misreport:
            return
        t_end = None if limit is None else time.perf_counter() + limit + self.OVERRUN_GRACE

        def interrupt(event):
            if misreport and self.misreported:
                event.data_in.user_interrupt = True
            elif t_end is not None and time.perf_counter() > t_end:
                self.overran = True
                event.data_in.user_interrupt = True

        h.cbMipInterrupt.subscribe(interrupt, self)

    def _watch_incumbents(self, h):
        """HiGHS 1.16 with presolve was seen to map a MIP start into its presolved model
        with part of the objective's offset lost: the start's incumbent is then announced
        below its own point's objective (a random 30-stage relaxation at its smallest
        budget: 588 announced, 596 at the point), and at the end of the run neither the
        objective nor the dual bound can be trusted.  Each improving incumbent's announced
        objective is compared with the objective at its own point here, and the run is
        interrupted at the first disagreement, so that the driver solves again without
        presolve with (nearly) all of its time rather than none (the interrupt itself is
        :meth:`_watch_clock`'s)."""
        lp = h.getLp()
        cost, offset = np.asarray(lp.col_cost_, dtype=float), float(lp.offset_)
        tol = 1e-9 * max(1.0, float(np.abs(cost).sum()))

        def improving(event):
            point = np.asarray(event.data_out.mip_solution, dtype=float)
            if len(point) == len(cost):
                at_point = float(cost @ point) + offset
                if abs(at_point - event.data_out.objective_function_value) > tol:
                    self.misreported = True

        h.cbMipImprovingSolution.subscribe(improving, self)


def _objective_at_point(prob) -> float | None:
    """The objective at the solver's point.  ``pulp.value`` answers None when a variable has
    no value, which is the case of PuLP's ``__dummy`` variable in an empty objective (a chain
    whose times are all 0): such a variable has coefficient 0 and counts as 0.  None only when
    a variable that matters has no value."""
    expr = prob.objective
    if expr is None:
        return 0.0
    total = float(expr.constant)
    for var, coef in expr.items():
        if var.varValue is None:
            if coef != 0:
                return None
            continue
        total += coef * var.varValue
    return total


_HIGHS_FAILED = (highspy.HighsModelStatus.kNotset, highspy.HighsModelStatus.kLoadError,
                 highspy.HighsModelStatus.kModelError, highspy.HighsModelStatus.kSolveError,
                 highspy.HighsModelStatus.kPresolveError,
                 highspy.HighsModelStatus.kPostsolveError)


#: HiGHS's ``mip_feasibility_tolerance`` in the driver's runs (HiGHS's own default: 1e-6)
FEASIBILITY_TOLERANCE = 1e-9


def _run_highs(model, time_limit, start, threads, scale, presolve: str = "on",
               feasibility_tolerance: float = FEASIBILITY_TOLERANCE) -> RunResult:
    silence_highs_banner()
    t0 = time.perf_counter()
    opts = dict(mip_rel_gap=0.0, mip_abs_gap=1e-9 * scale,
                mip_feasibility_tolerance=feasibility_tolerance, presolve=presolve)
    solver = _WarmHighs(start=start, msg=False, timeLimit=time_limit, threads=threads, **opts)
    model.prob.solve(solver)
    h = model.prob.solverModel
    st = h.getModelStatus()
    if solver.misreported and presolve == "on":
        # interrupted at once (_WarmHighs._watch_incumbents): nothing of this run is kept
        left = None if time_limit is None else \
            max(0.01, time_limit - (time.perf_counter() - t0))
        res = _run_highs(model, left, start, threads, scale, presolve="off",
                         feasibility_tolerance=feasibility_tolerance)
        res.retries = ("highs: an incumbent announced below its own objective; solved "
                       "again without presolve",) + res.retries
        return res
    if solver.run_status == highspy.HighsStatus.kError or st in _HIGHS_FAILED:
        raise IlpError(f"ilp: HiGHS failed ({h.modelStatusToString(st)})")
    info = h.getInfo()
    MS = highspy.HighsModelStatus
    has = info.primal_solution_status == 2  # kSolutionStatusFeasible
    if has and presolve == "on":
        # HiGHS 1.16, given a MIP start, was seen to report an "optimal" objective (and an
        # equal dual bound) that the returned point does not have: presolve's objective
        # offset lost.  The point is what the objective is read from; if the reported value
        # differs, nothing the run says is trusted, and it is solved again without presolve.
        at_point = _objective_at_point(model.prob)
        if at_point is None or abs(at_point - info.objective_function_value) > 1e-9 * scale:
            left = None if time_limit is None else \
                max(0.01, time_limit - (time.perf_counter() - t0))
            return _run_highs(model, left, start, threads, scale, presolve="off",
                              feasibility_tolerance=feasibility_tolerance)
    bound = info.mip_dual_bound
    bound = None if bound is None or not math.isfinite(bound) else bound
    obj = info.objective_function_value + model.constant if has else None
    if bound is not None:
        bound += model.constant
    text = h.modelStatusToString(st)
    if solver.overran and st == MS.kInterrupt:
        text = "Time limit reached (interrupted: HiGHS ran past its limit)"
    return RunResult(proven=st in (MS.kOptimal, MS.kInfeasible), infeasible=st == MS.kInfeasible,
                     has_solution=has, objective=obj, bound=bound, status_text=text)


_CBC_BOUND = re.compile(r"best possible\s+(-?[0-9.eE+]+)")
_CBC_BOUND2 = re.compile(r"Lower bound:\s+(-?[0-9.eE+]+)")


def _run_cbc(model, time_limit, start, threads, scale) -> RunResult:
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


def _run_cbc_once(model, time_limit, start, threads, scale) -> RunResult:
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
    at_point = _objective_at_point(model.prob) if has else None
    if has and at_point is None:
        raise IlpError("ilp: CBC reported a solution without values for its variables")
    obj = at_point + model.constant if has else None
    bound = None
    m = _CBC_BOUND.findall(text) or _CBC_BOUND2.findall(text)
    if m:
        bound = float(m[-1]) + model.constant
    if proven_opt:
        bound = obj
    return RunResult(proven=proven_opt or infeasible, infeasible=infeasible, has_solution=has,
                     objective=obj, bound=bound, status_text=pulp.LpSolution[sol_status])


#: What :func:`run_model` tries, in order, for each requested solver: a back end that
#: fails (HiGHS's ``Solve error``, CBC dying without a solution file) is not an answer, so
#: the next one is asked.  HiGHS 1.16's presolve reduces some infeasible models with a zero
#: objective (a chain whose times are all 0) to an empty model it calls optimal, then
#: postsolve finds a violated row and the run ends in ``Solve error``; without presolve the
#: same model is proven infeasible.  CBC is a different code base altogether.
ATTEMPTS = {"highs": (("highs", "on"), ("highs", "off"), ("cbc", None)),
            "cbc": (("cbc", None), ("highs", "on"), ("highs", "off"))}


def run_model(model, solver: str, time_limit: float | None, start: dict | None, threads: int,
              scale: float, feasibility_tolerance: float = FEASIBILITY_TOLERANCE) -> RunResult:
    """Solve ``model`` (anything with ``prob`` and ``constant``) with ``solver`` ("highs" or
    "cbc") in at most ``time_limit`` seconds, from the MIP start ``start`` (variable name ->
    value) if given.  ``scale``: the objective's magnitude, for the absolute gap (1e-9 of
    it, the registry's float tolerance).  ``feasibility_tolerance``: HiGHS's
    ``mip_feasibility_tolerance`` (CBC keeps its own).

    A back end that fails is retried as :data:`ATTEMPTS` says (within the same time limit);
    :class:`IlpError` is raised only when every attempt fails.  ``RunResult.backend`` names
    the one that answered and ``RunResult.retries`` the failures before it."""
    t0 = time.perf_counter()
    failures: list[str] = []
    for backend, presolve in ATTEMPTS[solver]:
        left = None if time_limit is None else \
            max(0.01, time_limit - (time.perf_counter() - t0))
        try:
            if backend == "highs":
                res = _run_highs(model, left, start, threads, scale, presolve=presolve,
                                 feasibility_tolerance=feasibility_tolerance)
            else:
                res = _run_cbc(model, left, start, threads, scale)
        except (IlpError, pulp.PulpSolverError) as e:
            failures.append(f"{backend}{'' if presolve in (None, 'on') else ' without presolve'}"
                            f": {e}")
            continue
        res.backend = backend if presolve in (None, "on") else f"{backend} (presolve off)"
        res.retries = tuple(failures) + res.retries
        return res
    raise IlpError(f"ilp: every MIP back end failed ({'; '.join(failures)})")
