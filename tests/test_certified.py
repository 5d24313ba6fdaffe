"""Checkable optimality certificates (solvers/bounds, proofs/check_certificate.py): the
checker's own rows against the solver's, every certificate against exhaustive search (the
oracle with no modelling argument), and tampered certificates rejected."""
import copy
import json
from pathlib import Path

import _bench
import pytest
from hypothesis import given, settings

import solvers
from remat_theory.strategies import chains
from solvers.bounds import certified, lp_tree
from solvers.exhaustive import min_feasible_budget, search

ROOT = Path(__file__).resolve().parent.parent
checker = _bench.checker()


def _budgets(chain):
    lo = min_feasible_budget(chain)
    hi = chain.store_all_memory()
    return sorted({lo, lo + (hi - lo) // 4, lo + (hi - lo) // 2, hi})


def test_the_checker_imports_no_solver():
    """Independence: the checker's source imports nothing from ``solvers``."""
    text = (ROOT / "proofs" / "check_certificate.py").read_text()
    assert "import solvers" not in text and "from solvers" not in text


@settings(max_examples=15, deadline=None)
@given(chains(1, 5, max_size=6, fall_costs=None, unsaved_outputs=None))
def test_checker_rows_are_the_solvers_rows(chain):
    """Two independent writings of proofs/ilp.md section 9 (the solver's PuLP model and the
    checker's own) give the same rows, coefficient for coefficient, at every budget."""
    for b in _budgets(chain):
        mine = lp_tree.lp_rows(chain, b)
        rows, cost, constant = checker.moment_rows(chain, b)
        assert sorted(rows) == sorted(mine.labels)
        for k, label in enumerate(mine.labels):
            coef, lo, up = rows[label]
            theirs = {mine.names[int(j)]: v for j, v in
                      zip(mine.index[mine.starts[k]:mine.starts[k + 1]],
                          mine.value[mine.starts[k]:mine.starts[k + 1]])}
            assert {n: float(v) for n, v in coef.items() if v} == theirs, label
            assert (lo is None) == (mine.lo[k] == float("-inf")), label
            assert (up is None) == (mine.up[k] == float("inf")), label
            if lo is not None:
                assert float(lo) == mine.lo[k], label
            if up is not None:
                assert float(up) == mine.up[k], label
        assert {mine.names[j]: c for j, c in enumerate(mine.cost) if c} == \
            {n: float(c) for n, c in cost.items() if c}
        assert float(constant) == mine.constant


@settings(max_examples=12, deadline=None)
@given(chains(1, 4, max_size=6, fall_costs=None, unsaved_outputs=None))
def test_every_accepted_certificate_is_the_exhaustive_optimum(chain):
    """The weak DP's schedule at each budget: where a certificate is found, the checker
    accepts it and the makespan is exhaustive search's optimum; cut off one unit of
    granularity above the optimum (claiming a value that is not optimal), the tree never
    closes."""
    for b in _budgets(chain):
        opt = search(chain, b)[1]
        sol = solvers.solve(chain, b, "dp-weak")
        if sol.schedule is None:
            continue
        cert, _ = certified.certificate(chain, b, sol.schedule, time_limit=20)
        if cert is not None:
            checker.check(json.loads(json.dumps(cert)))
            assert cert["makespan"] == pytest.approx(opt, abs=1e-9)
        delta = lp_tree.granularity(chain)
        if delta > 0:
            res = lp_tree.prove_cutoff(chain, b, opt + delta, time_limit=20)
            assert not res.proven


def _tight_certificate():
    from remat_theory.analysis.families import make
    chain = make("random", 5, 0)
    lo = solvers.solve(chain, 0, "dp-weak").min_budget
    b = lo + (chain.store_all_memory() - lo) // 10
    sol = solvers.solve(chain, b, "dp-weak")
    cert, info = certified.certificate(chain, b, sol.schedule, time_limit=30)
    assert cert is not None and cert["kind"] == "lp-tree", info
    return json.loads(json.dumps(cert))


def test_tampered_certificates_are_rejected():
    """A certificate the checker accepts, then each of its claims broken in turn."""
    cert = _tight_certificate()
    assert checker.check(cert)["kind"] == "lp-tree"
    bad = copy.deepcopy(cert)
    bad["makespan"] -= 1  # a makespan the schedule does not have
    with pytest.raises(checker.Rejected):
        checker.check(bad)
    bad = copy.deepcopy(cert)
    bad["tree"] = {"y": {}}  # no multipliers: the bound of the box alone, the ideal makespan
    with pytest.raises(checker.Rejected):
        checker.check(bad)
    bad = copy.deepcopy(cert)
    bad["kind"] = "ideal"  # the ideal makespan is below this schedule's
    with pytest.raises(checker.Rejected):
        checker.check(bad)
    bad = copy.deepcopy(cert)  # a multiplier of the sign its row cannot take
    upper = ("keep", "free", "end", "in_", "peak", "chain", "fn_", "no_fall")
    y = next(y for y in _bench.multiplier_sets(bad["tree"]) if any(k.startswith(upper) for k in y))
    label = next(k for k in y if k.startswith(upper))
    y[label] = abs(y[label]) + 1.0
    with pytest.raises(checker.Rejected):
        checker.check(bad)
    bad = copy.deepcopy(cert)
    bad["budget"] = cert["budget"] - 1 if cert["budget"] > 0 else 0
    try:
        checker.check(bad)
    except Exception:  # noqa: BLE001  over the budget, or a tree the new rows reject
        pass
    else:  # accepted at a smaller budget: then it must be optimal there too
        assert search(checker.Chain.from_dict(cert["chain"]), bad["budget"])[1] == \
            pytest.approx(cert["makespan"])


def _nested(node):
    """The tree with every ``steps`` node written as the chain of fix nodes it spells."""
    if "children" in node:
        return dict(node, children=[_nested(c) for c in node["children"]])
    if "child" not in node:
        return node
    child = _nested(node["child"])
    if "fix" in node:
        return dict(node, child=child)
    for step in reversed(node["steps"]):
        closer = {"tree": _nested(step["tree"])} if "tree" in step else {"y": step["y"]}
        child = {"fix": step["fix"], **closer, "child": child}
    return child


def _fixings_in_a_row(node) -> int:
    """The most fix or steps nodes of the tree found directly below one another."""
    if "children" in node:
        return max(_fixings_in_a_row(c) for c in node["children"])
    if "child" not in node:
        return 0
    below = node["child"]
    run = 1 + (_fixings_in_a_row(below) if "child" in below else 0)
    return max(run, _fixings_in_a_row(below))


def test_a_probing_dive_is_one_flat_node():
    """Consecutive fixings at one node (reduced-cost fixing, then probing round after
    round) are written as one ``steps`` node, not nested (the producer once recursed once per
    round, and a dive of ~1,000 rounds on an 80-layer chain hit Python's recursion limit):
    never two fixing nodes in a row; the checker accepts it, counts the same boxes as the
    nested spelling, and rejects a step whose multipliers do not close its box."""
    from remat_theory.analysis.families import make
    chain = make("random", 8, 0)  # 59 nodes, 15 steps nodes without cuts
    b = solvers.solve(chain, 0, "dp-weak").min_budget
    sol = solvers.solve(chain, b, "dp-weak")
    cert, info = certified.certificate(chain, b, sol.schedule, time_limit=60, cuts=0,
                                       suggest=0, node_cuts=0)
    assert cert is not None, info
    cert = json.loads(json.dumps(cert))
    text = json.dumps(cert["tree"])
    assert '"steps"' in text
    assert _fixings_in_a_row(cert["tree"]) == 1
    flat = checker.check(cert)
    nested = dict(cert, tree=_nested(cert["tree"]))
    assert '"steps"' not in json.dumps(nested["tree"])
    assert checker.check(nested)["boxes"] == flat["boxes"]
    assert search(chain, b)[1] == pytest.approx(cert["makespan"])

    def first_steps(node):
        if "steps" in node:
            return node
        for c in node.get("children", []) + ([node["child"]] if "child" in node else []):
            got = first_steps(c)
            if got is not None:
                return got
        return None

    bad = copy.deepcopy(cert)
    first_steps(bad["tree"])["steps"][-1]["y"] = {}  # the box's bound alone: not closed
    with pytest.raises(checker.Rejected):
        checker.check(bad)
    bad = copy.deepcopy(cert)
    first_steps(bad["tree"])["steps"] = []
    with pytest.raises(checker.Rejected):
        checker.check(bad)


def test_prove_carries_a_certificate_the_checker_accepts():
    """``prove -o checkable=true``: an optimal answer with its certificate, accepted."""
    from remat_theory.analysis.families import make
    chain = make("random", 6, 1)
    b = (chain.store_all_memory() * 2) // 3
    sol = solvers.solve(chain, b, "prove", checkable=True, time_limit=60)
    assert sol.status == "optimal"
    assert sol.info["proof"] is not None, sol.info.get("proof_search")
    res = checker.check(json.loads(json.dumps(sol.info["proof"])))
    assert res["makespan"] == pytest.approx(sol.makespan)
    assert search(chain, b)[1] == pytest.approx(sol.makespan)


def test_the_depth_benchmarks_network_chain_is_the_profile_repeated():
    """benchmarks/bench_prove_depth.py's network chain: the profiled transformer's first and
    last stage around its blocks repeated, times in whole microseconds, sizes in units."""
    mod = _bench.load("bench_prove_depth")
    prof = json.loads(mod.NET.read_text())
    L0 = len(prof["fwd_time"])
    blocks = 2 * (L0 - 2) + 1  # every block stage twice, and one more: the cycle wraps
    chain = mod.net_chain(blocks)
    assert chain.length == blocks + 2
    src = [0] + [1 + k % (L0 - 2) for k in range(blocks)] + [L0 - 1]
    for i, j in enumerate(src):
        assert chain.fwd_time[i] == round(prof["fwd_time"][j] * 1e6)
        assert chain.output_saved[i] == prof["output_saved"][j]
        assert chain.tape_size[i] == max(-(-prof["tape_size"][j] // mod.UNIT),
                                         chain.x_size[i + 1])
    assert chain.bwd_time[-1] == round(prof["bwd_time"][-1] * 1e6)


@pytest.mark.parametrize("path", sorted((ROOT / "proofs" / "certified").glob("*.json")),
                         ids=lambda p: p.name)
def test_committed_certificates_are_accepted(path):
    """Every committed ``remat-proof/1`` certificate passes the checker, and its schedule is
    no slower than the weak DP's at its budget (which it claims to be optimal against)."""
    cert = json.loads(path.read_text())
    res = checker.check(cert)
    chain = checker.Chain.from_dict(cert["chain"])
    dp = solvers.solve(chain, cert["budget"], "dp-weak")
    assert res["makespan"] <= dp.makespan + 1e-9
