"""Budget sensitivity (issue 40 item 2) over a tiny real tune: the draws are nested, each
budget's selection is tune's rule on the first k draws (recomputed here by hand from the
search trials), the choices the tune did not run are run, the winner and the paired interval
per budget equal a hand computation from the final trials, and the label follows its rule;
the label's conditions one by one on hand-made rows; the figure builders write the table."""

import json
import math
import sqlite3

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairbench.figures import build
from fairbench.report.budget_sensitivity import BUDGETS, STABLE, label, sensitivity
from fairbench.rundir.tuning import TuneLayout, read_budget_table, read_table
from fairbench.workflows.budgets import first_draws, load_tuned_config, run_budgets
from fairbench.workflows.tune import sample_configurations
from tests.report.quick_tune import quick_tune

FAST = {"epochs": 1, "batch_size": 64}
TAU = 0.2
TUNE = {
    "name": "budgets",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 600}}],
    "epsilons": [1.0],
    "targets": [TAU],
    "draws": 4,
    "search_seeds": [100, 101],
    "final_seeds": list(range(10)),
    "methods": [
        {"name": "erm", "unconstrained": True, "hparams": FAST, "space": {"lr": [0.5]}},
        {
            "name": "raco-dp",
            "label": "raco-wide",
            "hparams": {**FAST, "calibrate": "noise"},
            "space": {"lr": {"log": [0.01, 2.0]}, "knob": [0.02, 0.3]},
        },
        {
            "name": "raco-dp",
            "label": "raco-narrow",
            "hparams": {**FAST, "calibrate": "noise"},
            "space": {"lr": {"log": [0.05, 0.5]}, "knob": [0.02, 0.05]},
        },
    ],
}
SMALL = (1, 2, 4)  # this tune's budgets: the rule of (4, 8, 16), scaled to 4 draws
KEY = ["dataset", "epsilon", "target", "method"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The tiny tune, then its budgets 1 and 2."""
    out = tmp_path_factory.mktemp("budgets") / "tune"
    quick_tune(TUNE, out)
    config = load_tuned_config(out)
    with pytest.MonkeyPatch.context() as patch:  # as quick_tune: the reports are not read
        patch.setattr("fairbench.workflows.budgets.write_report", lambda run_dir: None)
        selections, failures = run_budgets(config, out, 1, True, lambda _: None, list(SMALL[:-1]))
    assert failures == []
    return out, selections


def _rows(folder) -> pd.DataFrame:
    """Every done trial under `folder`, straight from the SQLite stores."""
    rows = []
    for store in sorted(folder.glob("**/results.sqlite")):
        with sqlite3.connect(store) as db:
            rows += [json.loads(r[0]) for r in db.execute("SELECT result FROM trials")]
    frame = pd.DataFrame(rows)
    frame["epsilon"] = frame["epsilon"].astype(float).fillna(np.inf)
    return frame


def _by_hand(search: pd.DataFrame, k: int) -> dict[str, str | None]:
    """Method -> the label tune's rule picks from its first k draws: mean validation error
    and violation over the search seeds, the lowest error within TAU (erm: any)."""
    search = search.assign(
        method_label=search["label"].str.split("#").str[0],
        draw=search["label"].str.split("#").str[1].astype(int),
    )
    out = {}
    for method, mine in search[search["draw"] < k].groupby("method_label"):
        means = mine.groupby("label")[["val_error", "val_violation"]].mean()
        within = means if method == "erm" else means[means["val_violation"] <= TAU]
        out[method] = within["val_error"].idxmin() if len(within) else None
    return out


def test_draws_are_nested_and_a_budget_keeps_exactly_its_first_draws(tuned):
    out, _ = tuned
    config = load_tuned_config(out)
    full = sample_configurations(config)
    for k in SMALL:
        assert sample_configurations(config, k) == {m: d[:k] for m, d in full.items()}
        kept = first_draws(_rows(out / "search").to_dict("records"), k)
        labels = {r["label"] for r in kept}
        assert labels == {f"{m}#{i}" for m in full for i in range(k)}
        assert len(kept) == len(labels) * 2  # every search seed of each


def test_each_budget_selects_by_tunes_rule_on_its_first_draws(tuned):
    out, selections = tuned
    search = _rows(out / "search")
    full = read_table(TuneLayout(out)).drop_duplicates(KEY)
    assert dict(zip(full["method"], full["selected"], strict=True)) == _by_hand(search, 4)
    for k in SMALL[:-1]:
        chosen = {
            m: None if pd.isna(v) else v
            for m, v in zip(selections[k]["method"], selections[k]["selected"], strict=True)
        }
        assert chosen == _by_hand(search, k)
        table = read_budget_table(TuneLayout(out), k).drop_duplicates(KEY)
        assert dict(zip(table["method"], table["selected"], strict=True)) == chosen
        assert set(table["candidates"]) == {k}


def test_only_the_choices_tune_did_not_run_are_run_and_a_rerun_runs_nothing(tuned):
    out, selections = tuned
    tune_ran = set(_rows(out / "final")["label"])
    chosen = {
        label.replace("#", "-")
        for table in selections.values()
        for label in table["selected"].dropna()
    }
    added = _rows(out / "budgets" / "final")
    assert chosen - tune_ran  # budget 1 chose draws the full budget did not
    assert set(added["label"]) == chosen - tune_ran
    assert sorted(added["seed"].unique()) == TUNE["final_seeds"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("fairbench.workflows.budgets.write_report", lambda run_dir: None)
        _, failures = run_budgets(load_tuned_config(out), out, 1, True, lambda _: None, [1, 2])
    assert failures == [] and len(_rows(out / "budgets" / "final")) == len(added)


def test_every_budgets_choice_has_its_final_trials_on_the_same_seeds(tuned):
    out, _ = tuned
    final = pd.concat([_rows(out / "final"), _rows(out / "budgets" / "final")])
    for k in SMALL[:-1]:
        table = read_budget_table(TuneLayout(out), k).dropna(subset=["selected"])
        for row in table.itertuples():
            trial = final[
                (final["label"] == row.selected.replace("#", "-")) & (final["seed"] == row.repeat)
            ]
            assert len(trial) == 1 and trial["test_error"].iloc[0] == row.test_error


def test_winner_and_paired_interval_per_budget_equal_a_hand_computation(tuned):
    out, _ = tuned
    frame = sensitivity(out, SMALL, min_search_seeds=2)
    tables = {k: read_budget_table(TuneLayout(out), k) for k in SMALL[:-1]}
    tables[4] = read_table(TuneLayout(out))
    assert sorted(frame["budget"]) == list(SMALL)
    for k, table in tables.items():
        fair = table[table["method"] != "erm"].dropna(subset=["selected"])
        errors = fair.pivot(index="repeat", columns="method", values="test_error")
        order = errors.mean().sort_values().index
        row = frame[frame["budget"] == k].iloc[0]
        assert row["winner"] == order[0] and row["competitors"] == len(order)
        assert row["winner_error"] == pytest.approx(errors[order[0]].mean(), abs=1e-12)
        if len(order) < 2:
            assert pd.isna(row["runner_up"]) and row["n_pairs"] == 0
            continue
        diff = (errors[order[1]] - errors[order[0]]).to_numpy()
        half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / math.sqrt(len(diff))
        assert row["runner_up"] == order[1] and row["n_pairs"] == 10
        assert row["gap_mean"] == pytest.approx(diff.mean(), abs=1e-12)
        assert row["gap_ci_low"] == pytest.approx(diff.mean() - half, abs=1e-12)
        assert row["gap_ci_high"] == pytest.approx(diff.mean() + half, abs=1e-12)
    at = {int(r["budget"]): r for _, r in frame.iterrows()}
    agree = at[2]["winner"] == at[4]["winner"]
    excludes = at[4]["gap_ci_low"] > 0
    assert frame["stable"].all() == (agree and excludes)
    assert (frame["label"] == STABLE).all() == (agree and excludes)


def test_under_the_default_budgets_four_draws_are_too_small_to_call_stable(tuned):
    out, _ = tuned
    frame = sensitivity(out)
    assert sorted(frame["budget"]) == [4]  # 4 and 8 of (4, 8, 16) are not below 4 draws
    assert not frame["stable"].any()
    assert (
        frame["label"]
        .iloc[0]
        .startswith("budget too small to call stable: 4 draws × 2 search seed(s) (needs 16 × 3)")
    )


def _at(winner: str | None, runner: str | None = None, low: float = math.nan) -> pd.Series:
    return pd.Series({"winner": winner, "runner_up": runner, "gap_ci_low": low})


def test_the_label_names_each_condition_that_fails():
    decided = {4: _at("a", "b", 0.01), 8: _at("a", "b", 0.01), 16: _at("a", "b", 0.002)}
    assert label(decided, 16, 3) == STABLE
    changed = {**decided, 8: _at("b", "a", 0.01)}
    assert label(changed, 16, 3) == "winner changes from 8 to 16 draws (b → a)"
    tied = {**decided, 16: _at("a", "b", -0.001)}
    assert label(tied, 16, 3) == "paired interval at 16 draws includes 0"
    assert label({**decided, 16: _at("a", "b")}, 16, 3) == tied_text(16)  # one pair: no CI
    alone = {**decided, 16: _at("a")}
    assert label(alone, 16, 3) == "no runner-up: one method reaches τ"
    missing = {16: decided[16]}
    assert label(missing, 16, 3) == "not re-selected at 8 draws (`fairbench tune-budgets` not run)"
    none = {**decided, 8: _at(None)}
    assert label(none, 16, 3) == "winner changes from 8 to 16 draws (none → a)"
    few = label(decided, 16, 1)
    assert few == "budget too small to call stable: 16 draws × 1 search seed(s) (needs 16 × 3)"
    assert label({4: decided[4], 8: _at("a", "b", -0.1)}, 8, 3) == (
        "budget too small to call stable: 8 draws × 3 search seed(s) (needs 16 × 3); "
        "paired interval at 8 draws includes 0"
    )
    assert BUDGETS == (4, 8, 16)


def tied_text(budget: int) -> str:
    return f"paired interval at {budget} draws includes 0"


def test_both_figure_builders_write_the_table_beside_their_own(tuned, tmp_path):
    out, _ = tuned
    frame = sensitivity(out)
    build("privacy-cost", [out], tmp_path / "pc")
    written = pd.read_csv(tmp_path / "pc" / "synthetic-budgets.csv")
    assert list(written["winner"]) == list(frame["winner"])
    assert (written["model"] == "logistic").all()
    notes = (tmp_path / "pc" / "synthetic.md").read_text()
    assert "## Budget sensitivity: is the winner stable?" in notes
    assert "0 of 1 verdicts stable." in notes
    build("literature", [out], tmp_path / "lit")
    written = pd.read_csv(tmp_path / "lit" / "synthetic-demographic_parity-budgets.csv")
    assert list(written["label"]) == list(frame["label"])
    assert "0 of 1 verdicts stable." in (tmp_path / "lit" / "README.md").read_text()


def test_the_command_says_when_no_budget_is_below_the_tunes_and_refuses_a_non_tune(
    tuned, cli, tmp_path
):
    out, _ = tuned
    code, printed, _ = cli("tune-budgets", str(out), "--quiet")
    assert code == 0 and printed.strip() == "4 draws: no smaller budget to re-select at"
    code, _, err = cli("tune-budgets", str(tmp_path))
    assert code != 0 and "has no tune.yaml" in err and "Traceback" not in err
