"""The moment relaxation with its objective capped below a makespan
(``relaxation.capped_bound``, ``prove -o cap=true``): infeasible exactly when no relaxation
point is faster, so on chains where exhaustive search says the weak DP is optimal it proves
the DP's makespan, and capped above the optimum it finds a point instead of a proof."""
import pytest

import solvers
from remat_theory.analysis.families import make
from remat_theory.model.errors import RematError
from solvers.exhaustive import search
from solvers.ilp import relaxation


def _instances():
    for seed in range(4):
        chain = make("random", 5, seed)
        lo = solvers.solve(chain, 0, "dp-weak").min_budget
        for budget in (lo, (lo + chain.store_all_memory()) // 2):
            yield chain, budget


@pytest.mark.parametrize("k", range(8))
def test_capped_at_the_optimum_it_proves_it_and_above_it_finds_a_point(k):
    chain, budget = list(_instances())[k]
    opt = search(chain, budget)[1]  # exhaustive: the optimum over all schedules
    plain = relaxation.lower_bound(chain, budget, time_limit=60)
    assert plain.proven_optimal
    at = relaxation.capped_bound(chain, budget, opt, time_limit=60)
    if plain.value >= opt - 1e-9:  # the relaxation's optimum is the optimum
        assert at.proven_optimal and at.value == opt
    else:  # a relaxation point below the optimum: the cap finds one, proves nothing
        assert not at.proven_optimal and "cannot prove" in at.status_text
    worse = solvers.solve(chain, budget, "recompute-all").makespan
    if worse > plain.value + 1e-9:
        above = relaxation.capped_bound(chain, budget, worse, time_limit=60)
        assert not above.proven_optimal
        assert "cannot prove" in above.status_text
        assert above.value is None or above.value <= plain.value + 1e-6


def test_prove_with_the_cap_answers_the_exhaustive_optimum():
    chain = make("random", 6, 1)
    budget = solvers.solve(chain, 0, "dp-weak").min_budget + 2
    opt = search(chain, budget)[1]
    sol = solvers.solve(chain, budget, "prove", cap=True, time_limit=120)
    assert sol.status == "optimal" and sol.makespan == pytest.approx(opt)
    if sol.info["certificate"] == "moment relaxation":
        assert sol.info["relaxation"]["capped"] is True


def test_the_cap_needs_integer_times():
    chain = make("random", 4, 0)
    d = chain.to_dict()
    d["fwd_time"] = [t + 0.5 for t in d["fwd_time"]]
    frac = type(chain).from_dict(d)
    assert relaxation.time_granularity(frac) == 0.0
    with pytest.raises(RematError, match="not all integers"):
        relaxation.capped_bound(frac, frac.store_all_memory(), 100.0)
    # prove ignores the option there and still answers exactly
    budget = solvers.solve(frac, 0, "dp-weak").min_budget + 2
    sol = solvers.solve(frac, budget, "prove", cap=True, time_limit=120)
    assert sol.status == "optimal"
    assert sol.makespan == pytest.approx(search(frac, budget)[1])
    assert sol.info.get("relaxation", {}).get("capped") in (None, False)
