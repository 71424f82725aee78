"""Published curves beside ours: interpolation at matched violation, the report files, and
config validation."""

import math

import pandas as pd
import pytest
import yaml

from fairbench.errors import ConfigError
from fairbench.report.references import compare, error_at
from fairbench.runner.config import parse_config


def series(points):
    return pd.DataFrame(points, columns=["test_error_mean", "violation_mean"])


def test_error_at_interpolates_along_the_frontier_only():
    ours = series([(0.20, 0.01), (0.16, 0.05), (0.15, 0.15), (0.18, 0.10)])  # last: dominated
    assert error_at(0.03, ours) == pytest.approx(0.18)
    assert error_at(0.10, ours) == pytest.approx(0.155)
    assert error_at(0.30, ours) == pytest.approx(0.15)  # beyond the range: the best error
    assert math.isnan(error_at(0.005, ours))  # never that fair: not reached


def test_compare_matches_panels_and_notions():
    points = series([(0.20, 0.01), (0.16, 0.05)]).assign(
        dataset="adult",
        constraint="demographic_parity",
        epsilon=1.0,
        label="m",
        config_id="c",
        privacy_notion="full",
    )
    ref = {
        "label": "paper",
        "dataset": "adult",
        "constraint": "demographic_parity",
        "epsilon": 1.0,
        "points": [[0.17, 0.03], [0.19, 0.001]],
    }
    table = compare(points, [ref])
    assert table["our_error"].iloc[0] == pytest.approx(0.18)
    assert table["difference"].iloc[0] == pytest.approx(0.01)
    assert math.isnan(table["our_error"].iloc[1])
    assert compare(points, [{**ref, "privacy_notion": "sensitive-attribute"}]).empty
    assert compare(points, [{**ref, "epsilon": 3.0}]).empty


def test_a_run_with_references_writes_the_comparison(cli, tmp_path):
    config = {
        "name": "refs",
        "datasets": [{"name": "synthetic", "options": {"n_rows": 800}}],
        "epsilons": [2.0],
        "seeds": 2,
        "methods": [{"name": "dp-sgd", "hparams": {"epochs": 2, "batch_size": 64}}],
        "references": [
            {
                "label": "someone",
                "source": "a paper",
                "dataset": "synthetic",
                "constraint": "demographic_parity",
                "epsilon": 2.0,
                "points": [[0.3, 0.5], [0.2, 0.0]],
            }
        ],
    }
    path = tmp_path / "refs.yaml"
    path.write_text(yaml.safe_dump(config))
    code, _, err = cli("run", str(path), "--out", str(tmp_path / "run"))
    assert code == 0, err
    table = pd.read_csv(tmp_path / "run" / "references.csv")
    assert len(table) == 2 and set(table["label"]) == {"dp-sgd"}
    assert "someone vs dp-sgd" in (tmp_path / "run" / "references.md").read_text()


def test_malformed_reference_points_are_config_errors():
    bad = {
        "name": "x",
        "datasets": ["synthetic"],
        "methods": ["erm"],
        "references": [
            {
                "label": "p",
                "dataset": "synthetic",
                "constraint": "demographic_parity",
                "epsilon": 1.0,
                "points": [[0.1, 0.2, 0.3]],
            }
        ],
    }
    with pytest.raises(ConfigError, match="test error, violation"):
        parse_config(bad)
