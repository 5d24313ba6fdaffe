"""parallel_map: input order, same results on every back end, failures name their item;
the progress bar draws only when asked or on a terminal."""
from __future__ import annotations

import io

import numpy as np
import pytest

from remat_theory.model.errors import RematError
from remat_theory.analysis.parallel import TaskFailedError, parallel_map
from remat_theory.analysis.progress import Progress


def _seeded_draw(seed):
    """A task that owns its random state: its result depends on its item only."""
    rng = np.random.default_rng(seed)
    return seed, float(rng.random()), int(rng.integers(0, 1000))


def _fail_on_five(x):
    if x == 5:
        raise ZeroDivisionError("five is not welcome")
    return x + 1


def test_serial_and_process_pool_give_the_same_ordered_results():
    items = list(range(23))
    expected = [_seeded_draw(s) for s in items]
    assert parallel_map(_seeded_draw, items, workers=1, progress=False) == expected
    assert parallel_map(_seeded_draw, items, workers=2, progress=False) == expected
    # more workers than items: capped, still ordered
    assert parallel_map(_seeded_draw, items[:3], workers=8, progress=False) == expected[:3]
    assert parallel_map(_seeded_draw, [], workers=2, progress=False) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_failure_names_the_item_and_keeps_the_cause(workers):
    with pytest.raises(TaskFailedError) as info:
        parallel_map(_fail_on_five, range(9), workers=workers, progress=False)
    err = info.value
    assert err.index == 5 and err.item == 5
    assert isinstance(err.__cause__, ZeroDivisionError)
    assert "five is not welcome" in str(err) and "item 5" in str(err)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(RematError, match="workers"):
        parallel_map(_seeded_draw, [1, 2], workers=0)
    with pytest.raises(RematError, match="module-level"):
        parallel_map(lambda x: x, [1, 2, 3], workers=2, progress=False)


def test_dask_local_cluster_matches_the_serial_map():
    pytest.importorskip("dask.distributed")
    items = list(range(12))
    expected = [_seeded_draw(s) for s in items]
    assert parallel_map(_seeded_draw, items, scheduler="local", workers=2, progress=False) == expected
    with pytest.raises(TaskFailedError) as info:
        parallel_map(_fail_on_five, range(9), scheduler="local", workers=2, progress=False)
    assert info.value.item == 5


def test_progress_bar_draws_only_when_enabled():
    quiet = io.StringIO()  # not a TTY: disabled by default
    with Progress(4, "work", stream=quiet) as bar:
        for _ in range(4):
            bar.update()
    assert quiet.getvalue() == ""
    loud = io.StringIO()
    with Progress(4, "work", stream=loud, enabled=True) as bar:
        for _ in range(4):
            bar.update()
    out = loud.getvalue()
    assert "work [" in out and "4/4" in out and out.endswith("\n")
    with pytest.raises(ValueError, match="total"):
        Progress(-1)


def _answers(report):
    """Everything a verify report says about the instances, without the timings."""
    return [(c["chain"], i["budget"], i["optimum"],
             [(r["solver"], r["status"], r["makespan"], r["peak_memory"], r["min_budget"])
              for r in i["results"]], len(i["violations"]))
            for c in report["details"] for i in c["instances"]]


def test_verify_sweep_on_a_local_dask_cluster_matches_the_single_process_run():
    pytest.importorskip("dask.distributed")
    from remat_theory.analysis.verify import VerifyConfig, run_verify

    def cfg(**kw):
        return VerifyConfig(seed=11, min_stages=2, max_stages=4, trials=2,
                            families=("random", "rnn"), solvers=("exhaustive", "store-all"),
                            budgets_per_chain=2, progress=False, **kw)

    serial = run_verify(cfg(workers=1))
    dask = run_verify(cfg(scheduler="local", workers=2))
    pool = run_verify(cfg(workers=2))
    assert serial["ok"] and serial["chains"] == 4
    assert _answers(dask) == _answers(serial) == _answers(pool)
    untimed = lambda rep: [{k: v for k, v in r.items() if k != "time"} for r in rep["summary"]]
    assert untimed(dask) == untimed(serial) == untimed(pool)
