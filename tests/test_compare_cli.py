"""``remat compare``: every registered solver in one table, ratios to the best proven value.

The reference is checked against exhaustive search run directly, the rows against
``solvers.solve`` run directly; errors and skips must be said, never hidden.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import solvers
from remat_theory.analysis import families
from remat_theory.cli import main
from solvers.exhaustive import min_feasible_budget
from remat_theory.model.errors import RematError
from remat_theory.model.solution import INFEASIBLE, OPTIMAL
from solvers.registry import registered


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    chain = families.make("random", 5, 11)
    path = tmp_path_factory.mktemp("compare") / "small.json"
    chain.save(path)
    return chain, str(path)


def _json(capsys, argv):
    code = main(argv + ["--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_table_has_every_solver_and_the_proven_reference(small, capsys):
    chain, path = small
    budget = (chain.memory_lower_bound() + chain.store_all_memory()) // 2
    # A short time limit: solvers that take one (the ILP) may stop with status time_limit,
    # which the table must show without taking it as the reference.
    assert main(["compare", path, "--budget", str(budget), "--time-limit", "2"]) == 0
    out = capsys.readouterr().out
    for name in solvers.names():
        assert f"  {name} " in out
    opt = solvers.solve(chain, budget, "exhaustive")
    assert opt.status == OPTIMAL
    assert f"reference {opt.makespan:.6g}: optimum over all schedules" in out


def test_json_rows_agree_with_direct_solves(small, capsys):
    chain, path = small
    budget = (chain.memory_lower_bound() + 3 * chain.store_all_memory()) // 4
    names = "exhaustive,store-all,periodic,revolve,gruslys,dtr,recompute-all"
    code, data = _json(capsys, ["compare", path, "--budget", str(budget), "--solvers", names])
    assert code == 0
    (res,) = data["comparisons"]
    assert res["budget"] == budget
    opt = solvers.solve(chain, budget, "exhaustive").makespan
    assert res["reference"]["makespan"] == pytest.approx(opt)
    assert res["reference"]["proven_optimal"] is True
    rows = {r["solver"]: r for r in res["results"]}
    assert sorted(rows) == sorted(names.split(","))
    for name, r in rows.items():
        direct = solvers.solve(chain, budget, name)
        assert r["status"] == direct.status
        if direct.schedule is None:
            assert r["makespan"] is None and r["ratio"] is None
            continue
        assert r["makespan"] == pytest.approx(direct.makespan)
        assert r["peak_memory"] == direct.peak_memory <= budget
        assert r["ratio"] == pytest.approx(direct.makespan / opt)
        assert r["uses_drop"] == (name == "dtr")
        if not r["uses_drop"]:
            assert r["ratio"] >= 1 - 1e-9


def test_sweep_reports_each_budget_and_infeasibility(small, capsys):
    chain, path = small
    lb, top = chain.memory_lower_bound(), chain.store_all_memory()
    budgets = [lb - 1, top]
    code, data = _json(capsys, ["compare", path, "--budgets", ",".join(map(str, budgets)),
                                "--solvers", "exhaustive,store-all,chen-sqrt,revolve"])
    assert code == 0
    assert [c["budget"] for c in data["comparisons"]] == budgets
    below, at_top = data["comparisons"]
    assert all(r["status"] == INFEASIBLE for r in below["results"])
    assert below["reference"]["makespan"] is None
    # what the exact solver proved, and the smallest budget that fits (the oracle: the
    # bottleneck search over all schedules)
    assert below["reference"]["proven_infeasible"]
    assert below["reference"]["smallest_feasible"] == min_feasible_budget(chain)
    assert "proven over all schedules by exhaustive" in below["reference"]["description"]
    top_rows = {r["solver"]: r for r in at_top["results"]}
    assert top_rows["store-all"]["ratio"] == pytest.approx(1.0)
    assert at_top["reference"]["makespan"] == pytest.approx(chain.ideal_makespan())


def test_exhaustive_is_skipped_beyond_10_stages_and_the_dp_reference_is_labelled(tmp_path, capsys):
    chain = families.make("resnet", 11, 2)
    path = tmp_path / "c11.json"
    chain.save(path)
    budget = (chain.memory_lower_bound() + chain.store_all_memory()) // 2
    assert main(["compare", str(path), "--budget", str(budget),
                 "--solvers", "exhaustive,dp,periodic"]) == 0
    out = capsys.readouterr().out
    assert "skipped: exhaustive search is exponential and runs only when L <= 10 (L = 11)" in out
    dp = solvers.solve(chain, budget, "dp")
    assert f"reference {dp.makespan:.6g}: best exact-solver value: dp, optimal among " \
           f"{dp.optimal_for} schedules only" in out


def test_exhaustive_gives_the_reference_up_to_10_stages(tmp_path, capsys):
    """At 9 stages the proven ILP does not finish in a few seconds, exhaustive search does:
    the reference is then the optimum over all schedules, and equals a direct search."""
    chain = families.make("random", 9, 1)
    path = tmp_path / "c9.json"
    chain.save(path)
    budget = (chain.memory_lower_bound() + chain.store_all_memory()) // 2
    assert main(["compare", str(path), "--budget", str(budget), "--solvers",
                 "exhaustive,dp-weak,periodic", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["comparisons"][0]
    row = next(r for r in out["results"] if r["solver"] == "exhaustive")
    assert row["status"] == "optimal" and row["optimal_for"] == "all"
    best = solvers.solve(chain, budget, "exhaustive", max_stages=9).makespan
    assert out["reference"]["makespan"] == pytest.approx(best) == pytest.approx(row["makespan"])
    weak = next(r for r in out["results"] if r["solver"] == "dp-weak")
    assert weak["makespan"] >= best - 1e-9


def test_ilp_proves_a_20_stage_optimum_with_the_moment_relaxation(tmp_path, capsys):
    """At 20 stages the proven model is too large (max_binaries), and the default ilp
    proves the optimum over all schedules with the moment relaxation instead (proofs/ilp.md
    section 9): its value is then the proven all-schedule reference of the comparison."""
    from solvers.ilp.relaxation import lower_bound

    chain = families.make("random", 20, 0)
    path = tmp_path / "c20.json"
    chain.save(path)
    budget = (chain.memory_lower_bound() + chain.store_all_memory()) // 2
    assert main(["compare", str(path), "--budget", str(budget), "--solvers", "ilp,dp-weak",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    row = next(r for r in out["comparisons"][0]["results"] if r["solver"] == "ilp")
    assert row["optimal_for"] == "all" and row["status"] == "optimal"
    weak = solvers.solve(chain, budget, "dp-weak")
    assert row["makespan"] <= weak.makespan + 1e-9
    # the certificate, recomputed independently: the relaxation's optimum is the makespan
    assert lower_bound(chain, budget).value == pytest.approx(row["makespan"])
    ref = out["comparisons"][0]["reference"]
    assert ref["proven_optimal"] is True and ref["makespan"] == pytest.approx(row["makespan"])


def test_a_failing_solver_is_shown_and_sets_the_exit_code(small, capsys):
    chain, path = small

    def broken(chain, budget):
        raise RematError("deliberately broken")

    with registered("zz-broken", broken, optimal_for="none"):
        code = main(["compare", path, "--budget", str(chain.store_all_memory()),
                     "--solvers", "store-all,zz-broken"])
    captured = capsys.readouterr()
    assert code == 1
    assert "zz-broken" in captured.out and "deliberately broken" in captured.out
    assert "zz-broken raised an error" in captured.err


@pytest.mark.parametrize("argv, message", [
    (["--budgets", "10,x"], "'x' is not an integer"),
    (["--budgets", "10,,20"], "expected integers separated by commas"),
    (["--budget", "-3"], "budget -3 is negative"),
    (["--budget", "10", "--budgets", "10,20"], "not allowed with argument"),
])
def test_bad_arguments_exit_2_naming_the_value(small, capsys, argv, message):
    _, path = small
    assert main(["compare", path] + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("remat compare: error:") and message in err


def test_unknown_solver_is_named(small, capsys):
    _, path = small
    assert main(["compare", path, "--budget", "100", "--solvers", "store-all,nope"]) == 2
    assert "unknown solver 'nope'" in capsys.readouterr().err


def test_json_stays_clean_when_a_solver_library_prints_to_stdout(small):
    """A native solver library writing straight to file descriptor 1 (as HiGHS' banner
    does) must not corrupt ``--json``: compare sends it to stderr."""
    _, path = small
    code = textwrap.dedent(f"""
        import os, sys
        import solvers
        from solvers import registry
        from solvers.store_all import solve_store_all
        def noisy(chain, budget):
            os.write(1, b"banner from a native library\\n")
            return solve_store_all(chain, budget).replace(solver="zz-noisy")
        registry._load_all()
        registry.register("zz-noisy", optimal_for="none")(noisy)
        from remat_theory.cli import main
        sys.exit(main(["compare", {path!r}, "--budget", "1000", "--solvers", "zz-noisy", "--json"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["comparisons"][0]["results"][0]["solver"] == "zz-noisy"
    assert "banner from a native library" in proc.stderr
