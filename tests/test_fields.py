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
    assert declared == [f.name for f in fields.BASE] + ["name"] + [f.name for f in fields.OPTIONAL]
    required = {f.name: list(getattr(BASE, f.name)) for f in fields.FIELDS if f.required}
    for f in fields.FIELDS:
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
