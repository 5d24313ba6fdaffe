"""The smallest feasible budget with the copy channel (proofs/offload.md O.3, O.23), in every
message and in ``--json`` (issue 41): the referee's chain, and random chains against a brute
force over every interleaving of the independent interpreter (tests/_offload_reference.py)."""
from __future__ import annotations

import heapq
import io
import itertools
import json
import random
from contextlib import redirect_stderr, redirect_stdout

import pytest

import solvers
from remat_theory import Chain, simulate
from remat_theory.cli.main import main
from remat_theory.model.errors import ChainError, InfeasibleBudgetError
from solvers import registry
from solvers.exhaustive import min_feasible_budget as canonical_min_budget
from solvers.feasibility import smallest_feasible_budget
from solvers.offload.exhaustive import min_feasible_budget

from _offload_reference import TwoStreamReference

#: The referee's chain of issue 41: the message said 16 (the minimum without the channel).
REFEREE = {"format": "remat-chain/1", "name": "referee-41", "fwd_time": [3, 2],
           "bwd_time": [2, 2, 0], "x_size": [2, 4, 5], "tape_size": [6, 5],
           "output_saved": [True, False], "bandwidth": 2}
REFEREE_SCHEDULE = "Fck0 Fall1 Offx1 Loss Fck0 B1 Fall0 B0"


def brute_force_min_budget(chain: Chain) -> int:
    """The least peak of a valid schedule, by a bottleneck search over the independent
    interpreter's states with every token at every step (no normal form, no eager
    transfers): memory and validity depend on where the values are, not on times (O.3), so
    states are keyed by that alone."""
    L = chain.length
    tokens = [f"{k}{i}" for i in range(L) for k in ("Fn", "Fck", "Fall")] + ["Loss"]
    tokens += [f"B{i}" for i in range(L)]
    if chain.bandwidth is not None:
        tokens += [f"{k}{v}{i}" for k in ("Off", "Pre") for v in "xt" for i in range(1, L + 1)]

    def key(s):
        return (frozenset(s.dev), frozenset(s.host), tuple(sorted(n for n, _ in s.leaving)),
                s.bwd_next)

    start = TwoStreamReference(chain)
    counter = itertools.count()
    heap = [(chain.x_size[0], next(counter), start)]
    best = {key(start): chain.x_size[0]}
    while heap:
        b, _, s = heapq.heappop(heap)
        if best[key(s)] < b:
            continue
        if "d0" in s.dev:
            return b
        for tok in tokens:
            n = s.copy()
            if not n.apply(tok):
                continue
            nb = max(b, n.ops[-1][4])
            k = key(n)
            if nb < best.get(k, float("inf")):
                best[k] = nb
                heapq.heappush(heap, (nb, next(counter), n))
    raise AssertionError("no schedule at all")


def random_chain(seed: int, L: int) -> Chain:
    """Small sizes, some outputs unsaved, forward overheads that sometimes make a plain
    input dear (then the smallest budget is above the memory lower bound), bandwidth 0
    sometimes (no value of positive size can move)."""
    r = random.Random(seed)
    x = [r.randint(0, 6) for _ in range(L + 1)]
    return Chain(name=f"r{seed}", fwd_time=[r.randint(1, 4) for _ in range(L)],
                 bwd_time=[r.randint(0, 4) for _ in range(L + 1)], x_size=x,
                 tape_size=[x[i + 1] + r.randint(0, 5) for i in range(L)],
                 fwd_overhead=[r.choice([0, r.randint(0, 12)]) for _ in range(L)],
                 bwd_overhead=[r.choice([0, r.randint(0, 4)]) for _ in range(L + 1)],
                 fall_overhead=[r.choice([0, r.randint(0, 4)]) for _ in range(L)],
                 output_saved=[r.random() < 0.6 for _ in range(L)],
                 bandwidth=r.choice([0, 0.5, 2.0, 8.0]))


def _check(chain: Chain) -> None:
    m = min_feasible_budget(chain)
    assert m == brute_force_min_budget(chain), chain.to_dict()
    # feasible there: the exact search returns a schedule the independent interpreter
    # replays within it
    sol = registry.solve(chain, m, "exhaustive-offload")
    assert sol.status == "optimal"
    ref = TwoStreamReference(chain)
    assert all(ref.apply(t) for t in sol.schedule.tokens())
    assert ref.result()[1] <= m
    # infeasible below: the check before a solve says so, with this number
    if m > chain.x_size[0]:
        with pytest.raises(InfeasibleBudgetError) as e:
            solvers.check_feasible(chain, m - 1)
        assert e.value.smallest_feasible == m and f"is {m}" in str(e.value)
    solvers.check_feasible(chain, m)


def test_the_referees_chain_gets_the_smallest_budget_with_the_channel():
    """Issue 41: "smallest feasible 16", yet the referee's schedule runs at 15."""
    chain = Chain.from_dict(REFEREE)
    assert canonical_min_budget(chain.replace(bandwidth=None)) == 16
    sim = simulate(chain, REFEREE_SCHEDULE, 15)
    assert sim.peak_memory == 15
    assert smallest_feasible_budget(chain) == (15, "exhaustive-offload")
    _check(chain)
    out, err = io.StringIO(), io.StringIO()
    path = None
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(REFEREE, f)
        path = f.name
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["solve", path, "--budget", "14", "--solver", "exhaustive-offload",
                     "--json"])
    assert code == 2
    obj = json.loads(out.getvalue())
    assert obj["smallest_feasible"] == 15 and obj["lower_bound"] == 15
    assert "smallest feasible budget is 15" in obj["message"]
    assert "smallest feasible budget is 15" in err.getvalue()


@pytest.mark.parametrize("seed", range(10))
def test_the_smallest_budget_is_the_brute_force_one_on_two_stages(seed):
    _check(random_chain(seed, 1 + seed % 2))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(60))
def test_the_smallest_budget_is_the_brute_force_one_on_three_stages(seed):
    _check(random_chain(1000 + seed, 2 + seed % 2))


def test_a_null_bandwidth_is_refused():
    with pytest.raises(ChainError, match="bandwidth = null"):
        Chain.from_dict(dict(REFEREE, bandwidth=None))


def test_beyond_the_exact_range_a_budget_below_the_lower_bound_names_a_fitting_one():
    """On a chain too long for the exact search, the refusal gives the memory lower bound
    and dp-offload's class minimum, at which the class DP finds a schedule."""
    chain = random_chain(7, 7).replace(bandwidth=1.0)
    lb = chain.memory_lower_bound()
    with pytest.raises(InfeasibleBudgetError) as e:
        solvers.check_feasible(chain, lb - 1)
    assert e.value.source == "dp-offload" and e.value.lower_bound == lb
    sol = registry.solve(chain, e.value.smallest_feasible, "dp-offload")
    assert sol.schedule is not None
    assert registry.solve(chain, e.value.smallest_feasible - 1, "dp-offload").schedule is None
