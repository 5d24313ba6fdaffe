"""The lower bounds of exhaustive search's A* (and of ``prove``'s bounded search).

:func:`heuristic_simple`: every backward still to run costs its time, and each whose tape
is not held one more recording forward.  :class:`Heuristic`: that plus what the memory at
a later backward forces (proofs/exhaustive.md, Lemma 2), a 0/1 knapsack per backward
(:class:`Knapsack`).  Both are admissible and consistent (tests/test_exhaustive.py checks
them against plain Dijkstra); :mod:`solvers.exhaustive` and :mod:`solvers.prove` import them
from here.
"""
from __future__ import annotations

from remat_theory.model.chain import Chain
from remat_theory.model.simulator import State

__all__ = ["Heuristic", "Knapsack", "MEMO_LIMIT", "heuristic", "heuristic_simple"]

INF = float("inf")
MEMO_LIMIT = 1_000_000  # entries of the bound's cache (about 200 MB at most)


def heuristic_simple(chain: Chain, state: State) -> float:
    """Every backward not yet run costs its time, and every remaining B_j whose tape
    t_{j+1} is not held needs at least one more ``Fall_j`` (``fall_time[j]``)."""
    plain, tapes, nxt = state
    if nxt < 0:
        return 0.0
    h = chain.bwd_time[chain.length] if nxt == chain.length else 0.0
    for j in range(min(nxt, chain.length - 1), -1, -1):
        h += chain.bwd_time[j]
        if not tapes >> (j + 1) & 1:
            h += chain.fall_time[j]  # B_j needs the tape of a Fall_j
    return h


class Heuristic:
    """The A* bound: :func:`heuristic_simple` plus what the memory at a later backward
    forces (proofs/exhaustive.md, Lemma 2).  Admissible and consistent, so A* with a
    closed set returns the optimum; tested against plain Dijkstra in
    tests/test_exhaustive.py.

    For a backward ``B_n`` still to run (``n = L``: the loss, which needs x_L): ``B_n``
    needs x_n (x_n or t_n held).  If x_n is not available now, every stage i in
    ``P = [k, n-1]`` (k the highest stage whose input is available) needs a forward before
    ``B_n``; that forward replaces the later ``Fall_i`` the simple bound counts only if it
    is a ``Fall_i`` whose tape stays held through ``B_n``.  A tape t_{i+1} (i < n) held now
    and freed before ``B_n`` must be made again by a ``Fall_i``.  The tapes held through
    ``B_n`` (the set H) fit in the budget with what ``B_n`` itself holds (x_0, its tape,
    its input, both gradients, its overhead).  So the time still to spend is at least the
    simple bound plus ``min over H fitting of [sum_{i in P-H} min(fwd_time[i],
    fall_time[i]) + sum_{i held, not in H} fall_time[i]]``: a 0/1 knapsack, solved exactly
    for ``n <= exact_up_to`` or when its table is small (``n * (capacity + 1)`` at most
    ``exact_steps``: the DP keeps one entry per weight) and bounded by its fractional
    relaxation otherwise (per term, so the bound stays consistent); the bound takes the
    largest such term over the backwards still to run (each is a lower bound on the same
    extra time, so their maximum is).

    With ``pairs`` (Lemma 2'), a term also looks past ``B_n``: toward a later ``B_m`` the
    recomputation starts from the highest input ``x_j`` available while ``B_n`` runs, which
    holds memory there; so each ``m`` adds the candidate ``min_j [window-1 time with x_j
    held at B_n] + [the forwards of stages j..m-1 between B_n and B_m that are not the
    last of their stage]`` (the second part a table of the chain)."""

    exact_up_to = 12  # terms n up to this solve the 0/1 knapsack (at most 2^n subsets) ...
    exact_steps = 12 * 4096  # ... and so do terms of n * (capacity + 1) steps at most; others
    # solve its LP (a 2000-stage chain at a budget of 1000 bytes: the LP above 49 stages)
    pairs = True  # the two-window terms of Lemma 2' ...
    pairs_up_to = 30  # ... on chains of at most this many stages (O(L^2) per term)

    def __init__(self, chain: Chain, budget: float):
        L = chain.length
        x, held = chain.x_size, chain.tape_held
        self.chain = chain
        self.L = L
        self.fall = chain.fall_time
        self.fwd_min = [min(f, g) for f, g in zip(chain.fwd_time, chain.fall_time)]
        self.saved = chain.saved_mask  # bit i: x_i can be read inside t_i
        self.unsaved = ((2 << L) - 2) & ~chain.saved_mask  # bit i: B_i does not read x_i
        # B_n reads its input x_n unless x_n is unsaved (the loss, n = L, always reads it)
        reads = [n >= 1 and (n == L or chain.saved(n)) for n in range(L + 1)]
        # capacity for the tapes held through B_n, and each slot's weight there
        # (the loss, n = L, holds no tape and no gradient of its own before it runs)
        self.cap = [budget - (x[0] + x[n] + chain.bwd_overhead[n] + (x[n] if reads[n] else 0)
                              + (x[n + 1] + held[n] if n < L else 0)) for n in range(L + 1)]
        self.weight = [[held[i] - (x[n] if i == n - 1 and chain.saved(n) else 0)
                        for i in range(n)] for n in range(L + 1)]
        self.pair_terms = self.pairs and L <= self.pairs_up_to
        self.second = self._second_windows() if self.pair_terms else None
        self.memo: dict = {}
        #: called before each knapsack term is solved (None: never); the search sets it to
        #: a deadline check that raises, as one evaluation on thousands of stages takes
        #: seconds (a term per backward)
        self.check = None

    def __call__(self, state: State) -> float:
        h = heuristic_simple(self.chain, state)
        plain, tapes, n = state
        if n < 0:
            return h
        mask = (2 << n) - 1
        return h + self._largest(n, self._avail(plain, tapes, n) & mask, tapes & mask)

    def _avail(self, plain: int, tapes: int, n: int) -> int:
        """The inputs available (plain, or inside a tape that holds them), and x_n itself
        when ``B_n`` will not read it and its tape t_{n+1} is held: then nothing before
        ``B_n`` needs x_n (bits of stages ``0..n`` are what the terms read)."""
        avail = plain | tapes & self.saved
        if self.unsaved >> n & tapes >> (n + 1) & 1:
            avail |= 1 << n
        return avail

    def _largest(self, n: int, avail: int, tapes: int) -> float:
        """The largest term over the backwards ``B_1 .. B_n`` (``B_0`` has no stage below
        it); ``avail`` and ``tapes`` hold the bits of stages ``0..n`` only, so that the
        memo is shared by every state that agrees on them.  Iterative (chains of thousands
        of stages): down to the first level already known, then back up."""
        memo = self.memo
        if len(memo) >= MEMO_LIMIT:
            memo.clear()  # a cache only: bounded so that it never rivals the search
        pending = []
        e = 0.0
        while n > 0:
            known = memo.get((n, avail, tapes))
            if known is not None:
                e = known
                break
            pending.append((n, avail, tapes))
            n -= 1
            low = (2 << n) - 1
            top = self.unsaved >> n & tapes >> (n + 1) & 1  # as in _avail, one level down
            avail, tapes = avail & low | top << n, tapes & low
        check = self.check
        for key in reversed(pending):
            if check is not None:
                check()
            m, a, t = key
            k = a.bit_length() - 1  # the highest stage <= m whose input is available
            fkey = (m, k, t, None)
            forced = memo.get(fkey)
            if forced is None:
                forced = memo[fkey] = self._forced(k, t, m)
            e = memo[key] = max(forced, e)
        return e

    def _forced(self, k: int, tapes: int, n: int) -> float:
        """The knapsack term for the backward ``B_n`` (``n = L``: the loss), ``k`` the
        highest stage ``<= n`` whose input is available (x_0 always is); with
        ``pairs``, also the two-window terms of Lemma 2' (proofs/exhaustive.md)."""
        items = []  # (value, weight) of the slots below n that H could save
        weight = self.weight[n]
        for i in range(n):
            if tapes >> (i + 1) & 1:
                items.append((self.fall[i], weight[i]))
            elif i >= k:
                items.append((self.fwd_min[i], weight[i]))
        cap = self.cap[n]
        saving = Knapsack(items, cap, self._exact(n))
        term = saving.forced(cap)
        if not self.pair_terms:
            return term
        x, held, fall = self.chain.x_size, self.chain.tape_held, self.fall
        # V[j]: the least window-1 time when x_j is available while B_n runs
        low = [term] + [min(saving.forced(cap - x[j]),
                            saving.forced(cap - held[j - 1]) - fall[j - 1]
                            if self.saved >> j & 1 else INF) for j in range(1, n)]
        for m in range(1, n):
            if self.saved >> m & 1:  # B_m reads x_m
                second = self.second[m]
                term = max(term, min(low[j] + second[j] for j in range(m + 1)))
        return term

    def _exact(self, n: int) -> bool:
        """Whether the term of ``B_n`` solves the 0/1 knapsack (else its LP relaxation)."""
        return n <= self.exact_up_to or n * (self.cap[n] + 1) <= self.exact_steps

    def _second_windows(self) -> list:
        """``second[m][j]``: the least time of the forwards between a backward ``B_n``
        (``n > m``) and ``B_m`` that are not the last of their stage, when ``x_j`` is the
        highest input ``<= m`` available while ``B_n`` runs (Lemma 2'): the term of ``B_m``
        with the items ``j .. m-1`` of ``P`` only, solved as that term is."""
        second = [[0.0]]
        for m in range(1, self.L):
            items = [(self.fwd_min[i], self.weight[m][i]) for i in range(m)]
            second.append([Knapsack(items[j:], self.cap[m], self._exact(m)).forced(self.cap[m])
                           for j in range(m + 1)])
        return second


class Knapsack:
    """The least total value of the items left out of a subset that fits a capacity (the
    forced time of a term of :class:`Heuristic`), for any capacity up to ``cap``: the 0/1
    knapsack's table (one entry per weight reached) or, when not ``exact``, its fractional
    relaxation (greedy by value per weight; never below the 0/1 optimum's saving)."""

    def __init__(self, items: list, cap: float, exact: bool):
        self.total = sum(v for v, _ in items)
        self.weight = sum(w for _, w in items)
        self.exact = exact
        if exact:
            best = {0: 0.0}  # weight of a subset that fits -> the most value it keeps
            if cap >= 0:
                for v, w in items:
                    for wt, val in list(best.items()):
                        nw = wt + w
                        if nw <= cap and best.get(nw, -1.0) < val + v:
                            best[nw] = val + v
            self.steps = []  # (weight, best value within it), increasing in both
            top = -1.0
            for wt in sorted(best):
                if best[wt] > top:
                    top = best[wt]
                    self.steps.append((wt, top))
        else:
            self.items = sorted(items, key=lambda vw: -vw[0] / vw[1] if vw[1] else -INF)

    def forced(self, cap: float) -> float:
        """The least value left out by a subset of weight at most ``cap``."""
        if cap >= self.weight:
            return 0.0
        if cap < 0:
            return self.total
        if self.exact:
            kept = 0.0
            for wt, val in self.steps:
                if wt > cap:
                    break
                kept = val
            return max(0.0, self.total - kept)
        kept = 0.0
        for v, w in self.items:
            if w <= cap:
                kept += v
                cap -= w
            else:
                kept += v * cap / w
                break
        return max(0.0, self.total - kept)


def heuristic(chain: Chain, state: State, budget: float = float("inf")) -> float:
    """:class:`Heuristic` of ``chain`` at ``state`` (built afresh: for single calls)."""
    return Heuristic(chain, budget)(state)
