"""Chvátal-Gomory cuts in the directions of HiGHS's root cuts (solvers/bounds/cg_cuts.py,
``suggested_rounds``; proofs/certified.md "Cuts"): each cut the producer adds is the row the
independent checker derives from its multipliers, coefficient for coefficient; a
certificate made with them is accepted and rejected when tampered with; the tree never
closes above exhaustive search's optimum with them; and the producer's floating-point
Lagrangian bound never exceeds the checker's exact one."""
import copy
import json
import random
from fractions import Fraction

import numpy as np
import _bench
import pytest
from hypothesis import given, settings

import solvers
from remat_theory.analysis.families import make
from remat_theory.strategies import chains
from solvers.bounds import certified, cg_cuts, lp_tree
from solvers.exhaustive import min_feasible_budget, search
from tests._tiers import examples

checker = _bench.checker()
bench = _bench.load("bench_prove_depth")


def _rejected(cert):
    with pytest.raises(checker.Rejected):
        checker.check(cert)


def _lp(rows):
    h = lp_tree.highs_lp(rows)
    h.run()
    return h


def _suggested(chain, budget, rounds=3):
    rows = lp_tree.lp_rows(chain, budget)
    h = _lp(rows)
    root = h.getInfo().objective_function_value + rows.constant
    ext, derivations, history = cg_cuts.suggested_rounds(h, rows, rounds=rounds)
    return rows, ext, derivations, history, root


def test_suggested_cuts_are_the_rows_the_checker_derives():
    """On 8 random stages (smallest budget but one of the benchmark's five), HiGHS's root
    cuts re-derived as CG cuts raise the LP bound, and each row the producer adds (its LP
    row, and the one its later cuts and multipliers use) is exactly the checker's
    ``cut_k`` from the derivation written to the certificate."""
    chain = make("random", 8, 0)
    b = bench.budgets(chain)[1]
    rows, ext, derivations, history, root = _suggested(chain, b)
    assert derivations and history[-1] > root + 1.0
    assert all("kind" not in d for d in derivations)  # the Chvátal-Gomory kind
    crow, cost, _ = checker.moment_rows(chain, b)
    assert checker.add_cuts(crow, cost, derivations) == len(derivations)
    for k in range(len(derivations)):
        r = ext.labels.index(f"cut_{k}")
        s, e = ext.starts[r], ext.starts[r + 1]
        mine = {ext.names[c]: Fraction(int(a)) for c, a in zip(ext.index[s:e], ext.value[s:e])}
        coef, lo, up = crow[f"cut_{k}"]
        assert lo is None and ext.lo[r] == -np.inf
        assert mine == coef and Fraction(int(ext.up[r])) == up


def test_a_cg_lp_cut_implies_its_direction():
    """``CgLp.derive`` on a direction that is a row's own CG cut (half a peak row, rounded
    down: of rank one by construction) returns a cut that implies it on ``x >= 0`` (some
    integer multiple of it, the gcd it was divided by, has every coefficient at least the
    direction's and its side at most the direction's), and it is the row the checker derives
    from the multipliers returned."""
    chain = make("random", 8, 0)
    b = bench.budgets(chain)[1]
    rows = lp_tree.lp_rows(chain, b)
    cglp = cg_cuts.CgLp(rows)
    peak = next(r for r, lab in enumerate(rows.labels) if lab.startswith("peak")
                and np.isfinite(rows.up[r]) and rows.starts[r + 1] - rows.starts[r] > 3
                and int(rows.up[r]) % 2 == 1)
    s, e = rows.starts[peak], rows.starts[peak + 1]
    cols, alpha = rows.index[s:e], np.floor(rows.value[s:e] / 2)
    keep = alpha != 0
    cols, alpha = cols[keep], alpha[keep]
    beta = int(np.floor(rows.up[peak] / 2))
    got = cglp.derive(cols, alpha, beta)
    assert got is not None
    coefs, rhs, U, V = got
    want = {int(c): int(a) for c, a in zip(cols, alpha)}
    every = set(want) | set(coefs)
    assert any(all(g * coefs.get(c, 0) >= want.get(c, 0) for c in every) and g * rhs <= beta
               for g in range(1, 1 + max(abs(a) for a in want.values()) + abs(beta)))
    crow, cost, _ = checker.moment_rows(chain, b)
    one = float(1 << cg_cuts.GRID)
    checker.add_cuts(crow, cost, [{"rows": {rows.labels[r]: W / one for r, W in U.items()},
                                   "bounds": {rows.names[c]: x / one for c, x in V.items()}}])
    coef, _, up = crow["cut_0"]
    assert {rows.names[c]: Fraction(a) for c, a in coefs.items()} == coef
    assert Fraction(rhs) == up


def test_a_certificate_with_suggested_cuts_is_accepted_and_tampering_rejected():
    """A network chain of 12 stages (the benchmark's profile, 10 blocks) at its middle
    budget: the suggested cuts alone (no tableau cuts, no probing) close the root; the
    checker accepts the certificate, and rejects it with a negative bound multiplier, with every cut's row
    multipliers removed (the cuts derived are then too weak to close), or with a cut row's
    multiplier of the wrong sign in the leaf."""
    chain = bench.net_chain(10)
    b = bench.budgets(chain)[2]
    sol = solvers.solve(chain, b, "dp-weak")
    cert, info = certified.certificate(chain, b, sol.schedule, time_limit=60, cuts=0,
                                       node_cuts=0, probe=False)
    assert cert is not None and 0 < len(cert["cuts"]) <= info["suggested_cuts"]
    cert = json.loads(json.dumps(cert))
    assert '"cut_' in json.dumps(cert["tree"])
    res = checker.check(cert)
    assert res["cuts"] == len(cert["cuts"]) and res["makespan"] == sol.makespan
    bad = copy.deepcopy(cert)
    cut = next(c for c in bad["cuts"] if c["bounds"])
    var = next(iter(cut["bounds"]))
    cut["bounds"][var] = -abs(cut["bounds"][var]) - 0.5
    _rejected(bad)
    bad = copy.deepcopy(cert)
    for c in bad["cuts"]:
        c["rows"] = {}
    _rejected(bad)
    bad = copy.deepcopy(cert)
    y = next(y for y in _bench.multiplier_sets(bad["tree"]) if any(k.startswith("cut_") for k in y))
    label = next(k for k in y if k.startswith("cut_"))
    y[label] = abs(y[label]) + 1.0
    _rejected(bad)


@settings(max_examples=examples(15, 4), deadline=None)
@given(chains(1, 4, max_size=6, fall_costs=None, unsaved_outputs=None))
def test_suggested_cuts_never_close_above_the_optimum(chain):
    """With the suggested cuts (and the tableau's, at the root and the nodes), the tree never
    closes at a cutoff one unit of granularity above exhaustive search's optimum: every
    derived cut keeps every schedule's point."""
    lo = min_feasible_budget(chain)
    for b in sorted({lo, lo + (chain.store_all_memory() - lo) // 3}):
        opt = search(chain, b)[1]
        delta = lp_tree.granularity(chain)
        if delta > 0:
            res = lp_tree.prove_cutoff(chain, b, opt + delta, time_limit=20, cuts=2,
                                       node_cuts=1, node_cut_depth=2, strong=4, suggest=3)
            assert not res.proven


def test_the_float_bound_never_exceeds_the_exact_one():
    """``lagrangian`` (floating point, what the producer closes boxes with) is at most the
    checker's exact ``LB(y)`` for random multipliers of every sign and size over the rows
    with the suggested cuts, on random boxes."""
    chain = make("random", 8, 0)
    b = bench.budgets(chain)[1]
    _, ext, derivations, _, _ = _suggested(chain, b)
    crow, cost, constant = checker.moment_rows(chain, b)
    checker.add_cuts(crow, cost, derivations)
    rng = random.Random(7)
    n, m = len(ext.names), len(ext.labels)
    for trial in range(20):
        y = np.array([rng.choice([0.0, 0.0, 1.0, -1.0]) * rng.uniform(0, 10 ** rng.randint(0, 7))
                      for _ in range(m)])
        y = lp_tree.clip(ext, y)
        lb, ub = np.zeros(n), np.ones(n)
        box = {}
        for j in rng.sample(range(n), n // 4):
            v = rng.randint(0, 1)
            lb[j] = ub[j] = v
            box[ext.names[j]] = (v, v)
        approx = lp_tree.lagrangian(ext, y, lb, ub)
        ydict = {ext.labels[k]: float(y[k]) for k in np.flatnonzero(y)}
        exact = checker.lagrangian(crow, cost, constant, ydict, box)
        assert approx <= exact


def test_only_the_cuts_the_tree_uses_are_written():
    """``prune_cuts``: on 8 random stages, of the cuts derived only those some multiplier of
    the tree uses (or a written cut's derivation uses) are written, renumbered in order;
    the certificate is accepted, and every cut written is used."""
    chain = make("random", 8, 0)
    b = bench.budgets(chain)[1]
    sol = solvers.solve(chain, b, "dp-weak")
    cert, info = certified.certificate(chain, b, sol.schedule, time_limit=30)
    assert cert is not None and info["cuts_written"] == len(cert["cuts"]) < info["cuts"]
    assert checker.check(json.loads(json.dumps(cert)))["cuts"] == len(cert["cuts"])
    used = {k for k in json.dumps(cert["tree"]).split('"') if k.startswith("cut_")}
    for cut in cert["cuts"]:
        used |= {k for k in cut["rows"] if k.startswith("cut_")}
    assert used == {f"cut_{k}" for k in range(len(cert["cuts"]))}
    # the derivations refer backwards only (the checker derives cut_k from earlier ones)
    for k, cut in enumerate(cert["cuts"]):
        assert all(int(lab[4:]) < k for lab in cut["rows"] if lab.startswith("cut_"))


def test_a_root_closing_to_the_unit_is_certified():
    """The network chain of 48 stages at its smallest budget: the LP root's bound is the
    makespan itself (one unit above what a leaf must exceed, on a makespan of 1.3e8), so the
    producer's floating-point error bound must be far below a unit for the root to close;
    the certificate is one box, and accepted."""
    chain = bench.net_chain(46)
    b = bench.budgets(chain)[0]
    sol = solvers.solve(chain, b, "dp-weak")
    cert, info = certified.certificate(chain, b, sol.schedule, time_limit=60)
    assert cert is not None and info["nodes"] == 1, info
    assert checker.check(json.loads(json.dumps(cert)))["boxes"] == 1
