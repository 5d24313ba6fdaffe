"""No import cycle among the modules of remat_theory/ and solvers/.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``
statement, at module level and inside functions alike (a function-level import that closes
a cycle is still a cycle, only a deferred one).  An edge goes from a module to the module
it names: ``from a.b import c`` names ``a.b.c`` when that is a module, else ``a.b``.  The
implicit import of a package's ``__init__`` when one of its submodules is imported is not
an edge, so a package's ``__init__`` importing its own submodules (to re-export their
names) is allowed; a submodule importing its package's ``__init__`` back is a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("remat_theory", "solvers")

# Cycles known outside the files of the ILP work, excluded here until fixed, each by its
# exact set of modules (a new cycle, or a known one that grows, still fails).
KNOWN_CYCLES: list[frozenset] = []


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of :data:`PACKAGES`."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: Path, known: set) -> set:
    """The modules of ``known`` that ``module`` (at ``path``) imports explicitly."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    out = set()

    def longest_known(dotted: str) -> str | None:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            cand = ".".join(parts[:i])
            if cand in known:
                return cand
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = longest_known(alias.name)
                if target:
                    out.add(target)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                target = sub if sub in known else longest_known(base) if base else None
                if target:
                    out.add(target)
    out.discard(module)
    return out


def import_graph() -> dict[str, set]:
    files = module_files()
    known = set(files)
    return {m: imports_of(m, p, known) for m, p in files.items()}


def cycles(graph: dict[str, set]) -> list[frozenset]:
    """The strongly connected components with more than one module (Tarjan), each a set of
    modules that import each other in a circle."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        # iterative Tarjan: the import graph is small, but recursion depth is not ours to spend
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    """The reader itself, on a made-up package: a function-level import closes a cycle, a
    relative import resolves, and ``__init__`` re-exporting a submodule is no cycle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import f\n")
    (pkg / "a.py").write_text("from . import b\n\ndef f():\n    return b.g()\n")
    (pkg / "b.py").write_text("def g():\n    from pkg.a import f\n    return f\n")
    files = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py"}
    graph = {m: imports_of(m, p, set(files)) for m, p in files.items()}
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b"})]
    graph["pkg.b"] = set()
    assert cycles(graph) == []


def test_the_ilp_package_imports_one_way():
    """Every module of solvers/ilp/ is in the graph, and none imports the package's own
    ``__init__`` (which imports them all)."""
    graph = import_graph()
    ilp = [m for m in graph if m.startswith("solvers.ilp.")]
    assert {"solvers.ilp.backends", "solvers.ilp.model", "solvers.ilp.relaxation",
            "solvers.ilp.certify", "solvers.ilp.min_budget", "solvers.ilp.options",
            "solvers.ilp.solver"} <= set(ilp)
    assert all("solvers.ilp" not in graph[m] for m in ilp)
    assert "solvers._deadline" in graph["solvers.ilp.passes"]


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 30  # both packages were read
    found = [c for c in cycles(graph) if c not in KNOWN_CYCLES]
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)
