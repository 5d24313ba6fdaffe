"""The ILP benchmark script's sweeps (benchmarks/bench_ilp.py) on known instances: their
per-chain comparison finds the refuted normal form's miss and nothing for two runs."""
from pathlib import Path

import _bench
import pytest

import solvers
from remat_theory import Chain
from remat_theory.analysis import certificates
from remat_theory.model.simulator import State

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    return _bench.load("bench_ilp")


def test_chain_misses_finds_the_fast_modes_counterexample(bench):
    chain = certificates.load(ROOT / "proofs" / "certificates" / "ilp_weak_run_min_budget.json").chain
    breakpoints, misses = bench.chain_misses(chain)
    assert breakpoints >= 1
    assert [m["budget"] for m in misses["weak-runs<=1"]][:1] == [9]
    assert misses["weak-runs<=1"][0]["weak-runs<=1"] == "infeasible below 10"
    assert misses["weak-runs<=2"] == []


@pytest.mark.parametrize("runs, no_fo", [(2, False), (1, True)])
def test_the_phase_local_sweep_reports_what_it_found(bench, runs, no_fo):
    from remat_theory.analysis.phase_local import missed_outcome
    from solvers.exhaustive import search

    cls = f"weak-runs<={runs}"
    # 200 phase starts (the cap, not the 60 s, stops it: the same task on every machine)
    part = bench.phase_local_task((0, 60.0, (3,), runs, no_fo, 200))
    assert part["starts"] == 200
    assert part["starts"] >= part["local_misses"] == part["chains_checked"] >= 1
    for ex in part["examples"]:  # each local example is a real phase-local miss
        chain = Chain.from_dict(ex["chain"])
        if no_fo:
            assert not any(chain.fwd_overhead)
        start = State(*ex["start_state"])
        o = missed_outcome(chain, start, ex["budget"], cls)
        assert o is not None and (o.memory, o.time) == (ex["memory_after"], ex["time"])
    for m in part["global_misses"]:  # and a whole-chain miss, if one is ever found, is real
        chain, b = Chain.from_dict(m["chain"]), m["budget"]
        got = search(chain, b, schedule_class=cls)[1]
        assert got is None or got > search(chain, b)[1]


def test_walk_mutations_are_valid_chains_within_the_stage_limit(bench):
    import random

    r = random.Random(0)
    seeds = bench.walk_seeds()
    assert len(seeds) >= 3 and all(isinstance(c, Chain) for c in seeds)
    seeds = [c for c in seeds if c.length <= 5]
    lengths = set()
    for k in range(300):
        c = bench.mutate(seeds[k % len(seeds)], r, 5)
        assert 2 <= c.length <= 5  # Chain() validated it (tapes hold their output)
        lengths.add(c.length)
    assert len(lengths) >= 3  # stages were inserted and deleted


def test_the_walk_starts_among_chains_one_run_misses(bench):
    from solvers.exhaustive import search

    part = bench.walk_task((0, 60.0, 4, "weak-runs<=1", False, 5))  # 5 chains compared
    assert part["visited"] == 5
    assert part["visited"] >= 1 and part["region"] >= 1  # its first chain is a certificate's
    assert part["missed"]["weak-runs<=1"] == part["region"]
    for cls, found in part["examples"].items():  # every reported miss is real
        for m in found:
            chain, b = Chain.from_dict(m["chain"]), m["budget"]
            if isinstance(m[cls], str):  # "infeasible below B": no schedule of the class fits
                assert search(chain, b)[0] is not None
                assert search(chain, b, schedule_class=cls)[0] is None
            else:
                got = search(chain, b, schedule_class=cls)[1]
                assert got is None or got > search(chain, b)[1]


def test_the_deeper_walk_stays_among_chains_whose_second_run_recomputes(bench):
    from solvers.exhaustive import search

    part = bench.walk_task((0, 60.0, 5, "run+falls", False, 3))  # 3 chains compared
    assert part["visited"] == 3
    assert part["visited"] >= 1 and part["region"] >= 1  # it starts at the run+falls certificate
    assert part["missed"]["run+falls"] == part["region"]
    assert part["missed"]["weak-runs<=1"] >= part["region"]  # run+falls contains one run
    for m in part["examples"]["run+falls"]:
        chain, b = Chain.from_dict(m["chain"]), m["budget"]
        got = m["run+falls"]
        if isinstance(got, str):
            assert search(chain, b, schedule_class="run+falls")[0] is None
        else:
            assert got > search(chain, b)[1]


def test_the_min_budget_benchmark_agrees_with_exhaustive_search(bench, tmp_path):
    import json

    from remat_theory.analysis.families import make
    from solvers.exhaustive import min_feasible_budget

    out = tmp_path / "mb.json"
    assert bench.main(["min-budget", "--lengths", "3", "--seeds", "1", "--out", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    from remat_theory.analysis.certificates import load

    certified = [f.name for f in sorted(bench.CERTIFICATES.glob("ilp_*.json"))
                 if load(f).chain.length <= 3]  # the certificates up to --lengths
    assert "ilp_weak_run_min_budget.json" in certified
    assert [r["chain"] for r in runs] == ["random L=3 seed=0"] + certified
    assert runs[0]["exhaustive_min"] == min_feasible_budget(make("random", 3, 0))
    for r in runs:  # one below the smallest budget, the ilp proved the smallest budget
        assert r["min_budget"] == r["exhaustive_min"] == r["budget"] + 1


def test_the_overhead_lowering_walk_never_raises_the_total_forward_overhead(bench):
    part = bench.walk_task((1, 60.0, 4, "weak-runs<=1", True, 8))  # 8 chains compared
    assert part["visited"] == 8
    least = Chain.from_dict(part["least_fwd_overhead"])  # a region chain: one run misses there
    start = min(sum(c.fwd_overhead) for c in bench.walk_seeds() if c.length <= 4)
    assert sum(least.fwd_overhead) <= start
    assert bench.chain_misses(least, ("weak-runs<=1",))[1]["weak-runs<=1"]


def test_chains_without_forward_overhead_for_the_sweep(bench):
    import random

    chain = bench._provocative_chain(4, random.Random(3))
    flat = bench._without_fwd_overhead(chain)
    assert any(chain.fwd_overhead) and not any(flat.fwd_overhead)
    assert flat.to_dict() == {**chain.to_dict(), "fwd_overhead": [0] * 4}


def test_the_proven_speed_sweep_checks_every_answer_against_exhaustive_search(bench):
    import argparse
    import types

    args = argparse.Namespace(lengths=[3], seeds=1, budgets=["middle", "tight"],
                              mip_solvers=["highs"], passes=1, proven=True, pairs=False,
                              certified=False, time_limit=60.0, exhaustive_up_to=0,
                              exhaustive_time_limit=None)
    out = bench.speed(args)
    assert out["passes"] is None and len(out["runs"]) == 2
    for row in out["runs"]:
        assert row["optimal_for"] == "all" and row["status"] == "optimal"
        assert row["exhaustive_status"] == "optimal"
        assert row["makespan"] == pytest.approx(row["exhaustive"])
    assert [s["equal_to_optimum"] for s in out["summary"]] == [1, 1]
    chain = bench.make("random", 3, 0)
    b = out["runs"][0]["budget"]
    best = out["runs"][0]["makespan"]
    wrong = types.SimpleNamespace(status="optimal", makespan=best + 1, optimal_for="all")
    with pytest.raises(SystemExit, match="exhaustive search finds"):
        bench._exhaustive_check(chain, b, wrong, None)
    # an answer optimal only in a smaller class may be above the optimum, never below it
    fast = types.SimpleNamespace(status="optimal", makespan=best + 1, optimal_for="weak-runs<=1")
    assert bench._exhaustive_check(chain, b, fast, None)["exhaustive"] == pytest.approx(best)
    impossible = types.SimpleNamespace(status="optimal", makespan=best - 1,
                                       optimal_for="weak-runs<=1")
    with pytest.raises(SystemExit, match="below exhaustive search's optimum"):
        bench._exhaustive_check(chain, b, impossible, None)
    with pytest.raises(SystemExit, match="--lengths up to 7"):
        bench.speed(argparse.Namespace(**{**vars(args), "lengths": [8]}))


def test_the_fast_speed_sweep_can_compare_with_exhaustive_search(bench):
    import argparse

    args = argparse.Namespace(lengths=[3, 4], seeds=1, budgets=["tight"], mip_solvers=["highs"],
                              passes=1, proven=False, pairs=True, certified=False,
                              time_limit=60.0, exhaustive_up_to=3, exhaustive_time_limit=30.0)
    out = bench.speed(args)
    by_len = {r["L"]: r for r in out["runs"]}
    assert by_len[3]["exhaustive_status"] == "optimal" and "exhaustive" not in by_len[4]
    assert by_len[3]["makespan"] >= by_len[3]["exhaustive"] - 1e-9
    s3, s4 = sorted(out["summary"], key=lambda s: s["L"])
    assert s3["exhaustive_proven"] == 1 and "exhaustive_proven" not in s4


def test_the_certified_speed_sweep_records_the_certificate(bench):
    """--certified: the default exact mode, its answers checked against exhaustive search,
    and which step proved each one recorded."""
    import argparse

    args = argparse.Namespace(lengths=[5], seeds=1, budgets=["middle", "tight"],
                              mip_solvers=["highs"], passes=1, proven=False, pairs=False,
                              certified=True, time_limit=60.0, exhaustive_up_to=5,
                              exhaustive_time_limit=60.0)
    out = bench.speed(args)
    assert out["certified"] is True and out["passes"] is None
    for row in out["runs"]:
        assert row["status"] == "optimal" and row["optimal_for"] == "all"
        assert row["certificate"] in ("moment relaxation", "proven model")
        assert row["makespan"] == pytest.approx(row["exhaustive"])
        assert row["relaxation"]["bound"] <= row["makespan"] + 1e-9
    with pytest.raises(SystemExit, match="pick one"):
        bench.speed(argparse.Namespace(**{**vars(args), "proven": True}))


def test_the_relaxation_sweep_never_finds_the_bound_above_the_optimum(bench):
    import argparse

    out = bench.relaxation(argparse.Namespace(minutes=1.0, seed=3, max_chains=4))
    assert out["chains"] == 4 and out["bound_above_optimum"] == 0
    assert out["breakpoints"] == out["bound_equals_optimum"] + out["bound_below_optimum"]
    for gap in out["first_gaps"]:
        assert gap["bound"] < gap["optimum"]


def test_the_lp_sweep_bounds_lie_between_the_ideal_and_the_optimum(bench):
    import argparse

    out = bench.lp(argparse.Namespace(lengths=[3, 4], seeds=2, budgets=["middle", "tight"],
                                      exhaustive_up_to=4))
    assert out["instances"] == 8
    for r in out["runs"]:
        assert r["reference_from"] == "exhaustive"
        for name in bench.LP_CONFIGS:
            # even relaxed, every model makes each tape once in total
            assert r[f"lp_{name}"] >= r["ideal"] - 1e-6
        # the proven model contains the optimal schedule, so its relaxation lies below it
        assert r["lp_all"] <= r["reference"] + 1e-6
    chain = bench.make("random", 3, 0)
    b = bench.budgets_of(chain)["tight"]
    fast = solvers.solve(chain, b, "ilp", passes=1, pairs=True)
    assert bench.lp_bound(chain, b, 1, True) <= fast.makespan + 1e-6
