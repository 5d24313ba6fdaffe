"""The smallest budget of ``dp-offload``'s class: the recurrence of
:class:`~solvers.offload.dp_table.OffloadTable` over least feasible memory instead of time."""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain

from solvers._dp_tables import UnitChain
from solvers.offload.copies import copy_time

INF = math.inf


def min_units(uc: UnitChain, chain: Chain, recompute: bool = True) -> int:
    """The smallest budget (units of ``uc``) at which the class has a schedule: the
    recurrence of :class:`OffloadTable` over least feasible memory instead of time
    (feasibility is monotone in m), each candidate's need the largest of its thresholds
    and its subproblems' needs moved by their shifts."""
    L = uc.L
    x, th = [int(v) for v in uc.x], [int(v) for v in uc.th]
    dA, un = [int(v) for v in uc.dA], [bool(v) for v in uc.un]
    step = [int(v) for v in uc.step]
    cu = {"p": x, "t": [0] + th}
    ok = {"p": [copy_time(chain, b) < INF for b in chain.x_size],
          "t": [False] + [copy_time(chain, b) < INF for b in chain.tape_held]}
    tape, fao, fo, bneed = ([int(v) for v in a] for a in (uc.tape, uc.fao, uc.fo, uc.bneed))
    K, O, RK, RO, Q, P = {}, {}, {}, {}, {}, {}

    def g(t):
        return x[t + 1] if t < L else 0

    def fresh(form, s, t):
        return min(K[s, t], O.get((form, s, t), INF)) if s else K[s, t]

    def cform(s):  # option A's child (s+1, t): its container's form
        return "p" if un[s + 1] else "t"

    def pend(s, t, c, pre=None, form=None):
        key = (s, t, c, pre, form)
        if key in P:
            return P[key]
        cp = 0 if pre is None else pre
        if s == t == L:  # the loss takes deferred offloads (O.25)
            P[key] = max(0, x[L] + int(uc.bo[L])) if pre is None else INF
            return P[key]
        if s == t:
            P[key] = max(0, g(t) + tape[s] + fao[s], bneed[s] - c + cp)
            return P[key]
        own = cform(s - 1) if form is None else form
        best = opt_a(s, t, None, cp, c)
        # O.25: the late offloads passed on to the child (option A; option B, part kept)
        best = min(best, max(g(t) + tape[s] + fao[s], bneed[s] + cp - c,
                             pend(s + 1, t, c) + dA[s]))
        if recompute:
            run = 0
            for k in range(s + 1, t + 1):
                if k > s + 1:
                    run = max(run, step[k - 1])
                part = K[s, k - 1] if pre is None else qpre(s, k - 1, None, cp)
                best = min(best, max(g(t) + x[s + 1] + fo[s], g(t) + run,
                                     pend(k, t, c, None, "p") + x[k], part - c))
        if ok[own][s] and not (own == "p" and un[s]):
            best = min(best, opt_a(s, t, own, cp, c))
        if recompute and pre is None:
            fck = g(t) + x[s + 1] + fo[s]
            best = min(best, max(fck, RK[s, t] - c))
            if ok[own][s]:
                best = min(best, max(fck, RO[own, s, t] - c))
        P[key] = max(0, best)
        return P[key]

    def qpre(s, t, form, cp):
        key = (s, t, form, cp)
        if key not in Q:
            if s == t:
                Q[key] = max(0, x[L] + int(uc.bo[L]) + cp if t == L else
                             max(g(t) + tape[s] + fao[s], bneed[s] + cp))
            else:
                best = opt_a(s, t, None, cp)
                if s >= 1 and form is not None and ok[form][s] and \
                        not (form == "p" and un[s]):
                    best = min(best, opt_a(s, t, form, cp))
                Q[key] = max(0, best)
        return Q[key]

    def rneed(s, form):
        return th[s] + x[s + 1] + tape[s - 1] + fao[s - 1] - cu[form][s]

    def evict(s, t, form, how="fall"):
        if s == L:
            return INF
        if how == "fall":
            read, rn = th[s - 1], rneed(s, form)
        else:  # Fck_{s-1} recreates a plain x_s (O.25)
            read, rn = x[s], th[s] + x[s + 1] + x[s] + fo[s - 1] - cu[form][s]
        lo = max(g(t) + tape[s] + fao[s], bneed[s] + read - cu[form][s], rn)
        return max(0, lo) if s == t else max(0, opt_a(s, t, form, ev=lo))

    def opt_a(s, t, form, bc=None, cq=None, ev=None):
        ch = cform(s)
        c = cu[form][s] if form else 0
        h = th[s]
        tape_moves = un[s + 1] and ok["t"][s + 1]
        if ev is not None:
            lo = ev
        elif bc is None and cq is None:
            lo = fneed(s, t)
        else:
            lo = max(g(t) + tape[s] + fao[s], bneed[s] + (bc or 0) - (cq or 0))
        cmodes = ("keep",) if form is None else (("early",) if cq is not None else
                                                 ("early", "late"))
        best = INF
        for cm in cmodes:
            for tm in (("keep", "early", "late") if tape_moves else ("keep",)):
                if "late" in (cm, tm) and s + 1 >= L:
                    continue
                shift = (-dA[s] + (cq or 0) + (c if cm == "early" else 0)
                         + (h if tm == "early" else 0))
                pc = (c if cm == "late" else 0) + (h if tm == "late" else 0)
                early_units = {0}  # the units prefetched early: any subset of the moved
                for add in ((c,) if cm != "keep" and ev is None else ()) + \
                        ((h,) if tm != "keep" and ev is None else ()):
                    early_units |= {u + add for u in early_units}
                for ue in sorted(early_units):
                    for early_pre in ((False, True) if ue == 0 and ev is None and
                                      (cm != "keep" or tm != "keep") else (ue > 0,)):
                        if "late" in (cm, tm):
                            need = pend(s + 1, t, pc, ue if early_pre else None)
                        elif early_pre:
                            need = qpre(s + 1, t, ch, ue)
                        else:
                            need = fresh(ch, s + 1, t)
                        best = min(best, max(lo, need - shift))
        return best

    def fneed(s, t):
        return max(g(t) + tape[s] + fao[s], bneed[s])

    for n in range(L + 1):
        for s in range(L + 1 - n):
            t = s + n
            if n == 0:
                K[s, t] = max(0, x[L] + int(uc.bo[L]) if t == L else fneed(s, t))
                continue
            if recompute:
                run, best = 0, INF
                for k in range(s + 1, t + 1):
                    if k > s + 1:
                        run = max(run, step[k - 1])
                    best = min(best, max(g(t) + run, fresh("p", k, t) + x[k], K[s, k - 1]))
                RK[s, t] = max(0, best)
                if s:
                    for form in ("p", "t"):
                        if ok[form][s]:
                            c, run, best = cu[form][s], 0, INF
                            for k in range(s + 1, t + 1):
                                if k > s + 1:
                                    run = max(run, step[k - 1])
                                best = min(best, max(g(t) + run - c,
                                                     fresh("p", k, t) + x[k] - c,
                                                     fresh(form, s, k - 1)))
                            RO[form, s, t] = max(0, best)
                            # O.26: C offloaded there and fetched ahead; late, fetched
                            # before the part or ahead
                            run, best = 0, INF
                            for k in range(s + 1, t + 1):
                                if k > s + 1:
                                    run = max(run, step[k - 1])
                                part = fresh(form, s, k - 1)
                                best = min(best, max(g(t) + run - c,
                                                     qpre(k, t, "p", c) + x[k] - c, part))
                                if k < L:
                                    for pre in (None, c):
                                        best = min(best, max(g(t) + run,
                                                             pend(k, t, c, pre, "p") + x[k],
                                                             part))
                            RO[form, s, t] = min(RO[form, s, t], max(0, best))
            best = opt_a(s, t, None)
            fck = g(t) + x[s + 1] + fo[s]
            if recompute:
                best = min(best, max(fck, RK[s, t]))
                if not un[s + 1] and not un[s]:  # evictions (O.18)
                    if ok["t"][s + 1]:
                        best = min(best, max(fneed(s, t), evict(s + 1, t, "t") + dA[s]))
                        best = min(best, max(fneed(s, t), x[s + 1] + tape[s] + fao[s],
                                             evict(s + 1, t, "t", "fck") + dA[s]))
                    if ok["p"][s + 1]:
                        best = min(best, max(fck, bneed[s], evict(s + 1, t, "p") + x[s + 1]))
            K[s, t] = max(0, best)
            if s == 0:
                continue
            for form in ("p", "t"):
                if not ok[form][s]:
                    continue
                best = INF if form == "p" and un[s] else opt_a(s, t, form)
                if recompute:
                    best = min(best, max(fck, RO[form, s, t]))
                O[form, s, t] = max(0, best)
    return int(uc.x[0]) + K[0, L]

