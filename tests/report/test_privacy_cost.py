"""fig-privacy-cost: the figure builder over a tiny real tune run, checked against an
independent recomputation from the final trials; the selection rule on hand-made tables; and
the 'privacy bites' verdict."""

import json
import math
import sqlite3

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairbench.errors import ConfigError
from fairbench.figures import build
from fairbench.report.budget_sensitivity import COLUMNS as BUDGET_COLUMNS
from fairbench.report.privacy_cost import COLUMNS, SPREAD_COLUMNS
from fairbench.report.privacy_cost_notes import privacy_bites
from fairbench.rundir.tuning import TuneLayout, read_table
from fairbench.workflows.tune import choose
from tests.report.quick_tune import quick_tune

TAUS = (0.3, 0.05)
TUNE = {
    "name": "pc",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 1000}}],
    "epsilons": [1.0, 8.0],
    "targets": list(TAUS),
    "draws": 2,
    "search_seeds": [100],
    "final_seeds": list(range(10)),  # tune's minimum
    "methods": [
        # no fairness: far from 0.05 on the synthetic task's built-in group gap
        {
            "name": "dp-sgd",
            "hparams": {"epochs": 2, "batch_size": 64},
            "space": {"lr": {"log": [0.5, 2.0]}},
        },
        # a Laplace scale of 0.1 cannot be calibrated at any of these epsilons: every draw is
        # infeasible, which tune counts rather than fails on
        {
            "name": "raco-dp",
            "hparams": {"epochs": 1, "batch_size": 64, "calibrate": "noise", "laplace_scale": 0.1},
            "space": {"lr": {"log": [0.2, 1.0]}, "knob": [0.05]},
        },
        {
            "name": "erm",
            "unconstrained": True,
            "hparams": {"epochs": 2, "batch_size": 64},
            "space": {"lr": {"log": [0.2, 1.0]}},
        },
        {
            "name": "sgda",
            "hparams": {"epochs": 2, "batch_size": 64},
            "space": {"lr": {"log": [0.2, 1.0]}, "knob": [0.02, 0.2]},
        },
    ],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One tiny tune and its figure."""
    root = tmp_path_factory.mktemp("privacy-cost")
    quick_tune(TUNE, root / "tune")  # the infeasible raco-dp draws are not failures
    written = build("privacy-cost", [root / "tune"], root / "fig")
    return root, written


def _final_rows(tune_dir) -> list[dict]:
    """Every final trial, read straight from the SQLite stores (not through the report code)."""
    rows = []
    for store in sorted((tune_dir / "final").glob("*/results.sqlite")):
        with sqlite3.connect(store) as db:
            rows += [
                json.loads(r[0])
                for r in db.execute("SELECT result FROM trials WHERE status = 'done'")
            ]
    return rows


def test_csv_has_exactly_the_figure_columns(built):
    root, _ = built
    table = pd.read_csv(root / "fig" / "synthetic.csv")
    assert list(table.columns) == COLUMNS
    assert set(table["tau"]) <= set(TAUS) and len(table) > 0
    spread = pd.read_csv(root / "fig" / "synthetic-search-spread.csv")
    assert list(spread.columns) == SPREAD_COLUMNS


def test_each_row_equals_an_independent_recomputation_from_the_final_trials(built):
    root, _ = built
    table = pd.read_csv(root / "fig" / "synthetic.csv")
    finals = _final_rows(root / "tune")
    for row in table.itertuples(index=False):
        chosen = json.loads(row.selected)
        label = chosen["config"].replace("#", "-")
        eps = None if math.isinf(row.epsilon) else row.epsilon
        trials = [t for t in finals if t["label"] == label and t["epsilon"] == eps]
        assert len(trials) == row.n_seeds == 10
        errors = np.array([t["test_error"] for t in trials])
        half = stats.t.ppf(0.975, len(errors) - 1) * errors.std(ddof=1) / np.sqrt(len(errors))
        violations = np.array([t["test_violation"] for t in trials])
        assert row.test_error_mean == pytest.approx(errors.mean())
        assert row.ci_low == pytest.approx(errors.mean() - half)
        assert row.ci_high == pytest.approx(errors.mean() + half)
        assert row.violation_mean == pytest.approx(violations.mean())
        assert row.satisfied_fraction == pytest.approx((violations <= row.tau).mean())
        assert row.steps_mean == pytest.approx(np.mean([t["budget"]["steps"] for t in trials]))
        assert chosen["lr"] == trials[0]["hparams"]["lr"]  # the selected hyper-parameters


def test_each_rows_verdict_and_flag_follow_their_rules_from_the_final_and_search_trials(built):
    """The interval of the violation, recomputed from the stores; the SEs finite (demographic
    parity on the synthetic task is derivable); verdict and unstable by their rules."""
    root, _ = built
    table = pd.read_csv(root / "fig" / "synthetic.csv", keep_default_na=False, na_values=[""])
    finals = _final_rows(root / "tune")
    for row in table.itertuples(index=False):
        label = json.loads(row.selected)["config"].replace("#", "-")
        eps = None if math.isinf(row.epsilon) else row.epsilon
        v = np.array(
            [t["test_violation"] for t in finals if t["label"] == label and t["epsilon"] == eps]
        )
        half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
        assert row.violation_ci_low == pytest.approx(v.mean() - half)
        assert row.violation_ci_high == pytest.approx(v.mean() + half)
        assert 0 < row.violation_se < 0.2 and 0 < row.val_violation_se < 0.2
        assert 0 < row.error_se < row.val_error_se  # validation is the smaller split
        if (
            row.violation_se > row.tau / 2
            or row.violation_ci_low <= row.tau < row.violation_ci_high
        ):
            assert row.verdict == "cannot tell"
        else:
            assert row.verdict == ("meets" if row.violation_ci_high <= row.tau else "misses")
        noise = stats.norm.ppf(0.975) * math.hypot(row.violation_se, row.val_violation_se)
        noise_error = stats.norm.ppf(0.975) * math.hypot(row.error_se, row.val_error_se)
        assert row.unstable == (
            row.violation_mean - row.val_violation > noise
            or row.test_error_mean - row.val_error > noise_error
        )
    note = (root / "fig" / "synthetic.md").read_text()
    assert "## Does the test split tell whether τ holds?" in note


def test_rows_are_exactly_the_selections_tune_made(built):
    root, _ = built
    table = pd.read_csv(root / "fig" / "synthetic.csv")
    rows = read_table(TuneLayout(root / "tune"))
    selected = rows[rows["selected"].notna()]
    expected = set(zip(selected["target"], selected["method"], selected["epsilon"], strict=True))
    assert math.inf in set(selected["epsilon"])  # the non-private reference, read back as inf
    assert set(zip(table["tau"], table["method"], table["epsilon"], strict=True)) == expected
    # ERM is an unconstrained reference: selected at every tau, whatever its violation
    assert {t for t, m, _ in expected if m == "erm"} == set(TAUS)
    rules = dict(zip(table["method"], table["selection_rule"], strict=True))
    assert {"erm", "sgda"} <= set(rules)
    assert rules == {m: "error_only" if m == "erm" else "within_tau" for m in rules}


def test_a_method_that_cannot_reach_tau_has_no_row_and_is_listed(built):
    root, _ = built
    table = pd.read_csv(root / "fig" / "synthetic.csv")
    note = (root / "fig" / "synthetic.md").read_text()
    strict = table[table["tau"] == 0.05]
    assert "dp-sgd" not in set(strict["method"])
    assert "- logistic, τ = 0.05: dp-sgd at ε = 1, 8" in note
    # every raco-dp draw failed calibration: no row, listed with the reason at both taus
    assert "raco-dp" not in set(table["method"])
    rows = read_table(TuneLayout(root / "tune"))
    raco = rows[rows["method"] == "raco-dp"]
    assert set(zip(raco["candidates"], raco["infeasible"], strict=True)) == {(0, TUNE["draws"])}
    assert raco["selected"].isna().all() and raco["test_error"].isna().all()
    for tau in TAUS:
        assert f"- logistic, τ = {tau:g}: raco-dp at ε = 1, 8 (4 draws could not" in note
    assert "not charged to the privacy budget" in note
    assert "## Does privacy bite?" in note


def test_plot_files_exist(built):
    root, written = built
    for suffix in (".png", ".pdf"):
        path = root / "fig" / f"synthetic-logistic{suffix}"
        assert path in written and path.stat().st_size > 1000


def test_not_a_tune_output_is_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match=r"tune\.yaml") as info:
        build("privacy-cost", [tmp_path], tmp_path / "fig")
    assert "\n" not in str(info.value)


def _candidates(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["label", "val_error", "val_violation"])


def test_selection_rule_lowest_validation_error_within_the_target():
    table = _candidates(
        [("a#0", 0.10, 0.09), ("a#1", 0.14, 0.04), ("a#2", 0.12, 0.05), ("a#3", 0.20, 0.00)]
    )
    assert choose(table, 0.05)["label"] == "a#2"  # within means <= target
    assert choose(table, 0.02)["label"] == "a#3"
    assert choose(table, None)["label"] == "a#0"  # an unconstrained reference


def test_selection_rule_ties_go_to_the_earlier_row_and_none_feasible_is_none():
    tie = _candidates([("a#0", 0.30, 0.10), ("a#1", 0.12, 0.01), ("a#2", 0.12, 0.02)])
    assert choose(tie, 0.05)["label"] == "a#1"
    assert choose(tie.iloc[::-1], 0.05)["label"] == "a#2"
    assert choose(_candidates([("a#0", 0.1, 0.2), ("a#1", 0.1, 0.3)]), 0.05) is None


def test_privacy_bites_compares_the_gap_with_the_summed_half_widths():
    def row(method, eps, mean, half):
        return {
            "model": "logistic",
            "tau": 0.05,
            "method": method,
            "epsilon": eps,
            "test_error_mean": mean,
            "ci_low": mean - half,
            "ci_high": mean + half,
        }

    rows = pd.DataFrame(
        [
            row("bites", 0.1, 0.30, 0.02),
            row("bites", 8.0, 0.20, 0.02),  # 0.10 > 0.04
            row("flat", 0.1, 0.22, 0.02),
            row("flat", 8.0, 0.20, 0.02),  # 0.02 < 0.04
            row("half", 8.0, 0.20, 0.02),  # cannot reach tau at 0.1
            row("nonpriv", math.inf, 0.15, 0.01),
        ]
    )
    verdicts = {v["method"]: v["bites"] for v in privacy_bites(rows, 0.1, 8.0)}
    assert verdicts == {"bites": True, "flat": False, "half": None}


def test_a_budget_no_noise_can_meet_is_a_calibration_error_and_still_a_config_error():
    from fairbench.errors import CalibrationError
    from fairbench.privacy import calibrate_noise_multiplier, calibrate_steps

    with pytest.raises(CalibrationError, match="even one step exceeds"):
        calibrate_steps(0.5, 4.0, 0.1, 1e-5)
    with pytest.raises(ConfigError, match="Laplace releases alone"):
        calibrate_noise_multiplier(0.5, 50, 0.1, 1e-5, laplace_scale=5.0)


def test_a_private_accuracy_reference_is_marked_in_the_notes_and_dashed_in_the_plot(tmp_path):
    """DP-SGD has no fairness knob: selected on validation error alone, it must never read as
    a fair method that met tau."""
    from fairbench.report.figure import new_figure
    from fairbench.report.privacy_cost_notes import dataset_document
    from fairbench.report.privacy_cost_plot import tau_panel

    def row(method, eps, mean, rule):
        return {
            "model": "logistic",
            "tau": 0.05,
            "method": method,
            "epsilon": eps,
            "test_error_mean": mean,
            "ci_low": mean - 0.01,
            "ci_high": mean + 0.01,
            "satisfied_fraction": 0.0,
            "steps_mean": 100.0,
            "selection_rule": rule,
            "n_seeds": 10,
            "violation_mean": 0.1,
            "violation_ci_low": 0.08,
            "violation_ci_high": 0.12,
            "violation_se": 0.01,
            "verdict": "misses",
            "val_violation": 0.04,
            "val_violation_se": 0.01,
            "error_se": 0.01,
            "val_error": mean,
            "val_error_se": 0.01,
            "unstable": True,
        }

    rows = pd.DataFrame(
        [
            row("dp-sgd", 0.1, 0.25, "error_only"),
            row("dp-sgd", 8.0, 0.15, "error_only"),
            row("cgoo", 0.1, 0.30, "within_tau"),
        ]
    )
    meta = [
        {
            "title": "t",
            "constraint": "demographic_parity",
            "delta": 1e-5,
            "model": "logistic",
            "draws": 2,
            "search_seeds": 1,
            "final_seeds": 10,
            "epsilons": [0.1, 8.0],
            "low": 0.1,
            "high": 8.0,
            "path": "p",
        }
    ]
    empty = pd.DataFrame(columns=["model", "tau", "method", "epsilon", "infeasible"])
    spread = pd.DataFrame(columns=["tau", "model", "method", "epsilon"])
    budgets = pd.DataFrame(columns=["model", *BUDGET_COLUMNS])
    note = dataset_document("k", meta, rows, empty, spread, budgets, []).markdown()
    assert "| 0.05 | dp-sgd (no constraint) | 0.2500 | 0.1500 |" in note
    assert "| 0.05 | cgoo | 0.3000 | — |" in note
    # the verdict table: 0.1 - 0.04 > 1.96 * sqrt(2) * 0.01, the error as validated
    assert "| 0.05 | cgoo | 0.1 | 0.1000 [0.0800, 0.1200] | 0.0100 | 0/10 | misses | " in note
    assert "| 0.0400 (0.0100) | violation |" in note
    _fig, axes = new_figure(1, 1, (4.8, 4.2))
    ax = axes[0][0]
    tau_panel(ax, rows, "logistic", 0.05, {}, [0.1, 8.0], "")
    handles, labels = ax.get_legend_handles_labels()
    lines = {label: h.lines[0].get_linestyle() for h, label in zip(handles, labels, strict=True)}
    assert lines["dp-sgd (no fairness constraint)"] == "--"
    assert lines["cgoo"] == "-"
