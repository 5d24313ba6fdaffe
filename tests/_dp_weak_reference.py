"""The first implementation of the weak-persistence tables (one numpy call per candidate
row), kept as the reference the vectorized ``solvers.dp_weak.WeakTable`` is compared with
(tests/test_dp.py).  Not part of the package."""
from __future__ import annotations

import math

import numpy as np

from solvers._dp_tables import NEVER, Deadline, UnitChain, shift

INF = math.inf


class ReferenceWeakTable:
    """Value tables W(s, t, .) and R(i, t, j, .) for m = 0..M (float64, inf = infeasible)."""

    def __init__(self, uc: UnitChain, M: int, deadline: Deadline = NEVER):
        self.uc, self.M = uc, M
        self.deadline = deadline
        L, x, tape, cf = uc.L, uc.x, uc.tape, uc.cf
        step = np.zeros(L, dtype=np.int64)
        step[:] = x[:L] + x[1:] + uc.fo
        self.step = step
        n = M + 1
        marr = np.arange(n, dtype=np.int64)
        W: dict = {}
        R: dict = {}

        def masked(row, need):
            if need > 0:
                row[:min(int(need), n)] = INF
            return row

        for t in range(L + 1):
            g = uc.g(t)
            for s in range(t, -1, -1):
                deadline.check(f"building the tables (segment ({s}, {t}) of {L} stages)")
                if s >= 1:
                    # keep-release inner minimum: G[j'] = min_k pass(s, k) + R(k, t, j', m - x[s])
                    G = {}
                    for jp in range(s + 2, t + 1):
                        best = np.full(n, INF)
                        for k in range(s + 1, jp):
                            cand = shift(R[k, t, jp], int(x[s])) + (cf[k] - cf[s])
                            np.minimum(best, masked(cand, x[s] + g + uc.fp[s, k]), out=best)
                        G[jp] = best
                    for j in range(s + 1, t + 1):
                        best = np.full(n, INF)
                        for l in range(s + 1, j + 1):  # release x_s now
                            need = g + int(step[s:l].max())
                            if l == j:
                                cand = shift(W[l, t], int(x[l])) + (cf[l] - cf[s])
                            else:
                                cand = R[l, t, j] + (cf[l] - cf[s])
                            np.minimum(best, masked(cand, need), out=best)
                        for k in range(j + 1, t + 1):  # keep: checkpoint x_k committed
                            cand = shift(W[k, t], int(x[s] + x[k])) + (cf[k] - cf[s]) + R[s, k - 1, j]
                            np.minimum(best, masked(cand, x[s] + g + uc.fp[s, k]), out=best)
                        for jp in range(j + 1, t + 1):  # keep, the new checkpoint released too
                            np.minimum(best, G[jp] + R[s, jp - 1, j], out=best)
                        R[s, t, j] = best
                if s == t:
                    if t == L:
                        need, cost = int(x[L] + uc.bo[L]), uc.bwd[L]
                    else:
                        need, cost = uc.fall_needs(s, t), uc.fall[s] + uc.bwd[s]
                    W[s, t] = np.where(marr >= need, cost, INF)
                    continue
                best = masked(shift(W[s + 1, t], int(tape[s])) + (uc.fall[s] + uc.bwd[s]),
                              uc.fall_needs(s, t))
                for k in range(s + 1, t + 1):  # B: persistent checkpoint x_k
                    cand = shift(W[k, t], int(x[k])) + (cf[k] - cf[s]) + W[s, k - 1]
                    np.minimum(best, masked(cand, g + uc.fp[s, k]), out=best)
                for j in range(s + 2, t + 1):  # C: checkpoint x_k released, back to d_j
                    H = np.full(n, INF)
                    for k in range(s + 1, j):
                        cand = R[k, t, j] + (cf[k] - cf[s])
                        np.minimum(H, masked(cand, g + uc.fp[s, k]), out=H)
                    np.minimum(best, H + W[s, j - 1], out=best)
                W[s, t] = best
        self.W, self.R = W, R
