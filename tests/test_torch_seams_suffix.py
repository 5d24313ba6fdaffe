"""The suffix stage of a capture at the model's layers runs the modules after the last layer
directly (no replay of the model's forward) only where the record proves that is the same
computation; the oracle is the original eager model (outputs and gradients bit for bit)."""
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from remat_theory.torch.capture.chain import to_stages  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


class _Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x, mask):
        return torch.tanh(self.lin(x)) * mask


class _Net(nn.Module):
    """A stack of layers, a prelude (a mask made by the forward's own code), then ``tail``
    after the last layer: what the forward does between its final modules."""

    def __init__(self, tail, d=8, n=3):
        super().__init__()
        self.layers = nn.ModuleList(_Layer(d) for _ in range(n))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 5)
        self.tail = tail
        self.forwards = 0

    def forward(self, x):
        self.forwards += 1
        mask = (torch.arange(x.shape[1]) % 2 == 0).to(x.dtype)[None, :, None] + 0.5
        x = x * 1.0
        for layer in self.layers:
            x = layer(x, mask)
        h = self.norm(x)
        if self.tail == "view":
            h = h[:, 1:, :]  # a view: the head reads part of the norm's output
        elif self.tail == "in_place":
            h.mul_(2.0)  # no module call, same tensor: only the version counter tells
        elif self.tail == "new":
            h = h * 2.0  # a new tensor made by the forward's code
        return self.head(h)


def _grads(model, fn):
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    fn().square().mean().backward()
    out = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return out


@pytest.mark.parametrize("tail,direct", [("plain", True), ("view", True),
                                         ("in_place", False), ("new", False)])
def test_the_suffix_runs_its_modules_directly_only_where_that_is_the_model(tail, direct):
    torch.manual_seed(0)
    model = _Net(tail)
    x = torch.randn(2, 6, 8, requires_grad=False)
    chain = to_stages(model, x, method="modules")
    stages = list(chain)
    assert [s.kind for s in stages][-1] == "suffix"
    runner = stages[-1].runner
    assert (runner.direct is not None) == direct

    def through_stages():
        y = x
        for s in stages:
            y = s(y)
        return y
    want = model(x)
    before = model.forwards
    got = through_stages()
    # the prefix runs the forward once (to the first layer); a replayed suffix once more
    assert model.forwards - before == (1 if direct else 2)
    assert torch.equal(got, want)
    g_model = _grads(model, lambda: model(x))
    g_stages = _grads(model, through_stages)
    assert all(torch.equal(a, b) for a, b in zip(g_model, g_stages))


def test_a_direct_suffix_equals_the_replay_on_a_transformers_model():
    pytest.importorskip("transformers")
    from remat_theory.lab.frontier_networks import build_workload
    w = build_workload("llama", "test")
    stages = list(w.stages)
    runner = stages[-1].runner
    assert stages[-1].kind == "suffix" and runner.direct is not None

    def through_stages():
        y = w.example_input
        for s in stages:
            y = s(y)
        return y
    direct = through_stages()
    g_direct = _grads(w.model, through_stages)
    saved, runner.direct = runner.direct, None
    try:
        replay = through_stages()
        g_replay = _grads(w.model, through_stages)
    finally:
        runner.direct = saved
    g_model = _grads(w.model, lambda: w.call(w.model))
    assert torch.equal(direct, replay)
    assert all(torch.equal(a, b) and torch.equal(a, c)
               for a, b, c in zip(g_direct, g_replay, g_model))
