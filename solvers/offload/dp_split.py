"""``dp-offload``'s option-B candidates unevaluated, and the reduction of a cell's
candidates by either kernel (option ``kernel``, ``solvers/dp_kernel.py``).

Every option-B candidate of ``dp-offload`` (the rests ``RK``, ``RO`` and ``RX`` after
``Fck_s``, a deferral's option B: :mod:`solvers.offload.dp_table`,
:mod:`solvers.offload.dp_defer`) is one split k of a segment: the row
``(A[m + da] + B[m + db]) + c`` for m at or above a threshold (inf below it), where A and
B are rows of shorter segments (an index past a row's end reads its last entry, one below
0 is inf).  :class:`Split` keeps those six things; :func:`least` takes the pointwise
minimum of a cell's candidates: with numpy each split is formed as a row first (the
expressions the DP always used), with numba all the cell's splits go to one compiled loop
(:func:`solvers.dp_numba.split_rows_min`) that forms each value by the same two float64
additions in the same order, so both kernels give the same rows, value for value.  The
rebuild reads one candidate at one m (:meth:`Split.__getitem__`, the same additions).
"""
from __future__ import annotations

import math

import numpy as np

INF = math.inf


def shifted(row: np.ndarray, d: int, W: int) -> np.ndarray:
    """out[m] = row[min(m + d, W - 1)] for m < W; inf where m + d < 0."""
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


class Split:
    """The candidate row ``(A[m + da] + B[m + db]) + c`` for m >= ``thr``, inf below
    (module docstring); A and B are the table's rows, never written."""

    __slots__ = ("A", "da", "B", "db", "c", "thr")

    def __init__(self, A: np.ndarray, da: int, B: np.ndarray, db: int, c: float, thr: int):
        self.A, self.da, self.B, self.db, self.c, self.thr = A, int(da), B, int(db), c, int(thr)

    def row(self, W: int) -> np.ndarray:
        """The row over m = 0..W-1, as numpy forms it."""
        B = self.B if self.db == 0 else shifted(self.B, self.db, W)
        out = shifted(self.A, self.da, W) + B + self.c
        if self.thr > 0:
            out[:min(self.thr, W)] = INF
        return out

    def __getitem__(self, m: int) -> float:
        if m < self.thr:
            return INF
        W = len(self.A)
        ia, ib = m + self.da, m + self.db
        if ia < 0 or ib < 0:
            return INF
        return (self.A[min(ia, W - 1)] + self.B[min(ib, W - 1)]) + self.c


def least(cands, W: int, kernel: str = "numpy") -> np.ndarray:
    """The pointwise minimum of the candidates' rows (inf where none); ``kernel``
    ``"numba"`` reduces the :class:`Split` candidates in one compiled loop."""
    best = np.full(W, INF)
    splits = []
    for row, _ in cands:
        if isinstance(row, Split):
            if kernel == "numba":
                splits.append(row)
                continue
            row = row.row(W)
        np.minimum(best, row, out=best)
    if splits:
        from solvers.dp_kernel import jit

        rows = [None] * (2 * len(splits))
        rows[0::2] = [p.A for p in splits]
        rows[1::2] = [p.B for p in splits]
        ints = [0] * (3 * len(splits))
        ints[0::3] = [p.da for p in splits]
        ints[1::3] = [p.db for p in splits]
        ints[2::3] = [p.thr for p in splits]
        jit().split_rows_min(best, np.concatenate(rows), np.array(ints, dtype=np.int64),
                             np.array([p.c for p in splits], dtype=np.float64))
    return best
