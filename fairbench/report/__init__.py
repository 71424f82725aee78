"""Reports of a finished (or partly finished) run: trials.csv, pareto.csv/.md, paired.csv/.md
(paired comparisons at fixed violation levels), constraints.csv/.md, figures, a LaTeX (booktabs)
.tex beside every Markdown table, and report.html, the whole report in one offline page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fairbench.report.aggregate import merge_identical_knobs, pareto_points, trials_frame
from fairbench.report.caveats import caveats
from fairbench.report.constraints import (
    constraint_values,
    constraints_document,
    satisfaction_table,
)
from fairbench.report.document import Document
from fairbench.report.groups import group_document, group_table, smallest_group_figure
from fairbench.report.html import report_html
from fairbench.report.ledger_summary import privacy_summary
from fairbench.report.paired import paired_document, paired_table
from fairbench.report.plots import UNTUNED, satisfaction_figures, trade_off_figures
from fairbench.report.references import compare, references_document
from fairbench.report.tables import pareto_document, write_trials_csv
from fairbench.rundir import CONFIG_FILE, saved_config
from fairbench.rundir.store import finished_rows


@dataclass(frozen=True)
class Report:
    trials_csv: Path
    pareto_csv: Path
    pareto_md: Path
    constraints_csv: Path
    figures: list[Path]
    n_trials: int
    warnings: list[str]
    html: Path


def hyperparameter_provenance(config: dict) -> str:
    """How the run's hyper-parameters were chosen, for every title: a figure of hand-set
    defaults must not pass for a tuned comparison (issue 16)."""
    tuned_by = config.get("tuned_by")
    return f"tuned by {tuned_by}" if tuned_by else UNTUNED


def _grouped(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials that report per-group losses."""
    return trials[trials["test_group_loss"].map(lambda v: isinstance(v, list))]


def report_figures(
    run_dir: Path, trials: pd.DataFrame, points: pd.DataFrame, config: dict
) -> list[Path]:
    """The run's figures in `run_dir`/figures (PNG and PDF; returns the PNGs): trade-off,
    satisfaction and, where trials report per-group losses, the smallest group's loss."""
    hyper = hyperparameter_provenance(config)
    references = config.get("references") or []
    figures = trade_off_figures(points, run_dir / "figures", references, hyper)
    figures += satisfaction_figures(points, run_dir / "figures", hyper)
    if "test_group_loss" in trials.columns:
        figures += smallest_group_figure(_grouped(trials), run_dir / "figures")
    return figures


def write_figures(run_dir: Path) -> list[Path]:
    """Redraw only the figures of `run_dir` from its results (store or trials.csv), leaving
    every table as it is: what rebuilding committed figures with a new drawing needs."""
    trials = trials_frame(finished_rows(run_dir, "draw"))
    points = pareto_points(merge_identical_knobs(trials)[0])
    return report_figures(run_dir, trials, points, saved_config(run_dir))


def write_report(run_dir: Path) -> Report:
    """Regenerate every report file of `run_dir` from its results store; titled with the
    experiment's name from the run's saved config."""
    rows = finished_rows(run_dir, "report")
    config = saved_config(run_dir)
    hyper = hyperparameter_provenance(config)
    title = f"{config.get('name', run_dir.name)} ({hyper})"
    trials = trials_frame(rows)
    distinct, merged = merge_identical_knobs(trials)
    points = pareto_points(distinct)
    warnings = caveats(trials, merged)
    out = Report(
        run_dir / "trials.csv",
        run_dir / "pareto.csv",
        run_dir / "pareto.md",
        run_dir / "constraints.csv",
        [],
        len(trials),
        warnings,
        run_dir / "report.html",
    )
    documents: dict[str, Document] = {}  # Markdown file name -> document; a .tex beside each
    write_trials_csv(trials, out.trials_csv)
    points.to_csv(out.pareto_csv, index=False)
    documents["pareto.md"] = pareto_document(points, title, warnings)
    paired = paired_table(trials)
    paired.to_csv(run_dir / "paired.csv", index=False)
    documents["paired.md"] = paired_document(paired, title, warnings)
    satisfaction = satisfaction_table(trials)
    satisfaction.to_csv(out.constraints_csv, index=False)
    values = constraint_values(trials)
    values.to_csv(run_dir / "constraint_values.csv", index=False)
    documents["constraints.md"] = constraints_document(satisfaction, values, title)
    references = config.get("references") or []
    if references:
        table = compare(points, references)
        table.to_csv(run_dir / "references.csv", index=False)
        documents["references.md"] = references_document(table, title)
    out.figures.extend(report_figures(run_dir, trials, points, config))
    if "test_group_loss" in trials.columns:
        grouped = _grouped(trials)
        table = group_table(grouped)
        table.to_csv(run_dir / "group_losses.csv", index=False)
        documents["group_losses.md"] = group_document(table, title, int(grouped["seed"].nunique()))
    for name, doc in documents.items():
        (run_dir / name).write_text(doc.markdown())
        (run_dir / name).with_suffix(".tex").write_text(doc.latex(name))
    config_path = run_dir / CONFIG_FILE
    config_yaml = config_path.read_text() if config_path.is_file() else ""
    page = report_html(
        run_dir,
        title,
        warnings,
        out.figures,
        privacy_summary(trials),
        documents,
        config_yaml,
        len(trials),
    )
    out.html.write_text(page)
    return out
