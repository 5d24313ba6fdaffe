"""Fuzzing the command line: bad bytes, encodings, JSON structures, types, magnitudes,
lengths, budgets, schedules and options, across every subcommand (cheap invocations: bad options of the long-running and torch ones).

The contract checked on every input (``remat_theory.cli.main``'s docstring): the exit code is
0 or 2, or 1 for a failed check of ``compare`` (a solver raised) or ``verify`` (a violated
relation), never an internal error (a bug, reported as a failure here); a user error is
exactly one line ``remat: error: ...`` on stderr, no traceback is ever printed, ``--json``
output parses, and no call hangs (a generous guard per command on the CPU seconds it
spends, far above what any of these cheap invocations needs: it catches a solver that
ignores its input's size, not a slow or shared machine; a looser wall-clock guard catches
a call that waits forever).

The CI sample is fixed (``derandomize=True``) and exercises at least
:data:`CI_MIN_DISTINCT` distinct inputs (printed); ``-m slow`` runs a larger sample (at
least :data:`MIN_DISTINCT`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_theory.cli.main import main

MIN_DISTINCT = 300  # of the slow sample (3,000 draws)
CI_EXAMPLES = 100  # the default tier's sample (800 before the tiers: 631 distinct inputs)
CI_MIN_DISTINCT = 60
SLOW_EXAMPLES = int(os.environ.get("REMAT_FUZZ_EXAMPLES", 3000))
# A user error's one line: "remat: error: ..." or, for a usage error, "remat verify: error: ...".
ERROR_LINE = re.compile(r"remat( [a-z]+)*: error: ")
HANG_GUARD_S = 60.0  # CPU seconds of one call
WALL_GUARD_S = 300.0  # wall-clock seconds of one call (a shared machine can be 5x slower)
# Raw control characters a chain's name could smuggle onto a terminal (tab and newline are
# the output's own).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # seconds; every call here needs well under one

FIELDS = ("fwd_time", "bwd_time", "x_size", "tape_size", "fwd_overhead", "bwd_overhead")

# JSON texts of values, from harmless to hostile.
VALUES = ("0", "1", "2", "0.5", "-1", "-0.0", "1e-300", "5e-324", "1e15", "1e17", "1e18", "1e19",
          "1e100", "1e308", "1.7976931348623157e308", "1e400", "-1e400", "NaN", "Infinity",
          "-Infinity", "9007199254740993", "18446744073709551616", "1" + "0" * 400,
          "9" * 5000, "true", "false", "null", '"1"', '""', "[]", "{}", "[1]", '{"a": 1}')
TYPES = ('"12"', "{}", "null", "true", "[[1, 2]]", "1", '"abc"', "[]", "[null]")
BUDGETS = ("0", "1", "17", "20", "100", "1000000", "-1", "-0", "1.5", "1e3", "abc", "", " 7",
           "0x10", "9" * 30, "1" + "0" * 400, "nan", "inf", "٣",
           # other scripts' digits, separators, signs and notations (none is a budget)
           "1_4", "\u0661\u0664", "\uff11\uff14", "\u0967\u096a", "1,000", "1 000", "+14", "14.0",
           "2e1", "1.7E1", "1e-3", "1e99999", "0b101", "14\u00a0")
SCHEDULE_TOKENS = ("Fall0", "Fall1", "Fck0", "Fn1", "Loss", "B0", "B1", "Dropx1", "Dropt1",
                   "Fall99999999999999999999", "B-1", "F", "", "fall0", "Fall0.5", "Lossy",
                   "Fall" + "9" * 5000, "\u00e9", "B0 B0",
                   # other scripts' digits, leading zeros, separators between tokens
                   "Fall\u0660", "Fall\uff11", "B\u0967", "Fall00", "B01", "Fall0,Loss", "B1,",
                   "Fall0;Loss", "B1|B0", "Fall0\u00a0Loss", "Fall0\u3000Loss", "Fall0\tLoss")
OPTIONS = ("passes=1", "passes=abc", "time_limit=-1", "time_limit=0", "time_limit=1e308",
           "max_stages=1e9", "max_stages=100000", "slots=0", "slots=-3", "slots=1.5",
           "slots=99999999999999", "schedule_class=[1]", "schedule_class=weird",
           "allow_drop=true", "allow_drop=2", "nokey", "=1", "x=", "a.b=1", "max_states=0",
           "variant=zzz", "b=nan", "segments=0", "pairs=true")
CHEAP_SOLVERS = ("store-all", "dp", "dp-weak", "exhaustive", "revolve", "chen-sqrt",
                 "chen-greedy", "periodic", "recompute-all", "gruslys", "auto", "nosuch", "")
MID_CHAIN_SOLVERS = ("store-all", "dp", "revolve", "chen-sqrt", "chen-greedy", "periodic",
                     "exhaustive", "nosuch")  # well under a second on 50 stages
LONG_CHAIN_SOLVERS = ("store-all", "chen-sqrt", "nosuch")  # O(L) on 5,000 stages


def base_chain(L: int) -> dict:
    return {"format": "remat-chain/1", "name": f"fuzz-{L}",
            "fwd_time": [1.0 + (i % 3) for i in range(L)],
            "bwd_time": [2.0 + (i % 2) for i in range(L + 1)],
            "x_size": [1 + (i % 4) for i in range(L + 1)],
            "tape_size": [2 + (i % 4) + 1 for i in range(L)]}


def dumps(d: dict) -> str:
    return json.dumps(d, separators=(",", ":"))


# The long chain: linear-time solvers and the file checks at 5,000 stages. simulate's
# profile lists the held values at every step, so its --json output grows as L^2 (167 MB
# at 5,000 stages: most of this test's time went into writing and parsing two of them);
# its long chain has 2,000 stages (27 MB), still 40 times the mid-range chain.
LONG = 5000
LONG_SIMULATE = 2000


@st.composite
def chain_files(draw, long: int = LONG):
    """``(bytes, L, valid)``: a chain file's bytes; L is its stage count when the JSON
    keeps the base layout (for schedules and solver choice); valid says whether it was
    left untouched (a valid chain, possibly in another encoding). ``long`` is the long
    chain's length (the draws are the same whatever it is)."""
    L = draw(st.sampled_from((1, 2, 3, 4, 6, 50, long, 0)))
    d = base_chain(L)
    text = dumps(d)
    kind = draw(st.sampled_from(("valid", "value", "type", "length", "missing", "unknown",
                                 "format", "toplevel", "duplicate", "nesting", "bytes",
                                 "encoding", "magnitude", "overheads", "name")))
    valid = False
    if kind == "valid":
        valid = L > 0
    elif kind == "value" and L > 0:
        f = draw(st.sampled_from(FIELDS[:4]))
        i = draw(st.integers(0, len(d[f]) - 1))
        marker = "__V__"
        d[f][i] = marker
        text = dumps(d).replace(f'"{marker}"', draw(st.sampled_from(VALUES)))
    elif kind == "type":
        f = draw(st.sampled_from(FIELDS + ("format", "name")))
        d[f] = "__T__"
        text = dumps(d).replace('"__T__"', draw(st.sampled_from(TYPES)))
    elif kind == "length" and L > 0:
        f = draw(st.sampled_from(FIELDS[:4]))
        delta = draw(st.sampled_from((-1, 1, 5, -len(d[f]))))
        d[f] = d[f][:len(d[f]) + delta] if delta < 0 else d[f] + [1] * delta
        text = dumps(d)
    elif kind == "missing":
        d.pop(draw(st.sampled_from(FIELDS[:4] + ("format",))))
        text = dumps(d)
    elif kind == "unknown":
        d[draw(st.sampled_from(("fwd_times", "", "fall_tim", "x size")))] = [1]
        text = dumps(d)
    elif kind == "format":
        d["format"] = draw(st.sampled_from(("remat-chain/2", "", "REMAT-CHAIN/1", 1)))
        text = dumps(d)
    elif kind == "toplevel":
        text = draw(st.sampled_from(("[]", "1", '"remat"', "null", "", " ", "{", "[1, 2]",
                                     "{}", "true")))
    elif kind == "duplicate":
        f = draw(st.sampled_from(FIELDS[:4] + ("format", "name")))
        text = text[:-1] + f',"{f}":' + json.dumps(d[f]) + "}"
    elif kind == "nesting":
        depth = draw(st.sampled_from((100, 10_000, 200_000)))
        text = text.replace('"fwd_time":', '"fwd_time":' + "[" * depth + "1" + "]" * depth + ",\"x\":", 1)
    elif kind == "magnitude":
        tf = draw(st.sampled_from((0.0, 1e-300, 1e12, 1e15, 1e17, 1e300)))
        sf = draw(st.sampled_from((0, 1, 2 ** 40, 2 ** 50, 2 ** 52, 2 ** 60)))
        d["fwd_time"] = [v * tf for v in d["fwd_time"]]
        d["bwd_time"] = [v * tf for v in d["bwd_time"]]
        d["x_size"] = [v * sf for v in d["x_size"]]
        d["tape_size"] = [v * sf for v in d["tape_size"]]
        text = dumps(d)
    elif kind == "overheads" and L > 0:
        d["fwd_overhead"] = [draw(st.sampled_from((0, 1, 10 ** 6, 2 ** 53)))] * L
        d["bwd_overhead"] = [draw(st.sampled_from((0, 3)))] * (L + draw(st.sampled_from((0, 1))))
        text = dumps(d)
    elif kind == "name":
        d["name"] = draw(st.sampled_from(("", "é" * 10, "a\nb", "x" * 5000, "\u202e", "\x00",
                                          "a\x1b[31mred\x1b[0m", "\x1b[2J\r\n", "\x9b1m",
                                          "\u2066x\u2069")))
        text = dumps(d)
    raw = text.encode("utf-8")
    if kind == "bytes":
        how = draw(st.sampled_from(("truncate", "flip", "nul", "binary", "empty", "crlf")))
        if how == "truncate":
            raw = raw[:draw(st.integers(0, max(0, len(raw) - 1)))]
        elif how == "flip":
            k = draw(st.integers(0, len(raw) - 1))
            raw = raw[:k] + bytes([raw[k] ^ draw(st.integers(1, 255))]) + raw[k + 1:]
        elif how == "nul":
            k = draw(st.integers(0, len(raw)))
            raw = raw[:k] + b"\0" + raw[k:]
        elif how == "binary":
            raw = draw(st.binary(min_size=1, max_size=64))
        elif how == "empty":
            raw = b""
        else:
            raw = raw.replace(b",", b",\r\n")
    elif kind == "encoding":
        enc = draw(st.sampled_from(("utf-8-sig", "utf-16", "utf-32", "utf-16-le", "utf-16-be",
                                    "latin-1", "cp1252", "utf-32-be", "mac_roman", "cp437",
                                    "shift_jis", "utf-32-le")))
        if enc in ("latin-1", "cp1252", "mac_roman", "cp437"):
            d["name"] = "r\u00e9seau \u00e7a"
            text = json.dumps(d, ensure_ascii=False, separators=(",", ":"))
        elif enc == "shift_jis":
            d["name"] = "\u30cd\u30c3\u30c8"
            text = json.dumps(d, ensure_ascii=False, separators=(",", ":"))
        raw = text.encode(enc)
        valid = valid or (enc in ("utf-8-sig", "utf-16", "utf-32") and L > 0)
    return raw, L, valid


def store_all_text(L: int) -> str:
    return " ".join([f"Fall{i}" for i in range(L)] + ["Loss"] + [f"B{i}" for i in reversed(range(L))])


@st.composite
def cases(draw):
    """``(argv with "{file}" placeholders, file bytes or None)``."""
    cmd = draw(st.sampled_from(("solve", "solve", "solve", "simulate", "simulate", "compare",
                                "verify", "hard", "plot", "bench", "profile", "confirm", "frontier",
                                "solvers", "none")))
    raw, L, valid = draw(chain_files(LONG_SIMULATE if cmd == "simulate" else LONG))
    budget = draw(st.sampled_from(BUDGETS))
    if cmd == "solve":
        solvers = (CHEAP_SOLVERS if L <= 6 else MID_CHAIN_SOLVERS if L <= 50
                   else LONG_CHAIN_SOLVERS)
        argv = ["solve", "{file}", "--budget", budget]
        s = draw(st.sampled_from(solvers))
        if s:
            argv += ["--solver", s]
        if L <= 6 and draw(st.booleans()):
            argv += ["-o", draw(st.sampled_from(OPTIONS))]
        if draw(st.booleans()):
            argv += ["--time-limit", draw(st.sampled_from(("5", "0", "-1", "abc", "1e308", "nan")))]
        if L <= 50 and draw(st.booleans()):
            argv += ["--slots", draw(st.sampled_from(("4", "0", "x", "99999999999")))]
        if draw(st.booleans()):
            argv.append("--json")
        return argv, raw
    if cmd == "simulate":
        if draw(st.booleans()) and L > 0:
            sched = store_all_text(L)
        else:
            sched = " ".join(draw(st.lists(st.sampled_from(SCHEDULE_TOKENS), max_size=8)))
        argv = ["simulate", "{file}", "--schedule", sched]
        if draw(st.booleans()):
            argv += ["--budget", budget]
        if draw(st.booleans()):
            argv.append("--allow-drop")
        if draw(st.booleans()):
            argv.append("--json")
        return argv, raw
    if cmd == "compare":
        names = draw(st.sampled_from(("store-all,dp", "dp-weak", "nosuch", "", ",", "store-all")))
        if L > 50:
            names = draw(st.sampled_from(("store-all", "nosuch", "chen-sqrt")))
        argv = ["compare", "{file}", "--solvers", names]
        argv += draw(st.sampled_from((["--budget", budget], ["--budgets", f"{budget},20"],
                                      ["--budgets", ",,"], [])))
        argv += draw(st.sampled_from(([], ["--time-limit", "5"], ["--time-limit", "-2"], ["--json"])))
        return argv, raw
    if cmd == "verify":
        return draw(st.sampled_from((
            ["verify", "--max-stages-for", "nosuch=3"],
            ["verify", "--max-stages-for", "dp=0"],
            ["verify", "--max-stages-for", "dp"],
            ["verify", "--stages", "0:3"], ["verify", "--stages", "5:2"],
            ["verify", "--stages", "a"], ["verify", "--trials", "0"],
            ["verify", "--solvers", "nosuch"], ["verify", "--families", "nosuch", "--stages", "2"],
            ["verify", "--time-limit", "nan"], ["verify", "--budgets-per-chain", "-1"],
            ["verify", "--stages", "2:2", "--trials", "1", "--families", "random",
             "--solvers", "store-all,dp", "--workers", "1", "--no-progress"],
            ["verify", "--seed", "-1"], ["verify", "--scheduler", "bogus://x"],
            ["verify", "--scheduler", "tcp://host"], ["verify", "--scheduler", "host:port"],
            ["verify", "--bogus"], ["verify", "--stages", "1_3"], ["verify", "--stages", "\u0662"],
            ["verify", "--json", "{dir}"], ["verify", "--json", "{dir}/nodir/r.json"],
        ))), None
    if cmd == "hard":
        return draw(st.sampled_from((
            ["hard", "--objective", "nope"], ["hard", "--time", "0"], ["hard", "--time", "-1"],
            ["hard", "--max-stages", "0"], ["hard", "--min-stages", "5", "--max-stages", "3"],
            ["hard", "--objective", "ilp-time", "--solver", "dp"], ["hard", "--keep", "nan"],
            ["hard", "--keep", "inf"], ["hard", "--objective", "baseline-gap", "--solver", "nosuch"],
            ["hard", "--max-stages", "99"], ["hard", "--help"],
            ["hard", "--seed", "-1"], ["hard", "--seed", "1_0"], ["hard", "--seed", "\u0661"],
            ["hard", "--scheduler", "bogus://x"], ["hard", "--out", "{dir}/f.txt"],
            ["hard", "--out", "{dir}/f.txt/sub"], ["hard", "--keep", "1_0"],
        ))), None
    if cmd == "plot":
        base = draw(st.sampled_from((["plot"], ["plot", "{file}", "--family", "random"],
                                     ["plot", "--family", "nosuch"],
                                     ["plot", "--family", "random", "--stages", "0"],
                                     ["plot", "{file}", "--solvers", "nosuch"],
                                     ["plot", "{file}", "--max-points", "0"],
                                     ["plot", "{file}", "--solvers", "store-all", "--max-points",
                                      "2", "--no-profile"])))
        if "{file}" in base and L > 6 and "--no-profile" in base:
            base = ["plot", "{file}", "--solvers", "nosuch"]
        out = draw(st.sampled_from(("{dir}/p.png", "{dir}/p.svg", "{dir}", "{dir}/nodir/p.png",
                                    "{dir}/p.xyz", "{dir}/p", "{dir}/f.txt/p.png", "")))
        return base + ["--out", out], raw
    if cmd == "bench":
        return draw(st.sampled_from((
            ["bench"], ["bench", "nosuch"], ["bench", "solvers", "--only", "nosuch", "--no-write"],
            ["bench", "solvers", "--dp-stages", "0"], ["bench", "solvers", "--dp-stages", "a,b"],
            ["bench", "quality", "--stages", "0"], ["bench", "quality", "--budgets", "-3"],
            ["bench", "solvers", "--budget-frac", "2"], ["bench", "quality", "--solvers", "nosuch",
                                                         "--no-write", "--stages", "2"],
            ["bench", "solvers", "--dp-solver", "nosuch", "--no-write"],
            ["bench", "solvers", "--dp-solver", "store-all", "--no-write"],
            ["bench", "quality", "--scheduler", "bogus://x", "--no-write"],
            ["bench", "quality", "--out", "{dir}/nodir/x/../y", "--solvers", "nosuch"],
            ["bench", "solvers", "--out", "{dir}/f.txt/sub", "--only", "nosuch"],
            ["bench", "quality", "--seed", "-2"],
        ))), None
    if cmd == "frontier":
        return draw(st.sampled_from((
            ["frontier"], ["frontier", "--network", "vgg"],
            ["frontier", "--network", "mlp", "--fractions", "0"],
            ["frontier", "--network", "mlp", "--fractions", ""],
            ["frontier", "--network", "mlp", "--batch", "x"],
            ["frontier", "--network", "mlp", "--memory-budgets", "2"],
            ["frontier", "--network", "mlp", "--device", "tpu"],
            ["frontier", "--network", "mlp", "--out", "{dir}/f.txt"],
            ["frontier", "--network", "mlp", "--out", "{dir}/f.txt/sub"],
        ))), None
    if cmd == "profile":
        return draw(st.sampled_from((
            ["profile", "--model", "nosuchmod:f"], ["profile", "--model", "os:getcwd"],
            ["profile", "--model", "os:nosuch"], ["profile", "--model", ":"],
            ["profile", "--model", "mlp", "--granularity", "0"],
            ["profile"], ["profile", "--model", "vgg"], ["profile", "--model", "mlp", "--device", "tpu"],
            ["profile", "--model", "mlp", "--repeats", "0"], ["profile", "--model", "mlp",
                                                              "--scale", "huge"],
            ["profile", "--model", "mlp", "--out", "{dir}"],
            ["profile", "--model", "mlp", "--out", "{dir}/nodir/c.json"],
            ["profile", "--model", "mlp", "--out", "{dir}/f.txt/c.json"],
        ))), None
    if cmd == "confirm":
        return draw(st.sampled_from((
            ["confirm", "--budgets", "0"], ["confirm", "--budgets", "half"],
            ["confirm", "--budgets", "150%"], ["confirm", "--budgets", ""],
            ["confirm", "--models", "vgg"], ["confirm", "--device", "tpu"],
            ["confirm", "--solvers", "nosuch", "--models", "mlp"], ["confirm", "--repeats", "0"],
        ))) + ["--out-dir", ""], None
    if cmd == "solvers":
        return draw(st.sampled_from((["solvers"], ["solvers", "--json"], ["solvers", "--bogus"]))), None
    return draw(st.sampled_from(([], ["nosuch"], ["--version"], ["-h"], ["solve"],
                                 ["solve", "--budget"], ["simulate", "x.json"], ["--json"],
                                 ["solve", "--json"], ["--bogus"], ["solvers", "--bogus"]))), None


def check_contract(argv, code, out, err, wall):
    """The contract of the module docstring; returns a short description on failure."""
    assert "Traceback" not in err and "Traceback" not in out, (argv, err[-2000:])
    assert "internal error" not in err, (argv, err[-2000:])
    if code == 1:  # a failed check: compare (a solver raised) or verify (a violation)
        assert argv[0] in ("compare", "verify"), (argv, err[-2000:])
        return
    assert code in (0, 2), (argv, code, err[-2000:])
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and ERROR_LINE.match(lines[0]), (argv, err[-2000:])
        assert "internal error" not in err, (argv, err)
    if "--json" in argv and argv[0] in ("solve", "simulate", "compare", "solvers"):
        obj = json.loads(out)  # one JSON object, also on an error
        if code == 2 and isinstance(obj, dict) and obj.get("status") == "error":
            assert obj["message"] and obj["exit_code"] == 2, (argv, obj)
    assert not CONTROL.search(err) and not CONTROL.search(out), (argv, (out + err)[-2000:])
    cpu, elapsed = wall if isinstance(wall, tuple) else (wall, wall)
    assert cpu < HANG_GUARD_S and elapsed < WALL_GUARD_S, (argv, cpu, elapsed)


def _materialize(argv, raw, tmp):
    (tmp / "f.txt").write_text("a file, where some cases want a folder")
    path = None
    if raw is not None:
        digest = hashlib.sha1(raw).hexdigest()[:16]
        path = tmp / f"chain-{digest}.json"
        path.write_bytes(raw)
    real = [a.replace("{file}", str(path)).replace("{dir}", str(tmp)) if isinstance(a, str) else a
            for a in argv]
    if path is None:
        real = [a for a in real if a != str(None)]
    return real


def _fuzz(n_examples: int, capsys, tmp_path, monkeypatch) -> int:
    monkeypatch.chdir(tmp_path)  # nothing a command writes by default lands in the repository
    seen = set()
    walls = []

    @settings(max_examples=n_examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=cases())
    def one(case):
        argv, raw = case
        if raw is None:
            argv = [a for a in argv if a != "{file}"]
        real = _materialize(argv, raw, tmp_path)
        seen.add((tuple(argv), None if raw is None else hashlib.sha1(raw).hexdigest()))
        capsys.readouterr()
        t0, c0 = time.monotonic(), time.process_time()
        code = main(real)
        wall = time.monotonic() - t0
        cpu = time.process_time() - c0
        walls.append((wall, real))
        out, err = capsys.readouterr()
        check_contract(real, code, out, err, (cpu, wall))

    one()
    with capsys.disabled():
        print(f"\ncli fuzz: {len(seen)} distinct inputs exercised in "
              f"{sum(w for w, _ in walls):.1f} s; slowest:")
        for w, argv in sorted(walls, key=lambda x: -x[0])[:int(os.environ.get("FUZZ_SLOWEST", 3))]:
            print(f"  {w:6.2f} s  {' '.join(a[:40] for a in argv)[:200]}")
    return len(seen)


def test_cli_fuzz(capsys, tmp_path, monkeypatch):
    assert _fuzz(CI_EXAMPLES, capsys, tmp_path, monkeypatch) >= CI_MIN_DISTINCT


@pytest.mark.slow
def test_cli_fuzz_long(capsys, tmp_path, monkeypatch):
    assert _fuzz(SLOW_EXAMPLES, capsys, tmp_path, monkeypatch) >= MIN_DISTINCT


# A handful through a real process: the console entry point, its exit code and streams.
SUBPROCESS_CASES = [
    (b"\xff\xfe" + "{".encode("utf-16-le") + b"\x00\xd8", ["solve", "{file}", "--budget", "10"]),
    (bytes(range(256)), ["simulate", "{file}", "--schedule", "Loss"]),
    ("{\"format\": \"remat-chain/1\", \"fwd_time\": [1, 1e308, 1e308], \"bwd_time\": [1, 1, 1, 1],"
     " \"x_size\": [1, 1, 1, 1], \"tape_size\": [1, 1, 1]}".encode(),
     ["compare", "{file}", "--budget", "100"]),
    (dumps(base_chain(3)).encode("utf-16"), ["solve", "{file}", "--budget", "100", "--json"]),
    (None, ["verify", "--max-stages-for", "nosuch=3"]),
]


@pytest.mark.parametrize("raw, argv", SUBPROCESS_CASES)
def test_cli_fuzz_subprocess(raw, argv, tmp_path):
    real = _materialize(argv, raw, tmp_path)
    env = dict(os.environ)
    env.pop("REMAT_TRACEBACK", None)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "remat_theory.cli", *real], capture_output=True,
                       text=True, cwd=tmp_path, env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
                       timeout=HANG_GUARD_S * 2)
    check_contract(real, r.returncode, r.stdout, r.stderr, time.monotonic() - t0)
