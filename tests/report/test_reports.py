"""Reports that cannot mislead: satisfaction counted per seed, the budget behind every point,
warnings for lopsided budgets and for knob values that trained one model, and plots whose
colours and points can be trusted."""

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from fairbench.report import plots
from fairbench.report.aggregate import merge_identical_knobs, pareto_points, trials_frame
from fairbench.report.caveats import caveats
from fairbench.report.constraints import (
    constraint_values,
    constraints_document,
    satisfaction_table,
)
from fairbench.report.palette import REGISTRY, style
from fairbench.report.tables import pareto_document, write_trials_csv
from fairbench.rundir.store import finished_rows
from fairbench.runner.trial import predictions_hash

RESULTS = Path(__file__).resolve().parents[2] / "results" / "figures"


def dp_constraints(gap: float, gamma: float) -> list[dict]:
    """The four two-group demographic-parity constraints of a trial whose group-0 positive
    rate exceeds group 1's by `gap` (negative: the other way round)."""
    values = [-gap, gap, gap, -gap]
    return [
        {
            "name": f"c{i}",
            "value": v,
            "gamma": gamma,
            "violation": v - gamma,
            "satisfied": bool(v <= gamma),
        }
        for i, v in enumerate(values)
    ]


def row(
    label="raco-dp",
    *,
    seed=0,
    knob=0.02,
    gap=0.01,
    steps=100,
    epsilon=1.0,
    dataset="d",
    error=0.2,
    hash_="h",
    budget=True,
    at_bound=False,
) -> dict:
    """A stored trial row, with what the report reads."""
    gamma = knob if knob is not None else float("nan")
    constraints = dp_constraints(gap, gamma)
    if knob is None:
        constraints = [{**c, "satisfied": None} for c in constraints]
    return {
        "trial_id": f"{label}-{seed}-{knob}-{epsilon}",
        "dataset": dataset,
        "constraint": "demographic_parity",
        "method": label,
        "label": label,
        "privacy_notion": "full" if epsilon is not None else "non-private",
        "epsilon": epsilon,
        "delta": 1e-5,
        "knob": knob,
        "knob_name": "gamma" if knob is not None else None,
        "config_id": "cfg",
        "seed": seed,
        "hparams": {"model": "logistic", "calibrate": "steps"},
        "n_train": 1000,
        "info": {"steps": steps, "sampling_rate": 0.1, "noise_multiplier": 2.0},
        "budget": {
            "steps": steps,
            "sampling_rate": 0.1,
            "noise": {"gradient": 2.0},
            "calibrated": "steps",
            "at_bound": at_bound,
        }
        if budget
        else None,
        "test_error": error,
        "val_error": error,
        "test_violation": abs(gap),
        "val_violation": abs(gap),
        "epsilon_spent": epsilon or 0.0,
        "wall_seconds": 1.0,
        "test_rate_constraints": constraints,
        "test_predictions_sha256": hash_,
    }


def test_every_seed_violating_is_zero_of_three_satisfied_whatever_the_signed_mean():
    # the Parkinsons case: worst violations 0.034, 0.027, 0.023 against 0.02; the signed
    # per-constraint means (0.034 - 0.027 + 0.023) / 3 = 0.0100 sit under 0.02
    rows = [row(seed=s, gap=g) for s, g in enumerate([0.034, -0.027, 0.023])]
    trials = trials_frame(rows)
    table = satisfaction_table(trials)
    assert table[["satisfied_k", "satisfied_n"]].iloc[0].tolist() == [0, 3]
    assert table["excess_mean"].iloc[0] == pytest.approx((0.014 + 0.007 + 0.003) / 3)
    assert table["excess_max"].iloc[0] == pytest.approx(0.014)
    assert table["violation_max"].iloc[0] == pytest.approx(0.034)
    values = constraint_values(trials)
    assert values["value_mean"].abs().max() == pytest.approx(0.01)  # the misleading mean
    text = constraints_document(table, values, "t").markdown()
    assert "| raco-dp | ε=1 | γ 0.02 | 3 | 0/3 [0%, 71%] |" in text
    assert "held 1/3" in text  # c1 held on the seed whose gap was negative
    points = pareto_points(trials)
    assert points["satisfied_k"].iloc[0] == 0
    assert "0/3 [0%, 71%]" in pareto_document(points, "t", []).markdown()


def test_satisfaction_is_counted_only_for_methods_told_a_target():
    trials = trials_frame([row("dp-sgd", seed=s, knob=None) for s in range(3)])
    table = satisfaction_table(trials)
    assert table["satisfied_n"].iloc[0] == 0
    assert "no target" in constraints_document(table, constraint_values(trials), "t").markdown()


def test_knob_values_with_identical_predictions_on_every_seed_collapse_to_one_point():
    rows = [row(seed=s, knob=k, hash_=f"same{s}") for s in range(3) for k in (0.05, 0.1)]
    rows += [row(seed=s, knob=0.02, hash_=f"other{s}") for s in range(3)]
    trials = trials_frame(rows)
    distinct, merged = merge_identical_knobs(trials)
    points = pareto_points(distinct)
    assert points["knob_values"].tolist() == ["0.02", "0.05, 0.1"]
    assert points["n_seeds"].tolist() == [3, 3]
    assert merged[0]["knobs"] == [0.05, 0.1]
    warning = next(w for w in caveats(trials, merged) if "identical test predictions" in w)
    assert "knob values 0.05, 0.1" in warning and "all 3 seeds" in warning


def test_knobs_differing_on_one_seed_are_two_models():
    rows = [row(seed=s, knob=k, hash_=f"same{s}") for s in range(3) for k in (0.05, 0.1)]
    rows[-1]["test_predictions_sha256"] = "different"
    distinct, merged = merge_identical_knobs(trials_frame(rows))
    assert merged == []
    assert len(pareto_points(distinct)) == 2


def test_step_counts_ten_times_apart_at_one_epsilon_are_flagged():
    rows = [row("raco-dp", seed=s, steps=7) for s in range(2)]
    rows += [row("dp-sgd", seed=s, steps=146, knob=None) for s in range(2)]
    rows += [row("raco-dp", seed=s, steps=100, epsilon=3.0) for s in range(2)]
    rows += [row("dp-sgd", seed=s, steps=146, knob=None, epsilon=3.0) for s in range(2)]
    warnings = caveats(trials_frame(rows), [])
    lopsided = [w for w in warnings if "step counts differ" in w]
    assert len(lopsided) == 1
    assert "d · ε = 1: step counts differ 21x" in lopsided[0]
    assert "raco-dp 7" in lopsided[0] and "dp-sgd 146" in lopsided[0]


def test_a_calibration_stopped_at_its_search_limit_is_flagged():
    rows = [row(seed=s, at_bound=s == 0) for s in range(2)]
    warnings = caveats(trials_frame(rows), [])
    assert any("stopped at its search limit in 1/2 trials" in w for w in warnings)


def test_budget_columns_from_the_method_or_from_an_old_rows_info():
    new = trials_frame([row(steps=300)]).iloc[0]
    old = trials_frame([row(steps=300, budget=False)]).iloc[0]
    for trial in (new, old):
        assert trial["steps"] == 300
        assert trial["epochs"] == pytest.approx(30.0)  # 300 steps x sampling rate 0.1
        assert trial["batch_size"] == pytest.approx(100.0)  # 0.1 x 1000 training rows
        assert trial["noise_multiplier"] == 2.0
        assert trial["calibrated"] == "steps"


def test_committed_parkinsons_trials_warn_about_their_step_counts():
    """Read back from the committed trials.csv (the SQLite store is not committed), as
    `fairbench report` does for such a directory."""
    rows = finished_rows(RESULTS / "fig-credit-parkinsons", "test")
    trials = trials_frame(rows)
    distinct, merged = merge_identical_knobs(trials)
    warnings = caveats(trials, merged)
    assert any(
        "parkinsons · ε = 1: step counts differ 21x" in w and "raco-dp 7" in w for w in warnings
    )
    points = pareto_points(distinct)
    assert {
        "steps_mean",
        "epochs_mean",
        "noise_multiplier_mean",
        "calibrated",
        "epsilon_spent_max",
        "violation_max",
        "knob_values",
    } <= set(points.columns)
    committed = (RESULTS / "fig-credit-parkinsons" / "pareto.md").read_text()
    assert "parkinsons · ε = 1: step counts differ 21x" in committed


def test_report_command_prints_the_warnings_and_the_pareto_table(cli, tmp_path):
    rows = [row("raco-dp", seed=s, steps=7) for s in range(2)]
    rows += [row("dp-sgd", seed=s, steps=146, knob=None) for s in range(2)]
    run = tmp_path / "run"
    run.mkdir()
    write_trials_csv(trials_frame(rows), run / "trials.csv")
    code, out, err = cli("report", str(run))
    assert code == 0, err
    assert "warning: d · ε = 1: step counts differ 21x" in err
    assert "error vs violation" in out
    table_rows = [line for line in out.splitlines() if line.startswith("│ d ")]
    assert len(table_rows) == 2 and any("raco-dp" in r and "0.02" in r for r in table_rows)
    assert "report:" in out and "pareto.md" in out
    paired = pd.read_csv(run / "paired.csv")
    assert {"steps_a", "steps_b", "noise_multiplier_a", "epsilon_spent_b"} <= set(paired.columns)
    assert "steps" in pd.read_csv(run / "trials.csv").columns


def _figure_points(monkeypatch, points: pd.DataFrame) -> list:
    """Draw the trade-off figures of `points`; return their axes (the figures are kept)."""
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, stem: figures.append(fig) or stem)
    plots.trade_off_figures(points, Path("/nonexistent"))
    return [ax for fig in figures for ax in fig.axes]


def _colors_by_label(axes) -> dict[str, str]:
    out = {}
    for ax in axes:
        for container in ax.containers:
            out[container.get_label()] = container.lines[0].get_color()
    return out


@pytest.fixture
def figure_points():
    configs = [("raco-dp", 0.02), ("raco-dp", 0.05), ("dp-sgd", None)]
    rows = [
        row(m, seed=s, knob=k, gap=0.01 * (1 + i), error=0.2 - 0.01 * i)
        for i, (m, k) in enumerate(configs)
        for s in range(3)
    ]
    return pareto_points(trials_frame(rows))


def test_every_plotted_point_has_a_pareto_row(monkeypatch, tmp_path, figure_points):
    axes = _figure_points(monkeypatch, figure_points)
    drawn = set()
    for ax in axes:
        for container in ax.containers:
            x, y = container.lines[0].get_data()
            drawn |= {(round(a, 12), round(b, 12)) for a, b in zip(x, y, strict=True)}
    means = figure_points[["violation_mean", "test_error_mean"]].round(12)
    rows = set(means.itertuples(index=False, name=None))
    assert drawn and drawn == rows
    plt.close("all")


def test_a_method_keeps_its_colour_across_figures(monkeypatch, figure_points):
    first = _colors_by_label(_figure_points(monkeypatch, figure_points))
    fewer = figure_points[figure_points["method"] == "dp-sgd"]
    second = _colors_by_label(_figure_points(monkeypatch, fewer))
    assert first["dp-sgd"] == second["dp-sgd"] == REGISTRY["dp-sgd"].color
    assert first["raco-dp"] == REGISTRY["raco-dp"].color
    assert style("my-plugin") == style("my-plugin")  # unknown plugins: stable by name
    assert len({s.color for s in REGISTRY.values()}) == len(REGISTRY)
    plt.close("all")


def test_figures_are_titled_and_keep_the_legend_off_the_data(monkeypatch, figure_points):
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, stem: figures.append(fig) or stem)
    plots.trade_off_figures(figure_points, Path("/nonexistent"))
    fig = figures[0]
    title = fig._suptitle.get_text()
    assert "d · demographic parity · privacy: full · model: logistic · 3 seeds" in title
    assert title.endswith("hyper-parameters: defaults, untuned")
    plots.trade_off_figures(figure_points, Path("/nonexistent"), hyper="tuned by t")
    assert figures[1]._suptitle.get_text().endswith("hyper-parameters: tuned by t")
    legend = fig.legends[0]
    labels = [t.get_text() for t in legend.get_texts()]
    assert "Pareto frontier" in labels
    assert all(not ax.get_legend() for ax in fig.axes)  # one legend, outside the panels
    annotations = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert {"0.02", "0.05"} <= set(annotations)
    plt.close("all")


def test_untuned_runs_say_so_and_tune_finals_name_their_tune_config():
    from fairbench.report import hyperparameter_provenance
    from fairbench.workflows.tune import TuneConfig, final_configs

    assert hyperparameter_provenance({"name": "fig"}) == "defaults, untuned"
    assert hyperparameter_provenance({"tuned_by": "pc"}) == "tuned by pc"
    config = TuneConfig.model_validate(
        {
            "name": "pc",
            "datasets": ["synthetic"],
            "epsilons": [1.0],
            "targets": [0.05],
            "draws": 1,
            "search_seeds": [100],
            "final_seeds": list(range(10)),
            "methods": [{"name": "erm", "unconstrained": True, "space": {"lr": [0.5]}}],
        }
    )
    chosen = {
        "dataset": "synthetic",
        "epsilon": 1.0,
        "method": "erm",
        "selected": "erm#0",
        "hparams": {"lr": 0.5},
        "knob": None,
    }
    selection = pd.DataFrame([chosen])
    (final,) = final_configs(config, selection).values()
    assert final["tuned_by"] == "pc"


def test_prediction_hashes_tell_mixtures_apart_by_their_weights():
    votes = np.array([0, 1, 1, 0])
    assert predictions_hash(votes) == predictions_hash(votes.copy())
    assert predictions_hash(votes) != predictions_hash(np.array([0, 1, 1, 1]))
    half, skew = np.full(4, 0.5), np.array([0.9, 0.9, 0.1, 0.1])
    assert predictions_hash(votes, half) != predictions_hash(votes, skew)


def test_two_entries_of_one_dataset_get_their_own_panels_not_one_average():
    """fig-disparate-impact's run lists Adult by sex and by race: each entry is its own panel
    (5 seeds each), qualified by the option that differs; a dataset listed once keeps its name."""
    from fairbench.report.aggregate import merge_identical_knobs, pareto_points, trials_frame
    from fairbench.rundir.store import finished_rows

    run = Path(__file__).parents[2] / "results/figures/fig-disparate-impact/run"
    points = pareto_points(merge_identical_knobs(trials_frame(finished_rows(run, "report")))[0])
    dp_sgd = points[(points["method"] == "dp-sgd") & (points["epsilon"] == 1.0)]
    assert sorted(dp_sgd["dataset"]) == [
        "adult[sensitive=race]",
        "adult[sensitive=sex]",
        "compas",
        "lawschool",
    ]
    assert set(dp_sgd["n_seeds"]) == {5}
