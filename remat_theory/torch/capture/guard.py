"""What :func:`~remat_theory.torch.capture.chain.to_stages` promises the caller whatever the model
does: it never changes the caller's tensors, and every failure is a :class:`CaptureError`.

- The capture works on a detached alias of the example input x_0 (the same values; its own
  ``requires_grad``), so neither the capture's runs nor a model that sets
  ``requires_grad`` on its input (wav2vec2's feature extractor, in training mode) change
  the tensor the caller passed.
- A model whose forward refuses an input that requires grad (wav2vec2 again: it sets
  ``requires_grad`` on a view of its input, which torch allows only on a leaf) is run for
  its reference output with an input that does not, as a training batch is
  (:func:`refuses_grad_input`).
- Any other exception escaping the capture (torch's, the model's) becomes a
  :class:`CaptureError` naming the model, the original error and the ways out.
"""
from __future__ import annotations

import functools

from remat_theory.model.errors import CaptureError, RematError


def detached_inputs(args, kwargs, x0):
    """``(args, kwargs, x0)`` with x_0 replaced by a detached alias (shares the values, not
    the tensor object): what the capture may mark as requiring grad is not the caller's."""
    alias = x0.detach()
    args = tuple(alias if v is x0 else v for v in args)
    kwargs = {k: (alias if v is x0 else v) for k, v in kwargs.items()}
    return args, kwargs, alias


def refuses_grad_input(e: BaseException) -> bool:
    """Whether ``e`` is torch refusing to set ``requires_grad`` on a non-leaf: the model
    sets it on (a view of) its input, which the capture made differentiable."""
    return isinstance(e, RuntimeError) and "requires_grad flags of leaf variables" in str(e)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]


def capture_errors(fn):
    """Decorator of ``to_stages(model, ...)``: an exception other than a RematError leaves
    as a CaptureError saying which model failed and what to do."""
    @functools.wraps(fn)
    def wrapper(model, *args, **kwargs):
        try:
            return fn(model, *args, **kwargs)
        except RematError:
            raise
        except Exception as e:  # noqa: BLE001 - torch's or the model's own error
            name = type(model).__name__
            raise CaptureError(
                f"capturing {name} failed: {type(e).__name__}: {_first_line(e)}. Try another "
                f"method= ('modules', 'fx', 'export'), capture in eval mode "
                f"(model.eval()), or split {name} by hand into an nn.Sequential or a list of "
                f"stage modules") from e
    return wrapper
