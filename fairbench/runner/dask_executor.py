"""Trials on a Dask cluster, for grids that outgrow one machine.

Why Dask (distributed) rather than Ray: it installs as ~5 MB of mostly pure-Python wheels
(Ray's wheel alone is 76 MB), starts a local cluster in about 0.6 s on this 2-core machine,
and runs a tiny task in about 2 ms; trials are independent, CPU-bound Python calls, so the
task graph needs nothing beyond `Client.map`. Work units (`runner.stacking`: stacks of
trials, or single trials) are sent in bundles (about four per worker) so that per-task
overhead stays negligible next to trials of a second or less. Every
result comes back to the calling process, which alone writes the store.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable
from importlib.metadata import version

from fairbench.errors import ConfigError
from fairbench.rundir.row import TrialRow
from fairbench.runner import lifeline
from fairbench.runner.trial import TrialSpec
from fairbench.runner.worker import run_units

BATCHES_PER_WORKER = 4
CONNECT_TIMEOUT_S = 5


def bundles(units: list[list[TrialSpec]], workers: int) -> list[list[list[TrialSpec]]]:
    """Contiguous bundles of work units, about BATCHES_PER_WORKER per worker."""
    size = max(1, math.ceil(len(units) / (workers * BATCHES_PER_WORKER)))
    return [units[i : i + size] for i in range(0, len(units), size)]


def _distributed():
    try:
        import distributed
    except ImportError:
        raise ConfigError(
            "the dask executor needs distributed: pip install 'dp-fairbench[dask]'"
        ) from None
    return distributed


def connect(scheduler: str):
    """A client of the running scheduler at `scheduler` whose workers run this build of
    fairbench and torch, or one error line, within about CONNECT_TIMEOUT_S seconds."""
    client_class = _distributed().Client
    try:
        client = client_class(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
    except Exception as exc:  # OSError (nothing listening), ValueError (the address), ...
        raise ConfigError(
            f"--scheduler {scheduler}: {exc}; start one with `dask scheduler`, "
            "or check the address and that its port is open"
        ) from None
    try:
        _check_workers(client, scheduler)
    except BaseException:
        client.close()
        raise
    return client


def _check_workers(client, scheduler: str) -> None:
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
    except TimeoutError:
        raise ConfigError(
            f"--scheduler {scheduler}: no worker joined within {CONNECT_TIMEOUT_S} s; "
            f"start some with `dask worker {scheduler}`"
        ) from None
    for package in ("dp-fairbench", "torch"):  # stdlib calls: they run without fairbench
        here = version(package)
        for worker, there in client.run(version, package, on_error="return").items():
            if there != here:
                found = there if isinstance(there, str) else "none"
                raise ConfigError(
                    f"--scheduler {scheduler}: worker {worker} has {package} {found}, this "
                    f"machine {here}: install the same build on every machine"
                )


def check_scheduler(scheduler: str) -> None:
    """Fail now, before anything is written, if the cluster cannot run the trials."""
    connect(scheduler).close()


def run_on_dask(
    units: list[list[TrialSpec]],
    workers: int,
    record: Callable[[TrialSpec, TrialRow | None, str | None], None],
    scheduler: str | None = None,
) -> None:
    """Run the work `units` on the cluster at `scheduler` (a `LocalCluster` of `workers` single-
    threaded processes when None), recording each trial as its bundle returns."""
    distributed = _distributed()
    cluster = None
    if scheduler is None:  # its workers are ours: they end with this process (lifeline)
        cluster = distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            preload=[lifeline.__name__],
        )
        client = distributed.Client(cluster)
    else:
        client = connect(scheduler)
    futures = []
    try:
        n_workers = max(1, len(client.scheduler_info()["workers"]))
        futures = client.map(run_units, bundles(units, n_workers), pure=False)
        for future in distributed.as_completed(futures):
            for spec, result, error in future.result():
                record(spec, result, error)
    except BaseException:  # interrupted, or the store failed: abandon what is in flight
        client.cancel(futures)  # what a shared cluster would otherwise still compute
        if cluster is not None:
            _kill_local_workers(cluster)
        raise
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _kill_local_workers(cluster) -> None:
    """Kill a local cluster's worker processes at once: closing the cluster asks each worker
    to finish its task and kills it only after four seconds, with tracebacks in between. Its
    nannies are told first not to restart them."""
    for nanny in cluster.workers.values():
        nanny.close_gracefully()
    for process in multiprocessing.active_children():  # the workers: nothing else runs here
        process.kill()
        process.join()
