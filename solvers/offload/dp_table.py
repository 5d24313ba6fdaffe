"""The tables of ``dp-offload`` (the class and the recurrence: the docstring of
:mod:`solvers.offload.dp`): :class:`OffloadTable` builds every row over memory units and
rebuilds an optimal schedule from them."""
from __future__ import annotations

import math

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InternalError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, OffT, OffX, PreT, PreX

from solvers._dp_tables import NEVER, Deadline, UnitChain
from solvers._schedules import unfold
from solvers.dp import skewed_saturation
from solvers.offload.copies import copy_time
from solvers.offload.dp_defer import DeferMixin
from solvers.offload.dp_split import Split, least, shifted

NAME = "dp-offload"
INF = math.inf
ROX = ("ea", "lp", "la")


class OffloadTable(DeferMixin):
    """The tables of the module docstring for m = 0..W-1 (W - 1 at least every segment's
    store-all peak).  No choice is stored: the rebuild recomputes a cell's candidates at
    one m and follows one that reaches the cell's value."""

    def __init__(self, uc: UnitChain, chain: Chain, deadline: Deadline = NEVER,
                 recompute: bool = True, kernel: str = "numpy"):
        self.uc, self.chain, self.recompute = uc, chain, recompute
        self.kernel = kernel  # "numpy" or "numba": how least() reduces option B's splits
        L = self.L = uc.L
        sat = skewed_saturation(uc)
        self.W = W = int(max(1, sat.max() + 1))
        self.x = [int(v) for v in uc.x]
        self.th = [int(v) for v in uc.th]
        self.dA = [int(v) for v in uc.dA]  # option A's child runs at m - dA[s]
        self.un = [bool(v) for v in uc.un]  # x_i unsaved (a plain value Fall_i frees)
        self.step = [int(v) for v in uc.step]
        tx = [copy_time(chain, b) for b in chain.x_size]  # plain x_s
        tt = [INF] + [copy_time(chain, b) for b in chain.tape_held]  # tape t_s
        self.cu = {"p": self.x, "t": [0] + self.th}  # a value's units, by form
        self.ct = {"p": tx, "t": tt}
        self.cf = [float(v) for v in uc.cf]
        self.fall, self.bwd, self.fwd = ([float(v) for v in a] for a in (uc.fall, uc.bwd, uc.fwd))
        self.K, self.O, self.RK, self.RO, self.Fr = {}, {"p": {}, "t": {}}, {}, \
            {"p": {}, "t": {}}, {"p": {}, "t": {}}
        # option B's rests with the container moved late or fetched ahead (O.26)
        self.RX = {f: {v: {} for v in ROX} for f in ("p", "t")}
        self._qpre = {}  # (s, t, form, seconds, units) -> qpre's row
        self._pend = {}  # (s, t, delta, units, pre) -> pend's row
        for n in range(L + 1):
            deadline.check(f"building the tables (segments of length {n} of {L})")
            # pend and qpre rows are kept: a deferral (O.25) asks for the pending rows of
            # every shorter segment with the same end, and dropping them made the
            # recomputation 3x slower at 30 stages (the memory is in _refuse_if_too_big)
            for s in range(L + 1 - n):
                t = s + n
                if n > 0 and recompute:
                    self.RK[s, t] = least(self._cands_rk(s, t), W, self.kernel)
                    if s > 0:
                        for form in ("p", "t"):
                            if self.ct[form][s] < INF:
                                self.RO[form][s, t] = least(self._cands_ro(form, s, t), W,
                                                            self.kernel)
                                for v in ROX:
                                    self.RX[form][v][s, t] = least(
                                        self._cands_rox(form, s, t, v), W, self.kernel)
                kb = self.K[s, t] = least(self._cands_k(s, t), W, self.kernel)
                if s == 0 or n == 0:
                    continue
                for form in ("p", "t"):
                    if self.ct[form][s] == INF:
                        continue
                    ob = self.O[form][s, t] = least(self._cands_o(form, s, t), W,
                                                    self.kernel)
                    self.Fr[form][s, t] = np.minimum(kb, ob)
        self.deadline = deadline

    # -- row helpers ------------------------------------------------------------------
    def at(self, row, d):
        """out[m] = row[min(m + d, W - 1)]; inf where m + d < 0."""
        return shifted(row, d, self.W)

    def cut(self, row, lo):
        """``row`` with inf below ``lo`` (memory units)."""
        if lo > 0:
            row[:min(int(lo), self.W)] = INF
        return row

    def fresh(self, form, s, t):
        """F: the better of keeping and offloading a fresh segment's container."""
        return self.Fr[form][s, t] if s and (s, t) in self.Fr[form] else self.K[s, t]

    def g(self, t):
        return self.x[t + 1] if t < self.L else 0

    def fneed(self, s, t):
        uc = self.uc
        return max(self.g(t) + int(uc.tape[s] + uc.fao[s]), int(uc.bneed[s]))

    def _child_form(self, s):
        """The container form of option A's child (s+1, t): an unsaved plain x_{s+1}, else
        the tape t_{s+1}."""
        return "p" if self.un[s + 1] else "t"

    def _tape_moves(self, s):
        """Whether option A of a segment starting at s may move the tape t_{s+1} of an
        unsaved output (it holds no input: no container)."""
        return self.un[s + 1] and self.ct["t"][s + 1] < INF

    # -- candidates: (row over the cell's m, plan); plan(m) -> (ops now, items later) ----
    def _cands_rk(self, s, t):
        """Option B's rest after Fck_s with the container kept: Fn_{s+1} .. Fn_{k-1}, the
        child (k, t), the part (s, k-1) kept; below g + (the Fn steps' peak)."""
        g, x, cf = self.g(t), self.x, self.cf
        run = 0
        for k in range(s + 1, t + 1):
            if k > s + 1:
                run = max(run, self.step[k - 1])
            yield Split(self.fresh("p", k, t), -x[k], self.K[s, k - 1], 0,
                        cf[k] - cf[s + 1], g + run), ("rk", k)

    def _cands_ro(self, form, s, t):
        """Option B's rest after Fck_s Off C: the pass under m + c, the child (k, t) at
        m + c - x_k, Pre C, the part (s, k-1) fresh."""
        g, x, cf, c = self.g(t), self.x, self.cf, self.cu[form][s]
        run = 0
        for k in range(s + 1, t + 1):
            if k > s + 1:
                run = max(run, self.step[k - 1])
            yield Split(self.fresh("p", k, t), c - x[k], self.fresh(form, s, k - 1), 0,
                        cf[k] - cf[s + 1], g + run - c), ("ro", k)

    def _fck_need(self, s, t):
        return self.g(t) + self.x[s + 1] + int(self.uc.fo[s])

    def _cands_k(self, s, t):
        L, uc = self.L, self.uc
        if s == t:
            if t == L:
                need, time_ = self.x[L] + int(uc.bo[L]), float(self.bwd[L])
            else:
                need, time_ = self.fneed(s, t), self.fall[s] + self.bwd[s]
            yield self.cut(np.full(self.W, time_), need), ("base",)
            return
        yield from self._cands_a(s, t, None)
        if self.recompute:
            yield (self.cut(self.RK[s, t] + self.fwd[s], self._fck_need(s, t)), ("B", None))
            if not self.un[s + 1] and not self.un[s]:  # evictions (O.18): the child's
                # container recreated by Fall_s, which needs x_s (an unsaved plain x_s it
                # would free, so the first Fall_s would have freed it too)
                b = self.bwd[s]
                if self.ct["t"][s + 1] < INF:
                    row = self.at(self.evict(s + 1, t, "t"), -self.dA[s]) + (self.fall[s] + b)
                    yield self.cut(row, self.fneed(s, t)), ("E", "t")
                    # O.25: recreated as a plain x_{s+1} by Fck_s for B_{s+1}, then t_{s+1}
                    # by Fall_s for B_s
                    row = (self.at(self.evict(s + 1, t, "t", "fck"), -self.dA[s])
                           + (2 * self.fall[s] + b))
                    lo = max(self.fneed(s, t), self.x[s + 1] + int(uc.tape[s] + uc.fao[s]))
                    yield self.cut(row, lo), ("E", "tk")
                if self.ct["p"][s + 1] < INF:
                    row = self.at(self.evict(s + 1, t, "p"), -self.x[s + 1]) + (self.fwd[s] + b)
                    lo = max(self._fck_need(s, t), int(self.uc.bneed[s]))
                    yield self.cut(row, lo), ("E", "p")

    def evict(self, s, t, form, how="fall"):
        """A child (s, t) of a segment that keeps its own input: its container (``form``)
        is offloaded right after its first op or one op later and never fetched back; its
        parent's ``Fall_{s-1}`` runs again right before the child's last op ``B_s``,
        recreating it (the tape t_s holds x_s: the parent's output is saved); ``how`` =
        "fck": ``Fck_{s-1}`` recreates a plain x_s instead (O.25)."""
        return least(self._cands_evict(s, t, form, how), self.W, self.kernel)

    def _rneed(self, s, form):
        """The recomputing ``Fall_{s-1}``'s need in the frame of the child (s, t): what is
        held before B_s (t_{s+1}, d_{s+1}) and the new tape with its transient, less the
        container (counted outside the child's units)."""
        uc = self.uc
        return (self.th[s] + self.x[s + 1] + int(uc.tape[s - 1] + uc.fao[s - 1])
                - self.cu[form][s])

    def _cands_evict(self, s, t, form, how="fall"):
        if s == self.L:  # the loss: no container to evict
            return
        uc = self.uc
        if how == "fall":
            rf, rneed, read = self.fall[s - 1], self._rneed(s, form), self.th[s - 1]
        else:  # Fck_{s-1}: a plain x_s and its transient
            rf, read = self.fwd[s - 1], self.x[s]
            rneed = (self.th[s] + self.x[s + 1] + self.x[s] + int(uc.fo[s - 1])
                     - self.cu[form][s])
        # B_s then reads the recreated tape t_s (or plain x_s), larger or smaller than the
        # container counted outside the child's units
        lo = max(self.g(t) + int(uc.tape[s] + uc.fao[s]),
                 int(uc.bneed[s]) + read - self.cu[form][s], rneed)
        if s == t:  # Fall_s Off C Fall_{s-1} B_s
            time_ = max(self.fall[s], self.ct[form][s]) + rf + self.bwd[s]
            yield self.cut(np.full(self.W, time_), lo), ("ebase",)
            return
        yield from self._cands_a(s, t, form, ev=(rf, lo, how))

    def _cands_o(self, form, s, t):
        if not (form == "p" and self.un[s]):  # Fall_s frees an unsaved plain x_s
            yield from self._cands_a(s, t, form)
        if self.recompute:
            tc = self.ct[form][s]
            yield (self.cut(self.RO[form][s, t] + (max(self.fwd[s], tc) + tc),
                            self._fck_need(s, t)), ("B", form))
            for v in ROX:  # O.26
                first = max(self.fwd[s], tc) if v == "ea" else self.fwd[s]
                yield (self.cut(self.RX[form][v][s, t] + first, self._fck_need(s, t)),
                       ("Bx", form, v))

    def _cands_a(self, s, t, form, bt=None, bc=0, pd=None, ev=None):
        """Option A of (s, t): Fall_s, the child (s+1, t), B_s.  The container C (``form``;
        None: kept) is offloaded right after Fall_s ("early") or after the child's first
        op ("late"); the tape t_{s+1} of an unsaved output likewise, or kept.  A late move
        makes the child a pending one (``pend``).  What moved is prefetched right before
        B_s, or all of it right before the child's last op (``qpre``, ``pend``'s ``pre``).
        ``bt``, ``bc``: this segment's parent prefetches right before B_s, copies of ``bt``
        seconds in all and ``bc`` units (B_s then ends after max(its time, bt) and holds
        ``bc`` more).  ``pd`` = (delta, c): this segment is a pending child (its parent's
        late offloads follow Fall_s: the channel busy until delta, c units more after
        Fall_s); it then moves its container early or not at all.  ``ev`` = (seconds, need):
        the container is evicted, recreated by the parent's forward of that time and memory
        need right before B_s (``evict``); the tape t_{s+1} is then kept."""
        uc = self.uc
        a, b, dA = self.fall[s], self.bwd[s], self.dA[s]
        ch = self._child_form(s)
        c, tc = (0, 0.0) if form is None else (self.cu[form][s], self.ct[form][s])
        h, tt = self.th[s], self.ct["t"][s + 1]
        H0, cq = pd if pd is not None else (0.0, 0)
        cmodes = ("keep",) if form is None else (("early",) if pd else ("early", "late"))
        tmodes = ("keep", "early", "late") if self._tape_moves(s) else ("keep",)
        late_ok = s + 1 < self.L  # the child's first op is a forward (not the loss)
        if ev is not None:
            lo = ev[1]
        elif bt is None and pd is None:
            lo = self.fneed(s, t)
        else:
            lo = max(self.g(t) + int(uc.tape[s] + uc.fao[s]), int(uc.bneed[s]) + bc - cq)
        b_eff = b if bt is None else max(b, bt)
        for cm in cmodes:
            for tm in tmodes:
                if "late" in (cm, tm) and not late_ok:
                    continue
                T = tt if tm != "keep" else 0.0  # each moved value: its copy out and back
                C = tc if cm != "keep" else 0.0
                # the channel, relative to the segment's start: free at H0; the early copies
                # (C then t_{s+1}, which is ready when Fall_s ends), the child's start, then
                # the late copies and how far past the child's start they keep it busy
                H = H0 + (tc if cm == "early" else 0.0)
                if tm == "early":
                    H = max(H, a) + tt
                start = max(a, H)
                if cm == "late":
                    H += tc
                if tm == "late":
                    H = max(H, a) + tt
                pending = "late" in (cm, tm)
                delta = max(0.0, H - start) if pending else None
                pc = (c if cm == "late" else 0) + (h if tm == "late" else 0)
                # the child's memory: C is never the segment's own (counted outside m);
                # what is on the host from its first op on is added
                shift = -dA + cq + (c if cm == "early" else 0) + (h if tm == "early" else 0)
                # each moved value's prefetch: right before B_s, or early (right before the
                # child's last op, whose time then hides its copy)
                # (an evicting child's tape is fetched right before the recomputing
                # forward: that forward does not wait for a prefetch ahead, so the
                # stretched last op of O.16 would overcount it)
                for te in ((False, True) if tm != "keep" and ev is None else (False,)):
                    for ce in ((False, True) if cm != "keep" and ev is None else (False,)):
                        pre = None
                        if te or ce:
                            pre = ((tt if te else 0.0) + (tc if ce else 0.0),
                                   (h if te else 0) + (c if ce else 0))
                        if pending:
                            crow = self.pend(s + 1, t, delta, pc, pre)
                        elif pre is not None:
                            crow = self.qpre(s + 1, t, ch, *pre)
                        else:
                            crow = self.fresh(ch, s + 1, t)
                        tail = (0.0 if te else T) + (0.0 if ce else C) + b_eff
                        if ev is not None:  # the recomputing forward instead of Pre C,
                            # beside the tape's prefetch (O.25)
                            tail = max(ev[0], 0.0 if te else T) + b_eff
                        row = self.at(crow, shift) + (start + tail)
                        yield self.cut(row, lo), ("A", form, cm, tm, shift, delta, pc, pre,
                                                  te, ce, None if ev is None else ev[2])

    def qpre(self, s, t, form, tau, cp):
        """A fresh child (s, t) whose parent prefetches right before the child's last op
        (its B_s, or the loss): copies of ``tau`` seconds, ``cp`` units held from then on.
        The loss, ``Fall_s B_s`` or option A (option B's last op is its part's)."""
        key = (s, t, form, tau, cp)
        row = self._qpre.get(key)
        if row is None:
            row = self._qpre[key] = least(self._cands_qpre(s, t, form, tau, cp), self.W,
                                          self.kernel)
        return row

    def _cands_qpre(self, s, t, form, tau, cp):
        L, uc = self.L, self.uc
        if s == t:
            if t == L:
                need, time_ = self.x[L] + int(uc.bo[L]) + cp, max(self.bwd[L], tau)
            else:
                need = max(self.g(t) + int(uc.tape[s] + uc.fao[s]), int(uc.bneed[s]) + cp)
                time_ = self.fall[s] + max(self.bwd[s], tau)
            yield self.cut(np.full(self.W, time_), need), ("qbase",)
            return
        yield from self._cands_a(s, t, None, tau, cp)
        if s >= 1 and form is not None and self.ct[form][s] < INF and \
                not (form == "p" and self.un[s]):
            yield from self._cands_a(s, t, form, tau, cp)

    def pend(self, s, t, delta, c, pre=None, form=None):
        """A child (s, t) of option A whose parent's offloads are issued right after the
        child's first op: that op runs under m (the values still held), the rest under
        m + c; the channel is busy until ``delta`` past the child's start.  ``pre``: (copy
        seconds, units) of the parent's prefetches issued right before the child's B_s
        (then option A or the base only)."""
        key = (s, t, delta, c, pre, form)
        row = self._pend.get(key)
        if row is None:
            row = self._pend[key] = least(self._cands_pend(s, t, delta, c, pre, form),
                                          self.W, self.kernel)
        return row

    def _cands_pend(self, s, t, delta, c, pre, form=None):
        uc = self.uc
        tau, cp = pre if pre is not None else (None, 0)
        if s == t == self.L:  # Loss [late offs] (O.25): the next op waits for the copies
            if pre is None:
                yield (self.cut(np.full(self.W, max(self.bwd[s], delta)),
                                self.x[s] + int(uc.bo[s])), ("plbase",))
            return
        g, f1, b1 = self.g(t), self.fall[s], self.bwd[s]
        if s == t:  # Fall_s [late offs] [pre] B_s
            lo = max(g + int(uc.tape[s] + uc.fao[s]), int(uc.bneed[s]) - c + cp)
            b1 = b1 if tau is None else max(b1, tau)
            yield self.cut(np.full(self.W, max(f1, delta) + b1), lo), ("pbase",)
            return
        yield from self._cands_a(s, t, None, tau, cp, (delta, c))
        yield from self._cands_defer(s, t, delta, c, pre)
        # this segment's container, as its parent's child
        own = self._child_form(s - 1) if form is None else form
        to = self.ct[own][s]
        if to < INF and not (own == "p" and self.un[s]):  # Fall_s frees an unsaved x_s
            yield from self._cands_a(s, t, own, tau, cp, (delta, c))
        if self.recompute and pre is None:
            fl = self._fck_need(s, t)
            yield (self.cut(self.at(self.RK[s, t], c) + max(self.fwd[s], delta), fl),
                   ("pB", False))
            if to < INF:
                yield (self.cut(self.at(self.RO[own][s, t], c)
                                + (max(self.fwd[s], delta + to) + to), fl), ("pB", True))

    def value(self, m: int) -> float:
        if m < 0:
            return INF
        return float(self.K[0, self.L][min(m, self.W - 1)])

    # -- the rebuild ---------------------------------------------------------------------
    def schedule(self, m: int):
        """The optimal schedule of ``K(0, L, m)``, rebuilt: at each subproblem, the first
        candidate whose value at m is the subproblem's."""
        W, L = self.W, self.L

        def pick(cands, m, want):
            for row, label in cands:
                if row[m] == want:
                    return label
            raise InternalError(f"{NAME}: no candidate reaches the table's value {want}")

        def off(form, s):
            return OffX(s) if form == "p" else OffT(s)

        def pre(form, s):
            return PreX(s) if form == "p" else PreT(s)

        def expand(item):
            tag = item[0]
            if tag == "seg":
                _, kind, form, s, t, m = item
                if m < 0:
                    raise InternalError(f"{NAME}: a subproblem below 0 units")
                m = min(m, W - 1)
                if kind == "F":
                    fr = self.fresh(form, s, t)
                    kind = "K" if fr is self.K[s, t] or self.K[s, t][m] <= fr[m] else "O"
                if kind == "K":
                    label = pick(self._cands_k(s, t), m, self.K[s, t][m])
                else:
                    label = pick(self._cands_o(form, s, t), m, self.O[form][s, t][m])
                return self._plan(label, s, t, m, off, pre)
            if tag == "rest":  # option B's rest after Fck_s [Off C]
                _, form, s, t, m = item
                m = min(m, W - 1)
                if form is None:
                    k = pick(self._cands_rk(s, t), m, self.RK[s, t][m])[1]
                    return ([Fn(j) for j in range(s + 1, k)],
                            (("seg", "F", "p", k, t, m - self.x[k]),
                             ("seg", "K", "t", s, k - 1, m)))
                c = self.cu[form][s]
                k = pick(self._cands_ro(form, s, t), m, self.RO[form][s, t][m])[1]
                return ([Fn(j) for j in range(s + 1, k)],
                        (("seg", "F", "p", k, t, m + c - self.x[k]), pre(form, s),
                         ("seg", "F", form, s, k - 1, m)))
            if tag == "evict":  # a child whose container its parent's forward recreates
                _, s, t, form, m, how = item
                if m < 0:
                    raise InternalError(f"{NAME}: a subproblem below 0 units")
                m = min(m, W - 1)
                label = pick(self._cands_evict(s, t, form, how), m,
                             self.evict(s, t, form, how)[m])
                if label[0] == "ebase":
                    redo = Fall(s - 1) if how == "fall" else Fck(s - 1)
                    return [Fall(s), off(form, s), redo, Bwd(s)], ()
                return self._plan(label, s, t, m, off, pre)
            if tag == "qpre":  # a child whose parent prefetches before its last op
                _, s, t, form, tau, cp, pres, m = item
                m = min(m, W - 1)
                label = pick(self._cands_qpre(s, t, form, tau, cp), m,
                             self.qpre(s, t, form, tau, cp)[m])
                if label[0] == "qbase":
                    return ([Fall(s)] + list(pres) + [Bwd(s)] if s < L
                            else list(pres) + [LOSS_OP]), ()
                return self._plan(label, s, t, m, off, pre, pres)
            # a pending child: its first op, the parent's late offloads, then the rest
            _, s, t, m, delta, c, late, pp, pres, pform = item
            if m < 0:
                raise InternalError(f"{NAME}: a subproblem below 0 units")
            m = min(m, W - 1)
            label = pick(self._cands_pend(s, t, delta, c, pp, pform), m,
                         self.pend(s, t, delta, c, pp, pform)[m])
            own = self._child_form(s - 1) if pform is None else pform
            late, pres = list(late), list(pres)
            if label[0] == "plbase":
                return [LOSS_OP] + late, ()
            if label[0] == "pbase":
                return [Fall(s)] + late + pres + [Bwd(s)], ()
            if label[0] in ("dA", "dB"):
                return self._plan_defer(label, s, t, m, delta, c, late, pp, pres)
            if label[0] == "A":
                return self._plan(label, s, t, m, off, pre, pres, late)
            if not label[1]:
                return [Fck(s)] + late, (("rest", None, s, t, m + c),)
            return [Fck(s)] + late + [off(own, s)], (("rest", own, s, t, m + c),)

        return unfold(("seg", "K", "t", 0, L, m), expand,
                      lambda: self.deadline.check("rebuilding the schedule"))

    def _plan(self, label, s, t, m, off, pre, pres=(), late_in=()):
        """(ops now, items later) of a candidate's ``label`` at m; ``pres``: the parent's
        prefetches to issue right before this segment's B_s."""
        L = self.L
        if label[0] == "base":
            return ([LOSS_OP] if s == L else [Fall(s), Bwd(s)]), ()
        if label[0] == "Bx":  # O.26
            _, form, v = label
            now, later = self._plan_rox(form, v, s, t, m, off, pre)
            return [Fck(s)] + ([off(form, s)] if v == "ea" else []) + now, later
        if label[0] == "B":
            form = label[1]
            if form is None:
                return [Fck(s)], (("rest", None, s, t, m),)
            return [Fck(s), off(form, s)], (("rest", form, s, t, m),)
        if label[0] == "E":
            if label[1] == "t":
                return [Fall(s)], (("evict", s + 1, t, "t", m - self.dA[s], "fall"), Bwd(s))
            if label[1] == "tk":
                return [Fall(s)], (("evict", s + 1, t, "t", m - self.dA[s], "fck"), Fall(s),
                                   Bwd(s))
            return [Fck(s)], (("evict", s + 1, t, "p", m - self.x[s + 1], "fall"), Bwd(s))
        _, form, cm, tm, shift, delta, pc, pp, te, ce, ev = label
        now, late = [Fall(s)] + list(late_in), []
        if cm == "early":
            now.append(off(form, s))
        if tm == "early":
            now.append(OffT(s + 1))
        if cm == "late":
            late.append(off(form, s))
        if tm == "late":
            late.append(OffT(s + 1))
        early = ([PreT(s + 1)] if te else []) + ([pre(form, s)] if ce else [])
        mine = (([PreT(s + 1)] if tm != "keep" and not te else [])
                + ([pre(form, s)] if cm != "keep" and not ce else []))
        child_pres = tuple(early)
        if delta is not None:
            child = ("pend", s + 1, t, m + shift, delta, pc, tuple(late), pp, child_pres,
                     None)
        elif pp is not None:
            child = ("qpre", s + 1, t, self._child_form(s), pp[0], pp[1], child_pres,
                     m + shift)
        else:
            child = ("seg", "F", self._child_form(s), s + 1, t, m + shift)
        if ev:  # the container is not fetched back: the parent's forward recreates it
            mine = (([PreT(s + 1)] if tm != "keep" and not te else [])
                    + [Fall(s - 1) if ev == "fall" else Fck(s - 1)])
        later = [child] + mine + list(pres) + [Bwd(s)]
        return now, tuple(later)

