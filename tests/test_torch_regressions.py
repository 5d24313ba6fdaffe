"""Regressions of the torch harness, each checked against plain autograd or the model itself.

- a loss_fn that returns the last stage's output itself (a stage returning a scalar) used to
  crash the process (the Loss op freed the loss's storage before its backward);
- ``eval()`` on a chain captured by ``torch.export`` kept the captured training-mode dropout;
- capture changed the user's input (made it require grad) and let torch's raw errors out;
- the drop-in's infeasible-budget error named two figures of different accountings.
"""
import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from remat_theory.torch import CaptureError, to_stages  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

ROOT = Path(__file__).resolve().parents[1]


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (a crash fails the test, not pytest)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


# --------------------------------------------------------------- 1. identity loss_fn
IDENTITY_LOSS = """
    import copy, torch
    from torch import nn
    import solvers
    from remat_theory.torch import (CheckpointOptions, CheckpointedSequential, ScheduleExecutor,
                                    profile)
    from remat_theory.torch.run.executor import plain_backprop

    torch.set_num_threads(1)

    class SquaredSum(nn.Module):  # the last stage returns the loss itself
        def forward(self, x):
            return x.pow(2).sum()

    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(16, 16), nn.Tanh()]
    model = nn.Sequential(*layers, SquaredSum())
    x = torch.randn(8, 16)
    identity = lambda out: out
    ref = copy.deepcopy(model)
    want = plain_backprop(ref, x, identity)

    def same_grads(m, what):
        for (name, a), b in zip(m.named_parameters(), ref.parameters()):
            assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7), (what, name)

    chain = profile(model, x, identity, repeats=1)
    model.zero_grad()
    for frac in (1.0, 0.8, 0.7):
        m = copy.deepcopy(model)
        ck = CheckpointedSequential(m, frac, loss_fn=identity, example_input=x,
                                    options=CheckpointOptions(profile_repeats=1))
        loss = identity(ck(x))
        loss.backward()
        assert torch.allclose(loss.detach(), want.loss), frac
        assert (ck.plan.recomputed > 0) == (frac < 1), (frac, ck.plan.recomputed)
        same_grads(m, f"drop-in {frac}")
        if frac < 1:
            sol = solvers.solve(chain, int(frac * chain.store_all_memory()), "dp")
            m = copy.deepcopy(model)
            res = ScheduleExecutor(m, identity, x, output_saved=chain.output_saved).run(sol.schedule)
            assert torch.allclose(res.loss, want.loss)
            assert torch.allclose(res.input_grad, want.input_grad)
            same_grads(m, f"executor {frac}")
    print("ok")
"""


@pytest.mark.parametrize("isolated", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_identity_loss_fn_on_a_scalar_last_stage_runs_with_plain_gradients(isolated, capsys):
    """``loss_fn=lambda out: out``: the loss is x_L itself.  It used to be released by the
    Loss op before its backward (SIGSEGV in the profile); under ``slow`` run in a subprocess
    so that a crash fails this test instead of killing pytest (a fresh interpreter importing
    torch: 3 s), by default in this process."""
    if not isolated:
        exec(compile(textwrap.dedent(IDENTITY_LOSS), "IDENTITY_LOSS", "exec"), {"__name__": "identity_loss"})
        assert capsys.readouterr().out.strip().endswith("ok")
        return
    r = _run_isolated(IDENTITY_LOSS)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (
        f"exit status {r.returncode} (-11: SIGSEGV)\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")


# --------------------------------------------------------------- 2. eval of an exported chain
def _tiny_albert():
    tf = pytest.importorskip("transformers")
    cfg = tf.AlbertConfig(vocab_size=50, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=64,
                          max_position_embeddings=16, hidden_dropout_prob=0.1,
                          attention_probs_dropout_prob=0.1)
    torch.manual_seed(0)
    model = tf.AlbertModel(cfg).train()
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(1))
    return model, ids


def test_eval_of_an_exported_chain_computes_the_models_eval_output():
    """An exported graph keeps the training-mode dropout of its capture: in eval mode the
    chain answers with the model's own eval forward, and its stages refuse to run."""
    model, ids = _tiny_albert()
    chain = to_stages(model, ids, method="export")
    assert chain.method == "export"
    chain.eval()
    assert not model.training
    with torch.no_grad():
        a, b = chain(ids), chain(ids)
        want = copy.deepcopy(model).eval()(ids).last_hidden_state
    assert torch.equal(a, b)
    assert torch.equal(a, want)
    with pytest.raises(CaptureError, match="captured by torch.export in train mode"):
        chain.stages[0](ids)
    # back in training mode, the captured graph runs again (dropout on)
    chain.train()
    torch.manual_seed(3)
    got = chain(ids)
    torch.manual_seed(3)
    assert torch.equal(got, model(ids).last_hidden_state)
    assert not torch.equal(got, want)


def test_model_eval_alone_switches_an_exported_chain_too():
    """``model.eval()`` (not the chain's) also reaches the chain: two passes agree."""
    model, ids = _tiny_albert()
    chain = to_stages(model, ids)  # ALBERT falls back to export
    assert chain.method == "export"
    model.eval()
    with torch.no_grad():
        assert torch.equal(chain(ids), chain(ids))
        assert torch.equal(chain(ids), model(ids).last_hidden_state)


# --------------------------------------------------------------- 3. capture and the caller's input
def _tiny_wav2vec2():
    tf = pytest.importorskip("transformers")
    cfg = tf.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, conv_dim=(32, 32), conv_kernel=(10, 3),
                            conv_stride=(5, 2), num_feat_extract_layers=2, mask_time_prob=0,
                            layerdrop=0, hidden_dropout=0.0, attention_dropout=0.0,
                            activation_dropout=0.0, feat_proj_dropout=0.0)
    torch.manual_seed(0)
    return tf.Wav2Vec2Model(cfg).train(), torch.randn(2, 400, generator=torch.Generator().manual_seed(2))


def test_wav2vec2_captures_without_touching_the_callers_input():
    """wav2vec2's feature extractor sets ``requires_grad`` on a view of its input in training
    mode, which torch refuses on a differentiable input: the capture used to let torch's raw
    RuntimeError out.  It now captures (by export), reproduces the model, trains under the
    drop-in with the model's gradients, and leaves the caller's input as it was."""
    from remat_theory.torch import CheckpointOptions, CheckpointedSequential
    model, x = _tiny_wav2vec2()
    ref = copy.deepcopy(model)
    chain = to_stages(model, x)
    assert not x.requires_grad and x.grad_fn is None
    with torch.no_grad():
        assert torch.equal(chain(x), ref(x).last_hidden_state)
    ck = CheckpointedSequential(chain, 0.9, example_input=x,
                                options=CheckpointOptions(profile_repeats=1))
    assert ck.plan.recomputed > 0
    out = ck(x)
    out.sum().backward()
    want = ref(x).last_hidden_state
    want.sum().backward()
    assert torch.allclose(out, want)
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        assert (a.grad is None) == (b.grad is None), name
        if a.grad is not None:
            assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6), name
    assert not x.requires_grad and x.grad is None


@pytest.mark.parametrize("requires_grad", [False, True])
def test_capture_leaves_the_callers_input_alone(requires_grad):
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(8, 8)
            self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

        def forward(self, x):
            h = self.inp(x)
            for layer in self.layers:
                h = torch.tanh(layer(h)) + h
            return h

    for method in ("auto", "export"):
        x = torch.randn(2, 8, requires_grad=requires_grad)
        before = x.detach().clone()
        to_stages(Stack(), x, method=method)
        assert x.requires_grad == requires_grad and x.grad is None and x.is_leaf, method
        assert torch.equal(x.detach(), before)


def test_a_failing_forward_is_a_capture_error_naming_the_model():
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            return self.lin(x) @ torch.ones(3, 3)  # a shape error inside torch

    x = torch.randn(2, 8)
    with pytest.raises(CaptureError, match=r"capturing Broken failed: RuntimeError.*by hand") as e:
        to_stages(Broken(), x)
    assert isinstance(e.value.__cause__, RuntimeError)
    assert not x.requires_grad


# --------------------------------------------------------------- 4. the figures of an infeasible budget
def _shared_stages():
    """Stages sharing one Linear (an unrolled cell): the drop-in reserves its summed gradient."""
    torch.manual_seed(0)
    shared = nn.Linear(32, 32)
    stages = [nn.Linear(32, 32), nn.Tanh()]
    for _ in range(3):
        stages += [shared, nn.Tanh(), nn.Linear(32, 32), nn.Tanh()]
    return stages, torch.randn(16, 32, generator=torch.Generator().manual_seed(4))


def test_infeasible_budget_names_figures_that_are_accepted():
    """Both figures of the error count the reserve (shared gradients): the smallest feasible
    budget named is accepted, and the store-all figure named runs store-all (it used to
    leave the reserve out, so that budget was itself refused)."""
    import re

    from remat_theory.model.errors import InfeasibleBudgetError
    from remat_theory.torch import Budget, CheckpointOptions, CheckpointedSequential

    stages, x = _shared_stages()
    with pytest.raises(InfeasibleBudgetError) as e:
        CheckpointedSequential(stages, Budget.activations(1000), example_input=x,
                               options=CheckpointOptions(profile_repeats=1))
    text = str(e.value)
    smallest = int(re.search(r"smallest feasible budget is (\d+) B", text).group(1))
    store_all = int(re.search(r"store-all needs (\d+) B", text).group(1))
    assert smallest == e.value.smallest_feasible
    ck = CheckpointedSequential(stages, Budget.activations(smallest), example_input=x,
                                options=CheckpointOptions(profile_repeats=1))
    assert ck.plan.tree is not None and ck.plan.recomputed > 0
    ck = CheckpointedSequential(stages, Budget.activations(store_all), example_input=x,
                                options=CheckpointOptions(profile_repeats=1))
    assert ck.plan.tree is None and ck.plan.recomputed == 0  # plain autograd
    ck = CheckpointedSequential(stages, Budget.activations(store_all - 1),
                                example_input=x,
                                options=CheckpointOptions(profile_repeats=1))
    assert ck.plan.tree is not None
    assert "both figures with the reserve" in text


def test_infeasible_step_budget_names_the_plain_step_it_accepts():
    import re

    from remat_theory.model.errors import InfeasibleBudgetError
    from remat_theory.torch import CheckpointOptions, CheckpointedSequential

    stages, x = _shared_stages()
    with pytest.raises(InfeasibleBudgetError) as e:
        CheckpointedSequential(stages, "40000B", example_input=x,
                               options=CheckpointOptions(profile_repeats=1))
    text = str(e.value)
    smallest = int(re.search(r"smallest feasible step budget is (\d+) B", text).group(1))
    plain = int(re.search(r"plain step needs about (\d+) B", text).group(1))
    ck = CheckpointedSequential(stages, f"{smallest}B", example_input=x,
                                options=CheckpointOptions(profile_repeats=1))
    assert ck.plan.tree is not None
    ck = CheckpointedSequential(stages, f"{plain}B", example_input=x,
                                options=CheckpointOptions(profile_repeats=1))
    assert ck.plan.tree is None and ck.plan.recomputed == 0  # plain autograd
