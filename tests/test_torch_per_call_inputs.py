"""Every tensor of a call belongs to that call: a chain captured from a dict example takes
its other inputs (masks, labels) per call, and nothing of one batch reaches another.

Oracle: the eager model itself, ``model(**batch)``, on every batch of a loop whose masks and
labels change (loss or logits, and every parameter gradient, to rounding).
"""
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

from remat_theory.model.errors import RematError  # noqa: E402
from remat_theory.torch import CheckpointOptions, CheckpointedSequential, to_stages  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

BATCH, SEQ, VOCAB, CLASSES = 3, 12, 100, 2


def _bert():
    torch.manual_seed(0)
    cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=SEQ,
                        num_labels=CLASSES, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return tf.BertForSequenceClassification(cfg).train()


def _batch(seed: int, labels: bool = True) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    for row in range(BATCH):  # each batch pads each row differently
        pad = int(torch.randint(0, SEQ // 2, (1,), generator=g))
        if pad:
            mask[row, SEQ - pad:] = 0
    batch = {"input_ids": ids, "attention_mask": mask}
    if labels:
        batch["labels"] = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return batch


def _grads(model) -> dict:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _close(a, b, what):
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"{what}: max diff {(a - b).abs().max()}"


def _drop_in(model, example, **capture):
    chain = to_stages(model, example, **capture)
    ck = CheckpointedSequential(chain, 0.7, example_input=example["input_ids"],
                                loss_fn=lambda out: out.sum(),
                                options=CheckpointOptions(profile_repeats=1))
    assert ck.plan.recomputed > 0  # the budget recomputes: the masks are read again
    return ck


def _compare(model, ck, batches, reduce):
    others = [k for k in batches[0] if k != "input_ids"]
    for k, batch in enumerate(batches):
        model.zero_grad(set_to_none=True)
        want = reduce(model(**batch))
        want.backward()
        want_grads = _grads(model)
        model.zero_grad(set_to_none=True)
        got = ck(batch["input_ids"], **{n: batch[n] for n in others})
        got = got if got.dim() == 0 else got.sum()
        got.backward()
        _close(got.detach(), want.detach(), f"batch {k}: the output")
        got_grads = _grads(model)
        assert got_grads.keys() == want_grads.keys()
        for name, g in want_grads.items():
            _close(got_grads[name], g, f"batch {k}: the gradient of {name}")


# at the model's layers (seams: the runner holds the inputs) and as a graph (buffers)
CAPTURES = [pytest.param({}, id="layers"), pytest.param({"granularity": "fine"}, id="graph")]


@pytest.mark.parametrize("capture", CAPTURES)
def test_loss_and_gradients_follow_each_batchs_mask_and_labels(capture):
    model = _bert()
    batches = [_batch(s) for s in (1, 2, 3)]
    ck = _drop_in(model, batches[0], output="loss", **capture)
    _compare(model, ck, batches, lambda out: out.loss)


@pytest.mark.parametrize("capture", CAPTURES)
def test_logits_and_gradients_follow_each_batchs_mask(capture):
    model = _bert()
    batches = [_batch(s, labels=False) for s in (1, 2, 3)]
    ck = _drop_in(model, batches[0], **capture)
    _compare(model, ck, batches, lambda out: out.logits.sum())


def test_the_chain_itself_takes_its_other_inputs_per_call():
    model = _bert().eval()
    batches = [_batch(s) for s in (1, 2)]
    chain = to_stages(model, batches[0], output="loss")
    for batch in batches:
        with torch.no_grad():
            got = chain(batch["input_ids"], attention_mask=batch["attention_mask"],
                        labels=batch["labels"])
            _close(got, model(**batch).loss, "the chain's loss")


def test_a_call_without_its_other_inputs_is_refused():
    model = _bert()
    batch = _batch(1)
    chain = to_stages(model, batch, output="loss")
    ck = CheckpointedSequential(chain, 0.7, example_input=batch["input_ids"],
                                loss_fn=lambda out: out.sum(),
                                options=CheckpointOptions(profile_repeats=1))
    for run in (chain, ck):
        with pytest.raises(RematError, match="attention_mask.*labels") as e:
            run(batch["input_ids"])
        assert "attention_mask=" in str(e.value)
        with pytest.raises(RematError, match="labels"):
            run(batch["input_ids"], attention_mask=batch["attention_mask"])


def test_another_shape_of_another_input_is_refused():
    model = _bert()
    batch = _batch(1)
    chain = to_stages(model, batch, output="loss")
    short = batch["attention_mask"][:, :-1]
    with pytest.raises(RematError, match=r"attention_mask.*\[3, 11\].*\[3, 12\]"):
        chain(batch["input_ids"], attention_mask=short, labels=batch["labels"])
    with pytest.raises(RematError, match="'token_type_ids' is not"):
        chain(batch["input_ids"], attention_mask=batch["attention_mask"],
              labels=batch["labels"], token_type_ids=batch["attention_mask"])


def test_set_inputs_serves_the_next_call_only():
    model = _bert().eval()
    batch, other = _batch(1), _batch(2)
    chain = to_stages(model, batch, output="loss")
    chain.set_inputs(attention_mask=other["attention_mask"], labels=other["labels"])
    with torch.no_grad():
        got = chain(other["input_ids"])
        _close(got, model(**other).loss, "after set_inputs")
        with pytest.raises(RematError, match="attention_mask"):
            chain(other["input_ids"])


def test_a_recomputation_after_the_next_calls_forward_is_refused():
    """Call 1's backward recomputes with call 1's masks or not at all: after call 2's
    forward, the installed masks (and the values the first stage hands on) are call 2's."""
    model = _bert()
    first, second = _batch(1), _batch(2)
    ck = _drop_in(model, first, output="loss")
    loss1 = ck(first["input_ids"], attention_mask=first["attention_mask"], labels=first["labels"])
    ck(second["input_ids"], attention_mask=second["attention_mask"], labels=second["labels"])
    with pytest.raises(RematError, match="backward before the next call's forward"):
        loss1.backward()


def test_an_offload_plan_recomputing_after_the_next_calls_forward_is_refused():
    """The same rule for a schedule with host transfers (the offload executor runs the
    recomputations in the backward): and where the calls alternate properly, the eager
    model's loss and gradients."""
    model = _bert()
    first, second = _batch(1), _batch(2)
    chain = to_stages(model, first, output="loss")
    ck = CheckpointedSequential(chain, 0.6, "dp-offload", example_input=first["input_ids"],
                                loss_fn=lambda out: out.sum(), bandwidth=1e9,
                                options=CheckpointOptions(profile_repeats=1))
    assert type(ck.strategy()).__name__ == "Offloaded" and ck.plan.recomputed > 0
    for k, batch in enumerate([first, second]):
        model.zero_grad(set_to_none=True)
        want = model(**batch).loss
        want.backward()
        want_grads = _grads(model)
        model.zero_grad(set_to_none=True)
        got = ck(batch["input_ids"], attention_mask=batch["attention_mask"],
                 labels=batch["labels"])
        value = got.detach().clone()  # the offload run frees x_L in its backward
        got.backward()
        _close(value, want.detach(), f"batch {k}: the loss")
        got_grads = _grads(model)
        assert got_grads.keys() == want_grads.keys()
        for name, g in want_grads.items():
            _close(got_grads[name], g, f"batch {k}: the gradient of {name}")
    loss1 = ck(first["input_ids"], attention_mask=first["attention_mask"], labels=first["labels"])
    ck(second["input_ids"], attention_mask=second["attention_mask"], labels=second["labels"])
    with pytest.raises(RematError, match="backward before the next call's forward"):
        loss1.backward()
