"""Budgets in the user's units: ``CheckpointedSequential(model, budget="6GiB")`` bounds the
whole step (activations, parameter gradients, loss, workspaces) above the resident model, as
the allocator measures it; an infeasible one names the smallest feasible one, in bytes, and
that one is feasible."""
import pytest
from _tiers import tiered

torch = pytest.importorskip("torch")

from remat_theory.model.errors import InfeasibleBudgetError, RematError  # noqa: E402
from remat_theory.torch import Budget, CheckpointOptions, CheckpointedSequential  # noqa: E402
from remat_theory.lab.networks import build  # noqa: E402
from remat_theory.torch.plan.budget import (gradient_bytes, optimizer_state_bytes, parse_bytes)  # noqa: E402
from remat_theory.torch.tracker import allocator_peak  # noqa: E402
from torch_device import DEVICE  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


@pytest.mark.parametrize("text, want", [
    ("6GiB", 6 * 2**30), ("512 MiB", 512 * 2**20), ("1.5GB", 1_500_000_000), ("123", 123),
    ("4096B", 4096), ("2kib", 2048), (77, 77)])
def test_parse_bytes(text, want):
    assert parse_bytes(text) == want


@pytest.mark.parametrize("text", ["six", "GiB", "-1MiB", "0", "", 1.5, True])
def test_parse_bytes_refuses_what_is_not_bytes(text):
    with pytest.raises(RematError, match="budget"):
        parse_bytes(text)


def _step_peak(model, x, loss_fn) -> int:
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None

    def step():
        loss_fn(model(x)).backward()
    peak = allocator_peak(step, torch.device(DEVICE))
    for p in params:
        p.grad = None
    return peak


@pytest.mark.parametrize("network", tiered(["mlp", "transformer", "resnet"], ["transformer"]))
def test_a_step_budget_is_never_exceeded_and_the_smallest_one_is_exact(network):
    net = build(network, "test").to(DEVICE)
    x, loss_fn = net.example_input, net.loss_fn
    plain = _step_peak(net.model, x, loss_fn)
    ck = CheckpointedSequential(net.model, budget="1GiB", example_input=x, loss_fn=loss_fn,
                                options=CheckpointOptions(profile_repeats=1))
    chain = ck.chain
    # below the smallest feasible budget: refused, naming it; the named one is feasible
    with pytest.raises(InfeasibleBudgetError, match="smallest feasible step budget") as e:
        CheckpointedSequential(net.model, budget=f"{ck.gradient_bytes + 1}B", example_input=x,
                               loss_fn=loss_fn, options=CheckpointOptions(chain=chain))
    smallest = e.value.smallest_feasible
    assert smallest is not None and str(smallest) in str(e.value)
    CheckpointedSequential(net.model, budget=f"{smallest}B", example_input=x, loss_fn=loss_fn,
                           options=CheckpointOptions(chain=chain))
    with pytest.raises(InfeasibleBudgetError):
        CheckpointedSequential(net.model, budget=f"{smallest - 1}B", example_input=x,
                               loss_fn=loss_fn, options=CheckpointOptions(chain=chain))
    # every budget from the smallest to above the plain step: the allocator's step peak
    # (gradients included) stays within it
    top = ck.plain_step_bytes()
    assert smallest <= top
    budgets = sorted({b for b in (smallest, (smallest + top) // 2, top - 1, top) if b >= smallest})
    peaks = []
    for b in budgets:
        m = CheckpointedSequential(net.model, budget=f"{b}B", example_input=x, loss_fn=loss_fn,
                                   options=CheckpointOptions(chain=chain))
        peak = _step_peak(m, x, loss_fn)
        assert peak <= b, (network, b, peak)
        peaks.append(peak)
    if network == "transformer":  # big enough for recomputation to beat the fixed reserve
        assert peaks[0] < 0.7 * plain


def test_gradients_alone_above_the_budget_are_named():
    net = build("mlp", "test")
    grads = gradient_bytes(list(net.model))
    with pytest.raises(InfeasibleBudgetError, match="parameter gradients take") as e:
        CheckpointedSequential(net.model, budget=f"{grads // 2}B", example_input=net.example_input,
                               loss_fn=net.loss_fn, options=CheckpointOptions(profile_repeats=1))
    assert e.value.smallest_feasible > grads


def test_the_step_reserve_holds_no_generator_state_the_schedule_already_counts():
    """The random-generator states the checkpoints keep are counted by the schedule's share
    where they live (nested.checkpoint_state_bytes); the step reserve is what the schedule
    does not count, computed here from its parts, and nothing per checkpoint.  The MLP
    without its dropout draws nothing: its schedules keep no state, and a tight byte budget
    is still held as the allocator measures it."""
    import math

    from remat_theory.torch.plan.budget import ENGINE_MARGIN, STEP_SLACK
    from remat_theory.torch.profiling.profiler import stage_draws

    net = build("mlp", "test")
    x, loss_fn = net.example_input, net.loss_fn
    model = torch.nn.Sequential(*[m for m in net.model if not isinstance(m, torch.nn.Dropout)])
    assert len(model) < len(net.model) and not any(stage_draws(list(model), x))
    ck = CheckpointedSequential(model, budget="1MiB", example_input=x, loss_fn=loss_fn,
                                options=CheckpointOptions(profile_repeats=1))
    for b in (0, 10**5, 10**6, 2**20 + 7):
        fixed = gradient_bytes(list(model)) + STEP_SLACK
        by_hand = fixed + math.ceil(max(0, b - fixed) * ENGINE_MARGIN / (1 + ENGINE_MARGIN))
        assert ck.step_reserve(step_budget=b) == by_hand
    # the smallest step budget: its schedule recomputes (no generator state added), and the
    # allocator's step peak stays within it
    with pytest.raises(InfeasibleBudgetError) as e:
        CheckpointedSequential(model, budget=f"{ck.gradient_bytes + 1}B", example_input=x,
                               loss_fn=loss_fn, options=CheckpointOptions(chain=ck.chain))
    smallest = e.value.smallest_feasible
    m = CheckpointedSequential(model, budget=f"{smallest}B", example_input=x, loss_fn=loss_fn,
                               options=CheckpointOptions(chain=ck.chain))
    assert m.plan.tree is not None
    assert _step_peak(m, x, loss_fn) <= smallest


def test_optimizer_state_comes_out_of_the_budget():
    net = build("transformer", "test")
    ck = CheckpointedSequential(net.model, budget="1MiB", example_input=net.example_input,
                                loss_fn=net.loss_fn, options=CheckpointOptions(profile_repeats=1))
    opt = torch.optim.Adam(net.model.parameters())
    assert optimizer_state_bytes(opt) == 2 * gradient_bytes(list(net.model))
    with_opt = CheckpointedSequential(net.model, budget="1MiB", example_input=net.example_input,
                                      loss_fn=net.loss_fn, optimizer_state=opt,
                                      options=CheckpointOptions(chain=ck.chain))
    state = optimizer_state_bytes(opt)
    assert with_opt.plain_step_bytes() == ck.plain_step_bytes() + state
    b = 10**6
    diff = with_opt.step_reserve(step_budget=b) - ck.step_reserve(step_budget=b)
    assert state * 0.99 - 1 <= diff <= state  # its bytes, less the margin they no longer need
    with pytest.raises(RematError, match="optimizer_state"):
        CheckpointedSequential(net.model, budget=0.5, example_input=net.example_input,
                               loss_fn=net.loss_fn, optimizer_state=opt,
                               options=CheckpointOptions(chain=ck.chain))
    with pytest.raises(RematError, match="optimizer_state"):
        CheckpointedSequential(net.model, budget="1MiB", example_input=net.example_input,
                               loss_fn=net.loss_fn, optimizer_state="adam",
                               options=CheckpointOptions(chain=ck.chain))


@pytest.mark.slow
@pytest.mark.parametrize("grads", ["none", "kept"])
def test_budgets_hold_the_summed_gradient_of_shared_parameters_store_all_included(grads):
    """The unrolled RNN shares one cell among its stages; autograd sums that cell's gradient
    beside the chain (more of it when gradients are kept and accumulated into).  At budgets
    of the chain from the smallest to store-all, and at the step budget that runs plain
    autograd, the allocator's peak stays within the budget, with the step starting without
    gradients (zero_grad()) or with them kept (gradient accumulation)."""
    from remat_theory.lab.frontier_methods import drop_in_states, remat_breakpoints
    from remat_theory.torch.plan.levels import shared_parameter_bytes

    net = build("rnn", "small").to(DEVICE)
    x, loss_fn = net.example_input, net.loss_fn
    ck = CheckpointedSequential(net.model, 1.0, example_input=x, loss_fn=loss_fn,
                                options=CheckpointOptions(profile_repeats=1))
    chain, stages = ck.chain, ck.stages_list
    shared = shared_parameter_bytes(stages)
    assert shared > 0 and ck.plan.tree is None  # the fraction 1.0 is plain autograd
    params = [p for p in ck.parameters() if p.requires_grad]

    def reset():
        for p in params:
            p.grad = None if grads == "none" else torch.zeros_like(p)

    def peaks(m):
        def step():
            loss_fn(m(x)).backward()
        reset()
        step()  # warm the allocator
        reset()
        act = allocator_peak(step, torch.device(DEVICE), persistent=lambda: [p.grad for p in params])
        reset()
        whole = allocator_peak(step, torch.device(DEVICE))
        reset()
        return act, whole

    store_all = chain.store_all_memory()
    budgets = remat_breakpoints(chain, stages, max_points=4,
                                **drop_in_states(stages, x)) + [store_all]
    assert budgets[0] < store_all < budgets[-2] == store_all + 2 * shared  # plain autograd
    for b in budgets:
        m = CheckpointedSequential(net.model, Budget.activations(b), example_input=x,
                                   options=CheckpointOptions(chain=chain))
        act, _ = peaks(m)
        assert act <= b, (b, act, m.plan.predicted_peak)
    top = ck.plain_step_bytes()
    for b in (top, top - 1):
        m = CheckpointedSequential(net.model, budget=f"{b}B", example_input=x, loss_fn=loss_fn,
                                   options=CheckpointOptions(chain=chain))
        assert (m.plan.tree is None) == (b == top)
        _, whole = peaks(m)
        assert whole <= b, (b, whole)
