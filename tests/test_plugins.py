"""Bring your own solver: ``package.module:function`` wherever a solver name is accepted,
and the entry-point group ``remat.solvers``.

A plug-in is replayed, classified and cross-checked exactly like a built-in: the simulator
fills in what a bare schedule leaves out, and a false claim is a contract violation.  The
plug-in modules are written into ``tmp_path`` (put on ``sys.path``); the entry point comes
from a tiny distribution (a ``*.dist-info`` folder) on ``sys.path``, which
``importlib.metadata`` finds as it finds an installed one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import solvers
from solvers import registry
from remat_theory.analysis import families
from remat_theory.analysis.verify import VerifyConfig, run_verify
from remat_theory.cli import main
from remat_theory.model.errors import SolverContractError, SolverOptionError
from remat_theory.model.solution import FEASIBLE, INFEASIBLE
from solvers.store_all import store_all_schedule

PLUGIN = textwrap.dedent('''
    """Plug-in solvers for the tests (written to a temporary folder)."""
    from remat_theory.model.solution import Solution


    def _store_all_tokens(chain):
        L = chain.length
        return ([f"Fall{i}" for i in range(L)] + ["Loss"]
                + [f"B{i}" for i in range(L - 1, -1, -1)])


    def tokens(chain, budget, *, reverse=False):
        """Store-all as a list of op tokens, or None when it does not fit."""
        if chain.store_all_memory() > budget:
            return None
        return _store_all_tokens(chain)


    def solution(chain, budget):
        """Store-all as a full Solution (claims the ideal makespan, which is true)."""
        if chain.store_all_memory() > budget:
            return Solution.infeasible("mine", budget, min_budget=chain.store_all_memory())
        return Solution.feasible("mine", budget, " ".join(_store_all_tokens(chain)),
                                 chain.ideal_makespan(), chain.store_all_memory())


    def liar(chain, budget):
        """Store-all claiming a makespan 1 below the truth."""
        if chain.store_all_memory() > budget:
            return None
        return Solution.feasible("liar", budget, " ".join(_store_all_tokens(chain)),
                                 chain.ideal_makespan() - 1, chain.store_all_memory())


    def any_options(chain, budget, **options):
        """The form of docs/plugins.md: every option is passed through."""
        return tokens(chain, budget) if options.get("fits", True) else None


    def optimal(chain, budget):
        """Store-all claiming to be optimal over all schedules (true where it fits)."""
        if chain.store_all_memory() > budget:
            return None
        return Solution.optimal("mine", budget, " ".join(_store_all_tokens(chain)),
                                chain.ideal_makespan(), chain.store_all_memory(),
                                optimal_for="all")


    NOT_A_FUNCTION = 3
''')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A module ``remat_test_plugin`` on sys.path (and on PYTHONPATH for subprocesses)."""
    (tmp_path / "remat_test_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    yield tmp_path
    sys.modules.pop("remat_test_plugin", None)
    for path in [p for p in registry._EXTERNAL if p.startswith("remat_test_plugin:")]:
        registry._EXTERNAL.pop(path)


CHAIN = families.make("random", 4, 3)


def test_a_plugin_returning_tokens_is_replayed(plugin):
    top = CHAIN.store_all_memory()
    sol = solvers.solve(CHAIN, top, "remat_test_plugin:tokens")
    ref = solvers.solve(CHAIN, top, "store-all")  # independent: the simulator's own replay
    assert sol.status == FEASIBLE and sol.schedule == store_all_schedule(CHAIN)
    assert sol.makespan == ref.makespan and sol.peak_memory == ref.peak_memory
    assert sol.solver == "remat_test_plugin:tokens"
    none = solvers.solve(CHAIN, top - 1, "remat_test_plugin:tokens")
    assert none.status == INFEASIBLE and none.optimal_for == "none" and none.schedule is None
    # its keyword options are read from its signature and checked by name
    assert solvers.solve(CHAIN, top, "remat_test_plugin:tokens", reverse=True).success
    with pytest.raises(SolverOptionError, match="does not take option 'slots'"):
        solvers.solve(CHAIN, top, "remat_test_plugin:tokens", slots=3)
    # solve(chain, budget, **options) takes any option, as docs/plugins.md writes it
    assert solvers.solve(CHAIN, top, "remat_test_plugin:any_options").success
    assert not solvers.solve(CHAIN, top, "remat_test_plugin:any_options", fits=False).success


def test_a_plugin_returning_a_solution_is_checked(plugin):
    top = CHAIN.store_all_memory()
    sol = solvers.solve(CHAIN, top, "remat_test_plugin:solution")
    assert sol.status == FEASIBLE and sol.makespan == pytest.approx(CHAIN.ideal_makespan())
    assert solvers.solve(CHAIN, top - 1, "remat_test_plugin:solution").min_budget == top
    with pytest.raises(SolverContractError, match="claims makespan"):
        solvers.solve(CHAIN, top, "remat_test_plugin:liar")


def test_a_plugin_on_fields_it_declares_nothing_about_answers_as_a_heuristic(plugin):
    """A plug-in has no registration, so no ``supports``: on a chain that uses an optional
    field its schedule is still replayed (valid), but its claim is dropped (status
    feasible, no class, no bound), never optimal; on a plain chain the claim stands."""
    plain = solvers.solve(CHAIN, CHAIN.store_all_memory(), "remat_test_plugin:optimal")
    assert plain.status == "optimal" and plain.optimal_for == "all"
    for name in ("fall-costs", "unsaved-outputs"):
        chain = families.with_variations(CHAIN, [name], 5)
        sol = solvers.solve(chain, chain.store_all_memory(), "remat_test_plugin:optimal")
        assert sol.status == FEASIBLE and sol.optimal_for == "none" and sol.bound is None
        assert sol.schedule == store_all_schedule(chain)
        assert "declares no model of" in sol.message and chain.fields_used()[0] in sol.message


@pytest.mark.parametrize("path, message", [
    ("remat_no_such_module:solve", "cannot import module 'remat_no_such_module'"),
    ("remat_test_plugin:missing", "has no attribute 'missing'"),
    ("remat_test_plugin:NOT_A_FUNCTION", "is a int, not a function"),
    ("remat_test_plugin:", "not a name nor a 'package.module:function' path"),
])
def test_a_bad_path_is_one_clear_error_naming_it(plugin, path, message):
    with pytest.raises(SolverOptionError, match=message) as e:
        solvers.solve(CHAIN, CHAIN.store_all_memory(), path)
    assert path in str(e.value)


def test_verify_cross_checks_a_plugin_like_a_builtin(plugin):
    cfg = VerifyConfig(seed=1, min_stages=2, max_stages=3, trials=1, families=("random",),
                       solvers=("exhaustive", "remat_test_plugin:tokens"),
                       budgets_per_chain=2, workers=1, progress=False)
    report = run_verify(cfg)
    assert report["ok"], report["violations"]
    rows = {r["solver"]: r for r in report["summary"]}
    assert rows["remat_test_plugin:tokens"]["feasible"] >= 1  # store-all fits at the top budget
    classified = {r["schedule_class"] for c in report["details"] for i in c["instances"]
                  for r in i["results"] if r["solver"] == "remat_test_plugin:tokens"}
    assert "persistent" in classified  # store-all is persistent, by the rules
    bad = run_verify(VerifyConfig(**{**cfg.__dict__, "solvers": ("exhaustive",
                                                                 "remat_test_plugin:liar")}))
    assert not bad["ok"]
    assert all(v["solvers"] == ["remat_test_plugin:liar"] for v in bad["violations"])
    assert any("claims makespan" in v["detail"] for v in bad["violations"])


def _remat(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "remat_theory.cli", *argv],
                          capture_output=True, text=True, timeout=300)


def test_the_cli_takes_a_plugin_path(plugin):
    path = plugin / "chain.json"
    CHAIN.save(path)
    top = str(CHAIN.store_all_memory())
    r = _remat("solve", str(path), "--budget", top, "--solver", "remat_test_plugin:tokens",
               "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["makespan"] == pytest.approx(CHAIN.ideal_makespan())
    r = _remat("compare", str(path), "--budget", top, "--solvers",
               "store-all,remat_test_plugin:solution", "--json")
    assert r.returncode == 0, r.stderr
    rows = {x["solver"]: x for x in json.loads(r.stdout)["comparisons"][0]["results"]}
    assert rows["remat_test_plugin:solution"]["ratio"] == pytest.approx(1.0)
    r = _remat("verify", "--seed", "1", "--stages", "2:2", "--trials", "1", "--families",
               "random", "--solvers", "exhaustive,remat_test_plugin:liar",
               "--budgets-per-chain", "2", "--workers", "1", "--no-progress")
    assert r.returncode == 1 and "[remat_test_plugin:liar]" in r.stdout
    r = _remat("solve", str(path), "--budget", top, "--solver", "remat_test_plugin:missing")
    assert r.returncode == 2 and "has no attribute 'missing'" in r.stderr
    assert "Traceback" not in r.stderr


def test_an_entry_point_is_registered_on_first_use(plugin, monkeypatch):
    dist = plugin / "remat_test_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: remat-test-plugin\n"
                                   "Version: 1.0\n")
    (dist / "entry_points.txt").write_text("[remat.solvers]\n"
                                           "test-store-all = remat_test_plugin:tokens\n")
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)  # "first use" again
    try:
        assert "test-store-all" in solvers.names()
        info = solvers.get("test-store-all")
        assert info.external and not info.exact and info.optimal_for == "none"
        top = CHAIN.store_all_memory()
        sol = solvers.solve(CHAIN, top, "test-store-all")
        assert sol.status == FEASIBLE and sol.schedule == store_all_schedule(CHAIN)
        assert main(["solvers", "--json"]) == 0
    finally:
        registry._REGISTRY.pop("test-store-all", None)


def test_hard_search_scores_a_plugin_against_opt(plugin):
    from remat_theory.analysis.hard_search import SearchConfig, evaluate

    cfg = SearchConfig("baseline-gap", solver="remat_test_plugin:tokens", max_stages=4)
    cfg.check_solvers()
    assert cfg.target_call() == ("remat_test_plugin:tokens", {})
    ev = evaluate(CHAIN, CHAIN.store_all_memory(), cfg)
    assert ev.anomaly is None and ev.score == pytest.approx(1.0)  # store-all is optimal there
    ev = evaluate(CHAIN, CHAIN.store_all_memory() - 1, cfg)
    assert ev.score == float("inf")  # OPT fits, the plug-in found nothing
