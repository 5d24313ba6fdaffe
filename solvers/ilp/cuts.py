"""Extra rows for the moment relaxation (:mod:`solvers.ilp.relaxation`), each valid for every
schedule: the relaxation with them is still a lower bound on every valid schedule's
makespan (proofs/ilp.md section 11, which proves them row by row).

Three families, all about what happens *inside* a phase, which the relaxation's own rows see
only through which kinds of value a phase creates and frees:

* ``reach`` (availability through one operation per stage): ``u[i, r]`` is "phase r runs
  some forward operation of stage i" (a continuous variable pinned to max(c, z) by three
  rows); an operation of stage i >= 1 needs x_i held at the start of the phase or made by
  an operation of stage i-1 in the phase: ``u[i, r] <= g[i, r+1] + h[i-1, r+1] + u[i-1, r]``.
  The relaxation's own ``in_c``/``in_z`` rows count ``c[i-1, r] + z[i-1, r]`` there, so a
  fractional point could halve its way down a recomputation (each stage half Fn, half
  Fall); this row counts one source per stage.
* ``fwd_peak`` (the peak of a forward operation): when phase r runs an operation of stage
  i, the memory then holds x_0, the live gradient d_{r+1}, the operation's input (at least
  x_i bytes, i >= 1) and output (x_{i+1} for Fn/Fck, the tape for Fall) and its transient,
  the dead values of later phases, and every value held at both moments r+1 and r that the
  phase did not make again (``p`` variables, at least the product of the three).  A big-M
  row switches it on when ``c[i, r]`` (or ``z[i, r]``) is 1.

* ``fall_peak`` (:mod:`solvers.ilp.fall_peak`, proofs/ilp.md section 12): the peak of each
  phase's last ``Fall_r`` with what the phase made before it, and a second operation of one
  kind paid for.

Chains with unsaved outputs (``output_saved`` false somewhere) change what a Fall makes and
frees; ``reach`` and ``fwd_peak`` are proven for the table without that field only, and
:func:`add_cuts` refuses such chains for them with a :class:`SolverOptionError`;
``fall_peak`` is proven for every chain.
"""
from __future__ import annotations

import pulp

from remat_theory.model.chain import Chain
from remat_theory.model.errors import SolverOptionError
from remat_theory.model.schedule import Schedule

FAMILIES = ("reach", "fwd_peak", "fall_peak")
#: the families proven for chains whose outputs are all saved only (section 11)
SAVED_ONLY = ("reach", "fwd_peak")


def check_chain(chain: Chain, families=SAVED_ONLY) -> None:
    """Refuse a chain ``families`` are not proven for: ``reach`` and ``fwd_peak`` on unsaved
    outputs (``fall_peak``, proofs/ilp.md section 12, holds on every chain)."""
    needs_saved = [f for f in families if f in SAVED_ONLY]
    if chain.has_unsaved_outputs and needs_saved:
        raise SolverOptionError(f"cuts: the in-phase rows {', '.join(needs_saved)} are proven "
                                "only for chains whose outputs are all saved (output_saved all "
                                f"true); this chain has output_saved = {list(chain.output_saved)}")


def check_families(families) -> tuple:
    """``families`` as a tuple of known names (SolverOptionError naming a wrong one)."""
    fams = tuple(families)
    for f in fams:
        if f not in FAMILIES:
            raise SolverOptionError(f"cuts = {f!r} is not a known family of rows "
                                    f"(known: {', '.join(FAMILIES)})")
    return fams


def _top(L: int, r: int) -> int:
    return min(r, L - 1)


def _persist_names(L: int, r: int):
    """The (name, kind, index) of the persistence variables of phase r < L: a plain x_j
    (1 <= j <= r) or a tape t_{j+1} (0 <= j <= r) held at moments r+1 and r and not made in
    phase r, hence held through the whole phase."""
    for j in range(1, r + 1):
        yield f"px_{j}_{r}", "x", j
    for j in range(r + 1):
        yield f"pt_{j}_{r}", "t", j


def add_cuts(model, budget: int, families=FAMILIES) -> list:
    """Add the rows of ``families`` to a built relaxation ``model`` at ``budget`` (in the
    model's own size units, as it was built: not the min-budget variant).  Returns the rows'
    labels, and appends them to ``model.rows`` (so
    :func:`solvers.ilp.relaxation.violated_rows` checks them too)."""
    fams = check_families(families)
    chain = model.chain
    check_chain(chain, fams)
    if model.budget_var is not None:
        raise SolverOptionError("cuts: the in-phase rows need a fixed budget, not the "
                                "min-budget relaxation")
    rows = []
    if "reach" in fams:
        rows += _reach_rows(model)
    if "fwd_peak" in fams:
        rows += _peak_rows(model, budget)
    if "fall_peak" in fams:
        from solvers.ilp import fall_peak
        rows += fall_peak.add_rows(model, budget)
    for row, label in rows:
        model.prob += row, label
    model.rows.extend((label, row) for row, label in rows)
    return [label for _, label in rows]


def _new_var(model, name):
    v = model.prob.add_variable(name, lowBound=0, upBound=1)
    model.var[name] = v
    return v


def _reach_rows(model) -> list:
    """The ``reach`` rows (module docstring), phases r < L (the loss phase starts from x_0
    alone and its own ``first`` rows already ask for every stage)."""
    L, var = model.chain.length, model.var
    rows = []
    for r in range(L - 1, -1, -1):
        top = _top(L, r)
        for i in range(top + 1):
            u = _new_var(model, f"u_{i}_{r}")
            c, z = var[f"c_{i}_{r}"], var[f"z_{i}_{r}"]
            rows += [(u - c >= 0, f"u_ge_c_{i}_{r}"), (u - z >= 0, f"u_ge_z_{i}_{r}"),
                     (u - c - z <= 0, f"u_le_{i}_{r}")]
        for i in range(1, top + 1):
            rows.append((var[f"u_{i}_{r}"] - var[f"g_{i}_{r + 1}"] - var[f"h_{i - 1}_{r + 1}"]
                         - var[f"u_{i - 1}_{r}"] <= 0, f"reach_{i}_{r}"))
    return rows


def _peak_rows(model, M: int) -> list:
    """The ``fwd_peak`` rows (module docstring) for every phase r < L and stage i <= r, and
    the persistence variables they read."""
    ch, var = model.chain, model.var
    L, x, tp = ch.length, ch.x_size, ch.tape_size
    rows = []
    for r in range(L - 1, -1, -1):
        persist = []
        for name, kind, j in _persist_names(L, r):
            p = _new_var(model, name)
            if kind == "x":
                held = var[f"g_{j}_{r + 1}"] + var[f"g_{j}_{r}"] - var[f"c_{j - 1}_{r}"]
                size = x[j]
            else:
                held = var[f"h_{j}_{r + 1}"] + var[f"h_{j}_{r}"] - var[f"z_{j}_{r}"]
                size = tp[j]
            rows.append((p - held >= -1, f"{name}_def"))
            persist.append((kind, j, size, p))
        dead = [(x[s + 1], var[f"c_{s}_{s}"]) for s in range(r + 1, L)]
        for i in range(_top(L, r) + 1):
            for kind in ("c", "z"):
                op_var = var[f"{kind}_{i}_{r}"]
                if kind == "c":
                    out, ovh = x[i + 1], ch.fwd_overhead[i]
                else:
                    out, ovh = tp[i], ch.fall_overhead[i]
                base = x[0] + x[r + 1] + (x[i] if i >= 1 else 0) + out + ovh
                # the input (plain x_i, or the tape t_i) is counted in base as x_i bytes
                terms = [(s, p) for k, j, s, p in persist
                         if not ((k == "x" and j == i) or (k == "t" and j == i - 1))]
                terms += dead
                big = base + sum(s for s, _ in terms) - M
                if big <= 0:
                    continue  # the row can never bind
                lhs = pulp.lpSum(s * p for s, p in terms) + big * op_var
                rows.append((lhs <= M - base + big, f"fwd_peak_{kind}_{i}_{r}"))
    return rows


def cut_point(chain: Chain, schedule: Schedule, point: dict) -> dict:
    """The values of the new variables for a valid ``schedule`` whose relaxation point is
    ``point`` (:func:`solvers.ilp.relaxation.relaxation_point`): ``u`` = max(c, z), and each
    persistence variable 1 exactly when its value is held at both moments and was not made
    in the phase (what the tests check satisfies every row)."""
    L = chain.length
    val = dict(point)
    for r in range(L - 1, -1, -1):
        for i in range(_top(L, r) + 1):
            val[f"u_{i}_{r}"] = max(point[f"c_{i}_{r}"], point[f"z_{i}_{r}"])
        for name, kind, j in _persist_names(L, r):
            if kind == "x":
                v = point[f"g_{j}_{r + 1}"] + point[f"g_{j}_{r}"] - point[f"c_{j - 1}_{r}"]
            else:
                v = point[f"h_{j}_{r + 1}"] + point[f"h_{j}_{r}"] - point[f"z_{j}_{r}"]
            val[name] = 1 if v >= 2 else 0
    from solvers.ilp import fall_peak
    val.update(fall_peak.point(chain, schedule))
    return val


