"""The compiled kernels of ``solvers/dp_kernel.py`` (numba; imported on first use only).

:func:`persistent_block` fills the columns t0..t1-1 of ``dp``'s value table
(``solvers/dp_table.py``, :class:`~solvers.dp_table.FusedTable`, says what it stores);
:func:`weak_fill` the whole of ``dp-weak``'s; :func:`min_plus_rows` is the plain fused
reduction; :func:`split_rows_min` reduces ``dp-offload``'s option-B splits.  Every value
is formed by the floating-point operations, in the order, of the numpy code it replaces
(``PersistentTable``, ``WeakTable``, ``Split.row``), so the tables are equal value for
value: a minimum is exact in any order, and where ``dp`` leaves candidates out (with
integer times, past the point where none can beat the running minimum) they are ones that
cannot change it; ``fastmath`` allows only what cannot change a value here (no NaN is ever
formed: inf is never subtracted from inf; signed zeros do not occur), never reassociation.
"""
from __future__ import annotations

import numpy as np
from numba import njit

FM = {"nnan", "nsz"}
TAIL_MAX = 65534  # largest excess above the ideal time a uint16 tail cell holds


@njit(cache=True, fastmath=FM)
def min_plus_rows(left, right, out):
    R, W = left.shape
    for r in range(R):
        lr = left[r]
        rr = right[r]
        for m in range(W):
            v = lr[m] + rr[m]
            if v < out[m]:
                out[m] = v


# ---------------------------------------------------------------------- dp
# Every loop over memory values indexes flat arrays at uint64 offsets: numba checks a signed
# index for wraparound, which stops LLVM from vectorizing the loop, an unsigned one it does
# not; and no array view is made per split (each view costs two atomic reference-count
# updates: an eighth of a profile's samples when one was made per split and row).
U = np.uint64


@njit(cache=True, fastmath=FM, inline="always")
def _mp(acc, ao, left, lo, right, ro, n):  # acc[ao + i] = min(., left[lo + i] + right[ro + i])
    for i in range(n):
        acc[ao + i] = min(acc[ao + i], left[lo + i] + right[ro + i])


@njit(cache=True, fastmath=FM, inline="always")
def _fill(dst, do, n, v):
    for i in range(n):
        dst[do + i] = v


@njit(cache=True, fastmath=FM, inline="always")
def _copy(dst, do, src, so, n):
    for i in range(n):
        dst[do + i] = src[so + i]


@njit(cache=True, fastmath=FM, inline="always")
def _copy_add(dst, do, src, so, n, c):  # dst[do + i] = src[so + i] + c
    for i in range(n):
        dst[do + i] = src[so + i] + c


@njit(cache=True, fastmath=FM)
def _expand_rows(dst, base, W, kb0, kb1, s, lo, g, en, fps, R, A, P, B, HOFF, TOFF, cfa, cfx,
                 cb, hpool, tpool):
    """For kb0 <= k < kb1: the stored row (s, k - 1), dense, to dst[base + (k - kb0) * W + m]
    for max(lo, g + fps[s, k - s]) <= m < en: inf below its A, hpool on [A, P), ideal +
    tpool on [P, B), ideal from B; the values the min-plus then adds are formed as the numpy
    kernel forms them.  One call per block of rows, the loops written out: an inlined helper
    taking the pools made two atomic reference-count updates per array and row."""
    tp = dst.dtype.type
    for k in range(kb0, kb1):
        st = max(lo, g + fps[s, k - s])
        if st >= en:
            continue
        seg = s * R + (k - 1 - s)
        a, p, b, h, tt = A[seg], P[seg], B[seg], HOFF[seg], TOFF[seg]
        ideal = tp((cfx[k] - cfa[s]) + (cb[k] - cb[s]))
        do = base + (k - kb0) * W
        e = min(en, a)
        if st < e:
            o = U(do + st)
            for i in range(U(e - st)):
                dst[o + i] = np.inf
        m0 = max(st, a)
        e = min(en, p)
        if m0 < e:
            o, q = U(do + m0), U(h + m0 - a)
            for i in range(U(e - m0)):
                dst[o + i] = hpool[q + i]
        m1 = max(st, p)
        e = min(en, b)
        if m1 < e:
            o, q = U(do + m1), U(tt + m1 - p)
            for i in range(U(e - m1)):
                dst[o + i] = ideal + tp(tpool[q + i])
        m2 = max(st, b)
        if m2 < en:
            o = U(do + m2)
            for i in range(U(en - m2)):
                dst[o + i] = ideal


@njit(cache=True)
def min_memory_length(n, L, x, tape, fao, bneed, dA, fps, S):
    """S[s, n] for every s: the skewed min-memory table (``solvers/dp_table.py``,
    :func:`~solvers.dp_table.skewed_min_memory`) of the segments of length n, from the
    shorter ones: the same maxima and minima of the same integers as the numpy code."""
    for s in range(L + 1 - n):
        t = s + n
        gt = x[t + 1] if t < L else 0
        best = max(max(gt + tape[s] + fao[s], bneed[s]), dA[s] + S[s + 1, n - 1])
        for k in range(s + 1, t + 1):
            c = max(max(fps[s, k - s] + gt, x[k] + S[k, t - k]), S[s, k - 1 - s])
            if c < best:
                best = c
        S[s, n] = best


@njit(cache=True, fastmath=FM)
def persistent_block(t0, t1, L, W, mms, sat, fps, x, gl, tf, bneed, dA, cap, cf, cfa, cfx, cb,
                     fb, A, P, B, HOFF, TOFF, hpool, tpool, pos, tails, LD, COL, CT, ACC, DL):
    """Columns t0 <= t < t1 of the value table, s descending, t ascending inside: the rows
    go to the pools (segment (s, n = t - s) at index s * (L + 1) + n: inf below A, hpool on
    [A, P), ideal + tpool on [P, B), ideal from B), and dense to LD (rows of this block, per
    s of the current group), COL (W(s, t, .) for the last two s, by parity) and CT
    (W(k, t, m - x[k]) + cf[k]) of the
    block.  The s are taken in groups of ``LD.shape[0]``, the splits whose left part is
    stored in blocks of ``DL.shape[1]``: each such left row is expanded once into DL (dense,
    over the memory values some t of the block reads) and read from there for every t, each
    right row CT[t, k] is read once for the group.  The splits go four at a time, and with
    integer times (``tails``) a pass stops where the running minimum is already at most the
    bound ideal(s, t) + cf[k] every candidate of the four reaches (the comments below)."""
    T = t1 - t0
    G, KB = DL.shape[0], DL.shape[1]
    R = L + 1
    accf, ctf, dlf = ACC.reshape(-1), CT.reshape(-1), DL.reshape(-1)
    av = np.zeros((G, T), np.int64)
    bv = np.zeros((G, T), np.int64)
    lov = np.zeros((G, T), np.int64)
    nkv = np.zeros((G, T), np.int64)
    mlo = np.zeros(G, np.int64)  # over the block's t: least lo, least g, largest b
    mg = np.zeros(G, np.int64)
    mhi = np.zeros(G, np.int64)
    for top in range(t1 - 1, -1, -G):
        low = max(0, top - G + 1)
        for s in range(top, low - 1, -1):
            si = top - s
            mlo[si], mg[si], mhi[si] = W, W, 0
            for ti in range(T):
                t = t0 + ti
                if t <= s:
                    continue
                n = t - s
                a = min(mms[s, n], W)
                b = max(a, min(sat[s, n], W))
                lo = max(a, gl[t] + fps[s, 1])
                av[si, ti], bv[si, ti], lov[si, ti] = a, b, lo
                nkv[si, ti] = min(n, cap[s])
                if lo < b:
                    _fill(accf, U((si * T + ti) * W + lo), U(b - lo), np.inf)
                    mlo[si], mg[si] = min(mlo[si], lo), min(mg[si], gl[t])
                    mhi[si] = max(mhi[si], b)
        # splits k > top whose left part (s, k - 1) is stored (k - 1 < t0)
        for kb0 in range(top + 1, t0 + 1, KB):
            kb1 = min(kb0 + KB, t0 + 1)
            for s in range(top, low - 1, -1):
                si = top - s
                if mlo[si] < mhi[si]:
                    _expand_rows(dlf, si * KB * W, W, kb0, min(kb1, s + cap[s] + 1), s,
                                 mlo[si], mg[si], mhi[si], fps, R, A, P, B, HOFF, TOFF, cfa,
                                 cfx, cb, hpool, tpool)
            # s, then k, then t: the expanded left rows stay in the first-level cache for
            # the block's t, with the accumulators of (s, .); the right rows come from the
            # second-level cache.  Four splits at a time: on the memory values where all
            # four are allowed (from the last one's threshold: thresholds do not decrease
            # in k) one pass takes the least of the four candidates, then the accumulator
            # (min is exact: the same value in any order), below it each split alone.
            for s in range(top, low - 1, -1):
                si = top - s
                kc = min(kb1, s + cap[s] + 1)
                for k in range(kb0, kc, 4):
                    k4 = min(k + 4, kc)
                    for ti in range(T):
                        t = t0 + ti
                        lo, b = lov[si, ti], bv[si, ti]
                        if t <= s or lo >= b:
                            continue
                        ke = min(k4, s + nkv[si, ti] + 1)
                        g = gl[t]
                        ab = (si * T + ti) * W
                        sl = max(lo, g + fps[s, ke - 1 - s]) if ke - k == 4 else b
                        # The fused pass stops at the first m where the accumulator is
                        # already <= lb = ideal(s, t) + cf[k]: every candidate of the
                        # quad is >= lb (each part is at least its ideal time, the pass
                        # costs cf[k'] - cf[s] >= cf[k] - cf[s]; in accumulator units cf[s]
                        # is not yet taken off), and the accumulator does not increase with
                        # m (each candidate row does not: more memory never costs time), so
                        # from there on no candidate is smaller.  Only with integer times
                        # (tails): then every value is an exact integer and lb is exact.
                        me = b
                        if tails and sl < b:
                            lb = ((cfx[t + 1] - cfa[s]) + (cb[t + 1] - cb[s])) + cf[k]
                            if np.float64(accf[ab + b - 1]) <= lb:
                                u, w = sl, b - 1
                                while u < w:
                                    h = (u + w) // 2
                                    if np.float64(accf[ab + h]) <= lb:
                                        w = h
                                    else:
                                        u = h + 1
                                me = u
                        for kk in range(k, ke):  # written out: an inlined call increfs
                            st = max(lo, g + fps[s, kk - s])
                            e = min(sl, b)
                            if st < e:
                                ao, lo2 = U(ab + st), U((si * KB + kk - kb0) * W + st)
                                ro = U((ti * R + kk) * W + st)
                                for i in range(U(e - st)):
                                    accf[ao + i] = min(accf[ao + i], dlf[lo2 + i] + ctf[ro + i])
                        if sl < me:
                            ao = U(ab + sl)
                            d0 = U((si * KB + k - kb0) * W + sl)
                            d1, d2, d3 = d0 + U(W), d0 + U(2 * W), d0 + U(3 * W)
                            c0 = U((ti * R + k) * W + sl)
                            c1, c2, c3 = c0 + U(W), c0 + U(2 * W), c0 + U(3 * W)
                            for i in range(U(me - sl)):
                                v = min(min(dlf[d0 + i] + ctf[c0 + i], dlf[d1 + i] + ctf[c1 + i]),
                                        min(dlf[d2 + i] + ctf[c2 + i], dlf[d3 + i] + ctf[c3 + i]))
                                accf[ao + i] = min(accf[ao + i], v)
        for s in range(top, low - 1, -1):
            _finish(s, top - s, top, t0, T, L, W, R, mms, fps, x, gl, tf, bneed, dA, cf, cfa,
                    cfx, cb, fb, A, P, B, HOFF, TOFF, hpool, tpool, pos, tails, LD, COL, CT,
                    ACC, DL, av, bv, lov, nkv)


@njit(cache=True, fastmath=FM)
def _finish(s, si, top, t0, T, L, W, R, mms, fps, x, gl, tf, bneed, dA, cf, cfa, cfx, cb, fb,
            A, P, B, HOFF, TOFF, hpool, tpool, pos, tails, LD, COL, CT, ACC, DL, av, bv, lov,
            nkv):
    """The rows (s, t), t ascending: the splits left (k <= top, and k - 1 >= t0), option A,
    the base case; then stored and copied to LD, COL and CT."""
    inf = np.inf
    tp = LD.dtype.type
    accf, ctf, ldf, colf = ACC.reshape(-1), CT.reshape(-1), LD.reshape(-1), COL.reshape(-1)
    exf = DL.reshape(-1)  # scratch: stored left rows, expanded
    # the stored left parts (s, k - 1), s < k <= top, that some t of the block reads:
    # expanded once, over the memory values any of them reads
    mlo, mg, mhi, kx = W, W, 0, s + 1
    for ti in range(T):
        if t0 + ti > s and lov[si, ti] < bv[si, ti]:
            mlo, mg = min(mlo, lov[si, ti]), min(mg, gl[t0 + ti])
            mhi = max(mhi, bv[si, ti])
            kx = max(kx, min(top, t0, s + nkv[si, ti]) + 1)
    if s + 1 < kx:
        _expand_rows(exf, 0, W, s + 1, kx, s, mlo, mg, mhi, fps, R, A, P, B, HOFF, TOFF, cfa,
                     cfx, cb, hpool, tpool)
    for ti in range(T):
        t = t0 + ti
        if t < s:
            continue
        n = t - s
        g = gl[t]
        seg = s * R + n
        ideal = tp((cfx[t + 1] - cfa[s]) + (cb[t + 1] - cb[s]))
        ro = (si * T + ti) * W  # the row, in LD
        if n == 0:
            a = min(mms[s, 0], W)
            b = a
            _fill(ldf, U(ro), U(a), inf)
            _fill(ldf, U(ro + a), U(W - a), ideal)
        else:
            a, b, lo, nk = av[si, ti], bv[si, ti], lov[si, ti], nkv[si, ti]
            _fill(ldf, U(ro), U(b), inf)
            _fill(ldf, U(ro + b), U(W - b), ideal)
            d = dA[s]
            a1 = max(a, g + tf[s], bneed[s])
            co = (ti * 2 + (s + 1) % 2) * W  # W(s + 1, t, .) in COL: at m - d, at most W - 1
            e = max(a1, min(b, W - 1 + d))
            if a1 < e:
                _copy_add(ldf, U(ro + a1), colf, U(co + a1 - d), U(e - a1), fb[s])
            for m in range(e, b):
                ldf[ro + m] = colf[co + W - 1] + fb[s]
            if lo < b:
                ao = (si * T + ti) * W
                # stored left part, right part computed in this group (s < k <= top)
                k1 = min(top, t0, s + nk) + 1  # rows expanded above
                for k in range(s + 1, k1):
                    st = max(lo, g + fps[s, k - s])
                    if st < b:
                        _mp(accf, U(ao + st), exf, U((k - s - 1) * W + st), ctf,
                            U((ti * R + k) * W + st), U(b - st))
                # left part computed in this block (k - 1 >= t0)
                for k in range(max(s + 1, t0 + 1), s + nk + 1):
                    st = max(lo, g + fps[s, k - s])
                    if st < b:
                        _mp(accf, U(ao + st), ldf, U((si * T + k - 1 - t0) * W + st), ctf,
                            U((ti * R + k) * W + st), U(b - st))
                cs = cf[s]
                o, q = U(ro + lo), U(ao + lo)
                for i in range(U(b - lo)):
                    ldf[o + i] = min(ldf[o + i], accf[q + i] - cs)
        _copy(colf, U((ti * 2 + s % 2) * W), ldf, U(ro), U(W))
        if s >= 1:
            xs = min(x[s], W)
            cto = (ti * R + s) * W
            _fill(ctf, U(cto), U(xs), inf)
            _copy_add(ctf, U(cto + xs), ldf, U(ro), U(W - xs), cf[s])
        # store: the tail [p, b) as uint16 excess over the ideal time where it is exact
        p = b
        if tails and a < b:
            bad = U(0)  # 1 + the last cell of [a, b) that is not exact as a tail, 0 if none
            o = U(ro + a)
            for i in range(U(b - a)):
                v = ldf[o + i]
                u = np.float64(v) - np.float64(ideal)
                ok = u >= 0.0 and u <= TAIL_MAX and u == np.floor(u)
                w = ideal + tp(np.uint16(u if ok else 0.0))
                good = ok & (w == v)
                bad = max(bad, U(0) if good else i + U(1))
            p = a + np.int64(bad)
        A[seg], P[seg], B[seg] = a, p, b
        h = pos[0]
        HOFF[seg] = h
        if a < p:
            _copy(hpool, U(h), ldf, U(ro + a), U(p - a))
        pos[0] = h + (p - a)
        tt = pos[1]
        TOFF[seg] = tt
        o, q = U(ro + p), U(tt)
        for i in range(U(b - p)):
            tpool[q + i] = np.uint16(np.float64(ldf[o + i]) - np.float64(ideal))
        pos[1] = tt + (b - p)


# ---------------------------------------------------------------------- dp-weak
# ``WeakTable``'s fill (solvers/dp_weak.py), the numpy expressions written as loops in the
# same order of operations: (a + c) + b stays (a + c) + b.  Flat arrays at uint64 offsets,
# no view per row (as for dp above): the rows are short (M + 1 values), so what a row costs
# besides its values counts.
@njit(cache=True, fastmath=FM, inline="always")
def _fa(dst, do, src, so, n, c):  # dst = min(dst, src + c)
    for i in range(n):
        dst[do + i] = min(dst[do + i], src[so + i] + c)


@njit(cache=True, fastmath=FM, inline="always")
def _faa(dst, do, a, ao, c, b, bo, n):  # dst = min(dst, (a + c) + b)
    for i in range(n):
        dst[do + i] = min(dst[do + i], (a[ao + i] + c) + b[bo + i])


@njit(cache=True, fastmath=FM, inline="always")
def _fs(dst, do, a, ao, b, bo, n):  # dst = min(dst, a + b)
    for i in range(n):
        dst[do + i] = min(dst[do + i], a[ao + i] + b[bo + i])


@njit(cache=True, fastmath=FM)
def _blk(dst, D, src, S, Q, n, lo, c, pen, PW, PR):
    """dst[D + q * n + m] = min(., src[S + q * n + m] + c) for q < Q, lo <= m < n.  With
    the mask ``pen`` (flat (PR, PW): pen[lo * PW + f] = 0 where f % n >= lo, inf below) the
    Q rows are one flat loop: (v + c) + 0 is v + c exactly, (v + c) + inf is inf, so the
    cells left of lo keep their value; without it (too large for this M) one loop per row."""
    if PR > lo and PW >= Q * n:
        o, so, po = U(D + lo), U(S + lo), U(lo * PW + lo)
        for i in range(U(Q * n - lo)):
            dst[o + i] = min(dst[o + i], (src[so + i] + c) + pen[po + i])
        return
    for q in range(Q):
        o, so = U(D + q * n + lo), U(S + q * n + lo)
        for i in range(U(n - lo)):
            dst[o + i] = min(dst[o + i], src[so + i] + c)


@njit(cache=True, fastmath=FM)
def weak_fill(t0, t1, L, n, x, cf, fp, step, th, tape, fao, bneed, dA, fall, bwd, lossneed,
              gl, KO, Wd, Rarr, RO, Karr, G, H, HK, tmp, PEN):
    """Columns t0 <= t < t1 of WeakTable (W dense Wd[s, t - s], R rows Rarr[RO[i, t] + j - i
    - 1], K rows Karr[KO[s] + t - s] where KO[s] >= 0); s descending inside a column.

    For a segment (s, t) one pass over the splits k reads each block of rows R(k, t, ., .)
    once for everything that needs it (release and keep-release of R(s, t, ., .), option C
    of W(s, t, .), K(s, t, .)), where ``WeakTable._r_rows``, ``_k_row`` and the W options
    read it in turn: the same candidates, each formed by the same operations."""
    inf = np.inf
    tp = Wd.dtype.type  # costs in the table's dtype (float32 only where it is exact)
    wf, rf, kf = Wd.reshape(-1), Rarr.reshape(-1), Karr.reshape(-1)
    gf, hf, hkf, pf = G.reshape(-1), H.reshape(-1), HK.reshape(-1), PEN.reshape(-1)
    PR, PW = PEN.shape[0], PEN.shape[1]
    R1 = L + 1
    N = U(n)
    for t in range(t0, t1):
        g = gl[t]
        for s in range(t, -1, -1):
            nn = t - s
            ro = (s * R1 + nn) * n  # the row W(s, t, .)
            hask = KO[s] >= 0 and t < L
            kb = KO[s]
            if nn == 0:
                if hask:  # K(s, s): B_s
                    bn = min(bneed[s], n)
                    _fill(kf, U(kb * n), U(bn), inf)
                    _fill(kf, U(kb * n + bn), U(n - bn), tp(bwd[s]))
                if t == L:
                    need, cost = lossneed, bwd[L]
                else:
                    need = max(g + tape[s] + fao[s], bneed[s])
                    cost = fall[s] + bwd[s]
                need = min(need, n)
                _fill(wf, U(ro), U(need), inf)
                _fill(wf, U(ro + need), U(n - need), cost)
                continue
            hasr = s >= 1
            xs = x[s]
            h = th[s]
            rb = RO[s, t] if hasr else 0
            if hasr:
                _fill(gf, U(0), U((nn - 1) * n), inf)
                _fill(rf, U(rb * n), U(nn * n), inf)
            _fill(hf, U(0), U((nn - 1) * n), inf)
            if hask:
                _fill(hkf, U(0), U((nn - 1) * n), inf)
                _fill(tmp, U(0), N, inf)
            need = g
            for k in range(s + 1, t + 1):
                c = tp(cf[k] - cf[s])
                xk = x[k]
                wk = (k * R1 + t - k) * n  # the row W(k, t, .)
                if hasr:  # release x_s now: Fn_s .. Fn_{k-1}, back to W(k, t) (j = k)
                    need = max(need, g + step[k - 1])
                    lo = max(need, xk)
                    if lo < n:
                        _fa(rf, U((rb + k - s - 1) * n + lo), wf, U(wk + lo - xk), U(n - lo), c)
                if k < t:
                    base = RO[k, t] * n
                    Q = t - k
                    if hasr:
                        lo = min(need, n)  # release, x_k released in turn (j > k)
                        if lo < n:
                            _blk(rf, (rb + k - s) * n, rf, base, Q, n, lo, c, pf, PW, PR)
                        lo = max(xs + g + fp[s, k], xs)  # keep-release inner minimum
                        if lo < n:
                            _blk(gf, (k - s - 1) * n, rf, base - xs, Q, n, lo, c, pf, PW, PR)
                    lo = min(g + fp[s, k], n)  # W option C
                    if lo < n:
                        _blk(hf, (k - s - 1) * n, rf, base, Q, n, lo, c, pf, PW, PR)
                    if hask:  # K: pass(s, k), R(k, t, j', m - th[s])
                        lr = max(h + g + fp[s, k], h)
                        if lr < n:
                            _blk(hkf, (k - s - 1) * n, rf, base - h, Q, n, lr, c, pf, PW, PR)
                if hask:  # K: pass(s, k), W(k, t, m - th[s] - x[k]), K(s, k-1, m)
                    d = h + xk
                    lw = max(h + g + fp[s, k], d)
                    if lw < n:
                        _faa(tmp, U(lw), wf, U(wk + lw - d), c, kf,
                             U((kb + k - 1 - s) * n + lw), U(n - lw))
            if hasr:
                for k in range(s + 2, t + 1):  # keep: checkpoint x_k committed (j < k)
                    d = xs + x[k]
                    lo = max(xs + g + fp[s, k], d)
                    if lo < n:
                        c = tp(cf[k] - cf[s])
                        base = RO[s, k - 1]
                        wo = U((k * R1 + t - k) * n + lo - d)
                        for q in range(k - s - 1):
                            o, so = U((rb + q) * n + lo), U((base + q) * n + lo)
                            for i in range(U(n - lo)):
                                rf[o + i] = min(rf[o + i], (wf[wo + i] + c) + rf[so + i])
                for jp in range(s + 2, t + 1):  # keep, the new checkpoint released (j < j')
                    base = RO[s, jp - 1]
                    go = U((jp - s - 2) * n)
                    for q in range(jp - s - 1):
                        o, so = U((rb + q) * n), U((base + q) * n)
                        for i in range(N):
                            rf[o + i] = min(rf[o + i], gf[go + i] + rf[so + i])
            if hask:
                for q in range(nn - 1):
                    _fs(tmp, U(0), hkf, U(q * n), kf, U((kb + 1 + q) * n), N)
                _copy(kf, U((kb + nn) * n), tmp, U(0), N)
            _fill(wf, U(ro), N, inf)
            d = dA[s]  # A: Fall_s, W(s+1, t, m - dA[s]), B_s
            fcost = tp(fall[s] + bwd[s])
            lo = max(max(g + tape[s] + fao[s], bneed[s]), d)
            co = ((s + 1) * R1 + nn - 1) * n
            for m in range(lo, n):
                wf[ro + m] = wf[co + min(m - d, n - 1)] + fcost
            if hask and nn >= 2:  # A-release
                lo = max(g + tape[s] + fao[s], h)
                if lo < n:
                    base = RO[s + 1, t]
                    _fill(tmp, U(lo), U(n - lo), inf)
                    for q in range(nn - 1):
                        _fs(tmp, U(lo), rf, U((base + q) * n + lo - h), kf,
                            U((kb + 1 + q) * n + lo), U(n - lo))
                    for m in range(lo, n):
                        wf[ro + m] = min(wf[ro + m], tmp[m] + tp(fall[s]))
            for k in range(s + 1, t + 1):  # B: persistent checkpoint x_k
                xk = x[k]
                lo = max(g + fp[s, k], xk)
                if lo < n:
                    _faa(wf, U(ro + lo), wf, U((k * R1 + t - k) * n + lo - xk),
                         tp(cf[k] - cf[s]), wf, U((s * R1 + k - 1 - s) * n + lo), U(n - lo))
            for q in range(nn - 1):  # C: checkpoint x_k released, back to d_j
                _fs(wf, U(ro), hf, U(q * n), wf, U((s * R1 + q + 1) * n), N)


# ---------------------------------------------------------------------- dp-offload
@njit(cache=True, fastmath=FM)
def split_rows_min(out, f, ints, c):
    """out[m] = min(out[m], (A_r[m + da_r] + B_r[m + db_r]) + c[r]) for every r and m >=
    thr_r: ``dp-offload``'s option-B candidates (solvers/offload/dp_split.py).  f holds
    A_r at [2rW, (2r+1)W), B_r after it; ints[3r:3r+3] = (da_r, db_r, thr_r); an index past a
    row's end reads its last entry, one below 0 is inf (no candidate).  Where neither index
    passes the end the loop is one contiguous pass (vectorized), then the clamped rest."""
    R, W = c.shape[0], out.shape[0]
    for r in range(R):
        a, b, cr = ints[3 * r], ints[3 * r + 1], c[r]
        m0 = max(max(ints[3 * r + 2], 0), max(-a, -b))
        m1 = max(m0, min(W, W - max(a, b)))  # m < m1: both indices inside the rows
        if m0 < m1:
            ao, bo = U(2 * r * W + m0 + a), U((2 * r + 1) * W + m0 + b)
            for i in range(U(m1 - m0)):
                out[U(m0) + i] = min(out[U(m0) + i], (f[ao + i] + f[bo + i]) + cr)
        for m in range(m1, W):
            v = (f[2 * r * W + min(m + a, W - 1)] + f[(2 * r + 1) * W + min(m + b, W - 1)]) + cr
            out[m] = min(out[m], v)
