"""`fairbench describe`, the catalog behind it, `--version`, `-h` and flag help; and the
declared constraints every method plugin carries, checked against what its code accepts."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from fairbench.catalog import describe
from fairbench.catalog.datasets import card_fields
from fairbench.catalog.fields import field_rows
from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods import FairnessSpec, method_class, registry
from fairbench.methods.raco_dp import RaCODPHparams
from fairbench.metrics import VIOLATIONS
from fairbench.privacy import PrivacyBudget
from tests.conftest import needs_adult
from tests.contract.test_testing import TINY

METHOD_KEYS = {
    "kind",
    "name",
    "description",
    "paper",
    "private",
    "privacy_notions",
    "knob",
    "constraints",
    "declared_constraints",
    "ignores_fairness",
    "models",
    "reconstructed",
    "sensitive_at_test",
    "target_metric",
    "hyperparameters",
}
DATASET_KEYS = {
    "kind",
    "name",
    "description",
    "version",
    "status",
    "problem",
    "data_root",
    "files",
    "card_path",
    "card",
    "summary",
    "options",
}
FIELD_KEYS = {"name", "type", "default", "valid", "meaning"}


def test_raco_dp_shows_its_knob_and_every_hyperparameter_with_its_default(cli):
    code, out, err = cli("describe", "raco-dp")
    assert code == 0 and err == ""
    assert (
        "fairness knob:   gamma in [0, inf): allowed disparity of each rate constraint "
        "(larger is looser)" in out
    )
    assert "Yaghini, Cebere, Menart, Bellet, Papernot (2026)" in out and "ICLR 2026" in out
    assert "privacy notion:  full" in out and "models:          logistic, mlp" in out
    rows = {
        line.split("│")[1].strip(): line.split("│")[3].strip()
        for line in out.splitlines()
        if line.startswith("│") and line.split("│")[1].strip()
    }
    resolved = RaCODPHparams().model_dump()  # noise_multiplier: 4 under calibrate: steps
    assert set(RaCODPHparams.model_fields) <= set(rows)
    for name, value in resolved.items():  # booleans and None as a config writes them
        written = isinstance(value, bool) or value is None
        assert rows[name] == (json.dumps(value) if written else str(value)), name
    assert rows["laplace_scale"] == "5.0" and rows["noise_multiplier"] == "4.0"


def test_raco_dp_json_has_the_documented_keys_and_the_pydantic_ranges(cli):
    code, out, _ = cli("describe", "raco-dp", "--json")
    card = json.loads(out)
    assert code == 0 and set(card) == METHOD_KEYS and card["kind"] == "method"
    assert card["knob"] == {
        "name": "gamma",
        "range": "[0, inf)",
        "direction": "looser",
        "meaning": "allowed disparity of each rate constraint",
    }
    rows = {r["name"]: r for r in card["hyperparameters"]}
    assert all(set(r) == FIELD_KEYS for r in rows.values())
    assert rows["batch_size"] == {
        "name": "batch_size",
        "type": "int",
        "default": 1024,
        "valid": "[1, inf)",
        "meaning": "(expected) mini-batch size",
    }
    assert rows["calibrate"]["valid"] == "steps | noise" and rows["lr"]["valid"] == "(0, inf)"
    assert rows["noise_multiplier"]["valid"] == "(0, inf) or null"
    assert card["constraints"] == [
        "demographic_parity",
        "equalized_odds",
        "false_negative_rate",
        "false_negative_rate_parity",
        "accuracy_parity",
    ]
    assert card["declared_constraints"] and card["privacy_notions"] == ["full"]


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_method_describes_with_a_paper_and_every_field_documented(cli, name):
    code, out, err = cli("describe", name, "--json")
    assert code == 0, err
    card = json.loads(out)  # strict enough: sgda's clip_norm = inf comes out as "inf"
    cls = method_class(name)
    assert card["paper"].strip() and card["paper"] == cls.paper
    assert [r["name"] for r in card["hyperparameters"]] == list(cls.Hparams.model_fields)
    assert all(r["meaning"] for r in card["hyperparameters"]), "a field without description"
    assert card["constraints"] and set(card["constraints"]) <= set(VIOLATIONS)
    if "privacy_notion" in cls.Hparams.model_fields:  # mozannar: local DP of the attribute only
        only = {"mozannar": ["local-dp-attribute"]}
        assert card["privacy_notions"] == only.get(name, ["full", "sensitive-attribute"])
    code, text, _ = cli("describe", name)
    assert code == 0 and text.startswith(f"{name}: {cls.description}")


def test_sgda_infinite_default_is_valid_json():
    from fairbench.catalog import as_json

    card = as_json(describe("sgda"))
    json.dumps(card, allow_nan=False)
    assert {r["name"]: r["default"] for r in card["hyperparameters"]}["clip_norm"] == "inf"


def fast_fit(name: str, constraint: str, knob: float | None) -> None:
    cls = method_class(name)
    task = get_dataset("synthetic", n_rows=300).load(0)
    method = cls(**TINY[name][0])
    budget = PrivacyBudget(2.0) if cls.private else None
    method.fit(task, budget, FairnessSpec(constraint, knob), seed=0)


def knob_for(name: str) -> float | None:
    """A valid knob value: the loose end of the kit's pair, else 0.1."""
    if method_class(name).knob is None:
        return None
    return TINY[name][1].get("knob_values", (0.1,))[0]


@pytest.mark.parametrize("name", sorted(TINY))
def test_declared_constraints_are_accepted_and_an_undeclared_one_refused(name):
    cls = method_class(name)
    for constraint in cls.constraints:
        fast_fit(name, constraint, knob_for(name))
    undeclared = [c for c in VIOLATIONS if c not in cls.constraints]
    if undeclared:  # erm and dp-sgd accept every constraint
        with pytest.raises(ConfigError, match=f"{undeclared[0]}|bounded_group_loss only"):
            fast_fit(name, undeclared[0], knob_for(name))


def test_field_rows_read_ranges_choices_and_inherited_meanings():
    class Base(BaseModel):
        rate: float = Field(0.5, gt=0, le=1, description="a share")

    class Model(Base):
        rate: float = Field(0.2, gt=0, le=1)  # re-declared for its default only
        count: int = Field(3, ge=1, lt=10)
        mode: Literal["a", "b"] = "a"
        flag: bool = False
        free: float = 1.5
        scale: float | None = Field(None, gt=0, description="None: from the data")

    rows = {r.name: r for r in field_rows(Model)}
    assert (rows["rate"].valid, rows["rate"].default, rows["rate"].meaning) == (
        "(0, 1]",
        0.2,
        "a share",
    )
    assert rows["count"].valid == "[1, 10)" and rows["mode"].valid == "a | b"
    assert rows["flag"].valid == "true | false" and rows["free"].valid == "any"
    assert (rows["scale"].type, rows["scale"].valid) == ("float | null", "(0, inf) or null")


def test_adult_describes_without_its_files(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("FAIRBENCH_DATA", str(tmp_path))  # an empty data folder
    code, out, err = cli("describe", "adult")
    assert code == 0 and err == ""
    assert "status:              files missing" in out
    assert "Run `fairbench data fetch adult`" in out and str(tmp_path) in out
    assert "UCI Machine Learning Repository, Adult" in out and "48,842" in out  # the card
    assert "loaded counts:       need the data files (see fix)" in out
    code, out, _ = cli("describe", "adult", "--json")
    card = json.loads(out)
    assert code == 0 and set(card) == DATASET_KEYS and card["status"] == "missing"
    assert card["summary"] is None and card["card"]["Licence"] == "CC BY 4.0 (UCI)"
    assert [(f["path"], f["present"], f["sha256_ok"]) for f in card["files"]] == [
        ("adult/adult.data", False, None),
        ("adult/adult.test", False, None),
    ]
    assert card["files"][0]["expected_sha256"].startswith("5b00264637db")
    assert [o["name"] for o in card["options"]] == [
        "n_train",
        "sensitive",
        "include_sensitive",
        "missing",
    ]


@needs_adult
def test_adult_with_its_files_shows_the_counts_and_verified_checksums(cli):
    code, out, _ = cli("describe", "adult", "--json")
    card = json.loads(out)
    assert code == 0 and card["status"] == "verified"
    s = card["summary"]
    assert (s["rows"], s["features"], s["sensitive_attribute"]) == (48_842, 106, "sex")
    assert s["groups"] == [{"name": "Male", "rows": 32_650}, {"name": "Female", "rows": 16_192}]
    assert s["splits"] == {"train": 31_136, "validation": 5_495, "test": 12_211}
    assert round(s["positive_rate"], 3) == 0.239
    assert all(f["present"] and f["sha256_ok"] and f["read"] for f in card["files"])


def test_a_corrupted_file_is_flagged(cli, monkeypatch, adult_copy):
    (adult_copy / "adult" / "adult.test").write_text("garbage")
    monkeypatch.setenv("FAIRBENCH_DATA", str(adult_copy))
    card = json.loads(cli("describe", "adult", "--json")[1])
    assert card["status"] == "corrupted" and "checksum mismatch" in card["problem"]
    assert [f["sha256_ok"] for f in card["files"]] == [True, False]


def test_synthetic_is_generated_and_counted():
    card = describe("synthetic")
    assert card.status == "generated" and card.files == [] and card.summary.rows == 4000
    assert sum(card.summary.splits.values()) == 4000


def test_card_fields_reads_the_key_value_table():
    text = "# card\n\n| | |\n|---|---|\n| Source | UCI, `x.csv` |\n| Rows | 1,000 |\n\n## more\n"
    assert card_fields(text) == {"Source": "UCI, x.csv", "Rows": "1,000"}


def test_an_unknown_name_is_one_line_with_a_suggestion(cli):
    code, out, err = cli("describe", "raco")
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: no method or dataset named 'raco'; did you mean raco-dp? (see `fairbench list`)"
    )
    code, _, err = cli("describe", "qqqq")
    assert code == 2 and "known: methods " in err and "datasets " in err and "adult" in err
    code, _, err = cli("describe", "data/patients.csv")
    assert code == 2 and err.strip() == (
        "error: 'data/patients.csv' is a file: your own CSV's card is `fairbench data check "
        "--csv data/patients.csv --label COL --sensitive COL`"
    )


def test_a_name_that_is_both_is_refused(cli, monkeypatch):
    import fairbench.datasets

    both = {**fairbench.datasets.registry(), "erm": fairbench.datasets.registry()["synthetic"]}
    monkeypatch.setattr(fairbench.datasets, "registry", lambda: both)
    code, _, err = cli("describe", "erm")
    assert code == 2 and "names both a method" in err and err.count("\n") == 1


def test_version(cli):
    import platform

    import torch

    import fairbench

    for flag in ("--version", "-V"):
        code, out, _ = cli(flag)
        assert code == 0
        assert out.strip() == (
            f"fairbench {fairbench.__version__} (torch {torch.__version__}, "
            f"python {platform.python_version()})"
        )


def _commands():
    """Every command path of the app: ("run",), ("data", "check"), ..."""
    import typer

    from fairbench.cli import app

    def walk(command, path):
        subs = getattr(command, "commands", {})
        yield path
        for name, sub in subs.items():
            yield from walk(sub, (*path, name))

    return list(walk(typer.main.get_command(app), ()))


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p) or "app")
def test_dash_h_is_help_everywhere_and_flags_show_no_placeholder(cli, monkeypatch, path):
    monkeypatch.setenv("COLUMNS", "160")
    code, short, _ = cli(*path, "-h")
    code_long, long, _ = cli(*path, "--help")
    assert code == code_long == 0 and short == long and "Usage:" in short
    assert "<bool>" not in short


def test_flags_without_a_sensible_negative_have_none(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    _, tune, _ = cli("tune", "-h")
    _, bench, _ = cli("bench", "-h")
    assert "--quiet" in tune and "--no-quiet" not in tune and "--no-charge-tuning" not in tune
    assert "--fits" in bench and "--no-fits" not in bench


def test_completion_is_offered(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    _, out, _ = cli("--help")
    assert "--install-completion" in out and "--show-completion" in out


def test_the_disparate_impact_methods_name_their_target_metric(cli):
    code, out, err = cli("describe", "dpsgd-f")
    assert code == 0 and err == ""
    assert "fairness knob:   none (trains for its target metric, below" in out
    assert "target metric:   test_accuracy_drop_gap: the gap between groups" in out
    code, out, _ = cli("describe", "dpsgd-global-adapt", "--json")
    assert json.loads(out)["target_metric"].startswith("test_accuracy_drop_gap")
