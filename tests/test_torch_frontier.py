"""The frontier harness: the dominance analysis on hand-made points (exact answers), and one
tiny end-to-end run of every method family through the real harness."""
import statistics

import pytest

torch = pytest.importorskip("torch")

from remat_theory.torch.frontier import Point, dominance, format_table, run_frontier  # noqa: E402
from remat_theory.torch.networks import build  # noqa: E402


def _p(method, family, peak, t, status="ok"):
    return Point(method, family, peak=peak, time=t, status=status)


def test_dominance_finds_the_fastest_remat_point_at_no_more_memory():
    pts = [_p("plain", "plain", 100, 1.0),
           _p("remat:dp@1", "remat", 100, 1.01), _p("remat:dp@0.5", "remat", 60, 1.3),
           _p("remat:dp@0.2", "remat", 30, 2.0),
           _p("checkpoint_sequential:2", "checkpoint_sequential", 60, 1.25),
           _p("checkpoint_sequential:3", "checkpoint_sequential", 50, 1.2),
           _p("memory_budget:0.1", "memory_budget", None, None, status="error")]
    d = dominance(pts, time_tolerance=0.02)
    rows = {r["baseline"]: r for r in d["rows"]}
    assert set(rows) == {"plain", "checkpoint_sequential:2", "checkpoint_sequential:3"}
    assert rows["plain"]["remat"] == "remat:dp@1" and rows["plain"]["dominated"]  # 1% slower
    assert rows["checkpoint_sequential:2"]["remat"] == "remat:dp@0.5"
    assert not rows["checkpoint_sequential:2"]["dominated"]  # 1.3 > 1.25 * 1.02
    assert rows["checkpoint_sequential:3"]["remat"] == "remat:dp@0.2"
    assert not d["all_dominated"]
    assert d["remat_lowest_below_baselines"] and d["lowest"]["remat"]["peak"] == 30
    assert d["lowest"]["checkpoint_sequential"]["method"] == "checkpoint_sequential:3"


def test_dominance_with_no_remat_point_below_a_baseline():
    pts = [_p("remat:dp@0.5", "remat", 60, 1.0), _p("checkpoint_sequential:4", "checkpoint_sequential", 40, 2.0)]
    d = dominance(pts)
    assert d["rows"][0]["remat"] is None and not d["rows"][0]["dominated"]
    assert not d["remat_lowest_below_baselines"]


def test_a_tiny_frontier_runs_every_family_and_reports_each_point():
    torch.manual_seed(0)
    net = build("mlp", "test")
    rec = run_frontier(net, repeats=2, solvers=("dp",), fractions=(0.05, 1.0), segments=(2,),
                       compile_budgets=False, profile_repeats=1)
    by = {p["method"]: p for p in rec["points"]}
    assert set(by) == {"plain", "remat:dp@0.05", "remat:dp@1", "checkpoint_sequential:2"}
    # 5% of store-all is below what any schedule needs: the solver says so, nothing runs.
    assert by["remat:dp@0.05"]["status"] == "infeasible"
    assert "smallest feasible budget" in by["remat:dp@0.05"]["detail"]
    for name in ("plain", "remat:dp@1", "checkpoint_sequential:2"):
        p = by[name]
        assert p["status"] == "ok" and p["peak"] > 0 and len(p["times"]) == 2
        assert p["time"] == statistics.median(p["times"])
    text = format_table(rec)
    assert "checkpoint_sequential:2" in text and "plain" in text


@pytest.mark.slow
def test_compiled_remat_points_give_plain_autograd_gradients():
    """``compile_stages=True`` adds remat over compiled stages; where the compiler runs, a
    step computes the gradients plain autograd computes (compiled kernels may round
    differently: compared to 1e-5; the MLP's dropout draws eager's random numbers under
    ``fallback_random``, seeded alike); where it does not, one ``error`` point says why.
    Slow (inductor compiles C++ kernels: about a tenth of the suite's CPU time), as is
    tests/test_torch_module.py::test_compiled_stages_with_inductor; the wrapper under
    ``torch.compile`` is checked in CI with the eager backend (test_torch_module.py)."""
    import torch._inductor.config as iconfig

    from remat_theory.torch.frontier import prepare

    with iconfig.patch(fallback_random=True):
        _compiled_gradients(prepare)


def _compiled_gradients(prepare):

    torch.manual_seed(0)
    net = build("mlp", "test")
    methods, _ = prepare(net, solvers=("dp",), fractions=(1.0, 0.6), segments=(),
                         compile_budgets=False, compile_stages=True, profile_repeats=1)
    compiled = [m for m in methods if m.point.method.startswith("remat-compiled")]
    assert compiled
    if compiled[0].point.status == "error":
        assert len(compiled) == 1 and compiled[0].point.detail
        return
    params = list(net.model.parameters())

    def grads(step):
        for p in params:
            p.grad = None
        torch.manual_seed(1)
        step()
        return [p.grad.clone() for p in params]

    plain = grads(methods[0].step)
    ran = [m for m in compiled if m.step is not None]
    assert ran
    for m in ran:
        for g, ref in zip(grads(m.step), plain):
            torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-6)
