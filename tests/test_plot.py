"""remat plot: the budgets cover every step, the frontier data agree with the solvers, the
profile agrees with the simulator, and a PNG is written."""
from __future__ import annotations

import pytest

import solvers
from remat_theory.analysis import families, plotting
from remat_theory.model.chain import Chain
from remat_theory.cli import main
from remat_theory.model.simulator import simulate
from solvers.exhaustive import min_feasible_budget

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_pareto_budgets_cover_every_integer_or_spread_evenly():
    chain = families.make("random", 4, seed=1)
    lb, top = chain.memory_lower_bound(), chain.store_all_memory()
    assert plotting.pareto_budgets(chain, 10_000) == list(range(lb - 1, top + 1))
    few = plotting.pareto_budgets(chain, 5)
    assert len(few) == 5 and few[0] == lb - 1 and few[-1] == top
    # sizes with a common divisor: budgets are multiples of it and still reach store-all
    big = Chain(chain.fwd_time, chain.bwd_time, [v * 1000 for v in chain.x_size],
                [v * 1000 for v in chain.tape_size], [v * 1000 for v in chain.fwd_overhead],
                [v * 1000 for v in chain.bwd_overhead])
    bb = plotting.pareto_budgets(big, 10_000)
    assert all(b % 1000 == 0 for b in bb) and bb[-1] == big.store_all_memory()
    assert len(bb) == top - lb + 2


def test_pareto_data_is_the_solvers_answers():
    chain = families.make("resnet", 3, seed=0)
    budgets = plotting.pareto_budgets(chain)
    data = plotting.pareto_data(chain, ["exhaustive", "store-all"], budgets, workers=1,
                                progress=False)
    assert data["errors"] == []
    m = min_feasible_budget(chain)
    ex = data["series"]["exhaustive"]
    assert [b for b, _ in ex] == budgets
    for b, v in ex:
        assert (v is None) == (b < m)
        if v is not None:
            assert v == pytest.approx(solvers.solve(chain, b, "exhaustive").makespan)
    vals = [v for _, v in ex if v is not None]
    assert all(a >= b - 1e-9 for a, b in zip(vals, vals[1:]))  # more memory never hurts
    assert [b for b, v in data["series"]["store-all"] if v is not None] == [chain.store_all_memory()]


def test_profile_series_follows_the_simulator():
    chain = families.make("transformer", 4, seed=0)
    sol = solvers.solve(chain, min_feasible_budget(chain), "exhaustive")
    prof = plotting.profile_series(chain, sol.schedule, sol.budget)
    sim = simulate(chain, sol.schedule, sol.budget)
    assert prof["steps"][-1][1] == pytest.approx(sim.makespan)
    assert max(s[3] for s in prof["steps"]) == sim.peak_memory <= sol.budget
    assert [s[5] for s in prof["steps"]] == sol.schedule.tokens()


def test_cli_writes_a_png_from_a_file_and_from_a_family(tmp_path):
    pytest.importorskip("matplotlib")
    chain = families.make("rnn", 3, seed=0)
    path = tmp_path / "c.json"
    chain.save(path)
    out = tmp_path / "a.png"
    assert main(["plot", str(path), "--out", str(out), "--solvers", "exhaustive,store-all",
                 "--workers", "1", "--max-points", "12"]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    out2 = tmp_path / "b.png"
    assert main(["plot", "--family", "homogeneous", "--stages", "3", "--out", str(out2),
                 "--solvers", "store-all,exhaustive", "--schedule-solver", "exhaustive",
                 "--budget", str(families.make("homogeneous", 3).store_all_memory()),
                 "--workers", "1"]) == 0
    assert out2.read_bytes()[:8] == PNG_MAGIC
    out3 = tmp_path / "c.png"
    assert main(["plot", str(path), "--out", str(out3), "--solvers", "store-all",
                 "--no-profile", "--workers", "1"]) == 0
    assert out3.read_bytes()[:8] == PNG_MAGIC


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["plot", "--out", str(tmp_path / "x.png")]) == 2
    assert "CHAIN.json or --family" in capsys.readouterr().err
    # without matplotlib (pip install -e ".[test]") the command stops at the import, also
    # in one line (tests/test_cli_errors.py); the budget is checked after it
    pytest.importorskip("matplotlib")
    assert main(["plot", "--family", "random", "--stages", "3", "--solvers", "store-all",
                 "--schedule-solver", "store-all", "--budget", "1", "--workers", "1",
                 "--out", str(tmp_path / "y.png")]) == 2
    assert "no schedule at budget 1" in capsys.readouterr().err
