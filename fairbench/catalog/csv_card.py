"""The card of a user's CSV file, generated from the file (`fairbench data check --csv`).

What a user checks before spending privacy on their data: the file's checksum, how many rows
were kept and why others were dropped, every column's role (or why it is not a feature), the
label's balance, the groups with their sizes overall and in the training split, and whether
the preprocessing is private. The notices are those a run on the file starts with.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fairbench.datasets.csv_file import CsvFile
from fairbench.datasets.csv_read import MISSING_TOKENS


def csv_card(adapter: CsvFile) -> dict[str, Any]:
    """The card as plain JSON data. Raises the adapter's one-line errors (a `DataError` for a
    bad file, or a small group under `strict`)."""
    p = adapter.profile
    o = adapter.options
    notices = adapter.notices()
    train = adapter.train_group_sizes()
    y = p.label.y
    groups = [
        {
            "group": name,
            "values": [v for v, g in p.group_of.items() if g == name],
            "rows": int((p.s == i).sum()),
            "train_rows": int(train[i]),
            "positive_rate": round(float(y[p.s == i].mean()), 4),
        }
        for i, name in enumerate(p.group_names)
    ]
    return {
        "file": str(p.path),
        "sha256": p.sha256,
        "rows_read": p.rows_read,
        "rows": len(p.frame),
        "rows_dropped": p.rows_dropped,
        "missing_policy": o.missing,
        "missing_tokens": list(MISSING_TOKENS),
        "label": {
            "column": o.label,
            "positive": p.label.positive,
            "negative": p.label.negative,
            "positive_rows": int(y.sum()),
            "negative_rows": int((~y.astype(bool)).sum()),
            "positive_rate": round(float(np.mean(y)), 4),
        },
        "sensitive": {"column": o.sensitive, "groups": groups},
        "columns": _columns(adapter),
        "bounds": None if p.bounds is None else str(p.bounds.path),
        "preprocessing_private": p.bounds is not None,
        "notices": notices,
    }


def _columns(adapter: CsvFile) -> list[dict[str, Any]]:
    """Every column of the file, in file order, with its role and missing values."""
    p, o = adapter.profile, adapter.options
    roles = {c: "numeric" for c in p.roles.numeric}
    roles.update({c: "categorical" for c in p.roles.categorical})
    as_input = f", and a {roles[o.sensitive]} input" if o.sensitive in roles else ""
    roles.update({o.label: "label", o.sensitive: f"sensitive{as_input}"})
    return [
        {
            "column": col,
            "role": roles.get(col, "excluded"),
            "why": p.roles.excluded.get(col),
            "missing": int(p.frame[col].isna().sum()),
            "distinct": int(p.frame[col].nunique()),
        }
        for col in p.frame.columns
    ]
