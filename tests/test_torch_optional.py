"""torch is optional: the core package, the solvers and the CLI start without importing it."""
import subprocess
import sys


def test_importing_remat_does_not_import_torch():
    code = ("import sys, remat_theory, solvers, remat_theory.cli as cli\n"
            "solvers.names(); cli.build_parser()\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
