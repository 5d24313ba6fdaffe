"""Exact offloading at 6 and 8 stages, ``benchmarks/results/offload_exact_depth.json``
(``benchmarks/offload_exact_depth.py``), checked: the summary is its rows' (no hand-edited
figure); every proved row's answer is optimal over all schedules with its bound equal to
its makespan, and ``dp-offload`` (its class's optimum) is never below it; the fastest
proved 6-stage instance is rebuilt from its seed and proved again to the stored value."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.offload_dp_gap_referee import chain_of
from benchmarks.offload_exact_depth import summarize
from solvers import registry

RESULTS = (Path(__file__).resolve().parent.parent / "benchmarks" / "results"
           / "offload_exact_depth.json")


def _data():
    return json.loads(RESULTS.read_text())


def test_the_summary_is_the_rows():
    d = _data()
    assert d["summary"] == summarize(d["rows"])
    assert d["command"].startswith("python benchmarks/offload_exact_depth.py")


def test_proved_rows_are_optima_the_dp_never_beats():
    for r in _data()["rows"]:
        proofs = [a for a in (r["exhaustive"], r["ilp"])
                  if a["status"] == "optimal" and a.get("optimal_for") == "all+offload"]
        assert r["proved"] == bool(proofs)
        for a in proofs:
            assert a["bound"] == pytest.approx(a["makespan"], rel=1e-9)
            assert r["dp_offload"] >= a["makespan"] * (1 - 1e-9)
        for a in (r["exhaustive"], r["ilp"]):
            if a.get("bound") is not None and a.get("makespan") is not None:
                assert a["bound"] <= a["makespan"] * (1 + 1e-9)


def test_the_fastest_proof_replays():
    rows = [r for r in _data()["rows"] if r["stages"] == 6
            and r["exhaustive"]["status"] == "optimal"]
    r = min(rows, key=lambda r: r["exhaustive"]["seconds"])
    chain = chain_of(r["stages"], r["seed"], r["unsaved_outputs"])
    assert chain.bandwidth == r["bandwidth"]
    sol = registry.solve(chain, r["budget"], "exhaustive-offload", max_stages=6)
    assert sol.status == "optimal" and sol.optimal_for == "all+offload"
    assert sol.makespan == pytest.approx(r["exhaustive"]["makespan"], rel=1e-9)
