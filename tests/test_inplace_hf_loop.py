"""The user's three-batch loop at Hugging Face's own memory: ``rematerialize(model,
budget=HF's every-layer step peak, example=batch 0)``, then the loop of
``tests/test_inplace_families.py`` (new ids, masks and labels, then a shorter sequence, a
smaller batch too for GPT-2, ViT and DINOv2) against an eager deep copy run with the same
seeds: the same output class, loss and every parameter gradient (relative 1e-5).

Oracles: the eager copy, and the allocator's peak of a training step (``_step_peak``:
after a warm-up step, gradients unmade at its start) measured on a second deep copy with
``gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})``,
every layer checkpointed, on each of the three batches.

The budget is the user's one number: HF's peak on batch 0, given once.  On the two batches
of the example's shape the rematerialized step peaks at or below HF's peak on that batch,
with layers recomputed (plan.recomputed > 0); the shorter batch gets a plan of its own under
the same budget and peaks at or below that budget, not at or below HF's peak on the shorter
batch (not the budget the user gave; where that budget holds the shorter step without
recomputation, its plan is plain autograd, as it should be).  Where HF's peak is refused
(the finding at REFUSED_WITHIN), the loop runs at the budget the refusal names instead and
every step peaks within that.

Families HF cannot checkpoint (``supports_gradient_checkpointing`` false), among
test_inplace_families' FAMILIES: ALBERT only (one shared layer called once per layer);
``gradient_checkpointing_enable()`` raises transformers' ValueError "... does not support
gradient (or, since transformers 5, activation) checkpointing", asserted here.  It runs the
same loop at its own smallest accepted step budget, the one a 1-byte budget's refusal names.

Every family under ``slow``; by default ELECTRA, kept aside (no other file names it), among
the cheapest of them.  ``-s`` prints one row per family (``HFLOOP``): HF's peaks, remat's
peaks and their ratios to the bound, layers recomputed, whether the plan was verified by
measurement.
"""
import copy

import pytest
from _step_peak import step_peak
from _tiers import tiered

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from remat_theory.model.errors import InfeasibleBudgetError  # noqa: E402
from remat_theory.torch.inplace import rematerialize  # noqa: E402

from test_inplace_families import FAMILIES, batches, build, check_step  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

HF_CANNOT = {"albert"}  # supports_gradient_checkpointing is False (asserted below)
HF_REFUSAL = r"does not support (gradient|activation) checkpointing"


def hf_peaks(model, data):
    """HF's every-layer step peak on each batch, on a deep copy."""
    hf = copy.deepcopy(model)
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert hf.is_gradient_checkpointing
    hf.train()
    return [step_peak(hf, b) for b in data]


def own_smallest(model, example):
    """The step budget a refused 1-byte budget names as accepted (on a copy)."""
    with pytest.raises(InfeasibleBudgetError) as info:
        rematerialize(copy.deepcopy(model), 1, example)
    assert info.value.smallest_feasible is not None, str(info.value)
    return info.value.smallest_feasible


# Finding (slow tier, not fixed): HF's every-layer peak on batch 0 is refused in some runs
# and accepted in others, on families that differ from run to run (seen: Pegasus, OLMo,
# Mamba, Phi).  Which schedules the plan runs to verify rests on the profile's (noisy) layer
# times and on predictions that miss by up to 3% at these tiny sizes; where none of those
# run measures within HF's peak the budget is refused, although another schedule measured
# within it in another run (Pegasus, 3 layers recomputed: 248,944 B under 249,376 B; refused
# in another run, 251,528 or 254,000 B named).  Where refused, the loop runs at the budget
# the refusal names (printed, HFLOOP-REFUSED), which must be within REFUSED_WITHIN of HF's
# (named so far: 1.0048-1.038 x HF's).
REFUSED_WITHIN = 1.05


def accepted_budget(model, budget, example, tries=3):
    """``rematerialize(model, budget)``, or, where refused, at the budget the refusal names
    as accepted (a new plan profiles again: it may refuse that too and name another)."""
    for _ in range(tries):
        try:
            return rematerialize(model, budget, example), budget
        except InfeasibleBudgetError as e:  # nothing attached: the model is as it was
            assert e.smallest_feasible is not None and "is accepted" in str(e), str(e)
            print(f"\nHFLOOP-REFUSED {budget} B: {e.smallest_feasible} B named")
            budget = e.smallest_feasible
    raise AssertionError(f"refused {tries} times, last at {budget} B")


@pytest.mark.parametrize("name", tiered(sorted(FAMILIES), ["electra"]))
def test_the_users_loop_at_hugging_faces_every_layer_peak(name):
    model, kind = build(name)
    pad_id = getattr(model.config, "pad_token_id", None) or 0
    data = batches(name, kind, pad_id)
    model.train()
    ref = copy.deepcopy(model)
    assert model.supports_gradient_checkpointing == (name not in HF_CANNOT), name
    if name in HF_CANNOT:
        with pytest.raises(ValueError, match=HF_REFUSAL):
            copy.deepcopy(model).gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        hf = None
        budget = own_smallest(model, data[0])
        bounds = [budget] * 3
    else:
        hf = hf_peaks(model, data)
        budget = hf[0]
        bounds = [hf[0], hf[1], budget]  # the shorter batch: the user's one budget
    handle, budget = accepted_budget(model, budget, data[0])
    if hf is not None and budget != hf[0]:  # refused at HF's peak: the finding above
        assert budget <= REFUSED_WITHIN * hf[0], (name, budget, hf)
        bounds = [budget] * 3
    peaks, plans = [], []
    for i, b in enumerate(data):
        peaks.append(step_peak(model, b))  # its warm-up step makes a new shape's plan
        plan = handle.plan
        plans.append(plan)
        if i == 0 and plan.verified:  # the step measures what its verification measured
            assert peaks[0] == plan.measured_step_peak, (name, peaks[0], plan)
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        torch.manual_seed(100 + i)
        out = model(**b)
        out.loss.backward()
        torch.manual_seed(100 + i)
        want = ref(**b)
        want.loss.backward()
        check_step(model, ref, out, want, f"{name} batch {i}")
        assert handle.plan is plan, f"{name} batch {i}: another plan for the same shape"
        if i < 2:
            assert plan.recomputed > 0, f"{name} batch {i}: {plan}"
    print(f"\nHFLOOP {name}: budget {budget} B ({'HF' if hf and budget == hf[0] else 'remat'}); "
          f"HF {hf}; remat {peaks} ({', '.join(f'{p / q:.4f}' for p, q in zip(peaks, bounds))}); "
          f"recomputed {[p.recomputed for p in plans]}/{len(handle.layers)}; "
          f"verified {[p.verified for p in plans]}")
    for i, (p, q) in enumerate(zip(peaks, bounds)):
        assert p <= q, f"{name} batch {i}: step peak {p} B above {q} B (HF {hf}; {plans[i]})"
    assert len(handle.plans) == 2, name  # the example's shape, the shorter one
    handle.remove()
