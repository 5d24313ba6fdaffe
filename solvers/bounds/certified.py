"""Optimality certificates a third party can check (``remat-proof/1``, and ``/2`` with
cuts; proofs/certified.md): what :func:`certificate` writes, proofs/check_certificate.py
verifies without importing any solver.

Two kinds: ``ideal`` (the schedule's makespan is the ideal one, which no schedule beats:
every Fall and every backward runs once at least) and ``lp-tree`` (a branch and bound over
the moment relaxation's LP whose every leaf carries the multipliers that close it:
:mod:`solvers.bounds.lp_tree`, over the rows and the Gomory mixed-integer cuts it derives
at the root and at shallow nodes, and the Chvátal-Gomory cuts it derives in the
directions of HiGHS's root cuts, :mod:`solvers.bounds.cg_cuts`; only the cuts the tree uses
are written: :func:`prune_cuts`).
"""
from __future__ import annotations

import math

from remat_theory.model.chain import Chain
from remat_theory.model.simulator import simulate

from solvers.bounds import lp_tree

FORMAT = "remat-proof/1"
FORMAT_CUTS = "remat-proof/2"  # /1 plus cuts with their derivations (proofs/certified.md)
#: rounds of root cuts (solvers.bounds.cg_cuts) and their share of the time limit (a cap:
#: the cuts stop when the root closes; HiGHS's root on an 80-layer chain at 25% of the way
#: takes about 100 s, and half of a quarter of the 567 s a 10-minute run left it cut short:
#: docs/ilp.md, round six)
CUT_ROUNDS = 8
CUT_SHARE = 0.5
#: rounds of Chvátal-Gomory cuts in the directions of HiGHS's root cuts, before those
SUGGEST_ROUNDS = 1
#: bound propagation and probing at the root first (solvers.bounds.propagate), at most this
#: share of the time limit: on the homogeneous families' smallest budgets it is what closes
#: the root (docs/ilp.md, round seven)
PROBE_SHARE = 0.25
#: rounds of cuts at each node not closed down to this depth
NODE_CUT_ROUNDS = 2
NODE_CUT_DEPTH = 4


def _base(chain: Chain, budget: int, schedule, makespan: float) -> dict:
    return {"format": FORMAT, "chain": chain.to_dict(), "budget": int(budget),
            "schedule": str(schedule), "makespan": float(makespan)}


def certificate(chain: Chain, budget: int, schedule, *, time_limit: float | None = None,
                max_nodes: int = 200_000, cuts: int = CUT_ROUNDS, strong: int = 8,
                node_cuts: int = NODE_CUT_ROUNDS, node_cut_depth: int = NODE_CUT_DEPTH,
                suggest: int = SUGGEST_ROUNDS, probe: bool = True):
    """``(certificate dict or None, info)``: a checkable proof that ``schedule`` (valid at
    ``budget``) is optimal over all schedules, or None when none was found in time
    (``info["stopped"]`` says why)."""
    sim = simulate(chain, schedule, budget)
    makespan = sim.makespan
    info = {"makespan": makespan}
    if makespan <= chain.ideal_makespan() + 1e-12 * max(1.0, makespan):
        cert = _base(chain, budget, schedule, makespan)
        cert["kind"] = "ideal"
        info["kind"] = "ideal"
        return cert, info
    res = lp_tree.prove_cutoff(chain, budget, makespan, time_limit=time_limit,
                               max_nodes=max_nodes, cuts=cuts, strong=strong,
                               node_cuts=node_cuts, node_cut_depth=node_cut_depth,
                               suggest=suggest,
                               cut_seconds=None if time_limit is None else
                               CUT_SHARE * time_limit,
                               probe_seconds=0.0 if not probe else None
                               if time_limit is None else PROBE_SHARE * time_limit)
    info.update(kind="lp-tree", nodes=res.nodes, seconds=round(res.seconds, 3),
                stopped=res.stopped, **res.stats)
    if not res.proven:
        return None, info
    cert = _base(chain, budget, schedule, makespan)
    tree, cuts = prune_cuts(res.tree, res.cuts)
    info["cuts_written"] = len(cuts)
    if cuts:
        cert.update(format=FORMAT_CUTS, cuts=cuts)
    cert.update(kind="lp-tree", tree=tree,
                stats={"nodes": res.nodes, "delta": lp_tree.granularity(chain),
                       "cuts": len(cuts)})
    return cert, info


def _is_cut(label: str) -> bool:
    return label.startswith("cut_") and label[4:].isdigit()


def prune_cuts(tree: dict, cuts: list) -> tuple:
    """``(tree, cuts)`` with only the cuts the tree's multipliers use, and those their
    derivations use in turn, renumbered in their order (``cut_k`` is the k-th cut the
    checker derives, so every label in the derivations and the tree is rewritten): the
    same proof, with fewer rows for the checker to derive."""
    used = set()

    def walk(node):
        if node is None:
            return
        for y in [node.get("y")] + [step.get("y") for step in node.get("steps", [])]:
            for label in y or {}:
                if _is_cut(label):
                    used.add(int(label[4:]))
        for child in node.get("children", []) + [step["tree"] for step in
                                                 node.get("steps", []) if "tree" in step]:
            walk(child)
        if "child" in node:
            walk(node["child"])

    walk(tree)
    stack = list(used)
    while stack:
        for label in cuts[stack.pop()].get("rows", {}):
            if _is_cut(label) and int(label[4:]) not in used:
                used.add(int(label[4:]))
                stack.append(int(label[4:]))
    keep = sorted(used)
    if len(keep) == len(cuts):
        return tree, cuts
    new = {f"cut_{k}": f"cut_{i}" for i, k in enumerate(keep)}

    def rename(d):
        return {new.get(label, label): v for label, v in d.items()}

    out = []
    for k in keep:
        cut = dict(cuts[k])
        cut["rows"] = rename(cut.get("rows", {}))
        out.append(cut)

    def redo(node):
        node = dict(node)
        if "y" in node and node["y"] is not None:
            node["y"] = rename(node["y"])
        if "steps" in node:
            node["steps"] = [dict(step, tree=redo(step["tree"])) if "tree" in step
                             else dict(step, y=rename(step["y"])) for step in node["steps"]]
        if "children" in node:
            node["children"] = [redo(c) for c in node["children"]]
        if "child" in node:
            node["child"] = redo(node["child"])
        return node

    return redo(tree), out


def tree_size(tree: dict) -> int:
    """The number of nodes of a certificate's tree (a ``steps`` node counts one per
    step, as the fix nodes it spells flat)."""
    if tree is None:
        return 0
    if "children" in tree:
        return 1 + sum(tree_size(c) for c in tree["children"])
    if "child" in tree:
        steps = tree.get("steps", [tree])
        return sum(tree_size(step["tree"]) if "tree" in step else 1 for step in steps) \
            + tree_size(tree["child"])
    return 1


def is_finite(x) -> bool:
    return x is not None and math.isfinite(x)
