"""Published curves beside ours: for each point a paper reports (test error, violation), the
error of each of our series at the same violation, read off the series' own frontier by
linear interpolation. A reference point below a series' smallest violation is `not reached`."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fairbench.report.aggregate import dominated
from fairbench.report.document import Document, Table

COLUMNS = [
    "reference",
    "source",
    "dataset",
    "constraint",
    "privacy_notion",
    "epsilon",
    "label",
    "config_id",
    "published_error",
    "published_violation",
    "our_error",
    "difference",
]


def error_at(violation: float, series: pd.DataFrame) -> float:
    """The series' test error at `violation` along its frontier (NaN if it never gets there)."""
    err = series["test_error_mean"].to_numpy()
    vio = series["violation_mean"].to_numpy()
    keep = ~dominated(err, vio)
    order = vio[keep].argsort()
    vio, err = vio[keep][order], err[keep][order]
    if violation < vio[0]:
        return math.nan
    return float(np.interp(violation, vio, err))


def compare(points: pd.DataFrame, references: list[dict]) -> pd.DataFrame:
    """One row per (reference point, our series in the matching panel)."""
    rows = []
    for ref in references:
        panel = points[
            (points["dataset"] == ref["dataset"])
            & (points["constraint"] == ref["constraint"])
            & (points["epsilon"] == ref["epsilon"])
        ]
        if ref.get("privacy_notion"):
            panel = panel[panel["privacy_notion"] == ref["privacy_notion"]]
        for (label, config, notion), series in panel.groupby(
            ["label", "config_id", "privacy_notion"]
        ):
            for published_error, published_violation in ref["points"]:
                ours = error_at(published_violation, series)
                rows.append(
                    [
                        ref["label"],
                        ref.get("source", ""),
                        ref["dataset"],
                        ref["constraint"],
                        notion,
                        ref["epsilon"],
                        label,
                        config,
                        published_error,
                        published_violation,
                        ours,
                        ours - published_error,
                    ]
                )
    return pd.DataFrame(rows, columns=COLUMNS)


def references_document(table: pd.DataFrame, title: str) -> Document:
    doc = Document().heading(1, f"{title}: published curves at matched violation")
    doc.add(
        "Our error at the published point's violation, interpolated along each series' own "
        "frontier (mean over seeds); difference = ours − published (negative: ours is "
        "better). `not reached`: the series never gets down to that violation."
    )
    columns = ["published error", "published violation", "our error", "difference"]
    for keys, grp in table.groupby(["reference", "label", "privacy_notion", "epsilon"]):
        reference, label, notion, eps = keys
        doc.heading(2, f"{reference} vs {label} · {notion} · ε = {eps:g}")
        doc.add(f"Worst difference over reached points: {grp['difference'].max():+.4f}")
        rows = [
            [
                f"{row.published_error:.3f}",
                f"{row.published_violation:.3f}",
                "not reached" if math.isnan(row.our_error) else f"{row.our_error:.4f}",
                "" if math.isnan(row.difference) else f"{row.difference:+.4f}",
            ]
            for row in grp.itertuples()
        ]
        doc.add(Table(columns, rows, "rrrr"))  # numbers (left-aligned until issue 36)
    return doc
