"""O.11 (c): the certificate of where the class DP ``dp-offload`` is not optimal,
``benchmarks/results/offload_dp_gap.json`` (``benchmarks/offload_dp_gap.py``), replayed.

For the first gap instance of each kind the file reports (an eviction, an early prefetch,
a late offload, none of these: the first label of its row), the chain is rebuilt from its seed, the
optimal schedule the file stores replays in the referee to the optimum, ``dp-offload``
solves to the value stored, above it, and the schedule has the moves the file names.  And
the file's summary is its rows' (no hand-edited figures).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.offload_dp_gap import features, summarize, with_channel
from remat_theory import simulate
from remat_theory.analysis import families
from remat_theory.model.schedule import Schedule
from solvers import registry

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "offload_dp_gap.json"


def _data():
    return json.loads(RESULTS.read_text())


def _firsts():
    seen, out = set(), []
    for r in _data()["rows"]:
        if not r["dp_optimal"] and r["features"][0] not in seen:
            seen.add(r["features"][0])
            out.append(r)
    return out


def test_the_summary_is_the_rows():
    d = _data()
    assert d["summary"] == json.loads(json.dumps(summarize(d["rows"])))
    assert "python benchmarks/offload_dp_gap.py" in d["command"]


@pytest.mark.parametrize("row", _firsts(), ids=lambda r: r["features"][0])
def test_a_gap_instance_replays(row):
    chain = with_channel(families.make("random", row["stages"], row["seed"]), row["ratio"],
                         row["seed"] if row["unsaved_outputs"] else None)
    schedule = Schedule.parse(row["optimal_schedule"])
    sim = simulate(chain, schedule)
    assert sim.peak_memory <= row["budget"]
    assert sim.makespan == pytest.approx(row["optimum"], rel=1e-9)
    dp = registry.solve(chain, row["budget"], "dp-offload")
    if row["dp_offload"] is None:
        assert dp.schedule is None
    else:
        assert dp.makespan == pytest.approx(row["dp_offload"], rel=1e-9)
        assert dp.makespan > sim.makespan * (1 + 1e-9)
    assert features(chain, schedule) == row["features"]
