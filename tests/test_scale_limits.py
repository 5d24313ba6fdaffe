"""Issue #29, item 4: every limit holds at any size.

No timed asserts (speed figures are in benchmarks/bench_scale.py and docs/solvers.md): a
fake clock shows that each solver's time limit reaches a deadline and is honoured, a table
builder that raises shows that refusals come before any table, a check that raises shows
that options are checked before any work, and the chain's vectorised checks are compared
with the one-by-one checks they stand for.
"""
from __future__ import annotations

import math
import re
import types

import pytest
from _tiers import examples, tiered
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory.cli.main import main
from remat_theory.model import chain as chain_module
from remat_theory.model.chain import Chain
from remat_theory.model.errors import ChainError, SolverLimitError
from remat_theory.model.solution import TIME_LIMIT
from remat_theory.model.validation import (check_array, check_flag_entry, check_size_entry,
                                           check_time_entry)
from solvers import _deadline, registry


# ------------------------------------------------------------------ the option schema

def test_every_solver_takes_a_time_limit():
    """`--time-limit` applies to every registered solver (baselines included)."""
    for name in solvers.names():
        info = solvers.get(name)
        assert "time_limit" in info.options, name
        assert info.schema["time_limit"].kind == "seconds", name


# ------------------------------------------------------------------ a fake clock

class FakeClock:
    """``perf_counter`` advancing ``step`` seconds per call (and by ``jump``)."""

    def __init__(self, step: float):
        self.t = 1000.0
        self.step = step

    def perf_counter(self) -> float:
        self.t += self.step
        return self.t


@pytest.fixture
def fake_clock(monkeypatch):
    def install(step):
        clock = FakeClock(step)
        fake_time = types.SimpleNamespace(perf_counter=clock.perf_counter)
        monkeypatch.setattr(_deadline, "time", fake_time)
        monkeypatch.setattr(registry, "time", fake_time)
        return clock
    return install


BASELINES = ["store-all", "chen-sqrt", "chen-greedy", "revolve", "periodic", "dtr",
             "save-on-cpu", "offload-all"]


@pytest.mark.parametrize("name", BASELINES)
def test_a_baseline_stops_at_its_limit_with_no_schedule(name, fake_clock):
    """Each check of the deadline costs a fake second: a 3 s limit expires while the answer
    is built or replayed, and the answer is time_limit without a schedule (never a schedule
    the referee has not replayed)."""
    chain = Chain.homogeneous(20_000, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    budget = chain.store_all_memory() if name != "dtr" else chain.store_all_memory() // 2
    fake_clock(1.0)
    sol = solvers.solve(chain, budget, name, time_limit=3.0)
    assert sol.status == TIME_LIMIT, (sol.status, sol.message)
    assert sol.schedule is None and sol.makespan is None
    assert "not proven optimal" in sol.message or "not verified" in sol.message


def test_the_same_baseline_without_a_limit_answers(fake_clock):
    chain = Chain.homogeneous(20_000, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    fake_clock(1.0)
    sol = solvers.solve(chain, chain.store_all_memory(), "chen-sqrt")
    assert sol.schedule is not None and sol.status == "feasible"


def test_an_unfinished_replay_is_not_reported(monkeypatch, fake_clock):
    """The solver answers within its share; the referee's replay then runs past the limit:
    the answer says so and carries no schedule and no claim."""
    chain = Chain.homogeneous(5_000, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    clock = fake_clock(0.0)
    real = registry.replay_totals

    def slow_replay(*args, **kwargs):
        clock.step = 100.0  # the replay's first check of the deadline is past it
        return real(*args, **kwargs)

    monkeypatch.setattr(registry, "replay_totals", slow_replay)
    sol = solvers.solve(chain, chain.store_all_memory(), "store-all", time_limit=5.0)
    assert sol.status == TIME_LIMIT and sol.schedule is None and sol.bound is None
    assert "referee's replay did not finish" in sol.message
    assert "not verified" in sol.message


def test_the_solver_gets_the_limit_less_the_replay_reserve(monkeypatch):
    """The limit given reaches the solver, less what the referee's replay of a long chain's
    answer is expected to take (at most half)."""
    seen = {}

    def probe(chain, budget, *, time_limit=None):
        seen["time_limit"] = time_limit
        seen["deadline"] = _deadline.current().limit
        return None

    with registry.registered("probe-limit", probe, optimal_for="none",
                             options={"time_limit": registry.Option("seconds", "t", none=True)}):
        short = Chain.homogeneous(10)
        solvers.solve(short, short.store_all_memory(), "probe-limit", time_limit=7.0)
        assert seen == {"time_limit": 7.0, "deadline": 7.0}
        long = Chain.homogeneous(400_000)
        solvers.solve(long, long.store_all_memory(), "probe-limit", time_limit=7.0)
        reserve = registry.replay_reserve(long, 7.0)
        assert 0 < reserve <= 3.5
        assert seen == {"time_limit": 7.0 - reserve, "deadline": 7.0 - reserve}



@pytest.mark.parametrize("name", ["save-on-cpu", "offload-all"])
def test_an_offload_baseline_stops_at_its_limit_or_is_refused(name, fake_clock):
    """On a chain with a copy channel: the two-stream replay of the answer checks the
    deadline as it goes (a fake second per check: a 3 s limit expires in it, and the answer
    is time_limit with no schedule); a limit the replay's estimate cannot fit is refused up
    front, naming a limit that would do."""
    from solvers.offload.baselines import replay_estimate
    chain = Chain.homogeneous(5_000, fwd_time=1.0, bwd_time=2.0, x_size=3,
                              tape_size=5).replace(bandwidth=5.0)
    assert replay_estimate(chain) < 3.0
    fake_clock(1.0)
    sol = solvers.solve(chain, chain.store_all_memory(), name, time_limit=3.0)
    assert sol.status == TIME_LIMIT, (sol.status, sol.message)
    assert sol.schedule is None and sol.makespan is None
    assert "two-stream simulator" in sol.message and "not proven optimal" in sol.message
    long = Chain.homogeneous(100_000, x_size=3, tape_size=5).replace(bandwidth=5.0)
    est = replay_estimate(long)
    with pytest.raises(SolverLimitError, match="two-stream simulator") as e:
        solvers.solve(long, long.store_all_memory(), name, time_limit=est / 2)
    (remedy,) = [r for r in e.value.remedies if r.options]
    assert remedy.options[0][0] == "time_limit" and remedy.options[0][2] >= est


def test_auto_on_a_long_chain_with_a_channel_says_why_it_did_not_decide():
    """auto at a time limit too short for any route on 100,000 stages with a channel: the
    offload DP is refused (its table) and so is remat alone (its baseline's estimate):
    time_limit with no schedule, saying so, never that the DP's class has no schedule."""
    chain = Chain.homogeneous(100_000, fwd_time=1.0, bwd_time=2.0, x_size=3,
                              tape_size=5).replace(bandwidth=5.0)
    sol = solvers.solve(chain, chain.store_all_memory() // 4, "auto", time_limit=2.0)
    assert sol.status == TIME_LIMIT and sol.schedule is None
    assert "the offload DP gave no answer" in sol.message and "has none" not in sol.message
    assert "dp-offload: solver 'dp-offload'" in sol.message and "raise the time limit" in sol.message

# ------------------------------------------------------------------ refusals before tables

@pytest.fixture
def no_tables(monkeypatch):
    """Every table builder of the exact solvers raises if called."""
    from solvers import dp, dp_weak, exhaustive, gruslys
    from solvers.ilp import model as ilp_model
    from solvers.ilp import solver as ilp_solver

    def built(*args, **kwargs):
        raise AssertionError("a table was built before the refusal")

    for module, attr in [(dp, "PersistentTable"), (dp, "skewed_min_memory"),
                         (dp_weak, "WeakTable"), (gruslys, "gruslys_table"),
                         (exhaustive, "run_search"), (ilp_model, "binaries_bound"),
                         (ilp_solver, "binaries_bound")]:
        monkeypatch.setattr(module, attr, built)


@pytest.mark.parametrize("name", ["dp", "dp-weak", "gruslys", "ilp", "exhaustive",
                                  "exhaustive-offload", "recompute-all"])
def test_exact_and_quadratic_solvers_refuse_a_long_chain_before_any_table(name, no_tables):
    chain = Chain.homogeneous(200_000, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    with pytest.raises(SolverLimitError) as e:
        solvers.solve(chain, chain.store_all_memory() // 4, name, time_limit=1.0)
    assert e.value.remedies, str(e.value)  # names the way out


@pytest.mark.parametrize("name", ["dp", "dp-weak", "dp-offload"])
def test_the_dps_refuse_a_long_chain_from_its_length_alone(name, monkeypatch):
    """Past the length at which even one memory value per row is over the table limit, the
    DPs refuse before any O(L) work on the chain's values (a second at 1,000,000 stages)."""
    from solvers import _dp_tables

    def worked(*args, **kwargs):
        raise AssertionError("the chain's values were used before the refusal")

    monkeypatch.setattr(_dp_tables.UnitChain, "exact", classmethod(worked))
    chain = Chain.homogeneous(200_000, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    with pytest.raises(SolverLimitError, match="too long for this solver") as e:
        solvers.solve(chain, chain.store_all_memory() // 4, name, time_limit=1.0)
    assert [r.solver for r in e.value.remedies] == ["revolve"]


def test_dp_offload_refuses_on_its_time_before_the_saturation_table(monkeypatch):
    """Under the length refusal, dp-offload's time at a limit is refused from a lower bound
    of its table's width (the whole chain's saturation, O(L)) before the O(L^2) saturation
    table (2 s at 10,000 stages); without a limit it still builds the table."""
    from solvers.offload import dp as dp_offload

    def built(*args, **kwargs):
        raise AssertionError("the saturation table was built before the refusal")

    monkeypatch.setattr(dp_offload, "skewed_saturation", built)
    chain = Chain.homogeneous(10_000, fwd_time=1.0, bwd_time=2.0, x_size=3,
                              tape_size=5).replace(bandwidth=1.0)
    with pytest.raises(SolverLimitError, match="would need") as e:
        solvers.solve(chain, chain.store_all_memory() // 4, "dp-offload", time_limit=2.0)
    assert e.value.remedies, str(e.value)
    small = Chain.homogeneous(4, fwd_time=1.0, bwd_time=2.0, x_size=3,
                              tape_size=5).replace(bandwidth=1.0)
    with pytest.raises(AssertionError, match="saturation table"):
        solvers.solve(small, small.store_all_memory(), "dp-offload", time_limit=2.0)


def test_a_time_remedy_counts_the_replay_reserve():
    """A refusal under the solver's share of the limit asks for a limit that, less the
    reserve, gives the solver what it needs."""
    chain = Chain.homogeneous(3_000, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    with pytest.raises(SolverLimitError) as e:
        solvers.solve(chain, chain.store_all_memory() // 4, "dp", time_limit=0.1)
    asked = [v for r in e.value.remedies for k, _, v in r.options
             if k == "time_limit" and v is not None]
    for v in asked:
        assert v - registry.replay_reserve(chain, v) >= (e.value.estimate_s or 0) / 10


# ------------------------------------------------------------------ no work before checks

def test_options_are_checked_before_the_feasibility_check(tmp_path, capsys, monkeypatch):
    path = tmp_path / "c.json"
    Chain.homogeneous(4).save(path)

    def work(*args, **kwargs):
        raise AssertionError("work done before the options were checked")

    monkeypatch.setattr(solvers, "check_feasible", work)
    code = main(["solve", str(path), "--budget", "100", "--solver", "dp", "-o", "slots=0"])
    err = capsys.readouterr().err
    assert code == 2 and "slots = 0" in err, err


# ------------------------------------------------------------------ chain checks at once

def reference_array(name, values, checker):
    """What check_array returned before its vectorised path: each entry checked alone."""
    return tuple(checker(name, i, v) for i, v in enumerate(values))


def outcome(fn):
    try:
        out = fn()
    except ChainError as e:
        return ("error", str(e))
    return ("ok", tuple((type(v).__name__, repr(v)) for v in out))


ENTRIES = {
    check_size_entry: st.one_of(st.integers(-2, 2 ** 64), st.sampled_from(
        [True, False, 2.5, 3.0, -0.0, math.nan, math.inf, "3", None])),
    check_time_entry: st.one_of(st.integers(-2, 10 ** 400), st.floats(), st.sampled_from(
        [True, "1", None, -0.0])),
    check_flag_entry: st.one_of(st.booleans(), st.sampled_from([0, 1, 1.0, "true", None])),
}


@settings(max_examples=examples(300, 47))
@given(data=st.data(), checker=st.sampled_from(list(ENTRIES)), n=st.integers(64, 300))
def test_a_long_array_is_checked_as_entry_by_entry(data, checker, n):
    """The vectorised check answers what the one-by-one check answers: the same values
    (types included) or the same error naming the same field, index and value."""
    good = {check_size_entry: 3, check_time_entry: 1.5, check_flag_entry: True}[checker]
    values = [good] * n
    for _ in range(data.draw(st.integers(0, 3))):
        values[data.draw(st.integers(0, n - 1))] = data.draw(ENTRIES[checker])
    assert outcome(lambda: check_array("f", values, n, checker)) == \
        outcome(lambda: reference_array("f", values, checker))


@pytest.mark.parametrize("bad, message", [
    (True, "x_size[70] = True is not a number"),
    (-4, "x_size[70] = -4 is negative"),
    (2.5, "x_size[70] = 2.5 is not an integer (sizes are bytes)"),
])
def test_a_long_chains_error_names_field_index_and_value(bad, message):
    x = [3] * 101
    x[70] = bad
    with pytest.raises(ChainError, match=re.escape(message)):
        Chain(fwd_time=[1.0] * 100, bwd_time=[1.0] * 101, x_size=x, tape_size=[5] * 100)


def test_a_long_chains_tape_and_total_checks_name_the_first_entry():
    with pytest.raises(ChainError, match=r"tape_size\[80\] = 2 is smaller than x_size\[81\]"):
        Chain(fwd_time=[1.0] * 100, bwd_time=[1.0] * 101, x_size=[3] * 101,
              tape_size=[5] * 80 + [2] + [5] * 19)
    with pytest.raises(ChainError, match=r"x_size\[4\] = .* total size too large"):
        Chain(fwd_time=[1.0] * 100, bwd_time=[1.0] * 101, x_size=[2 ** 51] * 101,
              tape_size=[2 ** 51] * 100)
    with pytest.raises(ChainError, match=r"fwd_time\[\d+\] = .* total time too large"):
        Chain(fwd_time=[1e15] * 100, bwd_time=[1.0] * 101, x_size=[3] * 101,
              tape_size=[5] * 100)


def test_a_long_chains_total_size_is_checked_exactly_at_the_cap():
    """The total size summed at once (numpy) accepts a chain whose sizes add up to the cap
    exactly and names the entry one byte over it."""
    from remat_theory.model.chain import MAX_TOTAL_SIZE

    tape = [2 ** 46] * 100
    tape[-1] += MAX_TOTAL_SIZE - sum(tape)

    def chain(t):
        return Chain(fwd_time=[1.0] * 100, bwd_time=[1.0] * 101, x_size=[0] * 101,
                     tape_size=t)

    assert chain(tape).store_all_memory() > 0
    tape[-1] += 1
    with pytest.raises(ChainError, match=r"tape_size\[99\] = .* total size too large"):
        chain(tape)


@settings(max_examples=examples(100, 5))
@given(data=st.data(), L=st.integers(1, 150))
def test_memory_formulas_at_once_equal_their_loops(data, L):
    x = data.draw(st.lists(st.integers(0, 9), min_size=L + 1, max_size=L + 1))
    chain = Chain(fwd_time=[1.0] * L, bwd_time=[1.0] * (L + 1), x_size=x,
                  tape_size=[v + data.draw(st.integers(0, 4)) for v in x[1:]],
                  fwd_overhead=data.draw(st.lists(st.integers(0, 4), min_size=L, max_size=L)),
                  bwd_overhead=data.draw(st.lists(st.integers(0, 4), min_size=L + 1,
                                                  max_size=L + 1)),
                  fall_overhead=data.draw(st.lists(st.integers(0, 4), min_size=L, max_size=L)),
                  output_saved=data.draw(st.lists(st.booleans(), min_size=L, max_size=L)))
    saved = chain_module._VECTOR_MIN
    try:
        chain_module._VECTOR_MIN = 10 ** 9
        loops = (chain.store_all_memory(), chain.memory_lower_bound(), chain.size_gcd())
        chain_module._VECTOR_MIN = 1
        at_once = (chain.store_all_memory(), chain.memory_lower_bound(), chain.size_gcd())
    finally:
        chain_module._VECTOR_MIN = saved
    assert at_once == loops


# ------------------------------------------------------------------ a long chain, end to end

@pytest.mark.parametrize("length", tiered([20_000, 200_000], [20_000]))
@pytest.mark.parametrize("name", ["store-all", "chen-sqrt"])
def test_a_200k_stage_chain_is_answered_and_replayed(name, length):
    """On 200,000 stages (20,000 by default) a fast baseline answers under a (generous)
    limit, its schedule replayed by the referee: the makespan is the closed form's (no
    timing asserted)."""
    from solvers._schedules import segments_cost
    from solvers.chen import sqrt_checkpoints

    chain = Chain.homogeneous(length, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    budget = chain.store_all_memory()
    sol = solvers.solve(chain, budget, name, time_limit=600.0)
    assert sol.schedule is not None, sol.message
    expected = (chain.ideal_makespan() if name == "store-all"
                else segments_cost(chain, sqrt_checkpoints(chain.length))[0])
    assert sol.makespan == expected
    assert sol.peak_memory <= budget


def test_the_command_counts_the_limit_from_the_process_start(tmp_path, capsys, monkeypatch):
    """Run as a program, `remat solve` takes the time since the process started (start-up,
    imports, loading the chain) off the limit it passes on; called in a running process,
    the limit is passed on whole."""
    import json
    import time

    import importlib
    cli_main = importlib.import_module("remat_theory.cli.main")
    path = tmp_path / "c.json"
    Chain.homogeneous(3).save(path)
    argv = ["solve", str(path), "--budget", "100", "--time-limit", "150", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["info"]["auto_time_limit"] == 150.0
    monkeypatch.setattr(cli_main, "PROCESS_START", time.perf_counter() - 100.0)
    assert main(argv) == 0
    out, err = capsys.readouterr()
    passed = json.loads(out)["info"]["auto_time_limit"]
    assert 0 < passed <= 50.0 and "went to starting and loading the chain" in err
    start = cli_main.process_start()
    assert start is None or start <= time.perf_counter()


# ------------------------------------------------------------------ exhaustive's bound

def test_exhaustive_checks_its_deadline_before_the_first_bound():
    """An expired deadline stops the search before the A* bound is evaluated once (on
    thousands of stages one evaluation takes seconds); the bound answered is the ideal
    makespan, a lower bound over every schedule."""
    from solvers import exhaustive

    chain = Chain.homogeneous(6, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)

    def bound(state):
        raise AssertionError("the bound was evaluated past the deadline")

    out = exhaustive.run_search(chain, chain.store_all_memory() // 2, False, 1e-9, "all", None,
                                heuristic=bound)
    assert out[-1] == "time_limit" and out[3] == chain.ideal_makespan()


def test_exhaustive_stops_inside_its_first_bound(monkeypatch):
    """The deadline passing while the first bound is evaluated (its knapsack terms, one per
    backward) stops it there: a clock one second further at every reading."""
    from solvers import exhaustive

    chain = Chain.homogeneous(40, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    budget = chain.store_all_memory() // 4
    clock = FakeClock(1.0)
    monkeypatch.setattr(exhaustive, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    out = exhaustive.run_search(chain, budget, False, 2.5, "all", None)
    assert out[-1] == "time_limit" and out[3] == chain.ideal_makespan()
    # unstopped, the first bound is above the ideal makespan: it was stopped inside
    first = exhaustive.Heuristic(chain, budget)
    assert first(exhaustive._state_of(exhaustive._node_moves(
        chain, False, "all", budget, True).start())) > chain.ideal_makespan()


# ------------------------------------------------------------------ schedules of millions

def test_shared_stage_ops_are_the_ops_they_stand_for():
    """The ops the schedule builders slice from (made once per stage, without Op's checks)
    equal, hash, order and print as the ops made one by one."""
    from remat_theory.model.schedule import Op, Schedule, stage_ops

    for kind in ("Fn", "Fck", "Fall", "B"):
        shared = stage_ops(kind, 70)[:70]
        made = [Op(kind, i) for i in range(70)]
        assert shared == made and list(map(hash, shared)) == list(map(hash, made))
        assert [o.token for o in shared] == [o.token for o in made]
        assert sorted(reversed(shared)) == made
    text = "Fck0 Fn1 Fall2 Loss B2 Fall1 B1 Fall0 B0"
    assert Schedule(Schedule.parse(text)) == Schedule.parse(text)
    mixed = Schedule(["Fck0", stage_ops("Fn", 2)[1], "Fall2", "Loss"])
    assert str(mixed) == "Fck0 Fn1 Fall2 Loss"
    with pytest.raises(Exception, match="token 1"):
        Schedule([Op("Fn", 0), 3])


def test_a_long_list_prints_as_the_same_json(capsys):
    """`--json` writes a long top-level list (a schedule's tokens) on one line: the same
    document."""
    import json

    from remat_theory.cli.commands._common import LONG_LIST, print_json

    doc = {"status": "feasible", "schedule": [f"Fn{i}" for i in range(LONG_LIST + 5)],
           "info": {"a": [1, 2]}, "message": 'a "quoted" @@ text'}
    print_json(doc)
    assert json.loads(capsys.readouterr().out) == doc


def test_auto_runs_the_cheapest_baseline_where_its_measured_cost_fits(monkeypatch):
    """On 30,000 stages under a 5 s limit auto tries its cheapest baseline (about a second
    measured, docs/solvers.md) instead of refusing on an estimate ten times too high.  The
    baselines are stubbed: what is checked is auto's decision, not a time."""
    from remat_theory.model.solution import Solution

    chain = Chain.homogeneous(30_000, fwd_time=1.0, bwd_time=2.0, x_size=3, tape_size=5)
    budget = chain.store_all_memory() // 4
    ran = []
    real = registry.solve

    def solve(c, b, name, **opts):
        if name in ("chen-sqrt", "chen-greedy", "periodic", "revolve"):
            ran.append(name)
            return Solution.time_limit(name, b, message="stub")
        return real(c, b, name, **opts)

    monkeypatch.setattr(registry, "solve", solve)
    from solvers import auto
    try:
        auto.solve_auto(chain, budget, time_limit=5.0)
    except SolverLimitError as e:
        pytest.fail(f"auto refused: {e}")
    assert ran and ran[0] == "chen-sqrt"
