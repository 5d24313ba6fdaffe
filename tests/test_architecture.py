"""The package map's numbers (docs/architecture.md), read from the source with ``ast``: the
torch layer's imports stack at most 5 modules deep (a package's ``__init__`` that re-exports
adds no level), and no module of the package is over 600 lines."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_DEPTH = 5
MAX_LINES = 600


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(top: str) -> dict:
    """module -> (is a package __init__, the modules under ``top`` it imports, at any depth)."""
    paths = {_module(p): p for p in (ROOT / top.replace(".", "/")).rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        init = path.name == "__init__.py"
        pkg = name if init else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for a in node.names:  # a submodule imported by name is that module
                    cand = f"{mod}.{a.name}" if f"{mod}.{a.name}" in paths else mod
                    if cand in paths and cand != name:
                        deps.add(cand)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in paths and a.name != name)
        graph[name] = (init, deps)
    return graph


def deepest_chain(graph: dict) -> list:
    """The longest chain of imports (a cycle is reported as such)."""
    memo: dict = {}

    def chain(n, stack):
        if n in stack:
            raise AssertionError(f"import cycle: {' -> '.join(stack + (n,))}")
        if n not in memo:
            init, deps = graph[n]
            best = []
            for d in deps:
                c = chain(d, stack + (n,))
                if len(c) > len(best):
                    best = c
            memo[n] = best if init else [n] + best
        return memo[n]
    return max((chain(n, ()) for n in graph), key=len)


def test_torch_imports_stack_at_most_five_deep():
    deepest = deepest_chain(import_graph("remat_theory.torch"))
    assert len(deepest) <= MAX_DEPTH, " -> ".join(deepest)


def test_the_depth_check_sees_a_deep_chain_and_a_cycle():
    g = {f"m{k}": (False, {f"m{k + 1}"} if k < 6 else set()) for k in range(7)}
    assert len(deepest_chain(g)) == 7
    g["pkg"] = (True, {"m0"})  # a re-exporting __init__ adds no level
    assert len(deepest_chain(g)) == 7
    g["m6"] = (False, {"m0"})
    with pytest.raises(AssertionError, match="cycle"):
        deepest_chain(g)


FILES = sorted(p for top in ("remat_theory", "solvers") for p in (ROOT / top).rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_600_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (split it along a seam)"
