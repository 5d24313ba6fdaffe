"""The device the torch tests run on: the CPU by default, a GPU with ``REMAT_TEST_DEVICE=cuda``.

    REMAT_TEST_DEVICE=cuda python -m pytest -m torch tests/

On CUDA the tests compare gradients with plain backpropagation bit for bit, as on the CPU.
That holds only if every kernel is deterministic, so deterministic algorithms are switched on
(an op without a deterministic CUDA kernel then fails its test, naming itself, rather than
making the comparison flaky).  Asking for CUDA where there is none fails, it does not fall
back to the CPU: a GPU run that silently tested the CPU would claim what it never checked.
"""
import os

import torch

NAME = os.environ.get("REMAT_TEST_DEVICE", "cpu")
if NAME not in ("cpu", "cuda"):
    raise RuntimeError(f"REMAT_TEST_DEVICE={NAME!r}: expected cpu or cuda")
if NAME == "cuda":
    if not torch.cuda.is_available():
        raise RuntimeError("REMAT_TEST_DEVICE=cuda, but torch sees no CUDA device")
    # cuBLAS reads this when its first handle is made; without it, deterministic mode refuses matmuls.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
DEVICE = torch.device(NAME)


def rng_states():
    """Every random generator the networks draw from on DEVICE (the CPU one, and the GPU one)."""
    states = [torch.get_rng_state()]
    if DEVICE.type == "cuda":
        states.append(torch.cuda.get_rng_state(DEVICE))
    return states


def same_rng(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
