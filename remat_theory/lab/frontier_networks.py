"""The networks of the frontier, as a user has them: the original model, its inputs and a loss.

A :class:`Workload` is what :mod:`remat_theory.lab.frontier` measures: the ORIGINAL eager
model (``model``) and how one training step calls it (``call(model)`` returns the tensor the
loss reads), and, for remat, the model captured as a chain of stages
(:func:`~remat_theory.torch.capture.chain.to_stages`; ``stages`` is None and ``capture_error`` says
why when it cannot be captured).  Every method of the frontier runs on the same parameters.

The built-in workloads (:data:`WORKLOADS`) are ``transformers`` models made from small
configurations with random weights (nothing is downloaded) and dropout 0, so that every
method's gradients can be compared with the plain model's bit for bit: ``llama``, ``qwen2``,
``opt``, ``gpt-neo``, ``gpt2`` (causal LMs: token ids in, next-token loss on the logits),
``distilbert`` (sequence classification, an attention mask padding half the batch),
``vit``, ``convnext``, ``swin`` and ``resnet`` (image classification).  Two scales: ``test``
(tiny, for the test suite), ``small`` (the CPU frontier) and ``large`` (one GPU).  Any network of
:func:`~remat_theory.lab.networks.build` is accepted too (:func:`from_network`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from remat_theory.lab.networks import TargetLoss, build, import_transformers, seeded_generator
from remat_theory.model.errors import RematError
from remat_theory.torch.capture.call_inputs import example_inputs
from remat_theory.torch.capture.chain import StageChain, to_stages
from remat_theory.torch.capture.stages import split_stages


@dataclass
class Workload:
    """One network as the frontier measures it (see the module docstring)."""

    name: str
    model: nn.Module
    call: Callable  # call(model) -> the output tensor the loss reads
    loss_fn: Callable
    example_input: torch.Tensor  # x_0 of the chain (token ids or pixels)
    stages: list | None = None
    capture_error: str = ""
    config: dict = field(default_factory=dict)
    inputs: object = None  # what the model was captured with (None: stages given by hand)

    def graph_stages(self) -> list:
        """Stages that ``torch.compile`` traces into one graph with the schedule: the model
        captured by ``torch.export`` (the default capture at the model's layers runs the
        model's own Python between seams, which dynamo does not trace whole), or the
        hand-split stages themselves."""
        if self.inputs is None:
            return list(self.stages)
        return split_stages(to_stages(self.model, self.inputs, method="export"))

    @property
    def other_inputs(self) -> dict:
        """The other inputs (masks) of the captured chain's example, on x_0's device: the
        drop-in takes them with every call, ``ck(x0, **w.other_inputs)``."""
        dev = self.example_input.device
        return {n: t.to(dev) for n, t in example_inputs(self.stages or []).items()}

    @property
    def hf(self) -> bool:
        """The model offers Hugging Face's activation checkpointing."""
        return bool(getattr(self.model, "supports_gradient_checkpointing", False)) and hasattr(
            self.model, "gradient_checkpointing_enable")

    def to(self, device) -> "Workload":
        self.model.to(device)
        if self.stages is not None:
            for s in self.stages:
                s.to(device)
        self.example_input = self.example_input.to(device)
        if hasattr(self.loss_fn, "to"):
            self.loss_fn.to(device)
        return self


def primary_output(out) -> torch.Tensor:
    """The tensor of a model output the loss reads: the output itself, else ``.logits``, else
    ``.last_hidden_state`` (the rule :func:`to_stages` uses for the chain's output)."""
    if isinstance(out, torch.Tensor):
        return out
    for key in ("logits", "last_hidden_state"):
        v = out.get(key) if isinstance(out, dict) else getattr(out, key, None)
        if isinstance(v, torch.Tensor):
            return v
    raise RematError(f"the model output ({type(out).__name__}) has no logits or last_hidden_state")


def _make(name, model, inputs, loss_fn, granularity, config) -> Workload:
    """A workload from a model and its inputs (a tensor or a dict of keyword inputs): the
    chain is captured here (``granularity`` None: not captured, ``stages`` None); a capture
    failure is kept (``capture_error``), not raised."""
    model.train()
    if isinstance(inputs, dict):
        x0 = next(iter(inputs.values()))

        def call(m, _inputs=inputs):
            return primary_output(m(**_inputs))
    else:
        x0 = inputs

        def call(m, _x=inputs):
            return primary_output(m(_x))
    stages, error = None, ""
    if granularity is None:
        return Workload(name, model, call, loss_fn, x0, None, "not captured (granularity None)",
                        config, inputs)
    try:
        stages = split_stages(to_stages(model, inputs, granularity=granularity))
    except Exception as e:  # noqa: BLE001 - a capture failure is a result of the frontier
        error = f"{type(e).__name__}: {e}"[:400]
    return Workload(name, model, call, loss_fn, x0, stages, error, config, inputs)


def from_network(net) -> Workload:
    """A workload from a :class:`~remat_theory.lab.networks.Network` (built-in hand-split
    networks: the model is its stage list; captured ones: the original model, called with the
    chain's example input and fixed inputs)."""
    model = net.model
    if isinstance(model, StageChain):
        x0, fixed = model.example_input, model.fixed_inputs
        original = model.original
        if fixed:
            name0 = next(iter(__import__("inspect").signature(original.forward).parameters))

            def call(m, _x=x0, _f=fixed, _n=name0):
                return primary_output(m(**{_n: _x}, **_f))
        else:
            def call(m, _x=x0):
                return primary_output(m(_x))
        return Workload(net.name, original, call, net.loss_fn, x0, split_stages(model))
    return Workload(net.name, model, lambda m, _x=net.example_input: m(_x), net.loss_fn,
                    net.example_input, split_stages(model))


# ------------------------------------------------------------------------ the built-ins
_LM = {"test": dict(batch=2, seq=16, d=32, layers=2, heads=2, vocab=64),
       "small": dict(batch=4, seq=64, d=128, layers=4, heads=4, vocab=1000),
       "large": dict(batch=8, seq=512, d=768, layers=8, heads=12, vocab=32000)}
_IMG = {"test": dict(batch=2, side=32), "small": dict(batch=4, side=64),
        "large": dict(batch=64, side=224)}
# per image family and scale: (ViT hidden, layers, heads, patch), ConvNeXt (sizes, depths),
# Swin (embed, depths, heads, window), ResNet (embedding, sizes, depths, layer type)
_VIT = {"test": (32, 2, 2, 8), "small": (128, 4, 4, 8), "large": (768, 8, 12, 16)}
_CONVNEXT = {"test": ([8, 16], [1, 1]), "small": ([32, 64, 128, 256], [1, 1, 2, 1]),
             "large": ([96, 192, 384, 768], [3, 3, 9, 3])}
_SWIN = {"test": (8, [2, 2], [2, 2], 4), "small": (32, [2, 2, 2], [2, 4, 8], 4),
         "large": (96, [2, 2, 6, 2], [3, 6, 12, 24], 7)}
_RESNET = {"test": (8, [8, 16], [1, 1], "basic"), "small": (32, [32, 64, 128, 256], [1, 1, 1, 1], "basic"),
           "large": (64, [256, 512, 1024, 2048], [3, 4, 6, 3], "bottleneck")}


def _lm(name, scale, batch, size, granularity):
    tf = import_transformers()
    c = dict(_LM[scale])
    b, s = batch or c["batch"], size or c["seq"]
    d, n, h, v = c["d"], c["layers"], c["heads"], c["vocab"]
    common = dict(vocab_size=v, use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if name == "llama":
        cfg = tf.LlamaConfig(hidden_size=d, intermediate_size=4 * d, num_hidden_layers=n,
                             num_attention_heads=h, num_key_value_heads=max(1, h // 2),
                             max_position_embeddings=s, attention_dropout=0.0, **common)
        model = tf.LlamaForCausalLM(cfg)
    elif name == "qwen2":
        cfg = tf.Qwen2Config(hidden_size=d, intermediate_size=4 * d, num_hidden_layers=n,
                             num_attention_heads=h, num_key_value_heads=max(1, h // 2),
                             max_position_embeddings=s, attention_dropout=0.0, **common)
        model = tf.Qwen2ForCausalLM(cfg)
    elif name == "opt":
        cfg = tf.OPTConfig(hidden_size=d, ffn_dim=4 * d, num_hidden_layers=n, num_attention_heads=h,
                           max_position_embeddings=s, word_embed_proj_dim=d, dropout=0.0,
                           attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0, **common)
        model = tf.OPTForCausalLM(cfg)
    elif name == "gpt-neo":
        cfg = tf.GPTNeoConfig(hidden_size=d, num_layers=n, num_heads=h,
                              attention_types=[[["global", "local"], n // 2]], window_size=s // 2,
                              max_position_embeddings=s, embed_dropout=0.0, attention_dropout=0.0,
                              resid_dropout=0.0, **common)
        model = tf.GPTNeoForCausalLM(cfg)
    elif name == "gpt2":
        cfg = tf.GPT2Config(n_layer=n, n_embd=d, n_head=h, n_positions=s, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, **common)
        model = tf.GPT2LMHeadModel(cfg)
    else:  # pragma: no cover - guarded by WORKLOADS
        raise RematError(f"unknown language model {name!r}")
    ids = torch.randint(1, v, (b, s), generator=seeded_generator(0))
    return _make(name, model, ids, TargetLoss(ids.clone(), "lm"), granularity,
                 {"batch": b, "seq": s, "hidden": d, "layers": n, "heads": h, "vocab": v})


def _distilbert(scale, batch, size, granularity):
    tf = import_transformers()
    c = dict(_LM[scale])
    b, s = batch or c["batch"], size or c["seq"]
    d, n, h, v = c["d"], c["layers"], c["heads"], c["vocab"]
    cfg = tf.DistilBertConfig(vocab_size=v, dim=d, n_layers=n, n_heads=h, hidden_dim=4 * d,
                              max_position_embeddings=s, dropout=0.0, attention_dropout=0.0,
                              seq_classif_dropout=0.0, num_labels=3, pad_token_id=0)
    model = tf.DistilBertForSequenceClassification(cfg)
    g = seeded_generator(0)
    ids = torch.randint(1, v, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.long)
    mask[b // 2:, s - s // 4:] = 0
    target = torch.randint(0, 3, (b,), generator=g)
    return _make("distilbert", model, {"input_ids": ids, "attention_mask": mask},
                 TargetLoss(target, "ce"), granularity,
                 {"batch": b, "seq": s, "hidden": d, "layers": n, "heads": h, "vocab": v})


def _image(name, scale, batch, size, granularity):
    tf = import_transformers()
    c = dict(_IMG[scale])
    b, side = batch or c["batch"], size or c["side"]
    if name == "vit":
        d, n, h, patch = _VIT[scale]
        cfg = tf.ViTConfig(image_size=side, patch_size=patch, hidden_size=d, num_hidden_layers=n,
                           num_attention_heads=h, intermediate_size=4 * d,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                           num_labels=10)
        model = tf.ViTForImageClassification(cfg)
    elif name == "convnext":
        sizes, depths = _CONVNEXT[scale]
        cfg = tf.ConvNextConfig(hidden_sizes=sizes, depths=depths, num_stages=len(sizes),
                                drop_path_rate=0.0, num_labels=10)
        model = tf.ConvNextForImageClassification(cfg)
    elif name == "swin":
        embed, depths, heads, window = _SWIN[scale]
        cfg = tf.SwinConfig(image_size=side, patch_size=4, embed_dim=embed, depths=depths,
                            num_heads=heads, window_size=window, drop_path_rate=0.0,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                            num_labels=10)
        model = tf.SwinForImageClassification(cfg)
    elif name == "resnet":
        emb, sizes, depths, kind = _RESNET[scale]
        cfg = tf.ResNetConfig(embedding_size=emb, hidden_sizes=sizes, depths=depths,
                              layer_type=kind, num_labels=10)
        model = tf.ResNetForImageClassification(cfg)
    else:  # pragma: no cover - guarded by WORKLOADS
        raise RematError(f"unknown image model {name!r}")
    g = seeded_generator(0)
    x = torch.randn(b, 3, side, side, generator=g)
    target = torch.randint(0, 10, (b,), generator=g)
    return _make(name, model, x, TargetLoss(target, "ce"), granularity, {"batch": b, "side": side})


WORKLOADS = ("llama", "qwen2", "opt", "gpt-neo", "gpt2", "distilbert", "vit", "convnext",
             "swin", "resnet")


def build_workload(name: str, scale: str = "small", *, batch: int | None = None,
                   size: int | None = None, granularity="block", seed: int = 0) -> Workload:
    """A frontier workload by name: one of :data:`WORKLOADS` (scale ``test`` or ``small``), or
    any network :func:`~remat_theory.lab.networks.build` knows (its scales).  The image
    side of ``size`` must suit the model (a multiple of ViT's patch, of Swin's windows).
    ``granularity=None``: the built-ins are not captured as a chain (for the methods that run
    the original model alone: plain, Hugging Face's, compile_budget, the in-place API)."""
    for label, v in (("batch", batch), ("size", size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise RematError(f"{label} = {v!r} must be a positive integer")
    if name in WORKLOADS:
        if scale not in _LM:
            raise RematError(f"scale = {scale!r}: the frontier's {name} has scales "
                             f"{', '.join(_LM)}")
        torch.manual_seed(seed)
        if name in ("vit", "convnext", "swin", "resnet"):
            return _image(name, scale, batch, size, granularity)
        if name == "distilbert":
            return _distilbert(scale, batch, size, granularity)
        return _lm(name, scale, batch, size, granularity)
    return from_network(build(name, scale, seed, batch=batch, size=size, granularity=granularity))


__all__ = ["Workload", "WORKLOADS", "build_workload", "from_network"]
