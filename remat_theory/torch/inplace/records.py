"""What the in-place profile records of one model at one input shape (:class:`LayerProfile`), and
the loss a step backpropagates when the user gives none (:func:`default_loss`): leaves that the
planner, the real-size profiler and the API read without running a model."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils import _pytree as pytree

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.simulator import simulate


@dataclass
class LayerProfile:
    """The chain of one input shape (bytes, seconds) and what is held beside it."""

    chain: Chain
    prefix_bytes: int  # the prefix's tape and what code between unchained layers holds, beyond x_0
    end_peak: int  # the prefix's backward, the step's last operation: its peak (bytes)
    prefix_time: float  # its forward and backward (seconds)
    shared_grad_bytes: int  # values several layers read (needing a gradient) and their gradient
    draws: list = field(default_factory=list)  # per layer: its forward draws random numbers
    # per backward (the loss last): bytes its measured peak rises above what is held when it
    # starts, a layer's own parameter gradients included (the loss: without them, its
    # forward included); below
    # the operation table's x_size + bwd_overhead where autograd frees the tape as it goes
    # (plan.step_peak uses it)
    bwd_rise: list = field(default_factory=list)
    # per layer: its backward reads its own output (autograd saved it); where it does not,
    # the output is gone by the time its backward runs (the next layer's backward let it go)
    saves_output: list = field(default_factory=list)
    # one plain step of the model (no recomputation) as the allocator measured it, bytes,
    # gradients included; None where the profile counted live tensors
    plain_step_measured: int | None = None
    calibration: float = 1.0  # set by plan.calibrate: predictions are raised by it
    # bytes of parameter gradients by where one real step made them: "loss" (the loss
    # stage's backward), layer i's backward, "end" (the prefix's backward: the embeddings');
    # None where not measured
    grads_made: dict | None = None
    # the loss stage's rise in one real step (live tensors): the most of what it made live
    # at once, the gradients it makes included; None where not measured
    loss_rise: int | None = None
    # what is held beside the chain, by where (:meth:`held_at`): the prefix's tape (all the
    # step); (from_layer, bytes): held at every operation of a layer >= from_layer (what
    # code between two unchained layers leaves; a value layers read, from its first
    # reader), let go once the backward has passed it; (first, last, bytes): a value's
    # gradient, from the backward of its last reader to that of its first (beside the chain
    # after its last reader's backward, whose rise holds it as it is made)
    prefix_only: int | None = None
    held: list = field(default_factory=list)
    value_grads: list = field(default_factory=list)
    # (j, bytes): layer j's output, which the code after it (not chained to layer j+1)
    # keeps until the backward has passed it (T5's final norm saves the encoder's last
    # output): beside the chain where layer j's tape t_{j+1}, which holds it too, is not
    outputs_kept: list = field(default_factory=list)
    # (first, until, bytes): the model's locals, made before layer ``first`` (by the prefix
    # or the code between two layers), read by no layer and let go before layer ``until``
    # starts: held in the forward only (T5's encoder holds its embeddings through its layers)
    forward_only: list = field(default_factory=list)

    @property
    def fixed_bytes(self) -> int:
        """All that :meth:`held_at` can count at once (the most held beside the chain)."""
        return (self.prefix_bytes + self.shared_grad_bytes
                + sum(b for _, _, b in self.forward_only))

    @property
    def always_bytes(self) -> int:
        """What is held beside the chain at every operation (the prefix's tape)."""
        return self.prefix_bytes if self.prefix_only is None else self.prefix_only

    def held_at(self, index: int, backward: bool, tapes: int | None = None) -> int:
        """Bytes held beside the chain at an operation of layer ``index`` (the loss: the
        chain's length) in the forward or the backward phase (recomputations included).
        ``tapes``: the simulator state's tape bits after the operation (bit i: t_i held);
        None counts every kept output (:attr:`outputs_kept`) as outside its tape."""
        if self.prefix_only is None:
            return self.fixed_bytes
        out = self.prefix_only + sum(b for f, b in self.held if index >= f)
        out += sum(b for j, b in self.outputs_kept
                   if index > j and (tapes is None or not tapes >> (j + 1) & 1))
        if backward:  # in its last reader's backward the gradient is in that backward's rise
            out += sum(b for a, last, b in self.value_grads if a <= index < last)
        else:
            out += sum(b for f, u, b in self.forward_only if f <= index < u)
        return out

    @property
    def store_all_activations(self) -> int:
        """:attr:`store_all_bytes` raised by the calibration (what a fraction is of)."""
        return int(math.ceil(self.calibration * self.store_all_bytes))

    @property
    def store_all_bytes(self) -> int:
        """The step's activation peak without recomputation, as the model predicts it: the
        simulator's memory at every operation and what is held beside the chain there."""
        n = self.chain.length
        ops = [f"Fall{i}" for i in range(n)] + ["Loss"] + [f"B{i}" for i in reversed(range(n))]
        peak, backward = self.end_peak, False
        for st in simulate(self.chain, ops).profile:
            backward = backward or st.op == "Loss"
            i = n if st.op == "Loss" else int(st.op.lstrip("FalB"))
            peak = max(peak, st.peak + self.held_at(i, backward, st.state.tapes))
        return peak


def default_loss(output):
    """The loss the step backpropagates: the model's ``.loss`` when it computed one, else the
    sum of its (first) output tensor."""
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    leaves = [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)
              and t.is_floating_point()]
    if not leaves:
        raise RematError("the model's output has no loss and no floating tensor; pass loss_fn=")
    return leaves[0].float().sum()


@dataclass
class LayerCall:
    """One layer call: ``module``, ``slot`` of its hidden state (('a', i) or ('k', name)),
    ``out_leaf`` (index of the output leaf the next layer reads), ``chained`` (the next
    layer's hidden state is that leaf itself)."""

    path: str
    module: nn.Module
    slot: tuple
    out_leaf: int
    chained: bool


def gradients_made(module) -> list:
    """The parameters of a layer whose backward is measured alone (both profiles, real and
    fake), each given its gradient (zeros) before that backward, so that it accumulates into
    them: the live tensors then leave the gradients out, as the allocator's count does (its
    ``persistent``), and what the meter sees beyond the live tensors is what kernels made
    (making them inside the backward put OPT's, Llama's, ... every backward 0.46 MB above
    the real step's rise: the gradients not yet made at its peak).  Call it before the
    measured operation; pass the parameters to the backward's ``inputs``."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    return params


def sizes_from_ops(by: dict, x: list, out_bytes: list, layers, bwd_live: list, real: list, *,
                   live_without_grads: bool = False):
    """The chain's byte fields and each stage's backward rise from one profile's measured
    operations (``by``: the meter's records by label, ``fck``/``fall``/``bwd`` per layer and
    ``suffix``/``suffix_bwd``), the hidden states' bytes ``x``, each layer's output bytes
    its recording keeps, the live bytes of each backward measured alone and each backward's
    rise in the real step (None: not measured).  The one rule the in-place profile and the
    real-size (fake-tensor) profile share: returns ``(tape, fwd_overhead, fall_overhead,
    bwd_overhead, rise)``."""
    n = len(layers)
    tape, f_ovh, a_ovh, b_ovh = [], [], [], []
    for i in range(n):
        fck, fall, bwd = by["fck"][i], by["fall"][i], by["bwd"][i]
        tp = max(fall.after - fall.before, x[i + 1], out_bytes[i])
        tape.append(tp)
        f_ovh.append(max(0, fck.peak - fck.before - x[i + 1]))
        a_ovh.append(max(0, fall.peak - fall.before - tp))
        b_ovh.append(max(0, bwd.peak - bwd.before - x[i]))
    s, sb = by["suffix"][0], by["suffix_bwd"][0]
    b_ovh.append(max(0, max(s.peak, sb.peak) - s.before - x[n]))
    own = own_gradient_bytes(layers)
    # a backward's rise: the real step's (live tensors: autograd lets go of the tape as it
    # goes), plus what the allocator saw beyond the live tensors in the backward measured
    # alone (allocations inside kernels: a convolution's workspace); with no real figure,
    # the one measured alone
    raw = [max(0, by["bwd"][i].peak - by["bwd"][i].before) for i in range(n)]
    alone = [raw[i] + own[i] for i in range(n)]
    # ``live_without_grads``: the live peak leaves the layer's parameter gradients out, as
    # the allocator's count does (the in-place profile makes them before the backward); else
    # it holds those made by its peak and the allocator's count all of them (the kernels'
    # share then also holds the gradients not yet made at the peak)
    kernel = [max(0, (raw[i] if live_without_grads else alone[i]) - bwd_live[i])
              for i in range(n)]
    rise = [a if q is None else min(a, q + k) for a, q, k in zip(alone, real, kernel)]
    rise.append(max(0, max(s.peak, sb.peak) - s.before))
    return tape, f_ovh, a_ovh, b_ovh, rise


def own_gradient_bytes(layers) -> list:
    """Per layer call, the bytes of its module's trainable parameters' gradients, counted at
    the module's last call (a layer called again, as ALBERT's shared one, counts once)."""
    last = {id(lc.module): i for i, lc in enumerate(layers)}
    return [sum(q.numel() * q.element_size() for q in lc.module.parameters() if q.requires_grad)
            if last[id(lc.module)] == i else 0 for i, lc in enumerate(layers)]


def held_beside(values: dict, glue: list, x: list, layers, *, apart: bool = False) -> tuple:
    """What sits beside the chain, by where (:meth:`LayerProfile.held_at`), from ``values``
    (storage -> [first reader, last reader, bytes]: values needing a gradient that layers
    read besides their hidden state, T5's position bias, the encoder's states; each is held
    from where it is made to the step's end and its gradient builds up in the backward) and
    ``glue`` (per layer j, what the model's code between layer j and j+1 leaves held): the
    code between two unchained layers holds what it leaves beyond the next layer's input
    (and the values the next layers read, counted as such) until the backward passes it.
    ``apart``: ``glue`` already leaves out the next layer's input and the values it reads,
    by storage (the in-place profile's real step); else their bytes are taken off it (a
    value made by layer j itself, BART's encoder states, was then taken off what the code
    after it leaves, 0.26 MB too little).
    Returns ``(held, between, value_grads)``; the one rule of the in-place and the
    real-size profiles."""
    n = len(layers)
    held = [(j + 1, glue[j] if apart else max(0, glue[j] - x[j + 1] - sum(
                v[2] for v in values.values() if v[0] == j + 1)))
            for j in range(n - 1) if not layers[j].chained]
    held = [(f, b) for f, b in held if b]
    held += [(a, b) for a, _, b in values.values()]
    between = sum(b for f, b in held) - sum(v[2] for v in values.values())
    return held, between, [tuple(v) for v in values.values()]
