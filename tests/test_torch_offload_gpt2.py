"""GPT-2's schedules with transfers, measured against the two-stream referee to the byte.

Autograd saves the Python numbers an op multiplies by (GPT-2's GELU: ``0.5 * x``,
``0.044715 * x**3``, ``sqrt(2/pi) * ...``) as 0-dim "wrapped number" tensors without
calling the saved-tensor hooks; on the CPU those are allocator memory inside the tape
(3 x 8 bytes per block), and an offloaded tape used to leave them on the device: measured
peaks were 24-96 bytes above the referee's.  The offload executor now moves them with the
tape (``offload_executor._numbers_saved``).  Oracles: plain backpropagation (gradients,
loss, buffers, random states: bit for bit) and the referee (every operation's peak and
memory after it).
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import solvers  # noqa: E402
from remat_theory.model.offload import simulate_offload  # noqa: E402
from remat_theory.torch.run.offload_executor import _numbers_saved  # noqa: E402
from test_torch_offload import _case  # noqa: E402 - the same harness

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]


def _schedule(case, solver):
    """The solver's schedule with transfers: at store-all for the baselines, for the DP at
    the first of a few budgets (from save-on-cpu's peak up) where it offloads."""
    chain = case.chain
    if solver != "dp-offload":
        return solvers.solve(chain, chain.store_all_memory(), solver).schedule
    lo = solvers.solve(chain, chain.store_all_memory(), "save-on-cpu").peak_memory
    for k in range(8):
        budget = lo + k * (chain.store_all_memory() - lo) // 8
        sol = solvers.solve(chain, budget, solver)
        if sol.schedule is not None and any(op.is_transfer for op in sol.schedule):
            return sol.schedule
    raise AssertionError("dp-offload never offloads on GPT-2 at these budgets")


@pytest.mark.parametrize("solver", ["save-on-cpu", "offload-all", "dp-offload"])
def test_gpt2_transfer_schedules_measure_the_referee_to_the_byte(solver):
    case = _case("gpt2")
    schedule = _schedule(case, solver)
    assert any(op.is_transfer for op in schedule)
    run = case.check(schedule, per_op=False)  # gradients bit for bit, peak exact
    sim = simulate_offload(case.chain, schedule)
    x0 = run["x0"]
    rows = list(zip(sim.profile, run["ops"]))
    for row, m in rows:
        assert x0 + m.peak == row.peak, (row.step, row.op, x0 + m.peak, row.peak)
    # memory after every op too, except after B0: the token ids x_0 have no gradient d_0,
    # which the chain counts (x_size[0] bytes; the same for schedules without transfers)
    for row, m in rows[:-1]:
        assert x0 + m.after == row.memory_after, (row.step, row.op)
    assert rows[-1][0].op == "B0"
    moved = run["executor"].moved_bytes
    for op in schedule:
        if op.kind == "Off" and op.target == "t":
            assert moved[f"t{op.index}"] == case.chain.tape_held[op.index - 1]


def test_the_numbers_a_graph_saves_are_found_and_nothing_else():
    """A stage computing ``0.5 * tanh(x) * y`` saves one Python number; the hooks see the
    tensors, the walk sees the number (and stops at the stage's input)."""
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    hooked = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: (hooked.append(t), t)[1],
                                                  lambda t: t):
        y = (0.5 * torch.tanh(x * 2.0)) * w
    assert all(t.dim() == 1 for t in hooked)
    found = _numbers_saved(y)
    assert sorted(float(t) for t in found) == [0.5, 2.0]
    assert all(t.dtype == torch.float64 and t.device.type == "cpu" for t in found)
