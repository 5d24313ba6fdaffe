"""The public hypothesis strategies: arguments validated, outputs in range."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from remat_theory import Chain, simulate
from remat_theory.model.fields import VARIATIONS
from remat_theory.strategies import budgets, chains, chains_and_budgets, valid_schedules


@pytest.mark.parametrize("kwargs, name", [
    (dict(min_stages=0), "min_stages"), (dict(min_stages=3, max_stages=2), "max_stages"),
    (dict(max_size=0), "max_size"), (dict(family="vgg"), "family"), (dict(overheads="yes"), "overheads"),
    (dict(variations=("no-such",)), "no-such"), (dict(variations={"fall-costs": 1}), "fall-costs"),
    (dict(variations="fall-costs"), "variations"), (dict(fall_costs="yes"), "fall_costs"),
])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(InvalidArgument, match=name):
        chains(**kwargs).example()


def test_budgets_validation():
    with pytest.raises(InvalidArgument, match="is not a Chain"):
        budgets("chain").example()
    c = Chain.homogeneous(3)
    with pytest.raises(InvalidArgument, match="high = 1 is below low = 5"):
        budgets(c, low=5, high=1).example()


@settings(max_examples=50)
@given(chains(2, 4, overheads=False, max_size=3, max_time=2))
def test_chain_ranges(chain):
    assert 2 <= chain.length <= 4 and set(chain.fwd_overhead) == {0}
    assert all(1 <= x <= 3 for x in chain.x_size) and all(0 <= t <= 2 for t in chain.fwd_time)


@settings(max_examples=30)
@given(st.data(), chains(1, 6, family="resnet"))
def test_family_strategy_and_budgets(data, chain):
    assert chain.name.startswith("resnet")
    b = data.draw(budgets(chain, feasible_only=True))
    assert chain.memory_lower_bound() <= b <= chain.store_all_memory() + 2


@settings(max_examples=30)
@given(chains_and_budgets(1, 4))
def test_chains_and_budgets(cb):
    chain, budget = cb
    assert isinstance(chain, Chain) and budget >= 0


@settings(max_examples=30)
@given(st.data(), chains(1, 4))
def test_valid_schedules_are_valid(data, chain):
    s = data.draw(valid_schedules(chain, max_random_steps=50))
    assert simulate(chain, s).makespan >= chain.ideal_makespan() - 1e-9


@pytest.mark.parametrize("family", [None, "transformer"])
@pytest.mark.parametrize("name", list(VARIATIONS))
def test_each_variation_draws_its_fields_and_only_them(name, family):
    """``variations=[name]``: every chain uses that variation (a family chain by the
    variation's own draw, an independent one by kind), and no other."""
    seen = []

    @settings(max_examples=25, database=None)
    @given(chains(1, 4, family=family, variations=[name]))
    def check(chain):
        assert set(chain.fields_used()) <= set(VARIATIONS[name].fields)
        seen.append(chain.uses(name))

    check()
    # an independent chain may draw the defaults by chance, never all the time
    assert all(seen) if family else any(seen)


def test_variation_none_draws_chains_with_and_without():
    seen = set()

    @settings(max_examples=60, database=None)
    @given(chains(1, 4, variations={"unsaved-outputs": None}))
    def check(chain):
        seen.add(chain.uses("unsaved-outputs"))

    check()
    assert seen == {True, False}
