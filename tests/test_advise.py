"""`fairbench advise` on a small CSV: the release is one private selection at the user's
epsilon (its model, config and ledger saved), the comparison's cost is composed and printed,
and bad requests are one line with nothing written."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from fairbench.workflows.advise import Request, applicable, joint_candidates, plan


def people(n: int = 1500, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    group = rng.choice(["a", "b"], n, p=[0.6, 0.4])
    x = rng.normal(size=(n, 3)).round(3)
    score = x[:, 0] + 0.5 * x[:, 1] + 0.8 * (group == "a") + rng.normal(size=n)
    return pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2],
                         "color": rng.choice(["red", "green"], n), "group": group,
                         "outcome": np.where(score > 0.6, "yes", "no")})  # fmt: skip


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("advise") / "people.csv"
    people().to_csv(path, index=False)
    return path


ARGS = ["--label", "outcome", "--sensitive", "group", "--positive", "yes", "--epsilon", "2",
        "--tau", "0.1", "--budget", "1.5", "--repeats", "2", "--method", "dp-sgd",
        "--method", "cgoo", "--workers", "1", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def advised(table, tmp_path_factory):
    from fairbench.cli import main

    out = tmp_path_factory.mktemp("advised") / "out"
    import sys

    argv, sys.argv = sys.argv, ["fairbench", "advise", str(table), *ARGS, "--out", str(out),
                                "--json"]  # fmt: skip
    import contextlib
    import io

    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            main()
    except SystemExit as exc:
        assert exc.code in (None, 0)
    finally:
        sys.argv = argv
    return out, json.loads(buffer.getvalue())


def test_the_release_is_one_selection_at_the_users_epsilon_and_its_model_is_saved(advised):
    out, result = advised
    release = result["release"]
    assert release["total_epsilon"] <= 2.0 and release["total_epsilon"] > 1.9
    assert release["count"] == len(release["candidates"]) >= 1
    assert {c["label"].split("#")[0] for c in release["candidates"]} <= {"dp-sgd", "cgoo"}
    assert result["methods"] == ["dp-sgd", "cgoo"]
    # seeded: K = 2, both dp-sgd, both within tau on their noisy scores
    assert result["recommendation"] == "dp-sgd" == release["released"]["method"]
    state = torch.load(out / "model" / "parameters.pt", weights_only=False)
    assert state["components"]
    ledger = json.loads((out / "model" / "ledger.json").read_text())
    assert ledger["total_epsilon"] == release["total_epsilon"]
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")
    # the majority-class reference, on the release's split (seed 0), recomputed
    from fairbench.datasets import get_dataset

    task = get_dataset("csv", path=result["data"]["csv"], label="outcome", sensitive="group",
                       positive="yes", missing="drop").load(0)  # fmt: skip
    majority = int(task.train.y.mean() >= 0.5)
    assert result["majority_error"] == pytest.approx(np.mean(task.test.y != majority))
    assert release["released"]["test_error"] < result["majority_error"]


def test_the_comparison_costs_more_than_the_release_and_says_so(advised):
    out, result = advised
    assert {row["method"] for row in result["comparison"]} == {"dp-sgd", "cgoo"}
    for row in result["comparison"]:  # a repeat that released nothing is a miss
        released, repeats = map(int, row["released"].split("/"))
        assert repeats == 2 and row["held"] <= released
        assert row["satisfied"] == row["held"] / repeats
    assert result["epsilon_spent_on_data"] > result["release"]["total_epsilon"]
    assert "Privacy spent on this data" in (out / "report.md").read_text()


def test_candidates_are_drawn_without_the_data():
    """The release's candidate list depends on the seed and the methods only."""
    request = Request({"name": "synthetic", "options": {"n_rows": 600}}, 2.0,
                      "demographic_parity", 0.1, only=("dp-sgd", "cgoo"))  # fmt: skip
    methods, skipped = applicable("demographic_parity", False, 1000, ("dp-sgd", "cgoo"))
    assert [m.name for m in methods] == ["dp-sgd", "cgoo"] and "raco-dp" in skipped
    assert methods[0].space["batch_size"] == [10, 20, 40, 80]
    from fairbench.workflows.advise import _tune_config

    config = _tune_config(request, methods, "x", 6.0, [0, 1])
    assert joint_candidates(config) == joint_candidates(config)
    other = _tune_config(request, methods, "x", 6.0, [5, 6])
    assert joint_candidates(other) == joint_candidates(config)  # repeats do not enter
    assert plan is not None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--epsilon", "0"], "--epsilon must be a finite number > 0"),
        (["--tau", "1.5"], "--tau is an allowed violation in (0, 1)"),
        (["--method", "erm"], "--method erm: advise chooses among"),
        (["--constraint", "bounded_group_loss"], "advise scores the rate constraints"),
        (["--sensitive", "grup"], "did you mean 'group'"),
    ],
)
def test_bad_requests_are_one_line_and_write_nothing(cli, table, tmp_path, extra, message):
    out = tmp_path / "out"
    args = [*ARGS, *extra]
    code, _, stderr = cli("advise", str(table), *args, "--out", str(out))
    lines = [line for line in stderr.strip().splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and message in lines[0], stderr
    assert not out.exists()


def test_the_plan_warns_when_the_private_score_cannot_resolve_tau():
    """The noise on a group's rate is 2b / rows (b the score's Laplace scale; rows of the
    group, or of its rarest conditioning label for equalized odds): over tau / 2 on the
    best-measured group is a warning that few candidates will pass; otherwise groups whose
    noise exceeds tau are named."""
    from types import SimpleNamespace

    from fairbench.workflows.advise import score_noise, score_noise_notes

    s = np.array([0] * 400 + [1] * 40)
    y = np.array(([0] * 300 + [1] * 100) + ([0] * 30 + [1] * 10))
    task = SimpleNamespace(group_names=("big", "small"), val=SimpleNamespace(s=s, y=y))
    assert score_noise(task, "demographic_parity", 2.0) == {"big": (400, 0.01), "small": (40, 0.1)}
    assert score_noise(task, "equalized_odds", 2.0) == {"big": (100, 0.04), "small": (10, 0.4)}
    assert score_noise_notes(score_noise(task, "demographic_parity", 2.0), 0.2) == []
    (named,) = score_noise_notes(score_noise(task, "demographic_parity", 2.0), 0.05)
    assert "'small'" in named and "'big'" not in named and "--other" in named
    (swamped,) = score_noise_notes(score_noise(task, "demographic_parity", 8.0), 0.05)
    assert swamped.startswith("the validation score's noise swamps tau = 0.05")
    assert "'big', 400 validation rows" in swamped and "'small' (40 rows)" in swamped
