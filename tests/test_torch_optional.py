"""torch is optional: the core package, the solvers and the CLI start without importing it."""
import subprocess
import sys


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
