"""The instance library (docs/library.md): the shipped file's schema and claims, the loader's
errors, and ``remat verify --library`` (a solver's answers judged against the record, a
lying plug-in flagged)."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

import solvers
from remat_theory.analysis import library
from remat_theory.analysis.library import LibraryError
from remat_theory.analysis.library_build import (solve_instance, store_all_makespan,
                                                 variations_of)
from remat_theory.analysis.library_verify import LibraryVerifyConfig, run_library_verify
from remat_theory.cli.main import main
from remat_theory.model.chain import Chain
from remat_theory.model.solution import Solution

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shipped():
    return library.load()


def test_shipped_library_is_package_data_and_loads_without_torch():
    # read through importlib.resources, in a fresh interpreter: nothing imports torch
    code = ("import sys; from remat_theory.analysis import library; lib = library.load(); "
            "print(len(lib), lib.proved, library.shipped().name, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split()
    assert int(out[0]) >= 200 and out[2] == "library.json" and out[3] == "False"
    text = (ROOT / "pyproject.toml").read_text()
    assert 'remat_theory = ["data/*.json"]' in text  # shipped in wheels too


def test_shipped_library_holds_what_docs_promise(shipped):
    assert len(shipped) >= 200
    assert shipped.proved >= 0.8 * len(shipped)
    groups = {c.split("-")[0] for c in shipped.classes()}
    assert {"random", "family", "hard", "certificate", "network"} <= groups
    for inst in shipped.instances:
        assert inst.budget <= inst.chain.store_all_memory() or inst.proved
        # every bound is at least the store-all makespan's closed form, never above the best
        assert inst.bound is not None and inst.bound >= store_all_makespan(inst.chain) * (1 - 1e-9)
        assert inst.proved == library.same(inst.bound, inst.best_makespan)
        assert list(inst.variations) == variations_of(inst.chain)


def test_best_schedules_replay_on_a_sample(shipped):
    # every 10th instance's recorded schedule through the simulator (the whole file: slow tier)
    for inst in shipped.instances[::10]:
        sim = library.replay_best(inst)
        assert sim.peak_memory <= inst.budget


@pytest.mark.slow
def test_every_best_schedule_replays(shipped):
    for inst in shipped.instances:
        library.replay_best(inst)


def _one(**changes) -> dict:
    chain = Chain.homogeneous(3)
    rec = {"id": "t/x", "class": "t", "chain": chain.to_dict(), "budget": chain.store_all_memory(),
           "best": {"makespan": 6.0, "solver": "store-all",
                    "schedule": ["Fall0", "Fall1", "Fall2", "Loss", "B2", "B1", "B0"]},
           "bound": {"value": 6.0, "solver": "closed form"}, "status": "optimal"}
    rec.update(changes)
    return rec


def test_a_valid_record_round_trips():
    inst = library.instance_from_dict(_one())
    assert library.instance_from_dict(inst.to_dict()) == inst
    assert library.replay_best(inst).makespan == 6.0


@pytest.mark.parametrize("changes, words", [
    ({"status": "solved"}, "status = 'solved'"),
    ({"status": "open"}, "agree"),
    ({"bound": {"value": 8.0, "solver": "x"}}, "bound.value = 8.0 is above best.makespan"),
    ({"bound": {"value": 5.0, "solver": "x"}}, "status = 'optimal' but bound 5.0"),
    ({"budget": -1}, "budget"),
    ({"id": "bad id"}, "id = 'bad id'"),
    ({"best": {"makespan": 7.0, "solver": "s", "schedule": []}}, "best.schedule"),
    ({"model": {"allow_drop": True}}, "model"),
])
def test_bad_records_are_refused_naming_the_field(changes, words):
    with pytest.raises(LibraryError, match=words.replace("(", r"\(").replace(".", r"\.")):
        library.instance_from_dict(_one(**changes))


def test_library_level_errors(tmp_path):
    with pytest.raises(LibraryError, match="format"):
        library.from_dict({"format": "remat-library/0", "instances": []})
    with pytest.raises(LibraryError, match="appears twice"):
        library.from_dict({"format": library.FORMAT, "instances": [_one(), _one()]})
    p = tmp_path / "lib.json"
    p.write_text("{")
    with pytest.raises(LibraryError, match="malformed JSON"):
        library.load(p)
    wrong = _one(best={"makespan": 5.0, "solver": "s", "schedule": _one()["best"]["schedule"]},
                 bound={"value": 5.0, "solver": "x"})
    with pytest.raises(LibraryError, match="simulator measures 6"):
        library.replay_best(library.instance_from_dict(wrong))
    folder = tmp_path / "lib"
    folder.mkdir()
    for k in range(2):
        (folder / f"{k}.json").write_text(json.dumps(
            {"format": library.FORMAT, "instances": [_one(id=f"t/{k}")]}))
    assert [i.id for i in library.load(folder).instances] == ["t/0", "t/1"]


def test_solve_instance_proves_against_exhaustive_search():
    from remat_theory.analysis import families
    chain = families.make("random", 4, 3)
    b = chain.memory_lower_bound() + 3
    rec = solve_instance(chain, b, 5.0)
    opt = solvers.solve(chain, b, "exhaustive")  # the independent oracle
    assert rec["status"] == "optimal" and library.same(rec["best"]["makespan"], opt.makespan)


def _small(tmp_path, n=3) -> Path:
    lib = library.load().select(classes=["random-small"], max_stages=4)
    data = lib.to_dict()
    data["instances"] = data["instances"][:n]
    p = tmp_path / "small.json"
    p.write_text(json.dumps(data))
    return p


def test_verify_library_on_a_few_instances(tmp_path, capsys):
    path = _small(tmp_path)
    code = main(["verify", "--library", str(path), "--solver", "exhaustive", "--solver", "periodic",
                 "--solver", "recompute-all", "--json", "--no-progress"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] and report["instances"] == 3
    assert report["proved"] == sum(d["status"] == "optimal" for d in report["details"])
    for d in report["details"]:
        ex = next(r for r in d["results"] if r["solver"] == "exhaustive")
        assert ex["outcome"] == "solved"
        if d["status"] == "optimal":  # the exact search meets the proved optimum
            assert abs(ex["gap"]) < 1e-9
        for r in d["results"]:
            assert r["gap"] is None or r["gap"] >= -1e-9  # nothing beats a proved optimum


def liar(chain, budget, **options):
    """Recompute-all's schedule, claimed optimal over all schedules."""
    sol = solvers.solve(chain, budget, "recompute-all")
    if sol.schedule is None:
        return None
    return Solution.optimal("liar", budget, sol.schedule, sol.makespan, sol.peak_memory,
                            optimal_for="all")


def _worse_than_best():
    """The first small proved instance where recompute-all fits and is strictly worse."""
    for inst in library.load().select(classes=["random-small"], max_stages=4).instances:
        sol = solvers.solve(inst.chain, inst.budget, "recompute-all")
        if inst.proved and sol.schedule is not None and sol.makespan > inst.best_makespan * 1.01:
            return inst, sol
    raise AssertionError("no small instance where recompute-all is worse than the optimum")


def test_a_false_optimum_is_flagged(tmp_path, capsys, monkeypatch):
    inst, _ = _worse_than_best()
    p = tmp_path / "one.json"
    p.write_text(json.dumps({"format": library.FORMAT, "instances": [inst.to_dict()]}))
    with solvers.registered("liar", liar, optimal_for="all", exact=True):
        report = run_library_verify(LibraryVerifyConfig(path=str(p), solvers=("liar",),
                                                        progress=False))
    assert not report["ok"]
    assert [b["outcome"] for b in report["bugs"]] == ["false-optimum"]
    # the same function as a plug-in by module path, on the command line: its Solution
    # claims optimal_for='all', flagged the same way, exit 1
    monkeypatch.setitem(sys.modules, "remat_library_liar", sys.modules[__name__])
    code = main(["verify", "--library", str(p), "--solver", "remat_library_liar:liar",
                 "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1 and "false-optimum" in out


def test_a_record_below_the_truth_is_caught(tmp_path):
    # a library whose "proved" bound is too high (the optimum is lower): exhaustive's schedule
    # lands below it and verify reports the library's proof as wrong
    inst, worse = _worse_than_best()
    rec = copy.deepcopy(inst.to_dict())
    rec["best"] = {"makespan": worse.makespan, "solver": "recompute-all",
                   "schedule": worse.schedule.tokens()}
    rec["bound"] = {"value": worse.makespan, "solver": "a wrong proof"}
    p = tmp_path / "wrong.json"
    p.write_text(json.dumps({"format": library.FORMAT, "instances": [rec]}))
    report = run_library_verify(LibraryVerifyConfig(path=str(p), solvers=("exhaustive",),
                                                    progress=False))
    assert [b["outcome"] for b in report["bugs"]] == ["below-bound"]


def test_library_flags_need_library(capsys):
    assert main(["verify", "--solver", "dp"]) == 2
    assert "go with --library" in capsys.readouterr().err


def test_verify_library_defaults_to_the_shipped_file(capsys):
    inst = library.load().instances[0]
    code = main(["verify", "--library", "--ids", inst.id, "--solver", "store-all",
                 "--solver", "exhaustive", "--json", "--no-progress"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["instances"] == 1 and report["library"] == "library.json"
    ex = next(r for r in report["details"][0]["results"] if r["solver"] == "exhaustive")
    assert ex["outcome"] == "solved" and library.same(ex["makespan"], inst.best_makespan)
    assert main(["verify", "--library", "--ids", "no/such/id", "--no-progress"]) == 2


@pytest.mark.slow
def test_a_quick_rebuild_agrees_with_the_shipped_file(tmp_path):
    # the generator is deterministic: where both the shipped file and a fresh quick build
    # prove an optimum for the same id, they prove the same one (same chain, same budget)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import build_library
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    out = tmp_path / "quick.json"
    assert build_library.main(["--quick", "--no-networks", "--time-limit", "2",
                               "--out", str(out)]) == 0
    fresh = {i.id: i for i in library.load(out).instances}
    shipped = {i.id: i for i in library.load().instances}
    common = [k for k in fresh if k in shipped]
    assert len(common) >= 0.9 * len(fresh)
    for k in common:
        a, b = fresh[k], shipped[k]
        assert a.chain == b.chain and a.budget == b.budget
        if a.proved and b.proved:
            assert library.same(a.best_makespan, b.best_makespan), k


@pytest.mark.slow
def test_a_time_limited_proof_stays_open_with_an_honest_bound():
    from remat_theory.analysis import families
    chain = families.make("random", 30, 0)
    b = chain.memory_lower_bound() + 5
    rec = solve_instance(chain, b, 0.5)
    assert rec["status"] == "open"  # at 30 stages and a tight budget 0.5 s proves nothing
    assert store_all_makespan(chain) <= rec["bound"]["value"] < rec["best"]["makespan"]
    library.replay_best(library.instance_from_dict(
        {"id": "t/open", "class": "t", "chain": chain.to_dict(), "budget": b, **rec}))
