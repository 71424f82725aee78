"""Running a grid of trials into a run directory: in-process or in worker processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from fairbench.errors import ConfigError, Interrupted
from fairbench.methods import method_class
from fairbench.methods.base import series_label
from fairbench.rundir import CONFIG_FILE, saved_config
from fairbench.rundir.lock import run_lock
from fairbench.rundir.models import save_model
from fairbench.rundir.row import TrialRow
from fairbench.rundir.store import ResultStore
from fairbench.runner.config import ExperimentConfig, expand, parse_config
from fairbench.runner.interrupt import Stopped, stop_on_signals
from fairbench.runner.progress_display import trial_progress
from fairbench.runner.stacking import work_units
from fairbench.runner.trial import TrialSpec
from fairbench.runner.worker import failure_message, init_worker, run_unit

WORKER_GRACE_SECONDS = 1.0  # for a terminated worker to exit before it is killed


@dataclass(frozen=True)
class RunSummary:
    total: int
    skipped: int  # already finished before this invocation
    done: int
    failed: list[tuple[str, str]]  # (trial_id, error)


def resolved_config(config: ExperimentConfig, specs: list[TrialSpec]) -> dict[str, Any]:
    """The config with every default filled in and dataset fallbacks applied: what was run.
    `tuned_by` is left out when unset, so run directories written before it existed resume."""
    data = config.model_dump()
    if data["tuned_by"] is None:
        del data["tuned_by"]
    datasets = {(s.dataset, json.dumps(s.dataset_options, sort_keys=True)): s for s in specs}
    data["datasets"] = [
        {"name": s.dataset, "options": s.dataset_options, "if_missing": "error"}
        for s in datasets.values()
    ]
    if specs:  # the device the trials run on, never `auto`
        data["device"] = specs[0].device
    for entry in data["methods"]:
        label = series_label(entry["label"] or entry["name"], method_class(entry["name"]))
        first = next(s for s in specs if s.label == label and s.method == entry["name"])
        entry["hparams"] = {k: v for k, v in first.hparams.items() if k not in entry["sweep"]}
    return data


def prepare_run(
    config: ExperimentConfig,
    run_dir: Path,
    warn: Callable[[str], None] = print,
    extend: bool = False,
    preflight: Callable[[list[TrialSpec]], None] | None = None,
) -> list[TrialSpec]:
    """Validate the config and its data, then create (or re-open) the run directory.

    Nothing is written before validation passed; an existing run directory is only reused for
    the same resolved config, so results of different experiments are never mixed. With
    `extend` (tune, when a method joins a comparison), a config that keeps every method entry
    of the existing one unchanged and adds others is the same experiment, grown: the saved
    config is replaced and only the new entries' trials are left to run. `preflight` (the
    run's calibration pass, `runner.preflight`) runs after the directory checks and before
    the first write, which it makes under the directory's lock (`rundir.lock`); hold
    `run_lock(run_dir)` around this, `execute` and the report to keep it throughout.
    """
    specs = expand(config, warn)
    resolved = resolved_config(config, specs)
    path = run_dir / CONFIG_FILE
    _check_writable(run_dir)
    if path.exists():
        existing = yaml.safe_load(path.read_text())
        if existing.get("device") == "auto":  # saved before runs recorded the device used
            existing["device"] = resolved["device"]
        if existing == resolved:
            return specs
        if not (extend and _grown(existing, resolved)):
            raise ConfigError(
                f"{run_dir} holds a run of a different config ({config_diff(existing, resolved)}"
                f"); pass another --out directory, or --resume {run_dir} without a config to "
                "continue the run that is there"
            )
        added = len(resolved["methods"]) - len(existing["methods"])
        warn(f"{run_dir}: {added} method entries join the run; the others' trials are kept")
    if preflight is not None:
        preflight(specs)
    try:  # permission bits do not tell everything (root, special file systems)
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(run_dir, run_dir.parent, exc.strerror or str(exc)) from None
    with run_lock(run_dir):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(resolved, sort_keys=False))
        tmp.replace(path)
    return specs


def _check_writable(run_dir: Path) -> None:
    """The run directory can be created and written: checked before anything is written."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"--out {run_dir} is an existing file; give a directory path")
    parent = next(p for p in (run_dir, *run_dir.parents) if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise _unwritable(run_dir, parent, "not writable")


def _unwritable(run_dir: Path, parent: Path, why: str) -> ConfigError:
    return ConfigError(
        f"cannot write the run directory {run_dir} ({parent}: {why}); give an --out directory "
        "you can write to"
    )


def config_diff(existing: dict[str, Any], other: dict[str, Any], shown: int = 4) -> str:
    """The keys on which two resolved configs differ, with both values, as one short line."""
    left, right = _flatten(existing), _flatten(other)
    keys = [k for k in sorted(set(left) | set(right)) if left.get(k) != right.get(k)]
    parts = [f"{k}: {_short(left.get(k))} there, {_short(right.get(k))} here" for k in keys[:shown]]
    more = f"; {len(keys) - shown} more keys differ" if len(keys) > shown else ""
    return "; ".join(parts) + more


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves; entries of lists of named entries keyed by their label/name."""
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) and "name" in v for v in value)
    ):
        items = ((v.get("label") or v["name"], v) for v in value)
    else:
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, child in items:
        out.update(_flatten(child, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _short(value: Any) -> str:
    text = "(absent)" if value is None else json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _grown(existing: dict[str, Any], resolved: dict[str, Any]) -> bool:
    """Whether `resolved` is `existing` with method entries added and nothing else changed (a
    key the existing config predates counts as unchanged while it holds its default)."""
    fields = ExperimentConfig.model_fields
    for key in (set(existing) | set(resolved)) - {"methods"}:
        if key not in existing and key in fields and resolved.get(key) == fields[key].default:
            continue
        if existing.get(key) != resolved.get(key):
            return False
    return all(entry in resolved["methods"] for entry in existing["methods"])


def load_run_config(run_dir: Path) -> ExperimentConfig:
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no {CONFIG_FILE}); check the path")
    return parse_config(saved_config(run_dir), str(path))


def execute(
    specs: Iterable[TrialSpec],
    run_dir: Path,
    workers: int = 1,
    quiet: bool = False,
    executor: str = "local",
    scheduler: str | None = None,
) -> RunSummary:
    """Run every trial not yet done; each result is committed as soon as it arrives, by this
    process alone (the single writer, holding the directory's lock), whichever executor ran
    it: `local` (in-process, or worker processes) or `dask` (a cluster at `scheduler`, else a
    local one).

    SIGINT or SIGTERM stop the run (`runner.interrupt`): no further trial is recorded,
    in-flight ones are abandoned, every worker process is terminated, and `Interrupted` is
    raised with the count of this grid's trials the store holds."""
    specs = sorted(specs, key=lambda s: (s.seed, s.dataset, s.method, str(s.epsilon)))
    with run_lock(run_dir), stop_on_signals():
        try:
            return _run_pending(specs, run_dir, workers, quiet, executor, scheduler)
        except (Stopped, KeyboardInterrupt) as stop:
            signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
            store = ResultStore(run_dir)
            try:
                stored = len(store.done_ids() & {s.trial_id for s in specs})
            finally:
                store.close()
            resume = f"fairbench run --resume {run_dir}"
            raise Interrupted(stored, len(specs), signum, resume) from None


def _run_pending(
    specs: list[TrialSpec],
    run_dir: Path,
    workers: int,
    quiet: bool,
    executor: str,
    scheduler: str | None,
) -> RunSummary:
    store = ResultStore(run_dir)
    try:
        finished = store.done_ids()
        pending = [s for s in specs if s.trial_id not in finished]
        # whole stacks run again where one of their trials is pending, so that a trial's
        # stack-mates, hence its numbers, never depend on what an earlier run finished
        units = [u for u in work_units(specs) if any(s.trial_id not in finished for s in u)]
        failed: list[tuple[str, str]] = []
        with trial_progress(len(pending), quiet) as advance:

            def record(spec: TrialSpec, result: TrialRow | None, error: str | None) -> None:
                if spec.trial_id in finished:  # a stack-mate stored by an earlier run
                    return
                if result is not None:
                    save_model(run_dir, spec.trial_id, result.model_state)
                    store.record_done(spec.trial_id, asdict(spec), result.to_record())
                else:
                    assert error is not None  # a trial without a result failed with a message
                    failed.append((spec.trial_id, error))
                    store.record_failed(spec.trial_id, asdict(spec), error)
                advance(result is None)

            if executor == "dask":
                from fairbench.runner.dask_executor import run_on_dask

                run_on_dask(units, workers, record, scheduler)
            elif workers <= 1 or len(units) <= 1:
                for unit in units:
                    for spec, result, error in run_unit(unit):
                        record(spec, result, error)
            else:
                _run_pool(units, workers, record)
        return RunSummary(len(specs), len(specs) - len(pending), len(pending) - len(failed), failed)
    finally:
        store.close()


def _run_pool(units: list[list[TrialSpec]], workers: int, record) -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=init_worker) as pool:
        futures: dict[Future, list[TrialSpec]] = {pool.submit(run_unit, u): u for u in units}
        try:
            while futures:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                for fut in done:
                    unit = futures.pop(fut)
                    exc = fut.exception()
                    if exc is not None:  # the worker died: every trial of the unit failed
                        for spec in unit:
                            record(spec, None, failure_message(exc))
                        continue
                    for spec, result, error in fut.result():
                        record(spec, result, error)
        except BaseException:  # interrupted, or the store failed: abandon what is in flight
            # killing the workers breaks the pool, which fails every pending future itself
            # (cancelling them first makes Python 3.11's pool thread raise InvalidStateError)
            _terminate(list(pool._processes.values()))  # no public way before Python 3.14
            raise


def _terminate(processes: list[multiprocessing.process.BaseProcess]) -> None:
    """End worker processes now (SIGTERM, then SIGKILL for any still there after a second),
    so that leaving the pool's block does not wait for their trials."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(WORKER_GRACE_SECONDS)
        if process.is_alive():
            process.kill()
            process.join()


def default_workers() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
