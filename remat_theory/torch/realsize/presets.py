"""Model configurations by name, written in code (nothing is downloaded), and the batches
the profile runs on.

Each preset is a transformers config class, its keyword arguments (the published
configuration's sizes) and the model class trained.  :func:`load_config` also reads a
transformers ``config.json`` (its ``model_type`` names the config class, its
``architectures[0]`` the model class).  :data:`TINY` gives each preset's family a small
configuration (hidden 32-64, 2 layers) for the tests that compare the fake profile with the
real one.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from remat_theory.model.errors import RematError


__all__ = ["PRESETS", "TINY", "Spec", "load_config", "make_batch", "spec_of"]

_LLAMA = dict(vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5)

# name: (config class, kwargs, model class, batch kind)
PRESETS = {
    "llama-2-7b": ("LlamaConfig", dict(_LLAMA, hidden_size=4096, intermediate_size=11008,
                                       num_hidden_layers=32, num_attention_heads=32,
                                       num_key_value_heads=32), "LlamaForCausalLM", "lm"),
    "llama-2-13b": ("LlamaConfig", dict(_LLAMA, hidden_size=5120, intermediate_size=13824,
                                        num_hidden_layers=40, num_attention_heads=40,
                                        num_key_value_heads=40), "LlamaForCausalLM", "lm"),
    "llama-2-70b": ("LlamaConfig", dict(_LLAMA, hidden_size=8192, intermediate_size=28672,
                                        num_hidden_layers=80, num_attention_heads=64,
                                        num_key_value_heads=8), "LlamaForCausalLM", "lm"),
    "mistral-7b": ("MistralConfig", dict(vocab_size=32000, hidden_size=4096,
                                         intermediate_size=14336, num_hidden_layers=32,
                                         num_attention_heads=32, num_key_value_heads=8,
                                         max_position_embeddings=32768, sliding_window=4096,
                                         rms_norm_eps=1e-5), "MistralForCausalLM", "lm"),
    "qwen2-7b": ("Qwen2Config", dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                                     num_hidden_layers=28, num_attention_heads=28,
                                     num_key_value_heads=4, max_position_embeddings=32768),
                 "Qwen2ForCausalLM", "lm"),
    "gpt2-xl": ("GPT2Config", dict(vocab_size=50257, n_positions=1024, n_embd=1600, n_layer=48,
                                   n_head=25), "GPT2LMHeadModel", "lm"),
    "bert-large": ("BertConfig", dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                                      num_attention_heads=16, intermediate_size=4096,
                                      max_position_embeddings=512), "BertForMaskedLM", "lm"),
    "t5-large": ("T5Config", dict(vocab_size=32128, d_model=1024, d_kv=64, d_ff=4096,
                                  num_layers=24, num_decoder_layers=24, num_heads=16,
                                  feed_forward_proj="relu", decoder_start_token_id=0,
                                  pad_token_id=0), "T5ForConditionalGeneration", "s2s"),
    "bart-large": ("BartConfig", dict(vocab_size=50265, d_model=1024, encoder_layers=12,
                                      decoder_layers=12, encoder_attention_heads=16,
                                      decoder_attention_heads=16, encoder_ffn_dim=4096,
                                      decoder_ffn_dim=4096, max_position_embeddings=1024),
                   "BartForConditionalGeneration", "s2s"),
    "vit-l/16": ("ViTConfig", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                   intermediate_size=4096, image_size=224, patch_size=16,
                                   num_labels=1000), "ViTForImageClassification", "image"),
    "convnext-large": ("ConvNextConfig", dict(hidden_sizes=[192, 384, 768, 1536],
                                              depths=[3, 3, 27, 3], image_size=224,
                                              num_labels=1000),
                       "ConvNextForImageClassification", "image"),
    "resnet-50": ("ResNetConfig", dict(embedding_size=64, hidden_sizes=[256, 512, 1024, 2048],
                                       depths=[3, 4, 6, 3], layer_type="bottleneck",
                                       num_labels=1000), "ResNetForImageClassification",
                  "image"),
}

_DEC = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
# the same families, small: the real CPU profile is the oracle there
TINY = {
    "llama-2-7b": dict(_DEC),
    "mistral-7b": dict(_DEC, sliding_window=64),
    "qwen2-7b": dict(_DEC),
    "gpt2-xl": dict(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=2),
    "bert-large": dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=64),
    "t5-large": dict(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                     num_decoder_layers=2, num_heads=2),
    "bart-large": dict(vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2,
                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                       decoder_ffn_dim=64, max_position_embeddings=64),
    "vit-l/16": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, image_size=32, patch_size=8, num_labels=10),
    "convnext-large": dict(hidden_sizes=[16, 32], depths=[2, 2], num_stages=2, image_size=32,
                           num_labels=10),
    "resnet-50": dict(embedding_size=8, hidden_sizes=[16, 32], depths=[2, 2], num_labels=10,
                      image_size=32),
}

# config fields that count layers: reduced for the profile, kept for the chain
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers",
                "encoder_layers", "decoder_layers")


@dataclass
class Spec:
    """A configuration to profile: the transformers config, the model class's name, the
    batch kind (``lm``: token ids and labels; ``s2s``: encoder ids and decoder labels;
    ``image``: pixel values and classes), a name."""

    config: object
    model_class: str
    kind: str
    name: str


def _transformers():
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - the torch extra without transformers
        raise RematError("remat plan needs transformers: pip install transformers") from e
    return transformers


def spec_of(name: str, overrides: dict | None = None) -> Spec:
    """The preset ``name`` (``overrides`` replace fields of its config)."""
    if name not in PRESETS:
        raise RematError(f"model {name!r} is not a preset ({', '.join(PRESETS)}) and no "
                         f"config.json file of that path exists")
    tf = _transformers()
    cls, kw, model, kind = PRESETS[name]
    return Spec(getattr(tf, cls)(**dict(kw, **(overrides or {}))), model, kind, name)


def load_config(text: str) -> Spec:
    """A preset name or the path of a transformers ``config.json``."""
    if text in PRESETS or not os.path.exists(text):
        return spec_of(text)
    tf = _transformers()
    try:
        with open(text) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise RematError(f"config {text!r} cannot be read as JSON: {e}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise RematError(f"config {text!r} has no 'model_type' field (a transformers config.json)")
    try:
        config = tf.AutoConfig.for_model(**data)
    except (ValueError, KeyError) as e:
        raise RematError(f"config {text!r}: model_type {data['model_type']!r} is not known to "
                         f"transformers: {e}") from None
    archs = data.get("architectures") or []
    if not archs or not hasattr(tf, archs[0]):
        raise RematError(f"config {text!r}: 'architectures' must name a transformers model "
                         f"class (got {archs!r})")
    arch = archs[0]
    kind = ("image" if "ImageClassification" in arch else
            "s2s" if "ConditionalGeneration" in arch or "Seq2Seq" in arch else "lm")
    return Spec(config, arch, kind, os.path.basename(os.path.dirname(os.path.abspath(text)))
                or text)


def make_batch(spec: Spec, batch: int, seq: int, dtype=None) -> dict:
    """A batch of the spec's kind (made under the caller's fake mode, if any): token ids with
    the last row's second half padded (``attention_mask`` 0 there: the mask is then
    materialized, as it is for any batch under fake tensors, see docs/plan.md) and labels;
    images at the config's size."""
    import torch
    c = spec.config
    if spec.kind == "image":
        size = getattr(c, "image_size", 224)
        px = torch.randn(batch, getattr(c, "num_channels", 3), size, size)
        if dtype is not None:
            px = px.to(dtype)
        return dict(pixel_values=px, labels=torch.randint(0, c.num_labels, (batch,)))
    vocab = c.vocab_size
    ids = torch.randint(3, vocab, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[-1, seq // 2:] = 0
    if spec.kind == "s2s":
        return dict(input_ids=ids, attention_mask=mask, decoder_attention_mask=mask.clone(),
                    labels=torch.randint(3, vocab, (batch, seq)))
    labels = ids.masked_fill(mask == 0, -100)
    out = dict(input_ids=ids, attention_mask=mask, labels=labels)
    if "ForCausalLM" in spec.model_class or "LMHead" in spec.model_class:
        out["use_cache"] = False
    return out
