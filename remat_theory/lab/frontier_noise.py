"""How noisy a frontier's timings are: the spread of repeated paired runs, and the clock chosen
for them."""
from __future__ import annotations

import statistics


MIN_TOLERANCE = 0.02
"""The least relative difference a frontier calls a difference in time."""


def median_spread(ts: list) -> tuple:
    q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
    return statistics.median(ts), [q[0], q[2]]


# ------------------------------------------------------------------------ analysis
CLOCKS = {"thread_cpu": "cpu_times", "wall": "times"}
"""The two clocks every CPU point is timed by: the timing thread's CPU time (one torch
thread: the step's own work) and the wall clock (what a user waits)."""


def paired(a: dict, b: dict, key: str = "times") -> float:
    """Median over rounds of a's time / b's time in the same round (``key``: the clock)."""
    return statistics.median(x / y for x, y in zip(a[key], b[key]))


def _half_iqr(a: dict, b: dict, key: str = "times") -> float:
    r = [x / y for x, y in zip(a[key], b[key])]
    if len(r) < 2:
        return 0.0
    q = statistics.quantiles(r, n=4)
    return (q[2] - q[0]) / 2


def noise(points: list, clock: str = "wall") -> dict:
    """The noise floor on one clock (:data:`CLOCKS`), from two pairs that run the same
    kernels: repeated plain, and remat at store-all against plain.  The tolerance is the
    largest of 2%, each pair's median per-round ratio's distance from 1, and half the
    interquartile range of each pair's per-round ratios (the spread of one comparison from
    round to round).  Empty (no ``tolerance``) when no point was timed on that clock."""
    key = CLOCKS[clock]
    ok = {p["method"]: p for p in points if p["status"] == "ok" and p.get(key)}
    out, spreads = {}, []
    if "plain" in ok and "plain:2" in ok:
        out["plain_repeat"] = paired(ok["plain:2"], ok["plain"], key)
        out["plain_repeat_half_iqr"] = _half_iqr(ok["plain:2"], ok["plain"], key)
        spreads.append(out["plain_repeat_half_iqr"])
    full = [p for p in points if p["family"] == "remat" and p["status"] == "ok" and p.get(key)
            and p["predicted_peak"] is not None and p["method"].startswith("remat:")]
    if full and "plain" in ok:
        top = max(full, key=lambda p: p["param"])
        out["remat_store_all"] = paired(top, ok["plain"], key)
        out["remat_store_all_half_iqr"] = _half_iqr(top, ok["plain"], key)
        out["remat_store_all_peak_ratio"] = top["peak"] / max(1, ok["plain"]["peak"])
        spreads.append(out["remat_store_all_half_iqr"])
    inplace = [p for p in points if p["family"] == "remat_inplace" and p["status"] == "ok"
               and p.get(key) and p.get("recomputed") == 0]
    if inplace and "plain" in ok:  # the in-place API's plain-autograd plan: plain's kernels
        top = next((p for p in inplace if p["method"] == "remat_inplace:store-all"), inplace[-1])
        out["inplace_store_all"] = paired(top, ok["plain"], key)
        out["inplace_store_all_half_iqr"] = _half_iqr(top, ok["plain"], key)
        spreads.append(out["inplace_store_all_half_iqr"])
    if not ok:
        return out
    out["tolerance"] = max([MIN_TOLERANCE] + spreads
                           + [abs(v - 1) for k, v in out.items()
                              if k in ("plain_repeat", "remat_store_all", "inplace_store_all")])
    return out


def choose_clock(points: list) -> tuple:
    """``(clock, noise by clock)``: the clock whose measured noise (tolerance) is the smaller
    (ties: the thread's CPU time), among those every compared point was timed by."""
    by = {c: noise(points, c) for c in CLOCKS}
    have = [c for c in CLOCKS if "tolerance" in by[c]]
    if not have:
        return "wall", by
    return min(have, key=lambda c: by[c]["tolerance"]), by
