"""The relaxation LNS (benchmarks/bench_relaxation_lns.py): every point it keeps satisfies
the moment relaxation's rows and is worth no more than its start, and a window over every
phase is the whole relaxation: from a schedule worse than the weak DP's it lands on the
relaxation's optimum as HiGHS's own solve of the full model proves it."""
import _bench
import pytest

import solvers
from remat_theory.analysis.families import make
from solvers.ilp import relaxation


@pytest.fixture(scope="module")
def bench():
    return _bench.load("bench_relaxation_lns")


@pytest.mark.parametrize("seed", [0, 1])
def test_a_window_over_every_phase_finds_the_relaxation_s_optimum(bench, seed):
    chain = make("random", 7, seed)
    budget = solvers.solve(chain, 0, "dp-weak").min_budget * 5 // 4
    worse = solvers.solve(chain, budget, "recompute-all")  # valid, and slower
    weak = solvers.solve(chain, budget, "dp-weak")
    assert worse.makespan > weak.makespan
    res = bench.lns(chain, budget, worse.schedule, window=chain.length + 1, seconds=60,
                    passes=1)
    exact = relaxation.lower_bound(chain, budget, time_limit=60)
    assert exact.proven_optimal
    assert res["start"] == pytest.approx(relaxation.objective_of(
        chain, relaxation.relaxation_point(chain, worse.schedule)))
    assert res["rows_violated"] == 0
    assert res["best"] == pytest.approx(exact.value)
    assert res["best"] < res["start"] - 1e-6  # it moved: the check above is not the start's
    assert any("improved_to" in w for w in res["windows"])
    assert res["best"] <= weak.makespan + 1e-9


def test_small_windows_keep_valid_points_never_worse_than_the_start(bench):
    chain = make("random", 9, 2)
    budget = solvers.solve(chain, 0, "dp-weak").min_budget
    start = solvers.solve(chain, budget, "dp-weak")
    res = bench.lns(chain, budget, start.schedule, window=3, seconds=30, passes=1)
    assert res["rows_violated"] == 0
    assert res["start"] == pytest.approx(start.makespan)
    assert res["best"] <= res["start"] + 1e-9
    assert res["best"] >= relaxation.lower_bound(chain, budget, time_limit=60).value - 1e-6
    assert [w["window"][1] for w in res["windows"]] == list(range(9, -1, -1))
