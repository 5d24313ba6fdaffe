"""rematerialize(model, budget, example): the model stays the model.

Each test compares with an untouched deep copy of the model (the eager oracle), or with the
allocator's measurement of the step (the plan's predicted peak is an upper bound)."""
import copy

import pytest
from _tiers import tiered

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from remat_theory.model.errors import InfeasibleBudgetError, RematError  # noqa: E402
from remat_theory.torch.inplace import rematerialize  # noqa: E402
from remat_theory.torch.inplace.plan import ENGINE_MARGIN, make_plan  # noqa: E402
from remat_theory.torch.tracker import AllocatorMeter  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask=None):
        h = self.fc2(self.drop(F.gelu(self.fc1(self.norm(x)))))
        if mask is not None:
            h = h * mask.unsqueeze(-1)
        return x + h


class Out:
    def __init__(self, loss, logits):
        self.loss, self.logits = loss, logits


class Tiny(nn.Module):
    """Embedding, a stack of blocks reading a per-call mask, a head and a loss from labels."""

    def __init__(self, d=32, n=6, vocab=50):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, vocab)

    def forward(self, input_ids, mask=None, labels=None):
        x = self.emb(input_ids)
        for b in self.blocks:
            x = b(x, mask=mask)
        logits = self.head(x)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return Out(loss, logits)


def batch(seed, n=4, length=16, vocab=50):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, length), generator=g)
    mask = (torch.rand(n, length, generator=g) > 0.2).float()
    return {"input_ids": ids, "mask": mask, "labels": torch.randint(0, vocab, (n, length), generator=g)}


def step(model, b, seed):
    torch.manual_seed(seed)
    out = model(**b)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out, grads


def assert_same(a, b, ga, gb):
    assert type(a) is type(b)
    assert torch.allclose(a.loss, b.loss, rtol=1e-5, atol=0), (float(a.loss), float(b.loss))
    assert ga.keys() == gb.keys()
    for n in ga:
        scale = gb[n].abs().max().clamp_min(1e-12)
        assert float((ga[n] - gb[n]).abs().max() / scale) <= 1e-5, n


def test_a_loop_of_batches_gives_the_eager_models_losses_and_gradients():
    torch.manual_seed(0)
    model = Tiny().train()
    ref = copy.deepcopy(model)
    handle = rematerialize(model, 0.5, batch(0))
    assert handle.plan.recomputed > 0
    losses = []
    for s, (n, length) in enumerate([(4, 16), (4, 16), (3, 12)]):
        b = batch(s + 1, n, length)  # new ids, masks and labels; then a smaller batch
        out, g = step(model, b, s)
        want, gw = step(ref, b, s)
        assert_same(out, want, g, gw)
        losses.append(float(out.loss))
    assert len(set(losses)) == 3  # each batch's own labels
    assert len(handle.plans) == 2 and handle.plan.recomputed > 0


def test_the_second_batchs_labels_and_masks_are_used():
    """A chain that kept the example's labels would give the example's loss here."""
    torch.manual_seed(0)
    model = Tiny().train()
    ref = copy.deepcopy(model)
    b0 = batch(0)
    rematerialize(model, 0.5, b0)
    b1 = dict(b0, labels=(b0["labels"] + 1) % 50, mask=1 - b0["mask"])
    out, g = step(model, b1, 7)
    want, gw = step(ref, b1, 7)
    assert_same(out, want, g, gw)
    assert not torch.allclose(out.loss, step(ref, b0, 7)[0].loss)


def test_eval_no_grad_and_remove_give_the_plain_model():
    torch.manual_seed(0)
    model = Tiny().train()
    ref = copy.deepcopy(model)
    handle = rematerialize(model, 0.5, batch(0))
    model.eval()
    ref.eval()
    with torch.no_grad():
        a, b = model(**batch(3)).logits, model(**batch(3)).logits
        assert torch.equal(a, b) and torch.equal(a, ref(**batch(3)).logits)
    assert model.state_dict().keys() == ref.state_dict().keys()
    handle.remove()
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert all(not blk._forward_hooks and not blk._forward_pre_hooks for blk in model.blocks)
    model.train()
    ref.train()
    out, g = step(model, batch(4), 1)
    want, gw = step(ref, batch(4), 1)
    assert_same(out, want, g, gw)
    rematerialize(model, 0.5, batch(0)).remove()  # attachable again after remove


def test_a_model_is_rematerialized_once():
    model = Tiny().train()
    rematerialize(model, 0.5, batch(0))
    with pytest.raises(RematError, match="already rematerialized"):
        rematerialize(model, 0.5, batch(0))


@pytest.mark.parametrize("budget, word", [(0.0, "budget = 0.0"), (1.5, "budget = 1.5"),
                                          (-3, "budget = -3"), ("lots", "budget"),
                                          (True, "budget = True"), ([1], "budget = \\[1\\]")])
def test_a_bad_budget_names_itself(budget, word):
    with pytest.raises(RematError, match=word):
        rematerialize(Tiny().train(), budget, batch(0))


def test_an_infeasible_budget_names_the_smallest_that_fits_and_it_fits():
    torch.manual_seed(0)
    with pytest.raises(InfeasibleBudgetError) as info:
        rematerialize(Tiny().train(), 10_000, batch(0))
    err = info.value
    assert err.smallest_feasible is not None and "store-all needs" in str(err)
    assert f"{err.smallest_feasible} B" in str(err)
    handle = rematerialize(Tiny().train(), err.smallest_feasible, batch(0))
    assert handle.plan.predicted_step_peak <= err.smallest_feasible
    assert handle.plan.recomputed > 0


@pytest.mark.parametrize("budget", tiered([0.4, 0.7, 1.0], [0.4]))
def test_the_measured_step_stays_within_the_predicted_peak(budget):
    """The allocator's peak of a real step is at most the plan's prediction (an upper bound
    with its cause: the rise of a backward is taken from its measurement)."""
    torch.manual_seed(0)
    model = Tiny(d=64, n=6).train()
    b = batch(1, 8, 64)
    handle = rematerialize(model, budget, b)
    step(model, b, 0)  # warm-up
    meter = AllocatorMeter("cpu")
    with meter:
        with meter.op("step"):
            model(**b).loss.backward()
    model.zero_grad(set_to_none=True)
    # within the budget: the prediction and the engine's margin (measured/predicted was
    # 0.87-1.0017 on five transformers networks, benchmarks/inplace_vs_hf.py)
    assert meter.peak <= handle.plan.predicted_step_peak * (1 + ENGINE_MARGIN)
    assert meter.peak >= 0.75 * handle.plan.predicted_step_peak


def test_a_layer_stack_is_needed():
    with pytest.raises(RematError, match="no repeated stack"):
        rematerialize(nn.Linear(4, 4), 0.5, torch.randn(2, 4))


def test_a_larger_budget_is_never_refused_where_a_smaller_one_is_accepted():
    """Acceptance is monotone in the budget, in both units (a calibrated prediction once
    refused 0.5 where it accepted 0.23); the smallest budget an error names is accepted.
    One profile, planned at many budgets."""
    torch.manual_seed(0)
    model = Tiny(d=64, n=6).train()
    handle = rematerialize(model, 1.0, batch(1, 8, 64))
    plan = handle.plan
    step = plan.predicted_step_peak

    def accepts(budget):
        try:
            make_plan(plan.key, plan.profile, budget, handle.gradients, handle.chained)
            return True
        except InfeasibleBudgetError as e:
            assert e.smallest_feasible is not None and e.smallest_feasible > budget
            assert accepts(e.smallest_feasible)
            return False

    for units in ([f / 20 for f in range(1, 21)], [int(step * f / 20) for f in range(4, 23)]):
        accepted = [accepts(b) for b in units]
        assert accepted == sorted(accepted) and accepted[-1], (units, accepted)


def test_a_forward_that_raises_leaves_no_checkpoint_open():
    """An exception inside a checkpointed segment (a bad batch) closes the segment's
    checkpoint: the next step is exact."""
    torch.manual_seed(0)
    model = Tiny().train()
    ref = copy.deepcopy(model)
    rematerialize(model, 0.4, batch(0))
    bad = dict(batch(1), mask=torch.ones(4, 15))  # the blocks cannot broadcast it
    with pytest.raises(RuntimeError):
        model(**bad)
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    out, g = step(model, batch(2), 3)
    want, gw = step(ref, batch(2), 3)
    assert_same(out, want, g, gw)


def test_a_second_backward_through_one_forward_is_refused_clearly():
    """The plan lets a layer's arguments go after its last recomputation (they held a
    decoder's masks to the step's end); a second backward of the same graph is refused."""
    torch.manual_seed(0)
    model = Tiny().train()
    rematerialize(model, 0.4, batch(0))
    loss = model(**batch(1)).loss
    loss.backward(retain_graph=True)
    with pytest.raises(RematError, match="second backward"):
        loss.backward()


@pytest.mark.parametrize("tied", [False, True])
def test_each_gradient_is_placed_where_autograd_makes_it(tied):
    """The profile's real step places each parameter's gradient: a block's in its backward,
    the head's from the loss on, the embedding's at the step's end, unless it is tied to the
    head (autograd then holds its share from the loss on).  Oracle: the parameters' sizes."""
    torch.manual_seed(0)
    model = Tiny(d=32, n=4).train()
    if tied:
        model.head.weight = model.emb.weight
    handle = rematerialize(model, 0.6, batch(1))
    made = handle.plan.profile.grads_made

    def size(*params):
        return sum(p.numel() * p.element_size() for p in params)
    block = size(*model.blocks[0].parameters())
    assert all(made[i] == block for i in range(4)), made
    if tied:
        assert made["loss"] == size(model.emb.weight, model.head.bias) and made["end"] == 0
    else:
        assert made["loss"] == size(*model.head.parameters())
        assert made["end"] == size(model.emb.weight)
    assert handle.plan.grad_bytes == size(*model.parameters())
