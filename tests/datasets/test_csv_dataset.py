"""A user's CSV file as a dataset (`datasets.csv_file`): roles, label, groups, missing values,
public bounds, checksums, the card, the config entry, the bad-input matrix, and ProPublica's
COMPAS file read as a plain CSV. `BAD_CSV` is importable: the issue note's table is printed
from it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from fairbench.datasets import get_dataset
from fairbench.datasets.csv_bounds import bounded_features, bounds_template, load_bounds
from fairbench.errors import ConfigError, DataError
from fairbench.rundir.store import finished_rows
from fairbench.runner.config import expand, parse_config
from tests.conftest import SHARED_DATA

COMPAS = (SHARED_DATA or Path("/nonexistent")) / "compas" / "compas-scores-two-years.csv"
needs_compas = pytest.mark.data("compas/compas-scores-two-years.csv")
# outcome columns of COMPAS: recorded after the fact, they give the label away
COMPAS_OUTCOMES = [
    "is_recid",
    "is_violent_recid",
    "r_charge_degree",
    "r_days_from_arrest",
    "vr_charge_degree",
    "event",
    "start",
    "end",
    "decile_score",
    "score_text",
    "v_decile_score",
    "v_score_text",
]


def people(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """A small table with one column of every kind the adapter tells apart."""
    rng = np.random.default_rng(seed)
    group = rng.choice(["a", "b"], n, p=[0.6, 0.4])
    x = rng.normal(size=n).round(3)
    return pd.DataFrame(
        {
            "id": np.arange(n) + 1000,
            "visit": [f"2020-01-{d:02d}" for d in rng.integers(1, 28, n)],
            "x": x,
            "count": rng.integers(0, 10, n),
            "color": rng.choice(["red", "green", "blue"], n),
            "remark": [f"remark {k}" for k in rng.integers(0, 200, n)],
            "group": group,
            "outcome": np.where(x + (group == "a") + rng.normal(size=n) > 0.5, "yes", "no"),
        }
    )


@pytest.fixture
def table(tmp_path) -> Path:
    path = tmp_path / "people.csv"
    people().to_csv(path, index=False)
    return path


def adapter(path: Path, **options):
    return get_dataset("csv", path=str(path), label="outcome", sensitive="group", **options)


def test_roles_are_inferred_and_exclusions_named(table):
    d = adapter(table)
    roles = d.profile.roles
    assert roles.numeric == ("x", "count") and roles.categorical == ("color",)
    assert roles.excluded == {
        "id": "id: a distinct integer on every row",
        "visit": "date or time",
        "remark": f"free text: {people()['remark'].nunique()} distinct values",
    }
    notice = d.notices()[0]
    assert notice.startswith("csv people.csv: excluded 3 column(s) from the features: id (")
    assert "to keep one, list it under `numeric:` or `categorical:`" in notice
    task = d.load(0)
    assert task.feature_names == ("x", "count", "color=blue", "color=green", "color=red")
    assert (len(task.train), len(task.val), len(task.test)) == (255, 44, 101)


def test_overrides_keep_and_drop_columns(table):
    d = adapter(table, categorical=["remark"], numeric=["id"], drop=["color"])
    roles = d.profile.roles
    assert roles.numeric == ("id", "x", "count")
    assert roles.categorical == ("remark",)
    assert roles.excluded == {"visit": "date or time", "color": "dropped (drop:)"}


def test_label_binarised_by_positive(tmp_path):
    frame = people()
    frame["grade"] = np.tile(["1", "2", "3", "4"], 100)
    path = tmp_path / "graded.csv"
    frame.drop(columns="outcome").to_csv(path, index=False)
    d = get_dataset("csv", path=str(path), label="grade", sensitive="group", positive=3)
    y = d.profile.label.y
    assert y.sum() == 100 and d.profile.label.positive == "3"
    assert d.load(0).label_names == ("grade = not 3", "grade = 3")


def test_two_valued_label_takes_the_larger_value(table):
    label = adapter(table).profile.label
    assert (label.positive, label.negative) == ("yes", "no")
    assert label.y.sum() == (people()["outcome"] == "yes").sum()


def test_groups_kept_renamed_and_merged(tmp_path):
    frame = people(600)
    frame["group"] = np.tile(["a", "b", "c", "d", "a", "b"], 100)
    path = tmp_path / "four.csv"
    frame.to_csv(path, index=False)
    assert adapter(path).profile.group_names == ("a", "b", "c", "d")
    merged = adapter(path, groups={"a": "first"}, other=["c", "d"]).profile
    assert merged.group_names == ("b", "first", "other")  # equal sizes: by name
    assert merged.group_of == {"a": "first", "b": "b", "c": "other", "d": "other"}
    assert np.bincount(merged.s).tolist() == [200, 200, 200]


def test_missing_values_dropped_or_imputed_and_recorded(tmp_path):
    frame = people()
    frame.loc[[3, 7, 11], "x"] = np.nan
    frame.loc[20:39, "color"] = np.nan
    frame.loc[[9], "outcome"] = np.nan
    path = tmp_path / "holes.csv"
    frame.to_csv(path, index=False)
    dropped = adapter(path).load(0)
    record = dropped.provenance.preprocessing
    assert record["rows_dropped"] == {
        "label or sensitive value missing": 1,
        "feature value missing (missing: drop)": 23,
    }
    assert record["rows"] == 376 and record["missing_values"] == {"x": 3, "color": 20}
    imputed = adapter(path, missing="impute")
    task = imputed.load(0)
    assert task.provenance.preprocessing["rows"] == 399
    assert "color=(missing)" in task.feature_names  # a missing category is its own value
    assert not np.isnan(task.train.X).any()


def test_bounds_scale_each_record_by_public_ranges(tmp_path, table):
    bounds = tmp_path / "bounds.yaml"
    bounds.write_text(
        "numeric:\n  x: [-2, 2]\n  count: [0, 10]\ncategorical:\n  color: [red, blue]\n"
    )
    task = adapter(table, bounds=str(bounds)).load(0)
    assert task.feature_names == ("x", "count", "color=red", "color=blue")
    frame = people()
    X = np.concatenate([task.train.X, task.val.X, task.test.X])
    expected_x = 2 * (np.clip(frame["x"], -2, 2) + 2) / 4 - 1
    assert sorted(X[:, 0].round(5)) == sorted(expected_x.astype(np.float32).round(5))
    assert X.min() >= -1 and X.max() <= 1
    assert task.provenance.preprocessing["preprocessing_private"] is True
    assert set(task.provenance.sha256) == {"people.csv", "bounds.yaml"}
    # a record's features are a function of that record alone: the other rows do not matter
    declared = load_bounds(bounds)
    strings = people().astype(str)
    alone = bounded_features(strings.iloc[:5], declared)
    among = bounded_features(pd.concat([strings.iloc[:5], people(seed=1).astype(str)]), declared)
    assert np.array_equal(alone.to_numpy(), among.to_numpy()[:5])
    assert alone.iloc[0].tolist() == [
        (np.clip(float(strings.x[0]), -2, 2) + 2) / 2 - 1,
        int(strings["count"][0]) / 5 - 1,
        float(strings.color[0] == "red"),
        float(strings.color[0] == "blue"),
    ]


def test_without_bounds_the_run_is_labelled_not_private(table):
    d = adapter(table)
    assert d.notices()[-1].startswith("csv people.csv: preprocessing not private: ")
    record = d.load(0).provenance.preprocessing
    assert record["preprocessing_private"] is False
    assert record["numeric_standardised_with"] == "training-split statistics (not private)"


def test_bounds_template_from_names_and_types(table):
    text = bounds_template(table, "outcome", "group")
    data = yaml.safe_load(text)
    assert data == {
        "numeric": {"x": [None, None], "count": [None, None]},
        "categorical": {"color": []},
    }
    assert "# not a feature: remark (free text" in text and "NOT PRIVATE" not in text
    filled = bounds_template(table, "outcome", "group", fill_from_data=True)
    assert "WARNING: THE VALUES BELOW WERE FILLED FROM THE DATA ITSELF" in filled
    frame = people()
    values = yaml.safe_load(filled)
    assert values["numeric"]["count"] == [int(frame["count"].min()), int(frame["count"].max())]
    assert values["categorical"]["color"] == ["blue", "green", "red"]


def test_unfilled_template_is_refused(tmp_path, table):
    bounds = tmp_path / "b.yaml"
    bounds.write_text(bounds_template(table, "outcome", "group"))
    with pytest.raises(DataError, match=r"numeric.x is \[None, None\]; give \[low, high\]"):
        adapter(table, bounds=str(bounds)).profile  # noqa: B018


def test_sha256_pinned_and_checked(table):
    d = adapter(table)
    pinned = d.resolved_options()["sha256"]
    assert pinned == hashlib.sha256(table.read_bytes()).hexdigest()
    assert d.load(0).provenance.sha256 == {"people.csv": pinned}
    table.write_text(table.read_text().replace("red", "rot"))
    with pytest.raises(DataError, match="changed since the run started"):
        adapter(table, sha256=pinned).locate()


def test_config_entry_maps_onto_the_adapter(table):
    config = parse_config(
        {
            "name": "mine",
            "seeds": 1,
            "methods": ["erm"],
            "datasets": [
                {"csv": str(table), "label": "outcome", "sensitive": "group", "positive": "yes"}
            ],
        }
    )
    entry = config.datasets[0]
    assert entry.name == "csv" and entry.options["path"] == str(table)
    warnings: list[str] = []
    (spec,) = expand(config, warn=warnings.append)
    assert spec.dataset == "csv" and spec.dataset_options["sha256"] is not None
    assert spec.dataset_options["positive"] == "yes"
    assert [w.split(":")[1].strip() for w in warnings] == ["csv people.csv"] * 2
    with pytest.raises(ConfigError, match="one CSV file per config"):
        parse_config(
            {
                "name": "two",
                "methods": ["erm"],
                "datasets": [
                    {"csv": str(table), "label": "outcome", "sensitive": "group"},
                    {"csv": str(table), "label": "outcome", "sensitive": "group"},
                ],
            }
        )


def test_small_group_is_a_warning_or_with_strict_an_error(tmp_path):
    frame = people()
    frame.loc[:39, "group"] = "rare"  # 40 rows: about 26 in training
    path = tmp_path / "rare.csv"
    frame.to_csv(path, index=False)
    d = adapter(path)
    sizes = dict(zip(d.profile.group_names, d.train_group_sizes(), strict=True))
    assert sizes["rare"] < 30
    assert any("group(s) with under 30 training rows: 'rare'" in n for n in d.notices())
    with pytest.raises(DataError, match=r"'rare' \(\d+\).*\(strict: true\)"):
        adapter(path, strict=True).notices()


def test_card_json(cli, table):
    code, out, _ = cli(
        "data", "check", "--csv", str(table), "--label", "outcome", "--sensitive", "group", "--json"
    )
    assert code == 0
    card = json.loads(out)
    frame = people()
    assert card["rows"] == 400 and card["label"]["positive_rows"] == (frame.outcome == "yes").sum()
    sizes = frame["group"].value_counts()
    assert [(g["group"], g["rows"]) for g in card["sensitive"]["groups"]] == [
        ("a", sizes["a"]),
        ("b", sizes["b"]),
    ]
    roles = {c["column"]: (c["role"], c["why"]) for c in card["columns"]}
    assert roles["id"] == ("excluded", "id: a distinct integer on every row")
    assert roles["outcome"] == ("label", None) and roles["x"] == ("numeric", None)
    assert card["preprocessing_private"] is False


# ---------------------------------------------------------------- the bad-input matrix

Writer = Callable[[Path], Path]


def file_of(text: str, name: str = "bad.csv") -> Writer:
    def write(tmp: Path) -> Path:
        (tmp / name).write_text(text)
        return tmp / name

    return write


def frame_of(change: Callable[[pd.DataFrame], pd.DataFrame]) -> Writer:
    def write(tmp: Path) -> Path:
        change(people()).to_csv(tmp / "bad.csv", index=False)
        return tmp / "bad.csv"

    return write


def _rare(frame: pd.DataFrame) -> pd.DataFrame:
    frame.loc[:39, "group"] = "rare"
    return frame


def _text_in_x(frame: pd.DataFrame) -> pd.DataFrame:
    frame["x"] = frame["x"].astype(str)
    frame.loc[17, "x"] = "twelve"
    return frame


def _duplicate(frame: pd.DataFrame) -> pd.DataFrame:
    frame.insert(3, "x ", frame["count"])  # header "x" twice (names are stripped), other values
    return frame


PEOPLE_CSV = people().to_csv(index=False)
# case -> (file writer, extra flags for `data check`, the message's expected part)
BAD_CSV: dict[str, tuple[Writer, list[str], str]] = {
    "file missing": (lambda tmp: tmp / "nope.csv", [], "csv: no file at {tmp}/nope.csv"),
    "misspelled label column": (
        frame_of(lambda f: f),
        ["--label", "outcom"],
        "label column 'outcom' not found; did you mean 'outcome'?",
    ),
    "misspelled override column": (
        frame_of(lambda f: f),
        ["--numeric", "cuont"],
        "numeric column 'cuont' not found; did you mean 'count'?",
    ),
    "label with more than two values, no positive": (
        frame_of(lambda f: f.assign(outcome=np.tile(["lo", "mid", "hi", "top"], 100))),
        [],
        "label 'outcome' has 4 value(s) ('hi', 'lo', 'mid', 'top'); a binary label is needed",
    ),
    "sensitive column with one group": (
        frame_of(lambda f: f.assign(group="a")),
        [],
        "sensitive column 'group' has one group ('a'); fairness needs at least two",
    ),
    "group under 30 training rows, --strict": (
        frame_of(_rare),
        ["--strict"],
        "group(s) with under 30 training rows: 'rare' (26)",
    ),
    "text in a declared numeric column": (
        frame_of(_text_in_x),
        ["--numeric", "x"],
        "column 'x' is declared numeric but line 19 holds 'twelve'",
    ),
    "empty file": (file_of(""), [], "is empty; a CSV file needs a header line and data rows"),
    "header without rows": (file_of("outcome,group,x\n"), [], "has a header but no data rows"),
    "duplicate header": (
        frame_of(_duplicate),
        [],
        "has the header 'x' twice (columns 3 and 4) with different values; rename one",
    ),
    "wrong delimiter (semicolon file read as comma)": (
        file_of(PEOPLE_CSV.replace(",", ";")),
        [],
        "has one column with delimiter ',', but its header contains ';'",
    ),
}


def snapshot(root: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in [root, *root.rglob("*")]}


def check_args(tmp: Path, case: str) -> list[str]:
    write, extra, _ = BAD_CSV[case]
    args = ["data", "check", "--csv", str(write(tmp)), "--label", "outcome", "--sensitive", "group"]
    for flag in ("--label", "--sensitive"):
        if flag in extra:
            i = args.index(flag)
            args[i : i + 2] = []
    return [*args, *extra]


@pytest.mark.parametrize("case", list(BAD_CSV))
def test_bad_csv_is_one_line_exit_2_and_writes_nothing(cli, tmp_path, case):
    args = check_args(tmp_path, case)
    before = snapshot(tmp_path)
    code, out, err = cli(*args)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: csv"), err
    assert BAD_CSV[case][2].replace("{tmp}", str(tmp_path)) in lines[0], lines[0]
    assert out == "" and snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "case",
    [
        "misspelled label column",
        "wrong delimiter (semicolon file read as comma)",
        "group under 30 training rows, --strict",
    ],
)
def test_bad_csv_in_a_config_leaves_no_run_directory(cli, tmp_path, case):
    write, extra, message = BAD_CSV[case]
    entry = {"csv": str(write(tmp_path)), "label": "outcome", "sensitive": "group"}
    if "--label" in extra:
        entry["label"] = extra[1]
    entry["strict"] = "--strict" in extra
    config = tmp_path / "exp.yaml"
    config.write_text(
        yaml.safe_dump({"name": "bad", "datasets": [entry], "seeds": 1, "methods": ["erm"]})
    )
    before = snapshot(tmp_path)
    code, _, err = cli("run", str(config), "--out", str(tmp_path / "run"), "--quiet")
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: csv")
    assert message in err and snapshot(tmp_path) == before


# ---------------------------------------------------------------- COMPAS as a plain CSV


@needs_compas
def test_compas_as_plain_csv():
    d = get_dataset(
        "csv", path=str(COMPAS), label="two_year_recid", sensitive="race", missing="impute"
    )
    p = d.profile
    excluded = p.roles.excluded
    for col in ("id", "c_case_number"):
        assert excluded[col].startswith("id: a distinct")
    for col in ("dob", "compas_screening_date", "c_jail_in", "screening_date"):
        assert excluded[col] == "date or time"
    for col in ("name", "first", "last", "c_charge_desc"):
        assert excluded[col].startswith("free text: ")
    assert p.duplicates == ("decile_score", "priors_count")
    assert p.group_names == (
        "African-American",
        "Caucasian",
        "Hispanic",
        "Other",
        "Asian",
        "Native American",
    )
    assert np.bincount(p.s).tolist() == [3696, 2454, 637, 377, 32, 18]
    assert p.label.y.sum() == 3251 and len(p.frame) == 7214
    notices = d.notices()
    assert "excluded 27 column(s) from the features: id (id: a distinct integer" in notices[0]
    assert "'Asian' (20), 'Native American' (12)" in notices[2]
    merged = get_dataset(
        "csv",
        path=str(COMPAS),
        label="two_year_recid",
        sensitive="race",
        missing="impute",
        other=["Asian", "Native American"],
    ).profile
    # `other:` joins COMPAS's own "Other" group rather than making a second one
    assert merged.group_names == ("African-American", "Caucasian", "Hispanic", "Other")
    assert np.bincount(merged.s).tolist() == [3696, 2454, 637, 377 + 50]


@pytest.mark.slow
@needs_compas
def test_compas_run_completes(cli, tmp_path):
    config = tmp_path / "compas.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "compas-csv",
                "epsilons": [1.0],
                "seeds": 1,
                "datasets": [
                    {
                        "csv": str(COMPAS),
                        "label": "two_year_recid",
                        "sensitive": "race",
                        "missing": "impute",
                        "drop": COMPAS_OUTCOMES,
                    }
                ],
                "methods": [
                    {"name": "erm", "hparams": {"epochs": 1}},
                    {"name": "dp-sgd", "hparams": {"epochs": 1, "batch_size": 64}},
                ],
            }
        )
    )
    code, out, err = cli("run", str(config), "--out", str(tmp_path / "run"), "--quiet")
    assert code == 0, err
    assert "2 trials run" in out
    assert "csv compas-scores-two-years.csv: preprocessing not private" in err
    assert "warning: csv: preprocessing not private" in err  # the report's caveat
    rows = finished_rows(tmp_path / "run", "test")
    assert len(rows) == 2
    for row in rows:
        assert row["dataset_sha256"] == {
            "compas-scores-two-years.csv": (
                "c451db85908b2f7fef1d83203bedf6b71ecda0d5af468d82ae62178f91d0cc7d"
            )
        }
        assert row["info"]["preprocessing"] == "not private"
        assert len(row["group_names"]) == 6
    dp = next(r for r in rows if r["method"] == "dp-sgd")
    assert dp["epsilon_spent"] <= 1.0
