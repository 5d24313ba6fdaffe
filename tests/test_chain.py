"""The chain: validation of every field, JSON round trips, memory helpers."""
import json

import pytest
from _tiers import examples
from hypothesis import given, settings

from remat_theory import Chain, ChainError, simulate
from remat_theory.analysis.families import FAMILIES, make
from remat_theory.strategies import chains
from solvers.exhaustive import min_feasible_budget
from solvers.store_all import store_all_schedule

GOOD = dict(fwd_time=[1, 2], bwd_time=[3, 4, 0.5], x_size=[4, 2, 3], tape_size=[5, 6],
            fwd_overhead=[1, 2], bwd_overhead=[1, 0, 2])


def bad(**changes):
    d = dict(GOOD)
    d.update(changes)
    return d


@pytest.mark.parametrize("changes, message", [
    (dict(fwd_time=[1, -2]), "fwd_time[1] = -2.0 is negative"),
    (dict(bwd_time=[3, float("nan"), 0.5]), "bwd_time[1] is NaN"),
    (dict(fwd_time=[1, float("inf")]), "fwd_time[1] = inf is not finite"),
    (dict(x_size=[4, 2, -3]), "x_size[2] = -3 is negative"),
    (dict(x_size=[4, 2.5, 3]), "x_size[1] = 2.5 is not an integer"),
    (dict(tape_size=[5, float("nan")]), "tape_size[1] is NaN"),
    (dict(bwd_overhead=[1, 0, float("inf")]), "bwd_overhead[2] = inf is not finite"),
    (dict(bwd_time=[3, 4]), "bwd_time has length 2, expected 3"),
    (dict(x_size=[4, 2, 3, 1]), "x_size has length 4, expected 3"),
    (dict(fwd_overhead=[1]), "fwd_overhead has length 1, expected 2"),
    (dict(tape_size=[1, 6]), "tape_size[0] = 1 is smaller than x_size[1] = 2"),
    (dict(fwd_time=[]), "fwd_time is empty"),
    (dict(fwd_time=[1, "a"]), "fwd_time[1] = 'a' is not a number"),
    (dict(x_size=[4, True, 3]), "x_size[1] = True is not a number"),
    (dict(fwd_time="12"), "fwd_time must be a list"),
])
def test_bad_fields_are_named(changes, message):
    with pytest.raises(ChainError) as e:
        Chain(**bad(**changes))
    assert message in str(e.value)


def test_integral_float_sizes_are_accepted_exactly():
    c = Chain(**bad(x_size=[4.0, 2, 3]))
    assert c.x_size == (4, 2, 3) and isinstance(c.x_size[0], int)


def test_overheads_default_to_zero():
    c = Chain([1], [1, 1], [1, 1], [1])
    assert c.fwd_overhead == (0,) and c.bwd_overhead == (0, 0)


def test_chain_is_immutable():
    c = Chain(**GOOD)
    with pytest.raises(Exception):
        c.x_size = (1, 1, 1)


@pytest.mark.parametrize("text, message", [
    ('{"format": "remat-chain/1", "fwd_time": [1', "malformed JSON at line 1"),
    ('{"format": "remat-chain/2", "fwd_time": [1], "bwd_time": [1, 1], "x_size": [1, 1], "tape_size": [1]}',
     "format = 'remat-chain/2' is unknown"),
    ('{"fwd_time": [1], "bwd_time": [1, 1], "x_size": [1, 1], "tape_size": [1]}', "format = None is unknown"),
    ('{"format": "remat-chain/1", "fwd_time": [1], "bwd_time": [1, 1], "x_size": [1, 1]}',
     "missing field 'tape_size'"),
    ('{"format": "remat-chain/1", "fwd_time": [1], "bwd_time": [1, 1], "x_size": [1, 1], "tape_size": [1], "speed": 3}',
     "unknown field 'speed'"),
    ('[1, 2]', "a chain must be a JSON object"),
    ('{"format": "remat-chain/1", "fwd_time": [NaN], "bwd_time": [1, 1], "x_size": [1, 1], "tape_size": [1]}',
     "fwd_time[0] is NaN"),
    ('{"format": "remat-chain/1", "fwd_time": [Infinity], "bwd_time": [1, 1], "x_size": [1, 1], "tape_size": [1]}',
     "fwd_time[0] = inf is not finite"),
])
def test_bad_json_is_named(text, message):
    with pytest.raises(ChainError) as e:
        Chain.from_json(text)
    assert message in str(e.value)


def test_load_names_the_file(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("{not json")
    with pytest.raises(ChainError, match=r"c\.json: malformed JSON"):
        Chain.load(p)
    with pytest.raises(ChainError, match="cannot read chain file"):
        Chain.load(tmp_path / "missing.json")


def test_save_load(tmp_path):
    c = Chain(**GOOD, name="demo")
    c.save(tmp_path / "c.json")
    d = Chain.load(tmp_path / "c.json")
    assert d == c and d.name == "demo"
    assert json.loads((tmp_path / "c.json").read_text())["format"] == "remat-chain/1"


@settings(max_examples=examples(60, 28))
@given(chains(1, 8))
def test_json_round_trip_is_identity(chain):
    back = Chain.from_json(chain.to_json())
    assert back == chain and back.name == chain.name
    assert Chain.from_dict(json.loads(json.dumps(chain.to_dict()))) == chain


@settings(max_examples=examples(80, 28))
@given(chains(1, 8))
def test_store_all_memory_closed_form_equals_simulator(chain):
    assert chain.store_all_memory() == simulate(chain, store_all_schedule(chain)).peak_memory


def test_lower_bound_is_not_always_tight():
    # Found by search: the necessary-op bound is 33 but no schedule fits below 35.
    c = Chain([1.0] * 5, [1.0] * 6, [1, 2, 7, 2, 3, 6], [3, 16, 8, 5, 9],
              [6, 9, 3, 1, 2], [5, 5, 0, 6, 1, 6])
    assert c.memory_lower_bound() == 33
    assert min_feasible_budget(c) == 35


def test_homogeneous_and_gcd_helpers():
    c = Chain.homogeneous(4, 1.0, 2.0, x_size=6, tape_size=12, loss_time=0.5)
    assert c.length == 4 and c.ideal_makespan() == 4 + 8 + 0.5
    assert c.size_gcd() == 6
    s = c.scaled_sizes(6)
    assert s.x_size == (1,) * 5 and s.tape_size == (2,) * 4
    with pytest.raises(ChainError, match="not divisible by 4"):
        c.scaled_sizes(4)
    with pytest.raises(ChainError, match="length = 0"):
        Chain.homogeneous(0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_families_are_seeded_and_valid(family):
    a, b, c = make(family, 12, seed=3), make(family, 12, seed=3), make(family, 12, seed=4)
    assert a == b and a.length == 12
    assert simulate(a, store_all_schedule(a)).makespan == pytest.approx(a.ideal_makespan())
    if family in ("random",):
        assert a != c


def test_family_shapes():
    r = make("resnet", 16)
    assert r.x_size[1] > r.x_size[-1]  # shrinking activations
    assert list(r.x_size[1:]) == sorted(r.x_size[1:], reverse=True)
    t = make("transformer", 10)
    assert len(set(t.x_size)) == 1 and all(tp >= 8 * t.x_size[1] for tp in t.tape_size[1:])
    n = make("rnn", 200)
    assert n.length == 200 and len(set(n.fwd_time)) == 1
    with pytest.raises(ChainError, match="unknown family 'vgg'"):
        make("vgg", 3)
    with pytest.raises(ChainError, match="length = 0"):
        make("random", 0)


# ---------------------------------------------------------------- decoding and magnitudes
@pytest.mark.parametrize("enc", ["utf-8", "utf-8-sig", "utf-16", "utf-32", "utf-16-le-bom",
                                 "utf-32-be-bom"])
def test_files_decode_from_utf8_and_marked_utf16_utf32(tmp_path, enc):
    import codecs

    text = json.dumps({"format": "remat-chain/1", "name": "r\u00e9seau \u4e2d", **GOOD})
    marks = {"utf-16-le-bom": (codecs.BOM_UTF16_LE, "utf-16-le"),
             "utf-32-be-bom": (codecs.BOM_UTF32_BE, "utf-32-be")}
    raw = marks[enc][0] + text.encode(marks[enc][1]) if enc in marks else text.encode(enc)
    p = tmp_path / "c.json"
    p.write_bytes(raw)
    c = Chain.load(p)
    assert c == Chain.from_json(text) and c.name == "r\u00e9seau \u4e2d"


@pytest.mark.parametrize("raw, fragment", [
    ('{"name": "r\u00e9seau"}'.encode("latin-1"), "not UTF-8 text: byte 0xe9 at byte offset 11"),
    (b"\x00\x01\x02", "byte 0x00 at byte offset 0"),
    ('{"a": 1}'.encode("utf-16-le"), "byte 0x00 at byte offset 1 (UTF-16 or UTF-32 needs a byte-order mark"),
    (b"\xff\xfe" + b"{\x00\x00\xd8", "not valid UTF-16 text"),
])
def test_undecodable_files_name_the_file_and_byte_offset(tmp_path, raw, fragment):
    p = tmp_path / "bad.json"
    p.write_bytes(raw)
    with pytest.raises(ChainError) as e:
        Chain.load(p)
    assert str(e.value).startswith("bad.json: ") and fragment in str(e.value)


def test_duplicate_keys_are_an_error_naming_the_key():
    text = json.dumps({"format": "remat-chain/1", **GOOD})[:-1] + ', "tape_size": [5]}'
    with pytest.raises(ChainError, match="duplicate key 'tape_size'"):
        Chain.from_json(text)


@pytest.mark.parametrize("text, fragment", [
    ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
    ('{"x": ' + "1" * 5000 + "}", "malformed JSON"),
])
def test_hostile_json_is_a_chain_error(text, fragment):
    with pytest.raises(ChainError, match=fragment):
        Chain.from_json(text)


def test_sums_that_could_overflow_are_rejected_naming_field_and_index():
    from remat_theory.model.chain import MAX_TOTAL_SIZE, MAX_TOTAL_TIME

    with pytest.raises(ChainError, match=r"fwd_time\[1\] = 1e\+308 makes the chain's total time"):
        Chain(**bad(fwd_time=[1, 1e308]))
    with pytest.raises(ChainError, match=r"bwd_time\[2\] = 2e\+18 makes"):
        Chain(**bad(bwd_time=[0, 0, 2e18]))
    # recompute-all runs O(L^2) forwards: the forward times count L times
    L = 2  # (sum(fwd_time) + sum(fall_time)) * L, fall_time defaulting to fwd_time
    Chain(**bad(fwd_time=[MAX_TOTAL_TIME / L / 4] * L, bwd_time=[0, 0, 0]))
    with pytest.raises(ChainError, match=r"fwd_time\[1\]"):
        Chain(**bad(fwd_time=[MAX_TOTAL_TIME / L / 4 * 1.01] * L, bwd_time=[0, 0, 0]))
    with pytest.raises(ChainError, match=r"fall_time\[0\] = 1e\+300"):
        Chain(**bad(fall_time=[1e300, 1]))
    with pytest.raises(ChainError, match=r"fall_overhead\[1\]"):
        Chain(**bad(fall_overhead=[1, MAX_TOTAL_SIZE]))
    with pytest.raises(ChainError, match=r"x_size\[0\] = 1e\+308 makes the chain's total size"):
        Chain(**bad(x_size=[1e308, 2, 3]))
    with pytest.raises(ChainError, match=r"x_size\[0\] = 1e\+400 .*total size"):
        Chain(**bad(x_size=[10 ** 400, 2, 3]))
    big = MAX_TOTAL_SIZE // 4
    with pytest.raises(ChainError, match=r"bwd_overhead\[0\]"):
        Chain(**bad(x_size=[big, 2, 3], tape_size=[big, big], bwd_overhead=[big, 0, 0]))


def test_errors_echo_numbers_compactly():
    from remat_theory.model.chain import format_number

    assert format_number(10 ** 400) == "1e+400" and format_number(-2.0) == "-2.0"
    assert format_number(123456789012345678) == "1.235e+17" and format_number(7) == "7"
    with pytest.raises(ChainError) as e:
        Chain(**bad(fwd_time=[1, -10 ** 400]))
    assert len(str(e.value)) < 100
