"""The dynamic programs' min-plus, compiled: numba kernels, numpy as the fallback.

``dp`` and ``dp-weak`` spend their time in one operation, a min-plus reduction over rows of
memory values (``out[m] = min(out[m], min_k left[k, m] + right[k, m])``).  With numpy it
is one call per block of rows and per segment, a temporary the size of the block, and the
segment loop in Python (``solvers/dp.py``'s docstring).  Here it is compiled with numba
(Lam, Pitrou, Seibert, "Numba: a LLVM-based Python JIT compiler", 2015): the whole table
fill runs as one loop nest, the sum and the minimum fused, no temporary.

Option ``kernel`` (of ``dp``, ``dp-weak`` and ``dp-offload``; :data:`KERNEL`):
``"numba"``, ``"numpy"`` or ``"auto"`` (the default: numba when it imports, numpy
otherwise, silently: the answers are the same).  ``kernel="numba"`` without numba is an
error naming the way out.  Both kernels give the same tables, value for value (the same
floating-point operations in the same order; the tests compare them), so every answer is
the same.

numba is imported on first use only (importing ``solvers`` stays cheap), and the compiled
code is cached on disk (``cache=True``): the first run on a machine compiles (a few
seconds), later ones load it.

``dp-offload`` reduces its option-B splits with ``dp_numba.split_rows_min``
(``solvers/offload/dp_split.py``).  For another DP: :func:`min_plus_rows` is the one small
public entry, the fused reduction of a stack of candidate rows, with the same kernel
choice.
"""
from __future__ import annotations

import math

import numpy as np

from remat_theory.model.errors import SolverOptionError
from solvers._options import Option

__all__ = ["KERNEL", "KERNELS", "numba_available", "resolve_kernel", "min_plus_rows", "jit"]

#: The values of option ``kernel``.
KERNELS = ("auto", "numba", "numpy")

#: The ``kernel`` option, as ``dp`` and ``dp-weak`` declare it.
KERNEL = Option("choice", "min-plus kernel: numba (compiled, fused), numpy (the fallback), "
                "auto (numba when it imports and the table is big enough to repay compiling "
                "it; the answers are the same)", choices=KERNELS)

#: ``auto`` takes numba only when numpy is estimated to need at least this many seconds:
#: below it, loading the compiled kernels (0.3-5 s in a fresh process, up to about 30 s of
#: compiling on a fresh install) costs more than it saves.
AUTO_MIN_NUMPY_SECONDS = 0.5

_NUMBA = None  # None: not tried yet; False: not importable; else the module of kernels


def _load():
    global _NUMBA
    if _NUMBA is None:
        try:
            import numba  # noqa: F401  (only whether it imports)
        except ImportError:  # numba missing or broken: auto falls back to numpy
            _NUMBA = False
        else:  # an error in the kernels themselves is not hidden
            from solvers import dp_numba
            _NUMBA = dp_numba
    return _NUMBA


def numba_available() -> bool:
    """True when the compiled kernels can be used (numba imports)."""
    return bool(_load())


def resolve_kernel(kernel: str | None, solver: str, numpy_seconds: float | None = None) -> str:
    """``"numba"`` or ``"numpy"``: what ``kernel`` (an option value; None = auto) means here.

    ``"auto"`` is numba when it imports, numpy otherwise, and numpy too when
    ``numpy_seconds`` (the caller's estimate of the numpy kernel's time on this table) is
    below :data:`AUTO_MIN_NUMPY_SECONDS`: a small chain is not worth compiling for.
    ``"numba"`` without numba raises :class:`SolverOptionError` naming the solver, the
    option and the way out."""
    kernel = "auto" if kernel is None else kernel
    if kernel == "numpy":
        return "numpy"
    if kernel not in KERNELS:
        raise SolverOptionError(f"solver {solver!r}: kernel = {kernel!r} is not one of "
                                f"{', '.join(KERNELS)}")
    if (kernel == "auto" and numpy_seconds is not None
            and numpy_seconds < AUTO_MIN_NUMPY_SECONDS):
        return "numpy"
    if numba_available():
        return "numba"
    if kernel == "numba":
        raise SolverOptionError(f"solver {solver!r}: kernel = 'numba' but numba does not import "
                                f"here; pip install numba, or use kernel = 'numpy' (the same "
                                f"answers, slower)")
    return "numpy"


def jit():
    """The module of compiled kernels (``solvers/dp_numba.py``); numba must import."""
    mod = _load()
    if not mod:
        raise SolverOptionError("numba does not import here; pip install numba, or use "
                                "kernel = 'numpy'")
    return mod


def min_plus_rows(left: np.ndarray, right: np.ndarray, out: np.ndarray,
                  kernel: str = "auto") -> np.ndarray:
    """``out[m] = min(out[m], min_r left[r, m] + right[r, m])`` in place, and ``out``.

    ``left`` and ``right``: (R, W) arrays of one float dtype, ``out`` (W,) of the same
    (``inf`` is infeasible).  The one public entry for another DP to use the kernel (the sum
    and the minimum fused, no (R, W) temporary); ``kernel`` as the option."""
    if left.shape != right.shape or left.ndim != 2 or out.shape != left.shape[1:]:
        raise ValueError(f"min_plus_rows: shapes {left.shape}, {right.shape}, {out.shape} "
                         f"do not match ((R, W), (R, W), (W,))")
    if left.shape[0] == 0:
        return out
    if resolve_kernel(kernel, "min_plus_rows") == "numba":
        jit().min_plus_rows(left, right, out)
        return out
    np.minimum(out, (left + right).min(axis=0), out=out)
    return out


INF = math.inf
