import importlib.util
import os

import pytest

from hypothesis import HealthCheck, settings

# In CI, hypothesis runs derandomized (the same examples every run) so that a red CI always
# means a reproducible failure; locally it explores new examples each run.
settings.register_profile(
    "ci", deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    "dev", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# torch is optional (pip install -e ".[test]" has none): --doctest-modules would import the
# torch tests' device helper to look for doctests, which fails at collection without torch.
# The torch test files skip themselves (pytest.importorskip).
def _has_torch() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


collect_ignore = [] if _has_torch() else ["torch_device.py"]


@pytest.fixture
def one_torch_thread():
    """Run a torch test on one thread (results and timings do not depend on the core
    count), restoring torch's setting afterwards."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
