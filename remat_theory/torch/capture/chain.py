"""Capture any torch model as a chain of stages, without hand-written wrappers.

By default (``granularity="block"``, ``method="auto"``) a model with a repeated stack of
layers is cut at every layer and its stages run the model's own eager code
(:mod:`.seams`, method ``"modules"``): the chain is then the user's model, kernels, saved
tensors and masks included.  A model without one, and ``granularity="fine"`` or an
integer, are captured as a graph, as follows.

The chain model (docs/model.md) needs a network as a sequence of stages, each mapping one
activation x_i to the next, x_{i+1}.  A real model is a graph: residual branches, masks
and position ids built from the input, tuples passed between submodules, ``torch.flatten``
in a ``forward``.  :func:`to_stages` records that graph and cuts it where the chain model
holds:

1. **Capture.**  ``torch.fx.symbolic_trace`` first (submodules of ``torch.nn`` stay whole,
   the graph is shape-generic), ``torch.export.export`` when fx fails (transformers models,
   Python control flow on shapes; the graph is then specialised to the example's shapes and
   train/eval mode).  The traced graph is run on the example inputs and must give the
   model's own output bit for bit, or the next method is tried.
2. **Classify.**  That run records, for every node, whether its value needs a gradient (an
   *activation*: it depends on the input or on a parameter through differentiable ops),
   which inputs it modifies in place, which earlier value it is a view of, and whether it
   draws random numbers.  Everything else is a *constant*: parameters and buffers (read by
   each stage that uses them), the model's other inputs (attention masks, token type ids:
   *fixed inputs*, kept by the chain), and values computed without gradient (position ids,
   an extended attention mask, the shape of a tensor), which the stage computing them hands
   to the later stages that read them.
3. **Cut.**  A cut between two nodes is valid when exactly one activation crosses it, it is
   a tensor, and no later node modifies it (or a crossed constant) in place.  Stages are
   the nodes between chosen cuts; inside a stage anything goes (tuples, several live
   branches, in-place ops).  A stage must produce new memory: a stage that would return a
   view of its input (a lone ``flatten``) is merged with its neighbour.

``granularity`` chooses among the valid cuts: ``"block"`` (default) cuts between the
children of containers (``nn.Sequential``, ``nn.ModuleList``) and between modules outside
any repeated block, never inside one block (one stage per transformer layer or residual
block) except at the edge of a layer of a stack nested in it (Swin's and ConvNeXt's stages
hold their layers in a ``ModuleList``: one stage per layer there too); a layer whose output
is a view of its last result (OPT's ``(residual + h).view(shape)``) is cut after the view; ``"fine"`` takes every valid cut (mid-block cuts included: more freedom for the
solver, more stages); an integer n takes at most n stages of balanced size (the size of a
stage: the elements of the new tensors its nodes produce).

The stages call the ORIGINAL submodules and read the original parameters and buffers (no
copies): training the chain trains the model.  :class:`StageChain` presents the model's
own parameters, buffers and submodules under their own names, so ``state_dict`` keys are
the model's and load both ways.

What the chain does not see: Python-level decisions made while tracing are fixed (the
branches taken for the example; with export also the shapes and ``self.training``); a
chain captured by export answers in another mode (``chain.eval()``) with the model's own
forward, its stages refuse to run in it (:mod:`.export_mode`), and it refuses
inputs of other shapes, and rewrites the devices its graph names when moved with ``.to()``.
Constants handed between stages and fixed inputs live outside the chain's activations,
like the parameters.  A stage's recomputation replays its random draws and BatchNorm
statistics (:mod:`.executor`); other in-place updates of buffers would run again.
"""
from __future__ import annotations

import warnings

import torch
from torch import fx, nn
from torch.utils import _pytree as pytree

from remat_theory.model.errors import CaptureError
from remat_theory.torch.capture.call_inputs import ChainInputs
from remat_theory.torch.capture.cuts import (Plan, Probe, StageBuilder, choose, distinct_cuts,
                                             drop_view_stages, kept_nodes, valid_cut_points)
from remat_theory.torch.capture.export_mode import guard_stages, in_other_mode
from remat_theory.torch.capture.guard import capture_errors, detached_inputs, refuses_grad_input
from remat_theory.torch.capture.seam_stages import build_stages
from remat_theory.torch.capture.stages import Staged
from remat_theory.torch.capture.trace import (clone_inputs, primary_index, trace_export, trace_fx,
                                              trace_inputs, trace_kept)


GRANULARITIES = ("block", "fine")
METHODS = ("auto", "modules", "fx", "export")


# ------------------------------------------------------------------------ the chain
class StageChain(Staged):
    """A model captured as a chain of stages (see :func:`to_stages`).

    The chain shares the model's parameter, buffer and submodule registries: ``parameters()``,
    ``state_dict()`` (same keys), ``load_state_dict``, ``.to()`` and ``train()`` act on the
    model itself.  The stages (``chain.stages``, or iterate the chain) are what the profiler
    and executor run; ``chain(x0)`` runs them in order and returns the chain's output (the
    model's chosen output tensor).

    Attributes
    ----------
    stages : list of ``torch.fx.GraphModule``, one tensor in and one out; ``stage.label``
        names the module(s) it covers.
    original : the captured model.
    example_input : x_0 of the capture.
    method : ``"modules"`` (at the layers, eager), ``"fx"`` or ``"export"``.
    valid_cuts : how many distinct valid cuts the graph has (``granularity="fine"`` takes
        them all: ``valid_cuts + 1`` stages).
    fixed_inputs : dict name -> tensor, the model's other tensor inputs installed now (the
        example's, or the last call's).  They belong to each call: ``chain(x, attention_mask=
        ..., labels=...)`` passes them (every one; a call without them raises), see
        :mod:`.call_inputs`.
    """

    def __init__(self, model: nn.Module, stages: list, *, example_input, method: str,
                 granularity, valid_cuts: int, fixed: dict):
        super().__init__()
        for name in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
            object.__setattr__(self, name, getattr(model, name))
        object.__setattr__(self, "original", model)
        object.__setattr__(self, "stages", list(stages))
        self.example_input = example_input
        self.method = method
        self.granularity = granularity
        self.valid_cuts = valid_cuts
        self.captured_training = model.training
        self.training = model.training
        self._fixed = dict(fixed)
        self._inputs = ChainInputs(self._fixed, self.stages, CaptureError)
        self._device = _device_of(self) or example_input.device

    def __len__(self) -> int:
        return len(self.stages)

    def __iter__(self):
        return iter(self.stages)

    def __getitem__(self, k):
        return self.stages[k]

    @property
    def labels(self) -> list:
        return [s.label for s in self.stages]

    @property
    def fixed_inputs(self) -> dict:
        """The other inputs installed now: the example's, or the last call's."""
        return {name: self._inputs.current(name) for name in self._fixed}

    def set_inputs(self, **tensors) -> None:
        """Install other inputs (e.g. ``attention_mask=``) for the NEXT call only (the
        call need not repeat them; the one after must give its own).  Prefer passing them
        with the call: ``chain(x, attention_mask=...)``."""
        self._inputs.set_next(tensors)

    def forward(self, x, **others):
        """The stages in order on ``x``; ``others``: the chain's other inputs for this call
        (every one, of the captured shapes; see :mod:`.call_inputs`)."""
        self._inputs.take(others, "chain")
        if in_other_mode(self):  # an exported graph keeps its capture's mode (export_mode)
            return self.original_forward(x)
        return self._run(x)

    def _run(self, x):
        for s in self.stages:
            x = s(x)
        return x

    def original_forward(self, x0, **others):
        """The captured model itself on input ``x0`` (the other inputs: ``others``, by
        default the installed ones, :attr:`fixed_inputs`), returning the tensor the chain
        outputs: the reference the chain answers to."""
        args, kwargs, (kind, key), index = self._call
        args, kwargs = list(args), dict(kwargs)
        self._inputs.check(others)
        for name, t in dict(self.fixed_inputs, **others).items():
            if name.startswith("input "):
                args[int(name.split()[1])] = t
            else:
                kwargs[name] = t
        if kind == "a":
            args[key] = x0
        else:
            kwargs[key] = x0
        return pytree.tree_leaves(self.original(*args, **kwargs))[index]

    def train(self, mode: bool = True):
        # an export chain in another mode than its capture's runs the model (export_mode)
        super().train(mode)
        self.original.training = mode
        for s in self.stages:
            s.train(mode)
        return self

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        for s in self.stages:  # the stages' own buffers: fixed inputs, export constants
            for name, b in list(s._buffers.items()):
                if b is not None:
                    s._buffers[name] = fn(b)
        self._inputs.moved(fn)
        device = _device_of(self)
        if device is not None and device != self._device:
            for s in self.stages:
                if isinstance(s, fx.GraphModule):
                    _retarget(s, self._device, device)
                elif hasattr(s, "runner"):
                    s.runner.retarget(self._device, device)
            self._device = device
        return self

    def extra_repr(self) -> str:
        return (f"{len(self.stages)} stages by {self.method} ({self.granularity}; "
                f"{self.valid_cuts} valid cuts): " + " | ".join(self.labels))


def _device_of(module: nn.Module):
    t = next(module.parameters(), None)
    if t is None:
        t = next(module.buffers(), None)
    return None if t is None else t.device


def _retarget(stage: fx.GraphModule, old: torch.device, new: torch.device) -> None:
    """Rewrite the devices written into a stage's graph (``torch.export`` records e.g.
    ``arange(..., device=cpu)``) when the chain moves from ``old`` to ``new``."""
    def swap(v):
        if isinstance(v, torch.device) and v == old:
            return new
        return v

    changed = False
    for n in stage.graph.nodes:
        args = pytree.tree_map(swap, n.args)
        kwargs = pytree.tree_map(swap, n.kwargs)
        if args != n.args or kwargs != n.kwargs:
            n.args, n.kwargs = args, kwargs
            changed = True
    if changed:
        stage.recompile()


# ------------------------------------------------------------------------ entry point
def _check_options(granularity, method):
    if isinstance(granularity, bool) or not (
            granularity in GRANULARITIES or (isinstance(granularity, int) and granularity >= 1)):
        raise CaptureError(f"granularity = {granularity!r} must be one of "
                           f"{', '.join(GRANULARITIES)} or an integer >= 1 (at most that many stages)")
    if method not in METHODS:
        raise CaptureError(f"method = {method!r} is unknown (expected one of {', '.join(METHODS)})")


def _capture(model, args, kwargs, x0, method, seed, ref_leaves, index):
    """Trace with each method in turn; return (traced, facts, primary node) of the first
    whose graph reproduces the model's output bit for bit."""
    methods = ("fx", "export") if method == "auto" else (method,)
    failures = []
    for m in methods:
        try:
            tr = (trace_fx if m == "fx" else trace_export)(model, args, kwargs, x0)
        except Exception as e:  # noqa: BLE001 - any tracing failure means: try the next method
            first = (str(e).strip().splitlines() or [""])[0][:300]
            failures.append(f"{m}: {type(e).__name__}: {first}")
            continue
        if tr.x0 is None:
            failures.append(f"{m}: the first input does not reach the traced graph")
            continue
        leaves = tr.outputs
        if len(leaves) != len(ref_leaves) or not isinstance(leaves[index], fx.Node):
            failures.append(f"{m}: the traced output has another structure than the model's")
            continue
        primary = leaves[index]
        vals = {n: _fresh_x0(v) if v is x0 else
                (v.detach().clone() if isinstance(v, torch.Tensor) else v)
                for n, v in tr.ph_values.items()}
        probe = Probe(tr.gm, vals, {primary}, x0.device)
        phs = [n for n in tr.gm.graph.nodes if n.op == "placeholder"]
        with trace_kept(model, x0.device, seed), torch.enable_grad():
            probe.run(*[vals[n] for n in phs])
        got = probe.facts[primary].value
        if not _reproduces(got, ref_leaves[index]):
            failures.append(f"{m}: the traced graph's output differs from the model's")
            continue
        probe.facts[primary].value = None
        return tr, probe.facts, primary
    raise CaptureError("cannot capture the model as a graph: " + "; ".join(failures)
                       + ". Make the forward traceable (no Python control flow on tensor values; "
                         "for transformers models pass use_cache=False), or split the model by "
                         "hand into an nn.Sequential or a list of stage modules")


def _reproduces(got, want) -> bool:
    """Bit for bit; on a GPU without deterministic algorithms, a kernel may reduce in another
    order from run to run, so there only to float rounding (with a warning)."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        return False
    if torch.equal(got, want):
        return True
    if want.device.type == "cuda" and not torch.are_deterministic_algorithms_enabled() \
            and torch.allclose(got, want, rtol=1e-5, atol=1e-6):
        warnings.warn("the captured graph reproduces the model's output only to rounding "
                      "(nondeterministic GPU kernels); torch.use_deterministic_algorithms(True) "
                      "makes the check exact", stacklevel=3)
        return True
    return False


def _fresh_x0(x0):
    c = x0.detach().clone()
    if c.is_floating_point() or c.is_complex():
        c.requires_grad_(True)
    return c


def _seam_chain(model, args, kwargs, x0, index, ref_leaves, seed, strict):
    """The chain cut at the model's own layers (:mod:`.seams`), checked against the model's
    output; None (or, when ``strict``, a CaptureError) when the model has no usable stack."""
    slot = ("a", 0) if args else ("k", next(iter(kwargs)))
    fixed = {}
    for k, v in enumerate(args):
        if isinstance(v, torch.Tensor) and v is not x0:
            fixed[f"input {k}"] = v
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor) and v is not x0:
            fixed[k] = v
    why = "the stages do not reproduce the model's output"
    for dense in (False, True):
        a, kw = clone_inputs(args, kwargs, x0)
        try:
            with trace_kept(model, x0.device, seed):
                stages, runner = build_stages(model, a, kw, slot, index, dense)
        except Exception as e:  # noqa: BLE001 - SeamError, or the model's forward failed
            if strict:
                raise CaptureError(f"cannot capture {type(model).__name__} at its layers: {e}") from None
            return None
        del a, kw
        runner.args = tuple(args)
        runner.kwargs = dict(kwargs)
        for s in stages:
            s.train(model.training)
        chain = StageChain(model, stages, example_input=x0, method="modules",
                           granularity="block", valid_cuts=len(stages) - 1, fixed=fixed)
        runner.fixed = chain._fixed
        try:
            with trace_kept(model, x0.device, seed), torch.enable_grad():
                got = chain(_fresh_x0(x0), **fixed)
        except Exception as e:  # noqa: BLE001 - a stand-in the forward cannot read: try dense
            why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
            continue
        if _reproduces(got, ref_leaves[index]):
            chain._call = (tuple(args), dict(kwargs), slot, index)
            return chain
        why = "the stages do not reproduce the model's output"
    if strict:
        raise CaptureError(f"cannot capture {type(model).__name__} at its layers: {why}")
    return None


@capture_errors
def to_stages(model: nn.Module, example_inputs, *, granularity="block", output=None,
              method: str = "auto", seed: int = 0, check: bool = True) -> StageChain:
    """Capture ``model`` as a chain of stages that the profiler and executor accept.

    Parameters
    ----------
    model : any ``nn.Module``.  Capture in the mode you will train in (``model.train()``);
        for a comparison with the plain model, ``eval()`` or dropout 0.
    example_inputs : a tensor, a tuple of positional inputs, or a dict of keyword inputs.
        The first one is the chain's input x_0 (a float input, or token ids); the other
        tensors are fixed inputs (:meth:`StageChain.set_inputs`), other values (``None``,
        ``use_cache=False``) are fixed at capture.
    granularity : ``"block"`` (default: one stage per layer of the model's repeated stack,
        run eagerly, :mod:`.seams`; without a stack, one per block of its graph), ``"fine"``
        (every valid cut of the graph) or an int n (at most n stages of balanced size).
        See the module docstring.
    output : which tensor of the model's output is the chain's output: default the output
        itself if it is a tensor, else ``.logits``, else ``.last_hidden_state``, else the
        first tensor; a key (str) or a leaf index (int) of the output's pytree.
    method : ``"auto"`` (at the layers, then fx, then export), ``"modules"`` (at the layers
        only), ``"fx"`` or ``"export"``.
    seed : random seed of the capture's check runs (dropout draws the same masks in both).
    check : run the chain once and require the model's output bit for bit.

    Returns
    -------
    StageChain
        Usable wherever an ``nn.Sequential`` of stages is: ``profile(chain, chain.example_input,
        loss_fn)``, :class:`~remat_theory.torch.run.executor.ScheduleExecutor`.

    Raises
    ------
    CaptureError
        An input is not a tensor, neither method can trace the model (both failures are
        named), no valid cut exists, or the model's forward fails (any failure is a
        CaptureError, :mod:`.capture_guard`).  The caller's tensors are never changed.

    Example
    -------
    >>> chain = to_stages(gpt2, input_ids)                       # doctest: +SKIP
    >>> c = profile(chain, chain.example_input, loss_fn)          # doctest: +SKIP
    """
    if not isinstance(model, nn.Module):
        raise CaptureError(f"model must be an nn.Module, got {type(model).__name__}")
    _check_options(granularity, method)
    args, kwargs, _, x0 = trace_inputs(model, example_inputs)
    args, kwargs, x0 = detached_inputs(args, kwargs, x0)  # never the caller's tensor
    a, kw = clone_inputs(args, kwargs, x0)
    try:
        with trace_kept(model, x0.device, seed), torch.enable_grad():
            ref = model(*a, **kw)
    except RuntimeError as e:  # it sets requires_grad on its input (capture_guard)
        if not refuses_grad_input(e):
            raise
        a, kw = clone_inputs(args, kwargs, None)
        with trace_kept(model, x0.device, seed), torch.enable_grad():
            ref = model(*a, **kw)
    index = primary_index(ref, output)
    ref_leaves = [t.detach() if isinstance(t, torch.Tensor) else t for t in pytree.tree_leaves(ref)]
    del ref, a, kw
    if method in ("auto", "modules") and granularity == "block":
        chain = _seam_chain(model, args, kwargs, x0, index, ref_leaves, seed, method == "modules")
        if chain is not None:
            return chain
    tr, facts, primary = _capture(model, args, kwargs, x0, method, seed, ref_leaves, index)
    if not facts[primary].grad:
        raise CaptureError("the chosen output does not depend differentiably on the input or "
                           "on any parameter: there is nothing to train")
    keep = kept_nodes(tr.gm.graph, facts, primary)
    order = [n for n in tr.gm.graph.nodes
             if n in keep and n.op not in ("placeholder", "get_attr", "output")]
    cuts, least = valid_cut_points(order, facts, tr.x0, primary, keep)
    distinct = distinct_cuts(cuts)
    cuts = drop_view_stages(facts, tr.x0, primary, distinct)
    if not cuts:
        raise CaptureError(
            f"no valid cut in {type(model).__name__}: at every point of its forward at least "
            f"{max(least, 2)} activations needing gradients are live (or the one live is "
            f"modified in place later), so it is one stage; split it by hand into an "
            f"nn.Sequential or a list of stage modules")
    # a layer's output is often a view of its last operation's result (OPT's
    # ``(residual + h).view(shape)``): the cut after the view is the layer's edge and the
    # one before it is not, so the block rule sees both, and the views are merged after
    chosen = choose(model, order, facts, distinct if granularity == "block" else cuts,
                     granularity)
    chosen = drop_view_stages(facts, tr.x0, primary, chosen)
    plan = Plan(order, [p for p, _ in chosen], [a for _, a in chosen], len(cuts))
    builder = StageBuilder(model, tr, facts, plan, primary)
    stages = [builder.build(k) for k in range(len(plan.cuts) + 1)]
    for s in stages:
        s.train(model.training)
    if tr.method == "export":
        guard_stages(stages, model, model.training)
    chain = StageChain(model, stages, example_input=x0, method=tr.method,
                       granularity=granularity, valid_cuts=len(cuts),
                       fixed={name: tr.ph_values[n] for n, name in tr.fixed.items()})
    chain._call = (tuple(args), dict(kwargs), ("a", 0) if args else ("k", next(iter(kwargs))), index)
    if check:
        with trace_kept(model, x0.device, seed), torch.enable_grad():
            got = chain(_fresh_x0(x0), **chain._inputs.example)
        if not _reproduces(got, ref_leaves[index]):
            raise CaptureError("the captured stages do not reproduce the model's output (please "
                               "report this model); split it by hand meanwhile")
    return chain
