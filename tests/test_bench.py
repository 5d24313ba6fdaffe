"""Benchmarks: the subprocess measurement reports what an in-process solve reports, the
files are written, quality ratios are right where a closed form says what they must be."""
from __future__ import annotations

import json
import math

import pytest

import solvers
from remat_theory.analysis import benchmark as bm
from remat_theory.analysis import families
from remat_theory.cli import main
from solvers.exhaustive import min_feasible_budget


def test_measure_in_a_subprocess_matches_an_in_process_solve():
    chain = families.make("random", 4, seed=5)
    budget = chain.store_all_memory() - 3
    r = bm.measure(chain, budget, "exhaustive", timeout=120)
    ref = solvers.solve(chain, budget, "exhaustive")
    assert r["ok"] and r["status"] == ref.status
    assert r["makespan"] == pytest.approx(ref.makespan, rel=1e-12)
    assert r["peak_rss"] >= r["base_rss"] > 0 and r["solve_time"] >= 0


def test_measure_reports_a_killed_run():
    chain = families.make("random", 8, seed=1)
    r = bm.measure(chain, min_feasible_budget(chain), "exhaustive", {"max_stages": 8},
                   timeout=0.2)
    assert not r["ok"] and r["status"] == "timeout" and r["peak_rss"] is None


@pytest.mark.slow  # the bench driver's whole command: 1.8 CPU s; its measuring is checked by default (test_measure_*)
def test_bench_solvers_cli_writes_its_table_and_json(tmp_path, capsys):
    code = main(["bench", "solvers", "--only", "exhaustive", "--exhaustive-stages", "2,3",
                 "--out-dir", str(tmp_path), "--tag", "t", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "== exhaustive ==" in out and "peak RSS" in out
    data = json.loads((tmp_path / "bench_solvers_exhaustive_t.json").read_text())
    rows = data["rows"]
    assert [(r["stages"], r["budget_frac"]) for r in rows] == [(2, 0.0), (2, 0.5), (3, 0.0), (3, 0.5)]
    for r in rows:
        chain = bm.bench_chain("random", r["stages"], seed=r["stages"])
        m = min_feasible_budget(chain)
        assert r["min_budget"] == m
        assert r["budget"] == bm.budget_between(m, chain.store_all_memory(), r["budget_frac"])
        assert r["makespan"] == pytest.approx(solvers.solve(chain, r["budget"], "exhaustive").makespan)
    assert data["machine"]["cpus"] >= 1


@pytest.mark.slow  # runs prove and a tight exhaustive search through the bench driver: 2.4 CPU s
def test_bench_solvers_prove_and_tight_exhaustive_rows(tmp_path, capsys):
    """``--only prove`` records prove's answer (here proven: the chains are small) and
    ``--exhaustive-fracs/--exhaustive-seeds`` the tight budgets of several chains; every
    makespan is exhaustive search's, solved here in process."""
    code = main(["bench", "solvers", "--only", "prove,exhaustive", "--prove-families",
                 "homogeneous,rnn", "--prove-stages", "5", "--prove-time-limit", "30",
                 "--exhaustive-stages", "4", "--exhaustive-fracs", "0.1",
                 "--exhaustive-seeds", "2", "--out-dir", str(tmp_path), "--tag", "t",
                 "--no-progress"])
    assert code == 0
    assert "== prove ==" in capsys.readouterr().out
    prove = json.loads((tmp_path / "bench_solvers_prove_t.json").read_text())["rows"]
    exh = json.loads((tmp_path / "bench_solvers_exhaustive_t.json").read_text())["rows"]
    assert [(r["family"], r["stages"]) for r in prove] == [("homogeneous", 5), ("rnn", 5)]
    assert [(r["seed"], r["budget_frac"]) for r in exh] == [(4, 0.1), (5, 0.1)]
    for r in prove:
        chain = bm.bench_chain(r["family"], r["stages"], r["seed"])
        assert r["status"] == "optimal" and r["bound"] == pytest.approx(r["makespan"])
        assert r["makespan"] == pytest.approx(
            solvers.solve(chain, r["budget"], "exhaustive").makespan)
    for r in exh:
        chain = bm.bench_chain("random", r["stages"], seed=r["seed"])
        assert r["makespan"] == pytest.approx(
            solvers.solve(chain, r["budget"], "exhaustive").makespan)
    assert main(["bench", "solvers", "--exhaustive-fracs", "1.5"]) == 2
    assert "--exhaustive-fracs" in capsys.readouterr().err


def test_ilp_median_counts_unproven_runs_as_infinite():
    rows = [{"backend": "highs", "stages": 5, "status": s, "solve_time": t, "peak_rss": 1}
            for s, t in (("optimal", 1.0), ("optimal", 3.0), ("time_limit", 9.0))]
    rows += [{"backend": "cbc", "stages": 5, "status": s, "solve_time": t, "peak_rss": 1}
             for s, t in (("optimal", 1.0), ("time_limit", 9.0))]
    med = {m["backend"]: m for m in bm.ilp_medians(rows)}
    assert med["highs"]["median_time"] == 3.0 and med["highs"]["proven"] == 2
    assert med["cbc"]["median_time"] == math.inf and med["cbc"]["max_time"] == math.inf


def test_quality_ratios_against_the_exact_optimum():
    names = ("exhaustive", "store-all")
    rows = bm.bench_quality(("random", "transformer"), stages=3, seed=2, budgets=4,
                            solver_names=names, workers=1, progress=False)
    assert {r["family"] for r in rows} == {"random", "transformer"}
    for r in rows:
        chain = bm.bench_chain(r["family"], 3, 2)
        assert r["reference_from"] == "exhaustive" and r["reference_status"] == "optimal"
        assert r["results"]["exhaustive"]["ratio"] == 1.0
        sa = r["results"]["store-all"]
        if r["budget"] >= chain.store_all_memory():
            # where store-all fits, nothing beats it: ratio exactly 1
            assert sa["ratio"] == pytest.approx(1.0, rel=1e-12)
        else:
            assert sa["makespan"] is None and sa["status"] == "infeasible"
    fracs = sorted({r["budget_frac"] for r in rows if r["family"] == "random"})
    assert fracs[0] == 0.0 and fracs[-1] == 1.0
    table = bm.table_quality(rows, names)
    assert "transformer" in table and "inf" in table
    summary = {s["solver"]: s for s in bm.quality_summary(rows, names)}
    assert summary["exhaustive"]["max_ratio"] == 1.0


def test_quality_over_several_chains_aggregates_per_budget_fraction():
    names = ("exhaustive", "store-all")
    rows = bm.bench_quality(("random", "homogeneous"), stages=3, seed=0, seeds=3, budgets=3,
                            solver_names=names, workers=1, progress=False)
    # the homogeneous chain does not depend on the seed: it is measured once
    assert {r["seed"] for r in rows if r["family"] == "homogeneous"} == {0}
    assert {r["seed"] for r in rows if r["family"] == "random"} == {0, 1, 2}
    lines = bm.table_quality_by_fraction(rows, names).splitlines()[2:]
    for line in lines:
        fam, frac, n, ex = line.split()[:4]
        same = [r for r in rows if r["family"] == fam and f"{r['budget_frac']:.2f}" == frac]
        assert int(n) == len(same) and ex == "1.000/1.000"
