"""The ``fall_peak`` rows: the peak of the recording forward that makes the tape a backward
reads, with what the phase had to make before it (proofs/ilp.md section 12, Theorem 5).

The moment relaxation (:mod:`solvers.ilp.relaxation`) sees memory at the backwards only.  At
a tight budget the binding peak is often the last ``Fall_r`` of phase r (call it omega: the
one whose tape ``t_{r+1}`` ``B_r`` reads): just before it, the memory holds ``x_0``, the live
gradient ``d_{r+1}``, the dead values of later phases, omega's input, and every value the
phase made on its way up to omega and did not free.  Which values those are is fixed by the
relaxation's own variables, without ordering the phase:

* ``wa[i, r]`` (1 <= i <= r): x_i was available (plain, or inside ``t_i`` when x_i is
  saved) at some time of phase r up to omega.  omega reads x_r; an x_i available then and
  not held when the phase started was made before by an operation of stage i-1, whose input
  was available before it.
* ``wx[i, r]``, ``wt[j, r]``: the plain x_i / the tape ``t_{j+1}`` is held just before
  omega.  An x_i available before omega is still held then unless an ``Fn_i`` (or, for an
  unsaved x_i, a ``Fall_i``) freed it; a plain x_i held then was held when the phase
  started or made in it by an ``Fn``/``Fck`` of stage i-1 (or a ``Fall`` when unsaved),
  a tape likewise by a ``Fall``: so the relaxation cannot count a cheap plain x_i where only
  a tape was made.
* ``wy[i, r]``: an operation of stage i-1 runs after omega.  A value held at moment r was
  held just before omega or made after it; such an operation needs its input, held just
  before omega or made after it too.
* ``d2[j, r]``: phase r runs more operations of stage j than kinds among them, priced at
  min(fwd_time, fall_time) in the objective: an operation of stage i-1 before omega (x_i
  made on the way up) and one after it are two, which ``c + z`` count only when of both
  kinds.
* the peak row: ``x_0 + x_{r+1} + sum x_i wx + sum theta_j wt + dead + (tau_r + psi_r) z[r, r]
  <= M``.  Without omega in phase r the variables stand for the state at moment r, where the
  row is implied by the backward's peak.

The new variables are binaries; at a schedule's point each is a 0/1 indicator (:func:`point`)
and the objective (``d2`` included) is at most the makespan, so the relaxation with these
rows still keeps every schedule.  Valid for every chain of the model, unsaved outputs
included (section 10's U1-U4).
"""
from __future__ import annotations

import pulp

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import B, FALL, LOSS, Schedule
from remat_theory.model.simulator import State, transition


def names(L: int):
    """The new variables' names, phase by phase (r < L)."""
    for r in range(L - 1, -1, -1):
        for i in range(1, r + 1):
            yield f"wa_{i}_{r}"
            yield f"wx_{i}_{r}"
            yield f"wy_{i}_{r}"
        for j in range(r):
            yield f"wt_{j}_{r}"
            yield f"d2_{j}_{r}"


def add_rows(model, M: int) -> list:
    """The ``fall_peak`` rows of ``model`` (a built relaxation at budget ``M``, in its own
    size units) as ``(row, label)`` pairs; their variables are added to ``model``."""
    ch, var = model.chain, model.var
    L, x, th, tp = ch.length, ch.x_size, ch.tape_held, ch.tape_size
    sv = ch.saved
    for nm in names(L):
        var[nm] = model.prob.add_variable(nm, cat=pulp.LpBinary)

    def v(fam, i, r):
        return var[f"{fam}_{i}_{r}"]

    rows = []
    ft, fa = ch.fwd_time, ch.fall_time
    extra = pulp.lpSum(min(ft[j], fa[j]) * v("d2", j, r)
                       for r in range(L - 1, -1, -1) for j in range(r))
    model.prob.setObjective(model.prob.objective + extra)
    for r in range(L - 1, -1, -1):
        top = (x[0] + x[r + 1] + sum(x[1:r + 1]) + sum(th[:r]) + sum(x[r + 2:L + 1])
               + tp[r] + ch.fall_overhead[r])
        if top <= M:
            # the peak row cannot bind, and then at every 0/1 point of the relaxation's own
            # rows the phase's other rows can be met with wy = d2 = 0 (proofs/ilp.md
            # section 12): the phase gets none (leaving rows out never cuts off a schedule)
            continue
        z_om = v("z", r, r)
        if r >= 1:  # omega reads x_r: held just before it
            inp = v("wx", r, r) + (v("wt", r - 1, r) if sv(r) else 0)
            rows.append((inp - z_om >= 0, f"w_in_{r}"))
            rows.append((v("wa", r, r) - z_om >= 0, f"w_top_{r}"))
        for i in range(2, r + 1):  # made in the phase before omega: its input was available
            start = v("g", i, r + 1) + (v("h", i - 1, r + 1) if sv(i) else 0)
            rows.append((v("wa", i - 1, r) - v("wa", i, r) + start >= 0, f"w_av_{i}_{r}"))
        for i in range(1, r + 1):
            # available before omega: still held just before it, or an Fn_i (a Fall_i of an
            # unsaved x_i) freed it
            held = v("wx", i, r) + (v("wt", i - 1, r) if sv(i) else 0)
            freer = v("c", i, r) + (0 if sv(i) else v("z", i, r))
            rows.append((held + freer - v("wa", i, r) >= 0, f"w_held_{i}_{r}"))
            # a plain x_i held then: held when the phase started, or made in the phase
            made = v("c", i - 1, r) + (0 if sv(i) else v("z", i - 1, r))
            rows.append((v("wx", i, r) - v("g", i, r + 1) - made <= 0, f"w_xsrc_{i}_{r}"))
            # held at both moments and not made in the phase: held all through it
            rows.append((v("wx", i, r) - v("g", i, r + 1) - v("g", i, r) + made >= -1,
                         f"w_xthru_{i}_{r}"))
        for i in range(1, r + 1):
            # held at moment r: held just before omega, or made after it by a stage i-1 op
            rows.append((v("wx", i, r) + v("wy", i, r) - v("g", i, r) >= 0, f"w_xafter_{i}_{r}"))
            rows.append((v("wt", i - 1, r) + v("wy", i, r) - v("h", i - 1, r) >= 0,
                         f"w_tafter_{i}_{r}"))
            if i >= 2:  # that op's input: held just before omega, or made after it
                inp = v("wx", i - 1, r) + (v("wt", i - 2, r) if sv(i - 1) else 0)
                rows.append((inp + v("wy", i - 1, r) - v("wy", i, r) >= 0, f"w_yin_{i}_{r}"))
            # a stage i-1 op before omega (x_i made before it) and one after: two ops, which
            # c + z count only when of both kinds; d2 pays for a second of one kind
            start = v("g", i, r + 1) + (v("h", i - 1, r + 1) if sv(i) else 0)
            rows.append((v("wa", i, r) - start + v("wy", i, r) - v("c", i - 1, r)
                         - v("z", i - 1, r) - v("d2", i - 1, r) <= 0, f"w_two_{i}_{r}"))
        for j in range(r):
            rows.append((v("wt", j, r) - v("h", j, r + 1) - v("z", j, r) <= 0,
                         f"w_tsrc_{j}_{r}"))
            rows.append((v("wt", j, r) - v("h", j, r + 1) - v("h", j, r) + v("z", j, r) >= -1,
                         f"w_tthru_{j}_{r}"))
        held = (pulp.lpSum(x[i] * v("wx", i, r) for i in range(1, r + 1))
                + pulp.lpSum(th[j] * v("wt", j, r) for j in range(r))
                + pulp.lpSum(x[s + 1] * v("c", s, s) for s in range(r + 1, L)))
        fixed = x[0] + x[r + 1]
        rows.append((held + (tp[r] + ch.fall_overhead[r]) * z_om <= M - fixed,
                     f"w_peak_{r}"))
    return rows


def _available(chain: Chain, state: State, i: int) -> bool:
    return bool(state.plain >> i & 1) or (chain.saved(i) and bool(state.tapes >> i & 1))


def point(chain: Chain, schedule: Schedule) -> dict:
    """The new variables' values for a valid ``schedule`` (what the tests check satisfies
    every row): per phase r < L, the reference time is just before omega, the last
    ``Fall_r`` of the phase, or moment r when the phase runs none; ``wx``/``wt`` say what is
    held then, ``wa[i, r]`` whether x_i was available at some time of the phase up to omega
    (0 without omega)."""
    L = chain.length
    val = {nm: 0 for nm in names(L)}
    state, mem = State.initial(chain), chain.x_size[0]
    r = L
    phase_states: list = []  # the states before each forward of the phase, in order
    phase_ops: list = []
    for op in schedule:
        if op.kind in (LOSS, B):
            q = L if op.kind == LOSS else op.index
            if q < L:
                _close_phase(chain, val, q, phase_states, phase_ops, state)
            r = q - 1
            phase_states, phase_ops = [], []
        else:
            phase_states.append(state)
            phase_ops.append(op)
        tr = transition(chain, state, mem, op)
        if isinstance(tr, str):
            raise RematError(f"fall_peak.point: the schedule is not valid at {op}: {tr}")
        state, mem = tr.state, tr.memory_after
    del r
    return val


def _close_phase(chain, val, r, states, ops, moment_state) -> None:
    last = max((k for k, op in enumerate(ops) if op.kind == FALL and op.index == r),
               default=None)
    ref = moment_state if last is None else states[last]
    for i in range(1, r + 1):
        val[f"wx_{i}_{r}"] = ref.plain >> i & 1
        if last is not None:
            val[f"wa_{i}_{r}"] = int(any(_available(chain, s, i) for s in states[:last + 1]))
            val[f"wy_{i}_{r}"] = int(any(op.index == i - 1 for op in ops[last + 1:]))
    for j in range(r):
        val[f"wt_{j}_{r}"] = ref.tapes >> (j + 1) & 1
        kinds = {op.kind == FALL for op in ops if op.index == j}
        val[f"d2_{j}_{r}"] = int(sum(op.index == j for op in ops) > len(kinds))
