"""O.14 (proofs/offload.md): the length bound that makes ``ilp-offload`` exact over ALL
schedules of the two-stream model, and the certificate logic built on it.

The lemma is checked against the referee (random valid schedules: every one is no longer
than the bound at its own makespan, and each stream's times add up within it), the solver
against the exact search ``exhaustive-offload`` (its proven answers are the optimum over
all schedules), and the certificate both ways: an answer whose N reaches the bound of its
value says ``all+offload``, one whose N does not says ``all+offload<=N`` and why.
"""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_theory import Chain, simulate
from remat_theory.model.errors import SolverLimitError
from remat_theory.model.offload import OffloadState, step, value_size
from remat_theory.model.schedule import Op, Schedule
from solvers import registry
from solvers.offload.ilp_bounds import length_bound
from solvers.offload.exhaustive import min_feasible_budget


def _random_chain(rng: random.Random, L: int, *, zero_sizes: bool = False) -> Chain:
    """Positive forward times; backward and loss times may be 0; with ``zero_sizes`` some
    activations and tape parts of 0 bytes (copies of no time)."""
    lo = 0 if zero_sizes else 1
    x = [rng.randint(1, 6)] + [rng.randint(lo, 6) for _ in range(L)]
    tape = [x[i + 1] + rng.randint(lo, 5) for i in range(L)]
    fwd = [rng.randint(1, 3) for _ in range(L)]
    c = Chain(fwd_time=fwd, bwd_time=[rng.randint(0, 3) for _ in range(L + 1)], x_size=x,
              tape_size=tape, fall_time=[f + rng.randint(0, 1) for f in fwd])
    return c.replace(bandwidth=rng.choice([1.0, 2.5, 4.0, 8.0]))


def _walk(chain: Chain, rng: random.Random, max_ops: int = 80) -> Schedule | None:
    """A random valid schedule (a walk over the ops the referee accepts, transfers weighted
    up so that values move back and forth), or None when the walk did not end."""
    L = chain.length
    tokens = [f"{k}{i}" for k in ("Fn", "Fck", "Fall", "B") for i in range(L)] + ["Loss"]
    tokens += [f"{k}{i}" for k in ("Offx", "Prex", "Offt", "Pret") for i in range(1, L + 1)]
    ops = [Op.parse(t) for t in tokens]
    state, out = OffloadState.initial(chain), []
    while not state.is_final() and len(out) < max_ops:
        valid = [(op, r[0]) for op in ops if not isinstance(r := step(chain, state, op), str)]
        weights = [4 if op.kind in ("B", "Loss") else 3 if op.is_transfer else 1
                   for op, _ in valid]
        op, state = rng.choices(valid, weights)[0]
        out.append(op)
    return Schedule(out) if state.is_final() else None


def test_every_valid_schedule_fits_the_length_bound():
    """O.14's lemma on 200 random valid schedules (1-3 stages, zero-time backwards, some
    with zero-size values): each stream's times add up to at most the makespan, a value
    moves at most 3 times between two compute ops, and the length is at most
    ``length_bound`` at the schedule's own makespan."""
    rng = random.Random(14)
    seen, most_moves = 0, 0
    for k in range(200):
        chain = _random_chain(rng, rng.randint(1, 3), zero_sizes=k % 2 == 1)
        s = _walk(chain, rng)
        if s is None:
            continue
        seen += 1
        sim = simulate(chain, s)
        comp = sum(p.time for p, op in zip(sim.profile, s) if not op.is_transfer)
        copies = sum(value_size(chain, op.target, op.index) / chain.bandwidth
                     for op in s if op.is_transfer)
        assert comp <= sim.makespan * (1 + 1e-12) and copies <= sim.makespan * (1 + 1e-12)
        # every backward once, every stage's Fall at least once (O.11 d uses it)
        assert sim.makespan >= chain.ideal_makespan() * (1 - 1e-12)
        moves: dict = {}
        for op in s:
            if op.is_transfer:
                key = (op.target, op.index)
                moves[key] = moves.get(key, 0) + 1
                most_moves = max(most_moves, moves[key])
            else:
                moves = {}
        assert most_moves <= 3
        # O.14 holds for every schedule (the walks are rarely in O.20's normal form)
        assert len(s) <= length_bound(chain, sim.makespan, normal_form=False), (chain, s)
    assert seen >= 100 and most_moves == 3  # the walks reach the Pre-Off-Pre case


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(1, 3))
def test_dp_offload_is_optimal_from_the_store_all_budget_up(seed, L):
    """O.11 (d): at store-all's peak the class DP reaches the ideal makespan, which no
    schedule beats (the lemma above; exhaustive-offload agrees up to 2 stages)."""
    chain = _random_chain(random.Random(seed), L, zero_sizes=seed % 2 == 0)
    budget = chain.store_all_memory()
    dp = registry.solve(chain, budget, "dp-offload")
    assert dp.makespan == pytest.approx(chain.ideal_makespan(), rel=1e-12)
    if L <= 2:
        ex = registry.solve(chain, budget, "exhaustive-offload")
        assert ex.makespan == pytest.approx(dp.makespan, rel=1e-12)


def test_no_length_bound_when_a_forward_takes_no_time():
    c = Chain(fwd_time=[0, 1], bwd_time=[1, 1, 0], x_size=[2, 2, 2], tape_size=[3, 3],
              bandwidth=2.0)
    assert length_bound(c, 10.0) is None
    pos = Chain(fwd_time=[1, 1], bwd_time=[1, 1, 0], x_size=[2, 2, 2], tape_size=[3, 3],
                bandwidth=2.0)
    assert length_bound(pos, math.inf) is None and length_bound(pos, 10.0) is not None
    # a zero-time copy (x_1 of no bytes) is bounded by validity, not by time
    z = Chain(fwd_time=[1, 1], bwd_time=[1, 1, 0], x_size=[2, 0, 2], tape_size=[3, 3],
              bandwidth=2.0)
    assert length_bound(z, 10.0) is not None


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 10 ** 6), st.floats(0, 1), st.sampled_from([1.0, 2.0, 3.0]))
def test_proven_ilp_offload_is_the_optimum_over_all_schedules(seed, where, ratio):
    """``proven=True`` on one-stage chains: the answer says ``all+offload`` and equals
    exhaustive-offload's optimum (O.5), at budgets from the smallest feasible up.  The
    channel copies the smallest value in ``ratio`` mean forwards, so that the length bound
    stays within the default guard (tiny copies make it long: the guard's refusal is
    tested below)."""
    chain = _random_chain(random.Random(seed), 1)
    small = min(chain.x_size[1:] + chain.tape_held)
    chain = chain.replace(bandwidth=small / (ratio * sum(chain.fwd_time) / chain.length))
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    budget = lo + int(where * (hi - lo))
    ref = registry.solve(chain, budget, "exhaustive-offload")
    sol = registry.solve(chain, budget, "ilp-offload", proven=True)
    assert sol.status == ref.status == "optimal"
    assert sol.optimal_for == ref.optimal_for == "all+offload"
    assert sol.makespan == pytest.approx(ref.makespan, rel=1e-9)
    assert sol.info["length_bound"] <= sol.info["max_ops"]


def _two_stage_slow_channel() -> Chain:
    # copies of 2-3 s against forwards of 1 s: the bound of the optimum is small
    return Chain(fwd_time=[1, 1], bwd_time=[1, 1, 0], x_size=[2, 4, 4], tape_size=[6, 6],
                 bandwidth=2.0)


def test_proven_on_two_stages_where_copies_are_slow():
    c = _two_stage_slow_channel()
    budget = (min_feasible_budget(c) + c.store_all_memory()) // 2
    ref = registry.solve(c, budget, "exhaustive-offload")
    sol = registry.solve(c, budget, "ilp-offload", proven=True)
    assert sol.optimal_for == "all+offload" and "optimal over all schedules" in sol.message
    assert sol.makespan == pytest.approx(ref.makespan, rel=1e-9)


def test_the_certificate_says_what_n_covers():
    """N below the bound of the value found: ``all+offload<=N``, "not proven over longer
    schedules" and the N that would prove it; that N (max_ops) then proves it, with the
    same value (exhaustive-offload's)."""
    c = _random_chain(random.Random(3), 1)
    budget = min_feasible_budget(c)
    ref = registry.solve(c, budget, "exhaustive-offload")
    n = len(ref.schedule)
    need = length_bound(c, ref.makespan)
    assert need > n  # the case this test is about
    short = registry.solve(c, budget, "ilp-offload", max_ops=n)
    assert short.status == "optimal" and short.optimal_for == f"all+offload<={n}"
    assert "not proven over longer schedules" in short.message
    assert f"max_ops >= {short.info['length_bound']}" in short.message
    full = registry.solve(c, budget, "ilp-offload", max_ops=short.info["length_bound"])
    assert full.optimal_for == "all+offload"
    assert full.makespan == pytest.approx(ref.makespan, rel=1e-9)


def test_zero_time_forwards_are_never_called_proven():
    c = Chain(fwd_time=[0], bwd_time=[1, 0], x_size=[2, 3], tape_size=[5], bandwidth=2.0)
    budget = c.store_all_memory()
    sol = registry.solve(c, budget, "ilp-offload", max_ops=8)
    assert sol.optimal_for == "all+offload<=8" and "takes no time" in sol.message
    with pytest.raises(SolverLimitError, match="positive time for every forward"):
        registry.solve(c, budget, "ilp-offload", proven=True)


def test_proven_refuses_past_its_guard_naming_the_bound():
    c = _random_chain(random.Random(1), 2)
    budget = c.store_all_memory()
    with pytest.raises(SolverLimitError, match="max_proven_ops"):
        registry.solve(c, budget, "ilp-offload", proven=True, max_proven_ops=3)


def test_below_the_smallest_budget_it_is_infeasible_over_all_schedules():
    c = _two_stage_slow_channel()
    lo = min_feasible_budget(c)
    sol = registry.solve(c, lo - 1, "ilp-offload")
    assert sol.status == "infeasible" and sol.optimal_for == "all+offload"
    assert sol.min_budget == lo and str(lo) in sol.message


def test_free_copies_never_make_the_milp_offload_a_leaving_value_again():
    """A tape of 0 bytes copies in no time, so the MILP is indifferent to moving it back
    and forth; it must still keep the referee's rule that a value whose device copy is
    leaving is not offloaded again before a compute op (found by the proven-mode test:
    ``Fall0 Offt1 Pret1 Offt1``, refused by the referee).  Its answers replay and are the
    exact search's, up to a length that certifies them."""
    c = Chain(fwd_time=[3], bwd_time=[2, 1], x_size=[6, 0], tape_size=[0], bandwidth=2.5)
    budget = min_feasible_budget(c)
    ref = registry.solve(c, budget, "exhaustive-offload")
    for n in (8, 10, length_bound(c, ref.makespan)):
        sol = registry.solve(c, budget, "ilp-offload", max_ops=n)  # replayed by the registry
        assert sol.makespan == pytest.approx(ref.makespan, rel=1e-9)
    assert sol.optimal_for == "all+offload"


def test_the_fewest_ops_incumbent():
    """Where neither dp-offload's class nor the baselines fit, the incumbent that bounds
    ``proven``'s length is a fewest-ops schedule found over placements: valid within the
    budget (replayed), and no schedule of fewer ops fits (exhaustive-offload -o max_ops);
    below the smallest feasible budget there is none."""
    from solvers.offload.ilp import fewest_ops_schedule as _fewest_ops_schedule
    rng = random.Random(31)
    for k in range(6):
        chain = _random_chain(rng, 1 + k % 2)
        chain = chain.replace(output_saved=[rng.random() < 0.5 for _ in range(chain.length)])
        budget = min_feasible_budget(chain)
        schedule, makespan = _fewest_ops_schedule(chain, budget)
        sim = simulate(chain, schedule, budget)
        assert sim.makespan == makespan and sim.peak_memory <= budget
        fewer = registry.solve(chain, budget, "exhaustive-offload", max_ops=len(schedule) - 1)
        assert fewer.status == "infeasible"
        assert _fewest_ops_schedule(chain, budget - 1) is None
