"""dp-offload's gap on the referee's distribution (issue 41),
``benchmarks/results/offload_dp_gap_referee.json`` (``benchmarks/offload_dp_gap_referee.py``),
checked: the summary is its rows' (no hand-edited figure), and the worst gap instance is
rebuilt from its seed, its optimal schedule replays in the referee to the optimum within
the budget, and ``dp-offload`` solves to the value stored, above it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.offload_dp_gap_referee import chain_of, summarize
from remat_theory import simulate
from solvers import registry

DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
RESULTS = DIR / "offload_dp_gap_referee.json"
FILES = ("offload_dp_gap_referee.json", "offload_dp_gap_referee_large.json")


def _data(name: str = "offload_dp_gap_referee.json"):
    return json.loads((DIR / name).read_text())


@pytest.mark.parametrize("name", FILES)
def test_the_summary_is_the_rows(name):
    d = _data(name)
    assert d["summary"] == summarize(d["rows"])
    assert d["command"].startswith("python benchmarks/offload_dp_gap_referee.py")


def test_the_worst_gap_replays():
    rows = [r for r in _data()["rows"] if r.get("optimal_schedule")]
    worst = max(rows, key=lambda r: r["ratio"])
    chain = chain_of(worst["stages"], worst["seed"], worst["unsaved_outputs"])
    assert chain.bandwidth == worst["bandwidth"]
    sim = simulate(chain, worst["optimal_schedule"], worst["budget"])
    assert sim.makespan == pytest.approx(worst["optimum"], rel=1e-9)
    dp = registry.solve(chain, worst["budget"], "dp-offload")
    assert dp.makespan == pytest.approx(worst["dp_offload"], rel=1e-9)
    assert dp.makespan > sim.makespan * (1 + 1e-9)
