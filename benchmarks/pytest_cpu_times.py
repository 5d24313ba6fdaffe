"""A pytest plugin that records each test's CPU time (docs/testing.md).

For setup, call and teardown together: user + system time of the pytest process and of
the children it reaped (a subprocess, a worker pool), beside the wall time.  On a machine
shared with other jobs the CPU time is the figure to compare; the wall time is not.

    REMAT_CPU_TIMES=cpu.json PYTHONPATH=benchmarks python -m pytest -q -p pytest_cpu_times

writes ``{"tests": {nodeid: [cpu_s, wall_s]}, "session_cpu": ..., "session_wall": ...}``.
"""
from __future__ import annotations

import json
import os
import resource
import time

import pytest

_TIMES: dict = {}
_START: list = []


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu(), time.perf_counter()
    yield
    _TIMES[item.nodeid] = [_cpu() - cpu, time.perf_counter() - wall]


def pytest_sessionstart(session):
    _START[:] = [_cpu(), time.perf_counter()]


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("REMAT_CPU_TIMES")
    if out and _START:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"tests": _TIMES, "session_cpu": _cpu() - _START[0],
                       "session_wall": time.perf_counter() - _START[1]}, f, indent=0)
