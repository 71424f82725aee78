"""Paired comparisons at fixed violation levels, and constraint-satisfaction intervals."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairbench.report.aggregate import clopper_pearson, pareto_points
from fairbench.report.paired import operating_points, paired_table, wins_ties_losses


def trials(points: dict[str, list[tuple[float, float, float]]], seeds=10) -> pd.DataFrame:
    """label -> [(knob, val/test violation, mean error)]; per-seed error = mean + a shared
    split effect (large) + a small method-specific wobble."""
    rng = np.random.default_rng(0)
    split = rng.normal(0, 0.02, seeds)  # what pairing cancels
    rows = []
    for label, configs in points.items():
        for knob, violation, error in configs:
            for seed in range(seeds):
                e = error + split[seed] + rng.normal(0, 0.001)
                rows.append(
                    {
                        "dataset": "d",
                        "constraint": "demographic_parity",
                        "privacy_notion": "full",
                        "epsilon": 1.0,
                        "delta": 1e-5,
                        "method": label,
                        "label": label,
                        "config_id": "c",
                        "knob": knob,
                        "knob_name": "gamma",
                        "seed": seed,
                        "test_error": e,
                        "val_error": e,
                        "test_violation": violation,
                        "val_violation": violation,
                        "epsilon_spent": 1.0,
                        "wall_seconds": 1.0,
                        "test_satisfied": np.nan,
                        "test_excess": np.nan,
                        "knob_values": f"{knob:g}",
                        "model": "logistic",
                        "steps": 100,
                        "epochs": 1.0,
                        "batch_size": 64.0,
                        "noise_multiplier": 1.0,
                        "noise": "gradient 1",
                        "calibrated": "noise_multiplier",
                        "calibration_at_bound": False,
                    }
                )
    return pd.DataFrame(rows)


FRAME = trials(
    {
        "a": [(0.02, 0.02, 0.170), (0.05, 0.05, 0.160)],
        "b": [(0.02, 0.04, 0.175), (0.10, 0.09, 0.150)],
        "c": [(0.02, 0.05, 0.1601)],
    }
)


def test_each_method_is_chosen_on_validation_within_the_level():
    chosen = operating_points(FRAME, 0.05).groupby("label")["knob"].first()
    assert chosen.to_dict() == {"a": 0.05, "b": 0.02, "c": 0.02}
    assert set(operating_points(FRAME, 0.03)["label"]) == {"a"}  # b, c cannot reach 0.03


def test_pairing_resolves_small_differences_the_split_noise_would_hide():
    paired = paired_table(FRAME, levels=(0.05,)).set_index(["method_a", "method_b"])
    ab = paired.loc[("a", "b")]
    assert ab["difference_mean"] == pytest.approx(-0.015, abs=0.002)
    assert ab["verdict"] == "win"
    assert ab["n_pairs"] == 10
    # a vs c differ by 1e-4 under split noise of 0.02: an unpaired interval is ~0.014 wide,
    # the paired one ~0.001; either way a 1e-4 difference is a tie
    assert paired.loc[("a", "c")]["verdict"] == "tie"
    assert paired.loc[("a", "c")]["difference_ci95"] < 0.002
    assert paired.loc[("b", "c")]["verdict"] == "loss"


def test_wins_ties_losses_count_both_sides_of_every_pair():
    table = wins_ties_losses(paired_table(FRAME, levels=(0.05, 0.10))).set_index(
        ["dataset", "level", "method"]
    )
    assert table.loc[("d", 0.05, "a")].tolist() == [1, 1, 0]
    assert table.loc[("d", 0.05, "b")].tolist() == [0, 0, 2]
    assert table.loc[("d", 0.05, "c")].tolist() == [1, 1, 0]
    assert table.loc[("d", 0.10, "b")].tolist() == [2, 0, 0]  # its 0.09 config is allowed at 0.10
    assert table[["wins", "losses"]].sum().tolist()[0] == table["losses"].sum()


def test_clopper_pearson_interval_is_exact_and_covers():
    assert clopper_pearson(0, 10) == (0.0, pytest.approx(0.3085, abs=1e-4))
    assert clopper_pearson(10, 10) == (pytest.approx(0.6915, abs=1e-4), 1.0)
    low, high = clopper_pearson(4, 10)
    assert stats.binom.sf(3, 10, low) == pytest.approx(0.025, rel=1e-6)  # P(X >= 4 | low)
    assert stats.binom.cdf(4, 10, high) == pytest.approx(0.025, rel=1e-6)


def test_pareto_points_report_the_satisfaction_interval():
    frame = FRAME.copy()
    frame["test_satisfied"] = (np.arange(len(frame)) % 10 < 7).astype(float)  # 7 of 10 seeds
    points = pareto_points(frame)
    assert (points["satisfied_fraction"] == 0.7).all()
    assert points["satisfied_ci_low"].iloc[0] == pytest.approx(clopper_pearson(7, 10)[0])
    assert points["satisfied_ci_high"].iloc[0] == pytest.approx(clopper_pearson(7, 10)[1])
