"""The profiler: sizes against independent counts, the two tape measures against each
other, and profiling leaves the model untouched."""
import _bench
import pytest
from _tiers import tiered

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from remat_theory.model.chain import Chain  # noqa: E402
from remat_theory.model.errors import RematError  # noqa: E402
from remat_theory.torch import profile, profile_details, split_stages  # noqa: E402
from remat_theory.lab.networks import build  # noqa: E402
from remat_theory.torch.tracker import AllocatorMeter, MemoryTracker, allocator_peak  # noqa: E402
from torch_device import DEVICE, rng_states, same_rng  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


@pytest.mark.parametrize("network", tiered(["mlp", "resnet", "transformer", "rnn"], ["transformer", "rnn"]))
def test_profile_sizes(network):
    net = build(network, "test").to(DEVICE)
    res = profile_details(net.model, net.example_input, net.loss_fn, repeats=1, warmup=0)
    chain = res.chain
    stages = split_stages(net.model)
    assert chain.length == len(stages)
    # x sizes: bytes of each stage output, by an independent plain forward pass
    x = net.example_input
    sizes = [x.numel() * x.element_size()]
    with torch.no_grad():
        for s in stages:
            x = s(x)
            sizes.append(_block(x.numel() * x.element_size()))
    assert list(chain.x_size) == sizes
    # tapes: saved_tensors_hooks and the allocator agree (on CUDA the allocator's blocks are
    # rounded up), and hold at least the output
    if DEVICE.type == "cuda":
        assert all(a >= h for a, h in zip(res.allocator_tape_size, res.hook_tape_size))
    else:
        assert res.hook_tape_size == res.allocator_tape_size
    assert list(chain.tape_size) == res.allocator_tape_size
    assert all(t >= x for t, x in zip(chain.tape_size, chain.x_size[1:]))
    assert all(t > 0 for t in chain.fwd_time + chain.fall_time + chain.bwd_time)
    assert Chain.from_json(chain.to_json()) == chain
    # parameter gradients: persistent, beside the chain, counted whole
    assert res.param_grad_bytes == sum(_block(p.numel() * p.element_size())
                                       for p in net.model.parameters())


def _block(n: int) -> int:
    """Bytes the allocator gives an n-byte tensor: n on the CPU; on CUDA the caching
    allocator's block, n rounded up to a multiple of 512 (small tensors)."""
    return -(-n // 512) * 512 if DEVICE.type == "cuda" else n


def test_tape_of_known_stages():
    """Linear saves its input (not in the tape) and its weight (a parameter): tape = output.
    ReLU saves its output: tape = output.  Dropout saves its scaled mask (float): 2 outputs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))
    x = torch.randn(32, 8)
    chain = profile(model, x, lambda y: y.square().mean(), repeats=1, warmup=0)
    out = 32 * 16 * 4
    assert list(chain.x_size) == [32 * 8 * 4, out, out, out, 32 * 4 * 4]
    assert list(chain.tape_size) == [out, out, 2 * out, 32 * 4 * 4]


def test_profile_leaves_model_state_and_rng_alone():
    net = build("resnet", "test").to(DEVICE)
    before = {k: v.clone() for k, v in net.model.state_dict().items()}
    rng = rng_states()
    profile(net.model, net.example_input, net.loss_fn, repeats=2, warmup=1)
    assert all(torch.equal(before[k], v) for k, v in net.model.state_dict().items())
    assert all(p.grad is None for p in net.model.parameters())
    assert same_rng(rng, rng_states())


def test_nested_sequentials_are_flattened_and_lists_kept():
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)
    assert split_stages(nn.Sequential(nn.Sequential(a, b), c)) == [a, b, c]
    group = nn.Sequential(a, b)
    assert split_stages([group, c]) == [group, c]


@pytest.mark.parametrize("model, match", [
    (nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True)), "in place"),
    (nn.Sequential(nn.Linear(4, 4), nn.Flatten(0)), "view of its input"),
    (nn.Linear(4, 4), "nn.Sequential or a list"),
    (nn.Sequential(), "no stages"),
])
def test_bad_models_are_refused_with_a_reason(model, match):
    with pytest.raises(RematError, match=match):
        profile(model, torch.randn(3, 4), lambda y: y.sum(), repeats=1, warmup=0)


def test_bad_arguments():
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(RematError, match="repeats"):
        profile(model, torch.randn(3, 4), lambda y: y.sum(), repeats=0)
    with pytest.raises(RematError, match="example_input"):
        profile(model, [1, 2], lambda y: y.sum())


def test_gpu_timer_ab_benchmark_runs_and_predicts_each_schedule(tmp_path):
    """benchmarks/gpu_timer_ab.py (the A/B of the GPU stage timer) on the test device: every
    record carries one prediction per profile, each the simulator's makespan (positive)."""
    import json

    mod = _bench.load("gpu_timer_ab")
    out = tmp_path / "ab.json"
    assert mod.main(["--device", DEVICE.type, "--scale", "test", "--models", "mlp", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert {r["solver"] for r in records} >= {"store-all", "recompute-all"}
    for r in records:
        for v, _ in mod.VARIANTS:
            assert r["pred_" + v] > 0 and r["ratio_" + v] == r["measured"] / r["pred_" + v]


def test_recording_and_no_grad_forwards_are_profiled_apart():
    """A transformer layer without grad frees its intermediates as it goes (a transient,
    fwd_overhead); recording, it keeps them in the tape (fall_overhead near 0).  Both are
    what the allocator saw: replaying each op of the profiling pass through the simulator's
    peak formula gives back the measured peak exactly."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
    model = nn.Sequential(nn.Linear(8, 16), layer, nn.Linear(16, 4))
    x = torch.randn(2, 12, 8, device=DEVICE)
    res = profile_details(model.to(DEVICE), x, lambda y: y.square().mean(), repeats=1, warmup=0)
    c = res.chain
    assert c.has_fall_costs
    assert c.fwd_overhead[1] > c.fall_overhead[1]
    assert c.tape_size[1] > c.x_size[2]  # the intermediates are in the tape
    assert res.allocator_tape_size[1] >= res.hook_tape_size[1]
    ops = {r["label"]: r for r in res.ops}
    for i in range(c.length):
        fck, fall = ops[f"Fck{i}"], ops[f"Fall{i}"]
        assert fck["peak"] == fck["before"] + c.x_size[i + 1] + c.fwd_overhead[i]
        assert fall["peak"] == fall["before"] + c.tape_size[i] + c.fall_overhead[i]


def test_allocator_meter_counts_what_kernels_allocate_inside():
    """torch.linalg.inv factors a copy of its input (LAPACK works in place and the input must
    survive) and solves into the output: at least two n x n matrices are live inside the one
    aten call.  The tensor-level tracker sees only the output; the meter sees both."""
    n = 96
    a = torch.randn(n, n, device=DEVICE, dtype=torch.float64) + n * torch.eye(n, device=DEVICE,
                                                                            dtype=torch.float64)
    matrix = n * n * 8
    meter, tracker = AllocatorMeter(DEVICE), MemoryTracker()
    with meter, tracker:
        with meter.op("inv"):
            inv = torch.linalg.inv(a)
    (r,) = meter.results()
    assert matrix <= tracker.peak < 2 * matrix  # the output (and a 4-byte status) only
    assert r.before == 0 and r.after >= matrix
    assert r.peak >= 2 * matrix  # the output and the factorised copy
    del inv
    assert allocator_peak(lambda: torch.linalg.inv(a), DEVICE) >= 2 * matrix


def test_allocator_meter_takes_out_bookkeeping_and_persistent_memory():
    meter_keep = []
    meter = AllocatorMeter(DEVICE, persistent=lambda: meter_keep)
    with meter:
        with meter.op("make"):
            a = torch.ones(1000, device=DEVICE)  # 4000 B activation
            meter_keep.append(torch.ones(500, device=DEVICE))  # 2000 B persistent
        with meter.op("free"):
            del a
    make, free = meter.results()
    assert meter.persistent_bytes in (2000, 2048)  # CUDA counts 512-byte blocks
    assert make.before == 0 and make.after in (4000, 4096)
    assert free.before == make.after and free.after == 0


@pytest.mark.parametrize("network", tiered(["mlp", "resnet", "transformer", "rnn"], ["transformer", "rnn"]))
def test_allocator_measured_peaks_match_the_prediction(network):
    """Schedules of several shapes, run under the allocator accounting the profile used: the
    measured peak is within [0.97, 1.01] of the simulator's and never above its budget.  On
    the transformer, one forward overhead per stage (the larger of the two kinds, the old
    profile) would over-predict store-all by more than 1%."""
    import solvers

    from remat_theory.model.simulator import simulate
    from remat_theory.lab.confirm import measure_run
    from remat_theory.torch.capture.stages import stage_parameters

    net = build(network, "test").to(DEVICE)
    stages = split_stages(net.model)
    params = stage_parameters(stages)
    prof = profile_details(stages, net.example_input, net.loss_fn, repeats=1, warmup=0)
    chain = prof.chain
    store_all = chain.store_all_memory()
    runs = 0
    for name, frac in (("store-all", 1.0), ("recompute-all", 1.0), ("periodic", 0.9),
                       ("revolve", 0.9), ("dtr", 0.9), ("gruslys", 0.9)):
        budget = int(frac * store_all)
        sol = solvers.solve(chain, budget, name)
        if sol.schedule is None and sol.min_budget is not None:  # at its own smallest budget
            budget = sol.min_budget
            sol = solvers.solve(chain, budget, name)
        if sol.schedule is None:
            continue
        drop = sol.allows_drop
        predicted = simulate(chain, sol.schedule, budget, allow_drop=drop).peak_memory
        for p in params:
            p.grad = None
        run = measure_run(stages, net.loss_fn, net.example_input, sol.schedule, params, DEVICE,
                          chain.output_saved, prof.bwd_release)
        assert 0.97 <= run["peak"] / predicted <= 1.01, (name, run["peak"], predicted)
        assert run["peak"] <= budget, (name, run["peak"], budget)
        runs += 1
        if name == "store-all" and network == "transformer":
            merged = chain.replace(fwd_overhead=[max(a, b) for a, b in
                                                 zip(chain.fwd_overhead, chain.fall_overhead)],
                                   fall_overhead=None)
            assert simulate(merged, sol.schedule).peak_memory > 1.01 * run["peak"]
    assert runs == 6
    for p in params:
        p.grad = None


@pytest.mark.skipif(DEVICE.type != "cpu", reason="the CPU accounting is torch.profiler's")
def test_the_cpu_meter_refuses_to_run_inside_another_profiler_session():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with pytest.raises(RematError, match="profiler session is already running"):
            allocator_peak(lambda: torch.ones(10))


def test_cuda_meter_arithmetic_on_counters(monkeypatch):
    """The CUDA branch of the meter reads only the caching allocator's counters; here they
    are a fake allocator driven by hand, so the bookkeeping runs on any machine: before /
    peak / after above the start, persistent tensors (a gradient made during an operation)
    counted in that operation's peak and taken out after it."""
    counters = {"now": 1000, "peak": 1000}

    def alloc(n):
        counters["now"] += n
        counters["peak"] = max(counters["peak"], counters["now"])

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: counters["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: counters["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda device=None: counters.update(peak=counters["now"]))
    grads = []
    meter = AllocatorMeter(torch.device("cuda"), persistent=lambda: grads)
    with meter:
        with meter.op("a"):
            alloc(500)
            alloc(-200)
        with meter.op("b"):
            alloc(100)
            alloc(512)  # a gradient, 128 floats
            grads.append(torch.empty(128))
        with meter.op("c"):
            alloc(-300)
    a, b, c = meter.results()
    assert (a.before, a.peak, a.after) == (0, 500, 300)
    assert (b.before, b.peak, b.after) == (300, 912, 400)  # peak: an upper bound
    assert (c.before, c.peak, c.after) == (400, 400, 100)
    assert meter.persistent_bytes == 512


def test_input_grad_bytes_is_what_b0_holds_less_without_d0():
    """A convolution first: without d_0 its backward neither makes d_0 nor computes the
    gradient of its input.  Oracle: the allocator's peak of stage 0's backward alone, the
    input differentiable or not (plain autograd, not the executor).  A first stage without
    parameters claims nothing."""
    import torch
    from torch import nn

    from remat_theory.torch.profiling.profiler import profile_details
    from remat_theory.torch.tracker import AllocatorMeter

    torch.manual_seed(0)
    x = torch.randn(4, 3, 32, 32)
    conv = nn.Conv2d(3, 8, 3, padding=1)
    stages = [conv, nn.Sequential(nn.ReLU(), nn.Flatten(), nn.Linear(8 * 32 * 32, 4))]
    prof = profile_details(stages, x, lambda y: y.square().mean(), repeats=1, warmup=0)

    def rise(grad):
        xi = x.clone().requires_grad_(grad)
        y = conv(xi)
        d = torch.ones_like(y)
        meter = AllocatorMeter(None, persistent=lambda: [p.grad for p in conv.parameters()])
        with meter:
            with meter.op("B0"):
                y.backward(d)
        conv.zero_grad(set_to_none=True)
        return meter.peak
    want = rise(True) - rise(False)
    assert want >= x.numel() * x.element_size()  # d_0 at least
    assert prof.input_grad_bytes == want
    flat = [nn.Tanh(), nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4))]
    assert profile_details(flat, x, lambda y: y.square().mean(), repeats=1,
                           warmup=0).input_grad_bytes == 0


def test_loss_bytes_is_the_loss_tensor_a_caller_holds():
    """Oracle: the storage of the loss tensor ``loss_fn`` returns, plus its seed gradient,
    taken from torch directly: an MSE on the CPU returns a view of a reduction buffer the
    size of its input, a cross-entropy a scalar."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from remat_theory.torch.profiling.profiler import profile_details

    torch.manual_seed(0)
    x, target = torch.randn(16, 32), torch.randn(16, 32)
    stages = [nn.Linear(32, 32), nn.Sequential(nn.Tanh(), nn.Linear(32, 32))]
    for loss_fn in (lambda y: F.mse_loss(y, target),
                    lambda y: F.cross_entropy(y, target.argmax(1))):
        with torch.no_grad():
            loss = loss_fn(stages[1](stages[0](x)))
        want = loss.untyped_storage().nbytes() + loss.element_size()
        got = profile_details(stages, x, loss_fn, repeats=1, warmup=0).loss_bytes
        assert got == want, (got, want)


# ----------------------------------------------------------- what the stage times measure
_WORK = [0.0]  # work units done, the fake clock of the timing tests below


def _hooks_active() -> bool:
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


class _Counting(nn.Module):
    """A Linear that counts its work: a forward costs 1 unit plain, 1.5 under saved-tensor
    hooks (a checkpoint's forward, its recomputation); its backward costs 2."""

    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        _WORK[0] += 1.5 if _hooks_active() else 1.0
        y = torch.tanh(self.lin(x))
        if y.requires_grad:
            y.register_hook(lambda g: _WORK.__setitem__(0, _WORK[0] + 2.0))
        return y


def test_stage_times_are_what_the_drop_in_runs(monkeypatch):
    """fall_time and bwd_time time plain autograd (a kept stage in the drop-in: no hooks);
    fwd_time is the checkpoint's forward plus the hooked recomputation's excess over a plain
    recording forward (what recomputing a stage adds in the drop-in), by a fake clock that
    counts the stages' work."""
    from remat_theory.torch.profiling import times

    def fake(self, fn):
        before = _WORK[0]
        fn()
        return _WORK[0] - before
    monkeypatch.setattr(times.Timer, "__call__", fake)
    torch.manual_seed(0)
    model = nn.Sequential(*[_Counting(6) for _ in range(3)])
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    res = profile_details(model, x, lambda out: ((out - y) ** 2).mean(), repeats=2, warmup=1)
    chain = res.chain
    assert list(chain.fall_time) == [1.0] * 3
    assert list(chain.bwd_time) == [2.0] * 3 + [0.0]
    assert res.executor_times == {"fck": [1.5] * 3, "fall": [1.5] * 3,
                                  "bwd": [2.0] * 3 + [0.0]}
    assert list(chain.fwd_time) == [2.0] * 3  # 1.5 + (1.5 - 1.0)
    # what the ScheduleExecutor takes (remat confirm predicts with it): every op hooked
    ex = res.executor_chain()
    assert list(ex.fwd_time) == [1.5] * 3 and list(ex.fall_time) == [1.5] * 3
    assert list(ex.bwd_time) == [2.0] * 3 + [0.0]
    assert ex.replace(fwd_time=chain.fwd_time, fall_time=chain.fall_time,
                      bwd_time=chain.bwd_time) == chain  # the sizes are the chain's


def test_plain_timing_pass_is_a_full_backward():
    """The plain pass (each stage on a detached input, its backward from its output's
    gradient) gives the eager model's parameter gradients: it times a whole step."""
    from remat_theory.torch.profiling.times import plain_pass

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    x, y = torch.randn(4, 5), torch.randn(4, 3)

    def loss_fn(out):
        return ((out - y) ** 2).mean()
    loss_fn(model(x)).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    t_f, t_b, t_loss = plain_pass(list(model), loss_fn, x, lambda fn: (fn(), 0.25)[1])
    assert t_f == [0.25] * 3 and t_b == [0.25] * 3 and t_loss == 0.25
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, e, rtol=0, atol=1e-6)
