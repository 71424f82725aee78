"""What `fairbench advise` prints and writes besides the release: the plan, the release's
summary, the one section of exact (not private) statistics, the privacy spent, the JSON
object and the report. Nothing here prints the release's candidate count, seeds or losing
candidates: the `Plan` never hands them out."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from fairbench.workflows.advise import (
    NOT_A_RELEASE,
    PLAN_COUNT_SHARE,
    SWAMPS,
    Plan,
    Release,
)

EXACT = (
    "not private: computed exactly from your data, for you only; do not share "
    "(none of it is in the release)"
)


def plan_text(plan_: Plan) -> str:
    from fairbench.runner.preflight import describe_seconds

    r, b = plan_.request, plan_.budget
    law = plan_.joint.count
    assert law is not None
    lines = [
        f"plan: {r.constraint} within tau = {r.tau:g} at epsilon = {r.epsilon:g}, delta = "
        f"{r.delta:g}",
        f"  methods: {', '.join(m.name for m in plan_.methods)}",
        *(f"  skipped {name}: {why}" for name, why in plan_.skipped.items()),
        f"  release: one private selection; K ~ Poisson({law.expected:g}) candidates (K stays "
        f"hidden), each a method drawn uniformly and one of its {r.support} configurations",
        f"    per candidate: training epsilon {b.training_epsilon:.3g}, validation score "
        f"Laplace scale {b.score_scale:.3g}; total epsilon {b.total_epsilon:.4f} (RDP)",
        f"  plan's noisy validation counts (for the warnings): epsilon "
        f"{PLAN_COUNT_SHARE * r.epsilon:.3g}, counted in the privacy spent",
        f"  comparison: {r.repeats} repeats x {len(plan_.methods)} methods, each its own "
        f"private selection at epsilon {r.epsilon:g} (~{r.candidates:g} candidates): an "
        "analysis, not a release",
        f"  calibrating the release took {describe_seconds(plan_.calibration_seconds)}",
        "  estimated time from here: "
        + (
            "unknown (no bench step times)"
            if plan_.estimated_seconds is None
            else f"{describe_seconds(plan_.estimated_seconds)} (training "
            f"{describe_seconds(plan_.training_seconds or 0.0)} for the expected candidates, "
            "from the bench table's step times; calibrating the comparison "
            f"{describe_seconds(plan_.comparison_calibration_seconds or 0.0)}, from the "
            "release's; upper estimates)"
        ),
        *(f"  warning: {w}" for w in plan_.notes),
    ]
    if r.seeded:
        lines.insert(0, f"warning: --seed {r.seed}: the output is {NOT_A_RELEASE}")
    return "\n".join(lines)


def comparison_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per method. `held` counts the repeats whose released model held tau on test,
    and `satisfied` is its share of ALL repeats: a repeat that released nothing is a miss
    (fig-tuning-cost's rule)."""
    out = []
    for r in table.itertuples(index=False):
        repeats = len(r.candidates_drawn)
        held = 0 if r.feasible == 0 else round(r.satisfied_fraction * r.feasible)
        out.append(
            {
                "method": r.method,
                "test_error": r.test_error,
                "ci95": r.test_error_ci95,
                "violation": r.test_violation,
                "held": held,
                "satisfied": held / repeats,
                "released": f"{r.feasible}/{repeats}",
                "steps": r.steps_mean,
                "wall_seconds": r.wall_seconds,
                "left_out": r.left_out if isinstance(r.left_out, str) else None,
            }
        )
    return out


def _num(value: float | None, fmt: str) -> str:
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    return "-" if missing else format(value, fmt)


def release_text(plan_: Plan, record: Release, out: Path) -> str:
    """The release: what was selected, its noisy score, the epsilon, and the caveats that
    need no exact statistic."""
    r, p = plan_.request, record.public
    head = (
        f"\nrelease ({NOT_A_RELEASE})"
        if r.seeded
        else "\nrelease ((epsilon, delta)-DP; may be shared)"
    )
    if not record.selected:
        lines = [
            head + ": nothing selected",
            f"  no candidate's noisy validation violation was within tau = {r.tau:g} at "
            f"epsilon {r.epsilon:g}; the selection still spent epsilon {p['epsilon']:.3g}. "
            "Loosen tau, raise epsilon, or collect more data; the comparison below shows "
            "which methods come closest."
            + (
                " The plan warned why: the validation score's noise swamps tau."
                if any(n.startswith(SWAMPS) for n in plan_.notes)
                else ""
            ),
        ]
        return "\n".join(lines)
    settings = ", ".join(f"{k} {v}" for k, v in sorted(p["hparams"].items()))
    knob = "" if p["knob"] is None else f", {p['knob_name']} {p['knob']:g}"
    caveats = [
        "its candidates, their number and their scores are not released",
        *(
            []
            if "bounds" in r.dataset
            else [
                "preprocessing was not private (no --bounds): feature roles, scaling and "
                "category lists come from the data"
            ]
        ),
        *(
            [f"{p['method']} reads the sensitive attribute at test time"]
            if record.uses_sensitive_at_test
            else []
        ),
    ]
    return "\n".join(
        [
            f"{head}: {out / 'release'} (model.pt, release.json)",
            f"  recommendation: {p['method']} ({settings}{knob})",
            f"  it won the private selection with noisy validation error "
            f"{p['noisy_validation_error']:.3f} and violation "
            f"{p['noisy_validation_violation']:.3f} (Laplace-noised counts)",
            f"  epsilon {p['epsilon']:.3g} at delta {r.delta:g}: one RepeatAndSelect event "
            "over the candidates (RDP accountant)",
            f"  caveats: {'; '.join(caveats)}",
        ]
    )


def exact_text(plan_: Plan, record: Release, table: pd.DataFrame) -> str:
    """Every exact statistic of the data, under one heading."""
    e, r = plan_.exact, plan_.request
    lines = [f"\n{EXACT}:"]
    lines += [f"  {notice}" for notice in e.notices]
    lines.append(
        f"  data: {e.rows} rows; the release's split "
        + ", ".join(f"{k} {v}" for k, v in e.parts.items())
        + "; training rows per group "
        + ", ".join(f"{g} {n}" for g, n in e.groups.items())
    )
    if record.selected:
        line = (
            f"  released model on test: error {record.test_error:.3f}, violation "
            f"{record.test_violation:.3f} (test data, reported, never used to choose)"
        )
        if record.test_error is not None and record.test_error >= e.majority_error:
            line += "; not below the majority class: it learnt nothing a constant does not give"
        if record.test_violation is not None and record.test_violation > r.tau:
            line += "; its violation exceeds tau on test: the noisy score let it through"
        lines.append(line)
    lines += [
        f"  comparison (an analysis): each method alone, tuned by its own private selection "
        f"at epsilon {r.epsilon:g}, {r.repeats} repeats on one split of their own; test error of "
        "the released models, mean ± 95% CI; held tau: repeats whose released model held "
        "tau on test (nothing released is a miss)",
        f"  {'method':<28} {'test error':>17} {'violation':>9} {'held tau':>8} "
        f"{'released':>8} {'steps':>7} {'wall s':>7}",
    ]
    for row in comparison_rows(table):
        error = (
            "cannot calibrate"
            if row["left_out"]
            else "none released"
            if math.isnan(row["test_error"])
            else f"{row['test_error']:.3f} (one)"
            if math.isnan(row["ci95"])
            else f"{row['test_error']:.3f} ± {row['ci95']:.3f}"
        )
        held = f"{row['held']}/{r.repeats}"
        lines.append(
            f"  {row['method']:<28} {error:>17} {_num(row['violation'], '.3f'):>9} "
            f"{held:>8} {row['released']:>8} "
            f"{_num(row['steps'], '.0f'):>7} {_num(row['wall_seconds'], '.0f'):>7}"
        )
    lines.append(
        f"  {'majority class (reference)':<28} {e.majority_error:>17.3f} {0:>9.3f} "
        f"{'-':>8} {'-':>8} {0:>7} {'-':>7}"
    )
    lines += [f"  {note}" for note in plan_.notes if note.startswith("left out")]
    return "\n".join(lines)


def spent_text(plan_: Plan, spent: dict[str, float]) -> str:
    return (
        f"\nprivacy spent on this data by everything accounted above (composed, RDP): "
        f"epsilon {spent['total']:.3g} at delta {plan_.request.delta:g}: the release "
        f"{spent['release']:.3g}, the plan's noisy counts {spent['plan_counts']:.3g}, the "
        f"comparison's selections {spent['comparison']:.3g}; the exact numbers under "
        "'not private' are not covered"
    )


def advice_json(
    plan_: Plan, record: Release, table: pd.DataFrame, spent: dict[str, float], out: Path
) -> dict[str, Any]:
    r, e = plan_.request, plan_.exact
    return {
        "release": {**record.public, "folder": str(out / "release")},
        "recommendation": record.public["method"],
        "epsilon": r.epsilon,
        "delta": r.delta,
        "constraint": r.constraint,
        "tau": r.tau,
        "methods": [m.name for m in plan_.methods],
        "skipped": plan_.skipped,
        "warnings": plan_.notes,
        "epsilon_spent_on_data": spent,
        "not_private": {
            "note": EXACT,
            "notices": e.notices,
            "rows": e.rows,
            "split": e.parts,
            "training_rows_per_group": e.groups,
            "released_model_test": None
            if not record.selected
            else {"error": record.test_error, "violation": record.test_violation},
            "majority_error": e.majority_error,
            "comparison": comparison_rows(table),
        },
        "report": str(out / "report.html"),
    }


def write_report(
    plan_: Plan, record: Release, table: pd.DataFrame, spent: dict[str, float], out: Path
) -> Path:
    """OUT/report.md and a self-contained OUT/report.html: the plan, the release, the exact
    section, the privacy spent, the request (its seed only when the user gave one)."""
    from fairbench.report.html import STYLE

    blocks = [
        ("plan", "Plan", plan_text(plan_)),
        ("release", "Release", release_text(plan_, record, out).strip()),
        ("exact", "Not private", exact_text(plan_, record, table).strip()),
        ("spent", "Privacy spent", spent_text(plan_, spent).strip()),
        ("request", "Request", yaml.safe_dump(_request(plan_), sort_keys=False)),
    ]
    (out / "report.md").write_text(
        "# fairbench advise\n"
        + "".join(f"\n## {title}\n\n```\n{text.rstrip()}\n```\n" for _, title, text in blocks)
    )
    sections = "\n".join(
        f'<section id="{anchor}"><h2>{title}</h2>\n<pre>{escape(text)}</pre></section>'
        for anchor, title, text in blocks
    )
    (out / "report.html").write_text(
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>fairbench advise</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>fairbench advise</h1>\n{sections}\n</body>\n</html>\n"
    )
    return out / "report.html"


def _request(plan_: Plan) -> dict[str, Any]:
    request = dict(vars(plan_.request))
    if request["seed"] is None:
        del request["seed"]
    request["only"] = list(request["only"])
    return request
