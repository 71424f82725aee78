"""Printing a user CSV's card (`fairbench data check --csv`): the notices a run would start
with, then the file, the label, the groups and every column's role."""

from __future__ import annotations

import json

from rich.markup import escape
from rich.table import Table

from fairbench.cli.common import console, err_console


def print_csv_card(adapter, as_json: bool) -> None:
    from fairbench.catalog.csv_card import csv_card

    card = csv_card(adapter)
    if as_json:
        print(json.dumps(card, indent=1))
        return
    for notice in card["notices"]:
        err_console.print(f"warning: {notice}", soft_wrap=True, highlight=False, markup=False)
    lab = card["label"]
    dropped = ", ".join(f"{n} ({why})" for why, n in card["rows_dropped"].items() if n)
    for key, value in (
        ("file", card["file"]),
        ("sha256", card["sha256"]),
        (
            "rows",
            f"{card['rows']:,} kept of {card['rows_read']:,} read"
            + (f"; dropped {dropped}" if dropped else ""),
        ),
        (
            "missing values",
            f"{card['missing_policy']} (tokens: "
            f"{', '.join(repr(t) for t in card['missing_tokens'])})",
        ),
        (
            "label",
            f"{lab['column']}: {lab['positive']!r} -> 1 ({lab['positive_rows']:,} rows, "
            f"rate {lab['positive_rate']:.3f}), {lab['negative']!r} -> 0 "
            f"({lab['negative_rows']:,} rows)",
        ),
        (
            "preprocessing",
            "private (public bounds " + str(card["bounds"]) + ")"
            if card["preprocessing_private"]
            else "not private (statistics from the data)",
        ),
    ):
        console.print(f"{key + ':':15s} {value}", highlight=False, markup=False, soft_wrap=True)
    groups = Table(title=f"groups of {card['sensitive']['column']}")
    for col in ("group", "values", "rows", "train rows", "positive rate"):
        groups.add_column(col)
    for g in card["sensitive"]["groups"]:
        groups.add_row(
            escape(g["group"]),
            escape(", ".join(g["values"])),
            f"{g['rows']:,}",
            f"{g['train_rows']:,}",
            f"{g['positive_rate']:.3f}",
        )
    console.print(groups)
    columns = Table(title="columns")
    for col in ("column", "role", "why not a feature", "missing", "distinct"):
        columns.add_column(col)
    for c in card["columns"]:
        columns.add_row(
            escape(c["column"]),
            c["role"],
            escape(c["why"] or ""),
            str(c["missing"]),
            str(c["distinct"]),
        )
    console.print(columns)
