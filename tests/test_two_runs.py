"""The two-run question (proofs/two_runs.md).

Refuted: the certificate ``proofs/certificates/two_runs_min_budget.json`` is a 3-stage chain
where a schedule fits in 32 bytes and no schedule with at most two weakly increasing runs of
forward operations per phase does (exhaustive search restricted to the class, and the
two-pass MILP that is exactly the class); three runs reach 32.  The tests replay it with the
simulator, re-prove it with exhaustive search, and check each step of the hand proof of
proofs/two_runs.md on the simulator.  The walk of benchmarks/bench_two_runs.py and the
local search of remat_theory.analysis.two_runs_search are checked on a few chains against
exhaustive search (the oracle)."""
import random
from pathlib import Path

import _bench
import pytest
from _tiers import tiered

from remat_theory.analysis import certificates
from remat_theory.analysis import two_runs_search as trs
from remat_theory.model import persistence
from remat_theory.model.errors import BudgetExceededError, InvalidScheduleError
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from solvers.exhaustive import min_feasible_budget, search

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def walk():
    return _bench.load("bench_two_runs")


CERT = ROOT / "proofs" / "certificates" / "two_runs_min_budget.json"
# OPT at 32: phase 2 (after the loss) runs stages 0 1 2 | 0 1 2 | 0
OPT = "Fn0 Fn1 Fn2 Loss Fn0 Fn1 Fall2 Fn0 Fall1 Fn2 Fall0 B2 B1 B0"


@pytest.fixture(scope="module")
def cert():
    return certificates.load(CERT)


def test_the_certificate_replays_and_exhaustive_search_reproves_it(cert):
    sims = certificates.replay(cert)  # every recorded schedule, through the simulator
    assert sims["opt"].peak_memory == cert.budget == 32
    certificates.reprove(cert, labels=["opt", "exhaustive-weak-runs2", "exhaustive-weak-runs3"])
    c = cert.chain
    assert cert.solutions["exhaustive-weak-runs2"]["status"] == "infeasible"
    assert min_feasible_budget(c) == 32
    assert min_feasible_budget(c, schedule_class="weak-runs<=2") == 33
    assert min_feasible_budget(c, schedule_class="weak-runs<=3") == 32
    assert search(c, 32, schedule_class="weak-runs<=2")[0] is None
    assert search(c, 32)[1] == simulate(c, Schedule(OPT.split()), 32).makespan == 14.0


def test_the_optimum_needs_three_weak_runs_in_one_phase(cert):
    c = cert.chain
    for k, member in ((1, False), (2, False), (3, True)):
        assert persistence.is_class_member(c, Schedule(OPT.split()), f"weak-runs<={k}") is member
    assert not persistence.is_class_member(c, Schedule(cert.solutions["opt"]["schedule"]),
                                           "weak-runs<=2")


# Each step of the hand proof (proofs/two_runs.md, "Why two runs cannot fit"): the bound
# from the chain's fields, and one schedule realising the case, refused by the simulator.
STEPS = [
    ("a: nothing of positive size at the loss", "Fn0 Fn1 Fall2 Loss", 3, 33),
    ("b: Fall0 after B1", "Fn0 Fn1 Fn2 Loss Fn0 Fn1 Fall2 Fn0 Fall1 Fn2 B2 B1 Fall0 B0", 12, 36),
    ("c: Fall0 after B2", "Fn0 Fn1 Fn2 Loss Fn0 Fn1 Fall2 Fn0 Fall1 Fn2 B2 Fall0 B1 B0", 11, 37),
    ("d: Fall2 beside t2", "Fn0 Fn1 Fn2 Loss Fn0 Fall1 Fn2 Fn0 Fn1 Fall2", 9, 33),
    ("e: Fall1 beside t1", "Fn0 Fn1 Fn2 Loss Fn0 Fn1 Fall2 Fall0 Fall1", 8, 33),
]


@pytest.mark.parametrize("label, sched, step, peak", STEPS, ids=[s[0][0] for s in STEPS])
def test_each_step_of_the_hand_proof_is_the_simulators(cert, label, sched, step, peak):
    with pytest.raises(BudgetExceededError) as e:
        simulate(cert.chain, Schedule(sched.split()), 32)
    assert f"step {step} " in str(e.value) and f"peak memory {peak} " in str(e.value)


def test_the_hand_proofs_bounds_from_the_fields(cert):
    """The inequalities of the proof, read off the chain: each is over the budget 32."""
    c, M = cert.chain, cert.budget
    held = c.tape_held
    assert c.bwd_overhead[3] + c.x_size[3] == M and min(held) >= 1          # (a)
    assert c.x_size[1] + c.tape_size[0] + c.fall_overhead[0] > M              # (b)
    assert c.x_size[2] + held[1] + c.tape_size[0] + c.fall_overhead[0] > M     # (c) Fall0
    assert c.x_size[2] + c.x_size[1] + c.tape_size[1] + c.fall_overhead[1] > M  # (c) Fall1
    assert c.x_size[2] + min(held[0], held[1]) + c.tape_size[2] + c.fall_overhead[2] > M  # (d)
    assert c.x_size[1] + held[2] + held[0] + c.tape_size[1] + c.fall_overhead[1] > M  # (e)
    assert not any(c.saved(i) for i in (1, 2))  # x1, x2 only plain: tapes never release


def test_releasing_a_plain_output_needs_no_tape(cert):
    """Why the proof's tapes are never released before their backward: an Fn reading an
    unsaved x_i from its tape is refused (it is not there)."""
    with pytest.raises(InvalidScheduleError, match="t2 does not contain it"):
        simulate(cert.chain, Schedule("Fn0 Fn1 Fn2 Loss Fn0 Fn1 Fall2 Fn2".split()), 10 ** 6)


@pytest.mark.slow
def test_the_two_pass_milp_agrees(cert):
    check_milps(cert)


def check_milps(cert):
    """The MILPs recorded under ``facts["milp"]`` (two_runs_search.certificate), run again:
    the same status, makespan and smallest budget; their schedules replay at the budget;
    the default ``ilp`` (all schedules) equals exhaustive search, the two-pass MILP (the
    two-run class) has no schedule, the three-pass one reaches the optimum."""
    import solvers
    milp = cert.facts["milp"]
    assert set(milp) == {"ilp", "ilp-weak-runs2", "ilp-weak-runs3"}
    for label, rec in milp.items():
        sol = solvers.solve(cert.chain, cert.budget, rec["solver"], **rec["options"])
        assert (sol.status, sol.makespan, sol.min_budget) == (
            rec["status"], rec["makespan"], rec["min_budget"]), label
        if rec["schedule"] is not None:
            sim = simulate(cert.chain, Schedule(rec["schedule"]), cert.budget)
            assert sim.makespan == rec["makespan"]
    best = cert.solutions["opt"]["makespan"]
    assert milp["ilp"]["status"] == "optimal" and milp["ilp"]["makespan"] == best
    assert milp["ilp-weak-runs2"]["status"] == "infeasible"
    assert milp["ilp-weak-runs2"]["min_budget"] == cert.facts["min_budget_weak_runs_2"]
    assert milp["ilp-weak-runs3"]["makespan"] == best


def test_the_search_scores_the_certificate_as_a_two_run_miss(cert):
    s = trs.score(cert.chain, trs.TwoRunsConfig())
    assert s.two == float("inf") and s.one == float("inf")
    assert (trs.TWO, 32, 14.0, None) in s.misses
    bps = trs.opt_breakpoints(cert.chain, trs.TwoRunsConfig())
    assert bps[0] == (32, 14.0)
    # every breakpoint is OPT's value at that budget, and OPT is flat between them
    for (b, v), (b2, _) in zip(bps, bps[1:] + [(cert.chain.store_all_memory() + 1, None)]):
        assert search(cert.chain, b)[1] == v == search(cert.chain, b2 - 1)[1]


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


@pytest.mark.parametrize("change, two_runs_miss", [
    ({}, True),
    ({"fwd_overhead": [15, 10, 0]}, True),  # recording costs only where Fn2 releases x2
    ({"fwd_overhead": [15, 10, 21]}, False),  # no recording costs at all
    ({"output_saved": [True, False, True]}, False),  # x1 saved
    ({"output_saved": [False, True, True]}, False),  # x2 saved
])
def test_what_the_miss_needs(cert, change, two_runs_miss):
    """proofs/two_runs.md, "What it needs": exhaustive search on variations of the chain."""
    d = cert.chain.to_dict()
    d.update(change)
    c = type(cert.chain).from_dict(d)
    lo = min_feasible_budget(c)
    assert (min_feasible_budget(c, schedule_class="weak-runs<=2") > lo) is two_runs_miss
    assert min_feasible_budget(c, schedule_class="weak-runs<=3") == lo


@pytest.mark.parametrize("path", ["two_runs_min_budget.json", "two_runs_no_fall_costs.json"])
def test_three_runs_reach_the_optimum_at_every_budget_of_the_certificates(path):
    chain = certificates.load(ROOT / "proofs" / "certificates" / path).chain
    s = trs.score(chain, trs.TwoRunsConfig(runs=3))
    assert (s.two, s.one) == (1.0, float("inf"))  # weak-runs<=3 never misses; <=2 does


@pytest.mark.parametrize("model", tiered(trs.MODELS, ["classic"]))
def test_the_family_draws_its_model_and_its_misses_are_real(model):
    import numpy as np
    rng = np.random.default_rng(5)
    for _ in range(20):
        c = trs.loss_transient_chain(rng, 3, model)
        if model in ("saved", "classic"):
            assert not c.has_unsaved_outputs
        if model in ("no-fall-costs", "classic"):
            assert not c.has_fall_costs
    res = trs.family_sweep(seed=2, seconds=60, L=3, model=model, max_chains=5)
    assert res["chains"] == 5
    for m in res["misses"]:  # none expected this small; any reported must be real
        c = type(cert_chain()).from_dict(m["chain"])
        assert min_feasible_budget(c, schedule_class="weak-runs<=2") > min_feasible_budget(c)


def cert_chain():
    return certificates.load(CERT).chain


CERT_NO_FALL = ROOT / "proofs" / "certificates" / "two_runs_no_fall_costs.json"


def test_without_recording_costs_two_runs_miss_too():
    """The second certificate: no recording costs, one unsaved output (x2); 10 bytes fit,
    the two-run class needs 11 (exhaustive search re-proves it), three runs fit."""
    cert = certificates.load(CERT_NO_FALL)
    c = cert.chain
    assert not c.has_fall_costs and [c.saved(i) for i in (1, 2, 3)] == [True, False, True]
    sims = certificates.replay(cert)
    assert sims["opt"].peak_memory == cert.budget == 10
    certificates.reprove(cert, labels=["opt", "exhaustive-weak-runs2", "exhaustive-weak-runs3"])
    assert min_feasible_budget(c) == 10
    assert min_feasible_budget(c, schedule_class="weak-runs<=2") == 11
    assert min_feasible_budget(c, schedule_class="weak-runs<=3") == 10
    for s in (Schedule(cert.solutions["opt"]["schedule"]),
              Schedule(cert.facts["milp"]["ilp-weak-runs3"]["schedule"])):
        assert not persistence.is_class_member(c, s, "weak-runs<=2")
        assert persistence.is_class_member(c, s, "weak-runs<=3")


@pytest.mark.slow
def test_the_two_pass_milp_agrees_without_recording_costs():
    check_milps(certificates.load(CERT_NO_FALL))


@pytest.mark.parametrize("path", [CERT, CERT_NO_FALL], ids=["min_budget", "no_fall_costs"])
def test_above_the_miss_two_runs_reach_the_optimum(path):
    c = certificates.load(path).chain
    lo = min_feasible_budget(c, schedule_class="weak-runs<=2")
    assert lo > min_feasible_budget(c)
    for b in range(lo, c.store_all_memory() + 1):
        assert search(c, b, schedule_class="weak-runs<=2")[1] == search(c, b)[1]


@pytest.mark.slow
def test_the_searchs_two_run_misses_are_real_and_three_runs_fit():
    """benchmarks/results/two_runs_search.json (proofs/two_runs.md, "Searches"): every
    two-run miss the local search recorded is one (exhaustive search), with an unsaved
    output, and three runs reach the optimum at its budget."""
    import json
    data = json.loads((ROOT / "benchmarks" / "results" / "two_runs_search.json").read_text())
    seen = {json.dumps(m["chain"], sort_keys=True): m for m in data["two_run_misses"]}
    assert len(seen) == 16
    for text, m in seen.items():
        c = type(cert_chain()).from_dict(json.loads(text))
        _, budget, best, got = m["misses"][0]
        assert got is None and c.has_unsaved_outputs
        assert search(c, budget)[1] == best
        assert search(c, budget, schedule_class="weak-runs<=2")[0] is None
        assert search(c, budget, schedule_class="weak-runs<=3")[1] == best


CERT_L5 = ROOT / "proofs" / "certificates" / "two_runs_search_L5.json"


def test_the_searchs_miss_replays():
    """The third certificate (the local search's miss, shrunk): no recording costs, no loss
    transient; its optimum's loss phase has three weakly increasing runs."""
    cert = certificates.load(CERT_L5)
    c = cert.chain
    assert not c.has_fall_costs and c.bwd_overhead[-1] == 0 and c.has_unsaved_outputs
    sims = certificates.replay(cert)
    assert sims["opt"].peak_memory == cert.budget == 36
    s = Schedule(cert.solutions["opt"]["schedule"])
    assert not persistence.is_class_member(c, s, "weak-runs<=2")
    assert persistence.is_class_member(c, s, "weak-runs<=3")


@pytest.mark.slow
def test_the_searchs_miss_reproves():
    cert = certificates.load(CERT_L5)
    certificates.reprove(cert)  # exhaustive search, all schedules and both classes
    assert min_feasible_budget(cert.chain, schedule_class="weak-runs<=2") == 37
    check_milps(cert)
