"""Capture, first step: the model traced into one graph (by ``torch.fx`` or ``torch.export``) with its
example inputs, the primary output found, the inputs cloned so capture never changes them."""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass

import torch
from torch import fx, nn
from torch.utils import _pytree as pytree

from remat_theory.model.errors import CaptureError


_OUTPUT_KEYS = ("logits", "last_hidden_state")


# ------------------------------------------------------------------------ small helpers
def trace_tensors(value) -> list:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def ptrs(value) -> set:
    out = set()
    for t in trace_tensors(value):
        p = t.untyped_storage().data_ptr()
        if p:
            out.add(p)
    return out


def trace_stack(node) -> list:
    """Qualified names of the modules whose forward produced ``node``, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for v in stack.values():
        path = v[0] if isinstance(v, tuple) else v
        # a shared module (an unrolled RNN cell) is named where first registered: keep
        # only the entries nested in the previous one
        if isinstance(path, str) and path and (not out or path.startswith(out[-1] + ".")):
            out.append(path)
    return out


def trace_submodule(model: nn.Module, path: str):
    if not path:
        return model
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None


def trace_attr(obj, target: str):
    for item in target.split("."):
        obj = getattr(obj, item)
    return obj


@contextlib.contextmanager
def trace_kept(model: nn.Module, device, seed: int):
    """Run a block from random seed ``seed``, then restore the RNG states and the buffers."""
    buffers = list(model.buffers())
    with torch.no_grad():
        saved = [b.clone() for b in buffers]
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        try:
            yield
        finally:
            with torch.no_grad():
                for b, s in zip(buffers, saved):
                    b.copy_(s)


def check_input(x, shape, dtype):
    """Guard of an export-captured chain: its graph holds only for the example's shape."""
    if tuple(x.shape) != shape or x.dtype != dtype:
        raise CaptureError(f"this chain was captured by torch.export for inputs of shape "
                           f"{list(shape)} and dtype {dtype}; got shape {list(x.shape)}, dtype "
                           f"{x.dtype} (capture again with an example of the new shape)")
    return x


# ------------------------------------------------------------------------ inputs
def trace_inputs(model, example_inputs):
    """(args, kwargs, name of x_0, x_0): x_0 is the first positional input, or the first
    keyword one; the other tensors are fixed inputs, other values are baked constants."""
    if isinstance(example_inputs, torch.Tensor):
        args, kwargs = (example_inputs,), {}
    elif isinstance(example_inputs, (tuple, list)):
        args, kwargs = tuple(example_inputs), {}
    elif isinstance(example_inputs, dict):
        args, kwargs = (), dict(example_inputs)
    else:
        raise CaptureError(f"example_inputs must be a tensor, a tuple of inputs or a dict of "
                           f"keyword inputs; got {type(example_inputs).__name__}")
    if not args and not kwargs:
        raise CaptureError("example_inputs is empty: the chain needs one input tensor x_0")
    try:
        names = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        names = []
    first_name = next(iter(kwargs)) if not args else (names[0] if names else "input")
    first = args[0] if args else kwargs[first_name]
    if not isinstance(first, torch.Tensor):
        raise CaptureError(f"the first example input ({first_name}) is a {type(first).__name__}, "
                           f"not a tensor: the chain's input x_0 must be one tensor")
    plain = (type(None), bool, int, float, str, torch.dtype, torch.device)
    named = [(f"input {k}", v) for k, v in enumerate(args)] + list(kwargs.items())
    for name, v in named:
        if not isinstance(v, (torch.Tensor,) + plain):
            raise CaptureError(f"example input {name} is a {type(v).__name__}; each input must "
                               f"be a tensor or a plain constant (None, bool, int, float, str)")
    return args, kwargs, first_name, first


def clone_inputs(args, kwargs, x0):
    """Fresh copies of the tensor inputs (a model may modify them in place); x_0 requires
    grad when it can (a float input), so that what depends on it is an activation."""
    def fresh(v):
        if not isinstance(v, torch.Tensor):
            return v
        c = v.detach().clone()
        if v is x0 and (c.is_floating_point() or c.is_complex()):
            c.requires_grad_(True)
        return c
    return tuple(fresh(a) for a in args), {k: fresh(v) for k, v in kwargs.items()}


def primary_index(out, output) -> int:
    """Index, among the tensor leaves of the model output, of the chain's last activation."""
    leaves = pytree.tree_leaves(out)
    if isinstance(output, int) and not isinstance(output, bool):
        if not 0 <= output < len(leaves) or not isinstance(leaves[output], torch.Tensor):
            raise CaptureError(f"output = {output}: the model output has {len(leaves)} leaves; "
                               f"leaf {output} is not a tensor")
        return output
    if output is not None and not isinstance(output, str):
        raise CaptureError(f"output = {output!r} must be None, a key (str) or a leaf index (int)")
    keys = (output,) if isinstance(output, str) else _OUTPUT_KEYS
    chosen = None
    if isinstance(out, torch.Tensor):
        chosen = out
    else:
        for key in keys:
            v = out.get(key) if isinstance(out, dict) else getattr(out, key, None)
            if isinstance(v, torch.Tensor):
                chosen = v
                break
        if chosen is None and isinstance(output, str):
            raise CaptureError(f"output = {output!r}: the model output "
                               f"({type(out).__name__}) has no tensor of that name")
        if chosen is None:
            chosen = next((t for t in leaves if isinstance(t, torch.Tensor)), None)
    if chosen is None:
        raise CaptureError(f"the model output ({type(out).__name__}) holds no tensor")
    index = next((k for k, t in enumerate(leaves) if t is chosen), None)
    if index is None:
        raise CaptureError(f"the model output is a {type(out).__name__}, which torch's pytree "
                           f"does not open; return a tensor, a tuple or a dict from forward")
    return index


# ------------------------------------------------------------------------ tracing
@dataclass
class Traced:
    gm: fx.GraphModule
    method: str
    ph_values: dict  # placeholder node -> example value
    x0: fx.Node
    fixed: dict  # placeholder node -> input name (tensor inputs other than x_0)
    outputs: list  # flat output leaves (nodes or constants), in pytree order


def trace_fx(model, args, kwargs, x0) -> Traced:
    sig = inspect.signature(model.forward)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
        raise CaptureError("forward takes *args/**kwargs, which torch.fx cannot trace")
    bound = sig.bind(*args, **kwargs)
    concrete, values = {}, {}
    for name, p in sig.parameters.items():
        v = bound.arguments.get(name, p.default)
        values[name] = v
        if not isinstance(v, torch.Tensor):
            concrete[name] = v
    gm = fx.symbolic_trace(model, concrete_args=concrete or None)
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    ph_values, fixed, x0_node = {}, {}, None
    for n, name in zip(phs, sig.parameters):
        v = values[name]
        ph_values[n] = v
        if v is x0:
            x0_node = n
        elif isinstance(v, torch.Tensor):
            fixed[n] = name
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    return Traced(gm, "fx", ph_values, x0_node, fixed, pytree.tree_leaves(out_node.args[0]))


@contextlib.contextmanager
def _masks_as_compiled():
    """Let ``transformers`` skip a mask it would skip outside ``torch.export`` (while this
    export runs).  A causal or bidirectional mask without padding is left to SDPA's
    ``is_causal`` (no mask tensor) in eager runs and under ``torch.compile``; under
    ``torch.export`` ``transformers`` always builds it, since an exported graph serving
    other shapes must not hard-code that choice.  The stages captured here accept only the
    example's shapes (the chain checks x_0) and the choice depends only on those shapes and
    on there being no padding mask (a padding mask given as an input is traced, and then
    ``transformers`` still builds the mask), so it holds for every input the chain takes.
    The built mask cost memory and kernels the model does not run: SDPA's CPU kernel saves
    it, as a float tensor, for its backward (OPT small: 65,536 B, a 4 x 1 x 64 x 64 mask,
    which the model compiled whole does not hold)."""
    import sys
    mu = sys.modules.get("transformers.masking_utils")
    if mu is None or not callable(getattr(mu, "is_torchdynamo_exporting", None)):
        yield
        return
    was = mu.is_torchdynamo_exporting
    mu.is_torchdynamo_exporting = _not_exporting
    try:
        yield
    finally:
        mu.is_torchdynamo_exporting = was


def _not_exporting() -> bool:
    return False


def trace_export(model, args, kwargs, x0) -> Traced:
    with _masks_as_compiled():
        ep = torch.export.export(model, tuple(args), kwargs=dict(kwargs))
    gm = ep.module()
    graph = gm.graph
    for n in list(graph.nodes):  # shape guards of the exported module: the chain checks x_0
        if n.op == "call_module" and n.target.startswith("_guards") and not n.users:
            graph.erase_node(n)
    phs = [n for n in graph.nodes if n.op == "placeholder"]
    leaves = pytree.tree_leaves((tuple(args), dict(kwargs)))
    if len(phs) != len(leaves):
        raise CaptureError(f"torch.export gave {len(phs)} graph inputs for {len(leaves)} "
                           f"example inputs")
    names = [f"input {k}" for k in range(len(args))] + list(kwargs)
    flat_names = []
    for name, v in zip(names, list(args) + list(kwargs.values())):
        flat_names += [name] * len(pytree.tree_leaves(v))
    ph_values, fixed, x0_node = {}, {}, None
    for n, v, name in zip(phs, leaves, flat_names):
        ph_values[n] = v
        if v is x0:
            x0_node = n
        elif isinstance(v, torch.Tensor):
            fixed[n] = name
    out_node = next(n for n in graph.nodes if n.op == "output")
    return Traced(gm, "export", ph_values, x0_node, fixed, list(out_node.args[0]))
