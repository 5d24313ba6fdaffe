"""Instance families: seeded generators of chains that look like real networks.

Every function takes the number of stages and a seed and returns a :class:`Chain`; the
same arguments always give the same chain.  Sizes are integers in abstract units
(``unit`` bytes each, default 1) so that exact solvers stay fast; times are in seconds-like
units.  The shapes follow the profiles reported in the Rotor papers (Beaumont et al.) for
ResNets, Transformers and unrolled RNNs.
"""
from __future__ import annotations

import numpy as np

from remat_theory.model import fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import ChainError


def _rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_length(length, minimum: int = 1) -> int:
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < minimum:
        raise ChainError(f"length = {length!r} must be an integer >= {minimum}")
    return int(length)


def _overheads(rng, sizes, on: bool, frac: float = 0.5) -> list:
    if not on:
        return [0] * len(sizes)
    return [int(rng.integers(0, max(1, int(s * frac)) + 1)) for s in sizes]


def uniform_random(length: int, seed=0, *, max_time: float = 10.0, max_size: int = 10,
                   overheads: bool = True, integer_times: bool = True, unit: int = 1) -> Chain:
    """Independent uniform stage values: times in [1, max_time], activations in
    [1, max_size], tapes in [x_{i+1}, x_{i+1} + max_size]."""
    L = _check_length(length)
    rng = _rng(seed)

    def t(n):
        if integer_times:
            return [float(v) for v in rng.integers(1, int(max_time) + 1, n)]
        return [float(v) for v in rng.uniform(1.0, max_time, n)]

    x = [int(v) for v in rng.integers(1, max_size + 1, L + 1)]
    tape = [x[i + 1] + int(rng.integers(0, max_size + 1)) for i in range(L)]
    fo = _overheads(rng, x[1:], overheads)
    bo = _overheads(rng, x, overheads)
    return Chain(t(L), t(L + 1), [v * unit for v in x], [v * unit for v in tape],
                 [v * unit for v in fo], [v * unit for v in bo], name=f"random-{L}-s{seed}")


def resnet_like(length: int, seed=0, *, overheads: bool = True, unit: int = 1) -> Chain:
    """Large early activations that shrink: four groups of stages, each halving the
    activation size (spatial size / 4, channels x 2); tapes about 2-3 activations (conv +
    batch norm + ReLU save input, normalized output and mask); compute roughly constant per
    stage, backward about twice the forward."""
    L = _check_length(length)
    rng = _rng(seed)
    base = 64
    x = [base]
    for i in range(L):
        group = min(3, (4 * i) // max(L, 1))
        x.append(max(1, base >> group))
    tape = [x[i + 1] * int(rng.integers(2, 4)) for i in range(L)]
    fwd = [float(rng.integers(8, 13)) for _ in range(L)]
    bwd = [2 * f + float(rng.integers(0, 3)) for f in fwd] + [1.0]
    fo = [x[i + 1] // 2 if overheads else 0 for i in range(L)]
    bo = [x[i] // 2 if overheads else 0 for i in range(L + 1)]
    return Chain(fwd, bwd, [v * unit for v in x], [v * unit for v in tape],
                 [v * unit for v in fo], [v * unit for v in bo], name=f"resnet-{L}-s{seed}")


def transformer_like(length: int, seed=0, *, overheads: bool = True, unit: int = 1) -> Chain:
    """Homogeneous stages with heavy tapes: each block keeps about 8 times its output
    (attention scores, MLP hidden activations); small jitter on times; the first stage is
    an embedding with a light tape and the loss stage a projection."""
    L = _check_length(length)
    rng = _rng(seed)
    xs = 4
    x = [xs] * (L + 1)
    tape = [xs * 8] * L
    tape[0] = xs * 2
    fwd = [10.0 + float(rng.integers(0, 2)) for _ in range(L)]
    bwd = [2.0 * f for f in fwd] + [5.0]
    fwd[0], bwd[0] = 2.0, 3.0
    fo = [xs if overheads else 0] * L
    bo = [2 * xs if overheads else 0] * (L + 1)
    return Chain(fwd, bwd, [v * unit for v in x], [v * unit for v in tape],
                 [v * unit for v in fo], [v * unit for v in bo], name=f"transformer-{L}-s{seed}")


def rnn_like(length: int = 100, seed=0, *, overheads: bool = False, unit: int = 1) -> Chain:
    """An unrolled recurrent cell (BPTT, Gruslys et al. 2016): long and homogeneous; the
    hidden state is small and the tape (gates) about 4 times larger."""
    L = _check_length(length)
    rng = _rng(seed)
    h = 2
    fwd = float(rng.integers(1, 3))
    fo = [h // 2 if overheads else 0] * L
    bo = [h // 2 if overheads else 0] * (L + 1)
    return Chain([fwd] * L, [2 * fwd] * L + [1.0], [h * unit] * (L + 1), [4 * h * unit] * L,
                 [v * unit for v in fo], [v * unit for v in bo], name=f"rnn-{L}-s{seed}")


def homogeneous(length: int, seed=0, *, fwd_time: float = 1.0, bwd_time: float = 1.0,
                x_size: int = 1, tape_size: int | None = None) -> Chain:
    """Exactly equal stages and a free loss: the setting of Revolve's closed form."""
    del seed
    return Chain.homogeneous(length, fwd_time, bwd_time, x_size, tape_size)


def coprime_sizes(length: int, seed=0, *, low: int = 1000, high: int = 20000,
                  overheads: bool = True) -> Chain:
    """Random chains whose sizes have no common factor (a gcd of 1, as sizes in bytes
    usually have): activations in [low, high], tapes up to ``high`` above their output,
    times in [0, 10] with two decimals.  The DPs count memory in units of the gcd, so
    their tables have about ``high * L`` units here; exhaustive search does not care
    (issue #29: ``auto`` once said "infeasible" on such a chain)."""
    L = _check_length(length)
    rng = _rng(seed)
    x = [int(v) for v in rng.integers(low, high + 1, L + 1)]
    tape = [x[i + 1] + int(rng.integers(0, high + 1)) for i in range(L)]
    fo = _overheads(rng, x[1:], overheads, 0.25)
    if np.gcd.reduce(x + tape + fo) > 1:  # g divides x_0, so g and x_0 + 1 share no factor
        x[0] += 1
    times = lambda n: [round(float(v), 2) for v in rng.uniform(0.0, 10.0, n)]  # noqa: E731
    return Chain(times(L), times(L + 1), x, tape, fo, [0] * (L + 1),
                 name=f"coprime-{L}-s{seed}")


def zero_times(length: int, seed=0, *, max_size: int = 10, overheads: bool = True) -> Chain:
    """Random sizes and every time 0: every schedule has makespan 0, so an exact solver's
    objective is empty (issue #29: HiGHS's presolve failed on such an infeasible model)."""
    base = uniform_random(length, seed, max_size=max_size, overheads=overheads)
    L = base.length
    return base.replace(fwd_time=[0.0] * L, bwd_time=[0.0] * (L + 1), fall_time=[0.0] * L,
                        name=f"zero-time-{L}-s{seed}")


FAMILIES = {
    "random": uniform_random,
    "resnet": resnet_like,
    "transformer": transformer_like,
    "rnn": rnn_like,
    "homogeneous": homogeneous,
    "coprime": coprime_sizes,
    "zero-time": zero_times,
}


def family(name: str):
    """The generator function of a family by name."""
    if name not in FAMILIES:
        raise ChainError(f"unknown family {name!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[name]


def make(name: str, length: int, seed=0, **kwargs) -> Chain:
    """``make("resnet", 8, seed=3)``: a chain of the named family."""
    return family(name)(length, seed, **kwargs)


def with_fall_costs(chain: Chain, seed: int = 0) -> Chain:
    """``chain`` with recording-forward costs of its own, as a profiled network has them:
    the ``fall-costs`` variation (:data:`remat_theory.model.fields.VARIATIONS`).  Seeded,
    deterministic."""
    return fields.variation("fall-costs").apply(chain, seed)


def with_unsaved_outputs(chain: Chain, seed: int = 0, fraction: float = 0.5) -> Chain:
    """``chain`` with some stage outputs read by no backward (``output_saved`` false), as a
    profiled MLP has them: the ``unsaved-outputs`` variation, each output unsaved with
    probability ``fraction`` (at least one).  Seeded, deterministic."""
    return fields.variation("unsaved-outputs").apply(chain, seed, fraction=fraction)


def with_variations(chain: Chain, names, seed: int = 0) -> Chain:
    """``chain`` with each named variation applied in table order, each seeded by ``seed``
    (``with_variations(c, ("fall-costs", "unsaved-outputs"), s)`` is
    ``with_unsaved_outputs(with_fall_costs(c, s), s)``)."""
    for name in fields.parse_variations(names):
        chain = fields.variation(name).apply(chain, seed)
    return chain
