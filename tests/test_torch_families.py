"""The chain is the user's model: every family of ``remat profile --model``, captured at
its own layers, checked against the ORIGINAL eager model (tiny configurations, CPU).

Oracles: the model's own forward and backward (gradients bit for bit, allocator peak of one
training step), and torch's allocator on the executor's run of each DP schedule against the
simulator's prediction on the profiled chain (``remat confirm``'s measurement).
"""
import pytest
from _tiers import tiered

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch import nn  # noqa: E402

from remat_theory.torch import CaptureError, to_stages  # noqa: E402
from remat_theory.lab.fidelity import check_network  # noqa: E402
from remat_theory.lab.networks import FAMILIES, build  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

# the repeated stack of each family: (module path of the layer list, layers at "test" scale)
STACKS = {"llama": ("model.layers", 2), "mistral": ("model.layers", 2),
          "qwen2": ("model.layers", 2), "opt": ("model.decoder.layers", 2),
          "gpt-neo": ("transformer.h", 2), "gpt-neox": ("gpt_neox.layers", 2),
          "phi": ("model.layers", 2), "gpt2": ("transformer.h", 2),
          "bert": ("bert.encoder.layer", 2), "roberta": ("roberta.encoder.layer", 2),
          "distilbert": ("distilbert.transformer.layer", 2), "vit": ("vit.layers", 2),
          "convnext": ("convnext.encoder.stages.*.layers", 4),
          "swin": ("swin.encoder.layers.*.blocks", 4),
          "hf-resnet": ("resnet.encoder.stages.*.layers", 2), "tv-resnet": ("layer*", 4),
          # held out: added after the capture was built, checked unmodified
          "gemma": ("model.layers", 2), "gemma2": ("model.layers", 2),
          "falcon": ("transformer.h", 2), "bloom": ("transformer.h", 2),
          "gpt-j": ("transformer.h", 2), "mixtral": ("model.layers", 2),
          "deit": ("deit.layers", 2)}
# captured whole-graph instead, with the reason: T5's first block computes the relative
# position bias (from a parameter) and hands it, needing a gradient, to every later block
NOT_AT_LAYERS = {"t5-encoder": "receives another tensor that needs a gradient"}


def _is_layer(label: str, stack: str) -> bool:
    import fnmatch
    path = label.split(" + ")[0]
    return fnmatch.fnmatch(path.rpartition(".")[0], stack) and path.rpartition(".")[2].isdigit()


# by default a decoder and a convolutional network; every family under slow
@pytest.mark.parametrize("name", tiered([f for f in FAMILIES if f not in NOT_AT_LAYERS],
                                        ["gpt2", "tv-resnet"]))
def test_each_family_is_captured_at_its_layers_and_holds_what_the_model_holds(name):
    net = build(name, "test")
    chain = net.model
    model = chain.original
    assert chain.method == "modules"
    stack, layers = STACKS[name]
    # every stage is labelled with real module paths; one stage per layer of the stack
    for label in chain.labels:
        for path in label.replace(" + ", ", ").split(", "):
            model.get_submodule(path)
    assert sum(_is_layer(lab, stack) for lab in chain.labels) == layers, chain.labels
    rec = check_network(name, "test", net=net)
    # the drop-in at store-all against the ORIGINAL eager model: same step, allocator peaks
    assert 0.99 <= rec["dropin_over_eager"] <= 1.01, rec
    assert rec["grads_equal"], rec
    runs = [r for r in rec["runs"] if "ratio" in r]
    assert len(runs) == 3, rec["runs"]
    for r in runs:
        # measured (allocator, the executor) / predicted (simulator) peak, and within budget
        assert 0.97 <= r["ratio"] <= 1.01, r
        assert r["within_budget"], r
        # the drop-in on the DP's schedule trains exactly like the eager model, holds what
        # its plan predicts and never more than its budget (allocator)
        assert r["dropin_grads_equal"], r
        assert 0.97 <= r["dropin_ratio"] <= 1.01 and r["dropin_within_budget"], r
        # the executor too (its Fn/Fck run in grad mode: Swin's masked window attention
        # computes other bits without grad)
        assert r["executor_grads_equal"], r


@pytest.mark.parametrize("name", sorted(NOT_AT_LAYERS))
def test_a_family_that_cannot_be_cut_at_its_layers_says_why_and_is_still_the_model(name):
    """The seam capture refuses, naming the reason; the graph capture it falls back to is
    still the model (drop-in at store-all against the eager model, gradients, executor)."""
    net = build(name, "test")
    with pytest.raises(CaptureError, match=NOT_AT_LAYERS[name]):
        to_stages(net.model.original, net.example_input, method="modules")
    rec = check_network(name, "test", net=net)
    assert 0.99 <= rec["dropin_over_eager"] <= 1.01, rec
    assert rec["grads_equal"], rec
    for r in [r for r in rec["runs"] if "ratio" in r]:
        assert 0.97 <= r["ratio"] <= 1.01, r
        assert r["within_budget"] and r["executor_grads_equal"], r
        # the drop-in too (T5: its MSE loss keeps a buffer the size of the output through
        # the backward, ProfileResult.loss_bytes)
        assert 0.97 <= r["dropin_ratio"] <= 1.01 and r["dropin_within_budget"], r
        assert r["dropin_grads_equal"], r


class _Stack(nn.Module):
    """Plain torch: *args/**kwargs forward, a mask made inside forward, a dict output."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.blocks = nn.ModuleList(_Block() for _ in range(3))
        self.head = nn.Linear(8, 5)

    def forward(self, *args, **kwargs):
        ids = args[0] if args else kwargs["ids"]
        h = self.emb(ids)
        mask = torch.tensor(-1e4) * (ids == 0).unsqueeze(-1)  # a tensor made in forward
        for b in self.blocks:
            h = b(h, mask=mask)
        return {"logits": self.head(h), "aux": (h.sum(),)}


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, h, mask=None):
        return h + torch.tanh(self.lin(h) + mask)


def test_plain_torch_stack_with_kwargs_forward_and_dict_output():
    torch.manual_seed(0)
    m = _Stack()
    ids = torch.randint(0, 20, (3, 6))
    chain = to_stages(m, ids)
    assert chain.method == "modules"
    assert chain.labels == ["emb", "blocks.0", "blocks.1", "blocks.2", "head"]
    assert torch.equal(chain(ids), m(ids)["logits"])
    with pytest.raises(CaptureError, match=r"shape \[3, 6\].*got shape \[3, 4\]"):
        chain(ids[:, :4])
    with pytest.raises(CaptureError, match="at its layers"):
        to_stages(nn.Linear(4, 4), torch.randn(2, 4), method="modules")


def test_a_tensor_made_in_forward_survives_the_graph_capture_too():
    """GPT-Neo makes its mask value with ``torch.tensor`` inside forward; torch.export lifts
    it as a constant, which the fine (graph) capture keeps in the stage that reads it."""
    net = build("gpt-neo", "test", granularity="fine")
    assert net.model.method == "export" and len(net.model) > 4
    torch.manual_seed(0)
    got = net.model(net.example_input)
    torch.manual_seed(0)
    assert torch.equal(got, net.model.original_forward(net.example_input))


def test_fixed_inputs_of_a_chain_at_its_layers_can_be_replaced():
    """The prefix reads the chain's fixed inputs at every run: a new attention mask reaches
    every layer (the eager model with that mask is the oracle)."""
    net = build("bert", "test")
    chain = net.model
    mask = chain.fixed_inputs["attention_mask"].clone()
    mask[:, -3:] = 0
    chain.set_inputs(attention_mask=mask)
    chain.eval()
    chain.original.eval()
    with torch.no_grad():
        want = chain.original(net.example_input, attention_mask=mask).logits
        assert torch.equal(chain(net.example_input), want)
        assert torch.equal(chain.original_forward(net.example_input), want)


class _Straight(nn.Module):
    """A float input straight into the stack, a scale computed in forward and passed to
    every layer, the last layer's output returned as it is."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(4))

    def forward(self, x):
        mask = torch.full_like(x[:1, :1], 0.5)  # held by the chain from run to run
        for b in self.blocks:
            x = b(x, mask=mask)
        return x


def test_a_stack_the_input_goes_straight_into():
    torch.manual_seed(0)
    m = _Straight()
    x = torch.randn(256, 8)
    chain = to_stages(m, x)
    assert chain.method == "modules"
    assert chain.labels == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    m(xa).square().sum().backward()
    want = [p.grad.clone() for p in m.parameters()]
    m.zero_grad(set_to_none=True)
    chain(xb).square().sum().backward()
    assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), want))
    assert torch.equal(xa.grad, xb.grad)
    # profiled and run under schedules: predictions exact, gradients the model's
    from remat_theory.lab.networks import Network, TargetLoss
    net = Network("straight", chain, x, TargetLoss(torch.randn(256, 8), "mse"))
    rec = check_network("straight", net=net)
    assert rec["grads_equal"] and 0.99 <= rec["dropin_over_eager"] <= 1.01, rec
    for r in rec["runs"]:
        assert 0.97 <= r["ratio"] <= 1.01 and r["executor_grads_equal"] and r["dropin_grads_equal"], r


class _Cached(nn.Module):
    """Replaces a tensor it keeps from one call to the next (as a chain captured at the
    model's seams keeps the arguments its layers get: GPT-Neo's float attention mask)."""

    def __init__(self, n: int, keep: bool):
        super().__init__()
        self.n, self.keep, self.cache = n, keep, None

    def forward(self, x):
        if self.keep:
            self.cache = None  # the old copy goes first: no transient of two copies
            self.cache = torch.ones(self.n)
        return x * 2


def test_the_dropin_step_is_primed_so_replaced_state_is_not_counted_as_held():
    """The CPU meter is not told of the free of a block made before its session; the
    drop-in's step is primed as the profiler's are (``fidelity._step``).  Oracle: the same
    step on stages that keep nothing; without priming the kept copy counts as held."""
    from remat_theory.lab.fidelity import _step

    n = 1 << 16  # 256 KiB: larger than anything else the step holds
    x0 = torch.randn(32, 16)
    peaks = {}
    for keep in (False, True):
        torch.manual_seed(0)
        stages = [_Cached(n, keep), nn.Linear(16, 16)]
        params = list(stages[1].parameters())

        def step():
            return stages[1](stages[0](x0)).square().sum()
        step()  # the kept copy exists before the measurement, as after a profile
        peaks[keep] = (_step(step, params, stages, x0)[0], _step(step, params)[0])
    assert peaks[True][0] == peaks[False][0] == peaks[False][1], peaks
    assert peaks[True][1] == peaks[False][1] + 4 * n, peaks


def test_the_stages_make_no_stand_in_per_step_and_a_written_stand_in_is_remade():
    """The stand-ins the seam stages return are made at capture: a training step through
    the stages calls ``aten::zeros`` no more often than the original model does (oracle: the
    model's own step under the profiler); one a forward wrote to is not handed out again."""
    from remat_theory.torch.capture import seams

    torch.manual_seed(0)
    m = _Stack()
    ids = torch.randint(0, 20, (3, 6))
    chain = to_stages(m, ids)
    assert chain.method == "modules"

    def zeros_calls(step):
        step()  # warm
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step()
        return sum(e.count for e in prof.key_averages() if e.key == "aten::zeros")

    assert zeros_calls(lambda: chain(ids).sum().backward()) == \
        zeros_calls(lambda: m(ids)["logits"].sum().backward())
    assert torch.equal(chain(ids), m(ids)["logits"])
    cache = {}
    spec = seams.value_spec(torch.ones(1, 1))
    a = seams.standin(spec, False, cache)
    assert seams.standin(spec, False, cache) is a and not a.any()
    a.add_(1)  # a forward that writes into a stand-in
    b = seams.standin(spec, False, cache)
    assert b is not a and not b.any() and b.shape == (1, 1)
    pair = seams.value_spec((torch.ones(1, 1), None, torch.ones(2, 3)))
    c = seams.standin(pair, False, cache)
    assert seams.standin(pair, False, cache) is c
    c[0].mul_(2)  # a write to one element of a kept tuple: the tuple is made again
    d = seams.standin(pair, False, cache)
    assert d is not c and d[0] is not c[0] and d[1] is None and d[2].shape == (2, 3)
