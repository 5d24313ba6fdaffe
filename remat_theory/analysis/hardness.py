"""The NP-hardness reduction: SUBSET-SUM (and PARTITION) to optimal re-materialization;
and the family of chains on which the persistent DP is far from the optimum.

``proofs/np_hardness.md`` states and proves the theorem; this module builds the instances
so that tests can check the proof against exact search.

Given positive integers a_1..a_n and a capacity C, :func:`subset_sum_instance` builds a
chain of ``n + 1`` stages:

* item stage i (i = 0..n-1): forward time a_{i+1}, tape size a_{i+1}, activation x_{i+1}
  of size 0, backward time 0;
* a final "gate" stage n: forward time 0, tape size G = sum(a), activation x_{n+1} of
  size 0, backward time 0; the loss takes time 0; x_0 has size 0; no overheads;

with the budget M = G + C.  Before B_n (the backward of the gate stage) can run, its tape
(G bytes) is held, so the item tapes held at that moment sum to at most C; every item
tape not held then must be recomputed afterwards, costing its forward time a_i once more.
The optimal makespan is therefore exactly

    OPT = 2 * sum(a) - max{ sum(K) : K subset of the items, sum(K) <= C }

(:func:`subset_sum_optimum`), and ``OPT <= 2 * sum(a) - C`` iff some subset sums to C.
PARTITION is the case C = sum(a) / 2 (:func:`partition_instance`).

Only sizes and times of the chain grow with the numbers (they are written in binary), so
the reduction is polynomial; the problem is NP-hard in the weak sense, consistent with the
pseudo-polynomial persistent DP.
"""
from __future__ import annotations

import itertools
import numbers
from dataclasses import dataclass
from typing import Sequence

from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError
from remat_theory.model.schedule import LOSS_OP, Bwd, Fall, Fck, Fn, Schedule


@dataclass(frozen=True)
class HardInstance:
    """A chain, a budget (bytes) and a makespan threshold built from a number problem.

    ``threshold``: the instance of the number problem is a yes-instance iff some valid
    schedule under ``budget`` has makespan <= ``threshold``.
    """

    values: tuple
    capacity: int
    chain: Chain
    budget: int
    threshold: float


def _check_values(values: Sequence) -> tuple:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise RematError(f"values must be a list of positive integers, got {type(values).__name__}")
    vals = []
    for k, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise RematError(f"values[{k}] = {v!r} is not a positive integer")
        vals.append(int(v))
    if not vals:
        raise RematError("values is empty: the reduction needs at least one number")
    return tuple(vals)


def _scale(values: Sequence[int], positive: bool) -> int:
    """Q, the factor applied to item times and sizes: 1, or n + 2 in the positive variant
    (large enough that the n + 1 bytes of slack for unit-size values cannot hold one more
    unit of item tape: proofs/np_hardness.md, Lemma 5.3)."""
    return len(values) + 2 if positive else 1


def subset_sum_instance(values: Sequence[int], capacity: int, *,
                        positive: bool = False) -> HardInstance:
    """The chain, budget and threshold of the SUBSET-SUM instance (values, capacity).

    Yes-instance (some sub-multiset of ``values`` sums to ``capacity``) iff the optimal
    makespan under the budget is <= the threshold, ``2 * sum(values) - capacity``.

    ``positive=True`` builds the variant with no zero size or time (only the overheads are
    zero): every activation has size 1, every backward and the loss take time 1, the gate
    forward takes 1, and item times and tapes are ``Q * a_i`` with ``Q = n + 2``; budget
    ``Q * (sum + capacity) + n + 4``, threshold ``Q * (2 * sum - capacity) + n + 3``.
    """
    vals = _check_values(values)
    if isinstance(capacity, bool) or not isinstance(capacity, numbers.Integral) or capacity < 0:
        raise RematError(f"capacity = {capacity!r} is not a non-negative integer")
    capacity = int(capacity)
    n, total = len(vals), sum(vals)
    q = _scale(vals, positive)
    gate = q * total
    unit_size, unit_time = (1, 1.0) if positive else (0, 0.0)
    chain = Chain(
        fwd_time=[float(q * a) for a in vals] + [unit_time],
        bwd_time=[unit_time] * (n + 2),
        x_size=[unit_size] * (n + 2),
        tape_size=[q * a for a in vals] + [gate],
        name=f"subset-sum-{'-'.join(map(str, vals))}-c{capacity}" + ("-positive" if positive else ""),
    )
    extra_memory, extra_time = (n + 4, n + 3) if positive else (0, 0)
    return HardInstance(vals, capacity, chain, gate + q * capacity + extra_memory,
                        float(q * (2 * total - capacity) + extra_time))


def partition_instance(values: Sequence[int], *, positive: bool = False) -> HardInstance:
    """The instance of PARTITION (split ``values`` into two halves of equal sum).

    Capacity floor(sum/2) and threshold 3*sum/2 (scaled as in :func:`subset_sum_instance`
    when ``positive``): when the sum is odd the threshold cannot be met (the item tapes
    kept sum to at most floor(sum/2) < sum/2).
    """
    vals = _check_values(values)
    total = sum(vals)
    inst = subset_sum_instance(vals, total // 2, positive=positive)
    q = _scale(vals, positive)
    extra_time = len(vals) + 3 if positive else 0
    name = f"partition-{'-'.join(map(str, vals))}" + ("-positive" if positive else "")
    return HardInstance(vals, total // 2, inst.chain.with_name(name), inst.budget,
                        q * 1.5 * total + extra_time)


def best_subset_sum(values: Sequence[int], capacity: int) -> int:
    """max{ sum(K) : K sub-multiset of values, sum(K) <= capacity } (pseudo-polynomial DP)."""
    vals = _check_values(values)
    reach = 1  # bit s set: some subset sums to s
    mask = (1 << (capacity + 1)) - 1
    for a in vals:
        reach = (reach | reach << a) & mask
    return reach.bit_length() - 1


def is_partition_yes(values: Sequence[int]) -> bool:
    """Whether ``values`` split into two parts of equal sum (by brute force over subsets)."""
    vals = _check_values(values)
    total = sum(vals)
    if total % 2:
        return False
    return any(sum(c) * 2 == total for r in range(len(vals) + 1)
               for c in itertools.combinations(vals, r))


def subset_sum_optimum(values: Sequence[int], capacity: int, *, positive: bool = False) -> float:
    """The optimal makespan of :func:`subset_sum_instance` as the proof derives it:
    ``Q * (2 * sum(values) - best_subset_sum(values, capacity))``, plus ``n + 3`` unit
    times in the positive variant."""
    vals = _check_values(values)
    q = _scale(vals, positive)
    extra = len(vals) + 3 if positive else 0
    return float(q * (2 * sum(vals) - best_subset_sum(vals, capacity)) + extra)


def witness_schedule(values: Sequence[int], kept: Sequence[int]) -> Schedule:
    """The schedule of the proof's "if" direction: the item stages whose indices are in
    ``kept`` run ``Fall`` in the forward pass (their tape stays until their backward); the
    others run ``Fck`` and are recomputed with ``Fall`` just before their backward."""
    vals = _check_values(values)
    n = len(vals)
    keep = set(kept)
    bad = [k for k in keep if not (isinstance(k, numbers.Integral) and 0 <= k < n)]
    if bad:
        raise RematError(f"kept index {bad[0]!r} is out of range 0..{n - 1}")
    ops = [Fall(i) if i in keep else Fck(i) for i in range(n)]
    ops += [Fall(n), LOSS_OP, Bwd(n)]
    for i in range(n - 1, -1, -1):
        if i not in keep:
            ops.append(Fall(i))
        ops.append(Bwd(i))
    return Schedule(ops)


def best_kept_set(values: Sequence[int], capacity: int) -> tuple:
    """Indices of a subset of largest sum <= capacity (brute force; for small n only)."""
    vals = _check_values(values)
    best, best_sum = (), -1
    for r in range(len(vals) + 1):
        for idx in itertools.combinations(range(len(vals)), r):
            s = sum(vals[i] for i in idx)
            if best_sum < s <= capacity:
                best, best_sum = idx, s
    return best


def all_instances(max_items: int, max_value: int):
    """Every PARTITION instance as a sequence: all tuples of 1..max_items values, each in
    1..max_value (order matters for the chain, so all orders are listed)."""
    for n in range(1, max_items + 1):
        yield from itertools.product(range(1, max_value + 1), repeat=n)


def persistence_gap_chain(pairs: int) -> tuple[Chain, int]:
    """The family of proofs/persistence_gap.md: a chain of ``4 * pairs`` stages and its
    budget (22 bytes), on which the persistent DP needs ``2 * pairs + 1`` runs of the only
    costly stage F_0 and the optimum ``pairs + 1``: DP / OPT = (2k + 1) / (k + 1) -> 2.

    Stage F_0 takes time 1, every other op time 0.  Activations repeat ``1, 8, 3, 5`` after
    ``x_0 = 0``; tapes repeat ``5, 8, 3, 8`` (the first block starts with 1).  Each block of
    four stages has a *full* backward (B at the index of the 8: its unavoidable peak is the
    whole budget) preceded by a backward with exactly 3 bytes to spare.
    """
    if isinstance(pairs, bool) or not isinstance(pairs, numbers.Integral) or pairs < 1:
        raise RematError(f"pairs = {pairs!r} must be an integer >= 1")
    k = int(pairs)
    L = 4 * k
    x = [0] + [1, 8, 3, 5] * k
    tape = [1, 8, 3, 8] + [5, 8, 3, 8] * (k - 1)
    chain = Chain([1.0] + [0.0] * (L - 1), [0.0] * (L + 1), x, tape,
                  name=f"persistence-gap-{k}")
    return chain, 22


def persistence_gap_witness(pairs: int) -> Schedule:
    """A schedule of :func:`persistence_gap_chain` that runs F_0 only ``pairs + 1`` times.

    Block j (stages b..b+3, b = 4(j-1)) is reversed after one advance from x_0 to x_{b+1};
    the top block keeps x_{b+1} across the backward that has 3 bytes to spare and turns it
    into x_{b+2} with ``Fn`` just before the full backward B_{b+2} (a move no persistent
    schedule may make: it frees a checkpoint that has served).  The other blocks also
    reverse the bottom stage of the block above them.
    """
    if isinstance(pairs, bool) or not isinstance(pairs, numbers.Integral) or pairs < 1:
        raise RematError(f"pairs = {pairs!r} must be an integer >= 1")
    k = int(pairs)

    def advance(b):  # from x_0 to a plain x_{b+1}, running F_0 once
        return [Fck(0)] + [Fn(i) for i in range(1, b + 1)]

    b = 4 * (k - 1)
    ops = advance(b) + [Fck(b + 1), Fn(b + 2), Fall(b + 3), LOSS_OP, Bwd(b + 3),
                        Fn(b + 1), Fall(b + 2), Bwd(b + 2)]
    for j in range(k - 1, 0, -1):
        b = 4 * (j - 1)
        ops += advance(b) + [Fck(b + 1), Fn(b + 2), Fck(b + 3), Fn(b + 4), Fall(b + 5),
                             Bwd(b + 5), Fck(b + 3), Fall(b + 4), Bwd(b + 4), Fall(b + 3),
                             Bwd(b + 3), Fn(b + 1), Fall(b + 2), Bwd(b + 2)]
    ops += [Fall(0), Fall(1), Bwd(1), Bwd(0)]
    return Schedule(ops)


def unbounded_gap_chain(rounds: int) -> tuple[Chain, int]:
    """The family H_r of proofs/persistence_gap.md (Theorem 6.5): ``rounds + 3`` stages,
    budget 22, on which the persistent DP runs the only costly stage F_0 ``rounds + 2``
    times and the optimum twice: DP / OPT = (L - 1) / 2, unbounded.

    F_0 takes time 1, every other op 0.  Activations ``0, 1, 8, 3 (rounds times), 5``; tapes
    ``1, 8, 3, 11 (rounds - 1 times), 10``.  B_2 is full (its necessary peak is the whole
    budget); each of B_3 .. B_{rounds+2} leaves 1 or 2 bytes to spare, room for x_1 only.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 1:
        raise RematError(f"rounds = {rounds!r} must be an integer >= 1")
    r = int(rounds)
    x = [0, 1, 8] + [3] * r + [5]
    tape = [1, 8, 3] + [11] * (r - 1) + [10]
    L = r + 3
    return Chain([1.0] + [0.0] * (L - 1), [0.0] * (L + 1), x, tape,
                 name=f"unbounded-gap-{r}"), 22


def unbounded_gap_witness(rounds: int) -> Schedule:
    """A schedule of :func:`unbounded_gap_chain` running F_0 twice: x_1 (1 byte) is kept
    from the first pass across every backward B_{r+2} .. B_3, each of which has room for
    it; before B_{i-1} the values it needs are recomputed from x_1 (free stages); before
    the full B_2, ``Fn1`` turns x_1 into x_2 and frees it."""
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 1:
        raise RematError(f"rounds = {rounds!r} must be an integer >= 1")
    r = int(rounds)
    top = r + 2
    ops = [Fck(0), Fck(1)] + [Fn(j) for j in range(2, top)] + [Fall(top), LOSS_OP, Bwd(top)]
    for i in range(top - 1, 2, -1):  # B_i for i = top-1 .. 3
        ops += [Fck(1)] + [Fn(j) for j in range(2, i)] + [Fall(i), Bwd(i)]
    ops += [Fn(1), Fall(2), Bwd(2), Fall(0), Fall(1), Bwd(1), Bwd(0)]
    return Schedule(ops)


__all__ = ["HardInstance", "persistence_gap_chain", "persistence_gap_witness",
           "unbounded_gap_chain", "unbounded_gap_witness", "subset_sum_instance", "partition_instance", "best_subset_sum",
           "is_partition_yes", "subset_sum_optimum", "witness_schedule", "best_kept_set",
           "all_instances"]

