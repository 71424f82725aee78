"""Privacy notions are never mixed: rows of whole-record DP and of local DP of the attribute
(mozannar's `local-dp-attribute`) at the same dataset, constraint and epsilon land in separate
Pareto panels, tables and figures; fig-literature gives the local notion its own panels."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from fairbench.errors import ConfigError
from fairbench.report import plots
from fairbench.report.aggregate import pareto_points, trials_frame
from fairbench.report.budget_sensitivity import notions
from fairbench.report.literature import NOTION_TITLES, NOTIONS, _base_notion
from fairbench.report.privacy_cost import check_one_notion
from fairbench.report.tables import pareto_document
from tests.report.test_reports import row

LOCAL = "local-dp-attribute"


def mixed_trials():
    """raco-dp (full) better than mozannar (local) at every seed, and one non-private ref."""
    rows = [row("raco-dp", seed=s, error=0.1, gap=0.01) for s in range(3)]
    rows += [
        {**row("mozannar", seed=s, error=0.3, gap=0.05), "privacy_notion": LOCAL} for s in range(3)
    ]
    rows += [row("erm", seed=s, epsilon=None, knob=None) for s in range(3)]
    return trials_frame(rows)


def test_pareto_panels_and_tables_keep_the_local_notion_apart():
    points = pareto_points(mixed_trials())
    private = points[points["epsilon"] == 1.0]
    assert sorted(private["privacy_notion"]) == ["full", LOCAL]
    # dominated by raco-dp were they one panel; alone in its own, mozannar is on its frontier
    assert private.set_index("method")["on_frontier"].to_dict() == {
        "raco-dp": True,
        "mozannar": True,
    }
    text = pareto_document(points, "t", []).markdown()
    assert f"privacy: {LOCAL}" in text and "privacy: full" in text


def test_figures_draw_one_notion_each(monkeypatch):
    drawn = {}

    def keep(fig, stem: Path) -> Path:
        drawn[stem.name] = sorted(
            {label for ax in fig.axes for label in ax.get_legend_handles_labels()[1]}
        )
        plt.close(fig)
        return stem

    monkeypatch.setattr(plots, "_save", keep)
    points = pareto_points(mixed_trials())
    plots.trade_off_figures(points, Path("unused"))
    assert set(drawn) == {"d_demographic_parity_full", f"d_demographic_parity_{LOCAL}"}
    assert any("raco-dp" in label for label in drawn["d_demographic_parity_full"])
    assert any("mozannar" in label for label in drawn[f"d_demographic_parity_{LOCAL}"])
    assert not any("mozannar" in label for label in drawn["d_demographic_parity_full"])
    assert not any("raco-dp" in label for label in drawn[f"d_demographic_parity_{LOCAL}"])
    drawn.clear()
    plots.satisfaction_figures(points, Path("unused"))  # gamma knobs: one figure per notion
    assert set(drawn) == {
        "d_demographic_parity_satisfaction",
        f"d_demographic_parity_satisfaction_{LOCAL}",
    }


def test_literature_gives_the_local_notion_its_own_panels():
    assert LOCAL in NOTIONS and NOTION_TITLES[LOCAL] == "local DP of the sensitive attribute"
    assert _base_notion(LOCAL) == LOCAL and _base_notion("full+public-marginals") == "full"


def test_a_tune_labels_notion_is_its_methods_where_the_config_sets_none():
    """fig-literature's unreached notes and the budget-sensitivity winners (per notion) read
    a label's notion from the tune config: mozannar's is its method's, never full."""
    methods = [
        {"name": "mozannar"},
        {
            "name": "pf-ld",
            "label": "pf-ld (A-only)",
            "hparams": {"privacy_notion": "sensitive-attribute"},
        },
        {"name": "pf-ld"},
        {"name": "erm"},
    ]
    assert notions({"methods": methods}) == {
        "mozannar": LOCAL,
        "pf-ld (A-only)": "sensitive-attribute",
        "pf-ld": "full",
        "erm": "full",
    }


def test_the_ledger_summary_names_randomized_response():
    from fairbench.privacy.events import randomized_response, to_dict
    from fairbench.report.ledger_summary import mechanism

    name, params = mechanism(to_dict(randomized_response(1.0, 2)))
    assert name == "randomized response" and params["k"] == 2
    assert params["p"] == pytest.approx(2 / (np.e + 1), rel=1e-12)


def test_privacy_cost_refuses_a_tune_with_the_local_notion_in_one_line():
    """fig-privacy-cost has no notion column: a tune running mozannar is refused (one line
    naming it and the figure that keeps notions apart); A-only and full-record entries pass."""
    from types import SimpleNamespace

    ok = [
        {"name": "dp-sgd"},
        {"name": "pf-ld", "hparams": {"privacy_notion": "sensitive-attribute"}},
    ]
    check_one_notion(SimpleNamespace(path="t", config={"methods": ok}))
    mixed = SimpleNamespace(path="t", config={"methods": [*ok, {"name": "mozannar"}]})
    with pytest.raises(
        ConfigError,
        match=r"^t: method mozannar is private under local-dp-attribute only; "
        r"fig-privacy-cost does not keep notions apart: .*fig-literature$",
    ) as info:
        check_one_notion(mixed)
    assert "\n" not in str(info.value)


def test_the_budget_winners_rank_mozannar_only_against_its_own_notion():
    """mozannar (better than raco-dp on every repeat) wins its own notion's verdict and never
    the whole-record one."""
    import pandas as pd

    from fairbench.report.budget_sensitivity import winners

    table = pd.DataFrame(
        [
            {
                "dataset": "adult",
                "constraint": "demographic_parity",
                "epsilon": 1.0,
                "target": 0.05,
                "method": method,
                "selected": f"{method}#0",
                "repeat": r,
                "test_error": error + 0.01 * r,
            }
            for method, error in (("raco-dp", 0.2), ("dp-sgd", 0.25), ("mozannar", 0.1))
            for r in range(3)
        ]
    )
    config = {"methods": [{"name": "raco-dp"}, {"name": "dp-sgd"}, {"name": "mozannar"}]}
    by_notion = winners(table, config).set_index("privacy_notion")
    assert by_notion.loc["full", "winner"] == "raco-dp"
    assert by_notion.loc["full", "runner_up"] == "dp-sgd"
    assert by_notion.loc[LOCAL, "winner"] == "mozannar" and by_notion.loc[LOCAL, "competitors"] == 1
