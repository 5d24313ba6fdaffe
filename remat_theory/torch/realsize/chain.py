"""A chain of a model at its real configuration, on fake tensors.

:func:`real_size_profile` builds the model from its config under ``FakeTensorMode``
(nothing allocated, nothing downloaded) with each repeated stack cut to at most three
layers (its first, one middle, its last), profiles it (:mod:`.fake_profile`) and replicates
the middle layer's figures to the stack's real depth.  The replication is allowed only
where the layers are identical by construction, which :func:`identical_layers` checks on
the full model built on the meta device: every middle layer of a stack has the same
modules, parameter and buffer shapes and dtypes, and the same plain attributes (its index
apart), and no config field that lists one value per layer varies among them.  The tests
also compare a replicated profile with the direct one at small sizes.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.torch.inplace.plan import Gradients, calibrate, measured_gradients
from remat_theory.torch.inplace.realstep import real_step
from remat_theory.torch.inplace.records import LayerProfile, default_loss, held_beside
from remat_theory.torch.realsize.fake_profile import FakeProfile, profile_fake
from remat_theory.torch.realsize.meter import Work
from remat_theory.torch.realsize.presets import LAYER_FIELDS, Spec, make_batch
from remat_theory.torch.realsize.workspace import SHARED


__all__ = ["RealSize", "identical_layers", "real_size_profile", "DTYPES"]

DTYPES = {"fp32": (torch.float32, None), "bf16": (torch.bfloat16, None),
          "mixed": (torch.float32, torch.bfloat16)}
_CONVOLUTIONS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose1d,
                 torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
KEEP = 3  # layers per stack profiled: the first, one middle, the last
_INDEX_ATTRS = {"layer_idx", "layer_id", "idx", "layer_index", "block_idx"}


@dataclass
class RealSize:
    """A model's chain at its real configuration: ``profile`` (a :class:`LayerProfile`,
    times zero until a device's cost model fills them), ``gradients`` (:class:`Gradients`),
    per layer the :class:`Work` of its no-grad forward, recording forward and backward, the
    loss stage's and the prefix's, ``chained``, ``paths`` (the real model's layer paths),
    ``params`` (parameters), ``param_bytes``, ``replicated`` (layers whose figures are
    another layer's), the wall time and the profiled stand-in's layer count."""

    spec: Spec
    batch: int
    seq: int
    dtype: str
    profile: LayerProfile
    gradients: Gradients
    fck: list
    fall: list
    bwd: list
    loss: Work
    prefix: Work
    chained: list
    paths: list
    params: int
    param_bytes: int
    replicated: int
    profiled_layers: int
    plain_step: int = 0  # the profiled model's plain step peak (bytes; the real one's if not replicated)
    convolutions: bool = False  # the model has convolution modules (their GPU workspaces unknown)
    unmeasured: tuple = ()  # aten calls whose CPU workspace could not be measured (cpu_workspace)


def _reduced_config(config):
    c = copy.deepcopy(config)
    aliases = getattr(type(c), "attribute_map", {})
    for f in LAYER_FIELDS:
        if aliases.get(f, f) not in LAYER_FIELDS:  # ConvNeXt's num_hidden_layers: its stages
            continue
        v = getattr(c, f, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > KEEP:
            setattr(c, f, KEEP)
    depths = getattr(c, "depths", None)
    if isinstance(depths, (list, tuple)):
        c.depths = [min(d, KEEP) for d in depths]
    return c


def _model(spec: Spec, config):
    import transformers as tf
    cls = getattr(tf, spec.model_class, None)
    if cls is None:
        raise RematError(f"transformers has no model class {spec.model_class!r}")
    return cls(config)


def _signature(module) -> tuple:
    out = []
    for name, m in module.named_modules():
        attrs = tuple(sorted((k, v) for k, v in vars(m).items()
                             if not k.startswith("_") and k not in _INDEX_ATTRS
                             and isinstance(v, (int, float, str, bool, type(None)))))
        params = tuple((n, tuple(p.shape), str(p.dtype)) for n, p in m.named_parameters(recurse=False))
        bufs = tuple((n, tuple(b.shape), str(b.dtype)) for n, b in m.named_buffers(recurse=False))
        out.append((name, type(m).__name__, attrs, params, bufs))
    return tuple(out)


def _stacks(model, paths) -> dict:
    """group (a layer path's parent) -> the layer modules of that stack in the model."""
    out = {}
    for p in paths:
        parent = p.rpartition(".")[0]
        if parent not in out:
            out[parent] = list(model.get_submodule(parent))
    return out


def identical_layers(spec: Spec, paths) -> dict:
    """Per stack of the layers at ``paths`` (their parent module's path), its depth in the
    full model, after checking (see the module docstring) that its middle layers are
    identical; RematError naming the first that is not."""
    with torch.device("meta"):
        full = _model(spec, copy.deepcopy(spec.config))
    depth = {}
    for parent, mods in _stacks(full, paths).items():
        depth[parent] = len(mods)
        middle = mods[1:-1]
        if len(middle) > 1:
            ref = _signature(middle[0])
            for j, m in enumerate(middle[1:], start=2):
                if _signature(m) != ref:
                    raise RematError(f"{spec.name}: layer {parent}.{j} differs from {parent}.1 "
                                     f"(its modules, shapes or attributes): the layers cannot "
                                     f"be replicated")
        stages = getattr(spec.config, "depths", None)  # a list per stage is not per layer
        stages = len(stages) if isinstance(stages, (list, tuple)) else -1
        for k, v in vars(spec.config).items():
            if isinstance(v, (list, tuple)) and len(v) == len(mods) != stages and len(mods) > KEEP:
                if len({repr(x) for x in v[1:-1]}) > 1:
                    raise RematError(f"{spec.name}: config.{k} varies from layer to layer "
                                     f"({v[1]!r}, ...): the layers cannot be replicated")
    del full
    return depth


def _expand(fp: FakeProfile, depth: dict, grads_other: int):
    """Index map full layer -> profiled layer, and the full paths."""
    groups: dict = {}
    for i, p in enumerate(fp.paths):
        groups.setdefault(p.rpartition(".")[0], []).append(i)
    index, paths = [], []
    for parent, idx in groups.items():
        n, k = depth[parent], len(idx)
        if n < k:
            raise RematError(f"stack {parent}: {k} layers profiled but {n} in the model")
        for j in range(n):
            r = 0 if j == 0 else k - 1 if j == n - 1 else min(1, k - 1)
            if n == k:
                r = j
            index.append(idx[r])
            paths.append(f"{parent}.{j}")
    return index, paths


def _pick(seq, index):
    return [seq[i] for i in index]


def _replicated(lp: LayerProfile, fp: FakeProfile, chain: Chain, index: list):
    """The profiled model's :class:`LayerProfile` and :class:`Gradients` at the full depth
    (``index``: full layer -> profiled layer): per-layer figures copied, what sits beside
    the chain placed again by the same rule (:func:`held_beside`: a value's first and last
    readers are the first and last full layers of the profiled ones that read it, the code
    after a layer holds what it held after the profiled one), each layer's gradients where
    the step made the profiled one's."""
    where: dict = {}  # profiled layer -> its full positions
    for j, r in enumerate(index):
        where.setdefault(r, []).append(j)
    values = {k: [where[a][0], where[b][-1], size]
              for k, (a, b, size) in enumerate(lp.value_grads)}
    calls = [SimpleNamespace(chained=c) for c in _pick(fp.chained, index)]
    held, between, value_grads = held_beside(values, _pick(fp.glue, index), chain.x_size, calls,
                                             apart=True)
    n = len(index)

    def at(f):  # a profiled layer's start -> the full one's (the chain's length: the loss)
        return where[f][0] if f in where else n

    held += [(at(f), b) for f, b in fp.layer_made]
    between += sum(b for _, b in fp.layer_made)
    kept = [(where[j][-1], b) for j, b in lp.outputs_kept]
    between += sum(b for _, b in kept) - sum(b for _, b in fp.moved)
    for f, b in fp.moved:
        held.remove((at(f), b))
    forward_only = [(at(f), at(u), b) for f, u, b in lp.forward_only]
    made = None
    if lp.grads_made is not None:
        made = {k: v for k, v in lp.grads_made.items() if not isinstance(k, int)}
        made.update({j: lp.grads_made[r] for j, r in enumerate(index) if r in lp.grads_made})
    prefix = lp.prefix_only or 0
    prof = LayerProfile(chain, prefix + between, lp.end_peak, 0.0, lp.shared_grad_bytes,
                        _pick(lp.draws, index), _pick(lp.bwd_rise[:-1], index) + [lp.bwd_rise[-1]],
                        _pick(lp.saves_output, index), None, lp.calibration, grads_made=made,
                        loss_rise=lp.loss_rise, prefix_only=prefix, held=held,
                        value_grads=value_grads, outputs_kept=kept, forward_only=forward_only)
    own = _pick(fp.own_grad, index)
    default = Gradients({i: g for i, g in enumerate(own) if g}, fp.other_grad)
    return prof, measured_gradients(prof, default)


ATTENTION_DROPOUT = ("attn_pdrop", "attention_probs_dropout_prob", "attention_dropout")
"""Config fields of the attention's dropout probability, set to 0 by ``fused_attention``."""


def real_size_profile(spec: Spec, batch: int, seq: int, dtype: str = "bf16", *,
                      replicate: bool = True, fused_attention: bool = True,
                      cpu_workspace: bool = False) -> RealSize:
    """The chain of ``spec`` at (batch, seq, dtype) from fake tensors (module docstring).
    ``replicate=False`` profiles every layer (the check of the replication).

    ``fused_attention`` (default): the attention's dropout probability is set to 0 for the
    profile.  A GPU's fused attention kernels (flash, memory-efficient) apply the dropout
    inside the kernel and save only the output and the log-sum-exp; the CPU's flash kernel,
    which the fake profile runs, has no dropout and falls back to the math path, which holds
    the (B, heads, S, S) probabilities, in fp32.  With the dropout at 0 the CPU's flash
    kernel stands in for the GPU's.  ``False``: the model as configured (the comparison with
    a real CPU profile).

    ``cpu_workspace``: count what this CPU's kernels allocate inside a call (oneDNN's
    convolution workspaces, :class:`.workspace.CpuWorkspace`: each distinct call measured
    once on real tensors, :data:`.workspace.SHARED` keeping them for the process), for the
    CPU as the target device; off for a GPU."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    if dtype not in DTYPES:
        raise RematError(f"dtype {dtype!r} must be one of {', '.join(DTYPES)}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise RematError(f"batch = {batch!r} must be a positive int")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise RematError(f"seq = {seq!r} must be a positive int")
    param_dtype, autocast = DTYPES[dtype]
    config = _reduced_config(spec.config) if replicate else copy.deepcopy(spec.config)
    if fused_attention:
        for f in ATTENTION_DROPOUT:
            if isinstance(getattr(config, f, None), float):
                setattr(config, f, 0.0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(param_dtype)
    try:
        with torch.device("meta"):  # the layers' shapes, no initialisation run
            model = _model(spec, config).train()
    finally:
        torch.set_default_dtype(old)
    # meta parameters become fake ones (empty_like of a meta tensor: a non-fake input)
    with FakeTensorMode(allow_non_fake_inputs=True):
        torch.manual_seed(0)
        model.to_empty(device="cpu")
        if hasattr(model, "tie_weights"):  # to_empty made each use of a shared weight its own
            model.tie_weights()
        data = make_batch(spec, batch, seq, param_dtype if spec.kind == "image" else None)
        ctx = (torch.autocast("cpu", dtype=autocast) if autocast is not None
               else contextlib.nullcontext())
        SHARED.refused.clear()
        with ctx:
            fp = profile_fake(model, (), data, default_loss, real_step=real_step, name=spec.name,
                              workspace=SHARED if cpu_workspace else None)
        convolutions = any(isinstance(m, _CONVOLUTIONS) for m in model.modules())
        refused = tuple(sorted(SHARED.refused)) if cpu_workspace else ()
        params = sum(p.numel() for p in model.parameters())
        pbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    lp = fp.layer
    calibrate(lp, measured_gradients(lp, Gradients(
        {i: g for i, g in enumerate(fp.own_grad) if g}, fp.other_grad)))
    depth = identical_layers(spec, fp.paths) if replicate else {
        p.rpartition(".")[0]: sum(q.rpartition(".")[0] == p.rpartition(".")[0] for q in fp.paths)
        for p in fp.paths}
    index, paths = _expand(fp, depth, fp.other_grad)
    c = lp.chain
    n = len(index)
    chain = Chain(fwd_time=[0.0] * n, bwd_time=[0.0] * (n + 1),
                  x_size=_pick(c.x_size[:-1], index) + [c.x_size[-1]],
                  tape_size=_pick(c.tape_size, index), fwd_overhead=_pick(c.fwd_overhead, index),
                  bwd_overhead=_pick(c.bwd_overhead[:-1], index) + [c.bwd_overhead[-1]],
                  fall_time=[0.0] * n, fall_overhead=_pick(c.fall_overhead, index),
                  name=spec.name)
    prof, grads = _replicated(lp, fp, chain, index)
    own = _pick(fp.own_grad, index)
    extra_params = sum(own) - sum(fp.own_grad)
    per_param = pbytes / max(1, params)
    return RealSize(spec, batch, seq, dtype, prof, grads, _pick(fp.fck, index),
                    _pick(fp.fall, index), _pick(fp.bwd, index), fp.loss, fp.prefix,
                    _pick(fp.chained, index), paths,
                    params + int(round(extra_params / per_param)), pbytes + extra_params,
                    n - len(fp.paths), len(fp.paths), fp.plain_step, convolutions, refused)
