"""The classic model's ``DP_weak/OPT`` is unbounded: the family ``G_L`` of
proofs/classic_model.md, C.15.

Classic model: every output saved, no recording costs (``fall_time = fwd_time``,
``fall_overhead = fwd_overhead``), transient overheads allowed.  :func:`growth_chain`
(``G_L``, ``L = 2g`` stages, ``g >= 2``) is a stack of ``g - 1`` two-stage *gadgets* on top
of two plain stages.  Gadget ``m`` (``1 <= m <= g - 1``) is a *wide* stage ``2m`` (a 1-byte
input, a 4-byte output, an 8-byte tape, a transient of 4) under a *narrow* stage ``2m + 1``
(the 4-byte input, a 1-byte output and tape, a transient of 8); stages 0 and 1 have 1-byte
outputs and tapes and no transients.  Only stage 0 costs time (1), everything else is free;
the budget is 17 for every ``L``: every entry is at most 17.

* The optimum (:func:`growth_witness`) runs stage 0 once: it records ``t_1`` first, keeps it
  and recomputes everything else from it; in each gadget it records the narrow stage from a
  plain 4-byte input and releases that input at once with an ``Fn`` (off the frontier), so
  that the wide stage is later recorded beside 1-byte values only.
* A weakly persistent schedule may not release that input once the narrow stage's tape
  exists (rule W1), so when it records the wide stage it holds the 4 bytes (or the
  gradient that replaces them) and the budget is then full: nothing below the gadget can be
  held, and every gadget costs a fresh run of stage 0.  :func:`growth_lower_bound`: ``g``
  runs, so ``DP_weak/OPT >= L/2``.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import Schedule

#: the budget of every member
BUDGET = 17
#: sizes of a gadget: wide input/output, narrow output
SMALL, WIDE, WIDE_TAPE, WIDE_OVERHEAD, NARROW_OVERHEAD = 1, 4, 8, 4, 8


def _check(g: int) -> None:
    if not isinstance(g, int) or isinstance(g, bool) or g < 2:
        raise RematError(f"g = {g!r} must be an integer >= 2")


def growth_chain(g: int) -> tuple[Chain, int]:
    """``G_L`` (``L = 2g`` stages) and its budget 17: ``x = 0, 1, 1, 4, 1, 4, .., 4, 1``;
    tapes ``1, 1, 8, 1, 8, 1, ..``; ``fwd_overhead = 0, 0, 4, 8, 4, 8, ..``; no backward
    overheads; forward times ``1, 0, .., 0``, backward times 0; every output saved, no
    recording costs."""
    _check(g)
    L = 2 * g
    x = [0, SMALL] + [WIDE if i % 2 else SMALL for i in range(2, L + 1)]
    tape = [SMALL, SMALL] + [WIDE_TAPE if i % 2 == 0 else SMALL for i in range(2, L)]
    fo = [0, 0] + [WIDE_OVERHEAD if i % 2 == 0 else NARROW_OVERHEAD for i in range(2, L)]
    chain = Chain(fwd_time=[1.0] + [0.0] * (L - 1), bwd_time=[0.0] * (L + 1), x_size=x,
                  tape_size=tape, fwd_overhead=fo, bwd_overhead=[0] * (L + 1),
                  name=f"classic-growth-L{L}")
    return chain, BUDGET


def _pass_to(k: int) -> list:
    """From ``x_1`` inside the held ``t_1`` to a plain ``x_k`` (``k >= 2``), keeping ``t_1``."""
    return ["Fck1"] + [f"Fn{i}" for i in range(2, k)]


def growth_witness(g: int) -> Schedule:
    """A schedule of ``G_L`` of makespan 1 (one run of stage 0), peak 17.

    ``Fall0``; a pass to a plain ``x_(L-1)``, ``Fall_(L-1)``, ``Fn_(L-1)`` (releases it),
    ``Loss``; then for each gadget ``(a, a+1)``, ``a = L-2, L-4, .., 2``: the narrow stage
    below it, ``a - 1``, recorded from a plain ``x_(a-1)`` and released by ``Fn_(a-1)``, which
    leaves a plain ``x_a`` (for ``a = 2``: ``Fall1`` from ``t_1`` and ``Fck1``); ``Fall_a``
    from it; ``B_(a+1)``, ``B_a``; at the end ``B_1``, ``B_0``."""
    _check(g)
    L = 2 * g
    ops = ["Fall0"] + _pass_to(L - 1) + [f"Fall{L - 1}", f"Fn{L - 1}", "Loss"]
    for a in range(L - 2, 1, -2):
        if a >= 4:
            ops += _pass_to(a - 1) + [f"Fall{a - 1}", f"Fn{a - 1}"]
        else:
            ops += ["Fall1", "Fck1"]
        ops += [f"Fall{a}", f"B{a + 1}", f"B{a}"]
    ops += ["B1", "B0"]
    return Schedule.parse(" ".join(ops))


def growth_lower_bound(g: int) -> int:
    """Theorem C.15's bound: every weakly persistent schedule of ``G_L`` valid under 17 runs
    stage 0 at least ``g`` times, so its makespan is at least ``g``."""
    _check(g)
    return g


# ---------------------------------------------------------------------- certificates

def _witness_entry(chain: Chain, g: int) -> dict:
    from remat_theory.model.simulator import simulate

    schedule = growth_witness(g)
    sim = simulate(chain, schedule, BUDGET)
    return {"solver": "classic_growth_witness", "options": {"g": g}, "status": "feasible",
            "optimal_for": "none", "makespan": sim.makespan, "peak_memory": sim.peak_memory,
            "bound": None, "min_budget": None, "allow_drop": False, "wall_time": 0.0,
            "schedule": schedule.tokens()}


def certificates(exhaustive_max: int = 8) -> dict:
    """The certificates of C.15 by file name: ``G_8`` (OPT by exhaustive search) and
    ``G_40`` (the witness); both with ``dp-weak``'s schedule.  Rebuilt by
    ``python -c "from remat_theory.analysis.classic_growth import save; save(DIR)"``."""
    import solvers
    from remat_theory.analysis.certificates import Certificate, solution_entry

    out = {}
    for g in (4, 20):
        chain, M = growth_chain(g)
        L = 2 * g
        sols = {}
        if L <= exhaustive_max:
            sols["opt"] = solution_entry(solvers.solve(chain, M, "exhaustive"), {})
        sols["dp-weak"] = solution_entry(solvers.solve(chain, M, "dp-weak"), {})
        sols["witness"] = _witness_entry(chain, g)
        weak, wit = sols["dp-weak"]["makespan"], sols["witness"]["makespan"]
        out[f"classic_growth_L{L}.json"] = Certificate(
            chain, M, sols,
            claim="DP_weak/OPT is unbounded on the classic model (proofs/classic_model.md, "
                  "Theorem C.15)",
            description=f"growth_chain({g}): {g - 1} gadgets (a wide stage under a narrow "
                        f"one) on two plain stages, only stage 0 costs time; the witness "
                        f"runs stage 0 once, releasing each narrow stage's plain input off "
                        f"the frontier; a weakly persistent schedule holds it and must "
                        f"drop everything below each gadget, one run of stage 0 per gadget",
            facts={"stages": L, "g": g, "dp_weak": weak, "witness": wit,
                   "ratio": weak / wit, "lower_bound": growth_lower_bound(g)})
    return out


def save(directory) -> list:
    from pathlib import Path

    return [str(c.save(Path(directory) / name)) for name, c in certificates().items()]
