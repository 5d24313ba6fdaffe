"""The table of chain fields (remat_theory/model/fields.py) is what every reader iterates over:
the chain's arguments and attributes, its JSON form, scaling, gcd, totals and the variations
that draw the optional fields all follow it."""
import dataclasses
import json

import pytest

from remat_theory import Chain
from remat_theory.analysis import families
from remat_theory.model import fields
from remat_theory.model.errors import ChainError

BASE = families.make("resnet", 4, 2)


def test_the_chain_is_declared_from_the_table():
    declared = [f.name for f in dataclasses.fields(Chain)]
    assert declared == ([f.name for f in fields.BASE] + ["name"]
                        + [f.name for f in fields.OPTIONAL])
    required = {f.name: list(getattr(BASE, f.name)) for f in fields.FIELDS if f.required}
    for f in fields.FIELDS:
        if f.scalar:  # one number (bandwidth): absent, its default
            assert getattr(BASE, f.name) == f.default and f.is_default(BASE)
            continue
        assert len(getattr(BASE, f.name)) == f.size(BASE.length)
        if f.required:
            with pytest.raises(ChainError, match=f"missing field '{f.name}'"):
                Chain.from_dict({"format": "remat-chain/1",
                                 **{k: v for k, v in required.items() if k != f.name}})
    # every other field takes its default
    assert Chain.from_dict({"format": "remat-chain/1", **required}) == BASE.replace(
        fwd_overhead=None, bwd_overhead=None, fall_overhead=None)


@pytest.mark.parametrize("name", list(fields.VARIATIONS))
def test_a_variation_draws_its_fields_and_json_writes_only_fields_off_their_default(name):
    v = fields.variation(name)
    chain = v.apply(BASE, 7)
    assert set(chain.fields_used()) <= set(v.fields) and chain.uses(name)
    assert chain.name == f"{BASE.name}-{v.suffix}" and chain == v.apply(BASE, 7)
    d = chain.to_dict()
    assert [k for k in d if k in fields.optional_names()] == list(chain.fields_used())
    assert Chain.from_json(json.dumps(d)) == chain
    # back to the defaults: the classic chain, and its classic file
    plain = chain.replace(**{f: None for f in v.fields})
    assert plain == BASE and plain.to_dict().keys() == BASE.to_dict().keys()
    assert not any(k in BASE.to_dict() for k in fields.optional_names())


def test_scaling_and_gcd_cover_every_size_field():
    chain = families.with_variations(BASE, list(fields.VARIATIONS), 3)
    chain = chain.replace(**{f.name: [v * 6 for v in getattr(chain, f.name)]
                             for f in fields.of_kind("size")})
    assert chain.size_gcd() % 6 == 0
    small = chain.scaled_sizes(6)
    for f in fields.of_kind("size"):
        assert [v * 6 for v in getattr(small, f.name)] == list(getattr(chain, f.name))
    # a rate (bytes per second) is divided too, so every copy time stays the same; it is no
    # size: neither in the gcd nor required to be divisible
    assert chain.bandwidth is not None and fields.of_kind("rate")
    for f in fields.of_kind("rate"):
        assert getattr(small, f.name) == pytest.approx(getattr(chain, f.name) / 6, rel=1e-15)
    assert chain.replace(bandwidth=7.5).size_gcd() == chain.size_gcd()
    odd = chain.replace(fall_overhead=[7] + list(chain.fall_overhead[1:]))
    with pytest.raises(ChainError, match=r"fall_overhead\[0\] = 7 is not divisible by 6"):
        odd.scaled_sizes(6)


def test_the_totals_name_the_field_and_the_formula_of_the_table():
    L = BASE.length
    with pytest.raises(ChainError, match=r"fall_time\[2\] = 1e\+17 makes the chain's total time "
                                         r"too large: \(sum\(fwd_time\) \+ sum\(fall_time\)\) \* L "
                                         r"\+ sum\(bwd_time\)"):
        BASE.replace(fall_time=[1e17] * L)
    # equal to its default, a field is counted through the one it defaults to
    # (weight 2L: 8e17 per entry, past 1e18 at the second)
    with pytest.raises(ChainError, match=r"^fwd_time\[1\] = 1e\+17"):
        BASE.replace(fwd_time=[1e17] * L, fall_time=None)
    with pytest.raises(ChainError,
                       match=r"fall_overhead\[0\] = 9.007e\+15 makes the chain.s total size"):
        BASE.replace(fall_overhead=[2 ** 53] * L)


def test_names_are_checked():
    with pytest.raises(ChainError, match="unknown variation 'nope' .known: fall-costs"):
        fields.parse_variations("fall-costs,nope")
    assert fields.parse_variations(" unsaved-outputs ,fall-costs,") == ("fall-costs",
                                                                         "unsaved-outputs")
    with pytest.raises(ChainError, match="unknown chain field 'nope'"):
        fields.field("nope")


def test_a_field_of_one_number_is_checked_and_written_by_the_table():
    """bandwidth (docs/model.md, "Offloading"): one number >= 0, absent by default; its
    errors name it, JSON writes it only when given, replace(bandwidth=None) removes it."""
    f = fields.field("bandwidth")
    assert f.scalar and f.optional and f.kind == "rate" and f.variation == "offload"
    for bad, match in ((-1, "^bandwidth = -1 is negative"), ("fast", "^bandwidth = 'fast' is "
                       "not a number"), (float("nan"), "^bandwidth is NaN"),
                       (float("inf"), "^bandwidth = inf is not finite"),
                       (True, "^bandwidth = True is not a number"),
                       ([1.0], r"^bandwidth = \[1.0\] is not a number")):
        with pytest.raises(ChainError, match=match):
            BASE.replace(bandwidth=bad)
    chain = BASE.replace(bandwidth=3)
    assert chain.bandwidth == 3.0 and isinstance(chain.bandwidth, float)
    assert chain.fields_used() == ("bandwidth",) and chain.uses("offload")
    assert chain.to_dict()["bandwidth"] == 3.0 and "bandwidth" not in BASE.to_dict()
    assert Chain.from_json(chain.to_json()) == chain
    assert chain.replace(bandwidth=None) == BASE and BASE.replace(bandwidth=0).bandwidth == 0.0


def test_the_offload_variation_draws_copies_neither_free_nor_useless():
    v = fields.variation("offload")
    for seed in range(20):
        chain = v.apply(BASE, seed)
        # the tapes copy in a quarter to four times the forward's time
        copy = sum(chain.tape_size) / chain.bandwidth
        assert 0.25 * sum(chain.fwd_time) <= copy * (1 + 1e-12)
        assert copy <= 4 * sum(chain.fwd_time) * (1 + 1e-12)
