"""Running a grid of trials into a run directory: in-process or in worker processes."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fairbench.errors import ConfigError
from fairbench.methods import method_class
from fairbench.methods.base import series_label
from fairbench.rundir import CONFIG_FILE, saved_config
from fairbench.rundir.row import TrialRow
from fairbench.rundir.store import ResultStore
from fairbench.runner.config import ExperimentConfig, expand, parse_config
from fairbench.runner.stacking import work_units
from fairbench.runner.trial import TrialSpec
from fairbench.runner.worker import failure_message, init_worker, run_unit


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
    the first write.
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
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v
                                                    for v in value):  # fmt: skip
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
    process alone (the single writer), whichever executor ran it: `local` (in-process, or
    worker processes) or `dask` (a cluster at `scheduler`, else a local one)."""
    specs = sorted(specs, key=lambda s: (s.seed, s.dataset, s.method, str(s.epsilon)))
    store = ResultStore(run_dir)
    try:
        finished = store.done_ids()
        pending = [s for s in specs if s.trial_id not in finished]
        # whole stacks run again where one of their trials is pending, so that a trial's
        # stack-mates, hence its numbers, never depend on what an earlier run finished
        units = [u for u in work_units(specs) if any(s.trial_id not in finished for s in u)]
        failed: list[tuple[str, str]] = []
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            disable=quiet,
        )
        with progress:
            bar = progress.add_task("trials", total=len(pending))

            def record(spec: TrialSpec, result: TrialRow | None, error: str | None) -> None:
                if spec.trial_id in finished:  # a stack-mate stored by an earlier run
                    return
                if result is not None:
                    store.record_done(spec.trial_id, asdict(spec), result.to_record())
                else:
                    failed.append((spec.trial_id, error))
                    store.record_failed(spec.trial_id, asdict(spec), error)
                progress.advance(bar)

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
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def default_workers() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
