"""Hypothesis strategies for property-testing checkpointing solvers, ours or yours.

Example::

    from hypothesis import given
    from remat_theory.strategies import chains, budgets, chains_and_budgets
    from remat_theory import simulate

    @given(chains_and_budgets(max_stages=5))
    def test_my_solver(cb):
        chain, budget = cb
        schedule = my_solver(chain, budget)
        if schedule is not None:
            assert simulate(chain, schedule, budget).peak_memory <= budget

Arguments are validated when the strategy is built; a bad one raises hypothesis'
``InvalidArgument`` naming it (the ``hypothesis.strategies`` habit).
"""
from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from remat_theory.model.chain import Chain
from remat_theory.analysis.families import FAMILIES, with_fall_costs, with_unsaved_outputs


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{name} = {value!r} must be an integer >= {minimum}")


@st.composite
def _random_chain(draw, min_stages, max_stages, max_time, max_size, overheads, integer_times,
                  fall_costs=False, unsaved_outputs=False):
    L = draw(st.integers(min_stages, max_stages))
    if integer_times:
        times = st.integers(0, max_time).map(float)
    else:
        times = st.floats(0.0, float(max_time), allow_nan=False, allow_infinity=False)
    fwd = draw(st.lists(times, min_size=L, max_size=L))
    bwd = draw(st.lists(times, min_size=L + 1, max_size=L + 1))
    x = draw(st.lists(st.integers(1, max_size), min_size=L + 1, max_size=L + 1))
    extra = draw(st.lists(st.integers(0, max_size), min_size=L, max_size=L))
    tape = [x[i + 1] + extra[i] for i in range(L)]
    use_overheads = draw(st.booleans()) if overheads is None else overheads
    if use_overheads:
        fo = draw(st.lists(st.integers(0, max_size), min_size=L, max_size=L))
        bo = draw(st.lists(st.integers(0, max_size), min_size=L + 1, max_size=L + 1))
    else:
        fo, bo = [0] * L, [0] * (L + 1)
    use_fall = draw(st.booleans()) if fall_costs is None else fall_costs
    fall_time = fall_overhead = None
    if use_fall:
        fall_time = draw(st.lists(times, min_size=L, max_size=L))
        fall_overhead = draw(st.lists(st.integers(0, max_size), min_size=L, max_size=L))
    use_unsaved = draw(st.booleans()) if unsaved_outputs is None else unsaved_outputs
    saved = None
    if use_unsaved:
        saved = draw(st.lists(st.booleans(), min_size=L, max_size=L))
    return Chain(fwd, bwd, x, tape, fo, bo, name=f"hypothesis-{L}", fall_time=fall_time,
                 fall_overhead=fall_overhead, output_saved=saved)


def chains(min_stages: int = 1, max_stages: int = 6, *, max_time: int = 10, max_size: int = 10,
           overheads: bool | None = None, family: str | None = None,
           integer_times: bool = True,
           fall_costs: bool | None = False,
           unsaved_outputs: bool | None = False) -> st.SearchStrategy[Chain]:
    """Random heterogeneous chains.

    Parameters
    ----------
    min_stages, max_stages : range of L, the number of forward stages.
    max_time : times are drawn in [0, max_time] (integers unless ``integer_times=False``).
    max_size : activations in [1, max_size]; tapes exceed their output by [0, max_size];
        overheads in [0, max_size].
    overheads : True / False forces transient overheads on / off; None draws both.
    family : None for independent uniform values, or a family name of
        :mod:`remat_theory.analysis.families` (``random``, ``resnet``, ``transformer``, ``rnn``,
        ``homogeneous``): the chain is that family's, with a drawn seed.
    fall_costs : True gives every chain its own recording-forward costs (``fall_time``,
        ``fall_overhead``, drawn like the forward ones, or for a family by
        :func:`~remat_theory.analysis.families.with_fall_costs`); False (the default) none,
        so a recording forward costs what a no-grad one does; None draws both.
    unsaved_outputs : True draws ``output_saved`` (some stage outputs read by no backward:
        each entry drawn, or for a family by
        :func:`~remat_theory.analysis.families.with_unsaved_outputs`); False (the default)
        every output saved, the classic table; None draws both.
    """
    _check_int("min_stages", min_stages, 1)
    _check_int("max_stages", max_stages, 1)
    if max_stages < min_stages:
        raise InvalidArgument(f"max_stages = {max_stages} is below min_stages = {min_stages}")
    _check_int("max_time", max_time, 0)
    _check_int("max_size", max_size, 1)
    if overheads not in (None, True, False):
        raise InvalidArgument(f"overheads = {overheads!r} must be True, False or None")
    if fall_costs not in (None, True, False):
        raise InvalidArgument(f"fall_costs = {fall_costs!r} must be True, False or None")
    if unsaved_outputs not in (None, True, False):
        raise InvalidArgument(f"unsaved_outputs = {unsaved_outputs!r} must be True, False or None")
    if family is not None:
        if family not in FAMILIES:
            raise InvalidArgument(f"family = {family!r} is unknown (known: {', '.join(FAMILIES)})")
        gen = FAMILIES[family]

        def build(args):
            L, seed, ov = args
            if family == "homogeneous":
                return gen(L, seed)
            return gen(L, seed, overheads=ov)

        ov = st.booleans() if overheads is None else st.just(overheads)
        drawn = st.tuples(st.integers(min_stages, max_stages), st.integers(0, 2**32 - 1), ov).map(build)
        for option, variant in ((fall_costs, with_fall_costs),
                                (unsaved_outputs, with_unsaved_outputs)):
            if option is not False:
                use = st.booleans() if option is None else st.just(True)
                drawn = st.tuples(drawn, use, st.integers(0, 2**32 - 1)).map(
                    lambda a, variant=variant: variant(a[0], a[2]) if a[1] else a[0])
        return drawn
    return _random_chain(min_stages, max_stages, max_time, max_size, overheads, integer_times,
                         fall_costs, unsaved_outputs)


def budgets(chain: Chain, *, feasible_only: bool = False, low: int | None = None,
            high: int | None = None) -> st.SearchStrategy[int]:
    """Integer budgets (bytes) for ``chain``.

    By default from just below :meth:`Chain.memory_lower_bound` (so some are infeasible)
    to a little above :meth:`Chain.store_all_memory`.  ``feasible_only=True`` starts at the
    lower bound (budgets there may still be infeasible: the bound is necessary, not
    sufficient).  ``low`` / ``high`` override the range.
    """
    if not isinstance(chain, Chain):
        raise InvalidArgument(f"chain = {chain!r} is not a Chain")
    lb, top = chain.memory_lower_bound(), chain.store_all_memory()
    lo = low if low is not None else (lb if feasible_only else max(0, lb - 2))
    hi = high if high is not None else top + 2
    _check_int("low", lo, 0)
    _check_int("high", hi, 0)
    if hi < lo:
        raise InvalidArgument(f"high = {hi} is below low = {lo}")
    return st.integers(lo, hi)


def chains_and_budgets(min_stages: int = 1, max_stages: int = 6, **kwargs) -> st.SearchStrategy:
    """Pairs ``(chain, budget)`` with the budget drawn by :func:`budgets`."""
    feasible_only = kwargs.pop("feasible_only", False)
    return chains(min_stages, max_stages, **kwargs).flatmap(
        lambda c: st.tuples(st.just(c), budgets(c, feasible_only=feasible_only)))


def _forward_path_to_backward(chain: Chain, state, memory):
    """Shortest list of forward ops after which the next backward op is valid (BFS over
    simulator states, no budget).  Always exists: x_0 is held and every stage not yet
    differentiated can be recomputed from it."""
    from collections import deque

    from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn
    from remat_theory.model.simulator import transition

    def bwd_op(s):
        return LOSS_OP if s.bwd_next == chain.length else Bwd(s.bwd_next)

    seen = {state}
    queue = deque([(state, memory, [])])
    while queue:
        s, mem, path = queue.popleft()
        if not isinstance(transition(chain, s, mem, bwd_op(s)), str):
            return path
        for i in range(min(s.bwd_next, chain.length - 1) + 1):
            for op in (Fn(i), Fck(i), Fall(i)):
                r = transition(chain, s, mem, op)
                if not isinstance(r, str) and r.state not in seen:
                    seen.add(r.state)
                    queue.append((r.state, r.memory_after, path + [op]))
    raise AssertionError("unreachable: a forward path to the next backward always exists")


@st.composite
def valid_schedules(draw, chain: Chain, max_random_steps: int = 30):
    """Random valid schedules of ``chain`` (no budget): a random walk over the valid
    operations of the simulator (wasteful recomputations included), completed by the
    shortest forward paths once ``max_random_steps`` is spent."""
    from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, Schedule
    from remat_theory.model.simulator import State, transition

    if not isinstance(chain, Chain):
        raise InvalidArgument(f"chain = {chain!r} is not a Chain")
    _check_int("max_random_steps", max_random_steps, 0)
    state, mem = State.initial(chain), chain.x_size[0]
    ops = []
    steps = draw(st.integers(0, max_random_steps))
    while not state.is_final():
        bwd = LOSS_OP if state.bwd_next == chain.length else Bwd(state.bwd_next)
        candidates = [bwd] + [op for i in range(min(state.bwd_next, chain.length - 1) + 1)
                              for op in (Fn(i), Fck(i), Fall(i))]
        valid = [(op, r) for op in candidates
                 if not isinstance(r := transition(chain, state, mem, op), str)]
        if steps > 0 and valid:
            steps -= 1
            op, r = valid[draw(st.integers(0, len(valid) - 1))]
            chosen = [(op, r)]
        else:
            path = _forward_path_to_backward(chain, state, mem) + [bwd]
            chosen = []
            for op in path:
                r = transition(chain, state, mem, op)
                chosen.append((op, r))
                state, mem = r.state, r.memory_after
            ops.extend(op for op, _ in chosen)
            continue
        for op, r in chosen:
            ops.append(op)
            state, mem = r.state, r.memory_after
    return Schedule(ops)
