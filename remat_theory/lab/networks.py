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

Captured networks (:data:`CAPTURED_NETWORKS`): ordinary models, not split by hand, made a
chain by :func:`~remat_theory.torch.capture.chain.to_stages`; the :class:`Network`'s model is
then a :class:`~remat_theory.torch.capture.chain.StageChain` (``.original`` is the model).
Random initialisation from small configurations; nothing is downloaded.

* ``tv-resnet``: a torchvision-style ResNet written in plain torch (BasicBlocks with
  in-place ReLU, ``torch.flatten`` in ``forward``).
* ``gpt2``, ``bert``, ``vit``, ``hf-resnet``: transformers' ``GPT2LMHeadModel`` (token ids
  in, logits out, next-token loss), ``BertForSequenceClassification`` (with an attention
  mask that pads the last tokens of half the batch), ``ViTForImageClassification`` and
  ``ResNetForImageClassification``.  They need ``transformers`` (``pip install
  'remat[transformers]'``), imported only when one of them is built.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from remat_theory.model.errors import RematError
from remat_theory.torch.capture.chain import to_stages


@dataclass
class Network:
    name: str
    model: nn.Module  # an nn.Sequential of stages, or a StageChain (captured)
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
        if self.kind == "lm":  # next-token prediction: logits (batch, seq, vocab)
            return F.cross_entropy(out[:, :-1].flatten(0, 1), self.target[:, 1:].flatten())
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


def seeded_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def labelled_images(seed: int, batch: int, side: int):
    """A batch of random RGB images ``side`` x ``side`` and its cross-entropy loss against
    random labels of 10 classes, both drawn from :func:`seeded_generator`."""
    g = seeded_generator(seed)
    x = torch.randn(batch, 3, side, side, generator=g)
    target = torch.randint(0, 10, (batch,), generator=g)
    return x, TargetLoss(target, "ce")


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
    g = seeded_generator(seed)
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
    x, loss = labelled_images(seed, batch, side)
    return Network("resnet", model, x, loss)


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
    g = seeded_generator(seed)
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
    g = seeded_generator(seed)
    seq = torch.randn(steps, batch, feat, generator=g)
    mods = [RecurrentStep(cell, seq[t].clone()) for t in range(steps)]
    mods += [nn.Linear(hidden, 4)]
    h0 = torch.randn(batch, hidden, generator=g)
    target = torch.randn(batch, 4, generator=g)
    return Network("rnn", nn.Sequential(*mods), h0, TargetLoss(target, "mse"))


NETWORKS = {"mlp": mlp, "resnet": resnet, "transformer": transformer, "rnn": rnn}


# ------------------------------------------------------------------------ captured networks
class BasicBlock(nn.Module):
    """torchvision's ResNet basic block, as written there: in-place ReLU, downsample branch."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TorchvisionStyleResNet(nn.Module):
    """The layout of torchvision's ``resnet18`` (stem, four stages, pooled head), sized by
    ``width`` and ``blocks`` per stage; its ``forward`` is not a chain of children."""

    def __init__(self, width: int = 64, blocks=(2, 2, 2, 2), classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = width
        for k, n in enumerate(blocks):
            cout = width * 2 ** k
            layer = [BasicBlock(cin, cout, 1 if k == 0 else 2)]
            layer += [BasicBlock(cout, cout) for _ in range(n - 1)]
            setattr(self, f"layer{k + 1}", nn.Sequential(*layer))
            cin = cout
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def tv_resnet(scale: str = "small", seed: int = 0, batch: int | None = None,
              size: int | None = None, granularity="block") -> Network:
    batch_, side, width, blocks = {"test": (2, 32, 4, (1, 1, 1, 1)), "small": (16, 64, 16, (2, 2, 2, 2)),
                                   "large": (64, 224, 64, (2, 2, 2, 2))}[scale]
    batch, side = batch or batch_, size or side
    torch.manual_seed(seed)
    model = TorchvisionStyleResNet(width, blocks, 10)
    x, loss = labelled_images(seed, batch, side)
    model.train()
    return Network("tv-resnet", to_stages(model, x, granularity=granularity), x,
                   loss)


def import_transformers():
    """transformers, imported on request (an optional dependency), its warnings quiet."""
    try:
        import transformers
    except ImportError:
        raise RematError("this network needs the transformers package "
                         "(pip install 'remat[transformers]')") from None
    transformers.logging.set_verbosity_error()
    return transformers


def gpt2(scale: str = "small", seed: int = 0, batch: int | None = None,
         size: int | None = None, granularity="block") -> Network:
    tf = import_transformers()
    batch_, seq, d, layers, heads, vocab = {
        "test": (2, 16, 32, 2, 2, 100), "small": (8, 128, 128, 4, 4, 1000),
        "large": (8, 1024, 768, 12, 12, 50257)}[scale]
    batch, seq = batch or batch_, size or seq
    torch.manual_seed(seed)
    cfg = tf.GPT2Config(n_layer=layers, n_embd=d, n_head=heads, n_positions=seq,
                        vocab_size=vocab, use_cache=False, bos_token_id=0, eos_token_id=0)
    model = tf.GPT2LMHeadModel(cfg).train()
    ids = torch.randint(0, vocab, (batch, seq), generator=seeded_generator(seed))
    return Network("gpt2", to_stages(model, ids, granularity=granularity), ids,
                   TargetLoss(ids.clone(), "lm"))


# (batch, sequence, width, layers, heads, vocabulary, classes) of the BERT-like encoders
_ENCODER_SIZES = {"test": (2, 16, 32, 2, 2, 100, 3), "small": (8, 128, 128, 4, 4, 1000, 3),
                  "large": (32, 512, 768, 12, 12, 30522, 3)}


def bert(scale: str = "small", seed: int = 0, batch: int | None = None,
         size: int | None = None, granularity="block") -> Network:
    tf = import_transformers()
    batch_, seq, d, layers, heads, vocab, classes = _ENCODER_SIZES[scale]
    batch, seq = batch or batch_, size or seq
    torch.manual_seed(seed)
    cfg = tf.BertConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * d,
                        max_position_embeddings=seq, num_labels=classes)
    model = tf.BertForSequenceClassification(cfg).train()
    g = seeded_generator(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[batch // 2:, seq - seq // 4:] = 0  # half the batch padded
    target = torch.randint(0, classes, (batch,), generator=g)
    chain = to_stages(model, {"input_ids": ids, "attention_mask": mask}, granularity=granularity)
    return Network("bert", chain, ids, TargetLoss(target, "ce"))


def _vit_like(name: str, config: str, model_cls: str, scale: str, seed: int,
              batch: int | None, size: int | None, granularity) -> Network:
    """A transformers image classifier of the ViT shape (ViT, DeiT) at a named scale."""
    tf = import_transformers()
    batch_, side, patch, d, layers, heads = {
        "test": (2, 16, 4, 32, 2, 2), "small": (8, 64, 8, 128, 4, 4),
        "large": (64, 224, 16, 768, 12, 12)}[scale]
    batch, side = batch or batch_, size or side
    if side % patch:
        raise RematError(f"size = {side}: the {name} image side must be a multiple of its "
                         f"patch, {patch}")
    torch.manual_seed(seed)
    cfg = getattr(tf, config)(image_size=side, patch_size=patch, num_channels=3, hidden_size=d,
                              num_hidden_layers=layers, num_attention_heads=heads,
                              intermediate_size=4 * d, num_labels=10)
    model = getattr(tf, model_cls)(cfg).train()
    x, loss = labelled_images(seed, batch, side)
    return Network(name.lower(), to_stages(model, x, granularity=granularity), x,
                   loss)


def vit(scale: str = "small", seed: int = 0, batch: int | None = None,
        size: int | None = None, granularity="block") -> Network:
    return _vit_like("ViT", "ViTConfig", "ViTForImageClassification", scale, seed, batch,
                     size, granularity)


def hf_resnet(scale: str = "small", seed: int = 0, batch: int | None = None,
              size: int | None = None, granularity="block") -> Network:
    tf = import_transformers()
    batch_, side, emb, hidden, depths, kind = {
        "test": (2, 32, 8, [8, 16], [1, 1], "basic"),
        "small": (16, 64, 32, [32, 64, 128, 256], [1, 1, 1, 1], "basic"),
        "large": (64, 224, 64, [256, 512, 1024, 2048], [3, 4, 6, 3], "bottleneck")}[scale]
    batch, side = batch or batch_, size or side
    torch.manual_seed(seed)
    cfg = tf.ResNetConfig(num_channels=3, embedding_size=emb, hidden_sizes=hidden,
                          depths=depths, layer_type=kind, num_labels=10)
    model = tf.ResNetForImageClassification(cfg).train()
    x, loss = labelled_images(seed, batch, side)
    return Network("hf-resnet", to_stages(model, x, granularity=granularity), x,
                   loss)


# ------------------------------------------------------------------------ transformers families
# (config class, model class, extra config fields) of the decoder LMs; every one is built at
# "test" (tiny, the CPU test suite), "small" (remat confirm on a CPU) or "large" (one GPU)
_LM_SIZES = {"test": (2, 16, 32, 2, 4, 100), "small": (8, 128, 128, 4, 4, 1000),
             "large": (8, 1024, 768, 12, 12, 32000)}


def _lm_config(tf, family: str, seq: int, d: int, layers: int, heads: int, vocab: int):
    common = dict(vocab_size=vocab, use_cache=False, bos_token_id=0, eos_token_id=0,
                  pad_token_id=0)
    if family in ("llama", "mistral", "qwen2"):
        cls = {"llama": tf.LlamaConfig, "mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config}[family]
        return cls(hidden_size=d, intermediate_size=2 * d + d // 2, num_hidden_layers=layers,
                   num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                   max_position_embeddings=seq, **common)
    if family == "opt":
        return tf.OPTConfig(hidden_size=d, ffn_dim=4 * d, num_hidden_layers=layers,
                            num_attention_heads=heads, max_position_embeddings=seq,
                            word_embed_proj_dim=d, **common)
    if family == "gpt-neo":
        return tf.GPTNeoConfig(hidden_size=d, num_layers=layers, num_heads=heads,
                               attention_types=[[["global", "local"], max(1, layers // 2)]],
                               max_position_embeddings=seq, window_size=max(2, seq // 2),
                               **common)
    if family == "gpt-neox":
        return tf.GPTNeoXConfig(hidden_size=d, intermediate_size=4 * d, num_hidden_layers=layers,
                                num_attention_heads=heads, max_position_embeddings=seq, **common)
    if family == "phi":
        return tf.PhiConfig(hidden_size=d, intermediate_size=4 * d, num_hidden_layers=layers,
                            num_attention_heads=heads, max_position_embeddings=seq, **common)
    if family in ("gemma", "gemma2"):
        cls = tf.GemmaConfig if family == "gemma" else tf.Gemma2Config
        return cls(hidden_size=d, intermediate_size=2 * d + d // 2, num_hidden_layers=layers,
                   num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                   head_dim=d // heads, max_position_embeddings=seq, **common)
    if family == "falcon":
        return tf.FalconConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                               max_position_embeddings=seq, **common)
    if family == "bloom":
        return tf.BloomConfig(hidden_size=d, n_layer=layers, n_head=heads, **common)
    if family == "gpt-j":
        return tf.GPTJConfig(n_embd=d, n_layer=layers, n_head=heads, n_positions=seq,
                             rotary_dim=d // heads, n_inner=4 * d, **common)
    if family == "mixtral":
        return tf.MixtralConfig(hidden_size=d, intermediate_size=2 * d, num_hidden_layers=layers,
                                num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                                num_local_experts=4, num_experts_per_tok=2,
                                max_position_embeddings=seq, **common)
    raise RematError(f"unknown decoder family {family!r}")


_LM_MODELS = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
              "qwen2": "Qwen2ForCausalLM", "opt": "OPTForCausalLM",
              "gpt-neo": "GPTNeoForCausalLM", "gpt-neox": "GPTNeoXForCausalLM",
              "phi": "PhiForCausalLM", "gemma": "GemmaForCausalLM",
              "gemma2": "Gemma2ForCausalLM", "falcon": "FalconForCausalLM",
              "bloom": "BloomForCausalLM", "gpt-j": "GPTJForCausalLM",
              "mixtral": "MixtralForCausalLM"}


def _decoder_lm(family: str):
    def make(scale: str = "small", seed: int = 0, batch: int | None = None,
             size: int | None = None, granularity="block") -> Network:
        tf = import_transformers()
        batch_, seq, d, layers, heads, vocab = _LM_SIZES[scale]
        batch, seq = batch or batch_, size or seq
        torch.manual_seed(seed)
        cfg = _lm_config(tf, family, seq, d, layers, heads, vocab)
        model = getattr(tf, _LM_MODELS[family])(cfg).train()
        ids = torch.randint(1, vocab, (batch, seq), generator=seeded_generator(seed))
        return Network(family, to_stages(model, ids, granularity=granularity), ids,
                       TargetLoss(ids.clone(), "lm"))
    make.__name__ = family.replace("-", "_")
    make.__doc__ = f"transformers' {_LM_MODELS[family]} from a small config (random weights)."
    return make


def _encoder(family: str):
    def make(scale: str = "small", seed: int = 0, batch: int | None = None,
             size: int | None = None, granularity="block") -> Network:
        tf = import_transformers()
        batch_, seq, d, layers, heads, vocab, classes = _ENCODER_SIZES[scale]
        batch, seq = batch or batch_, size or seq
        torch.manual_seed(seed)
        if family == "roberta":
            cfg = tf.RobertaConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=layers,
                                   num_attention_heads=heads, intermediate_size=4 * d,
                                   max_position_embeddings=seq + 2, num_labels=classes,
                                   pad_token_id=1)
            model = tf.RobertaForSequenceClassification(cfg).train()
        else:
            cfg = tf.DistilBertConfig(vocab_size=vocab, dim=d, n_layers=layers, n_heads=heads,
                                      hidden_dim=4 * d, max_position_embeddings=seq,
                                      num_labels=classes, pad_token_id=0)
            model = tf.DistilBertForSequenceClassification(cfg).train()
        g = seeded_generator(seed)
        ids = torch.randint(2, vocab, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[batch // 2:, seq - seq // 4:] = 0  # half the batch padded
        target = torch.randint(0, classes, (batch,), generator=g)
        chain = to_stages(model, {"input_ids": ids, "attention_mask": mask}, granularity=granularity)
        return Network(family, chain, ids, TargetLoss(target, "ce"))
    make.__name__ = family
    return make


def convnext(scale: str = "small", seed: int = 0, batch: int | None = None,
             size: int | None = None, granularity="block") -> Network:
    tf = import_transformers()
    batch_, side, hidden, depths = {
        "test": (2, 32, [8, 16], [2, 2]), "small": (8, 64, [32, 64, 128, 256], [2, 2, 2, 2]),
        "large": (64, 224, [96, 192, 384, 768], [3, 3, 9, 3])}[scale]
    batch, side = batch or batch_, size or side
    torch.manual_seed(seed)
    cfg = tf.ConvNextConfig(num_channels=3, hidden_sizes=hidden, depths=depths,
                            num_stages=len(depths), num_labels=10, drop_path_rate=0.0)
    model = tf.ConvNextForImageClassification(cfg).train()
    x, loss = labelled_images(seed, batch, side)
    return Network("convnext", to_stages(model, x, granularity=granularity), x,
                   loss)


def swin(scale: str = "small", seed: int = 0, batch: int | None = None,
         size: int | None = None, granularity="block") -> Network:
    tf = import_transformers()
    batch_, side, emb, depths, heads, window = {
        "test": (2, 32, 16, [2, 2], [2, 4], 4), "small": (16, 64, 32, [2, 2, 2], [2, 4, 8], 4),
        "large": (64, 224, 96, [2, 2, 6, 2], [3, 6, 12, 24], 7)}[scale]
    batch, side = batch or batch_, size or side
    torch.manual_seed(seed)
    cfg = tf.SwinConfig(image_size=side, patch_size=4, num_channels=3, embed_dim=emb,
                        depths=depths, num_heads=heads, window_size=window, num_labels=10,
                        drop_path_rate=0.0)
    model = tf.SwinForImageClassification(cfg).train()
    x, loss = labelled_images(seed, batch, side)
    return Network("swin", to_stages(model, x, granularity=granularity), x,
                   loss)


def t5_encoder(scale: str = "small", seed: int = 0, batch: int | None = None,
               size: int | None = None, granularity="block") -> Network:
    """transformers' T5EncoderModel (relative position bias, RMS norms, no head): MSE of its
    last hidden state against a fixed random target."""
    tf = import_transformers()
    batch_, seq, d, layers, heads, vocab, _ = _ENCODER_SIZES[scale]
    batch, seq = batch or batch_, size or seq
    torch.manual_seed(seed)
    cfg = tf.T5Config(vocab_size=vocab, d_model=d, d_kv=d // heads, d_ff=4 * d,
                      num_layers=layers, num_heads=heads, pad_token_id=0)
    model = tf.T5EncoderModel(cfg).train()
    g = seeded_generator(seed)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    target = torch.randn(batch, seq, d, generator=g)
    return Network("t5-encoder", to_stages(model, ids, granularity=granularity), ids,
                   TargetLoss(target, "mse"))


def deit(scale: str = "small", seed: int = 0, batch: int | None = None,
         size: int | None = None, granularity="block") -> Network:
    """transformers' DeiTForImageClassification (a ViT with a distillation token)."""
    return _vit_like("DeiT", "DeiTConfig", "DeiTForImageClassification", scale, seed, batch,
                     size, granularity)


CAPTURED_NETWORKS = {"tv-resnet": tv_resnet, "gpt2": gpt2, "bert": bert, "vit": vit,
                     "hf-resnet": hf_resnet,
                     **{f: _decoder_lm(f) for f in _LM_MODELS},
                     "roberta": _encoder("roberta"), "distilbert": _encoder("distilbert"),
                     "convnext": convnext, "swin": swin, "t5-encoder": t5_encoder,
                     "deit": deit}
# the families of transformers models (and the torchvision-style ResNet) built by name
FAMILIES = ("llama", "mistral", "qwen2", "opt", "gpt-neo", "gpt-neox", "phi", "gpt2", "bert",
            "roberta", "distilbert", "vit", "convnext", "swin", "hf-resnet", "tv-resnet",
            # held out: added after the capture was built, checked unmodified
            "gemma", "gemma2", "falcon", "bloom", "gpt-j", "mixtral", "t5-encoder", "deit")


def build(name: str, scale: str = "small", seed: int = 0, *, batch: int | None = None,
          size: int | None = None, granularity="block") -> Network:
    """A built-in network by name (see :data:`NETWORKS` and :data:`CAPTURED_NETWORKS`) and
    scale (``test``, ``small`` or ``large``).  ``batch`` and ``size`` override the scale's
    batch size and input size (the MLP's width, the ResNet's image side, the transformer's
    sequence length, the RNN's number of steps; for the captured networks the image side or
    the sequence length).  ``granularity`` applies to the captured networks (see
    :func:`~remat_theory.torch.capture.chain.to_stages`)."""
    known = {**NETWORKS, **CAPTURED_NETWORKS}
    if name not in known:
        raise RematError(f"unknown network {name!r} (known: {', '.join(known)})")
    if scale not in SCALES:
        raise RematError(f"unknown scale {scale!r} (known: {', '.join(SCALES)})")
    for label, v in (("batch", batch), ("size", size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise RematError(f"{label} = {v!r} must be a positive integer")
    if name in CAPTURED_NETWORKS:
        net = CAPTURED_NETWORKS[name](scale, seed, batch=batch, size=size, granularity=granularity)
    else:
        net = NETWORKS[name](scale, seed, batch=batch, size=size)
    net.model.train()
    return net
