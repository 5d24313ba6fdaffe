"""proofs/classic_model.md: the classic model's open rows (issue #43).

Lemma C.1 (x_0 folds into the last backward's overhead), Theorem C.3 (the class-budget gap
exists: a 2-stage chain), Theorem C.4 (it is at most 3/2, with unsaved outputs 2: a lean
persistent schedule), the complete enumeration against a brute force over every budget,
and the parametric families of ``remat hard --family``.  Oracles: exhaustive search (also
restricted to a class), the simulator, the class rules of remat_theory.model.persistence."""
from __future__ import annotations

import json
import random

import pytest

import solvers
from remat_theory import Chain, simulate
from remat_theory.analysis import classic_enum as E
from remat_theory.analysis import classic_gap as G
from remat_theory.analysis import hard_families as F
from remat_theory.analysis import hard_objectives as H
from remat_theory.analysis.certificates import load
from remat_theory.cli import main
from remat_theory.model.errors import RematError
from remat_theory.model.persistence import is_persistent, is_weakly_persistent
from solvers import dp as dp_solver
from solvers import exhaustive as ex

CERTS = __import__("pathlib").Path(__file__).resolve().parent.parent / "proofs" / "certificates"


def _random_chain(rng: random.Random, L: int, k: int, unsaved: bool = False,
                  x0: int | None = None) -> Chain:
    x = [rng.randint(0, k) for _ in range(L + 1)]
    if x0 is not None:
        x[0] = x0
    return Chain(name="r", fwd_time=[float(rng.randint(0, 2)) for _ in range(L)],
                 bwd_time=[float(rng.randint(0, 1)) for _ in range(L + 1)], x_size=x,
                 tape_size=[x[i + 1] + rng.randint(0, k) for i in range(L)],
                 fwd_overhead=[rng.randint(0, k) for _ in range(L)],
                 bwd_overhead=[rng.randint(0, k) for _ in range(L + 1)],
                 output_saved=[rng.random() < 0.6 for _ in range(L)] if unsaved else None)


def _makespan(chain, budget, solver):
    s = solvers.solve(chain, budget, solver)
    return s.makespan if s.status == "optimal" else None


# ---------------------------------------------------------------------- Lemma C.1

def test_x0_folds_into_the_first_backward_overhead():
    """Chain with x_0 = a at budget M == chain with x_0 = 0, bwd_overhead[0] + a, at M - a:
    the same optimum and class optima (or both infeasible)."""
    rng = random.Random(3)
    for _ in range(8):
        L = rng.randint(1, 3)
        c = _random_chain(rng, L, 3, unsaved=rng.random() < 0.3, x0=rng.randint(1, 3))
        a = c.x_size[0]
        d = c.to_dict()
        d["x_size"] = [0] + list(c.x_size[1:])
        d["bwd_overhead"] = [c.bwd_overhead[0] + a] + list(c.bwd_overhead[1:])
        c0 = Chain.from_dict(d)
        for M in {c.memory_lower_bound(), (c.memory_lower_bound() + c.store_all_memory()) // 2,
                  c.store_all_memory()}:
            for s in ("exhaustive", "dp-weak"):
                assert _makespan(c, M, s) == _makespan(c0, M - a, s)


# ---------------------------------------------------------------------- Theorem C.3

def test_budget_gap_chain():
    """Every schedule of the classes needs 4 bytes (class-restricted exhaustive search, an
    oracle independent of the DPs), an unrestricted one fits in 3 (the witness)."""
    c = G.budget_gap_chain()
    assert not c.has_unsaved_outputs and not c.has_fall_costs
    assert ex.min_feasible_budget(c) == 3
    for cls in ("weak", "persistent"):
        assert ex.min_feasible_budget(c, schedule_class=cls) == 4
    assert simulate(c, G.budget_gap_witness(), 3).peak_memory == 3
    assert not is_weakly_persistent(c, G.budget_gap_witness())
    cert = load(CERTS / "classic_budget_gap_L2.json")
    assert cert.facts["class_min_budget"] == 4 and cert.facts["global_min_budget"] == 3


# ---------------------------------------------------------------------- Theorem C.4

@pytest.mark.parametrize("unsaved", [False, True])
def test_lean_schedule_is_persistent_and_within_the_bound(unsaved):
    rng = random.Random(11 + unsaved)
    for _ in range(20):
        c = _random_chain(rng, rng.randint(1, 4), rng.choice([1, 2, 4]), unsaved=unsaved)
        s = G.lean_schedule(c)
        assert is_persistent(c, s) and is_weakly_persistent(c, s)
        peak = simulate(c, s, 10 ** 9).peak_memory
        m = ex.min_feasible_budget(c)
        assert dp_solver.min_feasible_budget(c) <= peak <= G.lean_bound(c, m)
        if c.has_unsaved_outputs:
            assert peak <= 2 * m
        else:
            assert 2 * peak <= 3 * m


# ---------------------------------------------------------------------- the enumeration

def _brute(cfg: E.EnumConfig, lo: int, hi: int) -> tuple:
    """Per config and time vector, whether dp-weak loses at some budget from its smallest
    to store-all (solved at every one), and whether a class's smallest budget is above
    exhaustive search's."""
    weak, budget = set(), set()
    for idx in range(lo, hi):
        mem = E.memory_config(cfg, idx)
        for fwd in cfg.time_vectors():
            c = E.chain_of(mem, fwd)
            lo_b = solvers.solve(c, 0, "dp-weak").min_budget
            for b in range(lo_b, c.store_all_memory() + 1):
                if _makespan(c, b, "dp-weak") > _makespan(c, b, "exhaustive") + 1e-9:
                    weak.add(json.dumps(c.to_dict()))
                    break
        c = E.chain_of(mem, cfg.time_vectors()[0])
        if solvers.solve(c, 0, "dp").min_budget > ex.min_feasible_budget(c):
            budget.add(json.dumps(c.to_dict()))
    return weak, budget


@pytest.mark.parametrize("cfg, lo", [(E.EnumConfig(3, 2, zero_bwd_overhead=True), 2514),
                                     (E.EnumConfig(2, 2), 7423)])
def test_enumeration_shard_against_brute_force(cfg, lo):
    """Shards around the two gadgets (the 3-stage DP_weak/OPT = 2 chain, the 2-stage
    budget gap): the shard finds exactly the chains the brute force finds."""
    r = E.run_shard((cfg, 0, lo, lo + 4))
    weak, budget = _brute(cfg, lo, lo + 4)
    assert {json.dumps(x["chain"]) for x in r["weak"]["records"]} == weak
    assert {json.dumps(x["chain"]) for x in r["budget"]["records"]} == budget
    assert weak or budget  # the slices were picked to contain a gadget


def test_enumeration_resumes_and_refuses_another_config(tmp_path):
    cfg = E.EnumConfig(1, 1, times=(1,))
    out = tmp_path / "e.jsonl"
    part = E.enumerate_classic(cfg, out, shard_size=3, max_shards=2)
    assert not part["complete"] and part["covered"] == 6
    whole = E.enumerate_classic(cfg, out, shard_size=3)
    assert whole["complete"] and whole["covered"] == cfg.size() == 32
    fresh = E.enumerate_classic(cfg, tmp_path / "f.jsonl", shard_size=16)
    assert fresh["weak"]["checks"] == whole["weak"]["checks"]
    with pytest.raises(RematError, match="another enumeration"):
        E.enumerate_classic(E.EnumConfig(1, 2), out, shard_size=3)
    with pytest.raises(RematError, match="zero_fwd_overhead"):
        E.EnumConfig(2, 1, measures=("monotone",))


def test_memory_configs_are_all_distinct():
    cfg = E.EnumConfig(2, 1, unsaved=True)
    seen = {json.dumps(E.memory_config(cfg, i)) for i in range(cfg.size())}
    assert len(seen) == cfg.size() == 2048


# ---------------------------------------------------------------------- families

def test_family_members():
    base = load(CERTS / "classic_weak_gap_L3.json").chain
    c = F.member(base, F.FamilySpec("compose", costly_first=True), 2)
    assert c.length == 9 and list(c.x_size) == [0] + list(base.x_size[1:]) * 3
    assert list(c.fwd_time) == list(base.fwd_time) + [0.0] * 6
    assert list(c.bwd_time[-1:]) == list(base.bwd_time[-1:])
    r = F.member(base, F.FamilySpec("repeat", stage=2), 3)
    assert r.length == 6 and r.tape_size[2:] == (base.tape_size[2],) * 4
    d = F.member(base, F.FamilySpec("drive", field="x_size", index=2, factor=3), 2)
    assert d.x_size[2] == 9 and d.tape_size[1] >= 9
    z = F.member(base, F.FamilySpec("drive", field="bwd_overhead", index=0), 3)
    assert z.bwd_overhead[0] == 7  # from 0: 2**3 - 1
    with pytest.raises(RematError, match="field"):
        F.FamilySpec("drive", field="nope", index=0)


def test_block_repeat_family_builds_the_growth_family_and_rises():
    """``--family repeat --stage 2 --block 2`` on G_4 stacks its gadget: member n is
    G_{4+2n} (Theorem C.15), field for field, and the trend scored by exhaustive search
    rises by one run of stage 0 per gadget."""
    from remat_theory.analysis.classic_growth import growth_chain
    base, budget = growth_chain(2)
    spec = F.FamilySpec("repeat", stage=2, block=2)
    for n in range(4):
        want, _ = growth_chain(2 + n)
        got = F.member(base, spec, n)
        assert got.to_dict() | {"name": ""} == want.to_dict() | {"name": ""}, n
    rows = F.trend(base, spec, H.GapConfig("dp-weak-gap"), 2)
    assert [(r.stages, r.score) for r in rows] == [(4, 2.0), (6, 3.0), (8, 4.0)]
    assert all(r.budget == budget for r in rows)
    assert F.growth(rows) == "rising"
    assert spec.label() == "repeat stages 2-3"
    with pytest.raises(RematError, match="block"):
        F.member(base, F.FamilySpec("repeat", stage=3, block=2), 1)


def test_family_trend_against_the_solvers():
    """Each row's ratio is dp-weak over exhaustive search at the row's budget, and no
    budget of the member does better (brute force over every budget)."""
    base = load(CERTS / "classic_weak_gap_L3.json").chain
    cfg = H.GapConfig("dp-weak-gap")
    rows = F.trend(base, F.FamilySpec("repeat", stage=2), cfg, 2)
    assert [r.stages for r in rows] == [3, 4, 5]
    for r in rows:
        c = Chain.from_dict(r.chain)
        assert r.score == pytest.approx(_makespan(c, r.budget, "dp-weak")
                                        / _makespan(c, r.budget, "exhaustive"))
        lo = solvers.solve(c, 0, "dp-weak").min_budget
        assert r.score == pytest.approx(max(
            _makespan(c, b, "dp-weak") / _makespan(c, b, "exhaustive")
            for b in range(lo, c.store_all_memory() + 1)))
    assert F.growth(rows) == "flat" and rows[0].score == 2.0


def test_growth_words():
    row = lambda s: F.Row(0, 1, s, 1)  # noqa: E731
    assert F.growth([row(1.0), row(1.5)]) == "rising"
    assert F.growth([row(2.0), row(1.5)]) == "falling"
    assert F.growth([row(2.0), row(2.0)]) == "flat"
    assert F.growth([row(1.0), row(2.0), row(1.5)]) == "mixed"


def test_cli_family(tmp_path, capsys):
    rc = main(["hard", "--family", "repeat", "--stage", "1", "--base",
               str(CERTS / "classic_budget_gap_L2.json"), "--objective", "budget-gap",
               "--steps", "1", "--json", "--out", str(tmp_path)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["stages"] for r in out["rows"]] == [2, 3]
    assert out["rows"][0]["score"] == pytest.approx(4 / 3)
    assert len(out["files"]) == 1 and load(out["files"][0]).facts["ratio"] >= 4 / 3
    assert main(["hard", "--family", "compose"]) == 2
    assert "--family needs --base" in capsys.readouterr().err
