"""The executable checks of proofs/ (see proofs/README.md, the index of claims).

Every certificate under proofs/certificates/ is replayed through the simulator and, when
small enough, re-proved by running its solvers again.  The lemmas of proofs/model.md, the
homogeneous-chain theorem (proofs/homogeneous.md) and the slot bound (proofs/slots.md) are
checked against independent oracles: exhaustive search, the simulator, closed forms
written out here.
"""
from __future__ import annotations

import json
import math
from math import comb
from pathlib import Path

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.analysis.certificates import CertificateError, load, replay, reprove
from remat_theory.analysis.hardness import is_partition_yes, partition_instance
from remat_theory.model.schedule import B, FALL, FORWARD_KINDS, LOSS
from remat_theory.strategies import chains

CERT_DIR = Path(__file__).resolve().parent.parent / "proofs" / "certificates"
CERTS = sorted(CERT_DIR.glob("*.json"))
# Re-proving runs every recorded solver again; exhaustive search is quick up to 8 stages.
REPROVE_MAX_STAGES = 8


def _witnesses() -> dict:
    from remat_theory.analysis import classic_gap, classic_growth, hardness, weak_gap

    return {"classic_budget_gap_witness": classic_gap.budget_gap_witness,
            "classic_growth_witness": classic_growth.growth_witness,
            "unbounded_gap_witness": hardness.unbounded_gap_witness,
            "persistence_gap_witness": hardness.persistence_gap_witness,
            "fall_only_gap_witness": weak_gap.fall_only_gap_witness,
            "fall_only_budget_witness": weak_gap.fall_only_budget_witness}


WITNESSES = _witnesses()


def _cert(name: str):
    return load(CERT_DIR / name)


# ---------------------------------------------------------------------- certificates

def test_there_are_certificates():
    names = {p.name for p in CERTS}
    for required in ("drop_shortens.json", "drop_lowers_min_budget.json",
                     "partition_yes.json", "partition_no.json", "persistence_gap.json",
                     "persistence_gap_family_k2.json", "persistence_gap_family_k10.json",
                     "persistence_gap_weak.json", "unbounded_gap_r5.json",
                     "unbounded_gap_r100.json"):
        assert required in names


@pytest.mark.parametrize("path", CERTS, ids=[p.stem for p in CERTS])
def test_certificates_replay(path):
    """Every recorded schedule is valid under the budget, with its recorded makespan/peak."""
    cert = load(path)
    sims = replay(cert)
    assert sims, f"{path.name} records no schedule"
    for label, sim in sims.items():
        assert sim.peak_memory <= cert.budget


@pytest.mark.parametrize("path", CERTS, ids=[p.stem for p in CERTS])
def test_certificates_reprove(path):
    """The recorded solvers, run again, give the same statuses and optimal makespans."""
    cert = load(path)
    known = set(solvers.names())
    labels = set()
    for label, entry in cert.solutions.items():
        if entry["solver"] in known:
            labels.add(label)
        else:  # a witness schedule of a proof: rebuilt by its function and compared
            assert entry["solver"] in WITNESSES, f"{path.name}: unknown solver {entry['solver']!r}"
            rebuilt = WITNESSES[entry["solver"]](**entry["options"])
            assert rebuilt.tokens() == entry["schedule"]
    if cert.chain.length > REPROVE_MAX_STAGES:  # long chains: only the fast polynomial DP
        labels = {k for k in labels if cert.solutions[k]["solver"] == "dp"}
    if not labels:
        return  # a long chain with no dp entry: its replay is test_certificates_replay's
    sols = reprove(cert, labels)
    assert set(sols) == labels


def test_replay_rejects_a_tampered_certificate(tmp_path):
    data = json.loads((CERT_DIR / "drop_shortens.json").read_text())
    data["solutions"]["opt"]["makespan"] = 1.0  # the true optimum is 2
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(data))
    with pytest.raises(CertificateError, match="recorded makespan"):
        replay(load(p))
    data = json.loads((CERT_DIR / "drop_shortens.json").read_text())
    data["solutions"]["opt"]["schedule"] = data["solutions"]["opt"]["schedule"][:-1]
    p.write_text(json.dumps(data))
    with pytest.raises(CertificateError, match="invalid"):
        replay(load(p))
    p.write_text("{}")
    with pytest.raises(CertificateError, match="format"):
        load(p)


# ---------------------------------------------------------------------- claim 1: the model

def test_drop_shortens_certificate_says_what_model_md_claims():
    cert = _cert("drop_shortens.json")
    opt, drop = cert.solutions["opt"], cert.solutions["opt_drop"]
    assert opt["status"] == drop["status"] == "optimal"
    assert opt["optimal_for"] == "all" and drop["optimal_for"] == "all+drop"
    assert drop["makespan"] < opt["makespan"]
    assert any(t.startswith("Drop") for t in drop["schedule"])


def test_drop_lowers_min_budget_certificate():
    cert = _cert("drop_lowers_min_budget.json")
    opt, drop = cert.solutions["opt"], cert.solutions["opt_drop"]
    assert opt["status"] == "infeasible" and drop["status"] == "optimal"
    assert opt["min_budget"] > cert.budget
    from solvers.exhaustive import min_feasible_budget

    assert min_feasible_budget(cert.chain, allow_drop=True) <= cert.budget
    assert min_feasible_budget(cert.chain) == opt["min_budget"]


@settings(max_examples=examples(40, 18), deadline=None)
@given(chains(1, 4, max_time=6, max_size=6), st.floats(0.0, 1.0))
def test_backward_order_and_forward_counts(chain, frac):
    """Lemmas 1.1 and 1.2 on exact optima: Loss, B_{L-1}..B_0 once each in this order; every
    stage runs a forward before the loss and a Fall before its backward."""
    budget = _budget_between(chain, frac)
    sol = solvers.solve(chain, budget, "exhaustive")
    assert sol.status == "optimal"
    ops = list(sol.schedule)
    backs = [o for o in ops if o.kind in (LOSS, B)]
    L = chain.length
    assert [o.kind for o in backs] == [LOSS] + [B] * L
    assert [o.index for o in backs[1:]] == list(range(L - 1, -1, -1))
    loss_at = next(k for k, o in enumerate(ops) if o.kind == LOSS)
    before = [o.index for o in ops[:loss_at] if o.kind in FORWARD_KINDS]
    it = iter(before)
    assert all(any(j == i for j in it) for i in range(L))  # 0..L-1 is a subsequence
    for i in range(L):
        b_at = next(k for k, o in enumerate(ops) if o.kind == B and o.index == i)
        assert any(o.kind == FALL and o.index == i for o in ops[:b_at])


@settings(max_examples=examples(40, 12), deadline=None)
@given(chains(1, 4, max_time=6, max_size=6), st.floats(0.0, 1.0))
def test_optimum_is_between_ideal_and_store_all(chain, frac):
    """Lemmas 1.4 and 1.5: OPT >= ideal makespan; OPT = ideal at store_all_memory(); and
    when every forward time is positive, OPT > ideal one byte below it."""
    budget = _budget_between(chain, frac)
    sol = solvers.solve(chain, budget, "exhaustive")
    ideal = chain.ideal_makespan()
    assert sol.makespan >= ideal - 1e-9
    top = chain.store_all_memory()
    at_top = solvers.solve(chain, top, "exhaustive")
    assert math.isclose(at_top.makespan, ideal, abs_tol=1e-9)
    if all(f > 0 for f in chain.fwd_time):
        below = solvers.solve(chain, top - 1, "exhaustive")
        assert below.status == "infeasible" or below.makespan > ideal + 1e-9


@settings(max_examples=examples(60, 9), deadline=None)
@given(chains(1, 5))
def test_memory_lower_bound_is_below_exact_min_budget(chain):
    """Lemma 1.6: memory_lower_bound() <= the exact smallest feasible budget (the bottleneck
    search over all schedules) <= store-all's peak.  (tests/test_chain.py had the same check
    on the same chains; it is this one, the check proofs/model.md names.)"""
    from solvers.exhaustive import min_feasible_budget

    assert chain.memory_lower_bound() <= min_feasible_budget(chain) <= chain.store_all_memory()


@settings(max_examples=examples(30, 6), deadline=None)
@given(chains(1, 4, max_time=6, max_size=6), st.floats(0.0, 1.0))
def test_drop_extension_never_worse(chain, frac):
    """Lemma 1.7: OPT_drop(M) <= OPT(M), and both are non-increasing in M."""
    budget = _budget_between(chain, frac)
    plain = solvers.solve(chain, budget, "exhaustive")
    drop = solvers.solve(chain, budget, "exhaustive", allow_drop=True)
    assert drop.status == "optimal"
    assert drop.makespan <= plain.makespan + 1e-9
    more = solvers.solve(chain, budget + 1, "exhaustive")
    assert more.makespan <= plain.makespan + 1e-9


def _budget_between(chain: Chain, frac: float) -> int:
    from solvers.exhaustive import min_feasible_budget

    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    return lo + int(frac * (hi - lo))


# ---------------------------------------------------------------------- claim 5: NP-hardness

@pytest.mark.parametrize("name", ["partition_yes.json", "partition_no.json",
                                  "partition_no_positive.json"])
def test_partition_certificates_match_the_reduction(name):
    cert = _cert(name)
    values = cert.facts["values"]
    inst = partition_instance(values, positive=cert.facts.get("positive", False))
    assert inst.chain == cert.chain and inst.budget == cert.budget
    assert cert.facts["yes_instance"] == is_partition_yes(values)
    opt = cert.solutions["opt"]
    assert opt["status"] == "optimal" and opt["optimal_for"] == "all"
    assert (opt["makespan"] <= inst.threshold) == is_partition_yes(values)


# ---------------------------------------------------------------------- claim 6: the gap

def test_persistence_gap_certificate():
    """The DP is optimal for its class and strictly worse than the exact optimum here."""
    cert = _cert("persistence_gap.json")
    dp, opt = cert.solutions["dp"], cert.solutions["opt"]
    assert dp["status"] == "optimal" and dp["optimal_for"] == "persistent"
    assert opt["status"] == "optimal" and opt["optimal_for"] == "all"
    assert dp["makespan"] / opt["makespan"] >= cert.facts["ratio"] - 1e-9 > 1.0


def test_weak_gap_certificate():
    """The weakly persistent DP is optimal for its class and strictly worse than OPT here."""
    cert = _cert("persistence_gap_weak.json")
    weak, opt = cert.solutions["dp-weak"], cert.solutions["opt"]
    assert weak["status"] == "optimal" and weak["optimal_for"] == "weakly-persistent"
    assert opt["status"] == "optimal" and opt["optimal_for"] == "all"
    assert weak["makespan"] > opt["makespan"]


@pytest.mark.parametrize("r", [1, 2, 3, 5, 10, 25, 60])
def test_unbounded_gap_family(r):
    """Theorem 6.5: on H_r (L = r + 3) the witness runs F_0 twice (optimal: Lemma 6.2's
    argument) and the DP r + 2 times; for L <= 8 exhaustive search and dp-weak agree with 2."""
    from remat_theory.analysis.hardness import unbounded_gap_chain, unbounded_gap_witness

    chain, budget = unbounded_gap_chain(r)
    assert simulate(chain, unbounded_gap_witness(r), budget).makespan == 2
    dp = solvers.solve(chain, budget, "dp")
    assert dp.status == "optimal" and dp.makespan == r + 2
    if chain.length <= 8:
        assert solvers.solve(chain, budget, "exhaustive").makespan == 2
        assert solvers.solve(chain, budget, "dp-weak").makespan == 2


def test_unbounded_gap_spares():
    """The two facts Lemma 6.6 rests on, computed from the chain: B_2's necessary peak is
    the budget; every B_i (3 <= i <= r+2) spares 1 or 2 bytes, and the only values smaller
    than 3 bytes are x_0, x_1 and t_1."""
    from remat_theory.analysis.hardness import unbounded_gap_chain

    for r in range(1, 12):
        chain, budget = unbounded_gap_chain(r)
        x, tau = chain.x_size, (None,) + chain.tape_size  # tau[i] = size of t_i

        def necessary(i):  # source of x_i, t_{i+1}, d_{i+1}, d_i
            return min(x[i], tau[i]) + tau[i + 1] + x[i + 1] + x[i]

        assert necessary(2) == budget
        for i in range(3, r + 3):
            assert 1 <= budget - necessary(i) <= 2
        small = [v for v in x[1:] + chain.tape_size if v < 3]
        assert small == [1, 1]


# ---------------------------------------------------------------------- claim 7: homogeneous

def _beta(c: int, r: int) -> int:
    return comb(c + r, c) if c >= 0 and r >= 0 else 0


def _revolve(l: int, c: int) -> int:
    """Griewank-Walther: fewest advances to reverse l steps with c checkpoints,
    r l - beta(c+1, r-1), r the unique integer with beta(c, r-1) < l <= beta(c, r)."""
    r = 0
    while _beta(c, r) < l:
        r += 1
    return r * l - _beta(c + 1, r - 1)


def _hsm(l: int, c: int, memo: dict) -> int:
    """Gruslys et al. 2016, BPTT-HSM: C(t, m) = min_y y + C(t-y, m-1) + C(y, m), C(1, m) = 0
    (advances only; a right part of one step needs no slot)."""
    if l <= 1:
        return 0
    if c <= 0:
        return math.inf
    key = (l, c)
    if key not in memo:
        memo[key] = min(y + _hsm(l - y, c - 1, memo) + _hsm(y, c, memo) for y in range(1, l))
    return memo[key]


def _homogeneous_case(L: int, c: int, bwd: float = 2.0, extra_tape: int = 1):
    """The tape-dominated homogeneous chain of proofs/homogeneous.md and its budget."""
    T = c + extra_tape  # T >= c + 1
    return Chain.homogeneous(L, 1.0, bwd, 1, T, 0.0), T + 3 + c


def test_revolve_closed_form_equals_gruslys_hsm_recurrence():
    memo: dict = {}
    for L in range(1, 60):
        for c in range(1, 12):
            assert _hsm(L, c, memo) == _revolve(L, c), (L, c)


@pytest.mark.parametrize("L", range(1, 16))
def test_dp_on_homogeneous_chain_equals_revolve(L):
    """Theorem 7.1: DP makespan = L (f + b) + f t(L, c) at budget T + 3 + c, T >= c + 1."""
    for c in range(1, L + 2):
        for extra in (1, 3):
            chain, budget = _homogeneous_case(L, c, extra_tape=extra)
            sol = solvers.solve(chain, budget, "dp")
            assert sol.status == "optimal"
            assert sol.makespan == L * 3.0 + _revolve(L, c), (L, c, extra)


@pytest.mark.parametrize("L", range(1, 7))
def test_exact_optimum_on_homogeneous_chain_equals_revolve(L):
    """Theorem 7.1's global part (checked, L <= 6): no schedule at all beats the formula."""
    for c in range(1, L + 1):
        chain, budget = _homogeneous_case(L, c)
        sol = solvers.solve(chain, budget, "exhaustive")
        assert sol.makespan == L * 3.0 + _revolve(L, c), (L, c)


def test_tape_condition_is_needed():
    """With T <= c the DP can keep a tape as a checkpoint and beat revolve's count: the
    condition T >= c + 1 of theorem 7.1 is not an artefact."""
    beaten = 0
    for L in range(3, 9):
        for c in range(2, L + 2):
            chain = Chain.homogeneous(L, 1.0, 2.0, 1, c, 0.0)  # T = c
            sol = solvers.solve(chain, c + 3 + c, "dp")
            assert sol.makespan <= L * 3.0 + _revolve(L, c)
            beaten += sol.makespan < L * 3.0 + _revolve(L, c)
    assert beaten > 0


# ---------------------------------------------------------------------- claim 8: slots

@settings(max_examples=examples(60, 15), deadline=None)
@given(chains(1, 6, max_time=9, max_size=40), st.floats(0.0, 1.2), st.integers(4, 80))
def test_slot_rounding_bound(chain, frac, slots):
    """Theorem 8.1: exact(M) <= slots(M, S) <= exact(M - loss) with loss the sum of the
    L + 4 largest rounding excesses, and loss < (L + 4) M / S."""
    lo, hi = chain.memory_lower_bound(), chain.store_all_memory()
    budget = lo + int(frac * (hi - lo))
    exact = solvers.solve(chain, budget, "dp")
    slot = solvers.solve(chain, budget, "dp", slots=slots)
    L = chain.length
    sizes = chain.x_size + chain.tape_size + chain.fwd_overhead + chain.bwd_overhead
    excess = sorted(((-(-v * slots // budget)) * budget / slots - v for v in sizes),
                    reverse=True)
    loss = sum(excess[:L + 4])
    assert loss < (L + 4) * budget / slots + 1e-9
    guaranteed = math.floor(budget - loss)
    assert slot.info["guaranteed_budget"] == max(0, guaranteed)
    if slot.schedule is not None:
        assert simulate(chain, slot.schedule, budget).makespan == pytest.approx(slot.makespan)
        assert exact.schedule is not None and slot.makespan >= exact.makespan - 1e-9
    if guaranteed >= 0:
        below = solvers.solve(chain, guaranteed, "dp")
        if below.schedule is not None:
            assert slot.schedule is not None, "slot DP infeasible where the bound promises"
            assert slot.makespan <= below.makespan + 1e-9


@pytest.mark.parametrize("k", range(1, 31))
def test_persistence_gap_witness(k):
    """Lemma 6.3: the witness is valid under 22 bytes and runs F_0 exactly k + 1 times."""
    from remat_theory.analysis.hardness import persistence_gap_chain, persistence_gap_witness

    chain, budget = persistence_gap_chain(k)
    sched = persistence_gap_witness(k)
    sim = simulate(chain, sched, budget)
    assert sim.makespan == k + 1
    assert sum(1 for o in sched if o.index == 0 and o.kind in FORWARD_KINDS) == k + 1


@pytest.mark.parametrize("k", range(1, 7))
def test_persistence_gap_family(k):
    """Theorem 6.1: DP = 2k + 1, DP_weak = k + 1 = the Lemma 6.2 lower bound; for k <= 2
    exhaustive search confirms OPT = k + 1."""
    from remat_theory.analysis.hardness import persistence_gap_chain

    chain, budget = persistence_gap_chain(k)
    dp = solvers.solve(chain, budget, "dp")
    weak = solvers.solve(chain, budget, "dp-weak")
    assert dp.status == "optimal" and dp.makespan == 2 * k + 1
    assert weak.makespan == k + 1
    if k <= 2:
        assert solvers.solve(chain, budget, "exhaustive").makespan == k + 1


def test_persistence_gap_lemma_6_4_on_the_dp_schedule():
    """Lemma 6.4's structure on the DP's schedule: F_0 runs between B_a and B_m of every
    block (a = 4j - 1, m = 4j - 2), besides the k + 1 runs every schedule needs."""
    from remat_theory.analysis.hardness import persistence_gap_chain

    k = 3
    chain, budget = persistence_gap_chain(k)
    ops = list(solvers.solve(chain, budget, "dp").schedule)
    pos = {(o.kind, o.index): n for n, o in enumerate(ops) if o.kind == B}
    f0 = [n for n, o in enumerate(ops) if o.index == 0 and o.kind in FORWARD_KINDS]
    for j in range(1, k + 1):
        a, m = 4 * j - 1, 4 * j - 2
        assert any(pos[(B, a)] < n < pos[(B, m)] for n in f0)
        assert any(pos[(B, m)] < n < pos[(B, m - 1)] for n in f0)
