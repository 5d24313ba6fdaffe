"""The frontier harness: the analysis on hand-made points (exact answers), the breakpoints
against a brute-force sweep of the solver, one fast run of the runner's structure, and (slow)
one tiny transformers network through every method, Hugging Face's checkpointing and
compiled remat included."""
import statistics

import pytest

torch = pytest.importorskip("torch")

import solvers  # noqa: E402
from remat_theory.model.chain import Chain  # noqa: E402
from remat_theory.model.errors import InfeasibleBudgetError  # noqa: E402
from remat_theory.torch.modules.checkpointed import (Budget, CheckpointOptions,  # noqa: E402
                                                     CheckpointedSequential)
from remat_theory.lab.frontier_methods import Point, drop_in_states, remat_breakpoints  # noqa: E402
from remat_theory.lab.frontier import dominance, format_table, run_frontier  # noqa: E402
from remat_theory.lab.frontier_noise import noise  # noqa: E402
from remat_theory.lab.frontier_networks import from_network  # noqa: E402
from remat_theory.lab.networks import build  # noqa: E402
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


def _p(method, family, peak, times, status="ok", **kw):
    p = Point(method, family, peak=peak, times=list(times), status=status, **kw)
    p.time = statistics.median(times) if times else None
    return p


def test_dominance_pairs_rounds_and_finds_the_fastest_remat_point_at_no_more_memory():
    # round 2 is slow for everything (a busy machine): per-round ratios ignore it
    pts = [_p("plain", "plain", 100, [1.0, 3.0, 1.0], param=1),
           _p("plain:2", "plain", 100, [1.0, 3.0, 1.01], param=2),
           _p("remat:1.0000", "remat", 100, [1.01, 3.03, 1.01], param=100, predicted_peak=100),
           _p("remat:0.6000", "remat", 60, [1.3, 3.9, 1.3], param=60, predicted_peak=60),
           _p("remat:0.3000", "remat", 30, [2.0, 6.0, 2.0], param=30, predicted_peak=30),
           _p("remat_compiled:0.6000", "remat_compiled", 55, [1.1, 3.3, 1.1], param=60),
           _p("checkpoint_sequential:2", "checkpoint_sequential", 60, [1.25, 3.75, 1.25]),
           _p("checkpoint_sequential:3", "checkpoint_sequential", 50, [1.2, 3.6, 1.2]),
           _p("hf_checkpointing:1", "hf_checkpointing", 40, [1.5, 4.5, 1.5]),
           _p("compile_budget:0.5", "compile_budget", 70, [1.0, 3.0, 1.0]),
           _p("compile_budget:0", "compile_budget", None, [], status="error")]
    d = dominance(pts)
    assert d["noise"]["plain_repeat"] == pytest.approx(1.0)
    assert d["noise"]["remat_store_all"] == pytest.approx(1.01)
    assert d["tolerance"] == pytest.approx(0.02)  # the floor: the noise measured is 1%
    rows = {r["baseline"]: r for r in d["rows"]}
    assert set(rows) == {"plain", "checkpoint_sequential:2", "checkpoint_sequential:3",
                         "hf_checkpointing:1", "compile_budget:0.5"}  # not plain:2, not errors
    assert rows["plain"]["remat"] == "remat:1.0000" and rows["plain"]["dominated"]
    assert rows["checkpoint_sequential:2"]["remat"] == "remat_compiled:0.6000"
    assert rows["checkpoint_sequential:2"]["time_ratio"] == pytest.approx(1.1 / 1.25)
    assert rows["checkpoint_sequential:3"]["remat"] == "remat:0.3000"
    assert not rows["checkpoint_sequential:3"]["dominated"]
    assert not rows["hf_checkpointing:1"]["dominated"]
    assert rows["compile_budget:0.5"]["compiled_time_ratio"] == pytest.approx(1.1)
    assert not rows["compile_budget:0.5"]["dominated"]
    assert d["goals"] == {"lowest_memory": True, "hf_and_checkpoint_sequential_dominated": False,
                          "compile_budget_dominated": False, "below_compile_lowest": True,
                          "compile_budget_dominated_by_compiled_remat": False,
                          "compiled_remat_below_compile_lowest": True}


def test_noise_widens_the_tolerance():
    pts = [_p("plain", "plain", 100, [1.0, 1.0, 1.0], param=1),
           _p("plain:2", "plain", 100, [1.06, 1.05, 1.07], param=2),
           _p("remat:0.5", "remat", 50, [1.07, 1.07, 1.07], param=50, predicted_peak=50),
           _p("checkpoint_sequential:2", "checkpoint_sequential", 50, [1.0, 1.0, 1.0])]
    assert noise([vars(p) for p in pts])["tolerance"] == pytest.approx(0.07)
    d = dominance(pts)
    assert d["rows"][1]["dominated"]  # 7% slower is within the measured noise
    assert not dominance(pts, tolerance=0.02)["rows"][1]["dominated"]


def test_the_verdict_uses_the_clock_with_less_noise():
    """Wall times of a shared machine (other jobs take the core in some rounds) against the
    timing thread's CPU times (the step's own work): the CPU clock's noise is the smaller, and
    the verdict follows it (remat 4% faster by CPU time, 30% slower by the wall clock)."""
    def pt(method, family, peak, wall, cpu, **kw):
        p = _p(method, family, peak, wall, **kw)
        p.cpu_times = list(cpu)
        return p
    pts = [pt("plain", "plain", 100, [1.0, 2.0, 1.0, 1.5], [1.0, 1.0, 1.0, 1.0], param=1),
           pt("plain:2", "plain", 100, [1.8, 1.0, 1.2, 1.0], [1.01, 1.0, 1.0, 1.01], param=2),
           pt("remat:1.0000", "remat", 100, [1.0, 1.0, 2.2, 1.0], [1.0, 1.01, 1.0, 1.0],
              param=100, predicted_peak=100),
           pt("remat:0.5000", "remat", 50, [1.3, 1.3, 1.3, 1.3], [1.2, 1.2, 1.2, 1.2],
              param=50, predicted_peak=50),
           pt("checkpoint_sequential:2", "checkpoint_sequential", 50, [1.0, 1.0, 1.0, 1.0],
              [1.25, 1.25, 1.25, 1.25])]
    d = dominance(pts)
    assert d["clock"] == "thread_cpu"
    assert d["noise_by_clock"]["thread_cpu"]["tolerance"] == pytest.approx(0.02)
    assert d["noise_by_clock"]["wall"]["tolerance"] > 0.3
    row = next(r for r in d["rows"] if r["baseline"] == "checkpoint_sequential:2")
    assert row["time_ratio"] == pytest.approx(1.2 / 1.25) and row["dominated"]
    wall = dominance(pts, clock="wall")
    row = next(r for r in wall["rows"] if r["baseline"] == "checkpoint_sequential:2")
    assert row["time_ratio"] == pytest.approx(1.3)


def test_breakpoints_are_every_makespan_level_of_a_brute_force_sweep():
    chain = Chain(fwd_time=[3, 1, 4, 1, 5, 2], bwd_time=[6, 2, 8, 2, 10, 4, 1],
                  x_size=[40, 30, 50, 20, 60, 30, 10], tape_size=[70, 60, 90, 70, 80, 50])
    got = remat_breakpoints(chain, [], "dp", resolution=10**6, max_points=10**6)
    rc = rounded_chain(chain, auto_unit(chain))

    def makespan(b):
        s = solvers.solve(rc, b, "dp")
        return None if s.schedule is None else round(s.makespan, 12)
    store_all = chain.store_all_memory()
    levels = {}
    for b in range(1, store_all + 1):
        m = makespan(b)
        if m is not None and m not in levels:
            levels[m] = b  # the smallest budget of each level
    if makespan(store_all) in levels and levels[makespan(store_all)] != store_all:
        levels["store-all"] = store_all  # store-all itself is measured too
    assert sorted(got) == sorted(levels.values())


def test_breakpoints_spread_keeps_the_levels_it_must_cover():
    chain = Chain(fwd_time=[3, 1, 4, 1, 5, 2], bwd_time=[6, 2, 8, 2, 10, 4, 1],
                  x_size=[40, 30, 50, 20, 60, 30, 10], tape_size=[70, 60, 90, 70, 80, 50])
    every = remat_breakpoints(chain, [], "dp", max_points=10**6)
    assert len(every) > 4
    spread = remat_breakpoints(chain, [], "dp", max_points=3)
    assert spread == [every[0], every[len(every) // 2 if len(every) % 2 else
                                        round((len(every) - 1) / 2)], every[-1]]
    missing = next(b for b in every if b not in spread)
    covered = remat_breakpoints(chain, [], "dp", max_points=3, cover=[missing - 1])
    assert covered == sorted(spread + [missing])  # the lowest level at or above missing - 1


def test_every_breakpoint_of_a_dropout_model_is_accepted_and_held_by_the_drop_in():
    """The breakpoints are the drop-in's own levels, its checkpoints' random-generator states
    counted: the lowest is the drop-in's smallest feasible budget (one byte less is refused,
    naming it), and at every breakpoint the drop-in accepts the budget, predicts a peak
    within it, and the allocator measures the step's activation memory within it."""
    from remat_theory.torch.profiling.profiler import profile
    from remat_theory.torch.tracker import allocator_peak
    torch.manual_seed(0)
    w = from_network(build("transformer", "test"))
    chain = profile(list(w.stages), w.example_input, w.loss_fn, repeats=1)
    states = drop_in_states(w.stages, w.example_input)
    assert any(states["draws"]) and states["state_bytes"] > 0  # dropout draws on the CPU
    every = remat_breakpoints(chain, w.stages, max_points=10**6, **states)
    low = every[0]
    assert low < chain.store_all_memory()
    with pytest.raises(InfeasibleBudgetError) as e:
        CheckpointedSequential(list(w.stages), Budget.activations(low - 1),
                               example_input=w.example_input,
                               loss_fn=w.loss_fn, options=CheckpointOptions(chain=chain))
    assert e.value.smallest_feasible == low
    # without the states counted the lowest level is below what the drop-in accepts
    assert remat_breakpoints(chain, w.stages, max_points=10**6)[0] < low
    params = [p for s in w.stages for p in s.parameters() if p.requires_grad]
    for b in every:
        ck = CheckpointedSequential(list(w.stages), Budget.activations(b),
                                    example_input=w.example_input,
                                    loss_fn=w.loss_fn, options=CheckpointOptions(chain=chain))
        assert ck.plan.predicted_peak <= b

        def step():
            w.loss_fn(ck(w.example_input)).backward()
        for p in params:
            p.grad = None
        step()  # warm the allocator
        for p in params:
            p.grad = None
        peak = allocator_peak(step, torch.device("cpu"),
                              persistent=lambda: [p.grad for p in params])
        for p in params:
            p.grad = None
        assert peak <= b, (b, peak, ck.plan.predicted_peak)


def test_the_runner_measures_every_point_of_a_hand_split_network():
    """Structure (fast): plain twice, remat at given budgets (one infeasible), every
    checkpoint_sequential; no HF (an nn.Sequential has none), no compiler."""
    torch.manual_seed(0)
    w = from_network(build("transformer", "test"))
    from remat_theory.torch.plan.levels import plain_loss_bytes
    from remat_theory.torch.profiling.profiler import profile_details
    prof = profile_details(list(w.stages), w.example_input, w.loss_fn, repeats=1)
    chain = prof.chain
    store_all = chain.store_all_memory()
    # the drop-in's smallest feasible budget (its checkpoints' random-generator states
    # counted: this transformer draws, dropout; the loss tensor as profiled)
    low = remat_breakpoints(chain, w.stages, loss_bytes=prof.loss_bytes,
                            **drop_in_states(w.stages, w.example_input))[0]
    assert low < store_all
    # where the drop-in runs plain autograd: store-all and the loss tensor beyond a scalar
    top = store_all + plain_loss_bytes(prof.loss_bytes)
    rec = run_frontier(w, repeats=2, budgets=(1, low, top), segments=(2, 3),
                       compile_budgets=(), compiled_points=0, profile_repeats=1)
    by = {p["method"]: p for p in rec["points"]}
    by["remat:1.0000"] = by[f"remat:{top / store_all:.4f}"]
    assert set(by) == {"plain", "plain:2", "hf_checkpointing", f"remat:{1 / store_all:.4f}",
                       f"remat:{low / store_all:.4f}", "remat:1.0000",
                       f"remat:{top / store_all:.4f}",
                       "checkpoint_sequential:2", "checkpoint_sequential:3"}
    assert by["hf_checkpointing"]["status"] == "unsupported"
    assert by[f"remat:{1 / store_all:.4f}"]["status"] == "infeasible"
    assert "smallest feasible budget" in by[f"remat:{1 / store_all:.4f}"]["detail"]
    for p in rec["points"]:
        if p["status"] != "ok":
            continue
        assert p["peak"] > 0 and p["step_peak"] >= p["peak"] and len(p["times"]) == 2
        assert p["time"] == statistics.median(p["times"])
        assert p["grads_equal"] is True and p["grad_rel_diff"] == 0.0, p["method"]
    # at store-all the drop-in is plain autograd: the same bytes as the plain model
    assert by["remat:1.0000"]["peak"] == by["plain"]["peak"]
    assert by[f"remat:{low / store_all:.4f}"]["peak"] < by["plain"]["peak"]
    assert rec["dominance"]["rows"] and "noise" in rec["dominance"]
    assert "checkpoint_sequential:2" in format_table(rec)


@pytest.mark.slow
def test_every_method_on_a_tiny_transformers_network():
    pytest.importorskip("transformers")
    from remat_theory.lab.frontier_networks import build_workload
    w = build_workload("gpt2", "test")
    rec = run_frontier(w, repeats=2, compile_budgets=(0.0, 1.0), compiled_points=3,
                       backend="aot_eager_decomp_partition", step_budgets=("1MiB",),
                       profile_repeats=1)
    fams = {}
    for p in rec["points"]:
        fams.setdefault(p["family"], []).append(p)
    for fam in ("plain", "hf_checkpointing", "checkpoint_sequential", "compile_budget",
                "remat", "remat_compiled"):
        assert any(p["status"] == "ok" for p in fams[fam]), fam
    for p in rec["points"]:
        if p["status"] != "ok":
            continue
        if p["family"] in ("compile_budget", "remat_compiled"):
            assert p["grad_rel_diff"] < 1e-5, p["method"]  # compiled kernels round otherwise
        else:
            assert p["grads_equal"], p["method"]
    # compiled remat runs single-level schedules over the torch.export capture (whose stages
    # hand masks on), near its prediction (the chain of the stages compiled one by one; at
    # this tiny scale the whole graph's temporaries differ by up to 6%): one graph cannot
    # replay a nested one
    compiled = [p for p in fams["remat_compiled"] if p["status"] == "ok"]
    assert len(compiled) == 3 and all(p["detail"].startswith("single-level") for p in compiled)
    for p in compiled:
        assert p["peak"] <= 1.10 * p["predicted_peak"], (p["method"], p["peak"],
                                                          p["predicted_peak"])
    assert all(p["backend"] == "aot_eager_decomp_partition"
               for p in compiled + fams["compile_budget"])
    # both clocks timed every point; the verdicts use the one with less noise
    for p in rec["points"]:
        if p["status"] == "ok":
            assert len(p["cpu_times"]) == len(p["times"]) == 2
    d = rec["dominance"]
    assert d["clock"] == min(("thread_cpu", "wall"),
                             key=lambda c: d["noise_by_clock"][c]["tolerance"])
    # HF every layer holds less than plain; remat's lowest is below HF's lowest here
    low = rec["dominance"]["lowest"]
    assert low["hf_checkpointing"]["peak"] < low["plain"]["peak"]
    step = next(p for p in rec["points"] if p["method"] == "remat_step:1MiB")
    assert step["within_budget"] is True


def test_the_round_to_round_spread_of_a_same_kernels_pair_is_noise():
    pts = [_p("plain", "plain", 100, [1.0] * 5, param=1),
           _p("plain:2", "plain", 100, [0.8, 1.2, 1.0, 0.9, 1.1], param=2)]
    nz = noise([vars(p) for p in pts])
    assert nz["plain_repeat"] == pytest.approx(1.0)
    assert nz["plain_repeat_half_iqr"] == pytest.approx(0.15)  # quartiles 0.85 and 1.15
    assert nz["tolerance"] == pytest.approx(0.15)


def test_flat_levels_are_the_pareto_front_of_every_single_level_schedule_by_the_simulator():
    """The compiled family's levels against an independent oracle: every checkpoint set's
    schedule replayed by the simulator, the fastest at each peak kept."""
    import itertools
    import random

    from remat_theory.model.simulator import simulate
    from remat_theory.lab.frontier_methods import flat_levels
    from solvers._schedules import segments_schedule
    rng = random.Random(7)
    for _ in range(6):
        L = rng.randint(1, 7)
        x = [rng.randint(1, 50) for _ in range(L + 1)]
        chain = Chain(x_size=x, tape_size=[x[i + 1] + rng.randint(0, 90) for i in range(L)],
                      fwd_time=[rng.uniform(0.5, 3) for _ in range(L)],
                      bwd_time=[rng.uniform(0.5, 3) for _ in range(L + 1)])
        every = []
        for r in range(L):
            for cps in itertools.combinations(range(1, L), r):
                sim = simulate(chain, segments_schedule(chain, list(cps)))
                every.append((sim.peak_memory, sim.makespan))
        front = flat_levels(chain)
        for peak, t, cps in front:
            sim = simulate(chain, segments_schedule(chain, list(cps)))
            assert (sim.peak_memory, round(sim.makespan, 9)) == (peak, round(t, 9))
        # no single-level schedule is better in both; each peak's fastest is on the front
        for peak, t in every:
            assert any(fp <= peak and ft <= t + 1e-9 for fp, ft, _ in front), (peak, t)
        assert min(p for p, _ in every) == front[0][0]
        assert [p for p, _, _ in front] == sorted({p for p, _, _ in front})


def test_single_level_tree_runs_the_segment_checkpoint_schedule_op_for_op():
    """The compiled family's nested form against the solvers' own segment schedule."""
    import itertools

    from remat_theory.lab.frontier_methods import single_level_tree
    from remat_theory.torch.plan.nested_form import nested_schedule
    from solvers._schedules import segments_schedule
    for L in range(1, 8):
        chain = Chain(x_size=[4] * (L + 1), tape_size=[5] * L, fwd_time=[1.0] * L,
                      bwd_time=[1.0] * (L + 1))
        for r in range(L):
            for cps in itertools.combinations(range(1, L), r):
                got = [o.token for o in nested_schedule(single_level_tree(cps, L), L)]
                assert got == [o.token for o in segments_schedule(chain, list(cps))], cps
    with pytest.raises(Exception, match="must lie in 1..3"):
        single_level_tree([4], 4)


def _mlp_workload(n=8, width=64, batch=64):
    from torch import nn

    from remat_theory.lab.frontier import Workload
    torch.manual_seed(0)
    stages = [nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
              for _ in range(n)]
    model = nn.Sequential(*stages)
    x = torch.randn(batch, width)
    return Workload("mlp", model, lambda m: m(x), lambda y: y.square().mean(), x, stages)


@pytest.mark.slow
def test_compiled_remat_holds_no_more_than_its_prediction_where_nesting_would_not():
    """The regression of compiled nested remat (GPT-2's lowest held 2.3 times its
    prediction): one compiled graph recomputes each forward operation at most once in its
    backward, so a nested schedule compiles as its outermost checkpoints alone.  The
    compiled family now runs single-level schedules: at its lowest level the allocator's
    peak is at most its prediction (+3%), where the DP's lowest (nested) schedule, compiled
    the same way, holds what its outer checkpoints alone predict, far above its own."""
    from remat_theory.lab.frontier_methods import (compiled_sweep, remat_compiled, drop_in,
                                                   flat_drop_in, flat_levels)
    from remat_theory.torch.plan.nested_form import Checkpointed
    from remat_theory.torch.profiling.profiler import profile
    from remat_theory.torch.tracker import allocator_peak
    w = _mlp_workload()
    params = list(w.model.parameters())

    def peak_of(m):
        for p in params:
            p.grad = None
        return allocator_peak(m.step, torch.device("cpu"),
                              persistent=lambda: [p.grad for p in params])
    # aot_eager: the compiler's own recompute regions without the decomposed kernels'
    # workspaces (aot_eager_decomp_partition's GELU backward holds ~4 more hidden-sized
    # temporaries than eager's one kernel, in every family alike)
    backend = "aot_eager"
    [low] = compiled_sweep(w, 1, backend, 1)
    assert low.point.status == "ok", low.point.detail
    assert peak_of(low) <= 1.03 * low.point.predicted_peak
    # the cause, measured: the DP's lowest schedule nests; compiled, it holds what its
    # outermost checkpoints alone (a single-level schedule) predict
    chain = profile(w.stages, w.example_input, w.loss_fn, repeats=1)
    pt = Point("nested", "remat_compiled")
    low = remat_breakpoints(chain, w.stages, **drop_in_states(w.stages, w.example_input))[0]
    ck = drop_in(w, low, "dp", chain, pt)
    assert ck is not None, pt.detail
    tree, outer = ck.plan.tree, []
    assert any(isinstance(n, Checkpointed) and _holds_checkpoint(n.inner) for n in _top(tree))
    for n in _top(tree):
        if isinstance(n, Checkpointed):
            outer += [n.s, n.k]
    outer = sorted({c for c in outer if 0 < c < chain.length})
    nested = remat_compiled(w, tree, ck.stages_list, pt, backend, 99)
    got = peak_of(nested)
    assert got > 1.5 * ck.plan.predicted_peak
    assert got == pytest.approx(flat_drop_in(chain, w.stages, outer)[1], rel=0.05)
    assert flat_levels(chain)[0][0] < got


def _top(tree):
    while hasattr(tree, "rest"):  # the segment's top level, up to its End
        yield tree
        tree = tree.rest


def _holds_checkpoint(node):
    from remat_theory.torch.plan.nested_form import Checkpointed
    return any(isinstance(n, Checkpointed) for n in _top(node))


def _hf_oracle_schedule(L: int, checkpointed) -> "Schedule":
    """Hugging Face's every-k-layers schedule written out op by op from its definition: a
    checkpointed stage runs without its tape in the forward (keeping its input) and again
    with it just before its backward; every other stage keeps its tape."""
    from remat_theory.model.schedule import Op, Schedule
    ops = [Op("Fck", i) if i in checkpointed else Op("Fall", i) for i in range(L)]
    ops.append(Op("Loss"))
    for i in range(L - 1, -1, -1):
        if i in checkpointed:
            ops.append(Op("Fall", i))
        ops.append(Op("B", i))
    return Schedule(ops)


def test_a_breakpoint_sits_at_each_hugging_face_level():
    """Each HF every-k-layers schedule on the captured chain is the hand-written one (every
    k-th layer's stage recomputed, as transformers checkpoints ``layer_index % k == 0``); its
    level is at least its simulated peak; and the breakpoints, spread to their fewest,
    still keep the lowest level at or above it, where the DP is no slower than HF's
    schedule on the chain it solves."""
    pytest.importorskip("transformers")
    from remat_theory.model.simulator import simulate
    from remat_theory.lab.frontier_methods import hf_layers, hf_schedule_peaks, hf_schedule_tree
    from remat_theory.lab.frontier_networks import build_workload
    from remat_theory.torch.plan.levels import shared_parameter_bytes
    from remat_theory.torch.plan.nested_form import nested_schedule
    from remat_theory.torch.profiling.profiler import profile_details
    torch.manual_seed(0)
    w = build_workload("llama", "test")
    stages = list(w.stages)
    L = len(stages)
    layers = [i for i, s in enumerate(stages) if s.kind == "layer"]
    n = hf_layers(w.model)
    assert n >= 2 and len(layers) == n
    prof = profile_details(stages, w.example_input, w.loss_fn, repeats=1)
    chain, rc = prof.chain, rounded_chain(prof.chain, auto_unit(prof.chain))
    states = drop_in_states(stages, w.example_input)
    reserve = 2 * shared_parameter_bytes(stages)
    ks = list(range(1, n + 1))
    levels = hf_schedule_peaks(chain, stages, ks, loss_bytes=prof.loss_bytes, **states)
    every = remat_breakpoints(chain, stages, max_points=10**6, loss_bytes=prof.loss_bytes,
                              **states)
    few = remat_breakpoints(chain, stages, max_points=2, cover=levels,
                            loss_bytes=prof.loss_bytes, **states)
    bare = remat_breakpoints(chain, stages, max_points=2, loss_bytes=prof.loss_bytes, **states)
    assert len(bare) == 2 and len(every) > 2
    # the spread alone skips some HF level's breakpoint: the cover is what keeps it
    assert any(next(b for b in every if b >= level) not in bare for level in levels)
    for k, level in zip(ks, levels):
        hand = _hf_oracle_schedule(L, {layers[j] for j in range(0, n, k)})
        tree = hf_schedule_tree(stages, k)
        assert [o.token for o in nested_schedule(tree, L)] == hand.tokens(), k
        sim = simulate(rc, hand)
        assert level >= sim.peak_memory + reserve
        at = next(b for b in every if b >= level)  # the level's breakpoint: kept
        assert at in few, (k, level, every, few)
        below = [b for b in every if b < at]
        assert not below or below[-1] < level
        ck = CheckpointedSequential(stages, Budget.activations(at), example_input=w.example_input,
                                    loss_fn=w.loss_fn,
                                    options=CheckpointOptions(
                                        chain=chain, loss_bytes=prof.loss_bytes,
                                        input_grad_bytes=prof.input_grad_bytes))
        assert ck.plan.predicted_peak <= at
        assert ck.solution.makespan <= simulate(chain, hand).makespan + 1e-9, k


def test_breakpoints_count_the_profiled_loss_tensor():
    """With an MSE loss the loss tensor holds a buffer the size of the output on the CPU
    (``ProfileResult.loss_bytes``): the breakpoints given it are the drop-in's own levels
    (the lowest is its smallest feasible budget, the highest the budget where it runs plain
    autograd), and without it the lowest is below what the drop-in accepts."""
    from torch import nn

    from remat_theory.torch.plan.levels import plain_loss_bytes
    from remat_theory.torch.profiling.profiler import profile_details
    torch.manual_seed(0)
    stages = [nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 32))
              for _ in range(5)]
    x = torch.randn(16, 32)

    def loss_fn(y):
        return nn.functional.mse_loss(y, torch.zeros_like(y))
    prof = profile_details(stages, x, loss_fn, repeats=1)
    assert prof.loss_bytes > 8  # the precondition: a loss tensor beyond a scalar
    chain = prof.chain
    sizes = dict(loss_bytes=prof.loss_bytes, input_grad_bytes=prof.input_grad_bytes)
    states = drop_in_states(stages, x)
    got = remat_breakpoints(chain, stages, max_points=10**6, **sizes, **states)
    bare = remat_breakpoints(chain, stages, max_points=10**6, **states)
    assert got[-1] == chain.store_all_memory() + plain_loss_bytes(prof.loss_bytes)
    top = CheckpointedSequential(stages, Budget.activations(got[-1]), example_input=x,
                                 loss_fn=loss_fn,
                                 options=CheckpointOptions(chain=chain, **sizes))
    assert top.plan.tree is None  # plain autograd there
    with pytest.raises(InfeasibleBudgetError) as e:
        CheckpointedSequential(stages, Budget.activations(got[0] - 1), example_input=x,
                               loss_fn=loss_fn,
                               options=CheckpointOptions(chain=chain, **sizes))
    assert e.value.smallest_feasible == got[0]
    assert bare[0] < got[0]
    for b in got:
        ck = CheckpointedSequential(stages, Budget.activations(b), example_input=x,
                                    loss_fn=loss_fn,
                                    options=CheckpointOptions(chain=chain, **sizes))
        assert ck.plan.predicted_peak <= b


def test_no_hugging_face_schedule_is_claimed_where_its_layers_nest_or_are_absent():
    """Swin's stages are checkpointing layers holding its blocks (HF's schedule is nested
    there); ResNet has none: neither gets a single-level HF schedule on its seams."""
    pytest.importorskip("transformers")
    from transformers.modeling_layers import GradientCheckpointingLayer

    from remat_theory.lab.frontier_methods import hf_schedule_tree
    from remat_theory.lab.frontier_networks import build_workload
    swin = build_workload("swin", "test")
    layers = [m for m in swin.model.modules() if isinstance(m, GradientCheckpointingLayer)]
    assert any(isinstance(s, GradientCheckpointingLayer)
               for m in layers for s in list(m.modules())[1:])  # the precondition: nested
    assert hf_schedule_tree(list(swin.stages), 1) is None
    resnet = build_workload("resnet", "test")
    assert not any(isinstance(m, GradientCheckpointingLayer) for m in resnet.model.modules())
    assert hf_schedule_tree(list(resnet.stages), 1) is None


@pytest.mark.slow  # an experiment driver's rows; the in-place API at HF's levels: test_inplace_models.py
def test_the_in_place_api_as_a_method_of_the_frontier():
    """``remat_inplace``: the in-place API on copies of the original model, selected alone
    with plain and HF (nothing captured), at its plan's breakpoints, at each HF level's
    measured step peak (refused budgets run at the smallest feasible, which is recorded),
    and at plain autograd through the hooks; gradients equal plain's bit for bit."""
    pytest.importorskip("transformers")
    from remat_theory.lab.frontier_networks import build_workload
    w = build_workload("llama", "test", granularity=None)
    assert w.stages is None
    rec = run_frontier(w, repeats=2, families=("plain", "hf_checkpointing", "remat_inplace"))
    fams = {p["family"] for p in rec["points"]}
    assert fams == {"plain", "hf_checkpointing", "remat_inplace"}
    pts = {p["method"]: p for p in rec["points"]}
    inplace = [p for p in rec["points"] if p["family"] == "remat_inplace"]
    assert all(p["status"] == "ok" and p["grads_equal"] for p in inplace)
    assert {"remat_inplace:hf1", "remat_inplace:hf2", "remat_inplace:store-all",
            "remat_inplace:fraction-smallest"} <= set(pts)
    hf1 = pts["remat_inplace:hf1"]
    if "refused:" in hf1["detail"]:
        assert hf1["budget"] > pts["hf_checkpointing:1"]["step_peak"]
    else:
        assert hf1["budget"] == pts["hf_checkpointing:1"]["step_peak"]
    assert pts["remat_inplace:store-all"]["recomputed"] == 0
    assert pts["remat_inplace:hf1"]["recomputed"] > 0
    assert "inplace_store_all" in rec["dominance_inplace"]["noise"]
    assert rec["dominance_inplace_step"]["memory"] == "step_peak"
    # the in-place rows compare HF's points with in-place points only
    assert all(r["remat"] is None or r["remat"].startswith("remat_inplace:")
               for r in rec["dominance_inplace"]["rows"])
    assert "remat_inplace" in format_table(rec)
