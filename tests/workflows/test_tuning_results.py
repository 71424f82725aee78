"""The tune result table (fairbench.rundir.tuning): what is written is read back, the
non-private epsilon and a selection that chose nothing included, and a file that is not a
table is refused with one line."""

import dataclasses
import json
import math

import pytest

from fairbench.errors import ConfigError
from fairbench.rundir.tuning import (
    COLUMNS,
    TuneLayout,
    TuningRow,
    read_analysis,
    read_table,
    write_analysis,
    write_table,
)

CHOSEN = TuningRow(
    dataset="adult",
    constraint="demographic_parity",
    epsilon=math.inf,
    method="erm",
    target=0.05,
    selection="free",
    repeat=3,
    selected="erm#1",
    hparams={"lr": 0.1, "clip_norm": math.inf},
    knob=math.nan,
    val_error=0.2,
    val_violation=0.04,
    test_error=0.21,
    test_violation=0.03,
    candidates=8,
    feasible=5,
    infeasible=1,
    uses_sensitive_at_test=True,
    tuning="tuning not charged",
    tuning_epsilon=math.nan,
    candidate_epsilon=math.nan,
    training_epsilon=math.nan,
    score_laplace_scale=math.nan,
    accountant=None,
    left_out=None,
)
NOTHING = dataclasses.replace(
    CHOSEN,
    epsilon=0.5,
    selection="private",
    selected=None,
    hparams=None,
    val_error=math.nan,
    val_violation=math.nan,
    test_error=math.nan,
    test_violation=math.nan,
    candidates=0,
    feasible=0,
    tuning_epsilon=0.0,
    accountant="rdp",
    left_out="no candidate calibrates",
)


def test_a_table_round_trips_with_inf_epsilon_and_a_row_that_chose_nothing(tmp_path):
    layout = TuneLayout(tmp_path)
    write_table(layout, [CHOSEN, NOTHING])
    table = read_table(layout)
    assert list(table.columns) == COLUMNS
    for written, read in zip([CHOSEN, NOTHING], table.to_dict("records"), strict=True):
        for name, value in dataclasses.asdict(written).items():
            if isinstance(value, float) and math.isnan(value):
                assert math.isnan(read[name]), name
            else:
                assert read[name] == value, name
    assert table["epsilon"].tolist() == [math.inf, 0.5]  # not null
    assert table["hparams"][0]["clip_norm"] == math.inf


def test_an_empty_table_and_the_analysis_round_trip(tmp_path):
    layout = TuneLayout(tmp_path)
    write_table(layout, [])
    assert read_table(layout).empty and list(read_table(layout).columns) == COLUMNS
    assert read_analysis(layout) == []  # free selection writes none
    records = [{"method": "dp-sgd", "repeats": [{"count": 2}], "total_epsilon": math.nan}]
    write_analysis(layout, records)
    (back,) = read_analysis(layout)
    assert back["repeats"] == [{"count": 2}] and math.isnan(back["total_epsilon"])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[{", "malformed JSON"),
        ('{"dataset": "adult"}', "a JSON list of rows"),
        (json.dumps([{"dataset": "adult"}]), "row 0 lacks column"),
        (json.dumps([{**dataclasses.asdict(CHOSEN), "extra": 1}]), "unknown column 'extra'"),
        (json.dumps([{**dataclasses.asdict(CHOSEN), "selection": "lucky"}]), "'lucky'"),
        (json.dumps([{**dataclasses.asdict(CHOSEN), "epsilon": "one"}]), "a number column"),
    ],
)
def test_a_malformed_table_is_one_clear_error(tmp_path, text, says):
    layout = TuneLayout(tmp_path)
    layout.table.write_text(text)
    with pytest.raises(ConfigError, match=says) as info:
        read_table(layout)
    assert str(layout.table) in str(info.value) and "\n" not in str(info.value)


def test_a_missing_table_says_to_let_tune_finish(tmp_path):
    with pytest.raises(ConfigError, match=r"no tuning\.json yet: let `fairbench tune` finish"):
        read_table(TuneLayout(tmp_path))
