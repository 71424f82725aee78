"""Running an experiment config end to end: validate, create the run directory, run every
pending trial, write the report. One sequence, shared by `fairbench run` and the Python API
(`fairbench.run`), so that a notebook run and a terminal run of one config are the same run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairbench.errors import ConfigError
from fairbench.report import Report, write_report
from fairbench.rundir.lock import run_lock
from fairbench.runner.config import ExperimentConfig, load_config, parse_config
from fairbench.runner.execute import RunSummary, execute, prepare_run
from fairbench.runner.overrides import apply_overrides
from fairbench.runner.preflight import preflight
from fairbench.runner.trial import TrialSpec

ConfigLike = str | Path | Mapping[str, Any] | ExperimentConfig


@dataclass(frozen=True)
class Outcome:
    run_dir: Path
    summary: RunSummary
    report: Report


def experiment_config(config: ConfigLike, overrides: list[str] | None = None) -> ExperimentConfig:
    """A validated config from a YAML path, a bundled config's name, a mapping of config keys
    or an `ExperimentConfig`, with Hydra-style `KEY=VALUE` overrides applied and validated
    like the file (`runner.overrides`), as `fairbench run CONFIG KEY=VALUE...` does."""
    if isinstance(config, str | Path):
        return load_config(str(config), list(overrides or []))
    if isinstance(config, ExperimentConfig):
        if not overrides:
            return config
        data, source = config.model_dump(exclude_defaults=True), f"config {config.name!r}"
    elif isinstance(config, Mapping):
        data, source = dict(config), "config mapping"
    else:
        raise ConfigError(
            f"config: expected a YAML path, a bundled config name, a dict or an "
            f"ExperimentConfig, got {type(config).__name__}"
        )
    if overrides:
        data = apply_overrides(data, list(overrides))
        source = f"{source} with overrides {' '.join(overrides)}"
    return parse_config(data, source)


def run_experiment(
    experiment: ExperimentConfig,
    run_dir: Path,
    workers: int = 1,
    quiet: bool = True,
    executor: str = "local",
    scheduler: str | None = None,
    warn: Callable[[str], None] = print,
) -> Outcome:
    """Validate the config and its data and calibrate every private configuration (pre-flight)
    before anything is written, then create `run_dir` (an existing directory of the same
    config resumes), run the trials not yet done and write the report. Failed trials are in
    the outcome's summary (and the store), not raised."""

    def checked(specs: list[TrialSpec]) -> None:
        for message in preflight(specs, experiment.seed_list).warnings:
            warn(message)

    specs = prepare_run(experiment, run_dir, warn=warn, preflight=checked)
    with run_lock(run_dir):  # one writer, until the report is written too
        summary = execute(specs, run_dir, workers, quiet, executor, scheduler)
        return Outcome(run_dir, summary, write_report(run_dir))
