"""`fairbench advise` on a small CSV: the release holds only what its analysis covers (the
model, its configuration, its noisy score, epsilon, delta and the accounting; never K, a
seed or another candidate), its randomness is secret unless `--seed` says it is a
demonstration, every exact statistic is under one "not private" heading, the privacy spent
is recomputed independently, and bad requests are one line with nothing written."""

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

from fairbench.privacy import PrivacyLedger, rdp
from fairbench.rundir.tuning import TuneLayout, read_analysis
from fairbench.workflows import advise as flow

RELEASE_KEYS = {
    "release",
    "method",
    "hparams",
    "knob",
    "knob_name",
    "selected",
    "noisy_validation_error",
    "noisy_validation_violation",
    "reads_sensitive_attribute_at_test",
    "constraint",
    "tau",
    "data",
    "epsilon",
    "delta",
    "accounting",
    "noise",
    "preprocessing",
    "features",
}


def people(n: int = 1500, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    group = rng.choice(["a", "b"], n, p=[0.6, 0.4])
    x = rng.normal(size=(n, 3)).round(3)
    score = x[:, 0] + 0.5 * x[:, 1] + 0.8 * (group == "a") + rng.normal(size=n)
    return pd.DataFrame(
        {
            "x1": x[:, 0],
            "x2": x[:, 1],
            "x3": x[:, 2],
            "color": rng.choice(["red", "green"], n),
            "group": group,
            "outcome": np.where(score > 0.6, "yes", "no"),
        }
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("advise") / "people.csv"
    people().to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def dp_sgd_spaces(tmp_path_factory):
    """One DP-SGD plan (only the step size is searched): accountable by dp-accounting alone."""
    path = tmp_path_factory.mktemp("spaces") / "spaces.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "methods": [
                    {
                        "name": "dp-sgd",
                        "unconstrained": True,
                        "hparams": {"epochs": 2, "batch_size": 64},
                        "space": {"lr": {"log": [0.1, 2.0]}},
                    }
                ]
            }
        )
    )
    return path


ARGS = [
    "--label",
    "outcome",
    "--sensitive",
    "group",
    "--positive",
    "yes",
    "--epsilon",
    "2",
    "--tau",
    "0.1",
    "--candidates",
    "1.5",
    "--repeats",
    "2",
    "--support",
    "3",
    "--method",
    "dp-sgd",
    "--method",
    "cgoo",
    "--workers",
    "1",
    "--quiet",
]


QUICK = [
    {
        "name": "dp-sgd",
        "unconstrained": True,
        "hparams": {"epochs": 2, "batch_size": 64},
        "space": {"lr": {"log": [0.1, 2.0]}},
    },
    {
        "name": "cgoo",
        "hparams": {"iterations": 5, "epochs": 0.25, "batch_size": 64},
        "space": {"lr": {"log": [0.1, 2.0]}, "knob": [0.05, 0.1]},
    },
]


@pytest.fixture(scope="module")
def advised(table, tmp_path_factory):
    """One advise run as a user runs it: no seed, so its noise is secret."""
    import contextlib
    import io
    import sys

    from fairbench.cli import main

    out = tmp_path_factory.mktemp("advised") / "out"
    spaces = out.parent / "spaces.yaml"  # the two methods, kept small: the release is the point
    spaces.write_text(yaml.safe_dump({"methods": QUICK}))
    args = [a for a in ARGS if a not in ("dp-sgd", "cgoo", "--method")]
    argv, sys.argv = (
        sys.argv,
        [
            "fairbench",
            "advise",
            str(table),
            *args,
            "--spaces",
            str(spaces),
            "--out",
            str(out),
            "--json",
        ],
    )
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            main()
    except SystemExit as exc:
        assert exc.code in (None, 0)
    finally:
        sys.argv = argv
    return out, json.loads(buffer.getvalue())


@pytest.mark.slow  # the `advised` fixture: one whole advise run
def test_the_release_holds_only_what_its_analysis_covers(advised):
    """OUT/release is model.pt and release.json; release.json and the JSON's release carry
    the chosen configuration, its noisy score, epsilon, delta and the accounting, and no
    candidate count, seed, index, trial id or other candidate."""
    out, result = advised
    release = result["release"]
    assert set(release) == RELEASE_KEYS | {"folder"}
    stored = json.loads((out / "release" / "release.json").read_text())
    assert set(stored) == RELEASE_KEYS and stored == {
        k: v for k, v in release.items() if k != "folder"
    }
    assert 1.9 < release["epsilon"] <= 2.0 and release["delta"] == 1e-5
    assert release["release"].startswith("(epsilon, delta)-DP release")
    assert release["noise"].startswith("float64, its randomness from the operating system")
    forbidden = {
        "seed",
        "split_seed",
        "candidates",
        "trial_id",
        "index",
        "sha256",
        "val_outcome_cells",
        "test_error",
        "test_violation",
    }
    assert not _keys(stored) & forbidden
    # a count appears only as a ledger's number of steps, never as the number of candidates
    assert "count" not in stored and "count" not in stored["accounting"]
    assert "#" not in json.dumps(stored)  # no candidate label (method#i)
    assert "seed" not in json.dumps(stored).replace("seeded", "")
    assert release["accounting"]["count_law"] == {"law": "poisson", "mean": 3.0}
    names = {p.name for p in (out / "release").iterdir()}
    if release["method"] is None:
        assert names == {"release.json"} and result["recommendation"] is None
    else:
        assert names == {"model.pt", "release.json"}
        assert release["method"] in {"dp-sgd", "cgoo"} == set(result["methods"])
        assert torch.load(out / "release" / "model.pt", weights_only=False)["components"]
        assert math.isfinite(release["noisy_validation_error"])
    # the candidates trained in a temporary folder that is gone
    assert sorted(p.name for p in out.iterdir()) == [
        "comparison",
        "release",
        "report.html",
        "report.md",
    ]


def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | set().union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


@pytest.mark.slow  # the `advised` fixture: one whole advise run
def test_every_exact_statistic_is_under_the_not_private_heading(advised):
    out, result = advised
    exact = result["not_private"]
    assert exact["note"].startswith("not private: computed exactly from your data")
    assert sum(exact["split"].values()) == exact["rows"] == 1500
    assert sum(exact["training_rows_per_group"].values()) == exact["split"]["train"]
    assert {row["method"] for row in exact["comparison"]} == {"dp-sgd", "cgoo"}
    for row in exact["comparison"]:  # a repeat that released nothing is a miss
        released, repeats = map(int, row["released"].split("/"))
        assert repeats == 2 and row["held"] <= released
        assert row["satisfied"] == row["held"] / repeats
    assert 0 < exact["majority_error"] < 0.6
    report = (out / "report.md").read_text()
    assert "## Not private" in report and "## Release" in report
    assert "seed" not in report  # the request's seed is written only when the user gave one
    spent = result["epsilon_spent_on_data"]
    assert spent["total"] > spent["release"] and spent["plan_counts"] == pytest.approx(0.2)


def _request(table, spaces, **change) -> flow.Request:
    request = flow.Request(
        {
            "csv": str(table),
            "label": "outcome",
            "sensitive": "group",
            "positive": "yes",
            "missing": "drop",
        },
        2.0,
        "demographic_parity",
        0.5,
        candidates=1.0,
        repeats=2,
        spaces=str(spaces),
        support=2,
    )
    return replace(request, **change)


@pytest.mark.slow  # the `advised` fixture: one whole advise run
def test_unseeded_releases_draw_fresh_noise_and_seeded_ones_say_they_are_not_releases(
    table, dp_sgd_spaces, tmp_path
):
    """Two runs without a seed draw other candidates and noise (the OS's entropy); with
    `--seed` a run repeats exactly and every output says it is not a DP release."""
    releases = []
    for name, seed in (("a", None), ("b", None), ("c", 5), ("d", 5)):
        plan_ = flow.plan(_request(table, dp_sgd_spaces, seed=seed))
        plan_ = replace(plan_, candidates=plan_.candidates or _one(plan_))
        releases.append(flow.release(plan_, tmp_path / name, 1).public)
    unseeded, seeded = releases[:2], releases[2:]
    assert unseeded[0]["noisy_validation_error"] != unseeded[1]["noisy_validation_error"]
    assert seeded[0] == seeded[1]
    assert all(r["release"] == flow.NOT_A_RELEASE for r in seeded)
    assert all(r["noise"] == "seeded float64: regenerable from the seed" for r in seeded)
    from fairbench.workflows.advise_report import plan_text

    assert "not a DP release" in plan_text(flow.plan(_request(table, dp_sgd_spaces, seed=5)))


def _one(plan_: flow.Plan):
    """A release that happened to draw no candidate, given one (the test needs a score)."""
    spec = plan_.support[0]
    return [
        replace(
            spec,
            epsilon=plan_.budget.training_epsilon,
            seed=11,
            dataset_options={**spec.dataset_options},
        )
    ]


def test_no_candidate_releases_nothing_inside_the_accounted_law(table, dp_sgd_spaces, tmp_path):
    """K = 0 is one of the law's outcomes: the release says nothing was selected and still
    states its epsilon, like a release whose candidates all missed tau (it does not say
    which), instead of asking for a rerun."""
    plan_ = flow.plan(_request(table, dp_sgd_spaces, seed=1))
    record = flow.release(replace(plan_, candidates=[]), tmp_path / "out", 1)
    assert not record.selected and record.public["method"] is None
    assert record.public["selected"].startswith("nothing: no candidate's noisy validation")
    assert record.public["epsilon"] == plan_.budget.total_epsilon
    assert [p.name for p in (tmp_path / "out" / "release").iterdir()] == ["release.json"]


def test_the_privacy_spent_is_recomputed_with_dp_accounting(table, dp_sgd_spaces, tmp_path):
    """One DP-SGD plan per selection: dp-accounting's RDP accountant composes the release's
    RepeatAndSelect event, the plan's Laplace counts and one RepeatAndSelect event per
    comparison repeat (each repeat's candidates draw their own noise, so they compose), and
    gets the printed total."""
    plan_ = flow.plan(_request(table, dp_sgd_spaces, seed=3))
    _, table_ = flow.run_advice(plan_, tmp_path / "out", 1, True)
    spent = flow.looking_cost(plan_, tmp_path / "out")
    (record,) = read_analysis(TuneLayout(tmp_path / "out" / "comparison"))
    (training,) = record["candidate_plans"]

    def candidate(plan: dict, scale: float) -> dp_event.DpEvent:
        return dp_event.ComposedDpEvent(
            [PrivacyLedger.from_json(plan).event, dp_event.LaplaceDpEvent(scale)]
        )

    (release_plan,) = plan_.budget.plans
    events = [
        dp_event.RepeatAndSelectDpEvent(
            candidate(release_plan, plan_.budget.score_scale), 1.0, math.inf
        ),
        dp_event.LaplaceDpEvent(plan_.plan_counts_scale),
        *[
            dp_event.RepeatAndSelectDpEvent(
                candidate(training, record["score_laplace_scale"]), 1.0, math.inf
            )
        ]
        * len(record["repeats"]),
    ]
    again = RdpAccountant(orders=list(rdp.ORDERS)).compose(dp_event.ComposedDpEvent(events))
    assert spent["total"] == pytest.approx(again.get_epsilon(1e-5), rel=1e-9)
    assert len(record["repeats"]) == 2 and len(table_) == 1


@pytest.mark.parametrize(
    ("extra", "spaces", "message"),
    [
        (["--epsilon", "0"], None, "--epsilon must be a finite number > 0"),
        (["--delta", "1"], None, "--delta must lie strictly between 0 and 1"),
        (["--tau", "1.5"], None, "--tau is an allowed violation in (0, 1)"),
        (["--method", "erm"], None, "--method erm: advise chooses among"),
        (["--constraint", "bounded_group_loss"], None, "advise scores the rate constraints"),
        (["--sensitive", "grup"], None, "did you mean 'group'"),
        # private selection refuses what is not whole-record DP, before anything runs
        (
            [],
            [{"name": "jagielski-oracle", "hparams": {"privacy_notion": "sensitive-attribute"}}],
            "candidate jagielski-oracle#0: method jagielski-oracle with privacy_notion: "
            "sensitive-attribute is not (epsilon, delta)-DP for the whole record",
        ),
        (
            [],
            [{"name": "dp-fermi", "hparams": {"marginals": "public"}}],
            "method dp-fermi with marginals: public is not (epsilon, delta)-DP for the whole "
            "record (it reads the marginals exactly)",
        ),
        (
            [],
            [
                {
                    "name": "pf-ld",
                    "hparams": {"calibrate": "noise"},
                    "space": {"privacy_notion": ["sensitive-attribute"]},
                }
            ],
            "set privacy_notion: full or leave the method out",
        ),
        (
            ["--allow-sensitive-at-test"],
            [{"name": "jagielski-post", "hparams": {"privacy_notion": "sensitive-attribute"}}],
            "method jagielski-post with privacy_notion: sensitive-attribute",
        ),
        ([], [{"name": "erm"}], "method erm is not private"),
    ],
    ids=[
        "epsilon",
        "delta",
        "tau",
        "method",
        "constraint",
        "column",
        "oracle-notion",
        "fermi-marginals",
        "pf-ld-searched-notion",
        "post-notion",
        "non-private",
    ],
)
def test_bad_requests_are_one_line_and_write_nothing(cli, table, tmp_path, extra, spaces, message):
    out = tmp_path / "out"
    args = [a for a in ARGS if a not in ("dp-sgd", "cgoo", "--method")] if spaces else ARGS
    if spaces is not None:
        path = tmp_path / "spaces.yaml"
        path.write_text(yaml.safe_dump({"methods": spaces}))
        args = [*args, "--spaces", str(path)]
    code, _, stderr = cli("advise", str(table), *args, *extra, "--out", str(out))
    lines = [line for line in stderr.strip().splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and message in lines[0], stderr
    assert not out.exists()


def test_the_plan_warns_when_the_private_score_cannot_resolve_tau():
    """The noise on a group's rate is 2b / rows (b the score's Laplace scale; rows of the
    group, or of its rarest conditioning label for equalized odds, from the plan's noisy
    counts): over tau / 2 on the best-measured group is a warning that few candidates will
    pass; otherwise groups whose noise exceeds tau are named."""
    from fairbench.workflows.advise import score_noise, score_noise_notes

    counts = np.array([[300.2, 99.9], [30.4, 9.6]])  # noisy rows by (group, label)
    groups = ("big", "small")
    assert score_noise(counts, groups, "demographic_parity", 2.0) == {
        "big": (400, 0.01),
        "small": (40, 0.1),
    }
    assert score_noise(counts, groups, "equalized_odds", 2.0) == {
        "big": (100, 0.04),
        "small": (10, 0.4),
    }
    assert score_noise_notes(score_noise(counts, groups, "demographic_parity", 2.0), 0.2) == []
    (named,) = score_noise_notes(score_noise(counts, groups, "demographic_parity", 2.0), 0.05)
    assert "'small'" in named and "'big'" not in named and "--other" in named
    (swamped,) = score_noise_notes(score_noise(counts, groups, "demographic_parity", 8.0), 0.05)
    assert swamped.startswith("the validation score's noise swamps tau = 0.05")
    assert "'big', about 400 validation rows" in swamped and "'small' (about 40 rows)" in swamped


def test_the_plans_counts_are_a_noisy_session_release(table):
    """The warnings read the validation part's (group, label) counts through a Laplace
    release of scale 1 / (epsilon / 10), drawn by a privacy session."""
    from fairbench.datasets import get_dataset
    from fairbench.privacy.noise import observe_releases

    task = get_dataset(
        "csv", path=str(table), label="outcome", sensitive="group", positive="yes"
    ).load(0)
    seen = []
    with observe_releases(lambda kind, exact, noisy: seen.append((kind, exact)) or noisy):
        noisy = flow.plan_counts(task, 5.0, 1, False)
    ((kind, exact),) = seen
    exact = exact[0].numpy()
    assert kind == "laplace" and exact.sum() == len(task.val) and noisy.shape == exact.shape
    assert not np.array_equal(noisy, exact) and (noisy >= 0).all()


def test_the_disparate_impact_methods_join_and_decoupled_post_and_mozannar_do_not():
    """configs/advise/methods.yaml: DPSGD-F and DPSGD-Global-Adapt are DP-SGD's kind of
    accuracy reference (any rate constraint, selected on error alone); decoupled-post and
    mozannar are not among the methods (the file's header says why)."""
    for constraint in ("demographic_parity", "equalized_odds"):
        chosen, skipped = flow.applicable(constraint, True, 1000)
        names = {m.name: m for m in chosen}
        assert {"dp-sgd", "dpsgd-f", "dpsgd-global-adapt"} <= set(names)
        assert names["dpsgd-f"].unconstrained and names["dpsgd-global-adapt"].unconstrained
        assert not {"decoupled-post", "mozannar"} & (set(names) | set(skipped))
    assert names["dpsgd-f"].space["batch_size"] == [10, 20, 40, 80, 160, 320]
