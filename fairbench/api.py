"""The Python API: run a config and read a run directory from a notebook or a script.

    import fairbench
    run = fairbench.run("smoke", out="runs/smoke")     # the same run as `fairbench run smoke`
    run.pareto                                          # pandas DataFrames
    run.plot()                                          # a matplotlib Figure

`run` goes through the very sequence `fairbench run` does (`workflows.experiment`); `load_run`
opens any run directory, finished or not, including committed results that keep trials.csv
only. Tables are the report's own files (pareto.csv, paired.csv, constraints.csv), rewritten
from the store first when missing or older than it, so they never disagree with the CLI's.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairbench.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from fairbench.runner.config import ExperimentConfig

STORE = "results.sqlite"
TABLES = {"pareto": "pareto.csv", "paired": "paired.csv", "constraints": "constraints.csv"}


class Run:
    """A run directory: its config, its trials and the report's tables as DataFrames, its
    privacy ledger, and its trade-off plot."""

    def __init__(self, path: str | Path) -> None:
        from fairbench.rundir import CONFIG_FILE

        self.path = Path(path)
        if not (self.path / CONFIG_FILE).is_file():
            raise ConfigError(
                f"{self.path} is not a run directory (no {CONFIG_FILE}); check the path, or "
                "create one with fairbench.run(config, out=...)"
            )

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, name={self.config.get('name')!r})"

    @cached_property
    def config(self) -> dict[str, Any]:
        """The resolved config the run was started with (config.yaml), as a dict."""
        from fairbench.rundir import saved_config

        return saved_config(self.path)

    @property
    def trials(self) -> pd.DataFrame:
        """One row per finished trial, key columns first (as trials.csv), nested values
        (hyper-parameters, ledger, per-group metrics) as Python objects."""
        from fairbench.report.aggregate import trials_frame
        from fairbench.report.tables import LEAD_COLUMNS
        from fairbench.rundir.store import finished_rows

        frame = trials_frame(finished_rows(self.path, "load"))
        lead = [c for c in LEAD_COLUMNS if c in frame.columns]
        return frame[lead + [c for c in frame.columns if c not in lead]]

    @property
    def failures(self) -> pd.DataFrame:
        """Failed trials (trial_id, error), read from the store; empty without one."""
        import pandas as pd

        from fairbench.rundir.store import ResultStore

        if not (self.path / STORE).is_file():
            return pd.DataFrame(columns=["trial_id", "error"])
        store = ResultStore(self.path)
        try:
            return pd.DataFrame(store.failures(), columns=["trial_id", "error"])
        finally:
            store.close()

    @property
    def pareto(self) -> pd.DataFrame:
        """Pareto points: means and 95% CIs over seeds per (panel, method, config, knob)."""
        return self._table("pareto")

    @property
    def paired(self) -> pd.DataFrame:
        """Paired comparisons between methods at fixed violation levels."""
        return self._table("paired")

    @property
    def constraints(self) -> pd.DataFrame:
        """Constraint satisfaction on held-out data, counted per seed."""
        return self._table("constraints")

    @property
    def warnings(self) -> list[str]:
        """The report's caveats (lopsided budgets, calibration at a bound, ...)."""
        from fairbench.report.aggregate import merge_identical_knobs
        from fairbench.report.caveats import caveats

        trials = self.trials
        return caveats(trials, merge_identical_knobs(trials)[1])

    @property
    def privacy(self) -> pd.DataFrame:
        """The privacy ledger summary: per method entry and target epsilon, epsilon spent as
        the accountant computed it, delta, and each release's mechanism and noise scales."""
        from fairbench.report.ledger_summary import privacy_summary

        return privacy_summary(self.trials)

    def ledger(self, trial_id: str) -> pd.DataFrame:
        """One trial's privacy ledger: a row per accounted release (label, group, mechanism,
        rounds, sampling rate, noise scales)."""
        from fairbench.report.ledger_summary import ledger_releases

        trials = self.trials
        match = trials[trials["trial_id"] == trial_id]
        if match.empty:
            raise ConfigError(
                f"{self.path} has no finished trial {trial_id!r}; see run.trials['trial_id']"
            )
        return ledger_releases(match["ledger"].iloc[0] if "ledger" in match else None)

    @property
    def html(self) -> Path:
        """The self-contained HTML report (report.html), written first if missing or stale."""
        return self._fresh("report.html")

    def report(self) -> Path:
        """Rewrite every report file from the store (as `fairbench report`); report.html."""
        from fairbench.report import write_report

        return write_report(self.path).html

    def plot(
        self,
        ax: Axes | None = None,
        dataset: str | None = None,
        epsilon: float | None = None,
        notion: str | None = None,
    ) -> Figure:
        """Test error against held-out violation, mean ± 95% CI over seeds, as the report's
        figure: one panel per epsilon, or only `epsilon`'s; into `ax` when given (then one
        epsilon). `dataset` and `notion` (privacy notion) may be left out when the run has
        one."""
        from fairbench.report import hyperparameter_provenance
        from fairbench.report.plots import trade_off_figure

        points = self.pareto
        dataset = _pick(points["dataset"], dataset, "dataset")
        points = points[points["dataset"] == dataset]
        private = points[points["epsilon"] != float("inf")]
        notion = (
            _pick(private["privacy_notion"], notion, "notion") if len(private) else ("non-private")
        )
        if epsilon is not None:
            if not (points["epsilon"] == epsilon).any():
                choices = ", ".join(f"{e:g}" for e in sorted(points["epsilon"].unique()))
                raise ConfigError(f"epsilon={epsilon:g}: this run has {choices}")
            points = points[points["epsilon"].isin([epsilon, float("inf")])]
        elif ax is not None and private["epsilon"].nunique() > 1:
            choices = ", ".join(f"{e:g}" for e in sorted(private["epsilon"].unique()))
            raise ConfigError(f"one axes holds one epsilon: pass epsilon= one of {choices}")
        constraint = str(points["constraint"].iloc[0])
        return trade_off_figure(
            points,
            dataset,
            constraint,
            notion,
            self.config.get("references") or [],
            hyperparameter_provenance(self.config),
            ax=ax,
        )

    def _table(self, name: str) -> pd.DataFrame:
        import pandas as pd

        path = self._fresh(TABLES[name])
        frame = pd.read_csv(path, dtype={"knob_values": str})
        return frame.fillna({"knob_values": ""}) if "knob_values" in frame else frame

    def _fresh(self, name: str) -> Path:
        """The report file `name`, after rewriting the report if it is missing or older than
        the results store (a run still going, or resumed since)."""
        from fairbench.report import write_report

        path = self.path / name
        stores = [self.path / f"{STORE}{suffix}" for suffix in ("", "-wal")]
        newest = max((s.stat().st_mtime for s in stores if s.is_file()), default=0.0)
        if not path.is_file() or path.stat().st_mtime < newest:
            write_report(self.path)
        return path


def _pick(values: pd.Series, chosen: str | None, what: str) -> str:
    """`chosen`, checked against `values`; the only value when none is chosen."""
    options = sorted(values.dropna().unique())
    if chosen is None and len(options) == 1:
        return str(options[0])
    if chosen in options:
        return str(chosen)
    problem = f"{what}={chosen!r} is not in this run" if chosen else f"pass {what}="
    raise ConfigError(f"{problem}; choose one of: {', '.join(map(str, options))}")


def load_run(path: str | Path) -> Run:
    """Open a run directory (finished or partial, or committed results with trials.csv)."""
    return Run(path)


def run(
    config: str | Path | Mapping[str, Any] | ExperimentConfig,
    out: str | Path | None = None,
    workers: int = 1,
    overrides: list[str] | None = None,
    quiet: bool = True,
) -> Run:
    """Run `config` (a YAML path, a bundled config's name, a dict of config keys or an
    `ExperimentConfig`) exactly as `fairbench run` does, into `out` (default runs/NAME); an
    existing directory of the same config resumes. `overrides` are the CLI's `KEY=VALUE`
    strings (`["epsilons=[0.5,1]", "seeds=3"]`). Config warnings are Python warnings; failed
    trials are a `RuntimeWarning` and `Run.failures`. Bad input raises a `FairbenchError`."""
    from fairbench.workflows.experiment import experiment_config, run_experiment

    experiment = experiment_config(config, overrides)
    run_dir = Path(out) if out is not None else Path("runs") / experiment.name
    outcome = run_experiment(
        experiment,
        run_dir,
        workers=workers,
        quiet=quiet,
        warn=lambda message: warnings.warn(message, stacklevel=3),
    )
    if outcome.summary.failed:
        warnings.warn(
            f"{len(outcome.summary.failed)} of {outcome.summary.total} trials failed: "
            "see Run.failures",
            RuntimeWarning,
            stacklevel=2,
        )
    return Run(run_dir)
