"""Built-in networks for the harness, made from ``torch.nn`` only (nothing downloaded).

Each builder returns a :class:`Network`: the model (an ``nn.Sequential`` whose flattened
children are the stages), an example input, and a loss function of the model output (its
target is fixed inside, drawn from a seeded generator).  Three scales: ``"test"`` (tiny, for
the CPU test suite), ``"small"`` (``remat confirm`` on a CPU; seconds per network) and
``"large"`` (sized for one GPU, where per-stage compute must dominate the executor's
per-operation Python overhead for times to be predictable; activations of 8 to 256 MiB).

* ``mlp``: Linear / ReLU / Dropout stages (dropout exercises RNG replay).
* ``resnet``: a ResNet-like conv stack (residual blocks with BatchNorm, two stride-2
  downsamplings, so activations shrink along the chain), pooled linear head.
* ``transformer``: an input projection, ``nn.TransformerEncoderLayer`` stages (with
  dropout), mean-pooled linear head.
* ``rnn``: an unrolled ``nn.GRUCell`` over a sequence: stage t maps the hidden state
  h_t to h_{t+1} = cell(u_t, h_t), where the sequence element u_t is data held by the
  stage; the cell's parameters are shared by every step (backpropagation through time,
  the setting of Gruslys et al.).  The network input x_0 is the initial hidden state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from remat_theory.model.errors import RematError


@dataclass
class Network:
    name: str
    model: nn.Sequential
    example_input: torch.Tensor
    loss_fn: Callable

    def to(self, device) -> "Network":
        self.model.to(device)
        self.example_input = self.example_input.to(device)
        if hasattr(self.loss_fn, "to"):
            self.loss_fn.to(device)
        return self


class TargetLoss(nn.Module):
    """``loss_fn(output)``: MSE or cross-entropy against a fixed target (moves with .to)."""

    def __init__(self, target: torch.Tensor, kind: str):
        super().__init__()
        self.register_buffer("target", target)
        self.kind = kind

    def forward(self, out):
        if self.kind == "ce":
            return F.cross_entropy(out, self.target)
        return F.mse_loss(out, self.target)


class ResidualBlock(nn.Module):
    """conv-BN-ReLU-conv-BN plus a shortcut (1x1 strided conv when the shape changes), ReLU."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.short is None else self.short(x)))


class PoolHead(nn.Module):
    """Global average pooling (over the spatial dims, or the sequence) and a linear layer."""

    def __init__(self, dims, cin: int, cout: int):
        super().__init__()
        self.dims = dims
        self.fc = nn.Linear(cin, cout)

    def forward(self, x):
        return self.fc(x.mean(dim=self.dims))


class RecurrentStep(nn.Module):
    """One unrolled step h -> cell(u, h) of a shared recurrent cell; u is a fixed input."""

    def __init__(self, cell: nn.GRUCell, u: torch.Tensor):
        super().__init__()
        self.cell = cell
        self.register_buffer("u", u)

    def forward(self, h):
        return self.cell(self.u, h)


SCALES = ("test", "small", "large")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mlp(scale: str = "small", seed: int = 0, batch: int | None = None,
        size: int | None = None) -> Network:
    batch_, width, depth, classes = {"test": (64, 16, 2, 5), "small": (512, 256, 6, 10),
                                      "large": (8192, 4096, 6, 10)}[scale]
    batch, width = batch or batch_, size or width
    torch.manual_seed(seed)
    layers = [nn.Linear(width, width)]
    for _ in range(depth - 1):
        layers += [nn.ReLU(), nn.Dropout(0.1), nn.Linear(width, width)]
    layers += [nn.ReLU(), nn.Linear(width, classes)]
    g = _gen(seed)
    x = torch.randn(batch, width, generator=g)
    target = torch.randint(0, classes, (batch,), generator=g)
    return Network("mlp", nn.Sequential(*layers), x, TargetLoss(target, "ce"))


def resnet(scale: str = "small", seed: int = 0, batch: int | None = None,
           size: int | None = None) -> Network:
    batch_, side, c = {"test": (2, 8, 4), "small": (16, 32, 16), "large": (128, 64, 64)}[scale]
    batch, side = batch or batch_, size or side
    torch.manual_seed(seed)
    per_width = 1 if scale == "test" else 2  # residual blocks per width
    blocks = []
    for k, width in enumerate((c, 2 * c, 4 * c)):
        cin = c if k == 0 else width // 2
        blocks.append(ResidualBlock(cin, width, 1 if k == 0 else 2))
        blocks += [ResidualBlock(width, width) for _ in range(per_width - 1)]
    model = nn.Sequential(
        nn.Conv2d(3, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
        nn.Sequential(*blocks), PoolHead((2, 3), 4 * c, 10))
    g = _gen(seed)
    x = torch.randn(batch, 3, side, side, generator=g)
    target = torch.randint(0, 10, (batch,), generator=g)
    return Network("resnet", model, x, TargetLoss(target, "ce"))


def transformer(scale: str = "small", seed: int = 0, batch: int | None = None,
                size: int | None = None) -> Network:
    batch_, seq, feat, d, heads, ff, layers = {
        "test": (2, 12, 8, 16, 2, 32, 3), "small": (16, 64, 32, 128, 4, 256, 6),
        "large": (32, 512, 64, 1024, 16, 4096, 8)}[scale]
    batch, seq = batch or batch_, size or seq
    torch.manual_seed(seed)
    mods = [nn.Linear(feat, d)]
    mods += [nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, batch_first=True)
             for _ in range(layers)]
    mods += [PoolHead(1, d, feat)]
    g = _gen(seed)
    x = torch.randn(batch, seq, feat, generator=g)
    target = torch.randn(batch, feat, generator=g)
    return Network("transformer", nn.Sequential(*mods), x, TargetLoss(target, "mse"))


def rnn(scale: str = "small", seed: int = 0, batch: int | None = None,
        size: int | None = None) -> Network:
    batch_, steps, feat, hidden = {"test": (4, 6, 8, 16), "small": (64, 32, 64, 256),
                                    "large": (1024, 64, 512, 2048)}[scale]
    batch, steps = batch or batch_, size or steps
    torch.manual_seed(seed)
    cell = nn.GRUCell(feat, hidden)
    g = _gen(seed)
    seq = torch.randn(steps, batch, feat, generator=g)
    mods = [RecurrentStep(cell, seq[t].clone()) for t in range(steps)]
    mods += [nn.Linear(hidden, 4)]
    h0 = torch.randn(batch, hidden, generator=g)
    target = torch.randn(batch, 4, generator=g)
    return Network("rnn", nn.Sequential(*mods), h0, TargetLoss(target, "mse"))


NETWORKS = {"mlp": mlp, "resnet": resnet, "transformer": transformer, "rnn": rnn}


def build(name: str, scale: str = "small", seed: int = 0, *, batch: int | None = None,
          size: int | None = None) -> Network:
    """A built-in network by name (see :data:`NETWORKS`) and scale (``test``, ``small`` or
    ``large``).  ``batch`` and ``size`` override the scale's batch size and input size (the
    MLP's width, the ResNet's image side, the transformer's sequence length, the RNN's
    number of steps)."""
    if name not in NETWORKS:
        raise RematError(f"unknown network {name!r} (known: {', '.join(NETWORKS)})")
    if scale not in SCALES:
        raise RematError(f"unknown scale {scale!r} (known: {', '.join(SCALES)})")
    for label, v in (("batch", batch), ("size", size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise RematError(f"{label} = {v!r} must be a positive integer")
    net = NETWORKS[name](scale, seed, batch=batch, size=size)
    net.model.train()
    return net
