import hashlib

import numpy as np
import pytest

from fairbench.datasets import get_dataset, registry
from fairbench.datasets.adult import Adult, read_raw
from fairbench.datasets.base import stratified_split
from fairbench.datasets.files import DataFile, fetch, locate
from fairbench.errors import ConfigError, DataError
from tests.conftest import needs_adult


def test_builtin_adapters_register_through_entry_points():
    assert {"adult", "synthetic"} <= set(registry())


def test_unknown_dataset_and_unknown_option_are_config_errors():
    with pytest.raises(ConfigError, match=r"unknown dataset 'adlt'; known datasets: .*adult"):
        get_dataset("adlt")
    with pytest.raises(ConfigError, match="option 'sensitve'"):
        get_dataset("adult", sensitve="race")


def test_stratified_split_fractions_disjoint_and_deterministic():
    strata = np.repeat([0, 1, 2, 3], [400, 100, 300, 200])
    train, val, test = stratified_split(strata, seed=3)
    assert len(np.intersect1d(train, test)) == len(np.intersect1d(train, val)) == 0
    assert len(train) + len(val) + len(test) == len(strata)
    for value, n in zip([0, 1, 2, 3], [400, 100, 300, 200], strict=True):
        assert (strata[test] == value).sum() == round(0.25 * n)
        assert (strata[val] == value).sum() == round(0.15 * (n - round(0.25 * n)))
    again = stratified_split(strata, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again, strict=True))
    assert not np.array_equal(test, stratified_split(strata, seed=4)[2])


@needs_adult
@pytest.mark.parametrize(
    ("options", "rows", "features"),
    [
        ({}, 48_842, 106),
        ({"missing": "drop"}, 45_222, 102),
        ({"missing": "drop", "include_sensitive": True}, 45_222, 104),
    ],
)
def test_adult_rows_and_features(options, rows, features):
    task = Adult(**options).load(seed=0)
    assert len(task.train) + len(task.val) + len(task.test) == rows
    assert task.n_features == features
    assert len(task.test) == pytest.approx(0.25 * rows, abs=4)
    assert task.label_names == ("<=50K", ">50K") and task.group_names == ("Male", "Female")
    assert task.provenance.sha256["adult/adult.data"].startswith("5b00264637db")


@needs_adult
def test_adult_preprocessing_matches_the_raw_counts():
    task = Adult(missing="drop").load(seed=0)
    assert not any(name.startswith("sex=") for name in task.feature_names)
    y = np.concatenate([task.train.y, task.val.y, task.test.y])
    s = np.concatenate([task.train.s, task.val.s, task.test.s])
    # 11,208 of the 45,222 complete rows earn >50K; 14,695 are female (raw-file counts)
    assert y.sum() == 11_208 and (s == 1).sum() == 14_695
    # numeric columns are standardised with training statistics
    age = task.feature_names.index("age")
    assert abs(task.train.X[:, age].mean()) < 1e-4 and abs(task.train.X[:, age].std() - 1) < 1e-3
    # stratified: the female positive rate is the same in train and test to within a row
    rate = [split.y[split.s == 1].mean() for split in (task.train, task.test)]
    assert rate[0] == pytest.approx(rate[1], abs=1e-3)


@needs_adult
def test_adult_race_groups_and_seeded_splits():
    task = Adult(sensitive="race").load(seed=1)
    assert task.n_groups == 5 and task.sensitive_name == "race"
    assert any(name.startswith("sex=") for name in task.feature_names)
    assert not any(name.startswith("race=") for name in task.feature_names)
    same = Adult(sensitive="race").load(seed=1)
    other = Adult(sensitive="race").load(seed=2)
    assert np.array_equal(task.test.X, same.test.X)
    assert not np.array_equal(task.test.y, other.test.y)


def test_missing_data_directory_names_the_path_and_the_fix(tmp_path):
    with pytest.raises(DataError) as info:
        Adult().load(seed=0, root=tmp_path / "nowhere")
    message = str(info.value)
    assert str(tmp_path / "nowhere" / "adult" / "adult.data") in message
    assert "fairbench data fetch adult" in message and "FAIRBENCH_DATA" in message


def test_checksum_mismatch_is_refused(adult_copy):
    path = adult_copy / "adult" / "adult.test"
    path.write_bytes(path.read_bytes()[:-500])  # truncated
    with pytest.raises(DataError, match=r"checksum mismatch .*adult\.test"):
        Adult().load(seed=0, root=adult_copy)


def test_strict_parser_reports_truncated_rows_and_bad_labels(tmp_path):
    path = tmp_path / "adult.data"
    good = (
        "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, "
        "White, Male, 2174, 0, 40, United-States, <=50K\n"
    )
    path.write_text(good + "50, Self-emp-not-inc, 83311, Bachelors\n")
    with pytest.raises(DataError, match="line 2 has 4 fields, expected 15"):
        read_raw(path)
    path.write_text(good.replace("<=50K", "maybe"))
    with pytest.raises(DataError, match="income 'maybe'"):
        read_raw(path)
    path.write_text("|1x3 Cross validator\n" + good.replace("<=50K", ">50K.") + "\n")
    frame = read_raw(path)
    assert len(frame) == 1 and frame.loc[0, "income"] == ">50K" and frame.loc[0, "age"] == 39.0


def test_fetch_verifies_before_writing(tmp_path):
    source = tmp_path / "source.csv"
    source.write_bytes(b"a,b\n1,2\n")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    root = tmp_path / "root"
    good = (DataFile("toy/toy.csv", digest, source.as_uri()),)
    assert fetch("toy", good, root) == [root / "toy" / "toy.csv"]
    assert locate("toy", good, root) == {"toy/toy.csv": root / "toy" / "toy.csv"}
    assert fetch("toy", good, root) == []  # already present and verified

    bad = (DataFile("toy/other.csv", "0" * 64, source.as_uri()),)
    with pytest.raises(DataError, match="sha256"):
        fetch("toy", bad, root)
    assert sorted(p.name for p in (root / "toy").iterdir()) == ["toy.csv"]  # nothing half-written
    with pytest.raises(DataError, match="could not download"):
        fetch("toy", (DataFile("toy/x.csv", digest, (tmp_path / "absent").as_uri()),), root)


def test_synthetic_is_deterministic_with_a_fairness_gap():
    a = get_dataset("synthetic", n_rows=3000).load(seed=0)
    b = get_dataset("synthetic", n_rows=3000).load(seed=0)
    assert np.array_equal(a.train.X, b.train.X)
    rates = [a.train.y[a.train.s == g].mean() for g in range(2)]
    assert rates[0] - rates[1] > 0.15
    three = get_dataset("synthetic", n_groups=3).load(seed=0)
    assert three.n_groups == 3 and set(np.unique(three.train.s)) == {0, 1, 2}


def test_synthetic_group_sizes_imbalance_and_dpse_mixtures():
    sized = get_dataset("synthetic", group_sizes=[1000, 200, 50]).load(seed=0)
    counts = np.bincount(np.concatenate([sized.train.s, sized.val.s, sized.test.s]))
    assert counts.tolist() == [1000, 200, 50] and sized.n_groups == 3
    rare = get_dataset("synthetic", intercept=-3.0).load(seed=0)
    assert rare.train.y.mean() < 0.15  # label imbalance on demand

    mixture = get_dataset(
        "synthetic",
        task="regression",
        n_features=1,
        group_sizes=[2000, 100],
        slopes=[-10.0, 10.0],
        noise=[1.0, 1.0],
    ).load(seed=0)
    assert mixture.kind == "regression" and mixture.n_classes == 0
    # per-group OLS on the standardised feature recovers opposite slopes
    x, y, s = mixture.train.X[:, 0], mixture.train.y, mixture.train.s
    slope = [np.polyfit(x[s == g], y[s == g], 1)[0] for g in (0, 1)]
    assert slope[0] < -5 and slope[1] > 5
    residual = y[s == 0] - np.polyval(np.polyfit(x[s == 0], y[s == 0], 1), x[s == 0])
    assert residual.std() == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"slopes": [1.0, 2.0]}, "regression only"),
        ({"task": "regression", "slopes": [1.0]}, "one value per group"),
        ({"group_sizes": [100]}, "at least 2 groups"),
    ],
)
def test_synthetic_options_are_validated(options, message):
    with pytest.raises(ConfigError, match=message):
        get_dataset("synthetic", **options)
