"""Issue #29, item 4: the command line starts with the imports of the command that runs.

`remat solve` on a chain of a million stages must answer within its time limit plus 10%
and 2 s, start-up included: importing every subcommand (the hard-instance search, the
benchmarks, torch's helpers) and every solver before reading the chain spent seconds of
it.  No timing is asserted: what each start-up imports is read from ``sys.modules`` in a
fresh interpreter.
"""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from remat_theory.cli import commands as commands_pkg
from remat_theory.cli.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]

HEAVY = ("torch", "pulp", "highspy", "matplotlib", "scipy", "transformers")


def modules_after(code: str) -> set:
    """The modules loaded after running ``code`` in a fresh interpreter (this checkout
    first on the path)."""
    script = code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=120)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


def test_the_table_of_commands_is_the_modules_own():
    """NAME, HELP and ORDER of every command module, as COMMANDS lists them, and no module
    missing from the table."""
    import pkgutil

    listed = [m for _, m, _ in COMMANDS]
    found = sorted(m.name for m in pkgutil.iter_modules(commands_pkg.__path__)
                   if not m.name.startswith("_"))
    assert sorted(listed) == found
    mods = [importlib.import_module(f"remat_theory.cli.commands.{m}") for m in listed]
    assert [(n, h) for n, _, h in COMMANDS] == [(m.NAME, m.HELP) for m in mods]
    orders = [getattr(m, "ORDER", 50) for m in mods]
    assert orders == sorted(orders)


def test_version_imports_no_command_and_no_solver():
    loaded = modules_after("from remat_theory.cli.main import main\n"
                           "assert main(['--version']) == 0")
    assert not {m for m in loaded if m.startswith("remat_theory.cli.commands.")}
    assert not {m for m in loaded if m == "solvers" or m.startswith("solvers.")}
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}


def test_solve_imports_its_own_command_only(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"format": "remat-chain/1", "fwd_time": [1, 1],
                                "bwd_time": [1, 1, 1], "x_size": [1, 1, 1],
                                "tape_size": [2, 2]}))
    loaded = modules_after(
        "from remat_theory.cli.main import main\n"
        f"assert main(['solve', {str(path)!r}, '--budget', '100', '--solver', 'store-all']) == 0")
    commands = {m.rsplit(".", 1)[1] for m in loaded if m.startswith("remat_theory.cli.commands.")}
    assert commands <= {"solve", "_common"}, commands
    assert not {m for m in loaded if m.startswith("remat_theory.analysis.")} - {
        "remat_theory.analysis.progress"}
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}  # no ILP (PuLP, HiGHS) either
    assert "solvers.ilp" not in loaded and "solvers.dp" not in loaded


@pytest.mark.parametrize("argv, command", [
    (["solve", "c.json"], "solve"), (["--version"], None), (["-h", "verify"], "verify"),
    ([], None), (["--", "solve"], None),
])
def test_the_command_is_the_first_word_that_is_not_an_option(argv, command):
    from remat_theory.cli.main import command_of

    assert command_of(argv) == command


def test_every_command_parses_as_before():
    """The parser of one command (what main builds) takes the same arguments as the parser
    with every command."""
    from remat_theory.cli.main import build_parser

    full = build_parser()
    for name, _, _ in COMMANDS:
        one = build_parser(name, every=False)
        assert one.commands[name].format_usage().split(None, 2)[2] == \
            full.commands[name].format_usage().split(None, 2)[2], name


def test_solve_as_a_program_flushes_everything_before_its_fast_exit(tmp_path):
    """`remat solve` ends with os._exit (freeing a million-stage chain object by object
    takes seconds): its stdout and stderr are complete and its exit code kept."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"format": "remat-chain/1", "fwd_time": [1] * 300,
                                "bwd_time": [1] * 301, "x_size": [1] * 301,
                                "tape_size": [2] * 300}))
    env = {"PYTHONPATH": str(ROOT), "PATH": ""}
    cmd = [sys.executable, "-m", "remat_theory.cli", "solve", str(path), "--solver",
           "store-all", "--json", "--budget"]
    ok = subprocess.run(cmd + ["10000"], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["schedule"]) == 601
    bad = subprocess.run(cmd + ["10"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and json.loads(bad.stdout)["status"] == "infeasible"
    assert "smallest feasible budget" in bad.stderr


def test_solve_refuses_a_file_it_cannot_read_within_the_limit(tmp_path, monkeypatch, capsys):
    """With --time-limit, a chain file whose reading alone (its size at the measured rate)
    would pass the limit is refused before it is read, naming a limit that would do."""
    from remat_theory.cli.commands import _common, solve
    from remat_theory.cli.main import main

    path = tmp_path / "c.json"
    path.write_text(json.dumps({"format": "remat-chain/1", "fwd_time": [1, 1],
                                "bwd_time": [1, 1, 1], "x_size": [1, 1, 1],
                                "tape_size": [2, 2]}))
    argv = ["solve", str(path), "--budget", "100", "--solver", "store-all", "--json"]
    monkeypatch.setattr(solve, "READ_BYTES_PER_S", 10.0)  # ~100 bytes: about 10 s to read

    def read(*args, **kwargs):
        raise AssertionError("the chain was read before the refusal")

    monkeypatch.setattr(solve, "load_chain", read)
    assert main(argv + ["--time-limit", "2"]) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["error"] == "SolverLimitError" and "--time-limit" in err and "or more" in err
    monkeypatch.setattr(solve, "load_chain", _common.load_chain)
    assert main(argv + ["--time-limit", "100"]) == 0  # the reading fits: answered
    assert json.loads(capsys.readouterr().out)["status"] == "optimal"
    assert main(argv) == 0  # no limit: read whatever its size
    capsys.readouterr()
    monkeypatch.setattr(solve, "READ_BYTES_PER_S", 1e6)  # read at once: never refused
    assert main(argv + ["--time-limit", "1e-9"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] in ("time_limit", "optimal")


@pytest.mark.parametrize("argv", [["confirm", "--budgets", "0"],
                                  ["confirm", "--budgets", "half"]])
def test_a_torch_command_checks_its_arguments_before_importing_torch(argv):
    """A bad value is refused (exit 2) before the seconds of importing torch."""
    loaded = modules_after("from remat_theory.cli.main import main\n"
                           f"assert main({argv!r}) == 2")
    assert "torch" not in loaded
