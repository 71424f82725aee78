"""Every committed figure is drawn by the one pipeline (report/figure.py) and reads cleanly: no
text box (title, axis label, tick label, legend entry, note, label beside a point) intersects
another or runs into a panel not its own; rebuilding writes the same bytes.

The registered figures (fairbench/figures.py) are rendered from the committed tune outputs
they are built from; the run reports' figures from committed run directories' trials.csv,
and the group-loss figure (whose DPSE trials are not committed) from a small fixture.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from fairbench.figures import FIGURES, build, outputs
from fairbench.report import plots
from fairbench.report.aggregate import merge_identical_knobs, pareto_points, trials_frame
from fairbench.report.figure import new_figure, overlaps, panel_note, safe_stem, save
from fairbench.report.outputs import Plot
from fairbench.rundir.store import finished_rows
from tests.conftest import REPO

# committed run directories whose figures/ a run report draws (fig-dpse's trials are not kept)
RUN_DIRS = [
    "results/figures/datasets",
    "results/figures/fig-adult-dp",
    "results/figures/fig-adult-eo",
    "results/figures/fig-adult-fnr",
    "results/figures/fig-credit-parkinsons",
    "results/figures/fig-dp-fermi",
    "results/figures/fig-multigroup",
    "results/tune/literature/final/adult-eps1",
]


def _clean(figures: dict[str, object]) -> None:
    bad = {name: overlaps(fig) for name, fig in figures.items()}
    bad = {name: lines for name, lines in bad.items() if lines}
    report = "\n".join(f"{name}:\n  " + "\n  ".join(lines) for name, lines in sorted(bad.items()))
    assert not bad, f"text overlaps in {len(bad)} figure(s):\n{report}"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FIGURES))
def test_every_registered_figure_is_drawn_without_overlapping_text(name):
    spec = FIGURES[name]
    if not spec.committed:
        pytest.skip(f"{name}: no committed figure (fairbench/figures.py says why)")
    inputs = [REPO / path for path in spec.committed]
    missing = [str(p) for p in inputs if not p.is_dir()]
    assert not missing, f"{name}: committed inputs missing: {missing}"
    figures = {o.stem: o.figure for o in outputs(name, inputs) if isinstance(o, Plot)}
    committed = {p.stem for p in (REPO / spec.out).glob("*.png")}
    assert set(figures) == committed  # every committed PNG of the figure is drawn here
    _clean(figures)


@pytest.mark.parametrize("run_dir", RUN_DIRS)
def test_run_report_figures_are_drawn_without_overlapping_text(run_dir, monkeypatch):
    figures = {}
    monkeypatch.setattr(
        plots, "_save", lambda fig, stem: figures.setdefault(safe_stem(stem).name, fig)
    )
    trials = trials_frame(finished_rows(REPO / run_dir, "draw"))
    points = pareto_points(merge_identical_knobs(trials)[0])
    plots.trade_off_figures(points, Path("unused"))
    plots.satisfaction_figures(points, Path("unused"))
    committed = {p.stem for p in (REPO / run_dir / "figures").glob("*.png")}
    assert set(figures) <= committed and figures
    _clean(figures)


def test_the_group_loss_figure_is_drawn_without_overlapping_text(monkeypatch):
    from fairbench.report import groups

    figures = {}
    monkeypatch.setattr(groups, "save", lambda fig, stem: [figures.setdefault(stem.name, fig)])
    rng = np.random.default_rng(0)
    trials = pd.DataFrame(
        [
            {
                "dataset": "synthetic",
                "epsilon": eps,
                "label": label,
                "method": label.split("-equal")[0],
                "seed": seed,
                "group_sizes_train": [400, 90, 30, 12, 8],
                "test_group_loss": list(rng.uniform(0.1, 1.0, 5) / eps),
            }
            for eps in (0.1, 0.5, 1.0, 5.0)
            for label in ("dpse", "dpnose", "dpnose-equal-split")
            for seed in range(3)
        ]
    )
    groups.smallest_group_figure(trials, Path("unused"))
    assert list(figures) == ["synthetic_group_loss_vs_epsilon"]
    _clean(figures)


def test_the_check_sees_overlapping_tick_labels_and_a_note_across_panels():
    """What the committed fig-privacy-cost PNG showed before the pipeline: x tick labels run
    together ("0.10.250.5") and a note running across both panels."""
    fig = Figure(figsize=(2.4, 2.0))  # laid out the old way: fixed subplot parameters
    left, _right = fig.subplots(1, 2)
    left.set_xscale("log")
    left.set_xticks([0.1, 0.25, 0.5, 1])
    left.set_xticklabels(["0.1", "0.25", "0.5", "1"])
    left.text(0.01, 0.01, "not within τ on validation (no point): " * 3, transform=left.transAxes)
    problems = overlaps(fig)
    assert any("'0.25'" in p and "overlaps" in p for p in problems)
    assert any("runs into panel 1" in p for p in problems)
    fig, axes = new_figure(1, 2, (4.8, 3.0))
    panel_note(axes[0][0], "not within τ on validation (no point): " * 3)
    assert overlaps(fig) == []  # the same note, wrapped under its own panel


def test_saving_twice_writes_the_same_bytes_without_dates_or_versions(tmp_path):
    def draw():
        fig, axes = new_figure(1, 1, (3.0, 2.0))
        axes[0][0].plot([0, 1], [1, math.pi], label="a")
        return fig

    first = save(draw(), tmp_path / "a")
    second = save(draw(), tmp_path / "b")
    assert [p.suffix for p in first] == [".png", ".pdf"]
    for one, two in zip(first, second, strict=True):
        assert one.read_bytes() == two.read_bytes()
    pdf, png = first[1].read_bytes(), first[0].read_bytes()
    assert b"CreationDate" not in pdf and b"Producer" not in pdf and b"matplotlib" not in pdf
    assert b"Software" not in png and b"atplotlib" not in png


@pytest.mark.slow
def test_the_registry_builds_what_the_command_writes(tmp_path, cli):
    """`fairbench figure NAME` is generated from the registry and writes what build writes."""
    spec = FIGURES["literature"]
    inputs = [str(REPO / p) for p in spec.committed]
    code, _out, err = cli("figure", "literature", *inputs, "--out", str(tmp_path / "cli"))
    assert code == 0, err
    written = build("literature", [Path(p) for p in inputs], tmp_path / "api")
    names = sorted(p.name for p in written)
    assert names == sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert {"README.md", "README.tex", "references.md", "references.tex"} <= set(names)
    for name in names:
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "api" / name).read_bytes()
