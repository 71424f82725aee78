"""`fairbench tune`: equal draws, validation-only selection, fresh final seeds, reusable
selected configs, and the stated tuning-privacy bound."""

import math

import pytest
import yaml

from fairbench.errors import ConfigError
from fairbench.methods import get_method, method_class
from fairbench.report.aggregate import trials_frame
from fairbench.rundir.store import finished_rows
from fairbench.rundir.tuning import TuneLayout, read_table
from fairbench.runner.config import expand, parse_config
from fairbench.workflows.spaces import named_spaces
from fairbench.workflows.tune import TuneConfig, load_tune_config, sample_configurations

BASE = {
    "name": "t",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 1200}}],
    "epsilons": [3.0],
    "targets": [0.1, 0.3],
    "draws": 3,
    "search_seeds": [100],
    "final_seeds": list(range(10)),
    "methods": [
        {
            "name": "dp-sgd",
            "hparams": {"epochs": 2},
            "space": {"lr": {"log": [0.05, 2.0]}, "batch_size": [64, 128]},
        },
        {
            "name": "raco-dp",
            "hparams": {"epochs": 2},
            "space": {"lr": {"uniform": [0.1, 1.0]}, "knob": [0.05, 0.1]},
        },
    ],
}


def test_every_method_gets_the_same_draws_reproducibly_within_its_space():
    draws = sample_configurations(TuneConfig.model_validate(BASE))
    assert {k: len(v) for k, v in draws.items()} == {"dp-sgd": 3, "raco-dp": 3}
    assert draws == sample_configurations(TuneConfig.model_validate(BASE))
    assert all(0.05 <= d["lr"] <= 2.0 and d["batch_size"] in (64, 128) for d in draws["dp-sgd"])
    assert all(d["knob"] in (0.05, 0.1) for d in draws["raco-dp"])
    alone = sample_configurations(
        TuneConfig.model_validate({**BASE, "methods": BASE["methods"][:1]})
    )
    assert alone["dp-sgd"] == draws["dp-sgd"]  # another method's presence changes nothing


def test_a_space_without_default_or_choose_draws_what_it_drew_before_they_existed():
    draws = sample_configurations(TuneConfig.model_validate({**BASE, "draws": 2}))
    assert draws == {  # the numbers of the sampler before `default:` and `choose:`
        "dp-sgd": [{"batch_size": 128, "lr": 0.135265}, {"batch_size": 128, "lr": 0.058158}],
        "raco-dp": [{"knob": 0.1, "lr": 0.601424}, {"knob": 0.1, "lr": 0.820817}],
    }


CHOICE = {
    "name": "raco-dp",
    "space": {
        "lr": {"log": [1e-4, 1.0]},
        "knob": [0.01, 0.05],
        "choose": [
            {"calibrate": ["steps"], "noise_multiplier": {"uniform": [3.0, 6.0]}},
            {"calibrate": ["noise"], "epochs": [5, 10]},
        ],
        "default": {"calibrate": "steps", "noise_multiplier": 6.0, "lr": 0.1, "knob": 0.02},
    },
}


def test_the_default_is_draw_zero_and_choose_draws_a_key_only_under_its_alternative():
    config = TuneConfig.model_validate({**BASE, "draws": 6, "methods": [CHOICE]})
    draws = sample_configurations(config)["raco-dp"]
    assert draws[0] == CHOICE["space"]["default"]
    assert [d["calibrate"] for d in draws[1:]] == ["noise", "steps", "steps", "noise", "noise"]
    for drawn in draws[1:]:
        assert set(drawn) == {"calibrate", "lr", "knob"} | (
            {"noise_multiplier"} if drawn["calibrate"] == "steps" else {"epochs"}
        )
    assert draws[2] == {
        "calibrate": "steps",
        "knob": 0.01,
        "lr": 0.179094,
        "noise_multiplier": 5.738267,
    }
    # the default takes nothing from the generator: without it the random draws are the same
    bare = {**CHOICE, "space": {k: v for k, v in CHOICE["space"].items() if k != "default"}}
    alone = sample_configurations(
        TuneConfig.model_validate({**config.model_dump(), "methods": [bare]})
    )
    assert alone["raco-dp"][:5] == draws[1:]
    # another search seed moves the random draws, never the default
    other = sample_configurations(config.model_copy(update={"seed": 1}))["raco-dp"]
    assert other[0] == draws[0] and other[1:] != draws[1:]


def test_a_list_of_defaults_are_the_first_draws_and_shift_the_random_ones():
    """The paper's and fairbench's own configurations both always candidates: draws 0 and 1,
    the random draws after them the same sequence as with one default."""
    suite = {"calibrate": "steps", "noise_multiplier": 4.0, "lr": 0.5, "knob": 0.05}
    one = TuneConfig.model_validate({**BASE, "draws": 6, "methods": [CHOICE]})
    two_spaces = {**CHOICE["space"], "default": [CHOICE["space"]["default"], suite]}
    two = TuneConfig.model_validate(
        {**one.model_dump(), "methods": [{**CHOICE, "space": two_spaces}]}
    )
    single, double = sample_configurations(one)["raco-dp"], sample_configurations(two)["raco-dp"]
    assert double[:2] == [CHOICE["space"]["default"], suite]
    assert double[2:] == single[1:5]


def test_more_draws_keep_the_earlier_ones_so_budgets_4_8_16_are_nested():
    config = TuneConfig.model_validate({**BASE, "methods": [CHOICE, BASE["methods"][0]]})
    by_budget = {n: sample_configurations(config, n) for n in (4, 8, 16)}
    for label in ("raco-dp", "dp-sgd"):
        assert by_budget[16][label][:8] == by_budget[8][label]
        assert by_budget[8][label][:4] == by_budget[4][label]
    assert by_budget[4]["raco-dp"][0] == CHOICE["space"]["default"]


def test_a_bundled_space_starts_with_its_papers_configuration():
    """privacy-cost-parkinsons' RaCO-DP search: draw 0 is the in-region configuration of the
    parity run (issue 40), draw 1 fairbench's own default (the method's defaults at gamma
    0.05), and steps calibration is drawn beside noise calibration."""
    config = load_tune_config("privacy-cost-parkinsons")
    draws = sample_configurations(config)["raco-dp"]
    assert len(draws) == 16 and draws[0] == {
        "calibrate": "steps",
        "noise_multiplier": 6.0,
        "laplace_scale": 10.0,
        "max_steps": 5000,
        "batch_size": 256,
        "lr": 0.1,
        "lr_dual": 0.01,
        "temperature": 1.0,
        "clip_norm": 3.0,
        "knob": 0.02,
    }
    suite = get_method("raco-dp").hparams.model_dump()
    assert {k: v for k, v in draws[1].items() if k != "knob"}.items() <= suite.items()
    assert draws[1]["knob"] == method_class("raco-dp").knob.typical
    assert {d["calibrate"] for d in draws[2:]} == {"steps", "noise"}
    steps = [d for d in draws[2:] if d["calibrate"] == "steps"]
    assert all(2.0 <= d["laplace_scale"] <= 10.0 and d["max_steps"] == 5000 for d in steps)
    assert max(d["batch_size"] for d in draws) >= 512


SPACES_WITH_SUITE = sorted(
    name for name, space in named_spaces().items() if isinstance(space.get("default"), list)
)


@pytest.mark.parametrize("name", SPACES_WITH_SUITE)
def test_a_spaces_second_default_is_fairbenchs_own_hand_set_configuration(name):
    """Where a space lists two defaults, the second is the method's own defaults (the untuned
    figures' point) at its knob's typical value, and differs from the paper's first."""
    method = name.removesuffix("-sensitive-attribute")
    paper, suite = named_spaces()[name]["default"]
    own = get_method(method).hparams.model_dump()
    assert {k: v for k, v in suite.items() if k != "knob"}.items() <= own.items()
    knob = method_class(method).knob
    assert suite.get("knob") == (None if knob is None else knob.typical)
    assert suite != paper


# issue 39's methods: (config, label) -> the paper's (the authors' code's) configuration
ISSUE_39 = {
    ("literature-adult-dp", "dpsgd-f"): {  # fair-dp adult_script.sh, --method=dpsgd-f
        "calibrate": "noise",
        "epochs": 20,
        "lr": 0.01,
        "base_clip": 0.5,
        "count_noise_multiplier": 10.0,
        "batch_size": 256,
    },
    ("literature", "dpsgd-global-adapt"): {  # --method=dpsgd-global-adapt
        "calibrate": "noise",
        "epochs": 20,
        "lr": 0.2,
        "clip_norm": 0.5,
        "initial_bound": 50.0,
        "count_noise_multiplier": 10.0,
        "lr_bound": 0.1,
        "threshold": 1.0,
        "batch_size": 256,
    },
    ("privacy-cost-german", "decoupled-post"): {  # dp_fair_binary Algorithm2.py
        "calibrate": "noise",
        "epochs": 50,
        "lr": 0.01,
        "clip_norm": 1.5,
        "batch_size": 1024,
        "rate_share": 0.1,
        "knob": 0.0,
    },
    ("literature", "mozannar"): {  # fairlearn_private_data's EG settings
        "C": 1.0,
        "eps": 0.001,
        "max_iter": 50,
        "eta0": 0.5,
        "knob": 0.001,
    },
}


@pytest.mark.parametrize(("config", "label"), sorted(ISSUE_39), ids=lambda v: v)
def test_issue_39s_spaces_start_with_their_papers_configuration(config, label):
    """Draw 0 of each new method's search is its authors' run, whatever batch space the
    dataset merges in; the other draws stay in the space."""
    tune = load_tune_config(config)
    draws = sample_configurations(tune)[label]
    assert len(draws) == 16 and draws[0] == ISSUE_39[(config, label)]
    (entry,) = [m for m in tune.methods if (m.label or m.name) == label]
    for drawn in draws[len(entry.defaults()) :]:
        assert set(drawn) <= set(entry.space) - {"default"}
    assert entry.unconstrained == (label in ("dpsgd-f", "dpsgd-global-adapt"))


def test_decoupled_post_is_in_every_demographic_parity_privacy_cost_config():
    from fairbench.runner.config_files import bundled

    configs = [load_tune_config(p.stem) for p in bundled("tune")]
    costs = [c for c in configs if c.name.startswith("privacy-cost-")]
    assert len(costs) == 9
    for config in costs:
        names = {m.name for m in config.methods}
        assert ("decoupled-post" in names) == (config.constraint == "demographic_parity")
        assert not names & {"mozannar", "dpsgd-f", "dpsgd-global-adapt"}  # no notion column


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"final_seeds": [100, *range(1, 10)]}, "fresh"),
        ({"final_seeds": [1, 2]}, "final_seeds"),
        ({"methods": [{"name": "dp-sgd", "space": {"knob": [0.1]}}]}, "no fairness knob"),
        (
            {"methods": [{"name": "cgoo", "space": {"knob": {"uniform": [0, 0.1]}}}]},
            r"space.knob: method cgoo: knob alpha = 0 is outside its valid range \(0, inf\)",
        ),
        ({"methods": [{"name": "sgda", "space": {"knob": [0.05, "x"]}}]}, "holds numbers"),
        ({"methods": [{"name": "dp-sgd", "space": {"lr": {"log": [0, 1]}}}]}, "space.lr"),
        ({"budget": 3}, "unknown key 'budget'; valid keys there: .*draws"),
        (
            {"methods": [{**CHOICE, "space": {**CHOICE["space"], "epochs": [5]}}]},
            r"space.choose.1: epochs is also in the space outside choose",
        ),
        (
            {"methods": [{**CHOICE, "space": {**CHOICE["space"], "default": {"lr": 0.1}}}]},
            r"space.default needs a knob value",
        ),
        (
            {
                "methods": [
                    {
                        **CHOICE,
                        "space": {**CHOICE["space"], "default": [{"lr": 0.1, "knob": 0.05}, 3]},
                    }
                ]
            },
            r"space.default: give a mapping of hyper-parameter -> one value, or a list",
        ),
        (
            {
                "methods": [
                    {
                        **CHOICE,
                        "space": {
                            **CHOICE["space"],
                            "default": [{"knob": 0.05}, {"knob": 0.05, "temperature": 0.0}],
                        },
                    }
                ]
            },
            r"space.default.1: method raco-dp: hyperparameter 'temperature'",
        ),
        (
            {
                "methods": [
                    {
                        **CHOICE,
                        "space": {"choose": [{"calibrate": ["noise"], "noise_multiplier": [3.0]}]},
                    }
                ]
            },
            r"space.choose.0 \(lower ends\): method raco-dp: .*noise_multiplier is calibrated",
        ),
        (
            {"methods": [{"name": "dp-sgd", "space": {"lr_dual": [0.1]}}]},
            r"space \(lower ends\): method dp-sgd: hyperparameter 'lr_dual'",
        ),
    ],
)
def test_bad_tune_configs_are_one_line_errors(tmp_path, change, message):
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump({**BASE, **change}))
    with pytest.raises(ConfigError, match=message) as info:
        load_tune_config(str(path))
    assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    from fairbench.workflows.tune import run_tune

    out = tmp_path_factory.mktemp("tune")
    config = TuneConfig.model_validate(BASE)
    table, failures = run_tune(config, out, workers=1, quiet=True, charge=True, warn=lambda _: None)
    assert failures == []
    return out, table


def test_selection_uses_validation_only_and_follows_the_one_rule(tuned):
    out, table = tuned
    search = trials_frame(finished_rows(out / "search", "test"))
    assert len(search) == 2 * 3 * 1  # methods x draws x search seeds
    for row in table.itertuples(index=False):
        mine = search[search["label"].str.startswith(row.method + "#")]
        feasible = mine[mine["val_violation"] <= row.target]
        if feasible.empty:
            assert isinstance(row.selected, float) and math.isnan(row.selected)
            continue
        assert row.selected == feasible.sort_values("val_error").iloc[0]["label"]
        assert row.val_violation <= row.target
    assert table["selected"].notna().any()


def test_selected_configs_run_on_fresh_seeds_and_are_reusable_by_run(tuned):
    out, table = tuned
    (stem,) = [p.stem for p in (out / "selected").glob("*.yaml")]
    saved = parse_config(yaml.safe_load((out / "selected" / f"{stem}.yaml").read_text()))
    final = finished_rows(out / "final" / stem, "test")
    assert {r["seed"] for r in final} == set(range(10))
    # `fairbench run` on the saved config names exactly the trials the final run holds
    assert {s.trial_id for s in expand(saved, warn=lambda _: None)} == {
        r["trial_id"] for r in final
    }
    rows = read_table(TuneLayout(out))
    assert set(rows["selection"]) == {"free"}
    # a row per selection and final seed, each seed's own fresh-seed test numbers
    assert len(rows) == len(table) * 10
    chosen = rows[rows["selected"].notna()]
    by_seed = {(r["label"], r["seed"]): r["test_error"] for r in final}
    assert [by_seed[(r.selected.replace("#", "-"), r.repeat)] for r in chosen.itertuples()] == (
        list(chosen["test_error"])
    )
    # the stated bound: the composition of 3 search fits and 1 final fit at eps 3 each
    assert chosen["tuning_epsilon"].between(3.0, 4 * 3.0, inclusive="neither").all()
    assert "tuning ε" in (out / "tuning.md").read_text()


def test_a_method_joins_a_finished_tune_without_redoing_the_others(tmp_path):
    """Adding a method entry to a tune config and running it again into the same output runs
    only the new method's trials; any other change is still refused."""
    from fairbench.workflows.tune import run_tune

    small = {**BASE, "draws": 1, "methods": BASE["methods"][:1]}
    out = tmp_path / "tune"
    table, _ = run_tune(TuneConfig.model_validate(small), out, 1, True, False, lambda _: None)
    # free selection is labelled in every output
    assert set(table["tuning"]) == {"tuning not charged"} and set(table["selection"]) == {"free"}
    tuning_md = (out / "tuning.md").read_text()
    assert tuning_md.count("tuning not charged") == 1 + len(table)  # the intro, every section
    first = finished_at(out / "search")
    grown = {
        **small,
        "methods": [
            *small["methods"],
            {"name": "erm", "unconstrained": True, "hparams": {"epochs": 1}},
        ],
    }
    said = []
    run_tune(TuneConfig.model_validate(grown), out, 1, True, False, warn=said.append)
    after = finished_at(out / "search")
    assert {k: after[k] for k in first} == first  # kept, not re-run
    assert {r["method"] for r in finished_rows(out / "search", "read")} == {"dp-sgd", "erm"}
    assert any("1 method entries join the run" in line for line in said)
    changed = {**grown, "epsilons": [2.0]}
    with pytest.raises(ConfigError, match="holds a run of a different config"):
        run_tune(TuneConfig.model_validate(changed), out, 1, True, False, warn=lambda _: None)


def finished_at(run_dir) -> dict[str, float]:
    """trial id -> when the store recorded it (a re-run trial would get a new time)."""
    import sqlite3

    with sqlite3.connect(run_dir / "results.sqlite") as db:
        return dict(db.execute("SELECT trial_id, finished FROM trials"))


def test_a_config_saved_before_a_key_existed_still_grows():
    """A key added to the config later (e.g. `secure_noise`) holding its default is no change."""
    from fairbench.runner.execute import _grown

    old = {"name": "x", "epsilons": [1.0], "methods": [{"name": "erm"}]}
    new = {**old, "secure_noise": False, "methods": [{"name": "erm"}, {"name": "dp-sgd"}]}
    assert _grown(old, new)
    assert not _grown(old, {**new, "secure_noise": True})
    assert not _grown(old, {**new, "epsilons": [2.0]})
    assert not _grown(old, {**new, "methods": [{"name": "dp-sgd"}]})  # erm's entry dropped
