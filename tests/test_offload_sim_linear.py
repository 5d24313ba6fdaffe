"""The two-stream simulator's replay, linear in the schedule's length, against its first
implementation (tests/_offload_sim_reference.py: immutable states stepped op by op, the
times by value copied at every op, the leaving bytes and the description found by a scan
of the chain).

The same answer, exactly: the makespan and every op's start and time bit for bit, the peak,
every row of the profile (its stream, memory and ``held`` text), and for an invalid
schedule (an op the model refuses, a budget below the peak, a Drop where none is allowed,
a schedule that ends early) the same exception, step, op and message.  The public
:func:`~remat_theory.model.offload.step` (exact search and the executor step with it) gives
the reference's state, times by value included, after every op.  The schedules: random
valid ones with transfers woven in (tests/test_offload_model.py's generator), then mutated
(a token inserted, deleted, swapped or replaced, Drops included), under random budgets;
and the offload baselines' and dp-offload's schedules on chains of tens of stages.  Speed
is measured in benchmarks/bench_offload_sim.py, not here.
"""
from __future__ import annotations

import pytest
from _tiers import examples, tiered
from hypothesis import event, given, settings
from hypothesis import strategies as st

import solvers
from remat_theory.model.chain import Chain
from remat_theory.model.errors import InvalidScheduleError
from remat_theory.model.offload import OffloadState, simulate_offload, step
from remat_theory.model.schedule import Op
from remat_theory.strategies import chains, valid_schedules

from _offload_sim_reference import reference_simulate_offload, step as reference_step
from test_offload_model import _insert_transfers


def _outcome(replay, chain, tokens, budget, allow_drop):
    """What a replay says: ("ok", makespan, peak, rows) or ("error", type, step, op, text,
    peak, budget)."""
    try:
        r = replay(chain, " ".join(tokens), budget, allow_drop)
    except InvalidScheduleError as e:
        return ("error", type(e), e.step, e.op, str(e), getattr(e, "peak", None),
                getattr(e, "budget", None))
    if isinstance(r, tuple):
        return ("ok",) + r
    return ("ok", r.makespan, r.peak_memory, r.to_dict()["profile"])


def _new(chain, text, budget, allow_drop):
    return simulate_offload(chain, text, budget, allow_drop)


def _old(chain, text, budget, allow_drop):
    return reference_simulate_offload(chain, text, budget, allow_drop)


def _same(chain, tokens, budget=None, allow_drop=False):
    new = _outcome(_new, chain, tokens, budget, allow_drop)
    old = _outcome(_old, chain, tokens, budget, allow_drop)
    assert new == old, (tokens, budget, allow_drop)
    # bit for bit: == on floats would let -0.0 and 0.0 pass, repr does not
    assert repr(new) == repr(old)
    return new


def _same_states(chain, tokens, allow_drop=False):
    """The public step and the reference's, op by op: equal states, equal timings."""
    a = b = OffloadState.initial(chain)
    for t in tokens:
        op = Op.parse(t)
        ra, rb = step(chain, a, op, allow_drop), reference_step(chain, b, op, allow_drop)
        assert ra == rb, (tokens, t)
        if isinstance(ra, str):
            return
        a, b = ra[0], rb[0]


TOKENS = ["Fn", "Fck", "Fall", "B", "Offx", "Offt", "Prex", "Pret", "Dropx", "Dropt"]


def _mutate(draw, chain, tokens):
    tokens = list(tokens)
    L = chain.length
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["insert", "delete", "swap", "replace"]))
        k = draw(st.integers(0, max(len(tokens) - 1, 0)))
        token = (draw(st.sampled_from(TOKENS)) + str(draw(st.integers(0, L + 1)))
                 if draw(st.integers(0, 9)) else "Loss")
        if what == "insert":
            tokens.insert(k, token)
        elif tokens and what == "delete":
            del tokens[k]
        elif len(tokens) > 1 and what == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[k], tokens[j] = tokens[j], tokens[k]
        elif tokens:
            tokens[k] = token
    return tokens


@settings(max_examples=examples(300, 10), deadline=None)
@given(st.data(), chains(1, 5, unsaved_outputs=None, fall_costs=None, overheads=None),
       st.sampled_from([0.0, 0.5, 1.0, 3.0, 7.0, None]))
def test_the_linear_replay_is_the_reference_replay(data, chain, bandwidth):
    chain = chain.replace(bandwidth=bandwidth)
    base = data.draw(valid_schedules(chain, max_random_steps=8)).tokens()
    tokens = _insert_transfers(data.draw, chain, base) if bandwidth is not None else base
    if data.draw(st.integers(0, 2)) == 0:
        tokens = _mutate(data.draw, chain, tokens)
    allow_drop = data.draw(st.booleans())
    free = _same(chain, tokens, None, allow_drop)
    _same_states(chain, tokens, allow_drop)
    event("valid" if free[0] == "ok" else "invalid")
    if free[0] == "ok":
        peak = free[2]
        budget = data.draw(st.one_of(st.just(peak), st.integers(0, peak + 1)))
        event("over the budget" if budget < peak else "within the budget")
        _same(chain, tokens, budget, allow_drop)


def _long_chain(L, seed):
    """A heterogeneous chain of L stages (a fixed seed: the same chain every run)."""
    import random
    rng = random.Random(seed)
    x = [rng.randint(1, 9) for _ in range(L + 1)]
    return Chain(fwd_time=[rng.randint(1, 5) for _ in range(L)],
                 bwd_time=[rng.randint(1, 9) for _ in range(L)] + [rng.randint(0, 2)],
                 x_size=x, tape_size=[x[i + 1] + rng.randint(0, 6) for i in range(L)],
                 bandwidth=rng.choice([0.5, 2.0, 6.0]))


@pytest.mark.parametrize("L, seed", tiered([(12, 0), (25, 1), (40, 2)], [(12, 0)]))
def test_solvers_schedules_and_their_mutations(L, seed):
    """The offload baselines' and dp-offload's schedules on longer chains, and each of them
    cut at a random point, with a token removed or a transfer duplicated: the same answer."""
    import random
    chain = _long_chain(L, seed)
    rng = random.Random(seed)
    names = ["save-on-cpu", "offload-all", "dp-offload", "dp-offload-only"]
    checked = 0
    for name in names:
        top = solvers.solve(chain, chain.store_all_memory(), name)
        low = max(chain.x_size[0], top.peak_memory * 3 // 4) if top.peak_memory else 0
        for budget in (top.peak_memory, low):
            sol = solvers.solve(chain, budget, name)
            if sol.schedule is None:
                continue
            tokens = sol.schedule.tokens()
            out = _same(chain, tokens)
            assert out[0] == "ok" and out[1] == sol.makespan and out[2] == sol.peak_memory
            _same(chain, tokens, budget=out[2] - 1)
            k = rng.randrange(len(tokens))
            _same(chain, tokens[:k])
            _same(chain, tokens[:k] + tokens[k + 1:])
            transfers = [j for j, t in enumerate(tokens) if t[:3] in ("Off", "Pre")]
            if transfers:
                j = rng.choice(transfers)
                _same(chain, tokens[:j] + [tokens[j]] + tokens[j:])
            checked += 1
    assert checked >= 4


class _Stop(Exception):
    pass


def test_the_check_is_called_as_the_replay_goes_and_the_totals_are_the_profiles():
    """``check`` is called every CHECK_EVERY ops, and raising in it stops the replay;
    ``profile=False`` gives the same makespan and peak, with no profile; the registry's
    replay (``replay_totals``) of a long schedule with transfers calls it too."""
    from remat_theory.model import offload
    from remat_theory.model.fast_replay import replay_totals
    from solvers.offload.baselines import offload_all_schedule

    chain = Chain.homogeneous(3000, x_size=3, tape_size=5).replace(bandwidth=2.0)
    sched = offload_all_schedule(chain, 1)
    calls = []
    full = simulate_offload(chain, sched, check=calls.append)
    assert len(calls) == -(-len(sched) // offload.CHECK_EVERY) and set(calls) == {offload.REPLAYING}
    bare = simulate_offload(chain, sched, profile=False)
    assert (bare.makespan, bare.peak_memory, bare.profile) == (full.makespan, full.peak_memory, ())
    assert len(full.profile) == len(sched)

    def stop_at_second(what):
        calls.append(what)
        if len(calls) > 1:
            raise _Stop(what)

    for replay in (lambda c: simulate_offload(chain, sched, check=c),
                   lambda c: replay_totals(chain, sched, check=c)):
        calls = []
        with pytest.raises(_Stop):
            replay(stop_at_second)
    assert replay_totals(chain, sched) == (full.makespan, full.peak_memory)
