"""Periodic checkpointing: what ``torch.utils.checkpoint.checkpoint_sequential`` does.

``checkpoint_sequential(functions, segments=k, input)`` (PyTorch, torch/utils/checkpoint.py)
cuts a sequence of L modules into segments of ``L // k`` modules; the first k-1 segments
are run under ``checkpoint`` (forward without keeping anything but the segment's input,
which the checkpoint saves; the segment runs again, keeping everything, during the
backward), and the remaining modules (the last segment, which takes the remainder of the
division) are run normally, their activations stored.  In the operations of this model
that is the segment-checkpoint schedule with checkpoints at ``j * (L // k)``,
j = 1 .. k-1 (see :func:`solvers._schedules.segments_schedule`): every stage before the
last checkpoint runs twice, the others once.

Option ``segments=k`` (1 <= k <= L; torch refuses more segments than modules) fixes k; by
default every k = 1 .. L is evaluated exactly (makespan and peak in closed form, checked
against the simulator by the tests) and the fastest that fits the budget is returned
(ties: the smaller peak).  Assumes nothing about the chain: segments are equal in the
number of stages, not in cost, exactly as torch cuts them.

Every k at once (:func:`periodic_costs`): :func:`solvers._schedules.segments_cost` is O(L)
per k, O(L^2) for all of them (42.7 s at 20,000 stages).  Here the checkpoints of k are
j * s with s = L // k, so every k sharing s has the same first segments; the peak of each
full segment j is a function of (s, j) alone, read from prefix sums and block maxima, and a
running maximum over j serves every k of that s; the last segment is a suffix (suffix
maxima).  That is O(L) numpy work per distinct s, about 2 sqrt(L) of them: O(L^1.5) in all,
well under a second at 100,000 stages.  ``time_limit`` stops the sweep (k ascending: the
fewest recomputations first) and the answer says which k were evaluated.
"""
from __future__ import annotations

import numpy as np

from remat_theory.model.chain import Chain
from remat_theory.model.solution import Solution

from solvers._deadline import Deadline
from solvers._schedules import chain_arrays, segments_cost, segments_schedule
from solvers.registry import Option, register


def periodic_checkpoints(length: int, segments: int) -> list[int]:
    """Checkpoint positions of ``checkpoint_sequential(segments=k)`` on ``length`` stages."""
    size = length // segments
    return [j * size for j in range(1, segments)]


def _suffix_max(v: np.ndarray) -> np.ndarray:
    """``out[i] = max(v[i:])``, with one more entry, -inf, at ``len(v)``."""
    out = np.full(len(v) + 1, -np.inf)
    out[:-1] = np.maximum.accumulate(v[::-1])[::-1]
    return out


def _block_max(v: np.ndarray, start: int, width: int, count: int) -> np.ndarray:
    """``max(v[start + j*(width+1) : start + j*(width+1) + width])`` for j < count (blocks of
    ``width`` at stride ``width + 1``); -inf for an empty block."""
    if width <= 0 or count <= 0:
        return np.full(max(count, 0), -np.inf)
    stride = width + 1
    n = count * stride
    seg = np.full(n, -np.inf)
    take = min(n, len(v) - start)
    seg[:take] = v[start:start + take]
    return seg.reshape(count, stride)[:, :width].max(axis=1)


def periodic_costs(chain: Chain, deadline: Deadline | None = None,
                   ks=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ks, makespans, peaks)`` of ``checkpoint_sequential(segments=k)`` for every k in
    1..L ascending (or the given ``ks``), each equal to :func:`segments_cost` of
    :func:`periodic_checkpoints` (module docstring; the tests compare the two).  Stops
    early, with the ks evaluated so far, when ``deadline`` expires."""
    deadline = deadline or Deadline(None)
    a = chain_arrays(chain)
    L = a.L
    x, tp, fo, fao, bo, U, TH = a.x, a.tp, a.fo, a.fao, a.bo, a.U, a.TH
    idx = np.arange(L)
    # peaks with the segment's own terms split off (segments_cost's derivation):
    FA = (TH[idx] + U[idx] + tp + fao).astype(float)  # Fall_i, i past the segment start
    F0 = (tp + fao).astype(float)  # Fall_c, the segment's first
    BA = (x[idx + 1] + TH[idx + 1] + x[idx] + bo[:L]).astype(float)  # B_i
    AA = (x[idx] + x[idx + 1] + fo).astype(float)  # Fn_i, advancing
    A0 = (x[idx + 1] + fo).astype(float)  # Fck_c, the first of a segment
    sufFA, sufBA = _suffix_max(FA), _suffix_max(BA)
    fwd_prefix = np.concatenate(([0.0], np.cumsum(a.fwd)))
    loss_tail = float(TH[L] + U[L] + x[L] + bo[L])
    want = np.arange(1, L + 1) if ks is None else np.asarray(sorted(set(ks)), dtype=np.int64)
    out_k, out_m, out_p = [], [], []
    i = 0
    while i < len(want):
        if deadline.expired() and out_k:
            break
        s = L // int(want[i])
        group = want[(want >= L // (s + 1) + 1) & (want <= L // s)]
        n_full = max(0, int(group.max()) - 1)  # full segments the largest k of s needs
        c = np.arange(n_full + 1, dtype=np.int64) * s  # segment starts, j = 0..n_full
        P = x[0] + np.concatenate(([0], np.cumsum(x[c[1:]])))  # P_j
        if n_full:
            cj, Pj = c[:n_full], P[:n_full].astype(float)
            g = x[c[1:n_full + 1]].astype(float)  # the checkpoint after segment j
            inner_fa = _block_max(FA, 1, s - 1, n_full) if s > 1 else np.full(n_full, -np.inf)
            inner_aa = _block_max(AA, 1, s - 1, n_full) if s > 1 else np.full(n_full, -np.inf)
            full_ba = BA[:n_full * s].reshape(n_full, s).max(axis=1)
            V = np.maximum.reduce([
                Pj + g + F0[cj],
                Pj + g - TH[cj] - U[cj] + inner_fa,
                Pj - U[cj] - TH[cj] + full_ba,
                Pj + np.maximum(A0[cj], inner_aa)])
            prefix = np.maximum.accumulate(V)
        for k in group:
            k = int(k)
            cl = (k - 1) * s  # the last segment [cl, L), held P_{k-1}
            Pl = float(P[k - 1])
            peak = max(float(x[0]), Pl + F0[cl], Pl - TH[cl] - U[cl] + sufFA[cl + 1],
                       Pl - U[cl] - TH[cl] + sufBA[cl], Pl - U[cl] - TH[cl] + loss_tail)
            if k >= 2:
                peak = max(peak, float(prefix[k - 2]))
            out_k.append(k)
            out_m.append(a.ideal + float(fwd_prefix[cl]))
            out_p.append(int(peak))
        i += len(group)
    return np.asarray(out_k), np.asarray(out_m), np.asarray(out_p, dtype=np.int64)


@register("periodic", optimal_for="none", supports=("fall_time", "fall_overhead", "output_saved"),
          options={"segments": Option("int", "use exactly this many segments instead of the "
                                      "best that fits", minimum=1, maximum="L", none=True),
                   "time_limit": Option("seconds", "stops the sweep over k (the best of the "
                                        "ks evaluated answers)", none=True)},
          description="torch checkpoint_sequential: k-1 equal checkpointed segments, the rest stored; best k that fits.")
def solve_periodic(chain: Chain, budget: int, *, segments: int | None = None,
                   time_limit: float | None = None) -> Solution:
    """The fastest k that fits (module docstring); ``time_limit`` (seconds) stops the sweep
    over k, which then answers with the best of the ks evaluated (``info["ks_evaluated"]``)."""
    L = chain.length
    # the sweep gets half the limit: building the chosen schedule and its replay need the rest
    deadline = Deadline(None if time_limit is None else time_limit / 2)
    ks = [segments] if segments is not None else None
    evaluated, makespans, peaks = periodic_costs(chain, deadline, ks)
    smallest = int(peaks.min())
    fits = np.flatnonzero(peaks <= budget)
    done = len(evaluated) == (1 if segments is not None else L)
    which = (f"segments={segments}" if segments is not None else
             f"every k in 1..{L}" if done else
             f"k in 1..{int(evaluated[-1])} of 1..{L} (time limit)")
    info = {} if done else {"ks_evaluated": int(evaluated[-1])}
    if not len(fits) and not done:
        return Solution.time_limit("periodic", budget, info=info, message=(
            f"no periodic schedule of those evaluated ({which}) fits; the smallest peak "
            f"among them is {smallest}: no schedule, not proven optimal"))
    if not len(fits):
        return Solution.infeasible("periodic", budget, min_budget=smallest if done else None,
                                   info=info,
                                   message=f"no periodic schedule ({which}) fits; the smallest "
                                           f"peak is {smallest}")
    order = np.lexsort((peaks[fits], makespans[fits]))
    best = fits[order[0]]
    k = int(evaluated[best])
    cps = periodic_checkpoints(L, k)
    makespan, peak = segments_cost(chain, cps)  # the closed form, for the chosen k
    return Solution.feasible("periodic", budget, segments_schedule(chain, cps), makespan, peak,
                             min_budget=smallest if done else None,
                             message=f"segments={k} (segment size {L // k}, last segment "
                                     f"{L - (k - 1) * (L // k)} stages stored; {which})",
                             info=dict(info, segments=k, checkpoints=cps))
