"""The solver comparison script (benchmarks/bench_mip_solvers.py): every installed solver,
given the same relaxation and start, proves the same optimum on a small chain (exhaustive
search's, where the relaxation is exact), and a solver that is not installed is named,
not silently dropped."""
import argparse

import _bench
import pytest

from remat_theory.analysis.families import make
from solvers.exhaustive import search


@pytest.fixture(scope="module")
def bench():
    return _bench.load("bench_mip_solvers")


def test_every_solver_proves_the_exhaustive_optimum_or_says_it_is_missing(bench):
    rows = bench.run(argparse.Namespace(
        random=[5], net=[], seeds=1, budget="tight", net_budget="2",
        solvers=list(bench.SOLVERS), time_limit=30.0, workers=1, lp=True))
    (row,) = rows
    opt = search(make("random", 5, 0), row["budget"])[1]
    assert row["weak_dp"] == opt  # the weak DP is optimal on this chain (exhaustive)
    assert row["lp_root"] <= opt + 1e-6
    assert row["highs"]["proven"] and row["highs"]["bound"] == pytest.approx(opt)
    for s in ("scip", "cpsat"):
        out = row[s]
        if out["status"].startswith("not installed"):
            assert "bound" not in out
        else:
            assert out["proven"] and out["bound"] == pytest.approx(opt)
            assert out["incumbent"] == pytest.approx(opt)
