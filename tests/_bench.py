"""Loading a script that is not a package module for a test: a benchmark
(benchmarks/NAME.py, with benchmarks/ on the import path for the scripts that import each
other) or the independent certificate checker (proofs/check_certificate.py)."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load(name: str):
    """benchmarks/NAME.py as a module."""
    bench_dir = str(ROOT / "benchmarks")
    if bench_dir not in sys.path:
        sys.path.insert(0, bench_dir)
    return _load_file(name, ROOT / "benchmarks" / f"{name}.py")


def checker():
    """proofs/check_certificate.py as a module."""
    return _load_file("check_certificate", ROOT / "proofs" / "check_certificate.py")


def multiplier_sets(node):
    """Every ``y`` of a certificate's tree (leaves, fixings, steps and the subtrees of
    probing steps), depth first: the dicts themselves, so a test can alter one in place."""
    if "y" in node:
        yield node["y"]
    for step in node.get("steps", []):
        if "y" in step:
            yield step["y"]
        else:
            yield from multiplier_sets(step["tree"])
    for child in node.get("children", []) + ([node["child"]] if "child" in node else []):
        yield from multiplier_sets(child)
