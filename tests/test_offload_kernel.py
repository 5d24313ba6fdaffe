"""``dp-offload``'s two kernels (option ``kernel``, solvers/offload/dp_split.py) give the
same answers: numpy, the DP's own row expressions, is the oracle; the compiled reduction
of option B's splits must give every table row value for value, hence the same answer,
schedule and smallest budget; the rebuild's one-cell reading of a split is its row's."""
from __future__ import annotations

import numpy as np
import pytest
from _tiers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_theory import Chain, simulate
from remat_theory.analysis import families
from remat_theory.model.errors import SolverOptionError
from remat_theory.strategies import chains
from solvers import dp_kernel, registry
from solvers._dp_tables import UnitChain
from solvers.offload.dp_split import Split, least
from solvers.offload.dp_table import OffloadTable

pytest.importorskip("numba")


def _with_bandwidth(chain: Chain, ratio: float) -> Chain:
    """A bandwidth at which the mean tape copies in ``ratio`` times the mean forward."""
    L = chain.length
    fwd = max(sum(chain.fwd_time) / L, 1.0)
    return chain.replace(bandwidth=max(sum(chain.tape_size) / L / (ratio * fwd), 1.0))


@settings(max_examples=examples(40, 8), deadline=None)
@given(chains(1, 7, max_size=6, max_time=5, overheads=None, unsaved_outputs=None),
       st.sampled_from([0.25, 1.0, 4.0]), st.floats(0, 1.1), st.sampled_from([None, 9]))
def test_kernels_give_the_same_offload_answer(chain, ratio, where, slots):
    chain = _with_bandwidth(chain, ratio)
    budget = int(chain.memory_lower_bound() * 0.8 + where * chain.store_all_memory())
    a = registry.solve(chain, budget, "dp-offload", slots=slots, kernel="numpy")
    b = registry.solve(chain, budget, "dp-offload", slots=slots, kernel="numba")
    assert (a.status, a.makespan, a.min_budget) == (b.status, b.makespan, b.min_budget)
    assert a.schedule == b.schedule
    if b.schedule is not None:  # the referee, not the DP, says what it costs
        assert simulate(chain, b.schedule).makespan == pytest.approx(b.makespan)


def _rows(table):
    """Every row the table built, by a key naming its table and cell."""
    out = {("K",) + k: v for k, v in table.K.items()}
    out.update((("RK",) + k, v) for k, v in table.RK.items())
    for name in ("O", "RO", "Fr"):
        for form, rows in getattr(table, name).items():
            out.update(((name, form) + k, v) for k, v in rows.items())
    for form, by in table.RX.items():
        for var, rows in by.items():
            out.update((("RX", form, var) + k, v) for k, v in rows.items())
    out.update((("pend",) + k, v) for k, v in table._pend.items())
    out.update((("qpre",) + k, v) for k, v in table._qpre.items())
    return out


@pytest.mark.parametrize("family, L, unsaved", [("random", 12, False), ("transformer", 10, True)])
def test_offload_tables_equal_row_for_row(family, L, unsaved):
    """Every row of every table (the rests, the pending and prefetching children that the
    deferrals ask for), numba's equal to numpy's, value for value."""
    chain = _with_bandwidth(families.make(family, L, 2), 1.0)
    if unsaved:
        chain = chain.replace(output_saved=[i % 3 != 1 for i in range(L)])
    uc, _ = UnitChain.exact(chain)
    a, b = OffloadTable(uc, chain, kernel="numpy"), OffloadTable(uc, chain, kernel="numba")
    ra, rb = _rows(a), _rows(b)
    assert ra.keys() == rb.keys() and len(a._pend) > 0
    for key, row in ra.items():
        assert np.array_equal(row, rb[key]), key


def test_split_reads_one_cell_as_its_row():
    """A split's row (numpy), its one-cell reading (the rebuild) and the compiled loop agree
    for shifts below 0, inside the row and past its end, thresholds below 0 and past W."""
    rng = np.random.default_rng(3)
    W = 11
    for _ in range(60):
        A, B = rng.integers(0, 9, W).astype(float), rng.integers(0, 9, W).astype(float)
        A[: rng.integers(0, 4)] = np.inf
        sp = Split(A, int(rng.integers(-13, 14)), B, int(rng.integers(-3, 14)),
                   float(rng.integers(0, 5)) / 4, int(rng.integers(-2, 14)))
        row = sp.row(W)
        assert [sp[m] for m in range(W)] == list(row)
        assert np.array_equal(least([(sp, None)], W, "numba"), row)


def test_kernel_option_of_dp_offload(monkeypatch):
    chain = _with_bandwidth(families.make("random", 3, 0), 1.0)
    with pytest.raises(SolverOptionError, match="kernel"):
        registry.solve(chain, chain.store_all_memory(), "dp-offload", kernel="fortran")
    monkeypatch.setattr(dp_kernel, "_NUMBA", False)  # as if numba did not import
    with pytest.raises(SolverOptionError, match="numba does not import"):
        registry.solve(chain, chain.store_all_memory(), "dp-offload", kernel="numba")
    auto = registry.solve(chain, chain.store_all_memory(), "dp-offload")
    assert auto.makespan == registry.solve(chain, chain.store_all_memory(), "dp-offload",
                                           kernel="numpy").makespan
