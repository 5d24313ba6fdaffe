"""A pytest plugin that records each test's CPU time (docs/testing.md).

For setup, call and teardown together: user + system time of the pytest process and of
the children it reaped (a subprocess, a worker pool), beside the wall time, and for a
property test the number of examples hypothesis ran (its "passing" test cases, every
phase).  On a machine shared with other jobs the CPU time is the figure to compare; the
wall time is not.

    REMAT_CPU_TIMES=cpu.json PYTHONPATH=benchmarks python -m pytest -q -p pytest_cpu_times

writes ``{"tests": {nodeid: [cpu_s, wall_s, examples]}, "session_cpu": ...,
"session_wall": ...}`` (``examples`` is 0 for a test that is not a property test).

    python benchmarks/pytest_cpu_times.py cpu.json [--top 60] [--json out.json]

prints the totals, the CPU per file and the heaviest tests of such a file.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import time

import pytest

_TIMES: dict = {}
_START: list = []


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _examples(item) -> int:
    # hypothesis's pytest plugin leaves its statistics text on the item
    stats = getattr(item, "hypothesis_statistics", "")
    return sum(int(n) for n in re.findall(r"(\d+) passing", stats))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu(), time.perf_counter()
    yield
    _TIMES[item.nodeid] = [_cpu() - cpu, time.perf_counter() - wall, _examples(item)]


def pytest_sessionstart(session):
    _START[:] = [_cpu(), time.perf_counter()]


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("REMAT_CPU_TIMES")
    if out and _START:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"tests": _TIMES, "session_cpu": _cpu() - _START[0],
                       "session_wall": time.perf_counter() - _START[1]}, f, indent=0)


def summary(record: dict, top: int) -> dict:
    """Totals, CPU per file and the ``top`` heaviest tests of one recorded run."""
    tests = record["tests"]
    files: dict = collections.defaultdict(lambda: [0.0, 0])
    for node, row in tests.items():
        files[node.split("::")[0]][0] += row[0]
        files[node.split("::")[0]][1] += 1
    heaviest = sorted(tests.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "tests": len(tests),
        "examples": sum(row[2] if len(row) > 2 else 0 for row in tests.values()),
        "tests_cpu_s": round(sum(row[0] for row in tests.values()), 2),
        "session_cpu_s": round(record.get("session_cpu", 0.0), 2),
        "session_wall_s": round(record.get("session_wall", 0.0), 2),
        "files": {f: [round(c, 2), n] for f, (c, n) in sorted(files.items(), key=lambda kv: -kv[1][0])},
        "heaviest": [[node, round(row[0], 2), round(row[1], 2)] for node, row in heaviest],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Summarise a REMAT_CPU_TIMES record.")
    parser.add_argument("record")
    parser.add_argument("--top", type=int, default=60)
    parser.add_argument("--json", help="write the summary here as JSON")
    parser.add_argument("--command", default="", help="the command that made the record (kept in --json)")
    args = parser.parse_args(argv)
    with open(args.record, encoding="utf-8") as f:
        s = summary(json.load(f), args.top)
    print(f"{s['tests']} tests, {s['examples']} hypothesis examples, {s['tests_cpu_s']} CPU s in tests, "
          f"{s['session_cpu_s']} CPU s in the session, {s['session_wall_s']} s wall")
    for f, (cpu, n) in list(s["files"].items())[:25]:
        print(f"{cpu:8.2f} {n:5d}  {f}")
    print("heaviest tests (CPU s, wall s):")
    for node, cpu, wall in s["heaviest"]:
        print(f"{cpu:8.2f} {wall:8.2f}  {node}")
    if args.json:
        s["command"] = args.command
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(s, f, indent=1)


if __name__ == "__main__":
    main()
