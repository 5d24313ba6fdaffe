"""Bound propagation and probing for certificates (solvers/bounds/propagate.py): every fixing
it writes holds at every point of the relaxation below the cutoff (HiGHS's MIP on the same
rows with the column flipped, an oracle that shares no code with the propagation), and the
independent checker accepts its steps, probing subtrees included, and rejects them altered."""
from __future__ import annotations

import copy
import json

import _bench
import highspy
import numpy as np
import pytest

import solvers
from remat_theory.analysis.families import make
from solvers.bounds import certified, lp_tree, propagate
from solvers.exhaustive import search
from solvers.ilp.relaxation import granularity

checker = _bench.checker()


def _mip_min(rows: lp_tree.LpRows, lb, ub) -> float:
    """The relaxation's 0/1 optimum in the box ``[lb, ub]`` (inf when empty), by HiGHS."""
    h = lp_tree.highs_lp(rows)
    n = len(rows.names)
    h.changeColsBounds(n, np.arange(n, dtype=np.int32), np.asarray(lb, float),
                       np.asarray(ub, float))
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32),
                            np.array([highspy.HighsVarType.kInteger] * n))
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.0)
    h.run()
    if h.getModelStatus() == highspy.HighsModelStatus.kInfeasible:
        return float("inf")
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return h.getInfo().mip_dual_bound + rows.constant


def _instance(family: str, length: int, budget_kind: str):
    chain = make(family, length, 0)
    lo = solvers.solve(chain, 0, "dp-weak").min_budget
    budget = lo if budget_kind == "smallest" else lo + (chain.store_all_memory() - lo) // 10
    sol = solvers.solve(chain, budget, "dp-weak")
    return chain, budget, sol


@pytest.mark.parametrize("family,length,budget_kind", [
    ("homogeneous", 6, "smallest"), ("transformer", 5, "smallest"),
    ("transformer", 5, "tight"), ("random", 6, "tight")])
def test_every_fixing_holds_below_the_cutoff(family, length, budget_kind):
    """Each column the propagation fixes, flipped, leaves no 0/1 point of the rows cheaper
    than the cutoff (HiGHS's exact MIP says so), in the box the steps before it left; and
    the box it leaves still holds the relaxation's optimum when that is below the cutoff."""
    chain, budget, sol = _instance(family, length, budget_kind)
    rows = lp_tree.lp_rows(chain, budget)
    n = len(rows.names)
    target = sol.makespan - granularity(chain)
    pre = propagate.presolve(rows, target, 1e-9, np.zeros(n), np.ones(n))
    assert pre.steps, "nothing to check: the instance should make the propagation work"
    lb, ub = np.zeros(n), np.ones(n)
    col = {name: k for k, name in enumerate(rows.names)}
    for step in pre.steps:
        (name, v), = step["fix"].items()
        j = col[name]
        lb[j] = ub[j] = 1 - v
        assert _mip_min(rows, lb, ub) > target, (name, v)
        lb[j] = ub[j] = v
    assert np.array_equal(lb, pre.lb) and np.array_equal(ub, pre.ub)
    if pre.leaf is None:  # what is left: the same optimum as the whole box, if below target
        whole = _mip_min(rows, np.zeros(n), np.ones(n))
        left = _mip_min(rows, pre.lb, pre.ub)
        assert whole > target or left == pytest.approx(whole)


def _tree_steps(node, found=None):
    """Every step of the tree closed by a subtree."""
    found = [] if found is None else found
    for step in node.get("steps", []):
        if "tree" in step:
            found.append(step)
    for c in node.get("children", []) + ([node["child"]] if "child" in node else []):
        _tree_steps(c, found)
    return found


def test_probing_steps_are_checked_and_tampering_is_rejected():
    """A chain whose relaxation propagation and probing alone close at the smallest budget
    (a 5-stage transformer-like chain, whose LP root alone does not close; no cuts asked
    for): the certificate is those steps and a leaf; the checker accepts it, its makespan is exhaustive
    search's optimum, and a probing subtree
    altered (its leaf emptied, two columns fixed at once, multipliers beside the subtree,
    the fixed value turned round) is rejected."""
    chain, budget, sol = _instance("transformer", 5, "smallest")
    cert, info = certified.certificate(chain, budget, sol.schedule, time_limit=60, cuts=0,
                                       suggest=0)
    assert cert is not None, info
    assert info["presolve"]["root"]["probed"] > 0 and info["nodes"] == 1
    assert "cuts" not in cert
    cert = json.loads(json.dumps(cert))
    assert checker.check(cert)["makespan"] == pytest.approx(search(chain, budget)[1])
    probes = _tree_steps(cert["tree"])
    assert probes

    def rejected(change):
        bad = copy.deepcopy(cert)
        change(_tree_steps(bad["tree"])[0])
        with pytest.raises(checker.Rejected):
            checker.check(bad)

    def empty_leaf(step):
        node = step["tree"]
        while "child" in node:
            node = node["child"]
        node["y"] = {}

    def two_columns(step):
        other = next(name for name in cert["tree"]["steps"][0]["fix"])
        step["fix"] = dict(step["fix"], **{other + "_": 0})

    def both(step):
        step["y"] = {}

    def turned(step):
        (name, v), = step["fix"].items()
        step["fix"] = {name: 1 - v}

    for change in (empty_leaf, two_columns, both, turned):
        rejected(change)


def test_presolve_steps_merge_with_the_tree_s_first_fixings():
    """``with_steps`` writes the root's fixing steps and the tree's own first fixings as one
    flat node (never two fixing nodes in a row)."""
    steps = [{"fix": {"a": 0}, "y": {}}]
    child = {"fix": {"b": 1}, "y": {"r": -1.0}, "child": {"y": {}}}
    assert lp_tree.with_steps(steps, child) == {
        "steps": [{"fix": {"a": 0}, "y": {}}, {"fix": {"b": 1}, "y": {"r": -1.0}}],
        "child": {"y": {}}}
    child = {"steps": [{"fix": {"b": 1}, "y": {}}], "child": {"y": {}}}
    assert lp_tree.with_steps(steps, child)["steps"][1] == {"fix": {"b": 1}, "y": {}}
    assert lp_tree.with_steps(steps, {"y": {}}) == {"steps": steps, "child": {"y": {}}}
    assert lp_tree.with_steps([], {"y": {}}) == {"y": {}}


def test_fixing_after_the_cuts_closes_a_root_they_leave_open():
    """The default certificate on 6 random stages at 25% of the way to store-all: the cuts
    leave the root open, propagation, probing and reduced-cost fixing in the box they leave
    close it (one node; eight without them), the checker accepts it, and the makespan is
    exhaustive search's optimum."""
    bench = _bench.load("bench_prove_depth")
    chain = make("random", 6, 0)
    budget = bench.budgets(chain)[1]
    sol = solvers.solve(chain, budget, "dp-weak")
    cert, info = certified.certificate(chain, budget, sol.schedule, time_limit=60)
    assert cert is not None and info["nodes"] == 1, info
    assert info["presolve"]["after cuts 1"]["fixed"] > 0
    assert checker.check(json.loads(json.dumps(cert)))["makespan"] == \
        pytest.approx(search(chain, budget)[1])
    plain, plain_info = certified.certificate(chain, budget, sol.schedule, time_limit=60,
                                              probe=False)
    assert plain is not None and plain_info["nodes"] > 1 and "presolve" not in plain_info
