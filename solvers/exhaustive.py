"""Exhaustive search: the optimum with no modelling argument at all.

A* (Dijkstra with an admissible, consistent heuristic) over the simulator's own states
(:class:`remat_theory.model.simulator.State`), using the simulator's own transition function, so
the only assumption is the operation table itself.  A state is the set of plain
activations held, the set of tapes held, and which backward runs next; memory is a
function of the state.  Edges are the valid operations whose peak fits the budget, weighted
by their time.  The first final state popped is optimal.

Heuristic (a lower bound on the time still to spend, :class:`solvers.exhaustive_bounds.Heuristic`): every backward
not yet run costs its time, every remaining B_j whose tape t_{j+1} is not held needs at
least one more ``Fall_j``, and the memory at a later backward forces recomputation: the
tapes held through it must fit in the budget, and so must the input from which the
recomputation toward the backward after it starts (proofs/exhaustive.md, Lemmas 2, 2').
It never decreases by more than an edge's cost, so A* returns the optimum.

Pruning (proofs/exhaustive.md, Lemma 3 and "The incumbent"), each exact: without Drop, a
state holding a plain x_i beside the tape t_i that contains it, or a plain value no
operation will read again, is dominated by the same state without it, so it is dropped once
that state has been reached at no more time (:class:`Lean`); and on chains of more than
``REFERENCE_MAX_STAGES`` stages, the weak DP's schedule is an incumbent: no state whose
bound reaches its makespan is kept, and when none is left below it, it is the optimum.

The state space has at most 2^L * 2^L * (L+2) states, but only the states reachable within
the budget and below the optimum's f-value are visited.  On the random chains of
``benchmarks/bench_exhaustive.py`` at tight budgets, the search keeps 3.4-5.7 times fewer
states than before the pruning and the two-window terms, expands 2.0-3.8 times fewer, and
proves the three 15-stage chains in 3.1, 21 and 89 CPU seconds (before: 5.8, 70 and 236;
docs/results.md).  Nothing bounds other chains by those figures (the state space still grows as
4^L), so ``max_stages`` (default 8) guards against an accidental long run: raise it to go
further, with ``time_limit``.

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
from remat_theory.model.errors import (AT_LEAST, EQ, InternalError, Note, RematError, Remedy,
                                       SolverContractError, SolverLimitError, SolverOptionError)
from remat_theory.model.schedule import LOSS_OP, Bwd, DropT, DropX, Fall, Fck, Fn, Schedule
from remat_theory.model.simulator import State, simulate, transition
from remat_theory.model.solution import Solution
from remat_theory.model.validation import check_bool, check_int, option_owner

from solvers import registry
from solvers.exhaustive_bounds import Heuristic
from solvers.registry import Option, register, variant

NAME = "exhaustive"
# The size guard: longer chains are refused unless max_stages is raised (4^L states).
DEFAULT_MAX_STAGES = 8
# In a sweep of many chains and budgets (remat verify, plots, the quality benchmark).
SWEEP_MAX_STAGES = 7
# As the exact reference of remat compare and remat hard: every family chain of 10 stages
# took at most a few seconds at the budgets measured (benchmarks/bench_ilp.py speed).
REFERENCE_MAX_STAGES = 10
DEFAULT_MAX_STATES = 10_000_000  # about 4 GB; a time limit alone does not bound memory
_INF = float("inf")
_OPTION = option_owner(NAME)


def _check_size(chain: Chain, max_stages: int) -> None:
    max_stages = check_int(max_stages, "max_stages", minimum=1, error=SolverOptionError,
                           owner=_OPTION)
    if chain.length > max_stages:
        raise SolverLimitError(
            f"exhaustive search on {chain.length} stages would explore up to "
            f"{_states_text(chain.length)} states; max_stages = {max_stages}",
            solver=NAME, remedies=(Remedy(options=(("max_stages", AT_LEAST, chain.length),),
                                          note="to force it"),))


def _states_text(L: int) -> str:
    """``4^L (L + 2)``, the states the search may explore, in digits up to 18 of them and
    as ``4^L * (L + 2)`` beyond (a 5,000-stage chain's count has 3,000 digits)."""
    n = 4 ** L * (L + 2) if L <= 30 else None
    return f"{n:,}" if n is not None else f"4^{L} * {L + 2}"


class _Moves:
    """Candidate operations from a state (validity is decided by ``transition``; the
    forwards whose output is already held, which it would refuse, are not proposed).

    Called with the memory held and the budget, it also leaves out the forwards whose peak
    (by the operation table: held + output + overhead) exceeds the budget, and, with
    ``lean``, the two forwards whose successor is always dominated by the state itself
    (proofs/exhaustive.md, Lemma 3): ``Fck_i`` making a plain copy of an ``x_{i+1}`` held
    inside ``t_{i+1}``, and ``Fck_n`` once ``B_n`` is next (its output is never read)."""

    def __init__(self, chain: Chain, allow_drop: bool, lean: bool = False):
        L = chain.length
        self.chain = chain
        self.L = L
        self.allow_drop = allow_drop
        self.lean = lean
        self.inside = chain.saved_mask  # bit i: t_i holds x_i
        self.fwd = [(Fn(i), Fck(i), Fall(i)) for i in range(L)]
        self.bwd = [Bwd(i) for i in range(L)]
        self.dropx = [DropX(i) if i else None for i in range(L + 1)]
        self.dropt = [DropT(i) if i else None for i in range(L + 1)]
        # the part of each forward's peak above the memory held (docs/model.md)
        self.plain_peak = [chain.x_size[i + 1] + chain.fwd_overhead[i] for i in range(L)]
        self.fall_peak = [chain.tape_size[i] + chain.fall_overhead[i] for i in range(L)]

    def __call__(self, state: State, memory: int | None = None, budget: float = _INF):
        L = self.L
        plain, tapes, nxt = state
        if nxt == L:
            if (plain | tapes) >> L & 1:
                yield LOSS_OP
        elif nxt >= 0 and tapes >> (nxt + 1) & 1:
            yield self.bwd[nxt]
        room = _INF if memory is None else budget - memory
        inside = self.inside
        top = min(nxt, L - 1)
        for i in range(top + 1):
            if (plain | tapes & self.inside) >> i & 1:  # x_i available
                fn, fck, fall = self.fwd[i]
                if not plain >> (i + 1) & 1 and self.plain_peak[i] <= room:
                    yield fn  # (else "x_{i+1} is already held", or over the budget)
                    if not (self.lean and (i == nxt or (tapes & inside) >> (i + 1) & 1)):
                        yield fck
                if not tapes >> (i + 1) & 1 and self.fall_peak[i] <= room:
                    yield fall  # (else "t_{i+1} is already held", or over the budget)
        if self.allow_drop:
            for i in range(1, L + 1):
                if plain >> i & 1:
                    yield self.dropx[i]
                if tapes >> i & 1:
                    yield self.dropt[i]


class Lean:
    """The state that dominates ``state`` without Drop (proofs/exhaustive.md, Lemma 3), or
    None if there is none: the same state without its redundant plain values, a plain
    ``x_i`` held beside a tape ``t_i`` that contains it, and a plain ``x_j`` with
    ``j > n`` once the backward ``B_n`` is next (nothing reads or frees it again)."""

    def __init__(self, chain: Chain):
        L = chain.length
        self.inside = chain.saved_mask  # bit i: t_i holds x_i
        self.above = [~((2 << n) - 1) for n in range(L)]  # bits n+1 .. L

    def __call__(self, state: State) -> State | None:
        plain, tapes, n = state
        extra = plain & tapes & self.inside
        if n >= 0 and n < len(self.above):
            extra |= plain & self.above[n]
        if not extra:
            return None
        return State(plain & ~extra, tapes, n)

    def dominated(self, state: State, time: float, g: dict) -> bool:
        """Whether the same state without some of these values (Lemma 3 holds for any of
        them) has been reached in at most ``time`` (``g``: the times reached so far).  Up to
        three such values, every nonempty subset of them is looked up; more, all of them
        and each one alone."""
        plain, tapes, n = state
        extra = plain & tapes & self.inside
        if n >= 0 and n < len(self.above):
            extra |= plain & self.above[n]
        if not extra:
            return False
        if bin(extra).count("1") <= 3:
            subsets = []
            sub = extra
            while sub:
                subsets.append(sub)
                sub = (sub - 1) & extra
        else:
            subsets = [extra] + [1 << i for i in range(extra.bit_length()) if extra >> i & 1]
        get = g.get
        for sub in subsets:
            if get(State(plain & ~sub, tapes, n), _INF) <= time:
                return True
        return False


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

    def __init__(self, chain: Chain, allow_drop: bool, budget: float = _INF,
                 lean: bool = False):
        self.chain = chain
        self.allow_drop = allow_drop
        self.budget = budget
        self.inner = _Moves(chain, allow_drop, lean)

    def start(self):
        return State.initial(self.chain)

    def __call__(self, state, mem):
        for op in self.inner(state, mem, self.budget):
            r = transition(self.chain, state, mem, op, self.allow_drop)
            if isinstance(r, str):
                continue
            yield op, r, r.state


def _node_moves(chain: Chain, allow_drop: bool, schedule_class: str, budget: float = _INF,
                lean: bool = False):
    """The moves of the search: ``budget`` leaves out operations whose peak exceeds it
    (``min_feasible_budget`` needs them all), ``lean`` the always dominated ones."""
    if schedule_class == persistence.ALL:
        return _AllMoves(chain, allow_drop, budget, lean)
    return _ClassMoves(chain, schedule_class)


def _state_of(node) -> State:
    return node if isinstance(node, State) else node[0]


def search(chain: Chain, budget: int, allow_drop: bool = False, time_limit: float | None = None,
           schedule_class: str = "all", max_states: int | None = None,
           incumbent: Schedule | None = None):
    """A* over simulator states (restricted to ``schedule_class``).  Returns
    ``(schedule, makespan, peak, bound, proven)``; schedule is None when no schedule fits
    (proven) or the search stopped first: after ``time_limit`` seconds, or once it holds more
    than ``max_states`` states (memory grows by roughly 400 bytes per state).

    ``incumbent``: a schedule of the searched class, an upper bound (ignored if the
    simulator refuses it at ``budget``).  States whose bound reaches its makespan are not
    kept; when no state is left below it, the incumbent itself is the optimum returned."""
    return run_search(chain, budget, allow_drop, time_limit, schedule_class, max_states,
                   incumbent)[:5]


def _incumbent_makespan(chain: Chain, budget: int, schedule, allow_drop: bool):
    """The makespan of ``schedule`` replayed at ``budget``, or None if it is not valid."""
    if schedule is None:
        return None
    try:
        return simulate(chain, schedule, budget, allow_drop=allow_drop).makespan
    except RematError:
        return None


def run_search(chain, budget, allow_drop, time_limit, schedule_class, max_states, incumbent=None,
               stats: dict | None = None, dominance: bool = True, cutoff: float | None = None,
               heuristic=None):
    """:func:`search`, plus what stopped it: None, ``"time_limit"`` or ``"max_states"``.
    ``stats`` (a dict) receives the states expanded and kept (benchmarks); ``dominance``
    False turns the pruning of dominated states off (the before figures, the tests).
    ``cutoff``: no state whose bound reaches it is kept (as an incumbent of that makespan
    would do; when nothing is left below it the search ends with no schedule, proven:
    none is faster); ``heuristic``: a callable replacing the A* bound (``lambda s: 0``
    makes it Dijkstra)."""
    if stats is None:
        stats = {}
    try:
        return _astar(chain, budget, allow_drop, time_limit, schedule_class, max_states,
                      incumbent, stats, dominance, cutoff, heuristic)
    finally:
        stats.setdefault("expanded", 0)


class _BoundStopped(Exception):
    """The deadline passed while the A* bound was being evaluated."""


def _stop_past(deadline: float) -> None:
    if time.perf_counter() > deadline:
        raise _BoundStopped


def _astar(chain, budget, allow_drop, time_limit, schedule_class, max_states, incumbent,
           stats, dominance, cutoff=None, heuristic=None):
    """The loop of :func:`run_search`."""
    # Dominance (proofs/exhaustive.md, Lemma 3): without Drop, over all schedules, a state
    # is no better than the same state without its redundant plain values.
    lean = (Lean(chain) if dominance and schedule_class == persistence.ALL and not allow_drop
            else None)
    moves = _node_moves(chain, allow_drop, schedule_class, budget, lean is not None)
    start = moves.start()
    mem0 = chain.x_size[0]
    if mem0 > budget:
        return None, None, None, None, True, None
    # the clock starts before the bound's tables and its first evaluation: on thousands of
    # stages each evaluation of a new state takes seconds (its knapsack per backward)
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    if heuristic is None:
        heuristic = Heuristic(chain, budget)
        if deadline is not None:
            heuristic.check = lambda: _stop_past(deadline)
    if deadline is not None and time.perf_counter() > deadline:  # before the first bound
        return None, None, None, chain.ideal_makespan(), False, "time_limit"
    upper = _incumbent_makespan(chain, budget, incumbent, allow_drop)
    ceiling = float("inf") if upper is None else upper
    if cutoff is not None:
        ceiling = min(ceiling, cutoff)
    g = {start: 0.0}
    parent = {start: None}
    counter = itertools.count()
    try:
        h0 = heuristic(_state_of(start))
    except _BoundStopped:  # the ideal makespan: a lower bound over every schedule
        return None, None, None, chain.ideal_makespan(), False, "time_limit"
    heap = [(h0, 0.0, next(counter), start, mem0)]
    closed = set()
    pops = 0
    while heap:
        f, gs, _, s, mem = heapq.heappop(heap)
        if s in closed:
            continue
        if _state_of(s).is_final():
            schedule = _rebuild(parent, s)
            return schedule, gs, simulate(chain, schedule, budget, allow_drop).peak_memory, \
                gs, True, None
        if lean is not None and lean.dominated(s, gs, g):
            continue  # dominated by a state reached at no more time
        closed.add(s)
        pops += 1
        stats["expanded"], stats["kept"] = pops, len(g)
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
                if lean is not None and lean.dominated(ns, ng, g):
                    continue
                if deadline is not None and time.perf_counter() > deadline:
                    return None, None, None, f, False, "time_limit"  # f: as at a pop
                try:
                    fn = ng + heuristic(r.state)
                except _BoundStopped:
                    return None, None, None, f, False, "time_limit"  # f: as at a pop
                if fn >= ceiling:
                    continue  # no better than the incumbent
                g[ns] = ng
                parent[ns] = (s, op)
                heapq.heappush(heap, (fn, ng, next(counter), ns, r.memory_after))
    if upper is not None:  # nothing below the incumbent: it is optimal
        schedule = (incumbent if isinstance(incumbent, Schedule) else
                    Schedule.parse(incumbent) if isinstance(incumbent, str) else
                    Schedule(incumbent))
        return (schedule, upper, simulate(chain, schedule, budget, allow_drop).peak_memory,
                upper, True, None)
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
    raise InternalError("min_feasible_budget: no schedule at any budget (store-all always is one)")


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


def weak_incumbent(chain: Chain, budget: int, schedule_class: str,
                    time_limit: float | None) -> Schedule | None:
    """The weak DP's schedule as the search's incumbent (an upper bound), on chains longer
    than ``REFERENCE_MAX_STAGES`` searched over all schedules; None elsewhere, or when the
    DP has none in a tenth of the time limit.  On the chains up to that length the search
    takes seconds at most and returns its own schedule, as it always did; above it, the
    incumbent spares the search every state whose bound reaches the DP's makespan (on the
    benchmark's random chains that makespan is the optimum: docs/results.md)."""
    if chain.length <= REFERENCE_MAX_STAGES or schedule_class != persistence.ALL:
        return None
    try:
        weak = registry.solve(chain, budget, "dp-weak",
                              time_limit=None if time_limit is None else time_limit / 10)
    except (RematError, SolverContractError):
        return None
    return weak.schedule


def _tractable_note(chain: Chain, budget: int, options) -> Note | None:
    """Say so before a search the guard lets through (max_stages raised) beyond the chains
    measured to take seconds."""
    if chain.length <= REFERENCE_MAX_STAGES or "time_limit" in options:
        return None
    return Note(f"exhaustive search explores up to 4^L states; on {chain.length} stages it can "
                f"take minutes to hours and much memory (random chains of up to about 12 "
                f"stages take seconds)",
                remedies=(Remedy(options=(("time_limit", EQ, None),),
                                 note="stops it with a lower bound"),
                          Remedy(options=(("max_states", EQ, None),),
                                 note="stops it with a lower bound")))


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
          note=_tractable_note, supports=("fall_time", "fall_overhead", "output_saved"),
          options={"allow_drop": Option("bool", "search schedules with explicit deletions "
                                        "too (class all+drop; schedule_class all only)"),
                   "time_limit": Option("seconds", "stop the search and answer time_limit "
                                        "with the best proven lower bound", none=True),
                   "max_stages": Option("int", "the longest chain searched (a guard: the "
                                        "search explores up to 4^L states)", minimum=1),
                   "max_states": Option("int", "the most states held (about 400 bytes "
                                        "each); past it, answer time_limit", minimum=1),
                   "schedule_class": Option("str", "restrict the search to a class: all, "
                                            "persistent, weak, monotone or weak-runs<=K")})
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
    cls = _check_class(schedule_class, allow_drop)  # the class with allow_drop: one check
    start = time.perf_counter()
    incumbent = weak_incumbent(chain, budget, schedule_class, time_limit)
    if time_limit is not None:
        time_limit = max(time_limit - (time.perf_counter() - start), 1e-9)
    schedule, makespan, peak, bound, proven, stopped_by = run_search(
        chain, budget, allow_drop, time_limit, schedule_class, max_states, incumbent)
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
