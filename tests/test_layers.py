"""The floors of the package, read from the source (ast): each imports only from the floors
below it, and only the torch floor (and the lab above it) imports torch.

    remat_theory.model  <-  solvers  <-  remat_theory.analysis, remat_theory.strategies
                                      <-  remat_theory.cli;  remat_theory.torch beside analysis
    remat_theory.torch:  base (tracker, device)  <-  capture  <-  plan  <-  run  <-  profiling
                                      <-  modules, inplace  <-  the package's __init__
    remat_theory.lab (experiment drivers)  above the torch layer and analysis; below the cli

docs/architecture.md is the map this test enforces.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# floor -> the first-party floors it may import (itself included).  The torch layer is
# rooms (docs/architecture.md): its base modules (the meters, the command line's device
# floor) and capture first, then plan, run, profiling, and the user-facing modules and the
# in-place API last; each room imports only the rooms before it.  The lab (experiment
# drivers) sits above the library: nothing in the library imports it.
_M, _S, _A = "remat_theory.model", "solvers", "remat_theory.analysis"
_T = "remat_theory.torch"
_ROOMS = [f"{_T}.base", f"{_T}.capture", f"{_T}.plan", f"{_T}.run", f"{_T}.profiling"]
ALLOWED = {
    _M: {_M},
    _S: {_M, _S},
    _A: {_M, _S, _A},
    "remat_theory.strategies": {_M, _A, "remat_theory.strategies"},
    **{room: {_M, _S, *_ROOMS[:k + 1]} for k, room in enumerate(_ROOMS)},
    f"{_T}.modules": {_M, _S, *_ROOMS, f"{_T}.modules"},
    f"{_T}.inplace": {_M, _S, *_ROOMS, f"{_T}.inplace"},
    _T: {_M, _S, *_ROOMS, f"{_T}.modules", f"{_T}.inplace", _T},
    "remat_theory.lab": {_M, _S, _A, *_ROOMS, f"{_T}.modules", f"{_T}.inplace", _T,
                         "remat_theory.lab"},
    "remat_theory.cli": {_M, _S, _A, *_ROOMS, f"{_T}.modules", f"{_T}.inplace", _T,
                         "remat_theory.lab", "remat_theory.cli", "remat_theory"},
}
BASE = {f"{_T}.tracker", f"{_T}.device"}  # the torch layer's base modules: no room above them


def floor_of(module: str) -> str | None:
    if module in BASE:
        return f"{_T}.base"
    for f in sorted(ALLOWED, key=len, reverse=True):
        if module == f or module.startswith(f + "."):
            return f
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import statement, at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    pkg = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
    return out


FILES = sorted(p for top in ("remat_theory", "solvers") for p in (ROOT / top).rglob("*.py"))


def violations(me: str, imported: list[tuple[int, str]]) -> list[str]:
    """What a module of floor ``me`` must not import, among ``imported``."""
    bad = []
    for line, mod in imported:
        first = mod.split(".")[0]
        if first in ("torch", "torchvision", "transformers") and not me.startswith(
                (_T, "remat_theory.lab")):
            bad.append(f"line {line}: {mod} (only remat_theory.torch and the lab import torch)")
        if first not in ("remat_theory", "solvers"):
            continue
        target = floor_of(mod) or mod
        if target not in ALLOWED[me]:
            bad.append(f"line {line}: {mod} (floor {me} may import {sorted(ALLOWED[me])})")
    return bad


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_floor_imports_only_from_floors_below(path):
    # remat_theory/__init__.py belongs to no floor: it re-exports the ground floor only.
    me = floor_of(module_name(path)) or "remat_theory.model"
    bad = violations(me, imports(path))
    assert not bad, f"{path.relative_to(ROOT)}: " + "; ".join(bad)


def test_the_check_sees_an_upward_import_and_torch(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import numpy\ndef f():\n    from solvers import registry\n    import torch\n"
                     "from remat_theory.model.chain import Chain\n")
    found = ast.parse(probe.read_text())
    imported = [(n.lineno, n.module if isinstance(n, ast.ImportFrom) else n.names[0].name)
                for n in ast.walk(found) if isinstance(n, (ast.Import, ast.ImportFrom))]
    bad = violations("remat_theory.model", imported)
    assert len(bad) == 2 and "solvers" in bad[0] + bad[1] and "torch" in bad[0] + bad[1]
    assert violations("remat_theory.torch", imported) == []
    assert violations(f"{_T}.capture", imported) == []
    assert violations("solvers", imported) == [b for b in bad if "torch" in b]


def test_the_check_sees_a_room_importing_a_later_room_or_the_lab():
    later = [(1, f"{_T}.run.executor"), (2, "remat_theory.lab.frontier"), (3, f"{_T}.tracker"),
             (4, f"{_T}.capture.stages")]
    bad = violations(f"{_T}.plan", later)
    assert len(bad) == 2 and "run.executor" in bad[0] and "lab" in bad[1]
    assert [b.split(" (")[0] for b in violations(f"{_T}.profiling", later)] == [
        "line 2: remat_theory.lab.frontier"]
    assert violations("remat_theory.lab", later) == []
