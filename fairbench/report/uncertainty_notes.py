"""The words and table beside a figure's points for what their test split can tell (issue 40):
the verdict at tau and the unstable flag that `uncertainty` computes, defined once here for
fig-privacy-cost's notes and fig-literature's README alike."""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from fairbench.report.document import Bullets, Document, Table
from fairbench.report.uncertainty import CANNOT_TELL, MEETS, MISSES, exceeds

DEFINITION = (
    "Per point: the fresh seeds' mean test violation with its 95% t-interval, and the test "
    "split's own standard error of the gap (`violation_se`, mean over the seeds): the SE of "
    "a difference of two proportions at the group rates the selected model produced, with "
    "the split's group sizes (its label-y records per group for equalized odds and equal "
    "opportunity), for the pair of groups that attains the gap (uncertainty.gap_se states "
    "the assumptions). Verdict (`verdict`): **cannot tell** where that SE exceeds τ/2 "
    "(one test split cannot resolve τ, whatever the seeds say) or where the interval "
    "straddles τ; otherwise **meets** when the interval's upper end is at or below τ and "
    "**misses** when its lower end is above τ. Blank: the SE is not derivable from what the "
    "trials store (another constraint) or the data is absent here. `satisfied_fraction`, "
    "the share of seeds whose test violation is within τ, stays in the table as a number, "
    "not a verdict: each seed's violation carries the split's SE."
)
UNSTABLE_RULE = (
    "**Unstable** (`unstable`): the fresh-seed mean test violation exceeds the selection's "
    "validation violation (`val_violation`, the search seeds' mean tune chose on) by more "
    "than 1.96·√(SE_val² + SE_test²), each the split's own SE of the gap computed the same "
    "way (`val_violation_se`, `violation_se`); or the mean test error exceeds the "
    "validation error by more than 1.96·√ of the two splits' binomial variances "
    "(`val_error_se`, `error_se`). Training randomness is not counted as noise: a choice "
    "whose validation numbers came from a lucky search run is what the flag finds. Each "
    "side's SE is one split's, not that of a mean over seeds, so only gaps one split's "
    "noise cannot explain are flagged."
)


def unstable_parts(row: pd.Series) -> str:
    """Which of the violation and the error exceed their validation values ("" if neither)."""
    parts = {
        "violation": exceeds(
            row["val_violation"],
            row["val_violation_se"],
            row["violation_mean"],
            row["violation_se"],
        ),
        "error": exceeds(
            row["val_error"], row["val_error_se"], row["test_error_mean"], row["error_se"]
        ),
    }
    return ", ".join(name for name, hit in parts.items() if hit)


def counts_line(rows: pd.DataFrame, tau: float) -> str:
    """How many points at tau meet, miss, cannot tell (and why), and are unstable."""
    here = rows[rows["tau"] == tau]
    verdicts = here["verdict"]
    wide = int(((verdicts == CANNOT_TELL) & (here["violation_se"] > tau / 2)).sum())
    blank = int((verdicts == "").sum())
    return (
        f"τ = {tau:g}: {len(here)} points; {int((verdicts == MEETS).sum())} meet, "
        f"{int((verdicts == MISSES).sum())} miss, {int((verdicts == CANNOT_TELL).sum())} "
        f"cannot tell ({wide} of them because the test SE exceeds τ/2)"
        + (f", {blank} without a verdict" if blank else "")
        + f"; {int(here['unstable'].eq(True).sum())} unstable."
    )


def _interval(row: pd.Series) -> str:
    if math.isnan(row["violation_ci_low"]):
        return f"{row['violation_mean']:.4f}"
    return (
        f"{row['violation_mean']:.4f} [{row['violation_ci_low']:.4f}, "
        f"{row['violation_ci_high']:.4f}]"
    )


def _number(value: float, digits: int = 4) -> str:
    return "" if math.isnan(value) else f"{value:.{digits}f}"


def satisfaction_table(rows: pd.DataFrame, fmt_eps: Callable[[float], str]) -> Table:
    """One line per point: its violation and interval, the test SE, the seeds within tau, the
    verdict, the validation violation and its SE, and what is unstable."""
    columns = [
        "τ",
        "method",
        "ε",
        "test violation [95% CI]",
        "test SE",
        "seeds ≤ τ",
        "verdict",
        "validation violation (SE)",
        "unstable",
    ]
    lines = []
    for _, row in rows.iterrows():
        met = round(row["satisfied_fraction"] * row["n_seeds"])
        val = _number(row["val_violation"])
        if val and not math.isnan(row["val_violation_se"]):
            val += f" ({row['val_violation_se']:.4f})"
        lines.append(
            [
                f"{row['tau']:g}",
                row["method"],
                fmt_eps(row["epsilon"]),
                _interval(row),
                _number(row["violation_se"]),
                f"{met}/{row['n_seeds']}",
                row["verdict"],
                val,
                unstable_parts(row),
            ]
        )
    return Table(columns, lines, "llrrrrlrl")


def satisfaction_section(
    rows: pd.DataFrame, fmt_eps: Callable[[float], str], by: str = "model", heading: int = 2
) -> Document:
    """The verdict and unstable definitions, the counts per tau and a table per value of `by`
    (the model; fig-literature: the privacy notion)."""
    doc = Document().heading(heading, "Does the test split tell whether τ holds?")
    doc.add(DEFINITION, UNSTABLE_RULE)
    taus = sorted(rows["tau"].unique(), reverse=True)
    doc.add(Bullets([counts_line(rows, tau) for tau in taus]))
    for part, mine in rows.groupby(by, sort=True):
        doc.heading(heading + 1, str(part))
        doc.add(satisfaction_table(mine, fmt_eps))
    return doc
