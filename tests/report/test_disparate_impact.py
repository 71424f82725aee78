"""fig-disparate-impact: each group's accuracy drop from erm on the same split and seed, the
minority's drop and its per-seed paired difference against DP-SGD, computed by hand here; the
figures drawn without overlapping text; the builder on a tiny generated run."""

from __future__ import annotations

import pandas as pd
import pytest
from scipy import stats

from fairbench.errors import ConfigError
from fairbench.figures import build, outputs
from fairbench.privacy import ledger_cache
from fairbench.report.aggregate import trials_frame
from fairbench.report.disparate_impact import (
    LARGER,
    SMALLER,
    UNRESOLVED,
    drops_frame,
    minority_table,
    tally,
)
from fairbench.report.figure import overlaps
from fairbench.report.outputs import Plot
from fairbench.report.tables import flat_trials
from fairbench.rundir.store import finished_rows
from fairbench.runner.config import expand, parse_config
from fairbench.runner.execute import execute
from tests.report.test_reports import row

T2 = stats.t.ppf(0.975, 2)  # three seeds


def grouped(label: str, seed: int, errors: list[float], epsilon: float | None = 1.0) -> dict:
    """A trial row on dataset d by attribute s: groups a (900 training records) and b (100)."""
    base = row(label, seed=seed, knob=None, epsilon=epsilon)
    return {
        **base,
        "dataset_options": {"sensitive": "s"},
        "group_names": ["a", "b"],
        "group_sizes_train": [900, 100],
        "test_group_error": errors,
    }


# group b's errors per seed; group a's are erm's plus 0.01 for every private method
B_ERRORS = {
    "erm": [0.20, 0.22, 0.18],
    "dp-sgd": [0.30, 0.28, 0.26],  # drops 0.10, 0.06, 0.08
    "dpsgd-f": [0.24, 0.25, 0.20],  # drops 0.04, 0.03, 0.02: differences -0.06, -0.03, -0.06
    "dpsgd-global-adapt": [0.31, 0.27, 0.28],  # differences +0.01, -0.01, +0.02
    "raco-dp": [0.40, 0.40, 0.40],  # differences +0.10, +0.12, +0.14
}
RUN = [
    grouped(
        label,
        seed,
        [0.10 if label == "erm" else 0.11, errors[seed]],
        None if label == "erm" else 1.0,
    )
    for label, errors in B_ERRORS.items()
    for seed in range(3)
]


def test_the_minority_drop_and_its_paired_difference_by_hand():
    table = minority_table(drops_frame(RUN)).set_index("label")
    assert set(table["group"]) == {"b"} and set(table["panel"]) == {"d (s)"}
    assert table.loc["dp-sgd", "drop_mean"] == pytest.approx(0.08)
    assert table.loc["dp-sgd", "drop_ci95"] == pytest.approx(T2 * 0.02 / 3**0.5)
    assert table.loc["dp-sgd", "verdict"] == "" and table.loc["dp-sgd", "n_pairs"] == 0
    f = table.loc["dpsgd-f"]
    assert f["drop_mean"] == pytest.approx(0.03)
    assert f["n_pairs"] == 3
    assert f["difference_mean"] == pytest.approx(-0.05)
    # differences -0.06, -0.03, -0.06: sample sd sqrt(0.0003)
    assert f["difference_ci95"] == pytest.approx(T2 * 0.0003**0.5 / 3**0.5)
    assert f["verdict"] == SMALLER  # -0.05 + 0.0430 < 0
    adapt = table.loc["dpsgd-global-adapt"]
    assert adapt["difference_mean"] == pytest.approx(0.02 / 3)
    assert adapt["verdict"] == UNRESOLVED
    raco = table.loc["raco-dp"]
    assert raco["difference_mean"] == pytest.approx(0.12)
    assert raco["difference_ci95"] == pytest.approx(T2 * 0.02 / 3**0.5)
    assert raco["verdict"] == LARGER
    assert tally(minority_table(drops_frame(RUN)))[0] == (
        "`dpsgd-f` against `dp-sgd` on the minority: smaller in 1 of 1 (dataset, ε) cells, "
        "larger in 0, not resolved in 0; the largest resolved reduction +5.00 points (d (s), "
        "ε 1, interval -5.00 ± 4.30)."
    )


def test_every_group_drop_is_from_erm_on_the_same_seed():
    drops = drops_frame(RUN)
    assert set(drops["label"]) == set(B_ERRORS) - {"erm"}  # erm is the reference, not a row
    a = drops[(drops["group"] == "a")]
    assert a["drop"].to_numpy() == pytest.approx([0.01] * len(a))
    lone = grouped("dp-sgd", 7, [0.1, 0.1])  # no erm on seed 7: no drop, no row
    assert len(drops_frame([*RUN, lone])) == len(drops)


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A tiny generated run: erm, dp-sgd and dpsgd-f on synthetic data, 3 seeds, one epsilon,
    executed without its report or the ledgers' cross-checks (the builder reads neither)."""
    config = parse_config(
        {
            "name": "tiny-disparate-impact",
            "datasets": [{"name": "synthetic", "options": {"n_rows": 1200}}],
            "epsilons": [2.0],
            "seeds": 3,
            "methods": [
                {"name": "erm", "hparams": {"epochs": 2}},
                {"name": "dp-sgd", "hparams": {"epochs": 2, "batch_size": 256}},
                {"name": "dpsgd-f", "hparams": {"epochs": 2}},
            ],
        }
    )
    monkeypatch.setattr("fairbench.privacy.ledger_cache.check_ledger", lambda *args: {})
    try:
        summary = execute(expand(config, warn=lambda _: None), tmp_path / "run", quiet=True)
    finally:  # no skipped cross-check may stay cached for later tests
        ledger_cache.cache_clear()
    assert summary.failed == []
    return tmp_path / "run"


def test_the_builder_on_a_tiny_run_tabulates_the_paired_differences(run_dir, tmp_path):
    written = {p.name for p in build("disparate-impact", [run_dir], tmp_path / "fig")}
    assert written >= {"groups.csv", "minority.csv", "minority.png", "README.md", "README.tex"}
    rows = finished_rows(run_dir, "test")
    errors = {(r["label"], r["seed"]): r["test_group_error"] for r in rows}
    sizes = rows[0]["group_sizes_train"]
    minority = min(range(len(sizes)), key=sizes.__getitem__)
    drop = {
        (label, seed): errors[(label, seed)][minority] - errors[("erm", seed)][minority]
        for label in ("dp-sgd", "dpsgd-f")
        for seed in range(3)
    }
    diff = pd.Series([drop[("dpsgd-f", s)] - drop[("dp-sgd", s)] for s in range(3)])
    table = pd.read_csv(tmp_path / "fig" / "minority.csv").set_index("label")
    f = table.loc["dpsgd-f"]
    assert f["drop_mean"] == pytest.approx(sum(drop[("dpsgd-f", s)] for s in range(3)) / 3)
    assert f["difference_mean"] == pytest.approx(diff.mean())
    assert f["difference_ci95"] == pytest.approx(T2 * diff.std(ddof=1) / 3**0.5)
    assert f["n_pairs"] == 3
    readme = (tmp_path / "fig" / "README.md").read_text()
    assert f"{100 * diff.mean():+.2f} ± {100 * f['difference_ci95']:.2f}" in readme
    figures = [o for o in outputs("disparate-impact", [run_dir]) if isinstance(o, Plot)]
    assert [o.stem for o in figures] == ["minority", "synthetic"]
    for plot in figures:
        assert overlaps(plot.figure) == []


def test_a_run_without_erm_is_one_clear_error(tmp_path):
    private = [r for r in RUN if r["method"] != "erm"]
    with pytest.raises(ConfigError, match="list erm in the run"):
        list(outputs("disparate-impact", [_exported(tmp_path, private)]))


def _exported(tmp_path, rows: list[dict]):
    """A run directory holding `rows` as its trials.csv (a committed run's form)."""
    (tmp_path / "run").mkdir()
    flat_trials(trials_frame(rows)).to_csv(tmp_path / "run" / "trials.csv", index=False)
    return tmp_path / "run"
