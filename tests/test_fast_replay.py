"""The vectorised replay (remat_theory.model.fast_replay) against the reference simulator.

The reference (:func:`remat_theory.model.simulator.simulate`) is the oracle: on every
schedule both must give the same makespan (the same float, bit for bit), the same peak, or
the same refusal (error class, step and message).  Schedules: random valid walks, the
answers of every registered solver that fits the chain, and those mutated (an operation
deleted, duplicated, swapped, inserted, an index moved), under random budgets, with and
without Drop operations allowed.
"""
from __future__ import annotations

import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory.model import fast_replay
from remat_theory.model.chain import Chain
from remat_theory.model.errors import InvalidScheduleError, RematError
from remat_theory.model.fast_replay import replay_totals
from remat_theory.model.schedule import Schedule
from remat_theory.model.simulator import simulate
from remat_theory.strategies import chains, valid_schedules

KINDS = ("Fn", "Fck", "Fall", "B", "Dropx", "Dropt")


@pytest.fixture(autouse=True)
def always_vectorised(monkeypatch):
    """Every schedule through the vectorised path, however short, and none answered from
    the memo of recent replays."""
    monkeypatch.setattr(fast_replay, "MIN_OPS", 0)
    monkeypatch.setattr(fast_replay, "MEMO_SIZE", 0)
    monkeypatch.setattr(fast_replay, "_MEMO", [])


def outcome(fn, chain, schedule, budget, allow_drop):
    try:
        r = fn(chain, schedule, budget, allow_drop)
    except InvalidScheduleError as e:
        return ("refused", type(e).__name__, e.step, str(e))
    return ("ok", r.makespan.hex(), r.peak_memory)


def assert_same(chain, schedule, budget, allow_drop=False):
    ref = outcome(simulate, chain, schedule, budget, allow_drop)
    fast = outcome(replay_totals, chain, schedule, budget, allow_drop)
    assert fast == ref, (chain.to_dict(), str(schedule), budget, allow_drop)
    return ref


def solver_schedules(chain, budget):
    """The schedules of every registered solver that answers quickly on this chain."""
    out = []
    for name in solvers.names():
        if name in ("ilp", "prove", "auto"):  # slow or the same schedules as others
            continue
        try:
            sol = solvers.solve(chain, budget, name)
        except RematError:
            continue
        if sol.schedule is not None:
            out.append(sol.schedule)
    return out


@st.composite
def mutated(draw, schedule: Schedule, length: int):
    tokens = schedule.tokens()
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "move"]))
        if what == "insert" or not tokens:
            kind = draw(st.sampled_from(KINDS + ("Loss",)))
            token = kind if kind == "Loss" else f"{kind}{draw(st.integers(0, length + 1))}"
            tokens.insert(draw(st.integers(0, len(tokens))), token)
            continue
        k = draw(st.integers(0, len(tokens) - 1))
        if what == "delete":
            del tokens[k]
        elif what == "duplicate":
            tokens.insert(draw(st.integers(0, len(tokens))), tokens[k])
        elif what == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[k], tokens[j] = tokens[j], tokens[k]
        elif tokens[k] != "Loss":
            head = tokens[k].rstrip("0123456789")
            tokens[k] = f"{head}{draw(st.integers(0, length + 1))}"
    return Schedule.parse(" ".join(tokens))


ANY_CHAIN = chains(1, 6, variations={"fall-costs": None, "unsaved-outputs": None},
                   integer_times=False)


@settings(max_examples=examples(150, 6))
@given(data=st.data(), chain=ANY_CHAIN)
def test_random_valid_schedules_and_their_mutations(data, chain):
    schedule = data.draw(valid_schedules(chain))
    peak = simulate(chain, schedule).peak_memory
    for budget in (None, peak, peak - 1, data.draw(st.integers(0, peak + 2))):
        assert_same(chain, schedule, budget)
    bad = data.draw(mutated(schedule, chain.length))
    assert_same(chain, bad, data.draw(st.sampled_from([None, peak])),
                data.draw(st.booleans()))


@settings(max_examples=examples(40, 3))
@given(data=st.data(), chain=chains(1, 5, variations={"fall-costs": None,
                                                     "unsaved-outputs": None}))
def test_every_solvers_schedules_and_their_mutations(data, chain):
    budget = chain.store_all_memory() + data.draw(st.integers(-3, 3))
    for schedule in solver_schedules(chain, max(budget, 0)):
        allow = any(op.kind == "Drop" for op in schedule)
        assert assert_same(chain, schedule, budget, allow)[0] in ("ok", "refused")
        bad = data.draw(mutated(schedule, chain.length))
        assert_same(chain, bad, data.draw(st.sampled_from([None, budget])),
                    data.draw(st.booleans()))


def test_zero_times_and_sizes():
    chain = Chain(fwd_time=[0, 0, 0], bwd_time=[0, 0, 0, 0], x_size=[0, 0, 0, 0],
                  tape_size=[0, 0, 0])
    for name in ("store-all", "chen-sqrt", "revolve", "recompute-all"):
        schedule = solvers.solve(chain, 0, name).schedule
        assert assert_same(chain, schedule, 0) == ("ok", (0.0).hex(), 0)


@pytest.mark.parametrize("variation", [None, "fall-costs", "unsaved-outputs"])
def test_long_schedule_equal_and_a_late_error_named_alike(variation):
    """A long answer (chen-sqrt on 2,000 stages: 6,000 operations, the makespan a long sum
    of non-representable decimals), then the same with one operation removed near the end
    and with a budget one byte short."""
    from remat_theory.analysis.families import uniform_random

    chain = uniform_random(2000, seed=3)
    if variation:
        from remat_theory.model.fields import variation as var
        chain = var(variation).apply(chain, seed=1)
    schedule = solvers.solve(chain, chain.store_all_memory(), "chen-sqrt").schedule
    ok = assert_same(chain, schedule, None)
    assert ok[0] == "ok"
    peak = ok[2]
    assert assert_same(chain, schedule, peak - 1)[0] == "refused"
    ops = list(schedule)
    late = len(ops) - 7
    assert assert_same(chain, Schedule(ops[:late] + ops[late + 1:]), None)[0] == "refused"
    assert assert_same(chain, Schedule(ops[:-1]), None)[0] == "refused"  # ends without d0


def test_transfers_go_to_the_reference():
    chain = Chain.homogeneous(3).replace(bandwidth=1.0)
    sol = solvers.solve(chain, chain.store_all_memory(), "save-on-cpu")
    assert any(op.is_transfer for op in sol.schedule)
    assert_same(chain, sol.schedule, None)


def test_a_replay_is_remembered_for_budgets_at_or_above_its_peak(monkeypatch):
    monkeypatch.setattr(fast_replay, "MEMO_SIZE", 4)
    chain = Chain.homogeneous(300)
    schedule = solvers.get("store-all").func(chain, chain.store_all_memory()).schedule
    peak = replay_totals(chain, schedule).peak_memory
    calls = []
    assert replay_totals(chain, schedule, peak, check=calls.append).peak_memory == peak
    assert calls == []  # remembered
    with pytest.raises(InvalidScheduleError) as e:  # below its peak: replayed, refused
        replay_totals(chain, schedule, peak - 1, check=calls.append)
    assert calls and str(e.value) == outcome(simulate, chain, schedule, peak - 1, False)[3]


def test_deadline_check_is_called_between_steps():
    chain = Chain.homogeneous(300)
    schedule = solvers.solve(chain, chain.store_all_memory(), "store-all").schedule
    calls = []
    replay_totals(chain, schedule, check=calls.append)
    assert len(calls) >= 5 and set(calls) == {fast_replay.WHAT}

    class Stop(Exception):
        pass

    def stop(what):
        raise Stop(what)

    with pytest.raises(Stop):
        replay_totals(chain, schedule, check=stop)


def test_an_empty_schedule_is_refused_as_the_simulator_refuses_it():
    """Found by the property test above: the vectorised replay indexed an empty schedule."""
    from remat_theory.model.chain import Chain
    from remat_theory.model.errors import InvalidScheduleError
    from remat_theory.model.fast_replay import replay_totals
    from remat_theory.model.schedule import Schedule
    from remat_theory.model.simulator import simulate
    chain = Chain([0.0], [0.0, 0.0], [1, 1], [1], [0], [0, 0])
    errors = []
    for run in (replay_totals, simulate):
        with pytest.raises(InvalidScheduleError) as e:
            run(chain, Schedule.parse(""), None, False)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "d0" in errors[0]
