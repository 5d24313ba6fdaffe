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

from remat_theory.model import fields
from remat_theory.model.chain import Chain
from remat_theory.model.errors import ChainError
from remat_theory.analysis.families import FAMILIES


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{name} = {value!r} must be an integer >= {minimum}")


@st.composite
def _random_chain(draw, min_stages, max_stages, max_time, max_size, overheads, integer_times,
                  variations=()):
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
    # a rate (bytes per second): a copy of max_size bytes in 1/4 to 4 times max_time, or 0
    rate = st.one_of(st.just(0.0), st.floats(max_size / max(max_time, 1) / 4,
                                             4 * max_size / max(max_time, 1)))
    by_kind = {"time": times, "size": st.integers(0, max_size), "flag": st.booleans(),
               "rate": rate}
    optional = {}
    for name, state in variations:  # each variation's fields drawn by their kind
        if draw(st.booleans()) if state is None else state:
            for f in fields.variation(name).fields:
                fd = fields.field(f)
                n = fd.size(L)
                optional[f] = (draw(by_kind[fd.kind]) if fd.scalar else
                               draw(st.lists(by_kind[fd.kind], min_size=n, max_size=n)))
    return Chain(fwd, bwd, x, tape, fo, bo, name=f"hypothesis-{L}", **optional)


def _variation_states(variations, fall_costs, unsaved_outputs) -> tuple:
    """``((name, True | None), ...)`` in table order: the variations to draw (True: on every
    chain; None: on some).  ``fall_costs`` / ``unsaved_outputs`` are aliases of the
    ``fall-costs`` / ``unsaved-outputs`` entries."""
    states = {}
    for alias, name, value in (("fall_costs", "fall-costs", fall_costs),
                               ("unsaved_outputs", "unsaved-outputs", unsaved_outputs)):
        if value is not None and not isinstance(value, bool):
            raise InvalidArgument(f"{alias} = {value!r} must be True, False or None")
        states[name] = value
    if isinstance(variations, str) or not hasattr(variations, "__iter__"):
        raise InvalidArgument(f"variations = {variations!r} must be a list of names or a dict "
                              f"name -> True/False/None")
    items = variations.items() if hasattr(variations, "items") else ((v, True) for v in variations)
    for name, value in items:
        try:
            fields.variation(name)
        except ChainError as e:
            raise InvalidArgument(f"variations: {e}") from None
        if value is not None and not isinstance(value, bool):
            raise InvalidArgument(f"variations[{name!r}] = {value!r} must be True, False or None")
        states[name] = value
    return tuple((n, states[n]) for n in fields.VARIATIONS if states.get(n, False) is not False)


def chains(min_stages: int = 1, max_stages: int = 6, *, max_time: int = 10, max_size: int = 10,
           overheads: bool | None = None, family: str | None = None,
           integer_times: bool = True,
           variations=(),
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
    variations : the optional fields to draw, by variation
        (:data:`remat_theory.model.fields.VARIATIONS`: ``fall-costs``, ``unsaved-outputs``,
        ``offload``):
        a list of names (each on every chain) or a dict name -> True (every chain), None
        (some chains) or False (none).  A variation's fields are drawn by their kind
        (times like the forward ones, sizes in [0, max_size], flags either way, a bandwidth
        that copies max_size bytes in a quarter to four times max_time, or 0), or for a
        family by the variation's own draw (:meth:`~remat_theory.model.fields.Variation.apply`).
        Absent, a field keeps its default (the classic model).
    fall_costs, unsaved_outputs : aliases of ``variations={"fall-costs": ...}`` and
        ``{"unsaved-outputs": ...}``.
    """
    _check_int("min_stages", min_stages, 1)
    _check_int("max_stages", max_stages, 1)
    if max_stages < min_stages:
        raise InvalidArgument(f"max_stages = {max_stages} is below min_stages = {min_stages}")
    _check_int("max_time", max_time, 0)
    _check_int("max_size", max_size, 1)
    if overheads not in (None, True, False):
        raise InvalidArgument(f"overheads = {overheads!r} must be True, False or None")
    states = _variation_states(variations, fall_costs, unsaved_outputs)
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
        for name, state in states:
            use = st.booleans() if state is None else st.just(True)
            drawn = st.tuples(drawn, use, st.integers(0, 2**32 - 1)).map(
                lambda a, v=fields.variation(name): v.apply(a[0], a[2]) if a[1] else a[0])
        return drawn
    return _random_chain(min_stages, max_stages, max_time, max_size, overheads, integer_times,
                         states)


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
