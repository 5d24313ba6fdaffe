"""solvers/offload/ imports one way: each module only the modules listed above it in the
package's docstring (never the package's ``__init__``), every module is listed, and none
is over 600 lines.  Read from the source with ``ast`` (imports inside functions count)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import solvers.offload as package

DIR = Path(package.__file__).resolve().parent


def _order() -> list:
    names = re.findall(r":mod:`\.(\w+)`", package.__doc__)
    return list(dict.fromkeys(names))


def test_every_module_is_listed_and_imports_only_those_above_it():
    order = _order()
    modules = sorted(p.stem for p in DIR.glob("*.py") if p.stem != "__init__")
    assert sorted(order) == modules
    for path in DIR.glob("*.py"):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "solvers.offload":
                    raise AssertionError(f"{path.name} imports the package's __init__")
                if node.module.startswith("solvers.offload."):
                    dep = node.module.rsplit(".", 1)[1]
                    assert order.index(dep) < order.index(path.stem), (path.name, dep)
        assert len(path.read_text().splitlines()) <= 600, path.name
