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
recomputation, its plan is plain autograd, as it should be).  A verified plan's steps
measure what its verification measured, to the byte.

Families HF cannot checkpoint (``supports_gradient_checkpointing`` false), among
test_inplace_families' FAMILIES: ALBERT (one shared layer called once per layer), ResNet,
RegNet and ConvNeXt; ``gradient_checkpointing_enable()`` raises transformers' ValueError
"... does not support gradient (in this transformers: activation) checkpointing", asserted
here.  They run the same loop at their own smallest accepted step budget, the one a 1-byte
budget's refusal names.

Every family under ``slow``; by default SegFormer (vision: efficient attention over
stages of blocks) and OLMo, kept aside (no other file names it), the cheapest of them, and one whose HF peak had been refused in some runs before every layer
checkpointed was among the schedules a refusal runs.  ``-s`` prints one row per family (``HFLOOP``): HF's peaks, remat's
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

from test_inplace_families import FAMILIES, batches, build, check_step, seed  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

# supports_gradient_checkpointing is False (asserted below)
HF_CANNOT = {"albert", "resnet", "regnet", "convnext"}
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


# HF's peak is accepted on every family: before every layer checkpointed (HF's own
# computation) was among the schedules a refusal runs, it was refused in some runs on
# families that differed from run to run (Pegasus, OLMo, Phi, Mamba: 1.005-1.041 x HF's
# named), as the profile's noisy layer times picked the schedules run.


def accepted_budget(model, budget, example, tries=3):
    """``rematerialize(model, budget)``, or, where refused, at the budget the refusal names
    as accepted (a new plan profiles again: it may refuse that too and name another): for a
    family HF cannot checkpoint, its own smallest accepted budget."""
    for _ in range(tries):
        try:
            return rematerialize(model, budget, example), budget
        except InfeasibleBudgetError as e:  # nothing attached: the model is as it was
            assert e.smallest_feasible is not None and "is accepted" in str(e), str(e)
            print(f"\nHFLOOP-REFUSED {budget} B: {e.smallest_feasible} B named")
            budget = e.smallest_feasible
    raise AssertionError(f"refused {tries} times, last at {budget} B")


@pytest.mark.parametrize("name", tiered(sorted(FAMILIES), ["olmo", "segformer"]))
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
    else:
        hf = hf_peaks(model, data)
        budget = hf[0]
        bounds = [hf[0], hf[1], budget]  # the shorter batch: the user's one budget
    if hf is None:
        handle, budget = accepted_budget(model, budget, data[0])
        bounds = [budget] * 3
    else:  # refused (InfeasibleBudgetError) fails the test
        handle = rematerialize(model, budget, data[0])
    peaks, plans = [], []
    for i, b in enumerate(data):
        peaks.append(step_peak(model, b))  # its warm-up step makes a new shape's plan
        plan = handle.plan
        plans.append(plan)
        if plan.verified:  # the step measures what its verification measured
            assert peaks[i] == plan.measured_step_peak, (name, i, peaks[i], plan)
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        seed(100 + i)
        out = model(**b)
        out.loss.backward()
        seed(100 + i)
        want = ref(**b)
        want.loss.backward()
        check_step(model, ref, out, want, f"{name} batch {i}")
        assert handle.plan is plan, f"{name} batch {i}: another plan for the same shape"
        if i < 2:
            assert plan.recomputed > 0, f"{name} batch {i}: {plan}"
    print(f"\nHFLOOP {name}: budget {budget} B ({'HF' if hf else 'its own'}); "
          f"HF {hf}; remat {peaks} ({', '.join(f'{p / q:.4f}' for p, q in zip(peaks, bounds))}); "
          f"recomputed {[p.recomputed for p in plans]}/{len(handle.layers)}; "
          f"verified {[p.verified for p in plans]}")
    for i, (p, q) in enumerate(zip(peaks, bounds)):
        assert p <= q, f"{name} batch {i}: step peak {p} B above {q} B (HF {hf}; {plans[i]})"
    assert len(handle.plans) == 2, name  # the example's shape, the shorter one
    handle.remove()
