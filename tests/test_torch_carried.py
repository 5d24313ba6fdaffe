"""The values a chain captured at the model's seams hands from its first stage to the others
(rotary ``cos``/``sin``, position ids, masks) are step memory: the model makes them in its
forward and frees them at the step's end, the drop-in makes new ones at every step.  The
drop-in reserves them at every budget (``carried_step_bytes``), so at a budget where a
schedule's predicted peak equals the budget (a DP breakpoint) the step still stays within it.

Oracle: torch's allocator over one training step of the drop-in, primed (a no-grad forward
inside the measurement) and with the primed values released inside it, so that the step's
own copy counts as the step's, as it does for the original model.
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from remat_theory.model.errors import InfeasibleBudgetError  # noqa: E402
from remat_theory.lab.fidelity import SEED  # noqa: E402
from remat_theory.torch.plan.budget import RNG_STATE_BYTES  # noqa: E402
from remat_theory.torch.modules.checkpointed import (Budget, CheckpointOptions,  # noqa: E402
                                                     CheckpointedSequential)
from remat_theory.torch.capture.carried import release_carried  # noqa: E402
from remat_theory.torch.plan.budget import carried_step_bytes  # noqa: E402
from remat_theory.torch.plan.levels import schedule_levels, shared_parameter_bytes  # noqa: E402
from remat_theory.lab.networks import build  # noqa: E402
from remat_theory.torch.profiling.profiler import prime_forward, profile_details  # noqa: E402
from remat_theory.torch.plan.rounding import auto_unit  # noqa: E402
from remat_theory.torch.capture.stages import split_stages, stage_parameters  # noqa: E402
from remat_theory.torch.tracker import AllocatorMeter, storage_bytes  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


def _step_peak(ck, loss_fn, stages, params, x0) -> int:
    """Allocator peak of one step above the start, gradients apart, the input counted."""
    for p in params:
        p.grad = None

    def prime():
        prime_forward(stages, x0, x0.device)
        release_carried(stages)  # released inside the session: the step's copy is its own

    torch.manual_seed(SEED)
    meter = AllocatorMeter(None, persistent=lambda: [p.grad for p in params], prime=prime)
    with meter:
        with meter.op("step"):
            loss_fn(ck(x0)).backward()
    for p in params:
        p.grad = None
    return meter.peak + storage_bytes(x0)


@pytest.mark.parametrize("name", ["llama", "gpt-neo"])
def test_a_budget_at_a_breakpoint_holds_the_values_the_first_stage_hands_on(name):
    net = build(name, "test")
    stages = split_stages(net.model)
    params = stage_parameters(stages)
    x0, loss_fn = net.example_input, net.loss_fn
    prof = profile_details(stages, x0, loss_fn, repeats=1)
    chain = prof.chain
    carried = carried_step_bytes(stages, x0)
    assert carried > 0  # rotary tables and position ids (Llama), a float mask (GPT-Neo)
    shared = 2 * shared_parameter_bytes(stages)
    levels = schedule_levels(chain, auto_unit(chain), prof.draws_random, RNG_STATE_BYTES,
                             solver="dp", stages=stages, loss_bytes=prof.loss_bytes)
    tight = [fit + shared for _, tree, _, fit in levels if tree is not None]
    assert tight, levels
    checked = 0
    for budget in tight:  # each level's exact fit: the tightest budget that admits it
        try:
            ck = CheckpointedSequential(stages, Budget.activations(budget), example_input=x0,
                                        loss_fn=loss_fn,
                                        options=CheckpointOptions.from_profile(prof))
        except InfeasibleBudgetError as e:
            # a level whose fit leaves no room for the carried values, and no lower level
            # fits: the error names the reserve and a larger smallest budget
            assert e.smallest_feasible is not None and e.smallest_feasible > budget, str(e)
            assert f"{carried} B of it reserved" in str(e)
            continue
        assert ck.carried_bytes() == carried
        assert ck.plan.predicted_peak <= budget
        measured = _step_peak(ck, loss_fn, stages, params, x0)
        assert measured <= budget, (budget, measured, ck.plan.predicted_peak, carried)
        assert 0.97 <= measured / ck.plan.predicted_peak <= 1.01, (measured, ck.plan.predicted_peak)
        checked += 1
    assert checked >= 1
