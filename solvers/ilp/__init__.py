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
relaxation of :mod:`.relaxation` (O(L^2) binaries, a lower bound on every schedule,
proofs/ilp.md section 9) is solved from the weak DP's schedule; when its bound reaches the
makespan of that schedule, or of the fast mode's optimum, the schedule is optimal over all
schedules and the proven model is never built.  That is what reaches 20-30 stages.

The time-expanded model's variables and rows are described in :mod:`solvers.ilp.model`.

Numerics: sizes are divided by their gcd; no cost noise, no loosened tolerances: the
relative MIP gap is 0 and the absolute gap is 1e-9 times the makespan scale, the registry's
own float tolerance.  ``optimal`` is reported only when the solver's own model status says
proven optimal (HiGHS ``kOptimal``; CBC solution status ``Optimal``), never from PuLP's
``LpStatus`` string.

The package, one way (each module imports only those above it):

- :mod:`.backends`: the HiGHS / CBC runners, the PuLP version check, the HiGHS guard;
- :mod:`.options`: :class:`IlpOptions`, every option validated;
- :mod:`.model`: the time-expanded model (build, encode, decode, its size bounds);
- :mod:`.relaxation`: the moment relaxation (lower bound, min-budget bound);
- :mod:`.seeds`: the starting schedules (DPs, store-all) and their time estimates;
- :mod:`.min_budget`: the smallest feasible budget of an infeasible one;
- :mod:`.passes`: solving a K-pass model;
- :mod:`.certify`: the certified default mode;
- :mod:`.solver`: the registered entry point :func:`solve_ilp`.
"""
from solvers.ilp.backends import IlpError, RunResult, check_pulp, run_model
from solvers.ilp.model import (Model, binaries_bound, build_model, decode, encode,
                               passes_sufficient, phase_op_bound, phase_pass_bound)
from solvers.ilp.options import DEFAULT_MAX_BINARIES, DEFAULT_PASSES, IlpOptions
from solvers.ilp.relaxation import build_relaxation, lower_bound, min_budget_bound
from solvers.ilp.solver import NAME, solve_ilp

__all__ = ["DEFAULT_MAX_BINARIES", "DEFAULT_PASSES", "IlpError", "IlpOptions", "Model", "NAME",
           "RunResult", "binaries_bound", "build_model", "build_relaxation", "check_pulp",
           "decode", "encode", "lower_bound", "min_budget_bound", "passes_sufficient",
           "phase_op_bound", "phase_pass_bound", "run_model", "solve_ilp"]
