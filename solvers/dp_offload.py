"""``dp-offload``: a dynamic program for persistent rematerialization with offloading,
exact in the two-stream model (proofs/offload.md, 11.3; docs/model.md, "Offloading").

The class (``persistent+offload``, :mod:`remat_theory.model.classes`) extends the
persistent schedules of the Rotor DP (``solvers/dp.py``; Beaumont, Eyraud-Dubois,
Herrmann, Joly, Shilova) with transfers, in the spirit of Beaumont, Eyraud-Dubois and
Shilova, "Efficient combination of rematerialization and offloading for training DNNs"
(NeurIPS 2021), whose model is not ours (their DP is not reproduced here).  A segment
(s, t) whose input x_s sits in a *container* C (a plain x_s it owns, or the tape t_s its
parent recorded; never x_0) may send C to the host and fetch it back before the next op
that reads it:

* option A: ``Fall_s E [child (s+1, t)] P B_s``;
* option B-off: ``Fck_s Off(C) Fn_{s+1} .. Fn_{k-1} [child (k, t)] Pre(C) [part (s, k-1)]``.

In option A (O.10, O.16) each of C and the tape t_{s+1} of an unsaved output (B_s reads
it, nothing else does) is kept, offloaded right after Fall_s (``E``: "early", its copy
overlapping Fall_s) or right after the child's first op ("late": its copy overlaps that op
too, the value held during it); each one that moved is prefetched right before B_s
(``P``) or right before the child's last op (its copy overlapping that op, the value held
during it).  C moves only in a segment that starts *fresh* (right after C was made or
prefetched), and not late in a child that itself takes late offloads.  *Evictions* (O.18):
a segment that keeps its input, whose input and output are saved, may run ``Fall_s [child]
B_s`` or ``Fck_s [child] B_s`` where the child sends its container away for good and
``Fall_s`` recreates it right before the child's ``B_{s+1}``.  Every time is then
a constant of the choices (O.10, O.16): a fresh segment starts with the channel free; a
child taking late offloads starts with it busy for a known ``delta``; a child whose parent
prefetches early ends with its last op stretched to ``max(time, copies)``.

Tables over memory units m (budget minus everything the segment does not own, as in
``dp``; the container is never the segment's own):

* ``K(s, t, m)``: C stays on the device; ``Ot``/``Op(s, t, m)``: C, a tape t_s or a plain
  x_s, moves; ``F = min(K, O)``: what a fresh child may do;
* ``RK``/``RO``: option B's rest after ``Fck_s`` (the pass, the child, the part), kept or
  with C on the host: option B is ``fwd[s] + RK(m)`` and ``max(fwd[s], tc) + tc +
  RO(m)``;
* ``pend(s, t, delta, c, pre)``: a child whose parent's late offloads follow its first op
  (c units more from its second op on); ``qpre(s, t, form, tau, cp)``: a child whose
  parent prefetches ``cp`` units in ``tau`` seconds right before its last op;
  ``evict(s, t, form)``: a child whose container its parent's forward recreates.  All are
  built on demand from the tables of shorter segments and memoized (those of segments
  three or more shorter than the ones being built are dropped, and recomputed by the
  rebuild if it needs them); their parameters take a bounded number of values per stage
  (O.16), so the work stays O(L^3 M) and the memory O(L^2 M).

Each candidate is a row over m (a shifted lookup plus a constant, infinite below its
memory threshold); a cell is their minimum.  Outputs no backward reads (``output_saved``)
as in ``dp`` (proofs/persistent_dp.md 2.10).  The answer is ``K(0, L, budget - x[0])``.
Memory: exact integers (sizes divided by their gcd) or ``slots`` (sizes rounded up to
budget/S, as ``dp`` does; every schedule found fits the real budget).  Times are the real
copy times ``bytes / bandwidth``.  Lookups above the largest segment's store-all peak read
the row's last entry, the segment's ideal time there (exact).  No choice is stored: the
rebuild recomputes a cell's candidates at one m.  Without ``bandwidth`` (or at 0 with
positive sizes) no transfer is possible and the answer is the persistent optimum of
``dp``.
"""
from __future__ import annotations

import math

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.errors import InternalError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, OffT, OffX, PreT, PreX
from remat_theory.model.simulator import simulate
from remat_theory.model.solution import CLASS_NONE, FEASIBLE, OPTIMAL, Solution

from solvers._dp_tables import (NEVER, Deadline, DeadlineExpired, UnitChain, all_sizes,
                                refuse_by_length, refuse_if_too_big, slot_info, time_up)
from solvers._schedules import unfold
from solvers.dp import skewed_saturation
from solvers.registry import Option, register

NAME = "dp-offload"
CLASS = "persistent+offload"
CLASS_NO_REMAT = "store-all+offload"  # recompute=False
INF = math.inf
#: Min-plus steps per second assumed by the up-front refusal (solvers._dp_tables).
ASSUMED_RATE = 5e8


def copy_time(chain: Chain, size: int) -> float:
    """Seconds to copy ``size`` bytes one way (the referee's rule: 0 for 0 bytes; never
    without a channel or at bandwidth 0)."""
    if size == 0 and chain.bandwidth is not None:
        return 0.0
    if not chain.bandwidth:
        return INF
    return size / chain.bandwidth


class OffloadTable:
    """The tables of the module docstring for m = 0..W-1 (W - 1 at least every segment's
    store-all peak).  No choice is stored: the rebuild recomputes a cell's candidates at
    one m and follows one that reaches the cell's value."""

    def __init__(self, uc: UnitChain, chain: Chain, deadline: Deadline = NEVER,
                 recompute: bool = True):
        self.uc, self.chain, self.recompute = uc, chain, recompute
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
        self._qpre = {}  # (s, t, form, seconds, units) -> qpre's row
        self._pend = {}  # (s, t, delta, units, pre) -> pend's row
        for n in range(L + 1):
            deadline.check(f"building the tables (segments of length {n} of {L})")
            # pend and qpre rows of segments shorter than n - 2 are no longer read while
            # building (a child's rows are asked for by its parent and grandparent); the
            # rebuild recomputes any it needs: O(L) of them live, not O(L^2)
            for memo in (self._pend, self._qpre):
                for key in [k for k in memo if k[1] - k[0] < n - 2]:
                    del memo[key]
            for s in range(L + 1 - n):
                t = s + n
                if n > 0 and recompute:
                    self.RK[s, t] = _least(self._cands_rk(s, t), W)
                    if s > 0:
                        for form in ("p", "t"):
                            if self.ct[form][s] < INF:
                                self.RO[form][s, t] = _least(self._cands_ro(form, s, t), W)
                kb = self.K[s, t] = _least(self._cands_k(s, t), W)
                if s == 0 or n == 0:
                    continue
                for form in ("p", "t"):
                    if self.ct[form][s] == INF:
                        continue
                    ob = self.O[form][s, t] = _least(self._cands_o(form, s, t), W)
                    self.Fr[form][s, t] = np.minimum(kb, ob)
        self.deadline = deadline

    # -- row helpers ------------------------------------------------------------------
    def at(self, row, d):
        """out[m] = row[min(m + d, W - 1)]; inf where m + d < 0."""
        W = self.W
        out = np.empty(W)
        if d >= 0:
            if d < W:
                out[:W - d] = row[d:]
                out[W - d:] = row[-1]
            else:
                out[:] = row[-1]
        else:
            e = -d
            if e >= W:
                out[:] = INF
            else:
                out[:e] = INF
                out[e:] = row[:W - e]
        return out

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
            row = self.at(self.fresh("p", k, t), -x[k]) + self.K[s, k - 1] + (cf[k] - cf[s + 1])
            yield self.cut(row, g + run), ("rk", k)

    def _cands_ro(self, form, s, t):
        """Option B's rest after Fck_s Off C: the pass under m + c, the child (k, t) at
        m + c - x_k, Pre C, the part (s, k-1) fresh."""
        g, x, cf, c = self.g(t), self.x, self.cf, self.cu[form][s]
        run = 0
        for k in range(s + 1, t + 1):
            if k > s + 1:
                run = max(run, self.step[k - 1])
            row = (self.at(self.fresh("p", k, t), c - x[k]) + self.fresh(form, s, k - 1)
                   + (cf[k] - cf[s + 1]))
            yield self.cut(row, g + run - c), ("ro", k)

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
                if self.ct["p"][s + 1] < INF:
                    row = self.at(self.evict(s + 1, t, "p"), -self.x[s + 1]) + (self.fwd[s] + b)
                    lo = max(self._fck_need(s, t), int(self.uc.bneed[s]))
                    yield self.cut(row, lo), ("E", "p")

    def evict(self, s, t, form):
        """A child (s, t) of a segment that keeps its own input: its container (``form``)
        is offloaded right after its first op or one op later and never fetched back; its
        parent's ``Fall_{s-1}`` runs again right before the child's last op ``B_s``,
        recreating it (the tape t_s holds x_s: the parent's output is saved)."""
        return _least(self._cands_evict(s, t, form), self.W)

    def _rneed(self, s, form):
        """The recomputing ``Fall_{s-1}``'s need in the frame of the child (s, t): what is
        held before B_s (t_{s+1}, d_{s+1}) and the new tape with its transient, less the
        container (counted outside the child's units)."""
        uc = self.uc
        return (self.th[s] + self.x[s + 1] + int(uc.tape[s - 1] + uc.fao[s - 1])
                - self.cu[form][s])

    def _cands_evict(self, s, t, form):
        if s == self.L:  # the loss: no container to evict
            return
        uc = self.uc
        rf, rneed = self.fall[s - 1], self._rneed(s, form)
        # B_s then reads the recreated tape t_s, larger or smaller than the plain x_s
        # counted outside the child's units
        lo = max(self.g(t) + int(uc.tape[s] + uc.fao[s]),
                 int(uc.bneed[s]) + self.th[s - 1] - self.cu[form][s], rneed)
        if s == t:  # Fall_s Off C Fall_{s-1} B_s
            time_ = max(self.fall[s], self.ct[form][s]) + rf + self.bwd[s]
            yield self.cut(np.full(self.W, time_), lo), ("ebase",)
            return
        yield from self._cands_a(s, t, form, ev=(rf, lo))

    def _cands_o(self, form, s, t):
        if not (form == "p" and self.un[s]):  # Fall_s frees an unsaved plain x_s
            yield from self._cands_a(s, t, form)
        if self.recompute:
            tc = self.ct[form][s]
            yield (self.cut(self.RO[form][s, t] + (max(self.fwd[s], tc) + tc),
                            self._fck_need(s, t)), ("B", form))

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
        tmodes = ("keep", "early", "late") if self._tape_moves(s) and ev is None else ("keep",)
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
                for te in ((False, True) if tm != "keep" else (False,)):
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
                        if ev is not None:  # the recomputing forward instead of Pre C
                            tail = ev[0] + b_eff
                        row = self.at(crow, shift) + (start + tail)
                        yield self.cut(row, lo), ("A", form, cm, tm, shift, delta, pc, pre,
                                                  te, ce, ev is not None)

    def qpre(self, s, t, form, tau, cp):
        """A fresh child (s, t) whose parent prefetches right before the child's last op
        (its B_s, or the loss): copies of ``tau`` seconds, ``cp`` units held from then on.
        The loss, ``Fall_s B_s`` or option A (option B's last op is its part's)."""
        key = (s, t, form, tau, cp)
        row = self._qpre.get(key)
        if row is None:
            row = self._qpre[key] = _least(self._cands_qpre(s, t, form, tau, cp), self.W)
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
        if s >= 1 and self.ct[form][s] < INF and not (form == "p" and self.un[s]):
            yield from self._cands_a(s, t, form, tau, cp)

    def pend(self, s, t, delta, c, pre=None):
        """A child (s, t) of option A whose parent's offloads are issued right after the
        child's first op: that op runs under m (the values still held), the rest under
        m + c; the channel is busy until ``delta`` past the child's start.  ``pre``: (copy
        seconds, units) of the parent's prefetches issued right before the child's B_s
        (then option A or the base only)."""
        key = (s, t, delta, c, pre)
        row = self._pend.get(key)
        if row is None:
            row = self._pend[key] = _least(self._cands_pend(s, t, delta, c, pre), self.W)
        return row

    def _cands_pend(self, s, t, delta, c, pre):
        uc = self.uc
        g, f1, b1 = self.g(t), self.fall[s], self.bwd[s]
        tau, cp = pre if pre is not None else (None, 0)
        if s == t:  # Fall_s [late offs] [pre] B_s
            lo = max(g + int(uc.tape[s] + uc.fao[s]), int(uc.bneed[s]) - c + cp)
            b1 = b1 if tau is None else max(b1, tau)
            yield self.cut(np.full(self.W, max(f1, delta) + b1), lo), ("pbase",)
            return
        yield from self._cands_a(s, t, None, tau, cp, (delta, c))
        own = self._child_form(s - 1)  # this segment's container, as its parent's child
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
                _, s, t, form, m = item
                if m < 0:
                    raise InternalError(f"{NAME}: a subproblem below 0 units")
                m = min(m, W - 1)
                label = pick(self._cands_evict(s, t, form), m, self.evict(s, t, form)[m])
                if label[0] == "ebase":
                    return [Fall(s), off(form, s), Fall(s - 1), Bwd(s)], ()
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
            _, s, t, m, delta, c, late, pp, pres = item
            m = min(m, W - 1)
            label = pick(self._cands_pend(s, t, delta, c, pp), m,
                         self.pend(s, t, delta, c, pp)[m])
            own = self._child_form(s - 1)
            late, pres = list(late), list(pres)
            if label[0] == "pbase":
                return [Fall(s)] + late + pres + [Bwd(s)], ()
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
        if label[0] == "B":
            form = label[1]
            if form is None:
                return [Fck(s)], (("rest", None, s, t, m),)
            return [Fck(s), off(form, s)], (("rest", form, s, t, m),)
        if label[0] == "E":
            if label[1] == "t":
                return [Fall(s)], (("evict", s + 1, t, "t", m - self.dA[s]), Bwd(s))
            return [Fck(s)], (("evict", s + 1, t, "p", m - self.x[s + 1]), Bwd(s))
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
            child = ("pend", s + 1, t, m + shift, delta, pc, tuple(late), pp, child_pres)
        elif pp is not None:
            child = ("qpre", s + 1, t, self._child_form(s), pp[0], pp[1], child_pres,
                     m + shift)
        else:
            child = ("seg", "F", self._child_form(s), s + 1, t, m + shift)
        if ev:  # the container is not fetched back: the parent's forward recreates it
            mine = [Fall(s - 1)]
        later = [child] + mine + list(pres) + [Bwd(s)]
        return now, tuple(later)


def _least(cands, W):
    best = np.full(W, INF)
    for row, _ in cands:
        np.minimum(best, row, out=best)
    return best


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

    def pend(s, t, c, pre=None):
        key = (s, t, c, pre)
        if key in P:
            return P[key]
        cp = 0 if pre is None else pre
        if s == t:
            P[key] = max(0, g(t) + tape[s] + fao[s], bneed[s] - c + cp)
            return P[key]
        own = cform(s - 1)
        best = opt_a(s, t, None, cp, c)
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
                if s >= 1 and ok[form][s] and not (form == "p" and un[s]):
                    best = min(best, opt_a(s, t, form, cp))
                Q[key] = max(0, best)
        return Q[key]

    def rneed(s, form):
        return th[s] + x[s + 1] + tape[s - 1] + fao[s - 1] - cu[form][s]

    def evict(s, t, form):
        if s == L:
            return INF
        lo = max(g(t) + tape[s] + fao[s], bneed[s] + th[s - 1] - cu[form][s], rneed(s, form))
        return max(0, lo) if s == t else max(0, opt_a(s, t, form, ev=lo))

    def opt_a(s, t, form, bc=None, cq=None, ev=None):
        ch = cform(s)
        c = cu[form][s] if form else 0
        h = th[s]
        tape_moves = un[s + 1] and ok["t"][s + 1] and ev is None
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
                        ((h,) if tm != "keep" else ()):
                    early_units |= {u + add for u in early_units}
                for ue in sorted(early_units):
                    for early_pre in ((False, True) if ue == 0 and (cm != "keep" or
                                                                     tm != "keep")
                                      else (ue > 0,)):
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
            best = opt_a(s, t, None)
            fck = g(t) + x[s + 1] + fo[s]
            if recompute:
                best = min(best, max(fck, RK[s, t]))
                if not un[s + 1] and not un[s]:  # evictions (O.18)
                    if ok["t"][s + 1]:
                        best = min(best, max(fneed(s, t), evict(s + 1, t, "t") + dA[s]))
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


def _refuse_if_too_big(L: int, W: int, slots, time_limit) -> None:
    # eight float64 rows of W per segment (K, O and F by container form, the two option-B
    # rests by form and kept); option B's splits, and O(1) rows per segment for option A's
    # moves and its pending children
    cells = (L + 1) * (L + 2) / 2
    per_unit = 8 * 8 * cells
    steps = (3 * L * (L + 1) * (L + 2) / 6 + 40 * cells) * W

    def fit(max_bytes, max_steps):
        return int(min(max_bytes / per_unit, max_steps / max(1.0, steps / W)))

    refuse_if_too_big(NAME, per_unit * W, steps, ASSUMED_RATE, time_limit, L, W, slots, fit)


def solve_units(uc: UnitChain, chain: Chain, budget_units: int, deadline: Deadline = NEVER,
                slots: int | None = None, recompute: bool = True):
    """``(makespan, schedule, table)`` at a budget in units of ``uc`` (inf, None, None when
    the class has no schedule there)."""
    x0 = int(uc.x[0])
    if budget_units < x0:
        return INF, None, None
    # the whole chain's saturation (sat[0, L], O(L)) bounds W from below: a refusal on it
    # comes before the O(L^2) saturation table (2 s at 10,000 stages)
    P, fall_term, b_term, loss_term = uc.store_all_terms()
    whole = max(int(loss_term), int(fall_term.max(initial=0)), int(b_term.max(initial=0)))
    _refuse_if_too_big(uc.L, max(1, whole - int(P[0]) + 1), slots, deadline.limit)
    W = int(max(1, skewed_saturation(uc).max() + 1))
    _refuse_if_too_big(uc.L, W, slots, deadline.limit)
    table = OffloadTable(uc, chain, deadline, recompute)
    m = budget_units - x0
    value = table.value(m)
    if value == INF:
        return INF, None, table
    return value, table.schedule(m), table


@register(NAME, optimal_for=CLASS, exact=True,
          description="Persistent dynamic program with offloading (segment inputs and "
                      "unsaved outputs' tapes, early or late, prefetched early or not, "
                      "or evicted and recomputed; a "
                      "chain with bandwidth; O(L^3 M)): optimal over persistent+offload, "
                      "exact integer memory or slots.",
          variants={"dp-offload-slots": {"slots": 64},
                    "dp-offload-only": {"recompute": False}},
          classes=(CLASS, CLASS_NO_REMAT),
          supports=("fall_time", "fall_overhead", "output_saved", "bandwidth"),
          options={"slots": Option("int", "round sizes up to budget/slots (valid, optimal for "
                                   "the rounded sizes only; status feasible)", minimum=1,
                                   none=True),
                   "recompute": Option("bool", "allow recomputation (false: option A only, "
                                       "store-all with offloads: class "
                                       "persistent-no-remat+offload)"),
                   "time_limit": Option("seconds", "for the whole run (status time_limit "
                                        "past it)", none=True)})
def solve_dp_offload(chain: Chain, budget: int, *, slots: int | None = None,
                     recompute: bool = True, time_limit: float | None = None) -> Solution:
    """Optimal schedule of the class ``persistent+offload`` (module docstring): exact in
    memory by default; with ``slots``, sizes rounded up to budget/slots bytes (valid at the
    real budget, optimal for the rounded sizes: status ``feasible`` unless every size is a
    whole number of slots)."""
    deadline = Deadline(time_limit)
    # the saturation table ((L+1)^2 int64) and one memory value per cell at least: refused
    # from the length before any O(L) work or allocation
    L = chain.length
    refuse_by_length(NAME, L, max(8 * 8 * (L + 1) * (L + 2) / 2, (L + 1) ** 2 * 8))
    uc_exact, gcd = UnitChain.exact(chain)
    info = {"bandwidth": chain.bandwidth, "recompute": recompute}
    cls = CLASS if recompute else CLASS_NO_REMAT
    try:
        if slots is None:
            info.update(memory="exact", unit=gcd)
            uc, units, exact = uc_exact, budget // gcd, True
        else:
            info.update(memory="slots", **slot_info(chain, budget, slots))
            uc, units = UnitChain.rounded(chain, budget, slots), slots
            exact = budget == 0 or all(v * slots % budget == 0 for v in all_sizes(chain))
        makespan, schedule, table = solve_units(uc, chain, units, deadline, slots, recompute)
    except DeadlineExpired as e:
        return time_up(NAME, cls, chain, budget, deadline, e.what, info)
    least = min_units(uc_exact, chain, recompute) * gcd
    if schedule is None:
        claim = cls if exact or budget < least else CLASS_NONE
        return Solution.infeasible(NAME, budget, optimal_for=claim, min_budget=least,
                                   info=info,
                                   message=f"no {cls} schedule fits in {budget}; the "
                                           f"smallest feasible budget of the class is {least}")
    sim = simulate(chain, schedule)
    if not math.isclose(sim.makespan, makespan, rel_tol=1e-9, abs_tol=1e-9):
        raise InternalError(f"{NAME}: the table says {makespan} but the referee measures "
                            f"{sim.makespan} for {schedule}")
    info["transfers"] = sum(op.is_transfer for op in schedule)
    if exact:
        return Solution.optimal(NAME, budget, schedule, sim.makespan, sim.peak_memory,
                                bound=sim.makespan, optimal_for=cls, info=info,
                                min_budget=least)
    return Solution(NAME, FEASIBLE, schedule, sim.makespan, sim.peak_memory, budget,
                    optimal_for=CLASS_NONE, info=info,
                    message="slots mode: optimal for the rounded sizes, not proven optimal "
                            "at the real budget")
