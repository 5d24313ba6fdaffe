"""Verified plans: a step budget that the plan's schedule, run once at plan time and measured
by the allocator, really fits is accepted, although its prediction less the engine's margin
is not; a schedule measured above the budget is refused.  The oracle is the allocator's
measurement of the user's own step after ``rematerialize`` (and, for Hugging Face's
budget, of HF's every-layer checkpointing on a copy of the model)."""
import copy
import random
import re

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from remat_theory.model.errors import InfeasibleBudgetError  # noqa: E402
from remat_theory.torch.inplace import rematerialize  # noqa: E402
from remat_theory.torch.inplace.plan import make_plan, measured_gradients  # noqa: E402
from remat_theory.torch.tracker import AllocatorMeter  # noqa: E402

from test_inplace import Tiny, batch  # noqa: E402 - the same small model and batches

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


def step_peak(model, b) -> int:
    """The allocator's peak of one training step (gradients unmade at its start)."""
    model.zero_grad(set_to_none=True)
    meter = AllocatorMeter("cpu")
    with meter, meter.op("step"):
        model(**b).loss.backward()
    model.zero_grad(set_to_none=True)
    return meter.peak


def margin_smallest(handle) -> int:
    """The smallest step budget the plan accepts on its prediction less the margin alone
    (no step run: ``make_plan`` without ``measure``)."""
    plan = handle.plan
    grads = measured_gradients(plan.profile, handle.gradients)
    with pytest.raises(InfeasibleBudgetError) as info:
        make_plan(plan.key, plan.profile, 1, grads, handle.chained)
    return info.value.smallest_feasible


def refused_by_margin(handle, budget) -> bool:
    plan = handle.plan
    grads = measured_gradients(plan.profile, handle.gradients)
    try:
        make_plan(plan.key, plan.profile, budget, grads, handle.chained)
    except InfeasibleBudgetError:
        return True
    return False


def test_a_budget_below_the_margins_threshold_is_accepted_on_a_measurement_that_holds():
    """Just below the smallest budget the margin accepts, the plan runs its candidate once
    and accepts it; the user's step then peaks within the budget, as measured at plan time."""
    torch.manual_seed(0)
    model = Tiny(d=32, n=4).train()
    b = batch(1, 4, 32)
    probe = rematerialize(copy.deepcopy(model), 1.0, b)
    budget = margin_smallest(probe) - 1
    assert refused_by_margin(probe, budget)
    handle = rematerialize(model, budget, b)
    plan = handle.plan
    assert plan.verified and plan.recomputed > 0
    assert plan.measured_step_peak <= budget
    assert f"verified by measurement: {plan.measured_step_peak} B" in repr(plan)
    measured = step_peak(model, b)
    assert measured == plan.measured_step_peak  # the same step, the same meter
    assert measured <= budget


class NormBlock(nn.Module):
    """A block with BatchNorm statistics (buffers a step changes) and dropout (random draws)."""

    def __init__(self, d):
        super().__init__()
        self.fc, self.norm, self.drop = nn.Linear(d, d), nn.BatchNorm1d(d), nn.Dropout(0.2)

    def forward(self, x):
        return x + self.drop(F.gelu(self.norm(self.fc(x))))


class NormNet(nn.Module):
    def __init__(self, d=64, n=6):
        super().__init__()
        self.blocks = nn.ModuleList(NormBlock(d) for _ in range(n))
        self.head = nn.Linear(d, 1)

    def forward(self, x, y):
        for blk in self.blocks:
            x = blk(x)
        return type("Out", (), {"loss": F.mse_loss(self.head(x).squeeze(-1), y)})()


def test_verification_leaves_the_models_state_as_it_was():
    """Gradients already accumulated, BatchNorm statistics and every random generator
    (torch's, Python's, numpy's) are as before the steps a plan's verification ran."""
    torch.manual_seed(0)
    model = NormNet(d=32, n=4).train()
    b = {"x": torch.randn(16, 32), "y": torch.randn(16)}
    handle = rematerialize(model, 1.0, b)  # plain autograd: no step run to verify it
    plan = handle.plan
    grads = measured_gradients(plan.profile, handle.gradients)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    saved = [p.grad.clone() for p in model.parameters()]
    buffers = [t.clone() for t in model.buffers()]
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    runs = []

    def measure(candidate):
        runs.append(candidate.schedule)
        return handle.measure_step(candidate, **b)

    with pytest.raises(InfeasibleBudgetError):  # nothing fits: the least-memory steps are run
        make_plan(plan.key, plan.profile, 1, grads, handle.chained, measure=measure)
    # every layer checkpointed, the fastest predicted at the least step, the least chain budget
    assert 1 <= len(runs) <= 3 and all(r is not None for r in runs)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), saved))
    assert all(torch.equal(t, s) for t, s in zip(model.buffers(), buffers))
    assert torch.equal(torch.get_rng_state(), states[0])
    assert random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])


def test_a_refusal_on_a_measurement_names_a_budget_that_holds():
    """Where nothing fits on prediction less the margin, the refusal names the least-memory
    schedule's measured step as a budget that is accepted, and it is: the user's step holds
    it.  One byte below, the plan either refuses again (naming the same figure) or accepts a
    schedule that measured within that budget, and the user's step holds that too: which of
    the two depends on which schedule the profile's (noisy) layer times make the candidate,
    so the test requires the property, not the outcome.  The message does not call the
    figure the smallest feasible budget: another schedule may measure less."""
    torch.manual_seed(0)
    model = Tiny(d=32, n=4).train()
    b = batch(1, 8, 64)
    with pytest.raises(InfeasibleBudgetError) as info:
        rematerialize(copy.deepcopy(model), 1, b)
    named = info.value.smallest_feasible
    assert re.search(rf"a budget of {named} B \([^)]*\) is accepted", str(info.value))
    assert "measured by the allocator" in str(info.value)
    assert "smallest feasible" not in str(info.value)
    for budget in (named, named - 1):
        m = copy.deepcopy(model)
        try:
            handle = rematerialize(m, budget, b)
        except InfeasibleBudgetError as again:
            assert budget < named and again.smallest_feasible == named
            continue
        assert handle.plan.verified and handle.plan.measured_step_peak <= budget
        assert step_peak(m, b) == handle.plan.measured_step_peak <= budget


def test_hugging_faces_every_layer_peak_is_accepted_as_a_budget_and_held():
    """HF's every-layer checkpointed step peak, given as the budget, is accepted (the
    margin alone refused it: 1.006 x on this model) and the user's step peaks within it,
    the loss and gradients the eager model's."""
    tf = pytest.importorskip("transformers")
    tf.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=100, n_embd=64, n_layer=3, n_head=2,
                                             n_positions=64)).train()
    ids = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(1))
    b = {"input_ids": ids, "labels": ids.clone()}
    hf = copy.deepcopy(model)
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    budget = step_peak(hf, b)
    eager = copy.deepcopy(model)
    handle = rematerialize(model, budget, b)
    assert handle.plan.verified
    assert refused_by_margin(handle, budget)
    assert step_peak(model, b) <= budget
    torch.manual_seed(2)
    loss = model(**b).loss
    loss.backward()
    torch.manual_seed(2)
    ref = eager(**b).loss
    ref.backward()
    assert torch.allclose(loss, ref, rtol=1e-5, atol=0)
    for (n, p), q in zip(model.named_parameters(), eager.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-7), n
