"""torch is optional: the core package, the solvers and the CLI start without importing it."""
import ast
import subprocess
import sys

import pytest


def test_importing_remat_does_not_import_torch():
    code = ("import sys, remat_theory, solvers, remat_theory.cli as cli\n"
            "solvers.names(); cli.build_parser()\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


NO_TORCH = """import sys


class _NoTorch:  # as if torch were not installed
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
"""


@pytest.mark.slow  # a whole collection in a fresh interpreter (5 s); the default tier checks the
# imports above, and docs/testing.md gives the run in an environment without torch
def test_the_suite_collects_without_torch(tmp_path):
    """``pip install -e ".[test]"`` has no torch: ``python -m pytest`` must collect (the torch
    tests then skip themselves).  torch is blocked here by a sitecustomize that makes
    ``import torch`` fail as it does where torch is not installed."""
    from pathlib import Path
    import os

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(root)]))
    r = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


TORCH_MODULES = ("torch", "transformers", "remat_theory.torch", "torch_device")


def _imports_torch(node) -> bool:
    names = ([a.name for a in node.names] if isinstance(node, ast.Import)
             else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
    return any(n == m or n.startswith(m + ".") for n in names for m in TORCH_MODULES)


def _skips_without_torch(node) -> bool:
    """``pytest.importorskip("torch")``, possibly assigned."""
    call = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "importorskip" and bool(call.args)
            and isinstance(call.args[0], ast.Constant) and call.args[0].value == "torch")


def test_every_test_module_skips_before_importing_torch():
    """The cheap half of the check above, in this process: a test module imports torch (or
    transformers, the torch harness, the torch tests' device helper) at its top level only
    after ``pytest.importorskip`` of it, so that without torch it is skipped, not an error;
    the device helper itself is left out of the collection by conftest.py without torch."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    bad = []
    for path in sorted(here.glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if "torch" not in text and "transformers" not in text:
            continue
        skipped = False
        for node in ast.parse(text).body:
            skipped = skipped or _skips_without_torch(node)
            if _imports_torch(node) and not skipped:
                bad.append(f"{path.name}:{node.lineno}")
    assert not bad, f"imports torch before pytest.importorskip: {bad}"
    assert any(_imports_torch(n) for n in ast.parse((here / "torch_device.py").read_text()).body)
    assert '"torch_device.py"' in (here / "conftest.py").read_text(encoding="utf-8")
