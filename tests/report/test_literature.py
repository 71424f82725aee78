"""fig-literature: the builder over a tiny real tune run in both privacy notions (rows carry
their notion and the sensitive-at-test mark, the dominance table is the paired t-interval of
the final trials), and the published points matched at the loosest target no looser than
theirs."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairbench.report.literature import dominance, matched, published_points
from tests.report.quick_tune import quick_tune

FAST = {"epochs": 2, "batch_size": 64}
TUNE = {
    "name": "lit",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 1000}}],
    "constraint": "equalized_odds",
    "epsilons": [1.0],
    "targets": [0.3, 0.1],
    "draws": 2,
    "search_seeds": [100],
    "final_seeds": list(range(10)),
    "methods": [
        {
            "name": "raco-dp",
            "hparams": {**FAST, "calibrate": "noise"},
            "space": {"lr": {"log": [0.2, 1.0]}, "knob": [0.02, 0.2]},
        },
        {"name": "jagielski-post", "hparams": FAST, "space": {"knob": [0.0, 0.05]}},
        {
            "name": "jagielski-post",
            "label": "jagielski-post (A-only)",
            "hparams": {**FAST, "privacy_notion": "sensitive-attribute"},
            "space": {"knob": [0.0, 0.05]},
        },
    ],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from fairbench.figures import build

    root = tmp_path_factory.mktemp("literature")
    quick_tune(TUNE, root / "tune")
    return root, build("literature", [root / "tune"], root / "fig")


def test_rows_carry_their_notion_and_the_sensitive_at_test_mark(built):
    root, written = built
    rows = pd.read_csv(root / "fig" / "synthetic-equalized_odds.csv")
    notion = dict(zip(rows["method"], rows["privacy_notion"], strict=False))
    assert notion["jagielski-post (A at test)"] == "full"
    assert notion["jagielski-post (A-only) (A at test)"] == "sensitive-attribute"
    assert notion["raco-dp"] == "full"
    at_test = rows.groupby("method")["uses_sensitive_at_test"].first()
    assert at_test["raco-dp"] == False and at_test["jagielski-post (A at test)"] == True  # noqa: E712
    names = {p.name for p in written}
    assert {
        "synthetic-equalized_odds.png",
        "synthetic-equalized_odds.pdf",
        "synthetic-equalized_odds-dominance.csv",
        "references.md",
        "README.md",
    } <= names


def test_dominance_is_the_paired_interval_of_the_final_trials(built):
    root, _ = built
    table = pd.read_csv(root / "fig" / "synthetic-equalized_odds-dominance.csv")
    # raco-dp (a seed method) against the baseline of its notion only
    assert set(table["other"]) == {"jagielski-post (A at test)"}
    assert set(table["privacy_notion"]) == {"full"}
    from fairbench.report.literature import literature_rows
    from fairbench.report.privacy_cost import load_tune_output

    _, errors = literature_rows(load_tune_output(root / "tune"))
    for r in table.itertuples():
        a = errors[("synthetic", r.tau, "raco-dp", r.epsilon)]
        b = errors[("synthetic", r.tau, "jagielski-post (A at test)", r.epsilon)]
        diff = (a - b).to_numpy()
        half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
        assert r.difference == pytest.approx(diff.mean()) and r.ci95 == pytest.approx(half)
        expected = (
            "dominates"
            if diff.mean() + half < 0 and r.violation_seed <= r.violation_other
            else "worse"
            if diff.mean() - half > 0
            else "no"
        )
        assert r.dominates == expected


def test_published_points_are_matched_at_the_loosest_target_within_their_violation():
    rows = pd.DataFrame(
        {
            "dataset": ["adult"] * 5,
            "constraint": ["equalized_odds"] * 5,
            "privacy_notion": ["sensitive-attribute"] * 3 + ["full", "full"],
            "epsilon": [1.0] * 5,
            "method": ["pf-ld"] * 4 + ["dp-sgd"],
            "tau": [0.1, 0.05, 0.02, 0.05, 0.05],
            "selection_rule": ["within_tau"] * 4 + ["error_only"],
            "test_error_mean": [0.15, 0.16, 0.18, 0.5, 0.14],
            "violation_mean": [0.08, 0.04, 0.015, 0.0, 0.1],
        }
    )
    points = published_points()
    mine = points[
        (points["method"] == "PFLD")
        & (points["experiment"] == "equalized_odds")
        & (points["epsilon"] == 1.0)
    ]
    table = matched(rows, mine)
    assert set(table["method"]) == {"pf-ld"}  # an unconstrained reference is never matched
    same = table[table["our_notion"] == "sensitive-attribute"]
    for r in same.itertuples():
        taus = [t for t in (0.1, 0.05, 0.02) if t <= r.published_violation]
        if not taus:
            assert math.isnan(r.our_error)
            continue
        want = {0.1: 0.15, 0.05: 0.16, 0.02: 0.18}[max(taus)]
        assert r.tau == max(taus) and r.our_error == want
        assert r.difference == pytest.approx(want - r.published_error)
    stricter = table[table["our_notion"] == "full"].dropna(subset=["our_error"])
    assert set(stricter["our_error"]) <= {0.5}  # the full-notion row, labelled as such


def test_dominance_verdicts_on_a_hand_made_table():
    rows = pd.DataFrame(
        {
            "dataset": ["d"] * 3,
            "privacy_notion": ["full"] * 3,
            "epsilon": [1.0] * 3,
            "tau": [0.05] * 3,
            "method": ["raco-dp", "pf-ld", "jagielski-oracle"],
            "selection_rule": ["within_tau"] * 3,
            "test_error_mean": [0.2, 0.3, 0.2],
            "violation_mean": [0.01, 0.02, 0.01],
        }
    )
    seeds = pd.Series(range(5))
    errors = {
        ("d", 0.05, "raco-dp", 1.0): pd.Series([0.2, 0.21, 0.19, 0.2, 0.2], seeds),
        ("d", 0.05, "pf-ld", 1.0): pd.Series([0.3, 0.31, 0.29, 0.3, 0.3], seeds),
        ("d", 0.05, "jagielski-oracle", 1.0): pd.Series([0.2, 0.2, 0.2, 0.21, 0.19], seeds),
    }
    verdict = dominance(rows, errors).set_index("other")["dominates"]
    assert verdict["pf-ld"] == "dominates" and verdict["jagielski-oracle"] == "no"
