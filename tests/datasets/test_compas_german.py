"""COMPAS and German Credit adapters: counts measured on the real files (SOURCES.md sections 7
and 8), the split, refusal of corrupted files, and generated files where no real data is."""

import hashlib

import numpy as np
import pandas as pd
import pytest

from fairbench.datasets import get_dataset, registry
from fairbench.datasets.compas import Compas, propublica_filter
from fairbench.datasets.compas import read_raw as read_compas
from fairbench.datasets.files import DataFile
from fairbench.datasets.german import German
from fairbench.datasets.german import read_raw as read_german
from fairbench.errors import DataError
from tests.conftest import SHARED_DATA, present

COMPAS_FILE = "compas/compas-scores-two-years.csv"
GERMAN_FILE = "german/german.data"


needs_compas = pytest.mark.data(COMPAS_FILE)
needs_german = pytest.mark.data(GERMAN_FILE)


def all_rows(task):
    parts = (task.train, task.val, task.test)
    return np.concatenate([p.y for p in parts]), np.concatenate([p.s for p in parts])


def counts(task):
    """Rows and positives per group, over all three parts."""
    y, s = all_rows(task)
    return np.bincount(s).tolist(), np.bincount(s, weights=y).astype(int).tolist()


def assert_stratified_and_seeded(name, options):
    task = get_dataset(name, **options).load(seed=5)
    y, s = all_rows(task)
    for g in range(task.n_groups):
        for label in (0, 1):
            n = ((y == label) & (s == g)).sum()
            n_test = ((task.test.y == label) & (task.test.s == g)).sum()
            n_val = ((task.val.y == label) & (task.val.s == g)).sum()
            assert n_test == round(0.25 * n) and n_val == round(0.15 * (n - n_test))
    again = get_dataset(name, **options).load(seed=5)
    other = get_dataset(name, **options).load(seed=6)
    for a, b in zip(
        (task.train, task.val, task.test), (again.train, again.val, again.test), strict=True
    ):
        assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)
    assert not np.array_equal(task.test.X, other.test.X)


def test_both_register():
    assert {"compas", "german"} <= set(registry())


@needs_compas
def test_compas_filter_and_groups_on_the_real_file():
    raw = read_compas(SHARED_DATA / COMPAS_FILE)
    assert len(raw) == 7_214 and len(propublica_filter(raw)) == 6_172

    task = get_dataset("compas").load(seed=0)
    assert task.group_names == ("African-American", "Caucasian") and task.sensitive_name == "race"
    assert counts(task) == ([3_175, 2_103], [1_661, 822])  # label rates 0.523, 0.391
    prov = task.provenance.preprocessing
    assert prov["rows_after_filter"] == 6_172 and prov["rows_dropped_other_races"] == 894
    assert prov["rows"] == 5_278
    assert task.n_features == 9
    assert not any(f.startswith(("race", "decile", "age_cat")) for f in task.feature_names)
    assert {"age", "priors_count", "sex=Female", "c_charge_degree=F"} <= set(task.feature_names)

    race = get_dataset("compas", sensitive="race").load(seed=0)
    assert counts(race) == ([3_175, 2_103, 509, 343, 31, 11], [1_661, 822, 189, 124, 8, 5])
    assert race.n_features == 9
    sex = get_dataset("compas", sensitive="sex").load(seed=0)
    assert sex.group_names == ("Male", "Female") and sex.sensitive_name == "sex"
    assert counts(sex) == ([4_997, 1_175], [2_396, 413])
    assert sex.n_features == 13 and "race=Asian" in sex.feature_names
    assert not any(f.startswith("sex") for f in sex.feature_names)
    with_race = get_dataset("compas", include_sensitive=True).load(seed=0)
    assert with_race.n_features == 11 and "race=Caucasian" in with_race.feature_names


@needs_german
def test_german_groups_and_label_on_the_real_file():
    task = get_dataset("german").load(seed=0)
    assert task.label_names == ("bad credit", "good credit")  # class 1 (good) is positive
    assert task.group_names == ("male", "female")
    assert counts(task) == ([690, 310], [499, 201])  # label rates 0.723, 0.648
    assert task.n_features == 57
    assert not any(f.startswith("personal_status_sex") for f in task.feature_names)
    assert "age" in task.feature_names and "purpose=A47" not in task.feature_names

    age = get_dataset("german", sensitive="age").load(seed=0)
    assert age.group_names == ("age <= 25", "age > 25")
    assert counts(age) == ([190, 810], [110, 590])  # label rates 0.579, 0.728
    assert age.n_features == 60 and "age" not in age.feature_names
    assert "personal_status_sex=A92" in age.feature_names
    assert get_dataset("german", include_sensitive=True).load(seed=0).n_features == 61
    # numeric attributes standardised with training statistics
    credit = task.feature_names.index("credit_amount")
    assert abs(task.train.X[:, credit].mean()) < 1e-5


@needs_compas
@needs_german
@pytest.mark.parametrize(
    ("name", "options"),
    [("compas", {}), ("compas", {"sensitive": "race"}), ("german", {"sensitive": "age"})],
)
def test_split_is_stratified_and_seeded(name, options):
    assert_stratified_and_seeded(name, options)


@pytest.mark.parametrize(("name", "path"), [("compas", COMPAS_FILE), ("german", GERMAN_FILE)])
def test_corrupted_or_missing_file_is_one_error_line(name, path, tmp_path):
    if not present(path):
        pytest.skip(f"real data file absent: {path}")
    copy = tmp_path / path
    copy.parent.mkdir()
    copy.write_bytes((SHARED_DATA / path).read_bytes().replace(b"1", b"2", 1))  # writable
    with pytest.raises(DataError, match=rf"{name}: checksum mismatch") as info:
        get_dataset(name).load(seed=0, root=tmp_path)
    assert "\n" not in str(info.value) and f"fairbench data fetch {name}" in str(info.value)
    copy.unlink()
    with pytest.raises(DataError, match=rf"{name}: missing data file") as info:
        get_dataset(name).load(seed=0, root=tmp_path)
    assert "\n" not in str(info.value)


# generated files: the parsing, filter and options without the real data


def _use(monkeypatch, adapter, path):
    """Point the adapter at a generated file by trusting that file's checksum."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setattr(adapter, "files", (DataFile(adapter.files[0].path, digest, ""),))


def _compas_frame():
    rows = []
    for race in ("African-American", "Caucasian"):
        for label in (0, 1):
            for i in range(10):
                rows.append(
                    dict(
                        race=race,
                        two_year_recid=label,
                        sex=("Male", "Female")[i % 2],
                        days_b_screening_arrest=i - 5,
                        score_text="Low",
                    )
                )
    rows += [dict(race="Hispanic", two_year_recid=1, sex="Male")] * 3  # race_bw drops them
    rows += [
        dict(race="Caucasian", two_year_recid=1, sex="Male", days_b_screening_arrest=d)
        for d in (31, -31, None)
    ]
    rows += [
        dict(race="Caucasian", two_year_recid=0, sex="Male", is_recid=-1),
        dict(race="Caucasian", two_year_recid=0, sex="Male", c_charge_degree="O"),
        dict(race="Caucasian", two_year_recid=0, sex="Male", score_text="N/A"),
    ]
    defaults = dict(
        age=30,
        juv_fel_count=0,
        juv_misd_count=1,
        juv_other_count=0,
        priors_count=2,
        days_b_screening_arrest=0,
        is_recid=0,
        c_charge_degree="F",
        score_text="High",
        decile_score=7,
        id=1,
    )
    frame = pd.DataFrame([{**defaults, **r} for r in rows])
    frame["age"] = 20 + np.arange(len(frame))
    return frame


def test_compas_on_a_generated_file(tmp_path, monkeypatch):
    path = tmp_path / COMPAS_FILE
    path.parent.mkdir()
    _compas_frame().to_csv(path, index=False)
    _use(monkeypatch, Compas, path)
    task = get_dataset("compas").load(seed=0, root=tmp_path)
    prov = task.provenance.preprocessing
    # 43 pass ProPublica's filter ("N/A" is read as text and filtered, a missing gap fails)
    assert prov["rows_after_filter"] == 43 and prov["rows"] == 40
    assert counts(task) == ([20, 20], [10, 10])
    assert task.n_features == 8  # no row has c_charge_degree M: no column for it
    assert counts(get_dataset("compas", sensitive="sex").load(0, root=tmp_path))[0] == [23, 20]

    frame = _compas_frame()
    frame.loc[0, "race"] = "Martian"
    frame.to_csv(path, index=False)
    _use(monkeypatch, Compas, path)
    with pytest.raises(DataError, match=r"race value\(s\) \['Martian'\]"):
        get_dataset("compas").load(seed=0, root=tmp_path)
    frame.loc[0, ["race", "age"]] = ["Caucasian", None]
    frame.to_csv(path, index=False)
    _use(monkeypatch, Compas, path)
    with pytest.raises(DataError, match="has empty age in kept rows"):
        get_dataset("compas").load(seed=0, root=tmp_path)
    frame.drop(columns=["priors_count"]).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"lacks column\(s\) priors_count"):
        read_compas(path)


def _german_lines():
    template = (
        "A11 6 A34 A43 1169 A65 A75 4 {sex} A101 4 A121 {age} A143 A152 2 A173 1 A192 A201 {c}"
    )
    return [
        template.format(sex=("A93", "A92")[i % 2], age=16 + i, c=1 + (i // 2) % 2)
        for i in range(40)
    ]


def test_german_on_a_generated_file(tmp_path, monkeypatch):
    path = tmp_path / GERMAN_FILE
    path.parent.mkdir()
    path.write_text("\n".join(_german_lines()) + "\n")
    _use(monkeypatch, German, path)
    task = get_dataset("german").load(seed=0, root=tmp_path)
    assert counts(task) == ([20, 20], [10, 10])
    age = get_dataset("german", sensitive="age").load(seed=0, root=tmp_path)
    assert counts(age)[0] == [10, 30]
    # codes no row takes give no column: one value each here, so only the numerics vary
    assert "checking_status=A11" in task.feature_names and "checking_status=A12" not in (
        task.feature_names
    )

    lines = _german_lines()
    path.write_text("\n".join([*lines[:3], "A11 6 A34", *lines[3:]]))
    with pytest.raises(DataError, match="line 4 has 3 fields, expected 21"):
        read_german(path)
    path.write_text("\n".join([lines[0].replace("A93", "A96"), *lines[1:]]))
    with pytest.raises(DataError, match=r"personal_status_sex value\(s\) \['A96'\]"):
        read_german(path)
    path.write_text("\n".join([lines[0][:-1] + "3", *lines[1:]]))
    with pytest.raises(DataError, match=r"class value\(s\) \['3'\]"):
        read_german(path)


@needs_compas
@needs_german
def test_data_check_lists_both(cli):
    code, out, _ = cli("data", "check")
    assert code == 0
    rows = {
        name: next(ln for ln in out.splitlines() if f" {name} " in ln)
        for name in ("compas", "german")
    }
    assert "verified" in rows["compas"] and "5,278" in rows["compas"]
    assert "verified" in rows["german"] and "1,000" in rows["german"] and "57" in rows["german"]
