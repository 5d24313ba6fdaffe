"""The registered entry point of the ``ilp`` solver: options, model-size guards, and the
choice between the certified mode and a K-pass model alone."""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.errors import AT_LEAST, EQ, Note, Remedy, SolverLimitError
from remat_theory.model.solution import CLASS_ALL, OPTIMAL, Solution

from solvers._deadline import Deadline
from solvers.ilp import backends, certify, relaxation, seeds
from solvers.ilp.model import binaries_bound
from solvers.ilp.options import DEFAULT_MAX_BINARIES, DEFAULT_PASSES, IlpOptions
from solvers.ilp.passes import solve_passes
from solvers.registry import Option, register

NAME = "ilp"


def _duration(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it a plain number (an estimate's order)."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:.0f} s" if seconds >= 1 else "under a second"


def _refuse_certified(chain: Chain, opts: IlpOptions, proven_size: int) -> None:
    """The certified mode needs at least the moment relaxation (about 2.5 L^2 binaries);
    above ``max_binaries`` it is refused up front, with the sizes and the way out, rather
    than spend minutes building a model that cannot be solved."""
    L = chain.length
    n = relaxation.binaries(L)
    if n <= opts.helper_cap:
        return
    store_all = chain.store_all_memory()
    dp = seeds.dp_seconds(chain, store_all, "dp")
    weak = seeds.dp_seconds(chain, store_all, "dp-weak")
    raise SolverLimitError(
        f"ilp: {L} stages is too large for this solver: the moment relaxation that certifies "
        f"its answers has {n:,} binaries and the proven model up to {proven_size:,}, above "
        f"max_binaries = {opts.helper_cap:,}", solver="ilp", estimate_s=None,
        remedies=(Remedy(solver="dp", note=f"optimal among persistent schedules, roughly "
                                           f"{_duration(dp)} here"),
                  Remedy(solver="dp-weak", note=f"weakly persistent, roughly "
                                                f"{_duration(weak)}"),
                  Remedy(options=(("max_binaries", AT_LEAST, n),))))


def _refuse_long(chain: Chain, opts: IlpOptions) -> None:
    """More stages than ``max_binaries``: the model has at least one operation binary per
    phase (a recording forward of stage p precedes B_p), so it is refused before its size
    is counted (an O(L) to O(L^2) count: seconds to hours at a million stages)."""
    L = chain.length
    raise SolverLimitError(
        f"ilp: {L:,} stages is too large for this solver: its model has more than {L:,} "
        f"operation binaries (one per phase at least; about L^2 in the fast mode, L^4 in the "
        f"proven one), above max_binaries = {opts.max_binaries:,}", solver="ilp",
        remedies=(Remedy(solver="dp-weak", note="weakly persistent, on chains of up to a few "
                                                "hundred stages"),
                  Remedy(solver="chen-sqrt", note="a heuristic that scales to any length"),
                  Remedy(options=(("max_binaries", AT_LEAST, L * L),))))


def run(chain: Chain, budget: int, opts: IlpOptions) -> Solution:
    """:func:`solve_ilp` with validated options; the time limit starts here."""
    deadline = Deadline(opts.time_limit)
    if chain.length > opts.max_binaries:  # refused at once: every phase has a binary at least
        _refuse_long(chain, opts)
    size = binaries_bound(chain, opts.passes, opts.pairs)
    too_big = None
    if size > opts.max_binaries:
        mode = "the proven model (passes=None)" if opts.proven else f"passes={opts.passes}"
        too_big = (f"ilp: {mode} for {chain.length} stages has up to {size:,} operation "
                   f"binaries, above max_binaries = {opts.max_binaries:,}")
        if not (opts.certify and opts.proven):
            raise SolverLimitError(too_big, solver="ilp", remedies=(
                Remedy(options=(("passes", EQ, 1), ("pairs", EQ, True)),
                       note=f"the fast mode: optimal among schedules with one weakly increasing "
                            f"forward run per phase, {binaries_bound(chain, 1, True):,} binaries"),
                Remedy(options=(("max_binaries", AT_LEAST, size),))))
        _refuse_certified(chain, opts, size)
    if opts.certify and opts.proven:
        return certify.certified(chain, budget, opts, deadline, too_big)
    sol = solve_passes(chain, budget, opts.passes, opts.pairs, opts.mip_solver, opts.warm_start,
                       opts.threads, deadline)
    if opts.certify and sol.status == OPTIMAL and sol.optimal_for != CLASS_ALL:
        if relaxation.binaries(chain.length) <= opts.helper_cap:
            sol = certify.certify_answer(chain, budget, sol, opts, deadline)
    return sol


PROVEN_QUICK_STAGES = 5  # the proven model: seconds up to here, minutes to hours above


def _long_solve_note(chain: Chain, options) -> Note | None:
    """A note before a solve that may run very long: the default mode on more than
    :data:`PROVEN_QUICK_STAGES` stages with no time limit, which falls back to the proven
    model (O(L^4) binaries, proofs/ilp.md section 8) whenever the moment relaxation leaves a
    gap (section 9)."""
    if options.get("passes") is not None or options.get("time_limit") is not None:
        return None
    if chain.length <= PROVEN_QUICK_STAGES:
        return None
    return Note(f"ilp first tries to prove the weak DP's or the fast mode's schedule optimal "
                f"with the moment relaxation (seconds on random chains of 20-30 stages); where "
                f"that leaves a gap it solves the proven model, which on {chain.length} stages "
                f"can take minutes to hours (about {PROVEN_QUICK_STAGES} stages take seconds), "
                f"or, from 20 stages, answers 'feasible' with a bound",
                remedies=(Remedy(options=(("time_limit", EQ, None),),
                                 note="returns the best schedule and bound found by then"),
                          Remedy(solver="ilp-fast", note="the fast mode, passes=1 and "
                                 "pairs=True: optimal among schedules with one weakly "
                                 "increasing run per phase")))


@register(NAME, optimal_for=CLASS_ALL, exact=True,
          description="Exact over all schedules: a lower-bound MILP (the moment relaxation) "
                      "certifies the weak DP's or the fast mode's schedule, else exhaustive "
                      "search (short chains) or the time-expanded MILP proven lossless "
                      "decides (PuLP; HiGHS or CBC).",
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
          note=lambda chain, budget, options: _long_solve_note(chain, options),
          # the cuts of the relaxation refuse unsaved outputs themselves (solvers/ilp/cuts.py)
          supports=("fall_time", "fall_overhead", "output_saved"),
          options={"time_limit": Option("seconds", "for the whole run; past it, the best "
                                        "schedule and bound (time_limit)", none=True),
                   "mip_solver": Option("choice", "the MILP backend (in-process HiGHS, or "
                                        "CBC)", choices=backends.SOLVERS),
                   "passes": Option("int", "the model's class: at most this many increasing "
                                    "runs per phase (None: all schedules)", minimum=1,
                                    none=True),
                   "pairs": Option("bool", "weakly increasing runs (passes=1, pairs=true: "
                                   "the fast mode)"),
                   "warm_start": Option("bool", "seed the MIP with the DP's schedule"),
                   "threads": Option("int", "MIP solver threads", minimum=1),
                   "max_binaries": Option("int", "refuse a model with more operation "
                                          "binaries than this", minimum=1),
                   "certify": Option("bool", "prove optimality over all schedules with the "
                                     "moment relaxation (default: on when passes is None)",
                                     none=True)})
def solve_ilp(chain: Chain, budget: int, *, time_limit: float | None = None,
              mip_solver: str = "highs", passes: int | None = DEFAULT_PASSES,
              pairs: bool = False, warm_start: bool = True, threads: int = 1,
              max_binaries: int = DEFAULT_MAX_BINARIES, certify: bool | None = None) -> Solution:
    """Optimal schedule over every schedule with at most ``passes`` increasing runs of forward
    operations per phase (``passes=None``, the default: over all schedules, proofs/ilp.md;
    ``pairs=True``: weakly increasing runs; ``passes=1, pairs=True`` is the fast mode).

    Parameters
    ----------
    chain, budget : the chain and the memory budget in bytes.
    time_limit : seconds for the whole run (DPs, model building and MIP solves together);
        a run it stops answers ``time_limit`` with the best schedule in hand and the best
        bound proven, never ``optimal``.  Under a limit the DPs that give the starting
        schedule run only when their estimated time fits (:func:`.seeds.dp_seconds`).
    mip_solver : "highs" (in-process highspy) or "cbc" (the option cannot be called
        ``solver``: that is the registry's own argument).
    passes, pairs : the model's class (above).
    warm_start : seed the solver with the DP schedule (or store-all) as incumbent; the
        proven model (and a model with more than two weakly increasing runs) first solves
        two weakly increasing runs per phase and starts from that optimum when it is better
        (``info["staged"]``).
    threads : MIP solver threads.
    max_binaries : refuse (SolverLimitError) to build a model with more operation binaries than
        this (:func:`.model.binaries_bound`), rather than exhaust memory: the proven model
        passes it up to 19 stages; the certified mode needs the moment relaxation
        (about 2.5 L^2 binaries) to pass it, about 200 stages, and is refused beyond with
        the sizes and the way out (the DPs).
    certify : default on for ``passes=None``, off otherwise: prove optimality over all
        schedules with the moment relaxation (:mod:`.relaxation`, proofs/ilp.md section 9),
        a lower bound on every schedule's makespan.  The weak DP's schedule, then the fast
        mode's optimum, is optimal as soon as the bound reaches its makespan; when it does
        not, chains within exhaustive search's own stage guard
        (``solvers.exhaustive.DEFAULT_MAX_STAGES``) are decided by exhaustive search (well
        under a second there, where the proven model can take minutes); only then is the
        proven time-expanded model solved (with the bound as a cut), and
        where that model is too large the answer is ``feasible`` with the bound
        (``info["certificate"]`` says which step decided).  With ``passes`` set and
        ``certify=True``, the class optimum is reported as optimal over all schedules when
        the bound reaches it.

    Returns
    -------
    Solution : ``optimal_for`` "all" for the proven and certified modes, else the class
        (``"runs<=K"`` / ``"weak-runs<=K"``).
    """
    backends.check_pulp()
    opts = IlpOptions(time_limit=time_limit, mip_solver=mip_solver, passes=passes, pairs=pairs,
                      warm_start=warm_start, threads=threads, max_binaries=max_binaries,
                      certify=certify)
    return run(chain, budget, opts)
