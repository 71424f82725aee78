"""Credit, Parkinsons, Heart and Law School adapters against the counts in SOURCES.md."""

import shutil

import numpy as np
import pandas as pd
import pytest

from fairbench.datasets import get_dataset, registry
from fairbench.datasets.base import build_task, read_table, unit_split
from fairbench.datasets.credit import read_values
from fairbench.datasets.files import DataFile, fetch
from fairbench.errors import DataError
from tests.conftest import SHARED_DATA

CREDIT = pytest.mark.data("credit/default_of_credit_card_clients.csv")
CREDIT_BOTH = pytest.mark.data(
    "credit/default_of_credit_card_clients.csv", "credit/default of credit card clients.csv"
)
PARKINSONS = pytest.mark.data("parkinsons/parkinsons_updrs.data")
HEART = pytest.mark.data("heart/heart_disease_health_indicators_BRFSS2015.csv")
LAWSCHOOL = pytest.mark.data("lawschool/law_data.csv")


def all_rows(task):
    return (
        np.concatenate([p.y for p in (task.train, task.val, task.test)]),
        np.concatenate([p.s for p in (task.train, task.val, task.test)]),
    )


def test_adapters_register():
    assert {"adult", "credit", "parkinsons", "heart", "lawschool", "synthetic"} <= set(registry())


@CREDIT
def test_credit_matches_the_published_statistics():
    task = get_dataset("credit").load(seed=0)
    y, s = all_rows(task)
    assert task.n_features == 85 and len(y) == 30_000
    assert y.sum() == 6_636 and (s == 0).sum() == 11_888 and (s == 1).sum() == 18_112
    assert not any(f.startswith("SEX") for f in task.feature_names)
    assert {"EDUCATION=4", "MARRIAGE=3"} <= set(task.feature_names)
    assert "EDUCATION=0" not in task.feature_names  # undocumented codes merged into others


@CREDIT_BOTH
def test_credit_reads_the_semicolon_export_and_verifies_values(tmp_path):
    (tmp_path / "credit").mkdir()
    verbatim = SHARED_DATA / "credit" / "default of credit card clients.csv"
    shutil.copy(verbatim, tmp_path / "credit" / verbatim.name)
    semicolon = get_dataset("credit").load(seed=3, root=tmp_path)
    reference = get_dataset("credit").load(seed=3)
    assert np.array_equal(semicolon.test.X, reference.test.X)
    # any export (the workbook has no verified checksum) is checked value by value
    frame = pd.read_csv(verbatim, sep=";")
    export = tmp_path / "export.csv"
    frame.to_csv(export, index=False)
    assert read_values(export).equals(frame)
    frame.loc[5, "AGE"] += 1
    frame.to_csv(export, index=False)
    with pytest.raises(DataError, match="differ from the published dataset"):
        read_values(export)
    frame.drop(columns=["PAY_AMT6"]).to_csv(export, index=False)
    with pytest.raises(DataError, match=r"lacks column.*PAY_AMT6"):
        read_values(export)


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"a": [1, 2], "b": [3, 4]}).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"lacks column.*c, d"):
        read_table(path, "toy", ["a", "c", "d"])


@PARKINSONS
@pytest.mark.parametrize("split", ["rows", "subject"])
def test_parkinsons_classification_uses_the_training_median(split):
    task = get_dataset("parkinsons", split=split).load(seed=1)
    regression = get_dataset("parkinsons", split=split, task="regression").load(seed=1)
    assert task.kind == "classification" and regression.kind == "regression"
    median = task.provenance.preprocessing["threshold"]
    assert median == pytest.approx(np.median(regression.train.y))
    assert np.array_equal(task.train.y, (regression.train.y > median).astype(int))
    assert task.n_features == 19 and len(all_rows(task)[0]) == 5_875
    assert get_dataset("parkinsons", drop_motor=True).load(1).n_features == 18


@PARKINSONS
def test_parkinsons_subject_split_keeps_subjects_whole():
    raw = pd.read_csv(SHARED_DATA / "parkinsons" / "parkinsons_updrs.data")
    subjects, sex = raw["subject#"].to_numpy(), raw["sex"].to_numpy()
    parts = unit_split(subjects, sex, seed=0)
    owners = [set(subjects[p]) for p in parts]
    assert not (owners[0] & owners[1] or owners[0] & owners[2] or owners[1] & owners[2])
    assert all(set(sex[p]) == {0, 1} for p in parts)  # both sexes in every part
    assert 0.2 < len(parts[2]) / len(subjects) < 0.33


@HEART
def test_heart_counts_and_subsample():
    task = get_dataset("heart").load(seed=0)
    y, s = all_rows(task)
    assert len(y) == 253_680 and y.sum() == 23_893 and (s == 0).sum() == 141_974
    assert task.n_features == 50
    small = get_dataset("heart", n_rows=5_000).load(seed=0)
    assert len(all_rows(small)[0]) == 5_000
    again = get_dataset("heart", n_rows=5_000).load(seed=0)
    assert np.array_equal(small.train.X, again.train.X)


@LAWSCHOOL
def test_lawschool_groups_tasks_and_merging():
    task = get_dataset("lawschool").load(seed=0)
    y, s = all_rows(task)
    assert len(y) == 21_790 and task.n_groups == 8  # the PO row dropped
    assert np.bincount(s).tolist() == [18_284, 1_282, 845, 488, 389, 293, 110, 99]
    bw = get_dataset("lawschool", sensitive="race_bw", task="regression").load(seed=0)
    assert bw.kind == "regression" and bw.group_names == ("White", "Black")
    assert len(all_rows(bw)[0]) == 18_284 + 1_282
    merged = get_dataset("lawschool", merge_groups_below=300).load(seed=0)
    assert merged.group_names == ("White", "Black", "Asian", "Hispanic", "Mexican", "Other")
    assert np.bincount(all_rows(merged)[1])[-1] == 293 + 110 + 99


def test_a_group_empty_in_a_split_is_refused():
    frame = pd.DataFrame({"x": np.arange(40.0)})
    s = np.zeros(40, dtype=int)
    s[0] = 1  # one member: it cannot be in all three parts
    with pytest.raises(DataError, match=r"group 'b' has no rows in the .* split"):
        build_task(
            name="toy",
            version="1",
            numeric=frame,
            categorical=pd.DataFrame(index=frame.index),
            y=np.arange(40) % 2,
            s=s,
            label_names=("n", "p"),
            group_names=("a", "b"),
            sensitive_name="g",
            seed=0,
            sha256={},
            preprocessing={},
        )


def test_landing_page_sources_say_where_to_get_the_file(tmp_path):
    page = DataFile("heart/heart.csv", "ab" * 32, "https://example.org/page", direct=False)
    with pytest.raises(DataError, match=r"no direct download; get it from https://example\.org"):
        fetch("heart", (page,), tmp_path)


@CREDIT
def test_credit_workbook_path(tmp_path, monkeypatch):
    """No .xls writer is available here, so pandas.read_excel is replaced by the workbook's
    content (second header row as the column names); the reader's checks are what is tested."""
    values = pd.read_csv(SHARED_DATA / "credit" / "default_of_credit_card_clients.csv")
    (tmp_path / "credit").mkdir()
    workbook = tmp_path / "credit" / "default of credit card clients.xls"
    workbook.write_bytes(b"stand-in")
    seen = {}

    def fake_read_excel(path, header):
        seen["header"] = header
        return values

    monkeypatch.setattr(pd, "read_excel", fake_read_excel)
    task = get_dataset("credit").load(seed=0, root=tmp_path)
    assert seen["header"] == 1 and task.n_features == 85

    def missing_xlrd(path, header):
        raise ImportError("Missing optional dependency 'xlrd'")

    monkeypatch.setattr(pd, "read_excel", missing_xlrd)
    with pytest.raises(DataError, match=r"needs xlrd: `pip install 'dp-fairbench\[xls\]'`"):
        get_dataset("credit").load(seed=0, root=tmp_path)
