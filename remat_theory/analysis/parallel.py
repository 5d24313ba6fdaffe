"""Run a sweep of independent tasks on all cores, or on a Dask cluster.

:func:`parallel_map` is the one sweep primitive of the package (used by ``remat verify``,
``remat hard`` and ``remat bench``): it applies a top-level (picklable) function to every
item and returns the results **in input order**.  Where a task runs never changes what it
returns: every task must carry its own seed in its item (never draw from a shared random
state), so a sweep gives the same results with 1 worker, 16 workers or a cluster.

Back ends
---------
* ``workers=1``: a plain loop in this process (no pool, easiest to debug and profile).
* ``workers=N`` (default: every core): a :class:`concurrent.futures.ProcessPoolExecutor`.
* ``scheduler="tcp://host:8786"``: a running ``dask.distributed`` scheduler (whose workers
  must have this package installed); ``scheduler="local"``: an in-process
  ``dask.distributed.LocalCluster`` with ``workers`` threads, mostly for tests and
  trying the Dask path out.  Dask is an optional extra, imported only here and only then.

A task that raises stops the sweep: the pending tasks are cancelled and
:class:`TaskFailedError` is raised, naming the index and the item that failed, with the
original exception as its ``__cause__``.
"""
from __future__ import annotations

import os
import pickle
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterable, Sequence

from remat_theory.model.errors import RematError
from remat_theory.analysis.progress import Progress

__all__ = ["parallel_map", "TaskFailedError", "default_workers"]


class TaskFailedError(RematError):
    """A task of :func:`parallel_map` raised.

    Attributes: ``index`` (position of the item), ``item`` (the item itself), ``error``
    (the exception the task raised, also the ``__cause__``).
    """

    def __init__(self, index: int, item: Any, error: BaseException):
        self.index = index
        self.item = item
        self.error = error
        text = repr(item)
        if len(text) > 300:
            text = text[:297] + "..."
        super().__init__(f"task {index} failed on item {text}: {type(error).__name__}: {error}")


def default_workers() -> int:
    """Number of cores this process may use (its CPU affinity where the OS tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _check_workers(workers) -> int:
    if workers is None:
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise RematError(f"workers = {workers!r} must be an integer >= 1")
    return workers


def parallel_map(func: Callable[[Any], Any], items: Iterable, *, workers: int | None = None,
                 scheduler: Any = None, progress: bool | None = True, desc: str = "") -> list:
    """``[func(item) for item in items]``, computed in parallel, in input order.

    Parameters
    ----------
    func : a module-level function (it is pickled to reach the workers).
    items : the task arguments, one per task (each picklable).
    workers : processes (or Dask threads for ``scheduler="local"``); default every core;
        1 runs in this process.  Ignored for a remote Dask scheduler (the cluster decides).
    scheduler : None (local processes), ``"local"`` (in-process Dask ``LocalCluster``), a
        Dask scheduler address such as ``"tcp://10.0.0.5:8786"``, or a
        ``dask.distributed.Client`` / ``LocalCluster`` object already running.
    progress : draw a progress bar on stderr (only when stderr is a terminal);
        ``False`` never draws.
    desc : label of the progress bar.

    Raises
    ------
    TaskFailedError : a task raised (the sweep stops; its item is named).
    RematError : bad ``workers``, unpicklable ``func``, Dask missing or unreachable.
    """
    items = list(items)
    n_workers = _check_workers(workers)
    enabled = None if progress else False
    if scheduler is not None:
        return _dask_map(func, items, scheduler, workers, enabled, desc)
    if n_workers == 1 or len(items) <= 1:
        return _serial_map(func, items, enabled, desc)
    _check_picklable(func)
    return _process_map(func, items, min(n_workers, len(items)), enabled, desc)


def _check_picklable(func) -> None:
    try:
        pickle.dumps(func)
    except Exception as e:  # noqa: BLE001 - any pickling failure means the same thing
        name = getattr(func, "__qualname__", repr(func))
        raise RematError(f"func {name} cannot be sent to worker processes (it must be a "
                         f"module-level function): {e}") from None


def _serial_map(func, items: Sequence, enabled, desc) -> list:
    out = []
    with Progress(len(items), desc, enabled=enabled) as bar:
        for i, item in enumerate(items):
            try:
                out.append(func(item))
            except Exception as e:  # noqa: BLE001 - re-raised with the item named
                raise TaskFailedError(i, item, e) from e
            bar.update()
    return out


def _process_map(func, items: Sequence, n_workers: int, enabled, desc) -> list:
    results: list = [None] * len(items)
    with Progress(len(items), desc, enabled=enabled) as bar, \
            ProcessPoolExecutor(max_workers=n_workers) as pool:
        futures = {pool.submit(func, item): i for i, item in enumerate(items)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                # Report the failed task with the smallest index, so the error does not
                # depend on which process happened to finish first.
                failed = sorted((futures[f], f) for f in done if f.exception() is not None)
                if failed:
                    i, f = failed[0]
                    for p in pending:
                        p.cancel()
                    err = f.exception()  # BrokenProcessPool too: a worker died
                    raise TaskFailedError(i, items[i], err) from err
                for f in done:
                    results[futures[f]] = f.result()
                bar.update(len(done))
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return results


#: Address schemes of Dask's communication layer.
DASK_SCHEMES = ("tcp", "tls", "inproc", "ucx", "ws", "wss")


def check_scheduler(scheduler) -> None:
    """Raise :class:`RematError` unless ``scheduler`` is None, ``'local'``, a Dask address
    (``tcp://host:port``, ``tls://...``, or ``host:port``), a Client or a cluster: checked
    before any work, so that a typo does not surface after the sweep was set up."""
    if scheduler is None or scheduler == "local" or not isinstance(scheduler, str):
        return
    scheme, sep, rest = scheduler.partition("://")
    if not sep:
        scheme, rest = "tcp", scheduler
    host, colon, port = rest.rpartition(":")
    if scheme not in DASK_SCHEMES or (scheme != "inproc" and (
            not colon or not host or not port.isascii() or not port.isdigit())):
        raise RematError(f"scheduler = {scheduler!r} is not 'local' nor a Dask scheduler "
                         f"address (SCHEME://HOST:PORT with SCHEME one of "
                         f"{', '.join(DASK_SCHEMES)}, e.g. tcp://127.0.0.1:8786)")


def _dask_map(func, items: Sequence, scheduler, workers, enabled, desc) -> list:
    check_scheduler(scheduler)
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise RematError("scheduler = {!r} needs dask.distributed, which is not installed "
                         "(pip install 'remat[dask]')".format(scheduler)) from None
    owned: list = []  # objects this call created and must close
    try:
        if isinstance(scheduler, str):
            if scheduler == "local":
                threads = _check_workers(workers)
                cluster = LocalCluster(n_workers=1, threads_per_worker=threads, processes=False,
                                       dashboard_address=None)
                owned.append(cluster)
                client = Client(cluster)
                owned.append(client)
            else:
                try:
                    client = Client(scheduler, timeout="10s")
                except (OSError, TimeoutError) as e:
                    raise RematError(f"cannot reach the Dask scheduler at {scheduler!r}: {e}") from None
                owned.append(client)
        elif hasattr(scheduler, "submit") and hasattr(scheduler, "gather"):
            client = scheduler
        elif hasattr(scheduler, "scheduler_address"):
            client = Client(scheduler)
            owned.append(client)
        else:
            raise RematError(f"scheduler = {scheduler!r} is not an address, 'local', a Dask "
                             "Client or a cluster")
        if not items:
            return []
        futures = client.map(func, items, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * len(items)
        with Progress(len(items), desc, enabled=enabled) as bar:
            failures = []
            for f in as_completed(futures):
                i = index[f.key]
                if f.status == "error":
                    failures.append((i, f.exception()))
                    break
                results[i] = f.result()
                bar.update()
            if failures:
                client.cancel(futures)
                i, err = failures[0]
                raise TaskFailedError(i, items[i], err) from err
        return results
    finally:
        for obj in reversed(owned):
            try:
                obj.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
