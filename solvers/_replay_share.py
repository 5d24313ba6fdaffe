"""The referee's share of a solver's time limit: :func:`solvers.registry.solve` replays
every answer, and on a long chain that replay takes seconds, so it keeps
:func:`replay_reserve` of the limit back from the solver and says so in what it answers
(:func:`share_note`, :func:`with_reserve`)."""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain
from remat_theory.model.errors import Remedy, SolverLimitError


def share_note(limit: float | None, reserve: float) -> str:
    if not reserve:
        return ""
    return (f" (of the time limit of {limit:g} s, {reserve:.3g} s are kept for the referee's "
            f"replay of the answer)")


def with_reserve(e: SolverLimitError, chain: Chain, limit: float, reserve: float
                  ) -> SolverLimitError:
    """A solver's refusal under its share of ``limit``, said in terms of the whole limit:
    a time limit it asks for gets the replay's reserve on top."""
    def whole(need):
        for total in (need + reserve, 2 * need, need + replay_reserve(chain, need + reserve)):
            if total - replay_reserve(chain, total) >= need:
                return math.ceil(total)
        return math.ceil(2 * need)  # pragma: no cover - 2 * need always fits

    remedies = tuple(
        Remedy(solver=r.solver, note=r.note, options=tuple(
            (k, rel, whole(v) if k == "time_limit" and v is not None else v)
            for k, rel, v in r.options))
        for r in e.remedies)
    timed = any(k == "time_limit" for r in e.remedies for k, _, _ in r.options)
    out = SolverLimitError(e.problem + (share_note(limit, reserve) if timed else ""),
                           solver=e.solver,
                           estimate_s=e.estimate_s, estimate_bytes=e.estimate_bytes,
                           remedies=remedies)
    return out


#: The part of the allowed overrun of a time limit the referee's replay may use: this
#: fraction of the limit, plus these seconds.
REPLAY_OVERRUN, REPLAY_GRACE_S = 0.05, 0.5

#: Seconds the referee's vectorised replay takes per operation (measured on a loaded 2-core
#: machine: benchmarks/bench_scale.py), and operations per stage of a typical answer
#: (store-all 2, chen-sqrt 3, revolve a few): what the replay of an answer on a long chain
#: is expected to take, kept out of the solver's share of a time limit.
REPLAY_SECONDS_PER_OP = 2e-6
OPS_PER_STAGE = 4


def replay_reserve(chain: Chain, limit: float) -> float:
    """The part of ``limit`` kept for the referee's replay of the answer: its expected
    time on ``chain``, at most half the limit (zero on short chains)."""
    expected = REPLAY_SECONDS_PER_OP * OPS_PER_STAGE * chain.length
    return min(0.5 * limit, expected) if expected >= 0.01 else 0.0
