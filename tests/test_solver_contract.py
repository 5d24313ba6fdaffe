"""The contract every registered solver and variant keeps (the networkx ``flow_funcs`` habit).

Parametrised over the registry itself, so a solver added as a module, or a variant added to
a ``register`` call, is tested here with no list to update.  On a few small chains and
budgets (below the smallest feasible one, at it, and in the middle):

- the answer replays through the simulator (``solvers.solve`` raises
  :class:`SolverContractError` otherwise) and fits the budget;
- its schedule lies in the class it claims when it claims optimality, and no schedule is
  shorter than exhaustive search's optimum over the class it lies in;
- ``optimal`` for class C: the makespan is exhaustive search's optimum restricted to C;
- a ``bound`` for C is at most that optimum;
- ``infeasible`` for C: exhaustive search finds no schedule of C at that budget, and a
  reported ``min_budget`` is exhaustive search's smallest feasible budget of C;
- a claim is about a class the solver registered (``classes``);
- a schedule uses Drop only if its solver declares ``may_drop``;
- an unknown option is rejected by name (:class:`SolverOptionError`);
- all of this on the classic chains and on chains of every variation of the field table
  (:data:`remat_theory.model.fields.VARIATIONS`) that the solver's ``supports`` claims; a
  chain of a variation it does not claim is refused, naming the field.

The oracle is exhaustive search (A* over the simulator's own states, restricted to a class
by the rules of :mod:`remat_theory.model.persistence`), never another solver's answer.
"""
from __future__ import annotations

import functools

import pytest

import solvers
from solvers import registry
from remat_theory.analysis import families
from remat_theory.model import classes
from remat_theory.model.chain import Chain
from remat_theory.model.errors import SolverLimitError, SolverOptionError
from remat_theory.model.fields import VARIATIONS, optional_names
from remat_theory.model.solution import INFEASIBLE, OPTIMAL, TIME_LIMIT
from remat_theory.model.schedule import Schedule
from remat_theory.model.solution import Solution
from solvers.exhaustive import min_feasible_budget

from _offload_reference import best_persistent_offload

LABELS = solvers.names() + list(registry.variants())
# The classic chains (every optional field at its default) ...
BY_VARIATION = {None: {
    "random-3": families.make("random", 3, 0),
    "resnet-3": families.make("resnet", 3, 1),
    "homogeneous-4": families.make("homogeneous", 4, 0),
    # degenerate chains (issue #29): every time 0 (a zero objective: HiGHS's presolve called
    # the infeasible ILP at budget 23 "optimal", then failed), and sizes of 0 bytes
    "zero-times-2": Chain([0, 0], [0, 0, 0], [3, 5, 5], [6, 6]),
    "zero-sizes-3": Chain([1, 2, 0], [2, 0, 1, 3], [0, 4, 0, 2], [5, 0, 3]),
    # sizes with no common factor (issue #29: auto estimated millions of memory units)
    "coprime-3": Chain([2, 1, 3], [1, 3, 2, 1], [7919, 6007, 7411, 5003],
                       [8009, 7417, 5011]),
}}
# ... and, for every variation of the field table (docs/fields.md), two chains drawn by it:
# each solver keeps its contract on every variation its registration claims (supports).
for _v in VARIATIONS.values():
    BY_VARIATION[_v.name] = {
        f"random-3-{_v.suffix}": _v.apply(families.make("random", 3, 2), 1),
        f"resnet-3-{_v.suffix}": _v.apply(families.make("resnet", 3, 1), 4),
    }
CHAINS = {name: chain for chains in BY_VARIATION.values() for name, chain in chains.items()}
CASES = [pytest.param(label, v, id=f"{label}-{v or 'classic'}") for label in LABELS
         for v in BY_VARIATION if v is None or registry.models(label, v)]
RTOL = 1e-9


def _budgets(chain: Chain) -> list[int]:
    m = min_feasible_budget(chain)
    return sorted({max(0, chain.memory_lower_bound() - 1), max(0, m - 1), m,
                   (m + chain.store_all_memory()) // 2})


INSTANCES = {v: [(name, b) for name, chain in chains.items() for b in _budgets(chain)]
             for v, chains in BY_VARIATION.items()}
# The classic chain the exact solvers take longest on (4 stages: the proven ILP, seconds):
# its instances are a case of their own, under slow (docs/testing.md)
SLOW_CLASSIC = ("homogeneous-4",)
INSTANCES["classic-4"] = [(n, b) for n, b in INSTANCES[None] if n in SLOW_CLASSIC]
INSTANCES[None] = [(n, b) for n, b in INSTANCES[None] if n not in SLOW_CLASSIC]
CASES += [pytest.param(label, "classic-4", id=f"{label}-classic-4", marks=pytest.mark.slow)
          for label in LABELS]


@functools.lru_cache(maxsize=None)
def oracle(chain_name: str, budget: int, class_key: str):
    """Exhaustive search restricted to the class ``class_key``."""
    cls = classes.schedule_class(class_key)
    if cls in (classes.PERSISTENT_OFFLOAD, classes.STORE_ALL_OFFLOAD):  # a finite grammar:
        # every member, replayed (without Fn/Fck for store-all+offload)
        best, least = best_persistent_offload(CHAINS[chain_name], budget,
                                              recompute=cls is classes.PERSISTENT_OFFLOAD)
        if best is None:
            return Solution.infeasible("grammar", budget, min_budget=least, optimal_for=cls.key)
        return Solution.optimal("grammar", budget, Schedule.parse(" ".join(best[1])), best[0],
                                budget, optimal_for=cls.key)
    n = classes.offload_ops_limit(cls.key)
    if n is not None:  # at most n ops: the exact search with its op count
        sol = solvers.solve(CHAINS[chain_name], budget, "exhaustive-offload", max_ops=n)
        assert sol.status in (OPTIMAL, INFEASIBLE)
        return sol
    if cls in (classes.OFFLOAD, classes.NO_REMAT):  # the two-stream model's own search
        sol = solvers.solve(CHAINS[chain_name], budget, "exhaustive-offload",
                            recompute=cls is classes.OFFLOAD)
        assert sol.status in (OPTIMAL, INFEASIBLE)
        return sol
    opts = {"allow_drop": True} if cls.allows_drop else {"schedule_class": cls.rule}
    # a schedule without transfers costs the same with or without a copy channel
    # (proofs/offload.md, O.1): its class's optimum is the one of the chain without it
    sol = solvers.solve(CHAINS[chain_name].replace(bandwidth=None), budget, "exhaustive", **opts)
    assert sol.status in (OPTIMAL, INFEASIBLE)  # tiny chains: always proven
    return sol


# The labels whose call is exactly the oracle's of the class they claim (the same solver,
# the same options, the same chain): their answer is taken from the oracle's cache rather
# than searched twice (the claims are still checked against it, and replayed by the registry).
SELF_ORACLE = {"exhaustive-offload": classes.OFFLOAD.key,
               "exhaustive-offload-only": classes.NO_REMAT.key}


def _le(a: float, b: float) -> bool:
    return a <= b + RTOL * max(1.0, abs(a), abs(b))


@pytest.mark.parametrize("label, variation", CASES)
def test_every_answer_replays_and_its_claims_hold(label, variation):
    for chain_name, budget in INSTANCES[variation]:
        chain = CHAINS[chain_name]
        if label in SELF_ORACLE:
            sol = oracle(chain_name, budget, SELF_ORACLE[label])
        else:
            try:
                sol = solvers.solve(chain, budget, label)  # replayed: SolverContractError if false
            except SolverLimitError as e:  # a refusal up front (a size guard): no claim at all
                assert e.remedies, f"{label}: a refusal names its way out"
                continue
        where = f"{label} on {chain_name} at budget {budget}"
        claimed = sol.schedule_class
        assert classes.family(sol.optimal_for) in registry.get(label).classes + ("none",), \
            f"{where}: claims {sol.optimal_for}, not a class it registered"
        if sol.schedule is not None:
            assert sol.peak_memory <= budget, where
            lies_in = classes.classify(chain, sol.schedule)
            if lies_in is classes.ALL_DROP:
                assert registry.get(label).may_drop, f"{where}: uses Drop, not declared may_drop"
            best = oracle(chain_name, budget, lies_in.key)
            assert best.status == OPTIMAL, f"{where}: a {lies_in} schedule where exhaustive finds none"
            assert _le(best.makespan, sol.makespan), f"{where}: beats the optimum of {lies_in}"
            if sol.status == OPTIMAL:
                assert lies_in.subset_of(claimed) or claimed.contains(chain, sol.schedule), \
                    f"{where}: {lies_in} schedule claims {claimed}"
        if claimed is classes.NONE:
            assert sol.status != OPTIMAL or sol.optimal_for == "none", where
            continue
        ref = oracle(chain_name, budget, claimed.key)
        if sol.status == OPTIMAL:
            assert ref.status == OPTIMAL, f"{where}: optimal where {claimed} has no schedule"
            assert sol.makespan == pytest.approx(ref.makespan, rel=RTOL), where
        if sol.bound is not None and ref.status == OPTIMAL:
            assert _le(sol.bound, ref.makespan), f"{where}: bound above the optimum of {claimed}"
        if sol.status == INFEASIBLE:
            assert ref.status == INFEASIBLE, f"{where}: says no {claimed} schedule fits"
            if sol.min_budget is not None:
                assert sol.min_budget == ref.min_budget, where
        assert sol.status != TIME_LIMIT or "not proven optimal" in sol.message, where


@pytest.mark.parametrize("label", LABELS)
def test_an_unknown_option_is_rejected_by_name(label):
    chain = CHAINS["random-3"]
    with pytest.raises(SolverOptionError, match="no_such_option"):
        solvers.solve(chain, chain.store_all_memory(), label, no_such_option=1)


@pytest.mark.parametrize("label", LABELS)
def test_a_variation_not_claimed_is_refused_naming_its_field(label):
    """Where a solver's registration does not claim a variation, a chain drawn by it is
    refused before the solver runs (never answered with costs it does not model)."""
    for v, chains in BY_VARIATION.items():
        if v is None or registry.models(label, v):
            continue
        chain = next(iter(chains.values()))
        with pytest.raises(SolverOptionError, match="does not model the chain field"):
            solvers.solve(chain, chain.store_all_memory(), label)
    assert all(f in optional_names() for f in registry.get(label).supports)


def test_every_registered_fact_is_well_formed():
    """Stage limits are positive, variants name options their solver takes, the classes
    are known keys, and a variant label runs its solver with its options."""
    for name in solvers.names():
        info = solvers.get(name)
        for limit in (info.max_stages, info.reference_max_stages):
            assert limit is None or limit >= 1
        assert info.optimal_for in info.classes
        assert all(classes.is_class_name(k) for k in info.classes)
    for label, v in registry.variants().items():
        info, opts, _ = registry.resolve(label)
        assert info.name == v.solver and opts == v.option_dict
        assert all(k in info.options for k in opts)
