"""The ACS adapter through folktables' own offline loader, on PUMS-shaped generated files."""

import numpy as np
import pytest

import fairbench.datasets.acs as acs_module
from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError, DataError
from tests.datasets.pums_fixture import write_pums


@pytest.fixture
def root(tmp_path):
    write_pums(tmp_path, "AL", 2018, "5-Year", rows=4000, seed=0)
    write_pums(tmp_path, "AK", 2018, "1-Year", rows=4000, seed=1)
    write_pums(tmp_path, "AL", 2016, "1-Year", rows=4000, seed=2)
    write_pums(tmp_path, "AL", 2019, "1-Year", rows=500, seed=3)
    return tmp_path


def test_employment_with_race_groups_as_in_the_paper(root):
    task = get_dataset("acs").load(seed=0, root=root)  # AL 2018 5-Year ACSEmployment
    assert task.sensitive_name == "RAC1P" and task.group_names[:2] == ("White", "Black")
    assert 7 <= task.n_groups <= 9  # races absent from a state's file are no groups
    assert not any(f.startswith("RAC1P=") for f in task.feature_names)
    assert any(f.startswith("SEX=") for f in task.feature_names)
    y = np.concatenate([task.train.y, task.val.y, task.test.y])
    assert len(y) == 4000 and 0.2 < y.mean() < 0.6
    again = get_dataset("acs").load(seed=0, root=root)
    assert np.array_equal(task.test.X, again.test.X)


def test_other_states_years_problems_and_groups(root):
    alaska = get_dataset("acs", state="ak", horizon="1-Year").load(0, root=root)
    assert len(alaska.train) + len(alaska.val) + len(alaska.test) == 4000
    old = get_dataset("acs", year=2016, horizon="1-Year").load(0, root=root)  # ss16pal.csv
    assert old.provenance.preprocessing["year"] == 2016
    income = get_dataset("acs", problem="income", sensitive="sex").load(0, root=root)
    assert income.group_names == ("male", "female")
    assert {"AGEP", "WKHP"} <= set(income.feature_names)
    merged = get_dataset("acs", merge_groups_below=60).load(0, root=root)
    assert merged.n_groups < 9 and "Some other race" in merged.group_names


def test_missing_file_names_the_expected_path_and_the_fetch_command(tmp_path):
    with pytest.raises(DataError) as info:
        get_dataset("acs", state="CA").load(0, root=tmp_path)
    message = str(info.value)
    assert str(tmp_path / "acs" / "2018" / "5-Year" / "psam_p06.csv") in message
    assert "fairbench data fetch acs --option state=CA" in message
    assert not (tmp_path / "acs").exists()  # nothing created under the data root


def test_2019_and_later_column_renames_are_refused_clearly(root):
    with pytest.raises(DataError, match=r"RELP is renamed RELSHIPP.*after 2018 are not supported"):
        get_dataset("acs", year=2019, horizon="1-Year").load(0, root=root)


def test_unknown_state_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown state 'XX'"):
        get_dataset("acs", state="XX")


def test_fetch_goes_through_folktables_with_download(monkeypatch, tmp_path):
    calls = []

    class FakeSource:
        def __init__(self, **kwargs):
            calls.append(kwargs)

        def get_data(self, states, download):
            calls.append({"states": states, "download": download})

    monkeypatch.setattr("folktables.ACSDataSource", FakeSource)
    paths = get_dataset("acs", state="AK", year=2017).fetch(tmp_path)
    assert calls[0]["survey_year"] == "2017" and calls[0]["root_dir"] == str(tmp_path / "acs")
    assert calls[1] == {"states": ["AK"], "download": True}
    assert paths == [tmp_path / "acs" / "2017" / "5-Year" / "psam_p02.csv"]
    assert acs_module.ACS.fetch is not None


def test_the_paper_configuration_stops_with_one_line_without_the_file(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRBENCH_DATA", str(tmp_path))
    code, _, stderr = cli("run", "fig-acs", "--out", str(tmp_path / "run"), "--quiet")
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert "acs/2018/5-Year/psam_p01.csv" in lines[0] and "fairbench data fetch acs" in lines[0]
    assert not (tmp_path / "run").exists()
