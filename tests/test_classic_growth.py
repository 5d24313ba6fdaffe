"""proofs/classic_model.md, C.15: DP_weak/OPT is unbounded on the classic model.

The family ``G_L`` (remat_theory/analysis/classic_growth.py) against its oracles: the
simulator (the witness, one run of stage 0, for L up to 40), exhaustive search (OPT = 1, and
the weak class searched by exhaustive search, independently of ``dp-weak``), ``dp-weak``
(exactly L/2 for L up to 40; the bound of Theorem C.15 is L/2), and the facts the proof
reads off the chain.  The 5-stage certificate (ratio 4) is re-proved by tests/test_proofs.py
and tests/test_weak_gap.py; here its chain is checked against the ladder's inequalities."""
from __future__ import annotations

from pathlib import Path

import pytest

import solvers
from remat_theory import simulate
from remat_theory.analysis import classic_growth as CG
from remat_theory.analysis.certificates import load
from remat_theory.model.persistence import is_weakly_persistent
from remat_theory.model.schedule import Schedule

CERTS = Path(__file__).resolve().parent.parent / "proofs" / "certificates"


def _stage0_runs(schedule) -> int:
    tokens = schedule.tokens() if isinstance(schedule, Schedule) else list(schedule)
    return sum(t in ("Fn0", "Fck0", "Fall0") for t in tokens)


@pytest.mark.parametrize("g", range(2, 21))
def test_witness_runs_stage_zero_once(g):
    """OPT(G_L) <= 1 for L = 4..40: the witness fits 17 bytes and runs stage 0 once; it is
    not weakly persistent (it releases each narrow stage's plain input off the frontier)."""
    chain, M = CG.growth_chain(g)
    sched = CG.growth_witness(g)
    sim = simulate(chain, sched, M)
    assert sim.makespan == 1.0 and sim.peak_memory == M == 17
    assert _stage0_runs(sched) == 1
    assert not is_weakly_persistent(chain, sched)


def test_the_chain_is_classic_and_meets_the_proofs_inequalities():
    """What the proof of Theorem C.15 reads off G_L: the classic model; only stage 0 costs
    time; every value but x_0 has at least 1 byte; for every gadget m, (b) recording the
    narrow stage beside the wide tape and any source of x_(2m) exceeds 17, (a) recording the
    wide stage beside its 4-byte output (or gradient) and a 1-byte source of x_(2m) is
    exactly 17."""
    for g in range(2, 30):
        c, M = CG.growth_chain(g)
        L = 2 * g
        assert not c.has_fall_costs and not c.has_unsaved_outputs and c.length == L
        assert list(c.fwd_time) == [1.0] + [0.0] * (L - 1) and not any(c.bwd_time)
        assert not any(c.bwd_overhead)
        assert c.x_size[0] == 0 and min(c.x_size[1:]) >= 1 and min(c.tape_size) >= 1
        for m in range(1, g):
            a = 2 * m
            src = min(c.x_size[a], c.tape_size[a - 1])  # the cheapest source of x_a
            assert src == 1
            # (b): t_(a+1) held, a source of x_a, Fall_(a+1) adds t_(a+2) and its transient
            assert c.tape_size[a] + src + c.tape_size[a + 1] + c.fwd_overhead[a + 1] > M
            # (a): x_(a+1) or d_(a+1), a source of x_a, Fall_a adds t_(a+1) and its transient
            assert c.x_size[a + 1] + src + c.tape_size[a] + c.fwd_overhead[a] == M


@pytest.mark.parametrize("g", range(2, 21))
def test_dp_weak_is_half_the_stages(g):
    """DP_weak(G_L) = L/2 for L = 4..40 (computed; Theorem C.15 proves >= L/2); its schedule
    runs stage 0 exactly L/2 times, and the persistent DP is no better."""
    chain, M = CG.growth_chain(g)
    sol = solvers.solve(chain, M, "dp-weak")
    assert sol.makespan == g == CG.growth_lower_bound(g)
    assert _stage0_runs(sol.schedule) == g
    assert is_weakly_persistent(chain, sol.schedule)
    if g <= 6:
        assert solvers.solve(chain, M, "dp").makespan >= g


@pytest.mark.parametrize("g", [2, 3, 4])
def test_exhaustive_search_agrees(g):
    """OPT(G_L) = 1 by exhaustive search, and the weak class's optimum, searched by exhaustive
    search restricted to the class (an oracle that does not use dp-weak), is L/2."""
    chain, M = CG.growth_chain(g)
    assert solvers.solve(chain, M, "exhaustive").makespan == 1.0
    assert solvers.solve(chain, M, "exhaustive", schedule_class="weak").makespan == g


@pytest.mark.slow
@pytest.mark.parametrize("g", [5, 6])
def test_exhaustive_search_agrees_longer(g):
    chain, M = CG.growth_chain(g)
    assert solvers.solve(chain, M, "exhaustive", max_stages=12).makespan == 1.0
    assert solvers.solve(chain, M, "exhaustive", schedule_class="weak",
                         max_stages=12).makespan == g


def test_the_gadget_moment_on_the_class_schedule():
    """The lemma of C.15 on dp-weak's schedule: when Fall_(2m) runs, the values held are x_0,
    the plain x_(2m) (1 byte) and the 4 bytes of x_(2m+1) or d_(2m+1): 5 bytes, nothing below
    the gadget; after B_(2m) only d_(2m) (1 byte) is held."""
    g = 6
    chain, M = CG.growth_chain(g)
    sol = solvers.solve(chain, M, "dp-weak")
    steps = simulate(chain, sol.schedule, M).profile
    tokens = sol.schedule.tokens()
    for m in range(1, g):
        i = tokens.index(f"Fall{2 * m}")
        held_before = steps[i - 1].memory_after
        assert held_before == 5
        j = tokens.index(f"B{2 * m}")
        assert steps[j].memory_after == 1


def test_growth_certificates():
    """G_8 (OPT by exhaustive search, replayed and re-proved by tests/test_proofs.py) and G_40
    (the witness; dp-weak computed again here, as test_proofs re-proves only dp at 40)."""
    c8 = load(CERTS / "classic_growth_L8.json")
    assert (c8.makespan("opt"), c8.makespan("dp-weak"), c8.makespan("witness")) == (1, 4, 1)
    c40 = load(CERTS / "classic_growth_L40.json")
    assert c40.chain.to_dict() == CG.growth_chain(20)[0].to_dict() and c40.budget == 17
    assert c40.makespan("witness") == 1
    assert solvers.solve(c40.chain, c40.budget, "dp-weak").makespan == c40.makespan("dp-weak") == 20
    assert c40.facts["ratio"] == 20


def test_five_and_six_stage_certificates_say_four():
    """The certificates of 5 and 6 stages record OPT 1 and dp-weak 4 (both re-solved by
    tests/test_proofs.py; the ratio recomputed by tests/test_weak_gap.py), on the classic
    model with only stage 0 costing time."""
    for name in ("classic_weak_gap_L5.json", "classic_weak_gap_L6.json"):
        cert = load(CERTS / name)
        c = cert.chain
        assert (cert.makespan("opt"), cert.makespan("dp-weak")) == (1, 4)
        assert not c.has_fall_costs and not c.has_unsaved_outputs
        assert list(c.fwd_time) == [1.0] + [0.0] * (c.length - 1) and not any(c.bwd_time)


def test_five_stage_certificate_meets_the_ladder_inequalities():
    """classic_weak_gap_L5.json (OPT 1, dp-weak 4): the inequalities of C.15's ladder lemma,
    read off its chain (x_1 the smallest value; the gadget 3-4; the ladder 0-2)."""
    cert = load(CERTS / "classic_weak_gap_L5.json")
    assert (cert.makespan("opt"), cert.makespan("dp-weak")) == (1, 4)
    c, M = cert.chain, cert.budget
    x, t, f = c.x_size, c.tape_size, c.fwd_overhead  # t[i] = |t_(i+1)|
    L, s = c.length, c.length - 2
    assert x[L] == 0 and t[L - 1] == 0 and list(c.fwd_time) == [1.0] + [0.0] * (L - 1)
    assert not c.has_fall_costs and not any(c.bwd_overhead)
    assert all(x[1] <= v for v in x[1:L]) and x[1] >= 1
    assert x[s] + t[s] + f[s + 1] + x[1] > M            # the gadget, narrow stage first
    assert x[s] + x[s + 1] + t[s] + f[s] + x[1] > M     # the gadget, wide stage last
    for j in range(2, s + 1):                           # the ladder: after B_j
        assert x[j] + x[j - 1] + t[j - 1] + f[j - 1] + x[1] > M
    assert x[2] + t[0] + t[1] + f[1] > M                # x_1 read from t_1 beside d_2
