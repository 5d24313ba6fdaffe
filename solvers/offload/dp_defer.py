"""``dp-offload``'s deferred offloads (proofs/offload.md O.25): a pending segment (its
parent's late offloads are to be issued right after its first op, ``pend``) that moves
nothing of its own before them may pass them on to its child, to be issued after the
child's first op (and so on down the forward spine, the loss included): the copies run
where they ran, the values stay on the device longer and the wait comes later; and option
B's container offloaded late or fetched ahead (O.26).  A mixin of
:class:`solvers.offload.dp_table.OffloadTable`."""
from __future__ import annotations

from remat_theory.model.errors import InternalError
from remat_theory.model.schedule import Bwd, Fck, Fall, Fn

from solvers.offload.dp_split import Split


class DeferMixin:
    """Candidates and rebuild of the deferrals (needs the tables of ``OffloadTable``)."""

    def _cands_defer(self, s, t, delta, c, pre):
        """Rows of the pending segment (s, t) that keeps everything and passes the batch
        (copies ending ``delta`` past its start, ``c`` units) to its child: option A
        ``Fall_s <s+1, t> [pre] B_s`` (label ``dA``), option B ``Fck_s Fn_{s+1} ..
        Fn_{k-1} <k, t> <s, k-1>`` (``dB``), the part kept and taking the parent's
        prefetches ``pre`` before its last op.  The first op and the pass hold the batch
        (under m), what follows the child's release runs under m + c."""
        uc = self.uc
        tau, cp = pre if pre is not None else (None, 0)
        a = self.fall[s]
        b = self.bwd[s] if tau is None else max(self.bwd[s], tau)
        lo = max(self.g(t) + int(uc.tape[s] + uc.fao[s]), int(uc.bneed[s]) + cp - c)
        # a batch whose copies end by the child's start is better issued now: then the
        # child is fresh with c more units (O.25 (d)), a row of _cands_a; likewise
        # option B when they end by Fck_s's end (pB, without prefetches ahead)
        if delta > a:
            child = self.pend(s + 1, t, delta - a, c)
            yield self.cut(self.at(child, -self.dA[s]) + (a + b), lo), ("dA",)
        if not self.recompute or (pre is None and delta <= self.fwd[s]):
            return
        g, x = self.g(t), self.x
        run = 0
        for k in range(s + 1, t + 1):
            if k > s + 1:
                run = max(run, self.step[k - 1])
            pass_ = self.fwd[s] + (self.cf[k] - self.cf[s + 1])
            child = self.pend(k, t, max(0.0, delta - pass_), c, None, "p")
            part = self.K[s, k - 1] if pre is None else self.qpre(s, k - 1, None, tau, cp)
            yield Split(child, -x[k], part, c, pass_, max(self._fck_need(s, t), g + run)), \
                ("dB", k)

    def _plan_defer(self, label, s, t, m, delta, c, late, pp, pres):
        """(ops now, items later) of a deferral's ``label`` at m (the rebuild's items)."""
        late, pres = tuple(late), tuple(pres)
        if label[0] == "dA":
            child = ("pend", s + 1, t, m - self.dA[s], max(0.0, delta - self.fall[s]), c,
                     late, None, (), None)
            return [Fall(s)], (child,) + pres + (Bwd(s),)
        k = label[1]
        pass_ = self.fwd[s] + (self.cf[k] - self.cf[s + 1])
        child = ("pend", k, t, m - self.x[k], max(0.0, delta - pass_), c, late, None, (), "p")
        if pp is None:
            part = ("seg", "K", "t", s, k - 1, m + c)
        else:
            part = ("qpre", s, k - 1, None, pp[0], pp[1], pres, m + c)
        return [Fck(s)] + [Fn(j) for j in range(s + 1, k)], (child, part)

    # -- O.26: option B's container moved late, or fetched back ahead -----------------
    def _cands_rox(self, form, s, t, variant):
        """Option B's rest after ``Fck_s`` when its container C (``form``) moves
        otherwise than ``Off`` right after ``Fck_s`` and ``Pre`` right before the part:
        ``ea`` offloaded there but prefetched ahead (right before the child's last op),
        ``lp`` offloaded late (right after the child's first op) and prefetched before the
        part, ``la`` late and ahead.  The caller adds ``Fck_s``: ``max(fwd[s], tc)`` for
        ``ea``, ``fwd[s]`` for the late ones (their copy runs from the segment's start,
        ending ``delta`` past the child's)."""
        g, x, cf = self.g(t), self.x, self.cf
        c, tc = self.cu[form][s], self.ct[form][s]
        run = 0
        for k in range(s + 1, t + 1):
            if k > s + 1:
                run = max(run, self.step[k - 1])
            pass_ = cf[k] - cf[s + 1]
            part = self.fresh(form, s, k - 1)
            if variant == "ea":
                yield Split(self.qpre(k, t, "p", tc, c), c - x[k], part, 0, pass_,
                            g + run - c), ("rox", k)
                continue
            if k == self.L:  # the loss: an offload right after it, fetched right back
                continue
            if variant == "lp" and tc <= self.fwd[s]:
                continue  # no faster than the offload right after Fck_s (O.26)
            delta = max(0.0, tc - self.fwd[s] - pass_)
            pre = (tc, c) if variant == "la" else None
            yield Split(self.pend(k, t, delta, c, pre, "p"), -x[k], part, 0,
                        pass_ + (0.0 if pre else tc), g + run), ("rox", k)

    def _plan_rox(self, form, variant, s, t, m, off, pre):
        """(ops now, items later) of option B's rest of ``variant`` (``_cands_rox``)."""
        k = self._pick_rox(form, variant, s, t, m)
        c, tc = self.cu[form][s], self.ct[form][s]
        now = [Fn(j) for j in range(s + 1, k)]
        part = ("seg", "F", form, s, k - 1, m)
        if variant == "ea":
            return now, (("qpre", k, t, "p", tc, c, (pre(form, s),), m + c - self.x[k]),
                         part)
        delta = max(0.0, tc - self.fwd[s] - (self.cf[k] - self.cf[s + 1]))
        if variant == "la":
            return now, (("pend", k, t, m - self.x[k], delta, c, (off(form, s),), (tc, c),
                          (pre(form, s),), "p"), part)
        return now, (("pend", k, t, m - self.x[k], delta, c, (off(form, s),), None, (),
                      "p"), pre(form, s), part)

    def _pick_rox(self, form, variant, s, t, m):
        want = self.RX[form][variant][s, t][m]
        for row, label in self._cands_rox(form, s, t, variant):
            if row[m] == want:
                return label[1]
        raise InternalError("dp-offload: no split reaches the rest's value")
