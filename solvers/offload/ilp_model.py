"""The MILP of ``ilp-offload`` (module docstring of :mod:`solvers.offload.ilp`): the rules
of every op of the two-stream model (:func:`op_table`) and the HiGHS model over N
positions (:class:`Model`): build, warm start, solve, decode."""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain
from remat_theory.model.schedule import Op, Schedule

from solvers.offload.copies import copy_time, size, values
from solvers.offload.normal import op_weight

#: The MIP's absolute optimality gap, in the model's time unit (the incumbent's makespan:
#: a relative gap): a makespan within it of the dual bound is optimal.
GAP_TOLERANCE = 1e-9
#: Durations below this fraction of the time unit are 0 in the model (HiGHS drops matrix
#: values below 1e-9 and its feasibility tolerances are 1e-7 to 1e-6: such a duration is
#: not seen anyway).  Taking them as 0 can only shorten a schedule (every time is a maximum
#: of sums of durations), so the model is then a relaxation: its optimum and dual bound are
#: lower bounds, and the schedule it returns is replayed by the referee with its real
#: times (:mod:`solvers.offload.ilp` claims an optimum only where the two meet).
NEGLIGIBLE = 1e-6


class OpRule:
    """One op of the model with the place it reads x_i from, as rules (preconditions,
    effects, reads and makes, time and memory)."""

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


def read_source(o: OpRule, src, i: int) -> None:
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
                    o = OpRule(f"Fall{i}", True, chain.fall_time[i],
                            chain.tape_size[i] + chain.fall_overhead[i])
                else:
                    o = OpRule(f"{kind}{i}", True, chain.fwd_time[i], x[i + 1] + chain.fwd_overhead[i])
                o.bn_ge = i
                read_source(o, src, i)
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
        o = OpRule("Loss", True, chain.bwd_time[L], x[L] + chain.bwd_overhead[L])
        o.bn_eq, o.bn_move = L, (L, L - 1)
        read_source(o, src, L)
        if src == "x":
            o.clears.append(("x", L))
        o.hclear.append(("x", L))
        ops.append(o)
    for i in range(L):
        for src in (["x", "t"] if i >= 1 and chain.saved(i) else [None]):
            o = OpRule(f"B{i}", True, chain.bwd_time[i], x[i] + chain.bwd_overhead[i])
            o.bn_eq, o.bn_move = i, (i, i - 1)
            o.pre_dev.append(("t", i + 1))
            o.reads.append(("t", i + 1))
            read_source(o, src, i)
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
            off = OpRule(f"Off{v[0]}{v[1]}", False, d)
            off.pre_dev.append(v)
            off.clears.append(v)
            off.hset.append(v)
            off.off = v
            pre = OpRule(f"Pre{v[0]}{v[1]}", False, d, size(chain, v))
            pre.pre_host.append(v)
            pre.sets.append(v)
            pre.hclear.append(v)
            pre.makes.append(v)
            pre.pre = v
            ops += [off, pre]
    return ops


def weight_of(chain: Chain, o: OpRule) -> int:
    """O.21's charge of a compute op (0 for a transfer)."""
    if not o.compute:
        return 0
    op = Op.parse(o.token)
    return op_weight(chain, op.kind, op.index)


class Model:
    """The MILP of the module docstring on ``chain`` at ``budget`` with ``N`` positions and
    the makespan bounded by ``ub`` (big-M).

    Numerics (issue 41: copies of a few bytes at 1e9 bytes/s, or of a terabyte at 1e-300,
    made HiGHS refuse the rows).  Times are in units of ``unit`` (the caller's makespan
    scale), so that the big-M and the makespan are about 1 whatever the chain's units.  An
    op longer than ``longest`` (the incumbent's makespan) is left out: a schedule that runs
    it ends after the incumbent, so no schedule the model must find uses it.  A duration
    below :data:`NEGLIGIBLE` units is 0 (a relaxation; ``zeroed`` lists those ops)."""

    def __init__(self, chain: Chain, budget: int, N: int, ub: float,
                 normal_form: bool = True, unit: float = 1.0, longest: float = math.inf):
        import highspy

        from solvers._highs import silence_highs_banner
        silence_highs_banner()  # before the first Highs() of the process: stdout stays JSON
        self.chain, self.N, self.unit = chain, N, unit
        L = chain.length
        ops = op_table(chain)
        self.dropped = [o.token for o in ops if o.dur > longest]
        ops = [o for o in ops if o.dur <= longest]
        self.zeroed = []
        for o in ops:
            d = o.dur / unit
            if 0 < d < NEGLIGIBLE:
                self.zeroed.append(o.token)
                d = 0.0
            o.dur = d
        ub = ub / unit
        self.ops = ops
        weight = [weight_of(chain, o) for o in ops]
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
        h.setOptionValue("mip_abs_gap", GAP_TOLERANCE)
        if self._impossible:
            import highspy
            return highspy.HighsModelStatus.kInfeasible, None
        h.minimize(self.Z)
        return h.getModelStatus(), h.getInfo()

