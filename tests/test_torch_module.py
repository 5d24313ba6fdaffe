"""CheckpointedSequential trains exactly like the module it wraps."""
import copy

import pytest

torch = pytest.importorskip("torch")

from remat_theory.model.errors import InfeasibleBudgetError, RematError  # noqa: E402
from remat_theory.torch import CheckpointedSequential, build  # noqa: E402
from torch_device import DEVICE  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


def _train(model, forward, x, loss_fn, steps=3, seed=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(seed)
    grads = []
    for _ in range(steps):
        opt.zero_grad()
        xi = x.clone().requires_grad_(True)
        loss = loss_fn(forward(xi))
        loss.backward()
        grads.append(xi.grad.clone())
        opt.step()
    return grads


@pytest.mark.parametrize("network", ["resnet", "transformer"])
def test_training_steps_identical_to_the_plain_module(network):
    net = build(network, "test").to(DEVICE)
    plain = copy.deepcopy(net.model)
    # 0.8: counted by the allocator, the test ResNet's smallest feasible budget is 75%
    ck = CheckpointedSequential(net.model, budget=0.8, solver="dp",
                                example_input=net.example_input, loss_fn=net.loss_fn)
    assert ck.schedule.forward_count() > ck.chain.length  # it does recompute
    g_plain = _train(plain, plain, net.example_input, net.loss_fn)
    g_ck = _train(net.model, ck, net.example_input, net.loss_fn)
    for a, b in zip(g_plain, g_ck):
        assert torch.equal(a, b)
    for (k, a), b in zip(plain.state_dict().items(), net.model.state_dict().values()):
        assert torch.equal(a, b), k


def test_outside_training_it_is_the_plain_model():
    net = build("mlp", "test").to(DEVICE)
    ck = CheckpointedSequential(net.model, budget=1.0, example_input=net.example_input,
                                loss_fn=net.loss_fn)
    net.model.eval()
    with torch.no_grad():
        assert torch.equal(ck(net.example_input), net.model(net.example_input))


def test_budget_errors():
    net = build("rnn", "test").to(DEVICE)
    with pytest.raises(InfeasibleBudgetError, match="smallest feasible budget is") as e:
        CheckpointedSequential(net.model, budget=100, example_input=net.example_input,
                               loss_fn=net.loss_fn)
    assert e.value.smallest_feasible > 100
    with pytest.raises(RematError, match="fraction"):
        CheckpointedSequential(net.model, budget=1.5, example_input=net.example_input,
                               loss_fn=net.loss_fn)
    with pytest.raises(RematError, match="example_input"):
        CheckpointedSequential(net.model, budget=0.5)
