"""The command line: documented commands work; bad input gives one line and exit code 2."""
import json
import subprocess
import sys

import pytest

from remat_theory.cli import main

CHAIN = {"format": "remat-chain/1", "name": "demo", "fwd_time": [1, 2], "bwd_time": [3, 4, 0.5],
         "x_size": [4, 2, 3], "tape_size": [5, 6], "fwd_overhead": [1, 2], "bwd_overhead": [1, 0, 2]}


@pytest.fixture
def chain_file(tmp_path):
    p = tmp_path / "chain.json"
    p.write_text(json.dumps(CHAIN))
    return str(p)


def write(tmp_path, data):
    p = tmp_path / "bad.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_prints_profile_and_json(chain_file, capsys):
    code, out, err = run(capsys, "simulate", chain_file, "--budget", "20",
                         "--schedule", "Fall0 Fall1 Loss B1 B0")
    assert code == 0 and "makespan 10.5, peak memory 20" in out and "Loss" in out
    code, out, err = run(capsys, "simulate", chain_file, "--schedule", "Fall0 Fall1 Loss B1 B0", "--json")
    d = json.loads(out)
    assert code == 0 and d["makespan"] == 10.5 and d["peak_memory"] == 20
    assert d["schedule"] == ["Fall0", "Fall1", "Loss", "B1", "B0"] and len(d["profile"]) == 5


def test_solve_json_has_the_documented_fields(chain_file, capsys):
    code, out, err = run(capsys, "solve", chain_file, "--budget", "20", "--solver", "store-all", "--json")
    d = json.loads(out)
    assert code == 0
    for key in ("solver", "status", "makespan", "peak_memory", "budget", "schedule", "bound", "optimal_for"):
        assert key in d
    assert d["schedule"] == ["Fall0", "Fall1", "Loss", "B1", "B0"] and d["budget"] == 20


def test_solve_exhaustive_and_solvers_list(chain_file, capsys):
    code, out, err = run(capsys, "solve", chain_file, "--budget", "17", "--solver", "exhaustive")
    assert code == 0 and "optimal" in out and "schedule:" in out
    code, out, err = run(capsys, "solvers")
    assert code == 0 and "store-all" in out and "exhaustive" in out


def one_line_error(code, err, *fragments):
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("remat: error:"), err
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], (f, lines[0])


@pytest.mark.parametrize("change, fragments", [
    ({"fwd_time": [1, -2]}, ["fwd_time[1]", "negative"]),
    ({"x_size": [4, 2.5, 3]}, ["x_size[1]", "not an integer"]),
    ({"bwd_time": [3, 4]}, ["bwd_time has length 2, expected 3"]),
    ({"tape_size": [1, 6]}, ["tape_size[0] = 1 is smaller than x_size[1] = 2"]),
    ({"format": "remat-chain/9"}, ["format = 'remat-chain/9' is unknown"]),
])
def test_bad_chain_files(tmp_path, capsys, change, fragments):
    path = write(tmp_path, {**CHAIN, **change})
    code, out, err = run(capsys, "simulate", path, "--schedule", "Fall0 Fall1 Loss B1 B0")
    one_line_error(code, err, "bad.json", *fragments)


@pytest.mark.parametrize("text, fragment", [
    ('{"format": "remat-chain/1", "fwd_time": [NaN, 1], "bwd_time": [1, 1, 1], "x_size": [1, 1, 1], "tape_size": [1, 1]}',
     "fwd_time[0] is NaN"),
    ('{"format": "remat-chain/1", "fwd_time": [1, Infinity], "bwd_time": [1, 1, 1], "x_size": [1, 1, 1], "tape_size": [1, 1]}',
     "fwd_time[1] = inf is not finite"),
    ('{"format": "remat-chain/1", "fwd_time": [1, 2]', "malformed JSON"),
])
def test_nan_inf_and_malformed_json(tmp_path, capsys, text, fragment):
    code, out, err = run(capsys, "solve", write(tmp_path, text), "--budget", "10")
    one_line_error(code, err, fragment)


@pytest.mark.parametrize("schedule, fragments", [
    ("Fall0 Fx1 Loss", ["token 1", "unknown op token 'Fx1'"]),
    ("Fall0 Fall9 Loss", ["step 1 (Fall9)", "stage index 9 is out of range 0..1"]),
    ("Fall0 Fall1 Loss B1", ["ends without computing d0"]),
    ("Fall0 Fall1 Loss B0", ["step 3 (B0)", "d1 is not available"]),
    ("Fall0 Fall1 Loss B1 B0 B0", ["step 5 (B0)", "already run"]),
])
def test_bad_schedules(chain_file, capsys, schedule, fragments):
    code, out, err = run(capsys, "simulate", chain_file, "--schedule", schedule)
    one_line_error(code, err, *fragments)


def test_budget_errors(chain_file, capsys):
    code, out, err = run(capsys, "simulate", chain_file, "--budget", "19", "--schedule", "Fall0 Fall1 Loss B1 B0")
    one_line_error(code, err, "step 2 (Loss)", "peak memory 20 exceeds the budget 19")
    code, out, err = run(capsys, "solve", chain_file, "--budget", "9")
    one_line_error(code, err, "budget 9 is below what any schedule needs", "smallest feasible budget is 17")
    code, out, err = run(capsys, "solve", chain_file, "--budget", "12.5")
    one_line_error(code, err, "budget '12.5' is not an integer")
    code, out, err = run(capsys, "solve", chain_file, "--budget", "-4")
    one_line_error(code, err, "negative")


def test_solver_infeasible_names_its_smallest_budget(chain_file, capsys):
    code, out, err = run(capsys, "solve", chain_file, "--budget", "18", "--solver", "store-all")
    assert code == 2 and "smallest feasible budget for it is 20" in err and "Traceback" not in err


def test_unknown_solver_and_option(chain_file, capsys):
    code, out, err = run(capsys, "solve", chain_file, "--budget", "20", "--solver", "magic")
    one_line_error(code, err, "unknown solver 'magic'")
    code, out, err = run(capsys, "solve", chain_file, "--budget", "20", "--slots", "10")
    one_line_error(code, err, "does not take option 'slots'")


def test_missing_file(tmp_path, capsys):
    code, out, err = run(capsys, "solve", str(tmp_path / "nope.json"), "--budget", "20")
    one_line_error(code, err, "cannot read chain file")


def test_console_script_runs_without_traceback(chain_file):
    r = subprocess.run([sys.executable, "-m", "remat_theory.cli", "simulate", chain_file,
                        "--schedule", "Fall0 Loss"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("remat: error: step 1 (Loss): x2 is not available")


def test_generic_solver_options(chain_file, capsys):
    code, out, err = run(capsys, "solve", chain_file, "--budget", "17", "--solver", "exhaustive",
                         "-o", "schedule_class=persistent", "--json")
    d = json.loads(out)
    assert code == 0 and d["optimal_for"] == "persistent" and d["status"] == "optimal"
    code, out, err = run(capsys, "solve", chain_file, "--budget", "17", "-o", "nokey")
    one_line_error(code, err, "option 'nokey' is not KEY=VALUE")
    code, out, err = run(capsys, "solve", chain_file, "--budget", "17", "--solver", "store-all",
                         "-o", "passes=2")
    one_line_error(code, err, "solver 'store-all' does not take option 'passes'")


def test_a_long_proven_ilp_solve_is_announced(tmp_path, capsys):
    from remat_theory.cli.commands.solve import long_solve_note
    from remat_theory.analysis.families import make

    big, small = make("random", 6, 0), make("random", 5, 0)
    note = long_solve_note(big, "ilp", {})
    assert "6 stages" in note and "--time-limit" in note and "passes=1" in note
    assert "--solver exhaustive -o max_stages=6" in note
    assert "exhaustive" not in long_solve_note(make("random", 13, 0), "ilp", {})
    assert long_solve_note(big, "ilp", {"time_limit": 10}) is None
    assert long_solve_note(big, "ilp", {"passes": 1, "pairs": True}) is None
    assert long_solve_note(small, "ilp", {}) is None
    assert long_solve_note(big, "dp", {}) is None
    # the fast mode on the same chain: no note on stderr, clean JSON on stdout
    p = tmp_path / "c6.json"
    big.save(p)
    code, out, err = run(capsys, "solve", str(p), "--budget", str(big.store_all_memory()),
                         "--solver", "ilp", "-o", "passes=1", "-o", "pairs=true", "--json")
    assert code == 0 and json.loads(out)["status"] == "optimal" and "note" not in err
