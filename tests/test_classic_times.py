"""Every forward-time vector at once (proofs/classic_model.md C.8,
remat_theory/analysis/classic_times.py): the count vectors against exhaustive search and the
class DPs, the exact game value against a grid, the ratio against sampled time vectors and
its attaining vector against the solvers."""
from __future__ import annotations

import itertools
import random
from fractions import Fraction
from pathlib import Path

import pytest

import solvers
from remat_theory.analysis import classic_times as ct
from remat_theory.analysis.certificates import load
from remat_theory.analysis.classic_enum import EnumConfig
from remat_theory.analysis.hard_families import FamilySpec, trend
from remat_theory.analysis.hard_objectives import GapConfig
from remat_theory.model.chain import Chain
from remat_theory.model.errors import RematError

CERTS = Path(__file__).resolve().parent.parent / "proofs" / "certificates"
CLASS_SOLVER = {"weak": "dp-weak", "persistent": "dp", "monotone": "exhaustive-monotone"}


def _random_chain(rng, L, unsaved=False, times=None):
    x = [rng.randint(0, 2)] + [rng.randint(0, 3) for _ in range(L)]
    return Chain(name="r", fwd_time=times or [1.0] * L, bwd_time=[0.0] * (L + 1),
                 x_size=x, tape_size=[x[i + 1] + rng.randint(0, 3) for i in range(L)],
                 fwd_overhead=[rng.choice([0, 0, 1, 3]) for _ in range(L)],
                 bwd_overhead=[rng.choice([0, 0, 1, 2]) for _ in range(L + 1)],
                 output_saved=[rng.random() < 0.7 for _ in range(L)] if unsaved else None)


def _with_times(c: Chain, fwd, bwd=None) -> Chain:
    d = c.to_dict()
    d["fwd_time"] = [float(t) for t in fwd]
    d["bwd_time"] = [float(t) for t in (bwd or [0] * (c.length + 1))]
    return Chain.from_dict(d)


def _best(vectors, f):
    return min((sum(a * t for a, t in zip(v, f)) for v in vectors), default=None)


@pytest.mark.parametrize("seed", range(4))
def test_count_vectors_decide_the_optimum_at_every_time_vector(seed):
    """min over the Pareto count vectors of n.f + sum(bwd) is exhaustive search's optimum,
    and over the class's vectors the class solver's (dp-weak, dp: independent of the walk),
    at every budget from the lower bound to store-all's peak."""
    rng = random.Random(seed)
    c = _random_chain(rng, rng.randint(1, 3), unsaved=seed % 2 == 1)
    cls = ("weak", "persistent", "monotone")[seed % 3]
    cap = ct.store_all_peak(c)
    A, C = ct.count_labels(c, "all", cap), ct.count_labels(c, cls, cap)
    for b in range(c.memory_lower_bound(), cap + 1):
        f = [rng.choice([0, 1, 2, 7]) for _ in range(c.length)]
        f[rng.randrange(c.length)] = 3
        bt = [rng.choice([0, 1]) for _ in range(c.length + 1)]
        timed = _with_times(c, f, bt)
        av = ct.vectors_at(A, b) if b < cap else [(1,) * c.length]
        cv = ct.vectors_at(C, b) if b < cap else [(1,) * c.length]
        for vs, solver in ((av, "exhaustive"), (cv, CLASS_SOLVER[cls])):
            s = solvers.solve(timed, b, solver)
            want = None if s.makespan is None else s.makespan - sum(bt)
            got = _best(vs, f)
            assert (got is None) == (want is None), (solver, b)
            if got is not None:
                assert got == pytest.approx(want), (solver, b, f)


def test_the_classic_gadget_loses_two_at_most_over_every_time_vector():
    c = load(CERTS / "classic_weak_gap_L3.json").chain
    rows = ct.budget_ratios(c, "weak")
    assert rows == [(4, Fraction(2), [1, 0, 0])]
    timed = _with_times(c, [1, 0, 0])
    assert solvers.solve(timed, 4, "dp-weak").makespan == 2 * solvers.solve(
        timed, 4, "exhaustive").makespan


@pytest.mark.parametrize("seed", range(3))
def test_ratio_bounds_every_sampled_time_vector_and_is_attained(seed):
    rng = random.Random(100 + seed)
    c = _random_chain(rng, 3)
    for b, r, f in ct.budget_ratios(c, "weak"):
        for _ in range(3):
            ts = [rng.choice([0, 1, 2, 5]) for _ in range(c.length)]
            if not any(ts):
                continue
            t = _with_times(c, ts)
            w, o = solvers.solve(t, b, "dp-weak").makespan, solvers.solve(t, b, "exhaustive").makespan
            assert w <= float(r) * o + 1e-9
        if f is not None:
            t = _with_times(c, f)
            w, o = solvers.solve(t, b, "dp-weak").makespan, solvers.solve(t, b, "exhaustive").makespan
            assert Fraction(w).limit_denominator(10 ** 6) == r * Fraction(o).limit_denominator(10 ** 6)


def test_game_value_against_a_grid():
    rng = random.Random(7)
    for L in (2, 3):
        for _ in range(4):
            a = tuple(rng.randint(1, 3) for _ in range(L))
            cs = [tuple(rng.randint(1, 4) for _ in range(L)) for _ in range(rng.randint(1, 4))]
            v, g = ct.game_value(a, cs)
            assert sum(g) == 1 and min(g) >= 0
            assert min(sum(Fraction(c[i], a[i]) * g[i] for i in range(L)) for c in cs) == v
            n = 12
            for w in itertools.product(range(n + 1), repeat=L):
                if sum(w) != n:
                    continue
                val = min(sum(Fraction(c[i], a[i]) * w[i] / n for i in range(L)) for c in cs)
                assert val <= v  # v is the maximum


def test_bad_input_is_named():
    c = load(CERTS / "classic_weak_gap_L3.json").chain
    d = c.to_dict()
    d["fall_overhead"] = [0, 0, 0]
    with pytest.raises(RematError, match="recording costs"):
        ct.count_labels(Chain.from_dict(d))
    with pytest.raises(RematError, match="schedule_class"):
        ct.count_labels(c, "sometimes")
    with pytest.raises(RematError, match="zero entry"):
        ct.game_value((1, 0), [(1, 1)])
    with pytest.raises(RematError, match="all_times"):
        trend(c, FamilySpec("repeat", stage=2), GapConfig("budget-gap"), 1, all_times=True)


def test_family_over_every_time_vector_keeps_the_gadget_at_two():
    c = load(CERTS / "classic_weak_gap_L3.json").chain
    rows = trend(c, FamilySpec("repeat", stage=2), GapConfig("dp-weak-gap"), 1, all_times=True)
    assert [(r.stages, r.score, r.budget) for r in rows] == [(3, 2.0, 4), (4, 2.0, 4)]
    last = Chain.from_dict(rows[-1].chain)
    assert list(last.fwd_time) == [1.0, 0.0, 0.0, 0.0]
    assert solvers.solve(last, 4, "dp-weak").makespan == 2 * solvers.solve(
        last, 4, "exhaustive").makespan


@pytest.mark.slow
def test_enumeration_shard_against_time_vectors_brute_force():
    """A shard of the 3-stage range around the gadget: the all-times ratio is at least the
    ratio of every time vector in {0, 1, 2}^3 (dp-weak against exhaustive search), and the
    gadget's 2 is reached by the grid."""
    from remat_theory.analysis.classic_enum import chain_of, memory_config
    cfg = EnumConfig(3, 2, zero_bwd_overhead=True)
    digits = [0, 1, 0, 1, 1, 0, 0, 1, 2]  # x_1..x_3, tape excesses, fwd_overhead: the gadget
    gadget = int("".join(map(str, digits)), 3)
    res = ct.enumerate_range(cfg, "weak", gadget - 12, gadget + 12)
    assert res["configs"] == 24 and res["max_ratio"] == "2"
    for idx in range(gadget - 12, gadget + 12, 3):
        c = chain_of(memory_config(cfg, idx), (1, 1, 1))
        seen = Fraction(1)
        rows = ct.budget_ratios(c, "weak")
        for b, r, _ in rows:
            for f in itertools.product((0, 1, 2), repeat=3):
                if any(f):
                    t = _with_times(c, f)
                    w = solvers.solve(t, b, "dp-weak").makespan
                    o = solvers.solve(t, b, "exhaustive").makespan
                    assert w <= float(r) * o + 1e-9
                    seen = max(seen, Fraction(w).limit_denominator(100) / Fraction(o).limit_denominator(100))
        assert seen == max([r for _, r, _ in rows] + [Fraction(1)])  # the grid reaches it here
    assert memory_config(cfg, gadget)["fwd_overhead"] == [0, 1, 2]


def test_weakly_persistent_schedules_run_once_per_phase_on_the_classic_model():
    """Lemma C.11: on the classic model every weakly persistent schedule is in the one-run
    class (`monotone`): dp-weak's schedules are, and every count vector of the weak class is
    reached by the one-run class under the same budget."""
    from remat_theory.model.persistence import is_monotone
    rng = random.Random(11)
    for _ in range(10):
        c = _random_chain(rng, 3)
        cap = ct.store_all_peak(c)
        W, M = ct.count_labels(c, "weak", cap), ct.count_labels(c, "monotone", cap)
        for b in range(c.memory_lower_bound(), cap + 1):
            s = solvers.solve(c, b, "dp-weak")
            if s.schedule is not None:
                assert is_monotone(c, s.schedule)
            ms = ct.vectors_at(M, b)
            for w in ct.vectors_at(W, b):
                assert any(all(x <= y for x, y in zip(m, w)) for m in ms)


def test_cli_family_over_every_time_vector(tmp_path, capsys):
    from remat_theory.cli.main import main
    rc = main(["hard", "--family", "repeat", "--stage", "2", "--base",
               str(CERTS / "classic_weak_gap_L3.json"), "--objective", "dp-weak-gap",
               "--all-times", "--steps", "1", "--out", str(tmp_path)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "every forward-time vector" in text and "flat" in text
    (path,) = tmp_path.iterdir()
    cert = load(path)
    assert cert.facts["ratio"] == 2.0 and cert.chain.length == 4
    assert list(cert.chain.fwd_time) == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.slow
def test_the_referee_chain_is_two_at_its_worst_time_vector():
    """proofs/classic_model.md C.8: the referee's 6-stage chain (unsaved outputs, no
    recording costs), over every forward-time vector, reaches exactly 2, and the time vector
    found replays it through the solvers."""
    c = load(CERTS / "referee_weak_gap_L6.json").chain
    rows = ct.budget_ratios(c, "weak")
    b, r, f = max(rows, key=lambda x: x[1])
    assert r == 2
    t = _with_times(c, f)
    assert solvers.solve(t, b, "dp-weak").makespan == pytest.approx(
        2 * solvers.solve(t, b, "exhaustive").makespan)
