"""An online eviction policy in the style of Dynamic Tensor Rematerialization: Kirisame,
Lyubomirsky, Haan, Brennan, He, Roesch, Chen, Tatlock, "Dynamic Tensor Rematerialization",
ICLR 2021.

DTR runs the program as written (here: store-all, ``Fall_0 .. Fall_{L-1} Loss B_{L-1} ..
B_0``) and decides nothing in advance.  Before an operation whose peak would exceed the
budget, it evicts held values one at a time, each time the one with the smallest

    h(t) = cost(t) / (size(t) * staleness(t))            (the paper's h_DTR heuristic)

until the operation fits; a value that is needed but was evicted is recomputed on demand,
recursively recomputing the evicted values it depends on.  Here the values are the tapes
t_i (x_i lives inside t_i; x_0 is pinned): ``cost`` is the forward time of its stage plus
that of the contiguous run of evicted tapes before it that a recomputation would have to
redo first (DTR's evicted neighbourhood e*, restricted to the parents, which is all a chain
has); ``staleness`` is the time since it was last read or written; tapes of size 0 free
nothing and are never evicted; the inputs of the running operation are pinned.  An
eviction is the explicit deletion ``Dropt{i}`` of the model's extension
(``info["allow_drop"] = True``): DTR frees tensors, which the canonical operations cannot
express.  Recomputation is ``Fall`` from the nearest held predecessor.

Assumes nothing about the chain, and knows nothing of the future: at tight budgets it
thrashes (many recomputations) or fails.  It fails when even evicting every unpinned tape
does not make the next operation fit: then the status is ``infeasible``, with no
``min_budget`` (DTR is not monotone in the budget and its threshold is not known in closed
form).  It always terminates: every recomputation chain is at most L forwards long.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.errors import SolverContractError
from remat_theory.model.schedule import LOSS_OP, Bwd, DropT, Fall, Fck, Op, Schedule
from remat_theory.model.simulator import State, transition
from remat_theory.model.solution import Solution

from solvers._deadline import Deadline, DeadlineExpired
from solvers.registry import Option, register


class _Stuck(Exception):
    pass


class _DTR:
    def __init__(self, chain: Chain, budget: int, deadline: Deadline | None = None):
        self.deadline = deadline or Deadline(None)
        self.chain = chain
        self.budget = budget
        self.state = State.initial(chain)
        self.memory = chain.x_size[0]
        self.peak = self.memory
        self.clock = 0.0
        self.ops: list[Op] = []
        self.last_use = {}  # tape index -> clock of its last read or write
        self.evictions = 0
        self.recomputations = 0

    def held(self, j: int) -> bool:
        return bool(self.state.tapes >> j & 1)

    def readable(self, j: int) -> bool:
        """x_j can be read: plain, or inside a held t_j (when a backward reads x_j)."""
        return bool(self.state.plain >> j & 1) or self.chain.saved(j) and self.held(j)

    def _apply(self, op: Op, r) -> None:
        self.ops.append(op)
        self.state, self.memory = r.state, r.memory_after
        self.peak = max(self.peak, r.peak)
        self.clock += r.time

    def _victim(self, pinned: set) -> int | None:
        """Held, unpinned, non-empty tape with the smallest h = cost / (size * staleness)."""
        chain = self.chain
        L = chain.length
        fwd, tp = chain.fwd_time, chain.tape_held
        best, best_h = None, None
        run = 0.0  # recomputation cost of the evicted run ending just before tape j
        for j in range(1, L + 1):
            if self.held(j):
                if j not in pinned and tp[j - 1] > 0:
                    cost = fwd[j - 1] + run
                    stale = max(self.clock - self.last_use.get(j, 0.0), 1e-12)
                    h = cost / (tp[j - 1] * stale)
                    if best_h is None or h < best_h:
                        best, best_h = j, h
                run = 0.0
            else:
                run += fwd[j - 1]
        return best

    def run(self, op: Op, pinned: set) -> None:
        self.deadline.check(f"running the program (operation {len(self.ops)})")
        while True:
            r = transition(self.chain, self.state, self.memory, op, allow_drop=True)
            if isinstance(r, str):  # pragma: no cover - would be a bug of this module
                raise SolverContractError(f"dtr: generated an invalid op {op.token}: {r}")
            if r.peak <= self.budget:
                self._apply(op, r)
                return
            j = self._victim(pinned)
            if j is None:
                raise _Stuck(f"{op.token} needs {r.peak} > budget {self.budget} with "
                             f"nothing left to evict (held {self.state.describe(self.chain)})")
            d = transition(self.chain, self.state, self.memory, DropT(j), allow_drop=True)
            self._apply(DropT(j), d)
            self.evictions += 1

    def materialize(self, j: int, pinned: set, recompute: bool = True) -> None:
        """Make tape t_j held, recomputing the evicted run before it from the nearest
        held predecessor (or x_0)."""
        if j >= 1 and self.held(j):
            self.last_use[j] = self.clock
            return
        k = j - 1
        while k >= 1 and not self.readable(k):
            k -= 1
        for i in range(k, j):
            if self.held(i + 1):  # its tape is held but holds no x_{i+1} (unsaved): a plain one
                self.run(Fck(i), pinned | ({i} if i >= 1 else set()))
                continue
            self.run(Fall(i), pinned | ({i} if i >= 1 else set()))
            if i >= 1:
                self.last_use[i] = self.clock
            self.last_use[i + 1] = self.clock
            if recompute:
                self.recomputations += 1

    def schedule(self) -> None:
        L = self.chain.length
        for i in range(L):
            self.materialize(i + 1, set(), recompute=False)
        self.materialize(L, set())
        self.run(LOSS_OP, {L})
        self.last_use[L] = self.clock
        for i in range(L - 1, -1, -1):
            self.materialize(i + 1, set())
            pins = {i + 1}
            if i >= 1 and self.chain.saved(i):  # B_i reads x_i, kept inside t_i
                self.materialize(i, pins)
                pins.add(i)
            self.run(Bwd(i), pins)
            if i >= 1:
                self.last_use[i] = self.clock


@register("dtr", optimal_for="none", may_drop=True, supports=("fall_time", "fall_overhead", "output_saved"),
          options={"time_limit": Option("seconds", "stops the run (status time_limit, no "
                                        "schedule)", none=True)},
          description="DTR-style online eviction (smallest cost/(size*staleness) first), recompute on demand; uses Drop.")
def solve_dtr(chain: Chain, budget: int, *, time_limit: float | None = None) -> Solution:
    """DTR's run of the program (module docstring); ``time_limit`` (seconds, checked before
    every operation: its eviction scan is O(L) per eviction) stops it with status
    ``time_limit`` and no schedule."""
    if chain.x_size[0] > budget:
        return Solution.infeasible("dtr", budget, allows_drop=True,
                                   message=f"the input x0 alone ({chain.x_size[0]}) exceeds the "
                                           f"budget", info={"allow_drop": True})
    sim = _DTR(chain, budget, Deadline(time_limit))
    try:
        sim.schedule()
    except DeadlineExpired as e:
        return Solution.time_limit("dtr", budget, allows_drop=True, info={"allow_drop": True},
                                   message=f"{e}: no schedule (not proven optimal)")
    except _Stuck as e:
        return Solution.infeasible("dtr", budget, allows_drop=True,
                                   message=f"DTR got stuck after {len(sim.ops)} ops: {e}",
                                   info={"allow_drop": True})
    return Solution.feasible("dtr", budget, Schedule(sim.ops), sim.clock, sim.peak,
                             allows_drop=True,
                    message=f"{sim.evictions} evictions, {sim.recomputations} recomputed forwards",
                    info={"allow_drop": True, "evictions": sim.evictions,
                          "recomputations": sim.recomputations})
