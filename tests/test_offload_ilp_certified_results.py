"""The stored results of ``benchmarks/offload_ilp_certified.py`` (proofs/offload.md O.22,
measured): the summary is the rows', the stored optima are exhaustive-offload's, and each
row's length bounds are the solver's (O.14 before, the normal form's O.21 after)."""
from __future__ import annotations

import json
import pathlib

import _bench
import pytest

from remat_theory.analysis import families
from solvers import registry
from solvers.offload.ilp import offload_incumbent
from solvers.offload.ilp_bounds import length_bound

ROOT = pathlib.Path(__file__).parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "offload_ilp_certified.json"


def _module(name):
    return _bench.load(name)


@pytest.fixture(scope="module")
def results():
    with open(RESULTS) as f:
        return json.load(f)


def test_the_summary_is_the_rows(results):
    bench = _module("offload_ilp_certified")
    assert bench.summarize(results["rows"]) == results["summary"]
    assert results["command"].startswith("python benchmarks/offload_ilp_certified.py")
    assert "/work" not in json.dumps(results) and "/tmp" not in json.dumps(results)


def test_rows_rebuild_to_their_optimum_and_bounds(results):
    """A few rows (the first certified ones with the largest gain, and one not certified):
    the chain rebuilt from its seed, exhaustive-offload's optimum, and both length bounds
    of the incumbent's makespan are the stored ones; a certified row's optimum is above
    the ideal makespan or equal to it, never below."""
    gap = _module("offload_dp_gap")
    rows = results["rows"]
    picked = sorted((r for r in rows if r["certified"]),
                    key=lambda r: r["n_after"] - r["n_before"])[:2]
    picked += [r for r in rows if not r["certified"]][:1]
    assert picked
    for r in picked:
        chain = gap.with_channel(families.make("random", r["stages"], r["seed"]), r["ratio"],
                                 r["seed"] if r["unsaved_outputs"] else None)
        ex = registry.solve(chain, r["budget"], "exhaustive-offload")
        assert ex.makespan == pytest.approx(r["optimum"], rel=1e-12)
        assert ex.makespan >= chain.ideal_makespan() * (1 - 1e-12)
        inc = offload_incumbent(chain, r["budget"])
        assert inc[1] == pytest.approx(r["incumbent"], rel=1e-12)
        assert length_bound(chain, inc[1], normal_form=False) == r["n_before"]
        assert length_bound(chain, inc[1]) == r["n_after"] <= r["n_before"]
