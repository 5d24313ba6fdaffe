"""``remat hard``: short searches whose corpus files replay, and a shrinker that keeps the
property it is given (remat_theory/hard_search.py)."""
from __future__ import annotations

import json

import pytest

import solvers
from remat_theory import Chain
from remat_theory.analysis.certificates import load, replay, reprove
from remat_theory.cli import main
from remat_theory.model.errors import RematError, SolverError
from remat_theory.analysis.hard_instances import complexity
from remat_theory.analysis.hard_search import (SearchConfig, evaluate, run_restart,
                                               search, shrink)

# A DP-gap instance found by `remat hard --objective dp-gap --seed 1` before shrinking:
# DP 97, exact optimum 87.
GAP_CHAIN = Chain(fwd_time=[10.0, 5.0, 7.0, 4.0], bwd_time=[10.0, 5.0, 10.0, 7.0, 2.0],
                  x_size=[1, 5, 8, 7, 5], tape_size=[11, 8, 7, 8], name="gap")
GAP_BUDGET = 34


def test_evaluate_scores_the_dp_gap_against_exhaustive_search():
    ev = evaluate(GAP_CHAIN, GAP_BUDGET, SearchConfig("dp-gap"))
    dp = solvers.solve(GAP_CHAIN, GAP_BUDGET, "dp").makespan
    opt = solvers.solve(GAP_CHAIN, GAP_BUDGET, "exhaustive").makespan
    assert ev.anomaly is None
    assert ev.score == pytest.approx(dp / opt)
    assert ev.score > 1.1


def test_opt_is_exhaustive_search_up_to_10_stages():
    """At 9 stages the proven ILP does not finish in the time limit; exhaustive search gives
    OPT, so the instance is scored (before, OPT above 7 stages was the ILP's)."""
    from remat_theory.analysis.families import make

    chain = make("random", 9, 1)
    budget = (chain.memory_lower_bound() + chain.store_all_memory()) // 2
    ev = evaluate(chain, budget, SearchConfig("dp-gap", solver="dp-weak", max_stages=10))
    opt, opts = ev.solutions["opt"]
    assert opt.solver == "exhaustive" and opt.status == "optimal" and opts["max_stages"] == 10
    weak = solvers.solve(chain, budget, "dp-weak").makespan
    assert ev.anomaly is None and ev.score == pytest.approx(weak / opt.makespan)
    assert ev.score >= 1.0


def test_evaluate_a_solver_variant_by_its_label():
    """A verify variant label stands for a registered solver with fixed options: the
    persistent class's own exhaustive search scores the DP's gap, and the monotone class
    (the fast ILP's normal form) is optimal on this instance."""
    per = evaluate(GAP_CHAIN, GAP_BUDGET, SearchConfig("dp-gap", solver="exhaustive-persistent"))
    dp = evaluate(GAP_CHAIN, GAP_BUDGET, SearchConfig("dp-gap"))
    assert per.score == pytest.approx(dp.score) and per.score > 1.1
    mono = evaluate(GAP_CHAIN, GAP_BUDGET, SearchConfig("dp-gap", solver="exhaustive-monotone"))
    sol, opts = mono.solutions["exhaustive-monotone"]
    assert opts == {"schedule_class": "monotone"} and sol.optimal_for == "weak-runs<=1"
    assert mono.score == 1.0


def test_evaluate_infeasible_budget_is_not_scored():
    lb = GAP_CHAIN.memory_lower_bound()
    ev = evaluate(GAP_CHAIN, lb - 1, SearchConfig("dp-gap"))
    assert ev.score is None and ev.anomaly is None


def test_shrinker_keeps_a_synthetic_property_and_minimizes():
    """Property: at least two stages and total forward time >= 5.  The minimal instance has
    2 stages, forward times summing to exactly 5, every other value at its floor."""
    chain = Chain([3.0, 4.0, 2.0, 6.0], [1.0, 2.0, 3.0, 4.0, 5.0], [3, 4, 5, 6, 7],
                  [5, 6, 7, 8], [1, 2, 3, 4], [0, 1, 0, 1, 0])

    def keep(c, b):
        return c.length >= 2 and sum(c.fwd_time) >= 5

    small, budget = shrink(chain, 50, keep)
    assert keep(small, budget)
    assert small.length == 2 and sum(small.fwd_time) == 5
    assert sum(small.bwd_time) == 0 and sum(small.x_size) == 0
    assert list(small.tape_size) == [0, 0] and budget == 0


def test_shrinker_keeps_the_dp_gap():
    cfg = SearchConfig("dp-gap")
    before = evaluate(GAP_CHAIN, GAP_BUDGET, cfg).score

    def keep(c, b):
        s = evaluate(c, b, cfg).score
        return s is not None and s >= 1.1

    chain, budget = shrink(GAP_CHAIN, GAP_BUDGET, keep, max_steps=4)  # 4 moves: CI time
    after = evaluate(chain, budget, cfg)
    assert after.score >= 1.1
    assert complexity(chain, budget) < complexity(GAP_CHAIN, GAP_BUDGET)
    assert before >= 1.1


def test_restart_is_a_picklable_top_level_task():
    import pickle

    task = (SearchConfig("dp-gap", max_stages=4), 7, 60.0, 25)
    r = run_restart(pickle.loads(pickle.dumps(task)))
    assert r.evaluations >= 25 and r.best is not None and r.best.score >= 1.0
    assert run_restart(task).best.score == r.best.score  # an evaluation cap is deterministic


def test_cli_dp_gap_corpus_replays(tmp_path, capsys):
    out = tmp_path / "corpus"
    # a fixed amount of search (the cap, not --time 60, stops each restart) on 2 workers;
    # at 4 stages the best gap found shrinks in a few seconds
    rc = main(["hard", "--objective", "dp-gap", "--time", "60", "--max-evals", "20",
               "--workers", "2", "--seed", "3", "--max-stages", "4", "--out", str(out), "--top", "2",
               "--no-progress"])
    assert rc == 0
    files = sorted(out.glob("*.json"))
    assert files, capsys.readouterr().out
    for f in files:
        cert = load(f)
        sims = replay(cert)
        assert set(sims) == {"opt", "dp"}
        opt, dp = cert.solutions["opt"], cert.solutions["dp"]
        assert opt["solver"] == "exhaustive" and opt["status"] == "optimal"
        assert dp["makespan"] / opt["makespan"] == pytest.approx(cert.facts["ratio"])
        assert dp["makespan"] >= opt["makespan"] - 1e-9
        reprove(cert)
        assert cert.chain.to_dict()["format"] == "remat-chain/1"
        assert json.loads(f.read_text())["budget"] == cert.budget


def test_cli_baseline_gap_and_json_summary(tmp_path, capsys):
    rc = main(["hard", "--objective", "baseline-gap", "--solver", "periodic", "--time", "60",
               "--max-evals", "40",
               "--workers", "1", "--max-stages", "4", "--out", str(tmp_path), "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["solver"] == "periodic" and summary["evaluations"] > 0
    for f in summary["files"]:
        cert = load(f)
        replay(cert)
        assert cert.solutions["periodic"]["solver"] == "periodic"


def test_cli_ilp_time_scores_proven_solves_only():
    cfg = SearchConfig("ilp-time", max_stages=3)
    chain = Chain([2.0, 3.0, 1.0], [1.0, 2.0, 2.0, 1.0], [2, 3, 1, 2], [4, 3, 3], name="small")
    ev = evaluate(chain, chain.memory_lower_bound() + 2, cfg)
    ilp, _ = ev.solutions["ilp"]
    assert ilp.status == "optimal" and ev.score == ilp.wall_time
    assert ilp.makespan == pytest.approx(ev.solutions["opt"][0].makespan)


def test_search_in_process(tmp_path):
    res = search(SearchConfig("dp-gap", max_stages=4), seconds=60, seed=5, workers=1,
                 progress=False, max_evals=15)
    assert res.evaluations > 0 and res.found
    assert all(a.score >= b.score for a, b in zip(res.found, res.found[1:]))


def test_anomalies_are_recorded_not_scored(monkeypatch):
    """A solver whose answer fails the registry's replay is an anomaly, never a score."""
    real = solvers.solve

    def lying(chain, budget, name, **options):
        if name == "dp":
            raise SolverError("solver 'dp' claims makespan 1 but the simulator measures 2")
        return real(chain, budget, name, **options)

    monkeypatch.setattr(solvers, "solve", lying)
    ev = evaluate(GAP_CHAIN, GAP_BUDGET, SearchConfig("dp-gap"))
    assert ev.score is None and "claims makespan" in ev.anomaly


@pytest.mark.parametrize("argv, message", [
    (["--objective", "baseline-gap"], "needs a solver"),
    (["--objective", "baseline-gap", "--solver", "nope"], "not available"),
    (["--objective", "ilp-time", "--solver", "dp"], "not used"),
    (["--min-stages", "5", "--max-stages", "3"], "below min_stages"),
    (["--max-evals", "0"], "--max-evals: value 0"),
    (["--max-evals", "x"], "--max-evals"),
])
def test_cli_errors_name_the_option(argv, message, capsys):
    assert main(["hard", "--time", "1", *argv]) == 2
    assert message in capsys.readouterr().err


def test_config_validation():
    with pytest.raises(RematError, match="objective"):
        SearchConfig("fastest")
    with pytest.raises(RematError, match="max_size"):
        SearchConfig(max_size=0)
    with pytest.raises(RematError, match="max_stages = 20"):
        SearchConfig(max_stages=20)


def test_repeat_and_delete_stage_are_inverse():
    from remat_theory.analysis.hard_search import delete_stage, repeat_stage

    for i in range(GAP_CHAIN.length):
        longer = repeat_stage(GAP_CHAIN, i)
        assert longer.length == GAP_CHAIN.length + 1
        assert longer.x_size[i + 1] == longer.x_size[i + 2] == GAP_CHAIN.x_size[i + 1]
        assert delete_stage(longer, i + 1, keep_output=True) == GAP_CHAIN


def test_moves_and_shrinks_carry_the_optional_fields():
    """Recording costs and output_saved travel with their stage through repeat / delete;
    a chain without recording costs keeps none when a forward time shrinks; the shrinker
    turns an unsaved output back into a saved one when the property allows it."""
    import numpy as np

    from remat_theory.analysis.hard_search import _mutate, delete_stage, repeat_stage

    c = GAP_CHAIN.replace(fall_time=[11.0, 5.0, 9.0, 4.0], fall_overhead=[0, 2, 0, 1],
                          output_saved=[True, False, True, False])
    for i in range(c.length):
        longer = repeat_stage(c, i)
        assert longer.output_saved[i] == longer.output_saved[i + 1] == c.output_saved[i]
        assert longer.fall_time[i + 1] == c.fall_time[i]
        assert delete_stage(longer, i + 1, keep_output=True) == c
    cfg = SearchConfig("dp-gap", variations=("fall-costs", "unsaved-outputs"), max_stages=6)
    rng = np.random.default_rng(0)
    seen_flip = False
    for _ in range(200):
        m, b = _mutate(rng, c, GAP_BUDGET, cfg)
        seen_flip |= m.length == c.length and m.output_saved != c.output_saved
        assert b >= 0
    assert seen_flip
    # a canonical chain stays canonical through the shrinker's value passes
    small, _ = shrink(GAP_CHAIN, GAP_BUDGET, lambda ch, b: sum(ch.fwd_time) >= 20)
    assert not small.has_fall_costs and not small.has_unsaved_outputs
    # unsaved outputs are shrunk away when the property does not need them
    small, _ = shrink(c, GAP_BUDGET, lambda ch, b: ch.length >= 2)
    assert not small.has_unsaved_outputs and not small.has_fall_costs


def test_search_draws_unsaved_outputs_and_fall_costs():
    from remat_theory.analysis.hard_search import random_instance
    import numpy as np

    cfg = SearchConfig("dp-gap", variations="fall-costs,unsaved-outputs")
    rng = np.random.default_rng(3)
    drawn = [random_instance(rng, cfg)[0] for _ in range(20)]
    assert any(ch.has_unsaved_outputs for ch in drawn)
    assert all(ch.has_fall_costs for ch in drawn)


def _classic_store_all(chain, budget):
    from solvers.store_all import solve_store_all
    return solve_store_all(chain, budget)


def test_variations_are_checked_and_every_scored_solver_must_model_them():
    from solvers import registry

    with pytest.raises(RematError, match="unknown variation 'nope'"):
        SearchConfig("dp-gap", variations="fall-costs,nope")
    assert SearchConfig("dp-gap", variations=["unsaved-outputs", "fall-costs"]).variations == (
        "fall-costs", "unsaved-outputs")  # table order: the same set draws the same chains
    with registry.registered("_classic", _classic_store_all, optimal_for="none"):
        SearchConfig("baseline-gap", solver="_classic").check_solvers()
        cfg = SearchConfig("baseline-gap", solver="_classic", variations="unsaved-outputs")
        with pytest.raises(RematError, match="'_classic' does not model the variation "
                                             "unsaved-outputs"):
            cfg.check_solvers()


def test_moves_and_shrinks_carry_a_field_of_one_number():
    """The offload variation's bandwidth (one number, not a per-stage array) goes through
    the table's moves: drawn, changed now and then, kept when a stage is repeated or
    removed, dropped back to its default by a shrink; OPT does not model it, so a search
    drawing it is refused naming the field."""
    import numpy as np

    from remat_theory.analysis.hard_instances import candidates
    from remat_theory.analysis.hard_search import _mutate, random_instance

    cfg = SearchConfig("dp-gap", variations="offload", min_stages=2, max_stages=5)
    rng = np.random.default_rng(0)
    chain, budget = random_instance(rng, cfg)
    assert chain.bandwidth is not None and chain.bandwidth > 0
    rates, lengths = {chain.bandwidth}, {chain.length}
    for _ in range(400):
        chain, budget = _mutate(rng, chain, budget, cfg)
        assert chain.bandwidth is not None and chain.bandwidth > 0
        rates.add(chain.bandwidth)
        lengths.add(chain.length)
    assert len(rates) > 1 and len(lengths) > 1
    cands = [c for c, _ in candidates(chain, budget)]
    assert any(c.bandwidth is None and c.length == chain.length for c in cands)
    assert any(c.length < chain.length and c.bandwidth == chain.bandwidth for c in cands)
    with pytest.raises(RematError, match="does not model the variation offload .bandwidth"):
        cfg.check_solvers()


def test_dp_gap_is_one_ratio_of_makespans_where_the_class_has_no_schedule_it_is_not_scored():
    """dp-gap is defined once (hard_objectives: DP(M)/OPT(M) where the class has a schedule):
    at a budget where some schedule fits but no persistent one does (the classic budget gap,
    proofs/certificates/classic_budget_gap_L2.json, at 3 bytes), the search scores nothing,
    while a ratio is still taken one byte up, where both fit."""
    import json
    from pathlib import Path

    cert = json.loads((Path(__file__).resolve().parents[1] / "proofs" / "certificates"
                       / "classic_budget_gap_L2.json").read_text())
    chain = Chain.from_dict(cert["chain"])
    below = evaluate(chain, cert["budget"], SearchConfig("dp-gap"))
    opt, _ = below.solutions["opt"]
    assert opt.status == "optimal" and below.score is None and below.anomaly is None
    at = evaluate(chain, cert["budget"] + 1, SearchConfig("dp-gap"))
    assert at.score is not None and at.score >= 1.0
