"""``ilp-offload``: a MILP of the two-stream model (rematerialization and offloading), exact
over the schedules of at most N operations (docs/ilp.md, "The offload MILP";
proofs/offload.md, O.13).

Positions p = 1..N hold one op each (or none: idle positions come last).  For every op
``o`` of the referee's table, with the place it reads x_i from when that matters
(``Fn``/``Fck``/``Fall``/``Loss``/``B`` read a plain x_i when one is held, else the tape
t_i), a binary ``u[p, o]``.  The state after position p is binary: ``dev[p, v]`` and
``host[p, v]`` for every value v (x_1..x_L, t_1..t_L), ``leave[p, v]`` (offloaded since the
last compute op, still counted), and ``bn[p, j]`` one-hot, the backward next (j = L..-1).
Preconditions, effects and the frame are linear in them, one rule per row of the operation
table (docs/model.md); the one conditional effect, the unsaved output that ``Fall_i`` adds
only when none is held and ``B_{i+1}`` has not run, has its own binary.  Memory is a
linear function of the state: each compute op's peak (held, leaving copies released, plus
what it adds) and each transfer's (held, leaving copies, plus a prefetch's size) is at
most the budget.

Times are continuous: ``C``, ``H``, ``O`` (compute stream free, channel free, pending
offload completion), ``R[v]`` and ``Q[v]`` (ready time, last read), the op's start ``S``,
end ``E`` and, for an offload, completion ``D``.  Every rule of the referee sets a time to
a maximum of earlier times plus a duration; the MILP imposes ``>=`` each term that applies
(big-M on the op binaries), so for a fixed token sequence every feasible time is at least
the referee's and the referee's times are feasible: the least makespan ``Z >= C, H, O`` of
the MILP is the referee's optimum over sequences of at most N tokens, its dual bound a
lower bound on it.  N is the option ``max_ops`` (default: the incumbent's length plus
``extra_ops``); the claims are about the class ``all+offload<=N`` (schedules of the model
of at most N ops), which contains the incumbent.  An incumbent (the best of
``dp-offload``'s, ``save-on-cpu``'s and ``offload-all``'s schedules, else a fewest-ops
schedule found over placements) bounds the makespan (big-M) and starts the search.

The MILP keeps only the schedules in the normal form of proofs/offload.md O.20 (no
prefetch left untouched, no offload undone before a compute op: flags ``pf`` and two
rules), which keeps an optimum at every N (O.20 ii), with the cut "transfers at most the
compute ops' charges" (O.21) and "each backward once, each Fall at least once".

Beyond N (proofs/offload.md, O.14, O.21-O.22): when every forward takes a positive time, a
normal-form schedule of makespan at most V has at most :func:`length_bound` (V) ops, and
some optimal schedule is in normal form, so an optimum V* found with N >=
length_bound(V*) is the optimum over ALL schedules (class ``all+offload``): the answer
certifies itself.  ``proven=True`` picks N =
length_bound(incumbent's makespan) so that it does.  Two valid cuts of the same lemma
(each stream runs its ops one after another within the makespan: the compute ops' times
add up to at most Z, and so do the copies') tighten the relaxation.

Short of that (O.15): every schedule of more than N ops takes at least
:func:`longer_schedule_bound` (N), the least makespan whose length bound exceeds N, so
``Solution.bound`` is a lower bound over ALL schedules (``info["bound_over"]`` says which
class it covers): the minimum of that and the optimum (or, at a time limit, the dual
bound) over the schedules of at most N ops.
"""
from __future__ import annotations

import math
import struct
import time

from remat_theory.model import classes
from remat_theory.model.chain import Chain
from remat_theory.model.errors import (AT_LEAST, Remedy, SolverContractError, SolverError,
                                       SolverLimitError)
from remat_theory.model.schedule import Op, Schedule
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import CLASS_NONE, Solution

from solvers import registry
from solvers.dp_offload import copy_time
from solvers.ilp_offload_normal import normal_length_bound, op_weight
from solvers.registry import Option, register

NAME = "ilp-offload"
DEFAULT_EXTRA_OPS = 4
#: The longest chain solved without raising max_stages: at 3 stages HiGHS takes 10-100 s
#: (benchmarks: exhaustive-offload is faster there), at 2 a few seconds.
DEFAULT_MAX_STAGES = 2
#: Binaries above which the model is refused up front (building it is pure Python).
MAX_BINARIES = 60_000


class _Op:
    __slots__ = ("token", "compute", "dur", "add", "pre_dev", "pre_not_dev", "pre_host",
                 "bn_ge", "bn_eq", "sets", "clears", "hset", "hclear", "reads", "makes",
                 "cond", "bn_move", "off", "pre")

    def __init__(self, token, compute, dur, add=0):
        self.token, self.compute, self.dur, self.add = token, compute, dur, add
        self.pre_dev, self.pre_not_dev, self.pre_host = [], [], []
        self.bn_ge = self.bn_eq = None
        self.sets, self.clears, self.hset, self.hclear = [], [], [], []
        self.reads, self.makes = [], []
        self.cond = None  # (value, stage i): Fall_i's unsaved output, made conditionally
        self.bn_move = None
        self.off = self.pre = None


def _read_source(o: _Op, src, i: int) -> None:
    """Op ``o`` reads x_i from ``src``: the plain value ("x"), the tape holding it ("t",
    with no plain copy on the device), or nothing (None: x_0, or a value read elsewhere)."""
    if src == "x":
        o.pre_dev.append(("x", i))
        o.reads.append(("x", i))
    elif src == "t":
        o.pre_dev.append(("t", i))
        o.pre_not_dev.append(("x", i))
        o.reads.append(("t", i))


def op_table(chain: Chain) -> list:
    """Every op of the model on ``chain`` with its read-source variant, as rules."""
    L, x = chain.length, chain.x_size
    ops = []

    def src_variants(i):
        if i == 0:
            return [None]
        return ["x", "t"] if chain.saved(i) else ["x"]

    for i in range(L):
        for kind in ("Fn", "Fck", "Fall"):
            for src in src_variants(i):
                if kind == "Fall":
                    o = _Op(f"Fall{i}", True, chain.fall_time[i],
                            chain.tape_size[i] + chain.fall_overhead[i])
                else:
                    o = _Op(f"{kind}{i}", True, chain.fwd_time[i], x[i + 1] + chain.fwd_overhead[i])
                o.bn_ge = i
                _read_source(o, src, i)
                if kind == "Fall":
                    o.pre_not_dev.append(("t", i + 1))
                    o.sets.append(("t", i + 1))
                    o.hclear.append(("t", i + 1))
                    o.makes.append(("t", i + 1))
                    if not chain.output_saved[i]:
                        o.cond = (("x", i + 1), i)
                        o.hclear.append(("x", i + 1))
                    if i >= 1 and not chain.saved(i):
                        o.clears.append(("x", i))
                else:
                    o.pre_not_dev.append(("x", i + 1))
                    o.sets.append(("x", i + 1))
                    o.hclear.append(("x", i + 1))
                    o.makes.append(("x", i + 1))
                    if kind == "Fn" and i >= 1:
                        o.clears.append(("x", i) if src == "x" else ("t", i))
                ops.append(o)
    for src in (["x", "t"] if chain.saved(L) else ["x"]):
        o = _Op("Loss", True, chain.bwd_time[L], x[L] + chain.bwd_overhead[L])
        o.bn_eq, o.bn_move = L, (L, L - 1)
        _read_source(o, src, L)
        if src == "x":
            o.clears.append(("x", L))
        o.hclear.append(("x", L))
        ops.append(o)
    for i in range(L):
        for src in (["x", "t"] if i >= 1 and chain.saved(i) else [None]):
            o = _Op(f"B{i}", True, chain.bwd_time[i], x[i] + chain.bwd_overhead[i])
            o.bn_eq, o.bn_move = i, (i, i - 1)
            o.pre_dev.append(("t", i + 1))
            o.reads.append(("t", i + 1))
            _read_source(o, src, i)
            o.clears.append(("t", i + 1))
            o.hclear.append(("t", i + 1))
            if i >= 1:
                o.clears.append(("x", i))
                o.hclear.append(("x", i))
            ops.append(o)
    if chain.bandwidth is not None:
        for v in values(chain):
            d = copy_time(chain, size(chain, v))
            if d == math.inf:
                continue
            off = _Op(f"Off{v[0]}{v[1]}", False, d)
            off.pre_dev.append(v)
            off.clears.append(v)
            off.hset.append(v)
            off.off = v
            pre = _Op(f"Pre{v[0]}{v[1]}", False, d, size(chain, v))
            pre.pre_host.append(v)
            pre.sets.append(v)
            pre.hclear.append(v)
            pre.makes.append(v)
            pre.pre = v
            ops += [off, pre]
    return ops


def _weight(chain: Chain, o: _Op) -> int:
    """O.21's charge of a compute op (0 for a transfer)."""
    if not o.compute:
        return 0
    op = Op.parse(o.token)
    return op_weight(chain, op.kind, op.index)


def values(chain: Chain) -> list:
    L = chain.length
    return [("x", i) for i in range(1, L + 1)] + [("t", i) for i in range(1, L + 1)]


def size(chain: Chain, v) -> int:
    return chain.x_size[v[1]] if v[0] == "x" else chain.tape_held[v[1] - 1]


#: Relative slack on a makespan before counting ops in it: the referee adds times in
#: floating point, so a stream's end may sit a few ulps below the exact sum of its ops.
_FLOAT_SLACK = 1e-9


def length_bound(chain: Chain, makespan: float, normal_form: bool = True) -> int | None:
    """An upper bound on the number of ops of the schedules that ``ilp-offload``'s
    certificate must cover at makespan at most ``makespan``: with ``normal_form`` (the
    default) those in the normal form of O.20, at most the smaller of O.14's bound
    (:func:`general_length_bound`, every schedule) and O.21's
    (:func:`~solvers.ilp_offload_normal.normal_length_bound`); some optimal schedule is in
    normal form (O.20), which is all the certificate needs.  None with a zero-time
    forward; non-decreasing in ``makespan``."""
    bound = general_length_bound(chain, makespan)
    if normal_form and bound is not None:
        bound = min(bound, normal_length_bound(chain, makespan))
    return bound


def general_length_bound(chain: Chain, makespan: float) -> int | None:
    """O.14: an upper bound on the number of ops of every valid schedule (no Drop) of
    makespan at most ``makespan``; None when some forward takes no time (nothing then
    bounds how often it runs) or the makespan is infinite; 0 below the ideal makespan
    (``sum(bwd) + sum(fall)``, up to the float slack), where no valid schedule ends.

    Compute ops run one after another within the makespan: the L+1 backwards run once
    each; every stage runs ``Fall`` at least once (the first tape ``t_{i+1}`` comes from
    nowhere else), costing ``sum(fall_time)``; every other forward costs at least the
    cheapest forward ``f``: ``n_c <= (L+1) + L + floor((V - sum(bwd) - sum(fall)) / f)``.
    Transfers: nothing can move before the first compute op, and after a compute op and
    before the next one a value moves at most 3 times (Off, Pre alternate, and a second
    Off waits for a compute op: ``Pre Off Pre``), so ``n_t <= 3 m n_c`` with ``m`` the
    values whose copy can end; and the copies of positive time, at least ``c`` each, run
    one after another on the channel: ``n_t <= 3 m_0 n_c + floor(V / c)`` with ``m_0`` the
    values whose copy takes no time."""
    if not math.isfinite(makespan):
        return None
    L = chain.length
    fwd = min(min(a, b) for a, b in zip(chain.fwd_time, chain.fall_time))
    if fwd <= 0:
        return None
    v = makespan * (1 + _FLOAT_SLACK)
    spare = v - sum(chain.bwd_time) - sum(chain.fall_time)
    if spare < 0:  # no valid schedule is that short (its compulsory ops alone take
        return 0  # longer): every one of them, none, has at most 0 ops
    n_c = (L + 1) + L + math.floor(spare / fwd)
    copies = []
    if chain.bandwidth is not None:
        copies = [d for d in (copy_time(chain, size(chain, x)) for x in values(chain))
                  if d != math.inf]
    n_t = 3 * len(copies) * n_c
    timed = [d for d in copies if d > 0]
    if timed:  # the copies of no time by the count, the others by the channel's time
        n_t = min(n_t, 3 * (len(copies) - len(timed)) * n_c + math.floor(v / min(timed)))
    return n_c + n_t


def _bits(x: float) -> int:
    """The IEEE-754 bit pattern of a float >= 0: it orders such floats as integers."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _from_bits(b: int) -> float:
    return struct.unpack("<d", struct.pack("<q", b))[0]


def longer_schedule_bound(chain: Chain, n: int) -> float | None:
    """O.15: a lower bound on the makespan of every normal-form schedule (O.20; no Drop) of
    MORE than ``n`` ops: the least float ``V >= 0`` with ``length_bound(V) > n`` (0.0 when even the
    shortest makespan allows more than ``n`` ops); None when some forward takes no time
    (no length bound exists, so nothing bounds the longer schedules).

    A schedule of more than ``n`` ops and referee makespan ``m`` has ``length_bound(m) >=``
    its length ``> n`` (O.14), and ``length_bound`` is non-decreasing in the float ``m``
    (each step of it is monotone under rounding), so ``m`` is not below the least float
    where ``length_bound`` exceeds ``n``.  Found exactly: doubling for a float above it,
    then bisection over the bit patterns of the floats between (at most 64 halvings)."""
    if n < 0:
        raise ValueError(f"n = {n}: a number of ops is at least 0")
    first = length_bound(chain, 0.0)
    if first is None:
        return None
    if first > n:
        return 0.0
    hi = max(1.0, chain.ideal_makespan())
    while length_bound(chain, hi) <= n:  # ℓ grows at least like V / f: this ends
        hi *= 2.0
    lo_b, hi_b = _bits(0.0), _bits(hi)  # ℓ(lo) <= n < ℓ(hi)
    while hi_b - lo_b > 1:
        mid = (lo_b + hi_b) // 2
        if length_bound(chain, _from_bits(mid)) <= n:
            lo_b = mid
        else:
            hi_b = mid
    return _from_bits(hi_b)


class Model:
    """The MILP of the module docstring on ``chain`` at ``budget`` with ``N`` positions and
    the makespan bounded by ``ub`` (big-M)."""

    def __init__(self, chain: Chain, budget: int, N: int, ub: float,
                 normal_form: bool = True):
        import highspy

        from solvers._highs import silence_highs_banner
        silence_highs_banner()  # before the first Highs() of the process: stdout stays JSON
        self.chain, self.N = chain, N
        L = chain.length
        self.ops = ops = op_table(chain)
        weight = [_weight(chain, o) for o in ops]
        V = values(chain)
        h = self.h = highspy.Highs()
        h.silent()
        self._impossible = False
        add = h.addConstr

        def constr(expr):  # a comparison of constants is decided here
            if isinstance(expr, bool):
                self._impossible |= not expr
            else:
                add(expr)

        h.addConstr = constr
        M = ub + max([o.dur for o in ops] + [0.0]) + 1.0
        B = lambda: h.addBinary()  # noqa: E731
        T = lambda: h.addVariable(lb=0.0, ub=M)  # noqa: E731
        js = list(range(-1, L + 1))
        dev0 = {v: 0 for v in V}
        dev, host, leave = [dev0], [dict(dev0)], [dict(dev0)]
        bn = [{j: int(j == L) for j in js}]
        zero = {v: 0.0 for v in V}
        R, Q = [zero], [dict(zero)]
        C, H, O = [0.0], [0.0], [0.0]
        self.u = u = []
        comp_time, copy_time_ = [], []  # per position: the duration on each stream
        # the normal form (O.20): pf[v], a prefetch of v not yet touched by a compute op
        pf = [dict(dev0)]
        touch = {v: [k for k, o in enumerate(ops) if v in o.reads or
                     (o.cond is not None and o.cond[0] == v)] for v in V}
        charged, moved = [], []  # O.21's count: transfers <= the compute ops' weights
        act_prev = None
        x0 = chain.x_size[0]
        for p in range(1, N + 1):
            up = {k: B() for k in range(len(ops))}
            u.append(up)
            act = sum(up.values())
            h.addConstr(act <= 1)
            if act_prev is not None:
                h.addConstr(act <= act_prev)
            act_prev = act
            comp = sum(up[k] for k, o in enumerate(ops) if o.compute)
            offs = sum(up[k] for k, o in enumerate(ops) if o.off)
            d, hs, lv = {v: B() for v in V}, {v: B() for v in V}, {v: B() for v in V}
            b = {j: B() for j in js}
            h.addConstr(sum(b.values()) == 1)
            pd, ph, pl, pb = dev[-1], host[-1], leave[-1], bn[-1]
            # preconditions
            for k, o in enumerate(ops):
                for v in o.pre_dev:
                    h.addConstr(up[k] <= pd[v])
                for v in o.pre_not_dev:
                    h.addConstr(up[k] + pd[v] <= 1)
                for v in o.pre_host:
                    h.addConstr(up[k] <= ph[v])
                if o.off is not None:  # the referee refuses a second offload of a value
                    # whose device copy is still leaving (Off v, Pre v, Off v)
                    h.addConstr(up[k] + pl[o.off] <= 1)
                if normal_form:
                    if o.off is not None:  # (P): a prefetch is touched before v moves
                        h.addConstr(up[k] + pf[-1][o.off] <= 1)
                    if o.pre is not None:  # (Q): no Pre v while v's copy is leaving
                        h.addConstr(up[k] + pl[o.pre] <= 1)
                    for v in o.clears:  # (P): a prefetch is touched before v is freed
                        if k not in touch[v]:
                            h.addConstr(up[k] + pf[-1][v] <= 1)
                if o.bn_ge is not None:
                    h.addConstr(up[k] <= sum(pb[j] for j in js if j >= o.bn_ge))
                if o.bn_eq is not None:
                    h.addConstr(up[k] <= pb[o.bn_eq])
            # the conditional unsaved output of Fall_i
            made = {v: [] for v in V}
            for k, o in enumerate(ops):
                if o.cond is not None:
                    v, i = o.cond
                    z = B()
                    h.addConstr(z <= up[k])
                    h.addConstr(z + pd[v] <= 1)
                    h.addConstr(z + pb[i] <= 1)
                    h.addConstr(z >= up[k] - pd[v] - pb[i])
                    made[v].append(z)
            def frame(now, before, sets, clears):
                # a flag is set by any of sets, cleared by any of clears, else kept
                for s_ in sets:
                    h.addConstr(now >= s_)
                for c_ in clears:
                    h.addConstr(now + c_ <= 1)
                h.addConstr(now <= before + sum(sets))
                h.addConstr(now >= before - sum(clears))

            # frame: device, host, leaving
            for v in V:
                frame(d[v], pd[v], [up[k] for k, o in enumerate(ops) if v in o.sets] + made[v],
                      [up[k] for k, o in enumerate(ops) if v in o.clears])
                frame(hs[v], ph[v], [up[k] for k, o in enumerate(ops) if v in o.hset],
                      [up[k] for k, o in enumerate(ops) if v in o.hclear] + made[v])
                offv = [up[k] for k, o in enumerate(ops) if o.off == v]
                h.addConstr(lv[v] >= pl[v] - comp)
                h.addConstr(lv[v] <= pl[v] + sum(offv))
                h.addConstr(lv[v] + comp <= 1)
                for s_ in offv:
                    h.addConstr(lv[v] >= s_)
            if normal_form:
                pn = {v: B() for v in V}
                for v in V:
                    frame(pn[v], pf[-1][v], [up[k] for k, o in enumerate(ops) if o.pre == v],
                          [up[k] for k in touch[v]])
                pf.append(pn)
                charged += [weight[k] * up[k] for k, o in enumerate(ops) if weight[k]]
                moved += [up[k] for k, o in enumerate(ops) if not o.compute]
            for j in js:
                into = [up[k] for k, o in enumerate(ops) if o.bn_move and o.bn_move[1] == j]
                out = [up[k] for k, o in enumerate(ops) if o.bn_move and o.bn_move[0] == j]
                h.addConstr(b[j] == pb[j] + sum(into) - sum(out))
            # memory: before the op (leaving copies released by a compute op) plus its adds
            held = x0 + sum(size(chain, v) * pd[v] for v in V) + \
                sum(chain.x_size[j + 1] * pb[j] for j in js if j < L)
            left = sum(size(chain, v) * pl[v] for v in V)
            h.addConstr(held + sum(o.add * up[k] for k, o in enumerate(ops) if o.compute)
                        <= budget)
            h.addConstr(held + left + sum(o.add * up[k] for k, o in enumerate(ops) if o.pre)
                        <= budget)
            # times
            S, E, D = T(), T(), T()
            Cp, Hp, Op = T(), T(), T()
            Rp, Qp = {v: T() for v in V}, {v: T() for v in V}
            h.addConstr(E == S + sum(o.dur * up[k] for k, o in enumerate(ops)))
            comp_time += [o.dur * up[k] for k, o in enumerate(ops) if o.compute and o.dur]
            copy_time_ += [o.dur * up[k] for k, o in enumerate(ops) if not o.compute and o.dur]
            h.addConstr(S >= C[-1] - M * offs)
            h.addConstr(S >= O[-1] - M * (1 - comp))
            h.addConstr(S >= H[-1] - M * comp)
            h.addConstr(D >= E)
            h.addConstr(Cp >= C[-1])
            h.addConstr(Cp >= E - M * (1 - comp))
            h.addConstr(Hp >= H[-1])
            h.addConstr(Hp >= E - M * (1 - act + comp))
            h.addConstr(Op >= O[-1] - M * comp)
            h.addConstr(Op >= D - M * (1 - offs))
            for v in V:
                rd = [up[k] for k, o in enumerate(ops) if v in o.reads]
                offv = [up[k] for k, o in enumerate(ops) if o.off == v]
                mk = [up[k] for k, o in enumerate(ops) if v in o.makes] + made[v]
                if rd:
                    h.addConstr(S >= R[-1][v] - M * (1 - sum(rd)))
                    h.addConstr(Qp[v] >= E - M * (1 - sum(rd)))
                for s_ in offv:
                    h.addConstr(S >= R[-1][v] - M * (1 - s_))
                    h.addConstr(D >= Q[-1][v] - M * (1 - s_))
                h.addConstr(Rp[v] >= R[-1][v] - M * sum(mk))
                h.addConstr(Qp[v] >= Q[-1][v] - M * sum(mk))
                if mk:
                    h.addConstr(Rp[v] >= E - M * (1 - sum(mk)))
            dev.append(d), host.append(hs), leave.append(lv), bn.append(b)
            R.append(Rp), Q.append(Qp), C.append(Cp), H.append(Hp), O.append(Op)
        h.addConstr(bn[-1][-1] == 1)
        # valid cuts (every valid schedule meets them, O.14's proof): each backward and
        # the loss run exactly once, each stage's Fall at least once
        for j in range(-1, L):
            once = [up[k] for up in u for k, o in enumerate(ops)
                    if o.bn_move and o.bn_move[1] == j]
            h.addConstr(sum(once) == 1)
        for i in range(L):
            falls = [up[k] for up in u for k, o in enumerate(ops) if o.token == f"Fall{i}"]
            h.addConstr(sum(falls) >= 1)
        if normal_form:
            for v in V:  # (P): no prefetch left untouched at the end
                h.addConstr(pf[-1][v] == 0)
            if moved:  # O.21: every transfer is charged to a compute op
                h.addConstr(sum(moved) <= sum(charged))
        self.Z = Z = h.addVariable(lb=0.0, ub=ub)
        for t in (C[-1], H[-1], O[-1]):
            h.addConstr(Z >= t)
        # O.14's valid cuts: each stream's ops run one after another within the makespan
        for durs in (comp_time, copy_time_):
            if durs:
                h.addConstr(Z >= sum(durs))
        self.binaries = N * (len(ops) + (4 if normal_form else 3) * len(V) + len(js))

    def schedule(self) -> Schedule:
        h = self.h
        out = []
        for up in self.u:
            for k, var in up.items():
                if h.val(var) > 0.5:
                    out.append(self.ops[k].token)
        return Schedule.parse(" ".join(out))

    def start_from(self, schedule: Schedule) -> bool:
        """Give HiGHS a valid schedule of at most N ops as a start: its op binaries (the
        read-source variant the referee's state picks), every other op binary 0; HiGHS
        completes the state and the times (a start only: it changes no answer, and one
        it cannot complete is dropped).  False when the schedule does not fit here."""
        import numpy as np

        from remat_theory.model.offload import OffloadState, step

        chain, ops = self.chain, self.ops
        if len(schedule) > self.N:
            return False
        st = OffloadState.initial(chain)
        idx, val = [], []
        for p, op in enumerate(schedule):
            def on(v):
                bits = st.dev.plain if v[0] == "x" else st.dev.tapes
                return bool(bits >> v[1] & 1)
            pick = [k for k, o in enumerate(ops) if o.token == op.token
                    and all(on(v) for v in o.pre_dev) and not any(on(v) for v in o.pre_not_dev)]
            if not pick:
                return False
            for k, var in self.u[p].items():
                idx.append(var.index)
                val.append(1.0 if k == pick[0] else 0.0)
            r = step(chain, st, op)
            if isinstance(r, str):
                return False
            st = r[0]
        for up in self.u[len(schedule):]:
            for var in up.values():
                idx.append(var.index)
                val.append(0.0)
        self.h.setSolution(len(idx), np.array(idx, dtype=np.int32), np.array(val, dtype=float))
        return True

    def solve(self, time_limit: float | None):
        h = self.h
        if time_limit is not None:
            h.setOptionValue("time_limit", float(time_limit))
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", _GAP_TOLERANCE)
        if self._impossible:
            import highspy
            return highspy.HighsModelStatus.kInfeasible, None
        h.minimize(self.Z)
        return h.getModelStatus(), h.getInfo()


def class_key(n: int) -> str:
    """The class the answers with ``max_ops = n`` are about."""
    return f"{classes.OFFLOAD_KEY}<={n}"


def offload_incumbent(chain: Chain, budget: int):
    """A valid schedule to start from and bound the makespan: the best of dp-offload's
    (exact memory when small, else slots; its class contains store-all) and the
    baselines save-on-cpu and offload-all (outside its class, sometimes better: O.11),
    fewer ops first on a tie; else a fewest-ops schedule over placements; None when none
    fits."""
    found = []
    for name, opts in (("dp-offload", {}), ("dp-offload", {"slots": 64}),
                       ("save-on-cpu", {}), ("offload-all", {})):
        if name == "dp-offload" and any(f[2] == name for f in found):
            continue  # the exact table answered: no need for slots
        try:
            sol = registry.solve(chain, budget, name, **opts)
        except (SolverError, SolverContractError):
            continue
        if sol.schedule is not None and sol.makespan is not None:
            found.append((sol.makespan, len(sol.schedule), name, sol.schedule))
    if not found:
        return _fewest_ops_schedule(chain, budget)
    best = min(found, key=lambda f: (f[0], f[1]))
    return best[3], best[0]


def _fewest_ops_schedule(chain: Chain, budget: int, max_states: int = 200_000):
    """(schedule, makespan) of a valid schedule within ``budget`` with the fewest ops: a
    breadth-first search over where the values are (memory and validity depend on that
    alone, O.3), for the budgets where neither dp-offload's class nor the baselines fit
    (an unsaved output's tape must move, O.11 c); None when none is found within
    ``max_states`` placements."""
    from collections import deque

    from remat_theory.model.offload import OffloadState, step
    from solvers.offload_exhaustive import moves

    st0 = OffloadState.initial(chain)
    if st0.memory > budget:
        return None
    seen = {st0.logical()}
    queue = deque([(st0, ())])
    while queue and len(seen) <= max_states:
        st, path = queue.popleft()
        for op in moves(chain, st, True, 0):
            r = step(chain, st, op)
            if isinstance(r, str) or r[1].peak > budget:
                continue
            new = r[0]
            if new.logical() in seen:
                continue
            if new.is_final():
                schedule = Schedule(path + (op,))
                return schedule, simulate(chain, schedule).makespan
            seen.add(new.logical())
            queue.append((new, path + (op,)))
    return None


#: The MIP's absolute optimality gap: a makespan within it of the dual bound is optimal.
_GAP_TOLERANCE = 1e-9

#: proven=True refuses a model with more positions than this (HiGHS, with the normal form
#: of O.20-O.22: 1 stage in under a second; 2 stages and 12-22 positions mostly in
#: seconds, sometimes past 20 s: benchmarks/results/offload_ilp_certified.json).
DEFAULT_MAX_PROVEN_OPS = 24


def _certify(chain: Chain, N: int, value: float | None) -> tuple:
    """(class, length bound, longer bound, why not all): the class an answer of the
    N-position model at the makespan ``value`` is optimal for.  ``all+offload`` when no
    schedule of more than N ops is shorter than ``value``: every such schedule takes at
    least ``longer`` = :func:`longer_schedule_bound` (N) (O.15), so ``value <= longer``
    suffices (it holds whenever ``length_bound(value) <= N``, O.14).  Else
    ``all+offload<=N`` and the reason."""
    lb = None if value is None else length_bound(chain, value)
    longer = longer_schedule_bound(chain, N)
    if value is not None and longer is not None and value <= longer:
        return classes.OFFLOAD_KEY, lb, longer, ""
    if longer is None:
        why = ("a forward of this chain takes no time: no length bound, so not proven "
               "over longer schedules and no lower bound over them")
    elif lb is None:
        why = "no makespan known"
    else:
        why = (f"a better schedule in normal form would have at most {lb} ops (O.14, "
               f"O.21; some optimal schedule is in that form, O.20), more than the "
               f"{N} positions: not proven over longer schedules (proven=true or "
               f"max_ops >= {lb} proves it); every schedule of more than {N} ops takes "
               f"at least {longer:.10g} (O.15)")
    return class_key(N), lb, longer, why


def _bound_info(chain: Chain, extra: dict, N: int, within: float | None) -> tuple:
    """(bound, class it is over) from a lower bound ``within`` the schedules of at most N
    ops (None: none known) and O.15: every schedule of more than N ops takes at least
    ``longer`` = :func:`longer_schedule_bound` (N), every schedule at all at least
    ``longer_schedule_bound(0)`` (the ideal makespan up to the float slack), so
    ``max(that, min(within, longer))`` bounds every schedule.  Records the parts and the
    class in ``extra``; without a length bound (a zero-time forward) only ``within``,
    over ``all+offload<=N``."""
    longer = longer_schedule_bound(chain, N)
    extra["bound_at_most_n"] = within
    extra["longer_bound"] = longer
    if longer is not None:
        every = longer_schedule_bound(chain, 0)
        bound = max(every, longer if within is None else min(within, longer))
        over = classes.OFFLOAD_KEY
    else:
        bound, over = within, class_key(N)
    extra["bound_over"] = over
    return bound, over


@register(NAME, optimal_for=classes.OFFLOAD_OPS_FAMILY, exact=True,
          description="MILP of the two-stream model (positions x ops, exact times by "
                      "big-M): optimal over the schedules of at most max_ops operations, "
                      "and over all schedules when max_ops reaches the length bound of "
                      "the optimum (proofs/offload.md O.14, O.20-O.22; proven=true "
                      "picks it); a "
                      "certified lower bound at a time limit.",
          classes=(classes.OFFLOAD_OPS_FAMILY, classes.OFFLOAD_KEY),
          max_stages=2, reference_max_stages=3,
          supports=("fall_time", "fall_overhead", "output_saved", "bandwidth"),
          options={"max_ops": Option("int", "positions of the model: the longest schedule "
                                     "it covers (default: the incumbent's length + "
                                     "extra_ops, or with proven the length bound)",
                                     minimum=1, none=True),
                   "extra_ops": Option("int", "positions beyond the incumbent's length "
                                       "(when max_ops is not given)", minimum=0),
                   "proven": Option("bool", "take as many positions as a schedule better "
                                    "than the incumbent can have (O.14, O.21), so that the "
                                    "answer is the optimum over all schedules"),
                   "max_proven_ops": Option("int", "with proven: refuse beyond this many "
                                            "positions (a guard)", minimum=1),
                   "max_stages": Option("int", "the longest chain modelled (a guard)",
                                        minimum=1),
                   "time_limit": Option("seconds", "for the MIP solve (status time_limit "
                                        "past it, with the incumbent and the dual bound)",
                                        none=True)})
def solve_ilp_offload(chain: Chain, budget: int, *, max_ops: int | None = None,
                      extra_ops: int = DEFAULT_EXTRA_OPS, proven: bool = False,
                      max_proven_ops: int = DEFAULT_MAX_PROVEN_OPS,
                      max_stages: int = DEFAULT_MAX_STAGES,
                      time_limit: float | None = None) -> Solution:
    """The optimum over the schedules of at most ``max_ops`` operations (module
    docstring), proven by HiGHS, and over all schedules when ``max_ops`` reaches the
    length bound of that optimum (O.14: the class says which); at ``time_limit`` the best
    schedule found and the dual bound (status ``time_limit``, "not proven optimal")."""
    import highspy

    if chain.length > max_stages:
        raise SolverLimitError(
            f"{NAME} on {chain.length} stages may take hours (a few seconds at 2 stages, "
            f"10-100 s at 3); max_stages = {max_stages}", solver=NAME,
            remedies=(Remedy(options=(("max_stages", AT_LEAST, chain.length),),
                             note="to force it, best with a time_limit"),))
    t0 = time.perf_counter()
    inc = offload_incumbent(chain, budget)
    if proven and max_ops is None:
        if inc is None:
            return _infeasible_or_unbounded(chain, budget, None)
        bound_n = length_bound(chain, inc[1])
        if bound_n is None:
            raise SolverLimitError(
                f"{NAME}: proven needs a positive time for every forward (O.14); this "
                f"chain has one that takes none, so no length bound exists; "
                f"max_ops = N gives the optimum over schedules of at most N ops",
                solver=NAME)
        if bound_n > max_proven_ops:
            raise SolverLimitError(
                f"{NAME}: proven needs {bound_n} positions here (the length bound of the "
                f"incumbent's makespan {inc[1]:g}, O.14 and O.21); max_proven_ops = "
                f"{max_proven_ops}", solver=NAME,
                remedies=(Remedy(options=(("max_proven_ops", AT_LEAST, bound_n),),
                                 note="the MILP may then take very long"),))
        max_ops = max(bound_n, len(inc[0]))
    if inc is None and max_ops is None:
        max_ops = 2 * (2 * chain.length + 1) + extra_ops
    N = max_ops if max_ops is not None else len(inc[0]) + extra_ops
    if inc is not None and len(inc[0]) > N:
        inc = None
    ub = inc[1] if inc is not None else _loose_upper_bound(chain, N)
    nops = len(op_table(chain))
    binaries = N * (nops + 8 * chain.length + chain.length + 2)
    if binaries > MAX_BINARIES:
        raise SolverLimitError(f"{NAME}: {chain.length} stages and {N} positions make about "
                               f"{binaries:,} binaries (limit {MAX_BINARIES:,})", solver=NAME)
    model = Model(chain, budget, N, ub)
    if inc is not None:  # a start for HiGHS (its answer is the MILP's either way)
        model.start_from(inc[0])
    left = None if time_limit is None else max(0.1, time_limit - (time.perf_counter() - t0))
    status, info = model.solve(left)
    st = highspy.HighsModelStatus
    extra = {"max_ops": N, "binaries": model.binaries}
    if status == st.kOptimal:
        schedule = model.schedule()
        sim = simulate(chain, schedule)
        cls, lb, longer, why = _certify(chain, N, sim.makespan)
        extra["length_bound"] = lb
        bound, _ = _bound_info(chain, extra, N, sim.makespan)
        msg = (f"optimal over all schedules: every schedule of more than {N} ops takes at "
               f"least {longer:.10g} (O.15), no less than this one" if not why else
               f"optimal among schedules of at most {N} operations; {why}")
        return Solution.optimal(NAME, budget, schedule, sim.makespan, sim.peak_memory,
                                optimal_for=cls, bound=bound, info=extra, message=msg)
    if status == st.kInfeasible:
        if inc is not None:  # the incumbent is a solution: the model is wrong
            raise SolverError(f"{NAME}: the model is infeasible but {inc[0]} fits")
        return _infeasible_or_unbounded(chain, budget, N, extra)
    within = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None
    if within is None:
        # stopped before HiGHS had a dual bound: nothing is known of the schedules of at
        # most N ops but what binds every schedule (O.15 a: W_0, the ideal makespan less
        # the float slack; None with a zero-time forward).  Not W_N: that bounds only the
        # longer schedules, and taking it alone here once reported a bound above the
        # optimum (and, with the closing rule below, a false optimum)
        within = longer_schedule_bound(chain, 0)
    schedule = makespan = peak = None
    if info.primal_solution_status == 2:  # feasible
        schedule = model.schedule()
        sim = simulate(chain, schedule)
        schedule, makespan, peak = schedule, sim.makespan, sim.peak_memory
    elif inc is not None:
        schedule, makespan = inc
        peak = simulate(chain, schedule).peak_memory
    # the dual bound covers the schedules of at most N ops (the MILP's feasible set: the
    # incumbent caps Z, and an optimum is at most it); O.15 bounds the longer ones
    bound, cls = _bound_info(chain, extra, N, within)
    if (makespan is not None and bound is not None and cls == classes.OFFLOAD_KEY
            and bound >= makespan - _GAP_TOLERANCE):
        # the bound over all schedules (O.15 c) met a valid schedule's makespan, within the
        # MIP's own optimality tolerance (mip_abs_gap): it is optimal, whether HiGHS had
        # found that schedule itself or not (it starts without the incumbent)
        extra["closed_at_time_limit"] = True
        return Solution.optimal(NAME, budget, schedule, makespan, peak,
                                optimal_for=cls, bound=min(bound, makespan), info=extra,
                                message="optimal over all schedules: the lower bound over "
                                        "all schedules (O.15) reached this schedule's "
                                        "makespan when the time limit stopped the MIP")
    return Solution.time_limit(NAME, budget, schedule=schedule, makespan=makespan,
                               peak_memory=peak, bound=bound, optimal_for=cls, info=extra,
                               message=f"time limit reached: not proven optimal; lower "
                                       f"bound {bound} over {cls}")


def _infeasible_or_unbounded(chain: Chain, budget: int, N: int | None,
                             extra: dict | None = None) -> Solution:
    """No schedule of at most N ops (N None: none tried) fits: infeasible over all
    schedules when the budget is below the exact smallest feasible one (O.3), else only in
    the class of at most N ops, saying that a longer schedule fits."""
    from solvers.offload_exhaustive import min_feasible_budget

    extra = dict(extra or {})
    mfb = min_feasible_budget(chain)
    if budget < mfb:
        return Solution.infeasible(NAME, budget, optimal_for=classes.OFFLOAD_KEY,
                                   min_budget=mfb, info=extra,
                                   message=f"no schedule fits in {budget}; the smallest "
                                           f"feasible budget is {mfb}")
    if N is None:
        raise SolverLimitError(
            f"{NAME}: proven found no incumbent to bound the length (dp-offload and "
            f"store-all do not fit in {budget}, though a schedule fits from {mfb}); "
            f"give max_ops", solver=NAME)
    # every schedule that fits has more than N ops: O.15 bounds its makespan
    longer = bound = longer_schedule_bound(chain, N)
    extra.update(bound_at_most_n=None, longer_bound=longer,  # none of at most N ops fits
                 bound_over=classes.OFFLOAD_KEY if longer is not None else class_key(N))
    return Solution.infeasible(NAME, budget, optimal_for=class_key(N), info=extra,
                               bound=bound,
                               message=f"no schedule of at most {N} operations fits in "
                                       f"{budget} (a longer one does: the smallest feasible "
                                       f"budget is {mfb})" + (
                                           "" if longer is None else
                                           f"; every schedule that fits takes at least "
                                           f"{longer:.10g} (O.15)"))


def _loose_upper_bound(chain: Chain, N: int) -> float:
    """A makespan no schedule of N ops exceeds: every op's longest duration, N times."""
    longest = max(list(chain.fwd_time) + list(chain.fall_time) + list(chain.bwd_time)
                  + [copy_time(chain, size(chain, v)) for v in values(chain)
                     if chain.bandwidth] + [0.0])
    return N * (longest if math.isfinite(longest) else 0.0) + 1.0
