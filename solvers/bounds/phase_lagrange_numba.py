"""The block program of :mod:`solvers.bounds.phase_lagrange`, compiled (numba; imported on
first use only).  The same dynamic program as ``Blocks._solve_block_numpy``, loop for loop;
``tests/test_phase_lagrange.py`` checks that both give the same minima."""
from __future__ import annotations

import numpy as np
from numba import njit

INF = np.inf


@njit(cache=True)
def solve_block(r, L, x, T, f, F, m, mu_p, mu_t, cap, capS, drops, point, force):
    """Minimum of block r; when ``point`` (int64[4, L + 2]) is not empty, a minimizer's
    items are written to it (rows: start plain, start tapes, end plain, end tapes).
    ``force`` (int64[4, L + 2], rows as ``point``): -1 free, else the item's forced value."""
    initial = r == L
    top = L if initial else min(r + 2, L)
    V = np.full((4, capS + 1, cap + 1), INF)
    if initial:
        V[2, 0, 0] = 0.0
    else:
        V[0, 0, 0] = 0.0
    trace = np.full((top + 1, 4, capS + 1, cap + 1), -1, dtype=np.int64)
    endq = r
    startq = r + 1
    for k in range(top, 0, -1):
        ps_ok = (not initial) and k <= r + 1
        ts_ok = (not initial) and k <= min(r + 2, L)
        pe_ok = k <= (L if initial else r)
        te_ok = k <= (L if initial else r + 1)
        nV = np.full((4, capS + 1, cap + 1), INF)
        for ps in range(2):
            if ps and not ps_ok:
                continue
            if force[0, k] >= 0 and ps != force[0, k]:
                continue
            for ts in range(2):
                if ts and not ts_ok:
                    continue
                if force[1, k] >= 0 and ts != force[1, k]:
                    continue
                wS = 0
                if capS > 0:
                    wS = (x[k] if ps else 0) + (T[k - 1] if ts else 0)
                    if wS > capS:
                        continue
                if not initial:
                    if k == r + 2 and not ts:
                        continue
                    if k == r + 1 and not (ps or ts):
                        continue
                for pe in range(2):
                    if pe and not pe_ok:
                        continue
                    if force[2, k] >= 0 and pe != force[2, k]:
                        continue
                    for te in range(2):
                        if te and not te_ok:
                            continue
                        if force[3, k] >= 0 and te != force[3, k]:
                            continue
                        if (not initial) and k == r + 1 and not te:
                            continue
                        if k == (L if initial else r) and k >= 1 and not (pe or te):
                            continue
                        w = (x[k] if pe else 0) + (T[k - 1] if te else 0)
                        if w > cap:
                            continue
                        price = 0.0
                        if endq >= 1:
                            if pe:
                                price += mu_p[endq, k]
                            if te:
                                price += mu_t[endq, k]
                        if not initial:
                            if ps:
                                price -= mu_p[startq, k]
                            if ts:
                                price -= mu_t[startq, k]
                        dropped = (not initial) and k <= r and ((ps and not pe) or (ts and not te))
                        combo = ((ps * 2 + ts) * 2 + pe) * 2 + te
                        if initial:
                            pc = pe
                            tc = te
                            avail = False
                        elif k == r + 2:
                            pc = 0
                            tc = 0
                            avail = True
                        else:
                            avail = (ts == 1) or (ps == 1 and k <= r)
                            pc = 1 if (pe and not ps) else 0
                            tc = 1 if (te and not ts) else 0
                        for s_in in range(4):
                            pend = s_in >> 1
                            fn = s_in & 1
                            if dropped and (not drops) and fn == 0:
                                continue
                            for fn_new in range(2):
                                if fn_new:
                                    if drops or k == r + 2:
                                        continue
                                    if not (pc or fn or k - 1 == r):
                                        continue
                                if k == r + 2:
                                    run = 0
                                    cost = 0.0
                                else:
                                    need = pend == 1 and not avail
                                    run = 1 if (pc or tc or fn_new or need) else 0
                                    plain_op = pc or fn_new
                                    cost = 0.0
                                    if tc:
                                        cost += F[k - 1]
                                    if plain_op:
                                        cost += f[k - 1]
                                    if run and not (plain_op or tc):
                                        cost += m[k - 1]
                                s_out = run * 2 + fn_new
                                add = cost + price
                                code = combo * 4 + s_in
                                for a in range(capS + 1 - wS):
                                    for b in range(cap + 1 - w):
                                        v = V[s_in, a, b]
                                        if v == INF:
                                            continue
                                        v += add
                                        if v < nV[s_out, a + wS, b + w]:
                                            nV[s_out, a + wS, b + w] = v
                                            trace[k, s_out, a + wS, b + w] = code
        V = nV
    best = INF
    bs = 0
    ba = 0
    bb = 0
    for s in range(4):
        for a in range(capS + 1):
            for b in range(cap + 1):
                if V[s, a, b] < best:
                    best = V[s, a, b]
                    bs = s
                    ba = a
                    bb = b
    if point.shape[1] == 0 or best == INF:
        return best
    s_cur = bs
    a = ba
    b = bb
    for k in range(1, top + 1):
        code = trace[k, s_cur, a, b]
        s_in = code & 3
        combo = code >> 2
        te = combo & 1
        pe = (combo >> 1) & 1
        ts = (combo >> 2) & 1
        ps = (combo >> 3) & 1
        point[0, k] = ps
        point[1, k] = ts
        point[2, k] = pe
        point[3, k] = te
        b -= (x[k] if pe else 0) + (T[k - 1] if te else 0)
        if capS > 0:
            a -= (x[k] if ps else 0) + (T[k - 1] if ts else 0)
        s_cur = s_in
    return best
