"""Every real size at once (proofs/classic_model.md C.12-C.14,
remat_theory/analysis/classic_symbolic.py): the symbolic labels against the numeric walk of
classic_times (itself checked against exhaustive search), the theorems' conditions, and the
2-stage bound against exhaustive search and dp-weak on random chains with large sizes."""
from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import pytest
from _tiers import tiered

import solvers
from remat_theory.analysis import classic_symbolic as cs
from remat_theory.analysis import classic_times as ct
from remat_theory.analysis.certificates import load
from remat_theory.model.chain import Chain
from remat_theory.model import persistence
from remat_theory.model.errors import RematError
from remat_theory.model.simulator import simulate

CERTS = Path(__file__).resolve().parent.parent / "proofs" / "certificates"
_CACHE: dict = {}


def _params(kind, L, fo=True, bo=True):
    return (cs.free_params if kind == "free" else cs.homogeneous_params)(L, fo, bo)


def _labels(kind, L, cls, fo=True, bo=True):
    key = (kind, L, cls, fo, bo)
    if key not in _CACHE:
        _CACHE[key] = cs.labels(_params(kind, L, fo, bo), cls)
    return _CACHE[key]


@pytest.mark.parametrize("kind,L,fo,bo,seed", [
    ("free", 1, True, True, 0), ("free", 2, True, True, 1), ("free", 2, False, True, 2),
    pytest.param("homogeneous", 3, True, True, 3, marks=pytest.mark.slow),
    pytest.param("free", 3, True, True, 4, marks=pytest.mark.slow),
    pytest.param("homogeneous", 4, True, True, 5, marks=pytest.mark.slow)])
def test_labels_give_the_numeric_walks_count_vectors(kind, L, fo, bo, seed):
    """At random integer sizes, the labels' count vectors that fit each budget are the
    Pareto set of the numeric walk (classic_times.count_labels, checked against exhaustive
    search in test_classic_times), for every schedule and for the weak class; and the
    ratios over every time vector computed from the labels are classic_times'."""
    rng = random.Random(seed)
    P = _params(kind, L, fo, bo)
    A, W = _labels(kind, L, "all", fo, bo), _labels(kind, L, "weak", fo, bo)
    for _ in range(3):
        vals = [rng.choice([0, 0, 1, 2, 3, 5, 9]) for _ in P.names]
        c = P.chain(vals)
        cap = ct.store_all_peak(c)
        for labs, cls in ((A, "all"), (W, "weak")):
            num = ct.count_labels(c, cls, cap + 1)
            sym = [(n, cs.peak_at(f, vals)) for n, f, _ in labs]
            for b in range(0, cap + 1):
                assert ct.vectors_at(num, b) == ct.vectors_at(sym, b), (vals, cls, b)
        sym = [(b, r) for b, r, _ in cs.ratios_at(vals, A, W) if b < cap]
        num = [(b, r) for b, r, _ in ct.budget_ratios(c)]
        for b in range(cap):  # both step functions of the budget agree everywhere
            assert _at(sym, b) == _at(num, b), (vals, b)


def _at(steps, b):
    """The ratio of the last step at or below ``b`` (None: the class has no schedule)."""
    r = None
    for bb, rr in steps:
        if bb <= b:
            r = rr
    return r


def test_every_label_is_a_schedule_of_its_class_with_its_counts():
    P = cs.free_params(2)
    for cls in ("all", "weak"):
        for n, forms, ops in _labels("free", 2, cls):
            c = P.chain([1] * len(P.names))
            simulate(c, " ".join(ops))
            if cls == "weak":
                assert persistence.is_weakly_persistent(c, " ".join(ops))
            counts = [sum(1 for t in ops if t[:-1] in ("Fn", "Fck", "Fall") and
                          int(t[-1]) == i) for i in range(2)]
            assert tuple(counts) == n


def test_two_stages_without_forward_overheads_every_schedule_is_dominated():
    """Theorem C.13 (a) for L = 2 (and 3 in the slow tier): every schedule's label is
    dominated by a weak one, so at every real size no class gap of any kind."""
    r = cs.check_weak_equals_all(_params("free", 2, fo=False))
    assert r["failures"] == [] and r["dominated"] == r["all"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("kind,L,fo", [("free", 3, False), ("homogeneous", 3, True),
                                       ("homogeneous", 4, True)])
def test_weak_dominates_every_schedule_slow(kind, L, fo):
    r = cs.check_weak_equals_all(_params(kind, L, fo=fo))
    assert r["failures"] == [] and r["dominated"] == r["all"] > 0


def test_homogeneous_chains_weak_dominates_every_schedule():
    """Theorem C.13 (a) on homogeneous chains, L = 2 (the slow tier 3 and 4; the benchmark 5)."""
    for L in (2,):
        r = cs.check_weak_equals_all(_params("homogeneous", L))
        assert r["failures"] == [] and r["dominated"] == r["all"] > 0


def test_two_stages_bound_is_three_halves_and_attained():
    """Theorem C.14: on 2 stages the bound is 3/2 and the certificate attains it; the
    condition of check_weak_equals_all fails exactly on its schedule."""
    P = cs.free_params(2)
    r = cs.ratio_bound(P, all_labels=_labels("free", 2, "all"),
                       class_labels=_labels("free", 2, "weak"))
    assert r["bound"] == Fraction(3, 2)
    cert = load(CERTS / "classic_weak_gap_L2.json")
    c, b = cert.chain, cert.budget
    opt = solvers.solve(c, b, "exhaustive").makespan
    weak = solvers.solve(c, b, "dp-weak").makespan
    assert weak == pytest.approx(1.5 * opt) and opt > 0
    ch = cs.check_weak_equals_all(P)
    assert [f["all"] for f in ch["failures"]] == ["Fn0 Fall1 Fn1 Loss Fall0 B1 B0"]


@pytest.mark.parametrize("seed", tiered(range(3), [0]))
def test_two_stages_random_large_chains_stay_within_the_bound(seed):
    """dp-weak against exhaustive search at every budget where the labels' feasible sets
    change, on random 2-stage chains with sizes up to 10^6 and random real forward and
    backward times: never above 3/2, and equal wherever the labels say 1."""
    rng = random.Random(100 + seed)
    P = cs.free_params(2)
    A, W = _labels("free", 2, "all"), _labels("free", 2, "weak")
    for _ in range(2 if seed == 0 else 6):
        vals = [rng.choice([0, rng.randint(0, 10 ** 6)]) for _ in P.names]
        c0 = P.chain(vals)
        d = c0.to_dict()
        d["fwd_time"] = [rng.uniform(0, 5), rng.uniform(0, 5)]
        d["bwd_time"] = [rng.uniform(0, 2) for _ in range(3)]
        c = Chain.from_dict(d)
        for b, r, _ in cs.ratios_at(vals, A, W):
            opt = solvers.solve(c, b, "exhaustive").makespan
            weak = solvers.solve(c, b, "dp-weak").makespan
            assert opt <= weak + 1e-9 and weak <= 1.5 * opt + 1e-6
            if r == 1:
                assert weak == pytest.approx(opt)


@pytest.mark.slow
def test_three_stages_bound_is_two_slow():
    r = cs.ratio_bound(cs.free_params(3))
    assert r["bound"] == 2
    cert = load(CERTS / "classic_weak_gap_L3.json")
    opt = solvers.solve(cert.chain, cert.budget, "exhaustive").makespan
    assert solvers.solve(cert.chain, cert.budget, "dp-weak").makespan == pytest.approx(2 * opt)


def test_params_refuse_bad_values():
    P = cs.free_params(2)
    with pytest.raises(RematError, match="values"):
        P.chain([1, 2])
    with pytest.raises(RematError, match="parameter value"):
        P.chain([-1] + [0] * (len(P.names) - 1))
    with pytest.raises(RematError, match="schedule_class"):
        cs.labels(P, "nonsense")


@pytest.mark.slow
def test_one_run_dominates_every_schedule_on_four_stages_without_forward_overheads():
    """Theorem C.13 (a) with the one-run class: 4 stages, no forward overheads, every real
    size (backward overheads included); the weak class alone does not dominate there."""
    P = cs.free_params(4, fwd_overhead=False)
    r = cs.check_weak_equals_all(P, "monotone")
    assert r["failures"] == [] and r["dominated"] == r["all"] > 0
    assert cs.check_weak_equals_all(P)["dominated"] < r["all"]


@pytest.mark.slow
def test_four_stages_without_backward_overheads_bound_is_three_and_attained():
    """Theorem C.14 on 4 stages without backward overheads: bound 3; the certificate's chain
    is a point of the parametrization where the labels give 3 and the solvers agree."""
    P = cs.free_params(4, bwd_overhead=False)
    A, W = cs.labels(P, "all"), cs.labels(P, "weak")
    assert cs.ratio_bound(P, all_labels=A, class_labels=W)["bound"] == 3
    cert = load(CERTS / "classic_weak_gap_L4.json")
    c = cert.chain
    vals = list(c.x_size[1:]) + [t - x for t, x in zip(c.tape_size, c.x_size[1:])] + list(
        c.fwd_overhead)
    assert P.chain(vals).tape_size == c.tape_size and not any(c.bwd_overhead)
    assert max(r for b, r, _ in cs.ratios_at(vals, A, W) if b == cert.budget) == 3
    opt = solvers.solve(c, cert.budget, "exhaustive").makespan
    assert solvers.solve(c, cert.budget, "dp-weak").makespan == pytest.approx(3 * opt)
