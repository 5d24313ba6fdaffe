"""``remat verify`` must pass on correct solvers and fail, naming the culprit, on wrong ones.

Wrong solvers are registered only inside a test (and removed after): one that claims a
suboptimal schedule is optimal, one that wrongly says "infeasible", one whose claimed
makespan is not the simulated one.  The sweeps stay tiny (a few chains of 3-4 stages).
"""
from __future__ import annotations

import json

import pytest
from _tiers import instances

import solvers
from remat_theory.cli import main
from remat_theory.model.errors import RematError, SolverOptionError
from remat_theory.model.solution import CLASS_ALL, CLASS_NONE, INFEASIBLE, OPTIMAL, Solution
from remat_theory.analysis import families
from remat_theory.analysis.verify import (VerifyConfig, class_subset, make_tasks, run_verify,
                                 verify_chain)
from solvers.registry import registered
from solvers.exhaustive import min_feasible_budget, solve_exhaustive
from solvers.store_all import store_all_schedule


def _tiny(solver_names, **kw):
    base = dict(seed=3, min_stages=3, max_stages=4, trials=2, families=("random", "resnet"),
                solvers=solver_names, budgets_per_chain=3, workers=1, progress=False)
    base.update(kw)
    return VerifyConfig(**base)


# --- deliberately wrong solvers (module level: they must be picklable like real ones) ---
def liar_suboptimal(chain, budget):
    """Returns the optimal schedule of the *smallest* feasible budget (valid at any larger
    budget, but usually slower there) and claims it is optimal over all schedules."""
    m = min_feasible_budget(chain)
    if budget < m:
        return Solution("liar", INFEASIBLE, None, None, None, budget, optimal_for=CLASS_ALL,
                        min_budget=m)
    s = solve_exhaustive(chain, m)
    return Solution("liar", OPTIMAL, s.schedule, s.makespan, s.peak_memory, budget,
                    bound=s.makespan, optimal_for=CLASS_ALL, min_budget=m)


def liar_infeasible(chain, budget):
    """Claims that no schedule fits unless store-all does."""
    top = chain.store_all_memory()
    if budget < top:
        return Solution("liar-infeasible", INFEASIBLE, None, None, None, budget,
                        optimal_for=CLASS_ALL, min_budget=top)
    return Solution("liar-infeasible", OPTIMAL, store_all_schedule(chain), chain.ideal_makespan(),
                    top, budget, bound=chain.ideal_makespan(), optimal_for=CLASS_ALL,
                    min_budget=top)


def liar_makespan(chain, budget):
    """A valid store-all schedule whose claimed makespan is 1 less than the truth."""
    top = chain.store_all_memory()
    if budget < top:
        return Solution("liar-makespan", INFEASIBLE, None, None, None, budget)
    return Solution("liar-makespan", OPTIMAL, store_all_schedule(chain), chain.ideal_makespan() - 1,
                    top, budget, optimal_for=CLASS_NONE)


# ------------------------------------------------------------------------------- tests
def test_correct_solvers_pass_and_the_optimum_matches_the_closed_form():
    report = run_verify(_tiny(("exhaustive", "store-all")))
    assert report["ok"], report["violations"]
    assert report["chains"] == 4
    rows = {r["solver"]: r for r in report["summary"]}
    assert rows["exhaustive"]["agreements"] == rows["exhaustive"]["instances"] == report["instances"]
    for c in report["details"]:
        kinds = [i["kind"] for i in c["instances"]]
        assert kinds[0] == "below-lower-bound" and "feasible" in kinds
        for inst in c["instances"]:
            by = {r["solver"]: r for r in inst["results"]}
            if inst["budget"] < c["lower_bound"]:
                assert by["exhaustive"]["status"] == INFEASIBLE
            # independent oracle: where store-all fits, the optimum is the ideal makespan
            if inst["budget"] >= c["store_all"]:
                ideal = sum(c["chain_data"]["fwd_time"]) + sum(c["chain_data"]["bwd_time"])
                assert inst["optimum"] == pytest.approx(ideal, rel=1e-12)
        # the tightest feasible budget is the exact smallest feasible budget
        feas = [i["budget"] for i in c["instances"] if i["kind"] == "feasible"]
        assert min(feas) == next(r["min_budget"] for r in c["instances"][0]["results"]
                                 if r["solver"] == "exhaustive")


def test_a_suboptimal_optimum_claim_is_caught_and_named():
    with registered("liar", liar_suboptimal, optimal_for=CLASS_ALL, exact=True):
        report = run_verify(_tiny(("exhaustive", "liar")))
    assert not report["ok"]
    beaten = [v for v in report["violations"]
              if v["relation"].startswith("no schedule beats a proven optimum")]
    assert beaten and all("liar" in v["solvers"] for v in beaten)
    rows = {r["solver"]: r for r in report["summary"]}
    assert rows["liar"]["agreements"] < rows["liar"]["instances"]


def test_a_false_infeasible_claim_is_caught_by_a_heuristic_schedule():
    # store-all alone finds schedules only at store-all budgets, so add exhaustive: its
    # schedules at tighter budgets contradict the false claim.
    with registered("liar-infeasible", liar_infeasible, optimal_for=CLASS_ALL, exact=True):
        report = run_verify(_tiny(("exhaustive", "liar-infeasible", "store-all")))
    rel = {v["relation"] for v in report["violations"]}
    assert "no schedule where its class is proven infeasible" in rel
    assert "smallest feasible budgets agree across classes" in rel
    assert all("liar-infeasible" in v["solvers"] for v in report["violations"])


def test_the_cli_exits_nonzero_and_names_a_wrong_makespan_claim(capsys):
    with registered("liar-makespan", liar_makespan, optimal_for=CLASS_NONE):
        code = main(["verify", "--seed", "1", "--stages", "3:3", "--trials", "1",
                     "--families", "random", "--solvers", "exhaustive,liar-makespan",
                     "--budgets-per-chain", "2", "--workers", "1", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1
    assert "VIOLATION" in out and "[liar-makespan]" in out and "simulator measures" in out


def test_the_cli_json_report_and_exit_zero(capsys):
    code = main(["verify", "--seed", "2", "--stages", "2:3", "--trials", "1", "--families",
                 "homogeneous,transformer", "--solvers", "exhaustive,store-all",
                 "--budgets-per-chain", "2", "--workers", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] and report["chains"] == 2
    assert [r["solver"] for r in report["summary"]] == ["exhaustive", "store-all"]


def test_tasks_are_deterministic_and_do_not_depend_on_the_worker_count():
    cfg = _tiny(("exhaustive",), trials=3)
    assert make_tasks(cfg) == make_tasks(cfg)
    assert make_tasks(cfg) != make_tasks(_tiny(("exhaustive",), trials=3, seed=4))
    task = make_tasks(cfg)[0]
    a, b = verify_chain(task), verify_chain(task)
    strip = lambda c: [[(r["solver"], r["status"], r["makespan"]) for r in i["results"]]
                       for i in c["instances"]]
    assert strip(a) == strip(b)


@pytest.mark.parametrize("argv, field", [
    (["--stages", "5:3"], "stage range"),
    # issue #29: refused before any chain is built (it worked 62 s before an error)
    (["--stages", "2:1000000"], "max_stages = 1,000,000"),
    (["--solvers", "no-such-solver"], "no-such-solver"),
    (["--families", "lstm"], "lstm"),
])
def test_bad_input_is_a_clear_error(argv, field, capsys):
    code = main(["verify", "--workers", "1", "--no-progress"] + argv)
    assert code == 2
    assert field in capsys.readouterr().err


def test_class_inclusion_order():
    assert class_subset("persistent", "all") and class_subset("weakly-persistent", "all+drop")
    assert not class_subset("all", "persistent") and not class_subset("all", "none")
    with pytest.raises(RematError, match="seed"):
        make_tasks(_tiny(("exhaustive",), seed=-1))


@pytest.mark.slow
def test_default_verify_run_passes(capsys):
    """The default `remat verify` (every registered solver); its wall time is reported by hand."""
    code = main(["verify", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out


def test_every_registered_solver_passes_a_tiny_sweep():
    """Every solver of the registry but the ILP (and the class-restricted exhaustive
    searches) on a few short chains of every family: no relation may fail.  The ILP is left
    to its own tests (against exhaustive search) and to the slow default run below: its
    proofs take seconds each, too long for this file's share of CI."""
    labels = [n for n in solvers.names() if n != "ilp"]
    labels += ["exhaustive-persistent", "exhaustive-weak"]
    report = run_verify(_tiny(tuple(labels), min_stages=2, max_stages=4, trials=1,
                              families=("random", "resnet", "transformer", "rnn", "homogeneous"),
                              budgets_per_chain=2, seed=7))
    bad = "\n".join(f"{v['solvers']} {v['chain']} {v['budget']}: {v['detail']}"
                    for v in report["violations"])
    assert report["ok"], bad
    assert [r["solver"] for r in report["summary"]] == labels
    rows = {r["solver"]: r for r in report["summary"]}
    # the exact solvers proved an optimum on every feasible instance they ran on
    for name in ("exhaustive", "dp", "dp-weak", "exhaustive-persistent", "exhaustive-weak"):
        if name in rows:
            assert rows[name]["proven"] == rows[name]["feasible"] > 0


def _noisy_solver(chain, budget):
    """Writes to file descriptor 1 as native libraries do (a banner), then answers."""
    import os

    os.write(1, b"Running NoisyLib 1.0: banner on stdout\n")
    return liar_infeasible(chain, budget).replace(solver="noisy", optimal_for=CLASS_NONE)


def test_json_on_stdout_survives_a_solver_printing_on_file_descriptor_1(capfd):
    with registered("noisy", _noisy_solver, optimal_for=CLASS_NONE):
        code = main(["verify", "--seed", "1", "--stages", "2:2", "--trials", "1",
                     "--families", "random", "--solvers", "exhaustive,noisy",
                     "--budgets-per-chain", "1", "--workers", "1", "--json"])
    out, err = capfd.readouterr()
    assert code == 0
    assert json.loads(out)["ok"] and "NoisyLib" in err and "NoisyLib" not in out


def misused(chain, budget):
    """Stands for a solver given a bad option value: misuse, not a false answer."""
    raise SolverOptionError("solver 'misused': option depth = -1 must be >= 0")


def test_misuse_stops_the_sweep_as_bad_input_and_is_no_violation(capsys):
    """Only false answers (and crashes) are violations: a bad option is bad input."""
    with registered("misused", misused, optimal_for=CLASS_NONE):
        with pytest.raises(SolverOptionError, match="depth = -1"):
            run_verify(_tiny(("exhaustive", "misused")))
        code = main(["verify", "--seed", "1", "--stages", "2:2", "--trials", "1",
                     "--families", "random", "--solvers", "exhaustive,misused",
                     "--budgets-per-chain", "1", "--workers", "1", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2 and "depth = -1" in captured.err and "VIOLATION" not in captured.out


def test_the_registered_limits_are_the_defaults_and_can_be_replaced():
    from remat_theory.analysis.verify import default_max_stages_for

    caps = dict(default_max_stages_for())
    assert caps["exhaustive"] == solvers.get("exhaustive").max_stages
    assert caps["exhaustive-persistent"] == caps["exhaustive"]  # a variant inherits
    task = make_tasks(_tiny(("exhaustive",), max_stages_for=(("exhaustive", 3),)))
    short = [t for t in task if t.length <= 3]
    long = [t for t in task if t.length > 3]
    assert short and long
    assert all(not any(i["results"] for i in verify_chain(t)["instances"]) for t in long)
    assert all(any(i["results"] for i in verify_chain(t)["instances"]) for t in short)


def test_chains_with_recording_costs_every_exact_solver_agrees():
    # Every chain gets its own fall_time / fall_overhead: the DPs, the ILP's fast mode and
    # exhaustive search must agree, every schedule replayed by the simulator.  The proven
    # ILP is left to its own test on such chains (test_ilp.py::
    # test_fall_costs_the_proven_modes_equal_exhaustive), as in the sweep above: its proofs
    # take seconds each.
    from dataclasses import replace

    from remat_theory.analysis.verify import make_tasks

    cfg = replace(_tiny(("dp", "dp-weak", "exhaustive", "exhaustive-persistent",
                         "exhaustive-weak", "ilp-fast", "store-all", "periodic")),
                  variations="fall-costs=all", max_stages=4, trials=2)
    tasks = make_tasks(cfg)
    assert tasks and all(t.variations == ("fall-costs",) and t.chain().has_fall_costs
                         for t in tasks)
    report = run_verify(cfg)
    assert report["ok"], report["violations"]
    assert report["instances"] > 0
    with pytest.raises(RematError, match="fall-costs=some"):
        make_tasks(replace(cfg, variations="fall-costs=some"))
    with pytest.raises(RematError, match="no-such.*known: fall-costs"):
        make_tasks(replace(cfg, variations="no-such"))


def test_chains_with_unsaved_outputs_every_exact_solver_agrees():
    # Every chain has outputs no backward reads (output_saved false entries), half of them
    # with recording costs too: every solver must agree, schedules replayed by the simulator.
    # The proven ILP is left to its own test on such chains (test_ilp_unsaved.py::
    # test_the_proven_model_equals_exhaustive_search): its proofs take seconds each.
    from dataclasses import replace

    from remat_theory.analysis.verify import make_tasks

    cfg = replace(_tiny(("dp", "dp-weak", "exhaustive", "exhaustive-persistent",
                         "exhaustive-weak", "ilp-fast", "store-all", "periodic",
                         "chen-greedy", "revolve", "gruslys", "dtr")),
                  variations="unsaved-outputs=all,fall-costs", max_stages=4,
                  trials=instances(4, 2))
    tasks = make_tasks(cfg)
    assert tasks and all(t.chain().has_unsaved_outputs for t in tasks)
    assert any(t.chain().has_fall_costs for t in tasks)
    assert not all(t.chain().has_fall_costs for t in tasks)
    report = run_verify(cfg)
    assert report["ok"], report["violations"]
    assert report["instances"] > 0


def test_coprime_and_zero_time_chains_keep_every_contract():
    """Issue #29: sizes with no common factor (auto said "infeasible" on one) and chains
    whose times are all 0 (the ILP crashed on one) are families of remat verify; the
    exact solvers agree with exhaustive search on them."""
    coprime = families.make("coprime", 4, 1)
    assert coprime.size_gcd() == 1 and min(coprime.x_size) >= 1000
    zero = families.make("zero-time", 3, 2)
    assert zero.ideal_makespan() == 0.0
    report = run_verify(_tiny(("exhaustive", "dp", "dp-weak", "ilp", "auto", "periodic"),
                              families=("coprime", "zero-time"), min_stages=2, max_stages=3))
    assert report["ok"], report["violations"]


def test_variations_listed_meet_in_every_combination():
    """Without ``=all``, the k-th variation (table order) is drawn on the trials whose bit k is set:
    four trials of two variations give each family all four combinations."""
    from dataclasses import replace

    from remat_theory.analysis.verify import make_tasks

    cfg = replace(_tiny(("store-all",)), variations="unsaved-outputs,fall-costs", trials=4,
                  families=("random", "resnet"))
    tasks = make_tasks(cfg)
    for fam in ("random", "resnet"):
        combos = [(t.chain().has_fall_costs, t.chain().has_unsaved_outputs)
                  for t in tasks if t.family == fam]
        assert sorted(combos) == [(False, False), (False, True), (True, False), (True, True)]
        assert [t.variations for t in tasks if t.family == fam] == [
            (), ("fall-costs",), ("unsaved-outputs",), ("fall-costs", "unsaved-outputs")]


@pytest.mark.parametrize("trials", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_offload_chains_check_the_offload_solvers_against_the_optimum_without_transfers(trials):
    """``--variations offload``: a solver that does not model bandwidth (a field whose
    absence is a sub-model) answers on the chain without the channel, and exhaustive-offload
    is checked against it (proofs/offload.md, O.1): never above its optimum, never
    infeasible where it fits; here recomputed from the records, not from the relations.
    (Two trials by default: a 2- and a 3-stage chain of each family, 14 instances, 7 s;
    three, 22 instances, with ``-m slow``; exhaustive-offload's own optimality is checked
    against a brute force in tests/test_offload_solvers.py.)"""
    cfg = _tiny(("exhaustive", "exhaustive-offload", "save-on-cpu"), min_stages=2,
                max_stages=3, trials=trials, variations="offload=all",
                time_limit=None)  # decided, never cut short by a loaded machine's clock
    report = run_verify(cfg)
    assert report["ok"], report["violations"]
    checked = 0
    for c in report["details"]:
        assert c["chain_data"]["bandwidth"] > 0
        for inst in c["instances"]:
            by = {r["solver"]: r for r in inst["results"]}
            assert set(by) == {"exhaustive", "exhaustive-offload", "save-on-cpu"}
            ex, off = by["exhaustive"], by["exhaustive-offload"]
            if ex["status"] == OPTIMAL:
                assert off["status"] == OPTIMAL
                assert off["makespan"] <= ex["makespan"] * (1 + 1e-9)
                checked += 1
            if by["save-on-cpu"]["makespan"] is not None and off["status"] == OPTIMAL:
                assert off["makespan"] <= by["save-on-cpu"]["makespan"] * (1 + 1e-9)
    assert checked > 0
