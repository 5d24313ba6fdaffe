"""No module reaches into another package's private names: an underscore name (``_reads``)
or an underscore module (``solvers._schedules``) is imported only from within the package
that owns it.  Read from the source with ``ast``, every ``from ... import`` at any depth.

The packages are the floors of tests/test_layers.py, one level finer where a floor has
sub-packages (``solvers.ilp`` may use ``solvers._deadline``: the same floor), plus
``benchmarks`` and ``examples``, which use the public API only.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("remat_theory.model", "remat_theory.analysis", "remat_theory.strategies",
          "remat_theory.torch", "remat_theory.lab", "remat_theory.cli", "solvers", "benchmarks",
          "examples")


def floor(module: str) -> str:
    for f in sorted(FLOORS, key=len, reverse=True):
        if module == f or module.startswith(f + "."):
            return f
    return module.split(".")[0]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def reaches(path: Path) -> list[str]:
    """The private names of another floor that ``path`` imports (absolute imports of the
    first-party packages; relative imports stay inside their package)."""
    me = floor(module_name(path))
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module.split(".")[0] not in ("remat_theory", "solvers"):
            continue
        if floor(node.module) == me:
            continue
        bad = [p for p in node.module.split(".") if private(p)]
        bad += [a.name for a in node.names if private(a.name)]
        if bad:
            out.append(f"line {node.lineno}: from {node.module} import "
                       f"{', '.join(a.name for a in node.names)} ({', '.join(bad)})")
    return out


FILES = sorted(p for top in ("remat_theory", "solvers", "benchmarks", "examples")
               for p in (ROOT / top).rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_another_packages_private_names(path):
    assert reaches(path) == [], f"{path.relative_to(ROOT)} reaches into private names"


def test_the_check_sees_a_private_name_and_a_private_module(tmp_path):
    pkg = tmp_path / "remat_theory" / "torch"
    pkg.mkdir(parents=True)
    src = pkg / "x.py"
    src.write_text("from remat_theory.model.offload import reads, _reads\n"
                   "from solvers._schedules import segments_cost\n"
                   "from remat_theory.torch.run.executor import _same_storage\n"
                   "def f():\n    from solvers import _deadline\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        found = reaches(src)
    finally:
        ROOT = old
    assert [line.split(":")[0] for line in found] == ["line 1", "line 2", "line 5"], found
