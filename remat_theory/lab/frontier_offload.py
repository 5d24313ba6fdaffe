"""``remat_offload`` points of the frontier (:mod:`.frontier`): remat's drop-in with an
offload plan.

For each solver that models the copy channel (``save-on-cpu``, ``offload-all``, the class
DP ``dp-offload`` where it is registered, ``exhaustive-offload`` on chains of at most its
stage guard), the captured chain gets a ``bandwidth`` (given in bytes per second, or
``"measure"``: :func:`~.bandwidth.measure_bandwidth` on the workload's device) and the drop-in
(:class:`~.module.CheckpointedSequential` with ``bandwidth=``, which runs a schedule with
transfers on the offload executor, :mod:`remat_theory.torch.run.offload_run`) is built at each budget:

* ``budgets`` given (bytes of the chain): those;
* otherwise the solver's smallest feasible budget (its own peak, for the two store-all
  baselines; plus what the drop-in reserves for parameters several stages share), and for a solver whose answer changes with the budget (``dp-offload``,
  ``exhaustive-offload``) ``points`` budgets spread evenly from there to store-all.

Each point is named ``remat_offload:<fraction of store-all>`` (family ``remat_offload``,
``param`` the budget in bytes, ``detail`` the solver) and is measured like every other
method: allocator peak with parameter gradients apart, time per step, gradients against
the plain model's.  The peak is the device's: on a GPU host buffers are pinned CPU memory;
on the CPU the executor's correctness mode keeps them out of the allocator meter, and the
time there is a memcpy's, not a copy channel's (the record's ``device`` says which).  Not a
baseline nor a remat point in :func:`.frontier.dominance`: it spends host memory and a copy
channel, which the others do not.
"""
from __future__ import annotations

import solvers as solver_registry
from remat_theory.model.errors import InfeasibleBudgetError, RematError, SolverContractError
from remat_theory.torch.modules.checkpointed import (Budget, CheckpointOptions,
                                                     CheckpointedSequential)
from remat_theory.torch.plan.levels import shared_parameter_bytes
from remat_theory.torch.plan.offload import check_bandwidth
from remat_theory.torch.plan.rounding import auto_unit, rounded_chain
from remat_theory.torch.profiling.bandwidth import chain_with_bandwidth


FAMILY = "remat_offload"
DEFAULT_SOLVERS = ("save-on-cpu", "offload-all", "dp-offload")
SWEPT = ("dp-offload", "exhaustive-offload")  # answers that change with the budget


def available_solvers(names) -> list:
    """``names`` that are registered and model ``bandwidth`` (an unknown name is an error;
    ``dp-offload`` is skipped where it is not registered)."""
    known = set(solver_registry.names())
    out = []
    for n in names:
        if n not in known:
            if n == "dp-offload":
                continue
            raise RematError(f"offload solver {n!r} is not registered (remat solvers)")
        if "bandwidth" not in solver_registry.get(n).supports:
            raise RematError(f"solver {n!r} does not model the chain field bandwidth; offload "
                             f"points need one that does")
        out.append(n)
    return out


def offload_methods(w, chain, Point, Method, remat_method, *, solvers=DEFAULT_SOLVERS,
                    bandwidth="measure", budgets=None, points: int = 4, device=None) -> list:
    """The ``remat_offload`` methods for workload ``w`` and its profiled ``chain`` (module
    docstring); ``Point``, ``Method`` and ``remat_method`` are :mod:`.frontier`'s (passed
    in, so that this module does not import it back)."""
    bandwidth = check_bandwidth(bandwidth)
    if bandwidth is None:
        raise RematError("offload points need a bandwidth (bytes per second or 'measure')")
    dev = device if device is not None else w.example_input.device
    bw_chain = chain_with_bandwidth(chain, bandwidth, dev)
    store_all = chain.store_all_memory()
    solve_chain = rounded_chain(bw_chain, auto_unit(bw_chain))
    # the drop-in keeps this much of a budget below store-all for the summed gradient of
    # parameters several stages share (tied embeddings): the solver sees the rest
    reserve = 2 * shared_parameter_bytes(w.stages)
    out, seen = [], set()
    for name in available_solvers(solvers):
        if budgets is not None:
            wanted = [int(b) for b in budgets]
        else:
            try:
                low = solver_registry.solve(solve_chain, store_all, name).min_budget
            except (RematError, SolverContractError) as e:  # e.g. exhaustive-offload's stage guard
                pt = Point(f"{FAMILY}:{name}", FAMILY, status="refused", detail=str(e)[:400])
                out.append(Method(pt))
                continue
            low = min(store_all - 1, (low if low is not None else store_all) + reserve)
            n = max(1, points) if name in SWEPT else 1
            wanted = [low + (store_all - 1 - low) * k // max(1, n - 1) for k in range(n)] \
                if n > 1 else [low]
        for b in dict.fromkeys(wanted):
            method = f"{FAMILY}:{b / store_all:.4f}"
            if method in seen:
                method = f"{method}:{name}"
            seen.add(method)
            pt = Point(method, FAMILY, int(b), detail=name)
            try:
                ck = CheckpointedSequential(w.stages, Budget.activations(int(b)), name,
                                            example_input=w.example_input,
                                            loss_fn=w.loss_fn,
                                            options=CheckpointOptions(chain=bw_chain))
            except InfeasibleBudgetError as e:
                pt.status, pt.detail = "infeasible", f"{name}: {e}"[:400]
                out.append(Method(pt))
                continue
            except (RematError, SolverContractError) as e:
                pt.status, pt.detail = "refused", f"{name}: {e}"[:400]
                out.append(Method(pt))
                continue
            pt.budget = ck.budget
            pt.predicted_peak = ck.plan.predicted_peak
            pt.predicted_time = ck.solution.makespan
            out.append(Method(pt, remat_method(w, ck)))
    return out
