"""The two-run question (proofs/two_runs.md): the walk of benchmarks/bench_two_runs.py, on a
few chains, compares each class with exhaustive search (the oracle) at every budget; it
finds the one-run misses it walks among, with recording costs and unsaved outputs drawn,
and no chain where two weakly increasing runs per phase miss the optimum."""
import importlib.util
import random
import sys
from pathlib import Path

import pytest

from solvers.exhaustive import search

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def walk():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_two_runs",
                                                  ROOT / "benchmarks" / "bench_two_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_walk_meets_one_run_misses_and_no_two_run_miss(walk):
    res = walk.run(seed=7, seconds=120, max_stages=5, max_visits=6)
    assert res["visited"] == 6
    assert res["region"] >= 1  # it does walk among chains where one run misses
    assert res["two_run_misses"] == []


def test_mutations_draw_every_optional_field(walk):
    """The walk reaches recording costs and unsaved outputs (what earlier walks never moved),
    and every neighbour is a valid chain (exhaustive search solves it at store-all)."""
    r = random.Random(3)
    chain = walk.starts()[0]
    fall = unsaved = False
    for _ in range(60):
        chain = walk.mutate_fields(chain, r, 4)
        fall |= chain.has_fall_costs
        unsaved |= chain.has_unsaved_outputs
    assert fall and unsaved
    assert search(chain, chain.store_all_memory())[1] is not None
