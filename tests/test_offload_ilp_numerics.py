"""ilp-offload at any bandwidth and any size (issue 41): answers or refuses with a reason
from bandwidth 1e-300 to 1e300 bytes/s and sizes of 1 byte to 1e12 bytes, never an
internal error, and every optimum it claims is exhaustive-offload's (the exact search,
which works in exact integers and the referee's own float times)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_theory import Chain
from remat_theory.model.errors import InternalError, SolverError
from solvers import registry
from solvers.offload.exhaustive import min_feasible_budget

REL = 1e-9  # the registry's makespan tolerance


@st.composite
def wide_chains(draw, max_stages: int):
    L = draw(st.integers(1, max_stages))
    size = st.one_of(st.integers(1, 16), st.integers(1, 10 ** 12))
    x = [draw(size) for _ in range(L + 1)]
    tape = [x[i + 1] + draw(st.one_of(st.just(0), size)) for i in range(L)]
    times = st.integers(1, 5)
    exponent = draw(st.integers(-300, 300))
    return Chain(name="wide", fwd_time=[draw(times) for _ in range(L)],
                 bwd_time=[draw(times) for _ in range(L + 1)], x_size=x, tape_size=tape,
                 output_saved=[draw(st.booleans()) for _ in range(L)],
                 bandwidth=float(draw(st.integers(1, 9))) * 10.0 ** exponent)


def _check(chain: Chain, where: float, proven: bool) -> None:
    lo, hi = min_feasible_budget(chain), chain.store_all_memory()
    budget = lo + int(where * (hi - lo))
    try:
        sol = registry.solve(chain, budget, "ilp-offload", proven=proven, time_limit=20)
    except InternalError:
        raise
    except SolverError as e:  # a refusal names its reason
        assert str(e)
        return
    ref = registry.solve(chain, budget, "exhaustive-offload")
    assert ref.status == "optimal"
    assert sol.schedule is not None  # a schedule fits (budget >= the smallest feasible)
    assert sol.makespan >= ref.makespan * (1 - REL)
    if sol.bound is not None and sol.optimal_for == "all+offload":
        assert sol.bound <= ref.makespan * (1 + REL)
    if sol.status == "optimal":
        if sol.optimal_for == "all+offload":
            assert sol.makespan == pytest.approx(ref.makespan, rel=REL)
        else:  # over the schedules of at most N ops: never better than the optimum
            assert sol.optimal_for.startswith("all+offload<=")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_chains(1), st.floats(0, 1), st.booleans())
def test_ilp_offload_answers_at_any_bandwidth_and_size(chain, where, proven):
    _check(chain, where, proven)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_chains(2), st.floats(0, 1), st.booleans())
def test_ilp_offload_answers_at_any_bandwidth_and_size_two_stages(chain, where, proven):
    _check(chain, where, proven)


@pytest.mark.parametrize("bandwidth,proven", [
    (1e12, False),
    *(pytest.param(b, True, marks=pytest.mark.slow) for b in (1e-300, 1e9, 1e12, 1e300))])
def test_the_referees_internal_error_is_an_answer(bandwidth, proven):
    """Issue 41: a 2-stage chain of a few bytes at 1e9 bytes/s or more gave "internal error
    (HighsStatusError: Error adding constraint)"; at 1e-300 the big-M overflowed."""
    chain = Chain(name="bytes", fwd_time=[1, 2], bwd_time=[2, 2, 1], x_size=[2, 4, 5],
                  tape_size=[6, 5], output_saved=[True, False], bandwidth=bandwidth)
    budget = min_feasible_budget(chain) + 1
    sol = registry.solve(chain, budget, "ilp-offload", proven=proven)
    ref = registry.solve(chain, budget, "exhaustive-offload")
    assert sol.status == "optimal"
    assert sol.optimal_for == "all+offload" if proven else sol.optimal_for.startswith("all")
    assert sol.makespan == pytest.approx(ref.makespan, rel=REL)
