"""The error taxonomy (remat_theory/model/errors.py), solvers' facts rendered by the command
line, and the inputs a user can type (issues 28 items 4-5, 29 items 3, 5, 6).

Each test names what failed before: every one of these fails on the code before the
taxonomy (an invariant failure reported as bad input, a limit reported as misuse in the DPs
and as a finding in the ILP, CLI flags spelt inside solvers/, ...).
"""
from __future__ import annotations

import io
import json
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

import solvers
from solvers import registry
from remat_theory.analysis import families
from remat_theory.analysis.progress import Progress
from remat_theory.cli import main
from remat_theory.model.chain import Chain
from remat_theory.model.errors import (AT_MOST, InfeasibleBudgetError, InternalError,
                                       PluginError, RematError, Remedy, ScheduleParseError,
                                       SolverContractError, SolverError, SolverLimitError,
                                       SolverOptionError)
from remat_theory.model.schedule import Schedule
from remat_theory.model.solution import Solution
from solvers.exhaustive import min_feasible_budget

ROOT = Path(__file__).resolve().parents[1]
ERROR_LINE = re.compile(r"remat( [a-z]+)*: error: ")
THREE = {"format": "remat-chain/1", "name": "three", "fwd_time": [1, 2, 3],
         "bwd_time": [2, 3, 2, 3], "x_size": [1, 2, 3, 4], "tape_size": [3, 4, 5]}


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code, err, *fragments, exit_code=2):
    lines = err.strip().splitlines()
    assert code == exit_code, err
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


@pytest.fixture
def three(tmp_path):
    p = tmp_path / "three.json"
    p.write_text(json.dumps(THREE))
    return p


# ---------------------------------------------------------------- the taxonomy (#28.4)
def test_an_invariant_failure_is_a_bug_not_bad_input(three, capsys, monkeypatch):
    assert not issubclass(InternalError, RematError)
    assert not issubclass(InternalError, ValueError)
    from solvers import dp

    with pytest.raises(InternalError):
        dp.PersistentTable(dp.UnitChain.exact(Chain.homogeneous(2))[0], -1)

    def broken(*a, **k):
        raise InternalError("the table disagrees with min-memory")

    monkeypatch.setattr(dp, "solve_units", broken)
    code, out, err = run(capsys, "solve", three, "--budget", 17, "--solver", "dp")
    assert code == 1 and err.startswith("remat: internal error (this is a bug): InternalError")


def test_a_false_answer_or_an_escaped_deadline_is_a_bug_not_bad_input(three, capsys):
    """A solver's false answer and a deadline no solver caught are failures of the code,
    not of the input: neither is a RematError (so no ``except RematError`` takes them for
    bad input).  The command line names a false answer as the solver's bug (it may be a
    plug-in's), with exit code 1 like any other bug."""
    from solvers._deadline import DeadlineExpired

    for cls in (SolverContractError, DeadlineExpired):
        assert issubclass(cls, InternalError)
        assert not issubclass(cls, (RematError, SolverError, ValueError))

    def liar(chain, budget):
        sol = solvers.solve(chain, budget, "store-all")
        return sol.replace(solver="liar", makespan=sol.makespan - 1)

    with registry.registered("liar", liar, optimal_for="none"):
        code, out, err = run(capsys, "solve", three, "--budget", 1000, "--solver", "liar")
    line = one_line(code, err, "a false answer", "solver 'liar' claims makespan", exit_code=1)
    assert "internal error" not in line


def test_plain_value_errors_are_named_classes():
    from remat_theory.model.persistence import check_class

    with pytest.raises(RematError, match="schedule_class = 'nope'"):
        check_class(Chain.homogeneous(2), "Fall0 Fall1 Loss B1 B0", "nope")
    with pytest.raises(RematError, match="status = 'weird'"):
        Solution("x", "weird", None, None, None, 3)
    with pytest.raises(SolverOptionError, match="time_limit"):
        solvers.solve(Chain.homogeneous(3), 100, "auto", time_limit=-1)


def _limits():
    """One refusal of each solver that has a limit, on chains far past it."""
    long_chain = families.make("homogeneous", 3000, 0)
    yield "dp", lambda: solvers.solve(long_chain, long_chain.store_all_memory() // 2, "dp",
                                      slots=5000)
    yield "dp-weak", lambda: solvers.solve(long_chain, long_chain.store_all_memory() // 2,
                                           "dp-weak", slots=5000)
    big = families.make("homogeneous", 300, 0)
    yield "ilp", lambda: solvers.solve(big, 60, "ilp", time_limit=5)
    twenty = families.make("random", 20, 0)
    yield "exhaustive", lambda: solvers.solve(twenty, twenty.store_all_memory(), "exhaustive")


@pytest.mark.parametrize("name, call", list(_limits()), ids=[n for n, _ in _limits()])
def test_too_large_is_one_class_for_every_solver(name, call):
    """Before: SolverOptionError in the DPs and exhaustive search (verify stopped as if the
    user erred), SolverError in the ILP (verify counted a finding)."""
    with pytest.raises(SolverLimitError) as e:
        call()
    assert not isinstance(e.value, SolverOptionError)
    assert e.value.solver == name and e.value.remedies
    assert "--" not in str(e.value)


def test_verify_records_a_refusal_as_no_finding():
    from remat_theory.analysis.verify import VerifyConfig, run_verify

    def refuses(chain, budget):
        raise SolverLimitError("too large for this test solver", solver="refuser",
                               remedies=(Remedy(options=(("slots", AT_MOST, 3),)),))

    with registry.registered("refuser", refuses, optimal_for="persistent", exact=True):
        report = run_verify(VerifyConfig(seed=0, min_stages=2, max_stages=3, trials=1,
                                         families=("random",), solvers=("exhaustive", "refuser"),
                                         budgets_per_chain=2, workers=1, progress=False))
    assert report["ok"], report["violations"]
    statuses = {r["status"] for c in report["details"] for i in c["instances"]
                for r in i["results"] if r["solver"] == "refuser"}
    assert statuses == {"refused"}


# ------------------------------------------------------- facts, rendered (#28.5)
def test_no_command_line_syntax_in_solvers():
    pattern = re.compile(r"--(slots|time-limit|solver|json|budget|allow-drop)\b|remat: note:|"
                         r"-o [a-z_]+=")
    hits = [f"{p.relative_to(ROOT)}:{k}" for p in sorted((ROOT / "solvers").rglob("*.py"))
            for k, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_the_cli_reads_no_message_wording():
    src = (ROOT / "remat_theory" / "cli" / "main.py").read_text()
    assert "re.sub" not in src and "import re" not in src


def test_remedies_are_spelt_in_each_commands_syntax(tmp_path, capsys, monkeypatch):
    """A solver of our own says only facts; the command line spells them per command."""
    (tmp_path / "remat_facts_plugin.py").write_text(textwrap.dedent('''
        from remat_theory.model.errors import Remedy, SolverLimitError

        def limited(chain, budget, slots=None, time_limit=None):
            raise SolverLimitError("wants fewer slots", solver="limited", remedies=(
                Remedy(options=(("slots", "<=", 7), ("time_limit", ">=", 30))),
                Remedy(solver="revolve", note="a heuristic")))
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    f = tmp_path / "c.json"
    f.write_text(json.dumps(THREE))
    code, out, err = run(capsys, "solve", f, "--budget", 17, "--solver",
                         "remat_facts_plugin:limited")
    one_line(code, err, "wants fewer slots; use --slots 7 or less --time-limit 30 or more, "
                        "or use --solver revolve (a heuristic)")
    with pytest.raises(SolverLimitError,
                       match=r"pass slots=7 or less and time_limit=30 or more, or use solver "
                             r"'revolve' \(a heuristic\)"):
        solvers.solve(Chain.from_dict(THREE), 17, "remat_facts_plugin:limited")
    sys.modules.pop("remat_facts_plugin", None)


def test_the_feasibility_check_is_a_library_function():
    for seed in range(4):
        c = families.make("random", 4, seed)
        smallest = min_feasible_budget(c)  # the oracle: bottleneck search over all schedules
        solvers.check_feasible(c, smallest)  # no error at the smallest feasible budget
        with pytest.raises(InfeasibleBudgetError) as e:
            solvers.check_feasible(c, smallest - 1)
        assert e.value.smallest_feasible == smallest and e.value.source == "exhaustive"
        assert e.value.lower_bound == c.memory_lower_bound()


# ------------------------------------------------------------- user input (#29.3)
def test_a_plugins_own_exception_is_the_plugins(tmp_path, capsys, monkeypatch):
    (tmp_path / "remat_bad_plugin.py").write_text(textwrap.dedent('''
        def raises(chain, budget):
            raise KeyError("oops")

        def no_budget(chain):
            return None
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    f = tmp_path / "c.json"
    f.write_text(json.dumps(THREE))
    code, out, err = run(capsys, "solve", f, "--budget", 17, "--solver", "remat_bad_plugin:raises")
    one_line(code, err, "plug-in solver 'remat_bad_plugin:raises' raised KeyError")
    code, out, err = run(capsys, "solve", f, "--budget", 17, "--solver",
                         "remat_bad_plugin:no_budget", "--json")
    one_line(code, err, "plug-in solver 'remat_bad_plugin:no_budget' cannot be called")
    obj = json.loads(out)
    assert obj["status"] == "error" and obj["error"] == "PluginError"
    assert obj["plugin"] == "remat_bad_plugin:no_budget"
    with pytest.raises(PluginError) as e:
        solvers.solve(Chain.from_dict(THREE), 17, "remat_bad_plugin:raises")
    assert isinstance(e.value.__cause__, KeyError)
    sys.modules.pop("remat_bad_plugin", None)


@pytest.mark.parametrize("text, fragment", [
    ("Fall\u0660 Loss", "ASCII digits"), ("Fall\uff11", "ASCII digits"),
    ("Fall\u0967", "ASCII digits"), ("Fall00", "leading zero"), ("B01", "leading zero"),
    ("Fall0,Fall1", "','"), ("Fall0, Fall1", "','"), ("Fall0;Fall1", "';'"),
    ("Fall0|Fall1", "'|'"), ("Fall0\u00a0Fall1", "'\\xa0'"), ("Fall0\u3000Fall1", "'\\u3000'"),
])
def test_schedule_tokens_are_ascii_without_leading_zeros(three, capsys, text, fragment):
    with pytest.raises(ScheduleParseError):
        Schedule.parse(text)
    code, out, err = run(capsys, "simulate", three, "--schedule", text)
    one_line(code, err, fragment)


def test_schedule_tokens_still_take_ascii_whitespace():
    assert Schedule.parse("Fall0\tFall1\nLoss  B1\r\nB0").tokens() == \
        ["Fall0", "Fall1", "Loss", "B1", "B0"]


@pytest.mark.parametrize("budget", ["1_4", "\u0661\u0664", "\uff11\uff14", " 14", "14 ", "+14",
                                    "1,000", "0x20", "1.5", "nan", "inf", "1e-3", "--"])
def test_budgets_are_plain_decimal_or_scientific(three, capsys, budget):
    code, out, err = run(capsys, "solve", three, "--budget", budget)
    one_line(code, err, "--budget")


@pytest.mark.parametrize("budget, value", [("20", 20), ("2e1", 20), ("2.0e1", 20),
                                            ("1.7E1", 17)])
def test_scientific_budgets_with_an_integer_value_are_read(three, capsys, budget, value):
    code, out, err = run(capsys, "solve", three, "--budget", budget, "--solver", "exhaustive",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["budget"] == value


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "mac_roman", "cp437", "shift_jis",
                                      "utf-16-le", "utf-16-be", "utf-32-le"])
def test_other_encodings_without_a_bom_are_refused(tmp_path, capsys, encoding):
    d = dict(THREE, name="r\u00e9seau \u00e7a")
    if encoding == "shift_jis":
        d["name"] = "\u30cd\u30c3\u30c8"
    p = tmp_path / "c.json"
    p.write_bytes(json.dumps(d, ensure_ascii=False).encode(encoding))
    code, out, err = run(capsys, "solve", p, "--budget", 20)
    one_line(code, err, "not UTF-8")


def test_control_characters_are_escaped_when_printed(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(dict(THREE, name="a\x1b[2Jb\nc\u202ed")))
    code, out, err = run(capsys, "simulate", p, "--schedule", "Fall0 Fall1 Fall2 Loss B2 B1 B0")
    assert code == 0
    assert "\x1b" not in out and "\u202e" not in out and "a\\x1b[2Jb\\x0ac\\u202ed" in out
    code, out, err = run(capsys, "compare", p, "--budget", 20, "--solvers", "store-all")
    assert code == 0 and "\x1b" not in out and "a\\x1b[2Jb" in out


def test_version_usage_and_subcommand_names(capsys):
    code, out, err = run(capsys, "--version")
    assert code == 0 and re.fullmatch(r"remat \d+\.\d+\.\d+\S*", out.strip())
    code, out, err = run(capsys)
    line = one_line(code, err, "usage: remat", "solve", "verify")
    assert "required" not in line
    code, out, err = run(capsys, "verify", "--bogus")
    one_line(code, err, "remat verify: error: unrecognized arguments: --bogus")
    code, out, err = run(capsys, "solve", "--budget", "x")
    one_line(code, err, "remat solve: error:")


def test_json_is_always_one_object_with_status_and_message(three, capsys):
    for argv in (["solve", three, "--budget", 3, "--json"],  # below what any schedule needs
                 ["solve", three, "--budget", "1_4", "--json"],  # a usage error
                 ["solve", three, "--budget", 20, "--solver", "nosuch", "--json"],
                 ["simulate", three, "--schedule", "Fall00", "--json"],
                 ["compare", three, "--budget", 3, "--solvers", "nosuch", "--json"]):
        code, out, err = run(capsys, *argv)
        assert code == 2, (argv, err)
        obj = json.loads(out)
        assert obj["status"] == "error" and obj["message"] and obj["exit_code"] == 2
        assert obj["message"] in err
    code, out, err = run(capsys, "solve", three, "--budget", 17, "--solver", "dp", "--slots",
                         1, "--json")
    assert code == 2 and json.loads(out)["status"] == "infeasible"


def test_slot_rounding_is_named_as_the_cause(three, capsys):
    """17 bytes is feasible in exact memory (the smallest is 16) but not once every size is
    rounded up to slots of 17/5 bytes: the error says so, not "the smallest feasible
    budget is 16"."""
    assert min_feasible_budget(Chain.from_dict(THREE)) == 16
    code, out, err = run(capsys, "solve", three, "--budget", 17, "--solver", "dp",
                         "--slots", 5)
    one_line(code, err, "only because at --slots 5 every size is rounded up",
             "in exact memory the smallest feasible budget is 16", "leave out --slots")


def test_compare_below_the_smallest_budget_says_what_was_proven(three, capsys):
    code, out, err = run(capsys, "compare", three, "--budget", 15, "--solvers",
                         "exhaustive,dp,store-all")
    one_line(code, err, "budget 15 is below what any schedule needs", "proven over all schedules "
             "by exhaustive", "smallest feasible budget is 16")
    assert "no exact value available" not in out
    code, out, err = run(capsys, "compare", three, "--budgets", "15,20", "--solvers",
                         "exhaustive,store-all")
    assert code == 0 and "proven over all schedules by exhaustive" in out


@pytest.mark.parametrize("argv, fragment", [
    (["hard", "--seed", "-1", "--time", "600"], "seed -1 must be an integer >= 0"),
    (["verify", "--seed", "-3"], "seed -3"),
    (["verify", "--scheduler", "bogus://x"], "not 'local' nor a Dask scheduler address"),
    (["verify", "--scheduler", "tcp://host"], "Dask scheduler address"),
    (["hard", "--scheduler", "bogus://x", "--time", "600"], "Dask scheduler address"),
    (["bench", "solvers", "--dp-solver", "nosuch", "--no-write"], "unknown solver 'nosuch'"),
    (["bench", "solvers", "--dp-solver", "store-all", "--no-write"], "takes no slots"),
    (["bench", "quality", "--solvers", "nosuch", "--no-write"], "unknown solver 'nosuch'"),
])
def test_arguments_are_checked_before_any_work(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    one_line(code, err, fragment)
    assert out == ""


def _output_cases(tmp_path):
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    folder = tmp_path / "folder"
    folder.mkdir()
    return [
        (["plot", "--family", "random", "--stages", "3", "--out", afile / "p.png"], "is a file"),
        (["plot", "--family", "random", "--stages", "3", "--out", tmp_path / "no" / "p.png"],
         "does not exist"),
        (["plot", "--family", "random", "--stages", "3", "--out", folder], "is a folder"),
        (["plot", "--family", "random", "--stages", "3", "--out", tmp_path / "p.xyz"],
         "unknown file type '.xyz'"),
        (["hard", "--time", "600", "--out", afile / "corpus"], "is a file"),
        (["hard", "--time", "600", "--out", afile], "is a file, not a folder"),
        (["profile", "--model", "mlp", "--out", folder], "is a folder"),
        (["profile", "--model", "mlp", "--out", afile / "c.json"], "is a file"),
        (["frontier", "--network", "mlp", "--out", afile / "d"], "is a file"),
        (["confirm", "--out", afile], "is a file, not a folder"),
        (["bench", "quality", "--out", afile], "is a file, not a folder"),
        (["verify", "--json", folder], "is a folder"),
    ]


def test_bad_output_paths_are_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """Every function that starts the work raises if called: the path must be refused
    first (before, ``profile --out`` failed after profiling, ``hard --out`` after the
    search)."""
    from remat_theory.analysis import benchmark, plotting
    from remat_theory.cli.commands import confirm, frontier, hard, profile, verify

    def work(*a, **k):
        raise AssertionError("the work started before the output path was checked")

    for module, name in ((hard, "search"), (plotting, "pareto_data"), (profile, "torch_device"),
                         (frontier, "torch_device"), (confirm, "torch_device"),
                         (benchmark, "bench_quality"), (verify, "run_verify")):
        monkeypatch.setattr(module, name, work)
    for argv, fragment in _output_cases(tmp_path):
        code, out, err = run(capsys, *argv)
        one_line(code, err, fragment)


# ------------------------------------------------- nothing written unless asked (#29.5)
def test_commands_write_under_the_temp_folder_by_default(tmp_path, capsys, monkeypatch):
    import tempfile

    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    pytest.importorskip("matplotlib")
    code, out, err = run(capsys, "plot", "--family", "random", "--stages", "2", "--solvers",
                         "store-all,dp", "--max-points", "3", "--no-profile")
    assert code == 0, err
    written = [p for p in tmp.rglob("*.png")]
    assert len(written) == 1 and str(written[0]) in err
    code, out, err = run(capsys, "bench", "quality", "--stages", "2", "--budgets", "2",
                         "--families", "random", "--solvers", "store-all,dp", "--workers", "1",
                         "--no-progress")
    assert code == 0, err
    jsons = [p for p in tmp.rglob("*.json")]
    assert len(jsons) == 1 and str(jsons[0]) in err
    assert list(cwd.iterdir()) == []


# ------------------------------------------------------------------ progress (#29.6)
class _Log(io.StringIO):
    def isatty(self):
        return False


def test_progress_off_a_terminal_is_a_line_every_few_seconds(monkeypatch):
    monkeypatch.setattr(Progress, "line_interval", 0.05)
    log = _Log()
    with Progress(3, "sweep", stream=log) as bar:
        time.sleep(0.3)  # one long step: lines still come
        bar.update()
    lines = log.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("sweep [") for line in lines)
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()
    quiet = _Log()
    with Progress(3, "sweep", stream=quiet, enabled=False):
        time.sleep(0.15)
    assert quiet.getvalue() == ""


def test_a_short_run_prints_no_progress_line():
    log = _Log()
    with Progress(2, "quick", stream=log) as bar:
        bar.update(2)
    assert log.getvalue() == ""


def test_ticker_lines_off_a_terminal(monkeypatch):
    from remat_theory.cli.commands._common import Ticker

    monkeypatch.setattr(Progress, "line_interval", 0.05)
    log = _Log()
    with Ticker("remat profile: mlp", stream=log, lines=True):
        time.sleep(0.3)
    assert log.getvalue().count("remat profile: mlp: running for") >= 2
    silent = _Log()
    with Ticker("remat solve: dp", stream=silent):  # without lines: terminal only
        time.sleep(0.15)
    assert silent.getvalue() == ""


def test_verify_json_keeps_stdout_clean_with_progress_on(capsys, monkeypatch):
    monkeypatch.setattr(Progress, "line_interval", 0.01)
    code, out, err = run(capsys, "verify", "--stages", "2:2", "--trials", "1", "--families",
                         "random", "--solvers", "store-all,dp", "--workers", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["ok"]
