"""Certificates with cuts (``remat-proof/2``, proofs/certified.md "Cuts"): accepted when
sound, rejected when any of their parts is tampered with, never closing above the optimum
(exhaustive search, the oracle with no modelling argument), and the checker still runs
without any solver."""
import copy
import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import _bench
import pytest
from hypothesis import given, settings

import solvers
from remat_theory.strategies import chains
from solvers.bounds import certified, lp_tree
from solvers.exhaustive import min_feasible_budget, search
from tests._tiers import examples

ROOT = Path(__file__).resolve().parent.parent
CERTS = ROOT / "proofs" / "certified"
checker = _bench.checker()


def _load(name):
    return json.loads((CERTS / name).read_text())


def _rejected(cert):
    with pytest.raises(checker.Rejected):
        checker.check(cert)


def test_committed_certificates_with_cuts_are_what_they_say():
    """The committed ``remat-proof/2`` files carry cuts and a tree that uses them (a cut row
    in some multiplier) and are accepted; the ``remat-proof/1`` one still is."""
    for name in ("random12_b2_cuts.json", "random5_b1_cuts.json"):
        cert = _load(name)
        assert cert["format"] == "remat-proof/2" and cert["cuts"]
        assert '"cut_' in json.dumps(cert["tree"])
        assert checker.check(cert)["cuts"] == len(cert["cuts"])
    old = _load("random12_b2.json")
    assert old["format"] == "remat-proof/1" and "cuts" not in old
    assert checker.check(old)["cuts"] == 0


def test_tampered_cuts_are_rejected():
    """Each part of a cut's derivation broken in turn: the certificate is rejected (for a
    malformed derivation by the derivation's own check; for a changed multiplier because
    the cut it derives no longer closes the box)."""
    cert = _load("random12_b2_cuts.json")
    checker.check(cert)
    bad = copy.deepcopy(cert)
    bad["format"] = "remat-proof/1"  # cuts came with /2
    _rejected(bad)
    bad = copy.deepcopy(cert)  # the tree uses a cut no longer derived
    used = [int(k[4:]) for k in json.dumps(cert["tree"]).split('"') if k.startswith("cut_")]
    bad["cuts"] = bad["cuts"][:max(used)]
    _rejected(bad)
    bad = copy.deepcopy(cert)  # a multiplier on a row that does not exist
    bad["cuts"][0]["rows"]["no_such_row"] = [1, "up"]
    _rejected(bad)
    bad = copy.deepcopy(cert)  # the side a row lacks (a peak row has no lower side)
    cut = next(c for c in bad["cuts"] if any(k.startswith("peak") for k in c["rows"]))
    label = next(k for k in cut["rows"] if k.startswith("peak"))
    cut["rows"][label][1] = "lo"
    _rejected(bad)
    bad = copy.deepcopy(cert)
    bad["cuts"][0]["kind"] = "lift-and-project"
    _rejected(bad)
    for d in (0, -2, 1.5):
        bad = copy.deepcopy(cert)
        bad["cuts"][0]["divide"] = d
        _rejected(bad)
    bad = copy.deepcopy(cert)  # every multiplier doubled: the rows derived are others
    for cut in bad["cuts"]:
        for label in cut["rows"]:
            cut["rows"][label][0] *= 2
    _rejected(bad)
    bad = copy.deepcopy(cert)  # a cut row is a <= row: its multiplier must be <= 0
    y = next(y for y in _bench.multiplier_sets(bad["tree"]) if any(k.startswith("cut_") for k in y))
    label = next(k for k in y if k.startswith("cut_"))
    y[label] = abs(y[label]) + 1.0
    _rejected(bad)


def _branch(tree):
    """The first inner node of a tree (through its fix nodes)."""
    while "children" not in tree:
        tree = tree["child"]
    return tree


def test_tampered_trees_with_cuts_are_rejected():
    """Coverage: a subtree replaced by an empty leaf, a fixing of a variable already fixed,
    a branch with one child: rejected."""
    cert = _load("random5_b1_cuts.json")
    checker.check(cert)
    assert "fix" in cert["tree"]
    bad = copy.deepcopy(cert)
    _branch(bad["tree"])["children"][1] = {"y": {}}
    _rejected(bad)
    bad = copy.deepcopy(cert)
    node = _branch(bad["tree"])
    var = next(iter(bad["tree"]["fix"]))  # fixed by the root already
    node["children"][0] = {"fix": {var: 0}, "y": {}, "child": node["children"][0]}
    _rejected(bad)
    bad = copy.deepcopy(cert)
    node = _branch(bad["tree"])
    node["children"] = node["children"][:1]
    _rejected(bad)


def test_a_chvatal_gomory_cut_is_derived_as_written():
    """The checker's CG derivation against the rule written out here: half a peak row,
    every coefficient and the side rounded down (then divided by their gcd); a negative
    bound multiplier is refused."""
    cert = _load("random12_b2_cuts.json")
    chain = checker.Chain.from_dict(cert["chain"])
    rows, cost, _ = checker.moment_rows(chain, cert["budget"])
    coef, _, up = rows["peak_b_3"]
    checker.add_cuts(rows, cost, [{"rows": {"peak_b_3": 0.5}, "bounds": {"h_3_3": 0.25}}])
    want = {v: math.floor(a / 2 + (Fraction(1, 4) if v == "h_3_3" else 0))
            for v, a in coef.items()}
    rhs = math.floor(Fraction(up) / 2 + Fraction(1, 4))
    g = math.gcd(rhs, *want.values())
    got, lo, side = rows["cut_0"]
    assert lo is None and side == rhs // g
    assert got == {v: a // g for v, a in want.items() if a // g}
    with pytest.raises(checker.Rejected):
        checker.add_cuts(rows, cost, [{"rows": {}, "bounds": {"h_3_3": -0.5}}])


@settings(max_examples=examples(15, 4), deadline=None)
@given(chains(1, 4, max_size=6, fall_costs=None, unsaved_outputs=None))
def test_cuts_never_close_above_the_optimum(chain):
    """With cuts at the root and at the nodes and probing, the tree never closes at a cutoff
    one unit of granularity above exhaustive search's optimum (every derived cut keeps
    every schedule's point), and a certificate found at the optimum is accepted."""
    lo = min_feasible_budget(chain)
    for b in sorted({lo, lo + (chain.store_all_memory() - lo) // 3}):
        opt = search(chain, b)[1]
        delta = lp_tree.granularity(chain)
        if delta > 0:
            res = lp_tree.prove_cutoff(chain, b, opt + delta, time_limit=20, cuts=6,
                                       node_cuts=2, node_cut_depth=3, strong=4)
            assert not res.proven
        sol = solvers.solve(chain, b, "dp-weak")
        if sol.schedule is None:  # the weak DP's class may need more memory
            continue
        cert, _ = certified.certificate(chain, b, sol.schedule, time_limit=20)
        if cert is not None:
            checker.check(json.loads(json.dumps(cert)))
            assert cert["makespan"] == pytest.approx(opt, abs=1e-9)


def test_the_checker_runs_without_any_solver():
    """Run as a program, the checker accepts a certificate with cuts with no solver, LP
    package or MIP package ever imported."""
    code = ("import runpy, sys\nstatus = None\n"
            "try:\n    runpy.run_path(%r, run_name='__main__')\n"
            "except SystemExit as e:\n    status = e.code\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('solvers', 'highspy', 'pulp', 'scipy'))\n"
            "print('STATUS', status, 'IMPORTED', bad)\n") % str(ROOT / "proofs" /
                                                              "check_certificate.py")
    p = subprocess.run([sys.executable, "-c", code, str(CERTS / "random12_b2_cuts.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "STATUS 0 IMPORTED []" in p.stdout, p.stdout + p.stderr
