"""Chains on which weak persistence is far from the optimum: the families of
proofs/weak_gap.md.

Both use one optional field of the model: a recording forward whose transient is smaller
than the no-grad forward's (``fall_overhead[i] < fwd_overhead[i]``, the case of a
transformer block, docs/model.md).  A *Fall-only* stage has a no-grad overhead larger than
the budget: it can only be passed by recording it.  Weakly persistent schedules never
release a tape (rule W3), so every Fall-only stage's tape is held from the first forward
pass to the stage's own backward; an unrestricted schedule releases it at once with an
``Fn`` of the next stage reading its input from the tape.

* :func:`fall_only_gap_chain` (``C_L``): one Fall-only stage 0 with a large tape below a
  chain of ``L - 1`` stages whose backwards are full for the weak class:
  ``DP_weak >= 2L + 1 + (L-3)(L-2)/2`` against ``OPT <= 2L + 3``, a ratio that grows as
  ``L / 4`` (Theorem W.1).
* :func:`fall_only_budget_chain` (``D_n``): ``n`` Fall-only stages of tape 1 alternating with
  free ones: the smallest budget of the weakly persistent (and persistent) class is at least
  ``n + 1``, that of every schedule at most 2 (Theorem W.2).

Every time is 1 and every output is saved, so both families meet ``--min-time 1
--fall-at-least-fwd --all-saved``.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import Schedule


def _check(value: int, name: str, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise RematError(f"{name} = {value!r} must be an integer >= {least}")


def fall_only_gap_chain(L: int) -> tuple[Chain, int]:
    """``C_L`` and its budget ``M = L + 5``: ``x = 0, 1, .., 1``; stage 0 records a tape of
    ``L + 1`` bytes and its no-grad forward has an overhead of ``M + 1`` (it can only run as
    ``Fall_0``); stages ``1..L-1`` have tapes of 1 byte and no overheads; every time 1."""
    _check(L, "L", 3)
    M = L + 5
    chain = Chain(fwd_time=[1.0] * L, bwd_time=[1.0] * (L + 1), x_size=[0] + [1] * L,
                  tape_size=[L + 1] + [1] * (L - 1), fwd_overhead=[M + 1] + [0] * (L - 1),
                  bwd_overhead=[0] * (L + 1), fall_time=[1.0] * L, fall_overhead=[0] * L,
                  name=f"fall-only-gap-L{L}")
    return chain, M


def fall_only_gap_witness(L: int) -> Schedule:
    """A schedule of ``C_L`` of makespan ``2L + 3``: ``Fall_0``, then ``Fn_1`` reads ``x_1``
    from the tape ``t_1`` and frees it, store-all from the plain ``x_2``; at the end
    ``Fall_0``, ``Fall_1`` again for ``B_1`` and ``B_0``."""
    _check(L, "L", 3)
    ops = ["Fall0", "Fn1"] + [f"Fall{i}" for i in range(2, L)] + ["Loss"]
    ops += [f"B{i}" for i in range(L - 1, 1, -1)] + ["Fall0", "Fall1", "B1", "B0"]
    return Schedule.parse(" ".join(ops))


def fall_only_gap_lower_bound(L: int) -> float:
    """Theorem W.1's bound on every weakly persistent schedule of ``C_L``."""
    return 2 * L + 1 + (L - 3) * (L - 2) / 2


def fall_only_budget_chain(n: int) -> Chain:
    """``D_n``, ``L = 2n``: stage ``2j`` is Fall-only (no-grad overhead ``2L + 10``, tape 1,
    output ``x_{2j+1}`` of 1 byte), stage ``2j + 1`` is free (output and tape of 0 bytes);
    ``x_0 = 0``; every time 1."""
    _check(n, "n", 1)
    L = 2 * n
    x, tape, fo = [0], [], []
    for _ in range(n):
        x += [1, 0]
        tape += [1, 0]
        fo += [2 * L + 10, 0]
    return Chain(fwd_time=[1.0] * L, bwd_time=[1.0] * (L + 1), x_size=x, tape_size=tape,
                 fwd_overhead=fo, bwd_overhead=[0] * (L + 1), fall_time=[1.0] * L,
                 fall_overhead=[0] * L, name=f"fall-only-budget-n{n}")


def fall_only_budget_witness(n: int) -> Schedule:
    """A schedule of ``D_n`` that peaks at 2 bytes: each Fall-only tape is released at once
    by the next stage's ``Fn`` (the plain outputs of the free stages cost nothing), and
    recorded again just before its own backward."""
    _check(n, "n", 1)
    ops = []
    for j in range(n):
        ops += [f"Fall{2 * j}", f"Fn{2 * j + 1}"]
    ops.append("Loss")
    for j in range(n - 1, -1, -1):
        ops += [f"Fall{2 * j}", f"Fall{2 * j + 1}", f"B{2 * j + 1}", f"B{2 * j}"]
    return Schedule.parse(" ".join(ops))


__all__ = ["fall_only_gap_chain", "fall_only_gap_witness", "fall_only_gap_lower_bound",
           "fall_only_budget_chain", "fall_only_budget_witness"]


# ---------------------------------------------------------------------- certificates

def _witness_entry(name: str, options: dict, chain: Chain, schedule: Schedule,
                   budget: int) -> dict:
    from remat_theory.model.simulator import simulate

    sim = simulate(chain, schedule, budget)
    return {"solver": name, "options": options, "status": "feasible", "optimal_for": "none",
            "makespan": sim.makespan, "peak_memory": sim.peak_memory, "bound": None,
            "min_budget": None, "allow_drop": False, "wall_time": 0.0,
            "schedule": schedule.tokens()}


def certificates(exhaustive_max: int = 8) -> dict:
    """The certificates of proofs/weak_gap.md, by file name (``remat_theory.analysis.weak_gap``
    rebuilds them: ``python -c "from remat_theory.analysis.weak_gap import save; save(DIR)"``).
    OPT comes from exhaustive search on chains of at most ``exhaustive_max`` stages."""
    import solvers
    from remat_theory.analysis.certificates import Certificate, solution_entry

    out = {}
    for L in (8, 40):
        chain, M = fall_only_gap_chain(L)
        sols = {}
        if L <= exhaustive_max:
            sols["opt"] = solution_entry(solvers.solve(chain, M, "exhaustive"), {})
        for s in ("dp", "dp-weak"):
            sols[s] = solution_entry(solvers.solve(chain, M, s), {})
        sols["witness"] = _witness_entry("fall_only_gap_witness", {"L": L}, chain,
                                         fall_only_gap_witness(L), M)
        weak, wit = sols["dp-weak"]["makespan"], sols["witness"]["makespan"]
        out[f"weak_gap_fall_only_L{L}.json"] = Certificate(
            chain, M, sols, claim="weak-persistence gap: DP_weak/OPT is unbounded with "
                                  "recording costs (proofs/weak_gap.md, Theorem W.1)",
            description=f"fall_only_gap_chain({L}): stage 0 can only be recorded; every weakly "
                        f"persistent schedule holds its tape to the end, every backward above "
                        f"is then full, and x_(i-1) is recomputed from x_1 after each; the "
                        f"witness releases the tape at once (Fn1 reads x_1 from it)",
            facts={"stages": L, "dp_weak": weak, "witness": wit, "ratio": weak / wit,
                   "lower_bound": fall_only_gap_lower_bound(L)})
    n = 4
    chain = fall_only_budget_chain(n)
    sols = {"opt": solution_entry(solvers.solve(chain, 2, "exhaustive"), {})}
    for s in ("dp", "dp-weak"):
        sols[s] = solution_entry(solvers.solve(chain, 2, s), {})
    sols["witness"] = _witness_entry("fall_only_budget_witness", {"n": n}, chain,
                                     fall_only_budget_witness(n), 2)
    out[f"budget_gap_fall_only_n{n}.json"] = Certificate(
        chain, 2, sols, claim="class-budget gap is unbounded with recording costs "
                              "(proofs/weak_gap.md, Theorem W.2)",
        description=f"fall_only_budget_chain({n}): {n} stages that can only be recorded; the "
                    f"weakly persistent and persistent classes hold all their tapes at "
                    f"B_{2 * n - 1} (smallest budget {n + 1}), a schedule that releases each "
                    f"tape at once fits in 2",
        facts={"n": n, "stages": 2 * n, "class_min_budget": sols["dp-weak"]["min_budget"],
               "global_min_budget": 2, "ratio": sols["dp-weak"]["min_budget"] / 2})
    return out


def save(directory) -> list:
    from pathlib import Path

    return [str(c.save(Path(directory) / name)) for name, c in certificates().items()]
