"""The drop-in's contract: a budget of one meaning (``Budget``), the profiling knobs in one
frozen, validated ``CheckpointOptions``, the earlier keywords as one deprecated path to the
same options, and one execution path whose strategy is chosen once per plan."""
import dataclasses
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from remat_theory.model.errors import RematError  # noqa: E402
from remat_theory.torch import (Budget, CheckpointedSequential, CheckpointOptions,  # noqa: E402
                                profile_details)
from remat_theory.torch.modules.checkpointed import PLAIN, Nested  # noqa: E402
from remat_theory.torch.modules.options import options_from  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


# ----------------------------------------------------------------------------- budgets

@pytest.mark.parametrize("spec, kind, value", [
    ("6GiB", "step", 6 * 2**30), ("512 MB", "step", 512 * 10**6), ("4096B", "step", 4096),
    (0.5, "fraction", 0.5), (1.0, "fraction", 1.0),
    (Budget.activations(4096), "activations", 4096), (Budget.activations(1), "activations", 1),
    (Budget.step(123), "step", 123),
])
def test_each_budget_form_means_one_thing(spec, kind, value):
    b = Budget.of(spec)
    assert (b.kind, b.value) == (kind, value)


@pytest.mark.parametrize("spec, says", [
    ("6000", "no unit"), (1, "plain int"), (6e9, "fraction"), (1.5, r"\(0, 1\]"),
    (True, "must be a Budget"), (0, "positive"), (-3, "positive"), (None, "must be a Budget"),
    ("lots", "not bytes"),
])
def test_an_ambiguous_or_bad_budget_is_refused_naming_the_spelling(spec, says):
    with pytest.raises(RematError, match=says) as e:
        Budget.of(spec)
    assert repr(spec) in str(e.value) or str(spec) in str(e.value)


@pytest.mark.parametrize("spec", [4096, 1, 2**33, np.int64(4096), -3])
def test_a_plain_int_budget_is_refused_naming_both_explicit_spellings(spec):
    # rematerialize() reads an int as bytes of the whole step; here it once meant bytes of
    # activations: one spelling, one meaning across both APIs, so the int says neither
    with pytest.raises(RematError, match="plain int") as e:
        Budget.of(spec)
    said = str(e.value)
    assert f"budget = {spec!r}" in said
    assert "rematerialize() reads an int as bytes of the whole step" in said
    n = int(spec) if spec > 0 else "n"
    assert f"Budget.activations({n})" in said and "bytes the chain counts" in said
    assert f"Budget.step({n})" in said and "a str with a unit" in said
    assert ("1.0" in said) == (spec == 1)  # the int 1 also names the whole store-all peak


@pytest.mark.parametrize("make, bad", [(Budget.fraction, 1.2), (Budget.fraction, 0),
                                       (Budget.activations, 0), (Budget.activations, 2.5),
                                       (Budget.step, False)])
def test_the_explicit_kinds_check_their_value(make, bad):
    with pytest.raises(RematError, match=repr(bad).replace(".", r"\.")):
        make(bad)


# ----------------------------------------------------------------------------- options

@pytest.mark.parametrize("field, value", [
    ("profile_repeats", 0), ("profile_repeats", 1.5), ("unit", 0), ("reprofile", "yes"),
    ("early_stop", 1), ("chain", "a chain"), ("loss_bytes", 8), ("input_grad_bytes", 0),
    ("draws_random", (True,)),
])
def test_a_bad_option_is_refused_naming_field_and_value(field, value):
    with pytest.raises(RematError, match=field) as e:
        CheckpointOptions(**{field: value})
    assert repr(value) in str(e.value) or type(value).__name__ in str(e.value)


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CheckpointOptions().unit = 4


def test_the_earlier_keywords_are_one_deprecated_path_to_the_same_options():
    with pytest.warns(DeprecationWarning, match=r"options=CheckpointOptions\(profile_repeats"):
        got = options_from(None, {"profile_repeats": 1, "early_stop": False})
    assert got == CheckpointOptions(profile_repeats=1, early_stop=False)
    assert options_from({"unit": 4}, {}) == CheckpointOptions(unit=4)
    with pytest.raises(RematError, match="not beside it"):
        options_from(CheckpointOptions(), {"unit": 4})
    with pytest.raises(RematError, match="unknown keyword.*repeats"):
        options_from(None, {"repeats": 1})
    with pytest.raises(RematError, match="unknown field.*repeats"):
        options_from({"repeats": 1}, {})
    with pytest.raises(RematError, match="must be a CheckpointOptions"):
        options_from(3, {})


# ----------------------------------------------------------------------------- the module

@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                          nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
    x = torch.randn(32, 16)
    prof = profile_details(list(model), x, lambda out: out.sum(), repeats=1)
    return model, x, prof


def _ck(tiny, budget, **kw):
    model, x, prof = tiny
    kw.setdefault("options", CheckpointOptions.from_profile(prof, unit=1))
    return CheckpointedSequential(model, budget, example_input=x, **kw)


def test_short_forms_and_budgets_plan_alike(tiny):
    store_all = tiny[2].chain.store_all_memory()
    n = int(0.8 * store_all)
    with pytest.raises(RematError, match=rf"Budget\.activations\({n}\).*Budget\.step\({n}\)"):
        _ck(tiny, n)  # a plain int: bytes of activations here, of the step in rematerialize()
    b = _ck(tiny, Budget.activations(n))
    assert b.plan.budget == n and b.budget_spec == Budget("activations", n)
    c, d = _ck(tiny, 0.8), _ck(tiny, Budget.fraction(0.8))
    assert c.plan.budget == d.plan.budget == int(0.8 * store_all)
    big = 100 * store_all  # above the plain step (store-all, gradients, reserves)
    e, f = _ck(tiny, f"{big}B"), _ck(tiny, Budget.step(big))
    assert e.step_budget == f.step_budget == big and e.plan.tree is f.plan.tree is None


def test_the_earlier_keywords_build_the_same_module(tiny):
    model, x, prof = tiny
    new = _ck(tiny, 0.8)
    with pytest.warns(DeprecationWarning):
        old = CheckpointedSequential(model, 0.8, example_input=x, chain=prof.chain, unit=1,
                                     draws_random=prof.draws_random,
                                     input_grad_bytes=prof.input_grad_bytes,
                                     loss_bytes=prof.loss_bytes)
    assert old.options == new.options
    assert old.schedule.tokens() == new.schedule.tokens()
    assert old.plan.predicted_peak == new.plan.predicted_peak
    with pytest.raises(RematError, match="not beside it"):
        _ck(tiny, 0.8, unit=1)


def test_optimizer_state_goes_with_a_step_budget_only(tiny):
    with pytest.raises(RematError, match="optimizer_state.*0.8 of store-all"):
        _ck(tiny, 0.8, optimizer_state=1024)


def test_one_strategy_per_plan_and_a_plan_put_by_hand_gets_its_own(tiny):
    model, x, _ = tiny
    ck = _ck(tiny, 0.75)
    assert ck.plan.recomputed > 0 and isinstance(ck.strategy(), Nested)
    assert ck.strategy() is ck.strategy()  # chosen once
    assert _ck(tiny, 1.0).strategy() is PLAIN
    calls = []
    hooks = [s.register_forward_hook(lambda *a: calls.append(1)) for s in ck.stages]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # checkpoint's own use_reentrant notes, if any
            ck(x.requires_grad_(False)).sum().backward()
        assert len(calls) > len(ck.stages)  # the schedule ran: some stage recomputed
        ck.plans[ck.plan.key] = dataclasses.replace(ck.plan, tree=None)
        assert ck.strategy() is PLAIN
        calls.clear()
        ck(x).sum().backward()
        assert len(calls) == len(ck.stages)  # plain autograd: nothing recomputed
    finally:
        for h in hooks:
            h.remove()
