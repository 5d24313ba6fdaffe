"""The DPs' two kernels (option ``kernel``, solvers/dp_kernel.py) give the same answers.

The numpy kernel is the oracle here (it is itself checked against exhaustive search by
tests/test_dp.py); the numba kernel's tables must equal it value for value, and both
solvers' schedules replayed through the simulator must give the same makespan.  Small
chains only: the compiled code is loaded from numba's cache, the first run compiles.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from remat_theory import Chain, simulate
from remat_theory.analysis import families
from remat_theory.model.errors import SolverOptionError
from remat_theory.strategies import chains_and_budgets
from solvers import dp_kernel
from solvers._dp_tables import UnitChain
from solvers.dp_table import FusedTable, PersistentTable, skewed_min_memory, skewed_saturation
from solvers.dp_weak import WeakTable

pytest.importorskip("numba")

VARIATIONS = {"plain": chains_and_budgets(1, 8, overheads=None),
              "fall-costs-unsaved": chains_and_budgets(2, 6, fall_costs=None,
                                                       unsaved_outputs=True)}


def _same_answer(chain, budget, label, **opts):
    a = solvers.solve(chain, budget, label, kernel="numpy", **opts)
    b = solvers.solve(chain, budget, label, kernel="numba", **opts)
    assert (a.status, a.makespan, a.min_budget) == (b.status, b.makespan, b.min_budget)
    assert a.schedule == b.schedule
    if b.schedule is not None:  # the simulator, not the solver, says what it costs
        sim = simulate(chain, b.schedule, budget)
        assert sim.makespan == pytest.approx(b.makespan, rel=1e-12, abs=1e-9)
        assert sim.peak_memory <= budget


@pytest.mark.parametrize("variation", list(VARIATIONS))
@pytest.mark.parametrize("label, examples", [("dp", 30), ("dp-weak", 20)])
def test_kernels_give_the_same_answer(label, examples, variation):
    @settings(max_examples=examples, deadline=None)
    @given(VARIATIONS[variation], st.sampled_from([None, 7, 40]))
    def check(cb, slots):
        chain, budget = cb
        _same_answer(chain, budget, label, slots=slots)

    check()


def _tables_equal(uc, M, dtype):
    a, b = PersistentTable(uc, M, dtype), FusedTable(uc, M, dtype)
    for s in range(uc.L + 1):
        for t in range(s, uc.L + 1):
            for m in range(-1, M + 2):
                va, vb = a.value(s, t, m), b.value(s, t, m)
                assert va == vb, (s, t, m, va, vb)
                if m % 3 == 0 and m <= M and va < np.inf:  # the vectorized choice, the loop's
                    assert a.choice(s, t, m) == b.choice(s, t, m), (s, t, m)
    return b


@pytest.mark.parametrize("times, dtype", [("integer", np.float32), ("integer", np.float64),
                                          ("real", np.float64), ("large", np.float32)])
def test_fused_table_equals_numpy_table_everywhere(times, dtype):
    """Every (s, t, m), below the window, in it and above it: with integer times most of a
    window is kept as a 2-byte excess, with real times all of it in the dtype, with times
    large enough that the excess passes 65534 part of it ("head") in the dtype."""
    chain = families.make("random", 14, 3, integer_times=times != "real")
    if times == "large":
        chain = Chain([v * 20000 for v in chain.fwd_time], [v * 20000 for v in chain.bwd_time],
                      chain.x_size, chain.tape_size, chain.fwd_overhead, chain.bwd_overhead)
    uc, _ = UnitChain.exact(chain)
    M = uc.store_all_units() * 2 // 3
    b = _tables_equal(uc, M, dtype)
    head, tail = b.stored_cells
    # the store holds each segment's window [mm, sat) (capped at M + 1), nothing else
    mm, sat = skewed_min_memory(uc), skewed_saturation(uc)
    W, L = M + 1, uc.L
    window = sum(max(0, min(int(sat[s, n]), W) - min(int(mm[s, n]), W))
                 for s in range(L + 1) for n in range(L + 1 - s))
    assert head + tail == window
    assert (tail > 0) == (times != "real")
    assert (head > 0) == (times != "integer")


@pytest.mark.parametrize("integer", [True, False])
def test_fused_table_equals_numpy_table_at_depth(integer):
    """A 40-stage chain: deep enough that the kernel's main loop runs (splits whose left
    part was stored in an earlier block of columns, taken four at a time, and with integer
    times cut where no split of the four can beat the running minimum); every segment's
    row over every memory value equal to numpy's, and the same answer replayed."""
    chain = families.make("random", 40, 1, integer_times=integer)
    uc, _ = UnitChain.exact(chain)
    M = uc.store_all_units() // 2
    dtype = np.float32 if integer else np.float64
    a, b = PersistentTable(uc, M, dtype), FusedTable(uc, M, dtype)
    ms = np.arange(-1, M + 2)
    for s in range(uc.L + 1):
        for t in range(s, uc.L + 1):
            row = b._values(np.full(len(ms), s), np.full(len(ms), t), ms)
            assert np.array_equal(row, [a.value(s, t, int(m)) for m in ms]), (s, t)
    budget = (chain.memory_lower_bound() + chain.store_all_memory()) // 2
    _same_answer(chain, budget, "dp")


def test_min_memory_table_the_same_compiled():
    """dp's least feasible memory of every segment, numpy's and the compiled loop's: equal
    (unsaved outputs, barriers, a homogeneous chain)."""
    chains = [(families.make("random", 12, 4), ()), (families.make("homogeneous", 9, 0), ()),
              (families.make("random", 10, 1), (3, 6))]
    c = families.make("random", 8, 2)
    chains.append((Chain(c.fwd_time, c.bwd_time, c.x_size, c.tape_size,
                         output_saved=[True, False, False, True, False, True, True, False]), ()))
    for chain, barriers in chains:
        uc, _ = UnitChain.exact(chain, barriers)
        assert np.array_equal(skewed_min_memory(uc), skewed_min_memory(uc, kernel="numba"))


def test_weak_tables_equal_and_float32_only_when_exact():
    """dp-weak's compiled tables equal numpy's (unsaved outputs: the K rows too); with times
    so large that a value passes 2^24 the kernel builds float64, not a rounded float32."""
    for chain in (families.make("random", 9, 2), families.make("random", 7, 5,
                                                                 integer_times=False)):
        uc, _ = UnitChain.exact(chain)
        M = uc.store_all_units() // 2
        a, b = WeakTable(uc, M, kernel="numpy"), WeakTable(uc, M, kernel="numba")
        for s in range(uc.L + 1):
            assert np.array_equal(a.Wa[s], b.Wa[s])
        assert all(np.array_equal(a.Ra[k], b.Ra[k]) for k in a.Ra)
    big = Chain([3.0e6] * 6, [5.0e6] * 7, [1] * 7, [2] * 6)
    uc, _ = UnitChain.exact(big)
    M = uc.store_all_units()
    a, b = WeakTable(uc, M, kernel="numpy"), WeakTable(uc, M, kernel="numba")
    assert b.Wa[0].dtype == np.float64 and max(a.Wa[0][-1][np.isfinite(a.Wa[0][-1])]) > 2 ** 24
    assert all(np.array_equal(a.Wa[s], b.Wa[s]) for s in range(uc.L + 1))


def test_sweep_with_either_kernel():
    from solvers.dp_sweep import sweep
    chain = families.make("resnet", 9, 1)
    budgets = range(chain.store_all_memory() // 3, chain.store_all_memory() + 1, 7)
    for label in ("dp", "dp-weak"):
        assert sweep(chain, budgets, label, kernel="numba") == sweep(chain, budgets, label,
                                                                     kernel="numpy")


def test_min_plus_rows_public_entry():
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        left = rng.integers(0, 50, (9, 33)).astype(dtype)
        right = rng.integers(0, 50, (9, 33)).astype(dtype)
        left[rng.random((9, 33)) < 0.3] = np.inf
        out0 = rng.integers(0, 120, 33).astype(dtype)
        want = np.minimum(out0, (left + right).min(axis=0))
        for kernel in ("numba", "numpy"):
            got = dp_kernel.min_plus_rows(left, right, out0.copy(), kernel)
            assert np.array_equal(got, want)
    with pytest.raises(ValueError, match="shapes"):
        dp_kernel.min_plus_rows(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros(3))


def test_without_numba_auto_falls_back_and_numba_is_refused(monkeypatch):
    chain = families.make("random", 6, 0)
    budget = chain.store_all_memory() // 2
    want = {label: solvers.solve(chain, budget, label, kernel="numpy") for label in
            ("dp", "dp-weak")}
    monkeypatch.setattr(dp_kernel, "_NUMBA", False)  # as when numba does not import
    assert not dp_kernel.numba_available()
    for label in ("dp", "dp-weak"):
        got = solvers.solve(chain, budget, label)  # auto: numpy, silently
        assert (got.makespan, got.schedule) == (want[label].makespan, want[label].schedule)
        with pytest.raises(SolverOptionError, match="kernel = 'numba'.*pip install numba"):
            solvers.solve(chain, budget, label, kernel="numba")


def test_auto_compiles_only_where_it_repays():
    # a small chain's numpy table takes milliseconds, loading the compiled kernels up to
    # seconds: auto keeps numpy there, and takes numba past the threshold
    small = dp_kernel.AUTO_MIN_NUMPY_SECONDS / 10
    assert dp_kernel.resolve_kernel("auto", "dp", small) == "numpy"
    assert dp_kernel.resolve_kernel("numba", "dp", small) == "numba"  # asked for: honoured
    big = dp_kernel.AUTO_MIN_NUMPY_SECONDS * 10
    assert dp_kernel.resolve_kernel("auto", "dp", big) == "numba"
    assert dp_kernel.resolve_kernel("numpy", "dp", big) == "numpy"
    # the solvers pass their estimate: a 6-stage chain builds the numpy tables under auto
    chain = families.make("random", 6, 0)
    budget = chain.store_all_memory() // 2
    seen = []
    real = dp_kernel.resolve_kernel

    def spy(kernel, solver, numpy_seconds=None):
        seen.append((solver, numpy_seconds, real(kernel, solver, numpy_seconds)))
        return seen[-1][-1]
    import solvers.dp as dp_mod
    import solvers.dp_weak as dp_weak_mod
    for mod in (dp_mod, dp_weak_mod):
        setattr(mod, "resolve_kernel", spy)
    try:
        for label in ("dp", "dp-weak"):
            solvers.solve(chain, budget, label)
    finally:
        for mod in (dp_mod, dp_weak_mod):
            setattr(mod, "resolve_kernel", real)
    sized = [(s, k) for s, sec, k in seen if sec is not None]
    assert {s for s, _ in sized} == {"dp", "dp-weak"}
    assert all(k == "numpy" for _, k in sized)


@pytest.mark.parametrize("label", ["dp", "dp-weak"])
def test_kernel_option_is_checked_and_documented(label):
    chain = families.make("random", 3, 0)
    with pytest.raises(SolverOptionError, match="kernel"):
        solvers.solve(chain, chain.store_all_memory(), label, kernel="cuda")
    assert "kernel" in solvers.get(label).options


# dp-weak's rebuild picks, for each subproblem, the first least candidate of a vector per
# split; the oracle is the plain enumeration below (one candidate at a time, in the same
# order, every value formed by the same float64 operations), min() taking the first least.
def _w_options(T, s, t, m):
    uc, cf, x = T.uc, T.uc.cf, T.uc.x
    g = uc.g(t)
    if s == t:
        yield 0.0, "base", ()
        return
    if m >= uc.fall_needs(s, t):
        yield (T.w(s + 1, t, m - int(uc.dA[s])) + (uc.fall[s] + uc.bwd[s]), "A",
               (("W", s + 1, t, m - int(uc.dA[s])),))
    if s in T.Ka and m >= g + uc.tape[s] + uc.fao[s]:
        h = int(uc.th[s])
        for j in range(s + 2, t + 1):
            yield (T.r(s + 1, t, j, m - h) + T.k(s, j - 1, m) + uc.fall[s], "Arel",
                   (("R", s + 1, t, j, m - h), ("K", s, j - 1, m)))
    for k in range(s + 1, t + 1):
        if g + uc.fp[s, k] > m:
            break
        yield (T.w(k, t, m - int(x[k])) + (cf[k] - cf[s]) + T.w(s, k - 1, m), ("pass", k),
               (("W", k, t, m - int(x[k])), ("W", s, k - 1, m)))
        for j in range(k + 1, t + 1):
            yield (T.r(k, t, j, m) + (cf[k] - cf[s]) + T.w(s, j - 1, m), ("pass", k),
                   (("R", k, t, j, m), ("W", s, j - 1, m)))


def _r_options(T, i, t, j, m):
    uc, cf, x = T.uc, T.uc.cf, T.uc.x
    g = uc.g(t)
    for l in range(i + 1, j + 1):
        if g + int(T.step[i:l].max()) > m:
            break
        nxt = ("W", l, t, m - int(x[l])) if l == j else ("R", l, t, j, m)
        val = T.w(l, t, m - int(x[l])) if l == j else T.r(l, t, j, m)
        yield val + (cf[l] - cf[i]), ("release", l), (nxt,)
    for k in range(i + 1, t + 1):
        if x[i] + g + uc.fp[i, k] > m:
            break
        if k > j:
            yield (T.w(k, t, m - int(x[i] + x[k])) + (cf[k] - cf[i]) + T.r(i, k - 1, j, m),
                   ("pass", k), (("W", k, t, m - int(x[i] + x[k])), ("R", i, k - 1, j, m)))
        for jp in range(max(k + 1, j + 1), t + 1):
            yield (T.r(k, t, jp, m - int(x[i])) + (cf[k] - cf[i]) + T.r(i, jp - 1, j, m),
                   ("pass", k), (("R", k, t, jp, m - int(x[i])), ("R", i, jp - 1, j, m)))


def _k_options(T, s, t, m):
    uc, cf, x = T.uc, T.uc.cf, T.uc.x
    if s == t:
        if m >= uc.bneed[s]:
            yield uc.bwd[s], "B", ()
        return
    g, h = uc.g(t), int(uc.th[s])
    for k in range(s + 1, t + 1):
        if h + g + uc.fp[s, k] > m:
            break
        d = h + int(x[k])
        yield (T.w(k, t, m - d) + (cf[k] - cf[s]) + T.k(s, k - 1, m), ("pass", k),
               (("W", k, t, m - d), ("K", s, k - 1, m)))
        for jp in range(k + 1, t + 1):
            yield (T.r(k, t, jp, m - h) + (cf[k] - cf[s]) + T.k(s, jp - 1, m), ("pass", k),
                   (("R", k, t, jp, m - h), ("K", s, jp - 1, m)))


def _first_least(options):
    options = list(options)
    best = min(options, key=lambda o: o[0]) if options else (np.inf,)
    return (best[0], best[1], tuple(best[2])) if best[0] < np.inf else None


def test_weak_rebuild_picks_the_first_least_candidate():
    """Every W, R and K subproblem of small chains (saved and unsaved outputs, heterogeneous
    and homogeneous, a tight and a loose budget): the vectorized choice equals the plain
    enumeration's, value, option and subproblems."""
    checked = 0
    for seed, (family, L) in enumerate([("random", 6), ("homogeneous", 6), ("random", 6)]):
        chain = families.make(family, L, seed)
        if seed == 2:
            chain = Chain(chain.fwd_time, chain.bwd_time, chain.x_size, chain.tape_size,
                          output_saved=[True, False, True, False, False, True])
        uc, _ = UnitChain.exact(chain)
        for M in (uc.store_all_units() // 3, uc.store_all_units() * 3 // 4):
            T = WeakTable(uc, M, kernel="numba")
            for s in range(L + 1):
                for t in range(s, L + 1):
                    for m in range(0, M + 1, 4):
                        b = T._best_w(s, t, m)
                        assert _first_least(_w_options(T, s, t, m)) == (b if b[1] else None)
                        if s in T.Ka and t < L:
                            b = T._best_k(s, t, m)
                            assert _first_least(_k_options(T, s, t, m)) == (b if b[1] else None)
                        for j in range(s + 1, t + 1) if s >= 1 else ():
                            b = T._best_r(s, t, j, m)
                            assert (_first_least(_r_options(T, s, t, j, m))
                                    == (b if b[1] else None))
                            checked += 1
    assert checked > 500
