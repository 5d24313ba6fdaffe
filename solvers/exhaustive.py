"""Exhaustive search: the optimum with no modelling argument at all.

A* (Dijkstra with an admissible, consistent heuristic) over the simulator's own states
(:class:`remat_theory.model.simulator.State`), using the simulator's own transition function, so
the only assumption is the operation table itself.  A state is the set of plain
activations held, the set of tapes held, and which backward runs next; memory is a
function of the state.  Edges are the valid operations whose peak fits the budget, weighted
by their time.  The first final state popped is optimal.

Heuristic (a lower bound on the time still to spend): every backward not yet run costs its
time, and every remaining B_j whose tape t_{j+1} is not held needs at least one more
``Fall_j``.  It never decreases by more than an edge's cost, so A* returns the optimum.

The state space has at most 2^L * 2^L * (L+2) states, but only the states reachable within
the budget and below the optimum's f-value are visited.  At the middle and tight budgets of
``benchmarks/bench_ilp.py speed`` (random chains) it proves 12 stages in 0.8-37 s, 15
stages at the middle budget in 2-44 s but only 1 of 3 tight ones within 5 minutes, and not
a tight 20-stage one in 10 minutes.
Nothing bounds other chains by those figures (the state space still grows as 4^L), so
``max_stages`` (default 8) guards against an accidental long run: raise it to go further,
with ``time_limit``.

Option ``schedule_class`` restricts the search to exactly one class of schedules of
:mod:`remat_theory.model.persistence` (``"persistent"`` or ``"weak"``): an operation is an edge
only when it also obeys the class rules, and for the persistent class the search state is
extended with the one piece of bookkeeping its rules need (which plain value, if any, the
previous operation produced).  ``"monotone"`` (forward stages never decrease inside a phase)
is the normal form of the ILP's fast mode, whose state extension is the stage of the
previous forward operation of the phase.  This is the oracle each solver of a restricted
class is checked against: ``dp`` must equal ``exhaustive(schedule_class="persistent")``,
``dp-weak`` must equal ``exhaustive(schedule_class="weak")`` and ``ilp(passes=1,
pairs=True)`` must equal ``exhaustive(schedule_class="monotone")``.  The default ``"all"`` is the unrestricted search.

:func:`min_feasible_budget` finds the smallest budget at which any schedule exists, by a
bottleneck (minimax) variant of the same search: exact for the whole schedule space.
"""
from __future__ import annotations

import heapq
import itertools
import time

from remat_theory.model import classes, persistence
from remat_theory.model.chain import Chain
from remat_theory.model.errors import SolverError, SolverOptionError
from remat_theory.model.schedule import LOSS_OP, Bwd, DropT, DropX, Fall, Fck, Fn, Schedule
from remat_theory.model.simulator import State, transition
from remat_theory.model.solution import Solution
from remat_theory.model.validation import check_bool, check_int, check_positive, option_owner

from solvers.registry import register, variant

NAME = "exhaustive"
# The size guard: longer chains are refused unless max_stages is raised (4^L states).
DEFAULT_MAX_STAGES = 8
# In a sweep of many chains and budgets (remat verify, plots, the quality benchmark).
SWEEP_MAX_STAGES = 7
# As the exact reference of remat compare and remat hard: every family chain of 10 stages
# took at most a few seconds at the budgets measured (benchmarks/bench_ilp.py speed).
REFERENCE_MAX_STAGES = 10
DEFAULT_MAX_STATES = 10_000_000  # about 4 GB; a time limit alone does not bound memory
_OPTION = option_owner(NAME)


def _check_size(chain: Chain, max_stages: int) -> None:
    max_stages = check_int(max_stages, "max_stages", minimum=1, error=SolverOptionError,
                           owner=_OPTION)
    if chain.length > max_stages:
        raise SolverOptionError(
            f"exhaustive search on {chain.length} stages would explore up to "
            f"{4 ** chain.length * (chain.length + 2):,} states; max_stages = {max_stages} "
            f"(raise max_stages to force it)")


class _Moves:
    """Candidate operations from a state (validity is decided by ``transition``)."""

    def __init__(self, chain: Chain, allow_drop: bool):
        L = chain.length
        self.chain = chain
        self.allow_drop = allow_drop
        self.fwd = [(Fn(i), Fck(i), Fall(i)) for i in range(L)]
        self.bwd = [Bwd(i) for i in range(L)]
        self.dropx = [DropX(i) if i else None for i in range(L + 1)]
        self.dropt = [DropT(i) if i else None for i in range(L + 1)]

    def __call__(self, state: State):
        L = self.chain.length
        plain, tapes, nxt = state
        if nxt == L:
            yield LOSS_OP
        elif nxt >= 0:
            yield self.bwd[nxt]
        top = min(nxt, L - 1)
        for i in range(top + 1):
            if plain >> i & 1 or (i and tapes >> i & 1):
                yield from self.fwd[i]
        if self.allow_drop:
            for i in range(1, L + 1):
                if plain >> i & 1:
                    yield self.dropx[i]
                if tapes >> i & 1:
                    yield self.dropt[i]


def _heuristic(chain: Chain, state: State) -> float:
    plain, tapes, nxt = state
    if nxt < 0:
        return 0.0
    h = chain.bwd_time[chain.length] if nxt == chain.length else 0.0
    for j in range(min(nxt, chain.length - 1), -1, -1):
        h += chain.bwd_time[j]
        if not tapes >> (j + 1) & 1:
            h += chain.fall_time[j]  # B_j needs the tape of a Fall_j
    return h


def _rebuild(parent: dict, state) -> Schedule:
    ops = []
    while parent[state] is not None:
        state, op = parent[state]
        ops.append(op)
    return Schedule(reversed(ops))


class _ClassMoves:
    """Moves restricted to a class of :mod:`remat_theory.model.persistence`.

    Search nodes are ``(State, mark)``: ``mark`` is the class's bookkeeping
    (:func:`remat_theory.model.persistence.next_mark`): the plain value the previous op produced
    (persistent), the stage of the previous forward op of the phase (monotone), else -1.
    """

    def __init__(self, chain: Chain, schedule_class: str):
        self.chain = chain
        self.cls = schedule_class
        self.inner = _Moves(chain, False)

    def start(self):
        return (State.initial(chain=self.chain), persistence.NO_FRESH)

    def __call__(self, node, mem):
        state, fresh = node
        chain, cls = self.chain, self.cls
        for op in self.inner(state):
            if persistence.violation(chain, state, fresh, op, cls) is not None:
                continue
            r = transition(chain, state, mem, op)
            if isinstance(r, str):
                continue
            nf = persistence.next_mark(op, cls, fresh)
            yield op, r, (r.state, nf)


class _AllMoves:
    """Unrestricted moves; search nodes are simulator states."""

    def __init__(self, chain: Chain, allow_drop: bool):
        self.chain = chain
        self.allow_drop = allow_drop
        self.inner = _Moves(chain, allow_drop)

    def start(self):
        return State.initial(self.chain)

    def __call__(self, state, mem):
        for op in self.inner(state):
            r = transition(self.chain, state, mem, op, self.allow_drop)
            if isinstance(r, str):
                continue
            yield op, r, r.state


def _node_moves(chain: Chain, allow_drop: bool, schedule_class: str):
    if schedule_class == persistence.ALL:
        return _AllMoves(chain, allow_drop)
    return _ClassMoves(chain, schedule_class)


def _state_of(node) -> State:
    return node if isinstance(node, State) else node[0]


def search(chain: Chain, budget: int, allow_drop: bool = False, time_limit: float | None = None,
           schedule_class: str = "all", max_states: int | None = None):
    """A* over simulator states (restricted to ``schedule_class``).  Returns
    ``(schedule, makespan, peak, bound, proven)``; schedule is None when no schedule fits
    (proven) or the search stopped first: after ``time_limit`` seconds, or once it holds more
    than ``max_states`` states (memory grows by roughly 400 bytes per state)."""
    return _search(chain, budget, allow_drop, time_limit, schedule_class, max_states)[:5]


def _search(chain, budget, allow_drop, time_limit, schedule_class, max_states):
    """:func:`search`, plus what stopped it: None, ``"time_limit"`` or ``"max_states"``."""
    moves = _node_moves(chain, allow_drop, schedule_class)
    start = moves.start()
    mem0 = chain.x_size[0]
    if mem0 > budget:
        return None, None, None, None, True, None
    g = {start: 0.0}
    parent = {start: None}
    peak_to = {start: mem0}  # peak along the best path found so far (reporting only)
    counter = itertools.count()
    heap = [(_heuristic(chain, _state_of(start)), 0.0, next(counter), start, mem0)]
    closed = set()
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    pops = 0
    while heap:
        f, gs, _, s, mem = heapq.heappop(heap)
        if s in closed:
            continue
        if _state_of(s).is_final():
            return _rebuild(parent, s), gs, peak_to[s], gs, True, None
        closed.add(s)
        pops += 1
        if deadline is not None and time.perf_counter() > deadline:  # every pop: on long
            return None, None, None, f, False, "time_limit"  # chains one pop takes ms
        if pops % 2048 == 0:
            if max_states is not None and len(g) > max_states:
                return None, None, None, f, False, "max_states"
        for op, r, ns in moves(s, mem):
            if r.peak > budget:
                continue
            if ns in closed:
                continue
            ng = gs + r.time
            old = g.get(ns)
            if old is None or ng < old:
                g[ns] = ng
                parent[ns] = (s, op)
                peak_to[ns] = max(peak_to[s], r.peak)
                heapq.heappush(heap, (ng + _heuristic(chain, r.state), ng, next(counter), ns,
                                      r.memory_after))
    return None, None, None, None, True, None


def min_feasible_budget(chain: Chain, allow_drop: bool = False,
                        max_stages: int = DEFAULT_MAX_STAGES, schedule_class: str = "all") -> int:
    """The smallest budget (bytes) at which some valid schedule exists, over ALL schedules
    (or over the schedules of ``schedule_class``).

    Bottleneck shortest path: minimize, over paths from the initial state to a final one,
    the largest op peak on the path (Dijkstra with max instead of +).
    """
    _check_size(chain, max_stages)
    _check_class(schedule_class, allow_drop)
    moves = _node_moves(chain, allow_drop, schedule_class)
    start = moves.start()
    best = {start: chain.x_size[0]}
    counter = itertools.count()
    heap = [(chain.x_size[0], next(counter), start, chain.x_size[0])]
    closed = set()
    while heap:
        b, _, s, mem = heapq.heappop(heap)
        if s in closed:
            continue
        if _state_of(s).is_final():
            return b
        closed.add(s)
        for op, r, ns in moves(s, mem):
            nb = max(b, r.peak)
            if ns not in closed and nb < best.get(ns, float("inf")):
                best[ns] = nb
                heapq.heappush(heap, (nb, next(counter), ns, r.memory_after))
    raise SolverError("no schedule exists at any budget")  # unreachable: store-all always exists


def _check_class(schedule_class, allow_drop) -> classes.ScheduleClass:
    """The class searched: ``schedule_class`` (a rule name of
    :mod:`remat_theory.model.persistence`) with ``allow_drop``."""
    allow_drop = check_bool(allow_drop, "allow_drop", error=SolverOptionError, owner=_OPTION)
    if not isinstance(schedule_class, str) or not persistence.is_class(schedule_class):
        raise SolverOptionError(f"solver 'exhaustive': option schedule_class = {schedule_class!r} "
                                f"is not one of {', '.join(persistence.CLASSES)} or "
                                f"'{persistence.RUNS_PREFIX}K'")
    if schedule_class != persistence.ALL and allow_drop:
        raise SolverOptionError(f"solver 'exhaustive': schedule_class = {schedule_class!r} has no "
                                f"Drop operations; allow_drop needs schedule_class = 'all'")
    if schedule_class == persistence.ALL:
        return classes.ALL_DROP if allow_drop else classes.ALL
    return classes.schedule_class(schedule_class)


def _tractable_note(chain: Chain, budget: int, options) -> str | None:
    """Say so before a search the guard lets through (max_stages raised) beyond the chains
    measured to take seconds."""
    if chain.length <= REFERENCE_MAX_STAGES or "time_limit" in options:
        return None
    return (f"remat: note: exhaustive search explores up to 4^L states; on {chain.length} "
            f"stages it can take minutes to hours and much memory (random chains of up to "
            f"about 12 stages take seconds); --time-limit SECONDS and -o max_states=N stop it "
            f"with a lower bound")


@register(NAME, optimal_for=classes.ALL.key, exact=True,
          description=f"A* over simulator states: the exact optimum over all schedules "
                      f"(L <= {DEFAULT_MAX_STAGES} unless max_stages is raised).",
          max_stages=SWEEP_MAX_STAGES, reference_max_stages=REFERENCE_MAX_STAGES,
          may_drop=True,
          classes=tuple(c.key for c in classes.RANKED),
          variants={"exhaustive-persistent": variant({"schedule_class": "persistent"},
                                                     in_verify=True),
                    "exhaustive-weak": variant({"schedule_class": "weak"}, in_verify=True),
                    "exhaustive-monotone": variant({"schedule_class": "monotone"},
                                                   in_verify=True),
                    "exhaustive-weak-runs2": {"schedule_class": "weak-runs<=2"},
                    "exhaustive-drop": {"allow_drop": True}},
          note=_tractable_note)
def solve_exhaustive(chain: Chain, budget: int, *, allow_drop: bool = False,
                     time_limit: float | None = None,
                     max_stages: int = DEFAULT_MAX_STAGES,
                     max_states: int = DEFAULT_MAX_STATES,
                     schedule_class: str = "all") -> Solution:
    """Exact optimum over every valid schedule of the model (with ``allow_drop``, also over
    schedules using explicit deletions).  ``time_limit`` (seconds) stops the search and
    reports the best proven lower bound with status ``time_limit``; so does ``max_states``,
    the number of states the search may hold (memory).  ``schedule_class``
    (``"all"``, ``"persistent"``, ``"weak"``, ``"monotone"``) restricts the search to exactly that class of
    :mod:`remat_theory.model.persistence`; the value is then optimal for that class."""
    _check_size(chain, max_stages)
    cls = _check_class(schedule_class, allow_drop)
    max_states = check_int(max_states, "max_states", minimum=1, error=SolverOptionError,
                           owner=_OPTION)
    if time_limit is not None:
        time_limit = check_positive(time_limit, "time_limit", error=SolverOptionError,
                                    owner=_OPTION, unit="seconds")
    schedule, makespan, peak, bound, proven, stopped_by = _search(
        chain, budget, allow_drop, time_limit, schedule_class, max_states)
    info = {"allow_drop": allow_drop, "schedule_class": schedule_class}
    if schedule is not None:
        return Solution.optimal(NAME, budget, schedule, makespan, peak, optimal_for=cls,
                                info=info, allows_drop=allow_drop)
    if not proven:
        info["stopped_by"] = stopped_by
        why = ("time limit reached" if stopped_by == "time_limit" else
               f"state limit reached (max_states = {max_states:,}; raise it to go further, "
               f"with memory to match)")
        return Solution.time_limit(NAME, budget, bound=bound, optimal_for=cls, info=info,
                                   allows_drop=allow_drop,
                                   message=f"{why}: not proven optimal; lower bound {bound}")
    mfb = min_feasible_budget(chain, allow_drop, max_stages, schedule_class)
    return Solution.infeasible(NAME, budget, optimal_for=cls, min_budget=mfb, info=info,
                               allows_drop=allow_drop,
                               message=f"no schedule fits in {budget}; the smallest feasible "
                                       f"budget is {mfb}")
