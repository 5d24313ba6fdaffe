"""The classic model's class-budget gap (proofs/classic_model.md, Theorems C.3 and C.4).

*Classic model*: every output saved and no recording costs (``fall_time = fwd_time``,
``fall_overhead = fwd_overhead``); transient overheads allowed.

* :func:`budget_gap_chain` (Theorem C.3): two stages on which every schedule of the
  weakly persistent class (and of the persistent one) needs 4 bytes while an unrestricted
  schedule fits in 3: the class-budget gap exists on the classic model.
* :func:`lean_schedule` (Theorem C.4): a persistent schedule (recompute everything from
  ``x_0`` for each backward, the loss reached by a no-grad pass) whose peak is at most the
  smallest budget of any schedule ``m*`` plus the largest activation ``max_{i>=1} x_i``,
  itself at most ``m*/2`` on the classic model: so the class-budget gap of both classes is
  at most 3/2 there; with unsaved outputs (still no recording costs), at most 2.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.schedule import Schedule


def budget_gap_chain() -> Chain:
    """``E``: ``x = 0, 1, 0``, tapes ``2, 0``, forward overheads ``1, 2``, no backward
    overheads, every output saved, no recording costs; times ``0, 1`` (they play no part
    in a smallest budget)."""
    return Chain(name="classic-budget-gap", fwd_time=[0.0, 1.0], bwd_time=[0.0, 0.0, 0.0],
                 x_size=[0, 1, 0], tape_size=[2, 0], fwd_overhead=[1, 2],
                 bwd_overhead=[0, 0, 0])


def budget_gap_witness() -> Schedule:
    """A schedule of ``E`` under 3 bytes: ``Fall_1`` reads a plain ``x_1``, which ``Fn_1``
    then releases although ``t_2`` is held (off the frontier); ``Fall_0`` comes late."""
    return Schedule.parse("Fn0 Fall1 Fn1 Loss Fall0 B1 B0")


def lean_schedule(chain: Chain) -> Schedule:
    """``Fn_0 .. Fn_{L-1} Loss``, then for ``i = L-1 .. 0``: ``Fn_0 .. Fn_{i-1} Fall_i B_i``
    (``Fn_0`` keeps ``x_0``, as every forward of stage 0 does)."""
    L = chain.length
    ops = [f"Fn{j}" for j in range(L)] + ["Loss"]
    for i in range(L - 1, -1, -1):
        ops += [f"Fn{j}" for j in range(i)] + [f"Fall{i}", f"B{i}"]
    return Schedule.parse(" ".join(ops))


def lean_bound(chain: Chain, min_budget: int) -> int:
    """Theorem C.4's bound on the lean schedule's peak: ``m* + max_{i>=1} x_i``, given the
    smallest budget ``m*`` of any schedule (no recording costs)."""
    return min_budget + max(chain.x_size[1:])


def _witness_entry(name: str, chain: Chain, schedule: Schedule, budget: int) -> dict:
    from remat_theory.model.simulator import simulate

    sim = simulate(chain, schedule, budget)
    return {"solver": name, "options": {}, "status": "feasible", "optimal_for": "none",
            "makespan": sim.makespan, "peak_memory": sim.peak_memory, "bound": None,
            "min_budget": None, "allow_drop": False, "wall_time": 0.0,
            "schedule": schedule.tokens()}


def certificates() -> dict:
    """The certificate of Theorem C.3, by file name (rebuilt with
    ``python -c "from remat_theory.analysis.classic_gap import save; save(DIR)"``)."""
    import solvers
    from remat_theory.analysis.certificates import Certificate, solution_entry

    chain = budget_gap_chain()
    sols = {"opt": solution_entry(solvers.solve(chain, 3, "exhaustive"), {})}
    for s in ("dp", "dp-weak"):
        sols[s] = solution_entry(solvers.solve(chain, 3, s), {})
    sols["witness"] = _witness_entry("classic_budget_gap_witness", chain, budget_gap_witness(), 3)
    w = sols["dp-weak"]["min_budget"]
    cert = Certificate(
        chain, 3, sols,
        claim="class-budget gap on the classic model (proofs/classic_model.md, Theorem C.3)",
        description="budget_gap_chain(): every output saved, no recording costs; Fall1 "
                    "needs a plain x_1 (from t_1 it takes 4 bytes), which the class must "
                    "hold until B_1, so Fall0 then takes 4 bytes too; OPT releases the "
                    "plain x_1 with Fn1 while t_2 is held (off the frontier). Found by the "
                    "complete enumeration of 2-stage chains with sizes <= 2",
        facts={"stages": 2, "class_min_budget": w, "global_min_budget": 3,
               "persistent_min_budget": sols["dp"]["min_budget"], "ratio": w / 3})
    return {"classic_budget_gap_L2.json": cert}


def save(directory) -> list:
    from pathlib import Path

    return [str(c.save(Path(directory) / name)) for name, c in certificates().items()]


__all__ = ["budget_gap_chain", "budget_gap_witness", "lean_schedule", "lean_bound",
           "certificates", "save"]
