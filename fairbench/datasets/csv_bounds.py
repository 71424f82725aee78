"""Public feature bounds for a user's CSV: preprocessing that looks at no record.

A bounds file is a small YAML the user fills from public knowledge (a codebook, a form's
allowed values), never from the data:

    numeric:
      age: [18, 100]          # [low, high]: values are clipped to it, then scaled to [-1, 1]
    categorical:
      sex: [Female, Male]     # one-hot over this list; other or missing values are all zero

With it, the features are exactly the columns it lists and every transformation is a fixed
function of each record alone, so preprocessing spends no privacy. Without it, the adapter
takes statistics from the training split (`csv_file`) and labels the run "preprocessing not
private". `template` writes a file to edit (`fairbench data bounds-template`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fairbench.datasets.csv_read import read_csv_file, require_columns
from fairbench.datasets.csv_roles import Roles, as_numbers, infer_roles
from fairbench.errors import DataError


@dataclass(frozen=True)
class Bounds:
    """Declared feature roles with their public ranges and category lists."""

    path: Path
    numeric: dict[str, tuple[float, float]]
    categorical: dict[str, tuple[str, ...]]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def load_bounds(path: Path) -> Bounds:
    """The bounds file, validated: every range two numbers low < high, every list non-empty."""
    if not path.is_file():
        raise DataError(
            f"csv: no bounds file at {path}; write one with "
            "`fairbench data bounds-template CSV --label COL --sensitive COL`"
        )
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise DataError(f"csv: bounds {path}: malformed YAML ({exc})".splitlines()[0]) from None
    if not isinstance(data, dict) or set(data) - {"numeric", "categorical"}:
        raise DataError(f"csv: bounds {path}: expected the keys `numeric` and `categorical`")
    numeric = {}
    for col, pair in (data.get("numeric") or {}).items():
        ok = isinstance(pair, list) and len(pair) == 2
        ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)
        if not ok or not pair[0] < pair[1]:
            raise DataError(
                f"csv: bounds {path}: numeric.{col} is {pair!r}; give [low, high] "
                "with low < high, from public knowledge"
            )
        numeric[str(col)] = (float(pair[0]), float(pair[1]))
    categorical = {}
    for col, values in (data.get("categorical") or {}).items():
        if not isinstance(values, list) or not values:
            raise DataError(
                f"csv: bounds {path}: categorical.{col} is {values!r}; list its possible values"
            )
        categorical[str(col)] = tuple(str(v) for v in values)
    if not numeric and not categorical:
        raise DataError(f"csv: bounds {path} declares no feature")
    return Bounds(path, numeric, categorical)


def bounded_features(frame: pd.DataFrame, bounds: Bounds) -> pd.DataFrame:
    """Each record's features from the bounds alone: numeric values clipped and scaled to
    [-1, 1] (a missing value, kept only under `missing: impute`, becomes 0, the middle of
    its range), categories one-hot over the declared list (a missing or unlisted value: all
    zeros). No statistic of the data enters."""
    columns: dict[str, np.ndarray] = {}
    for col, (low, high) in bounds.numeric.items():
        x = as_numbers(frame[col]).to_numpy(dtype=np.float64)
        scaled = 2.0 * (np.clip(x, low, high) - low) / (high - low) - 1.0
        columns[col] = np.nan_to_num(scaled, nan=0.0)
    for col, values in bounds.categorical.items():
        for value in values:
            columns[f"{col}={value}"] = (frame[col] == value).to_numpy(dtype=np.float64)
    return pd.DataFrame(columns, index=frame.index)


def bounds_template(
    csv_path: Path,
    label: str,
    sensitive: str,
    *,
    numeric: Sequence[str] = (),
    categorical: Sequence[str] = (),
    drop: Sequence[str] = (),
    delimiter: str = ",",
    fill_from_data: bool = False,
) -> str:
    """A bounds file to edit for a CSV: its feature columns as `infer_roles` (with the
    overrides) gives them, ranges empty, or filled from the data with a loud comment."""
    frame = read_csv_file(csv_path, delimiter).frame
    wanted = {
        "label": [label],
        "sensitive": [sensitive],
        "numeric": numeric,
        "categorical": categorical,
        "drop": drop,
    }
    require_columns(frame.columns, wanted, csv_path)
    features = [c for c in frame.columns if c not in {label, sensitive, *drop}]
    roles = infer_roles(frame, features, numeric, categorical, csv_path)
    return template(csv_path, label, sensitive, roles, frame if fill_from_data else None)


def template(
    csv_path: Path, label: str, sensitive: str, roles: Roles, frame: pd.DataFrame | None
) -> str:
    """A bounds file to edit. From the column names and inferred roles only, ranges left
    empty (`[null, null]`) for the user to fill; with `frame`, filled from the data, under a
    comment that says this is not private."""
    lines = [
        f"# Public feature bounds for {csv_path.name} (label {label}, sensitive {sensitive}).",
        "# Fill every range and category list from public knowledge (a codebook, the form's",
        "# allowed values), not from the data; then pass this file as `bounds:` (--bounds).",
        "# Numeric values are clipped to [low, high] and scaled to [-1, 1]; categorical ones",
        "# are one-hot over the list. Only the columns listed here are features.",
    ]
    if frame is not None:
        lines += [
            "#",
            "# WARNING: THE VALUES BELOW WERE FILLED FROM THE DATA ITSELF. THEY ARE NOT PUBLIC:",
            "# A RUN USING THEM IS NOT PRIVATE (the minimum, maximum and category list of the",
            "# records leak). Replace them with public values before relying on the privacy.",
        ]
    for col, reason in roles.excluded.items():
        lines.append(f"# not a feature: {col} ({reason})")
    lines.append("numeric:" + ("" if roles.numeric else " {}"))
    for col in roles.numeric:
        if frame is None:
            lines.append(f"  {_key(col)}: [null, null]")
        else:
            x = as_numbers(frame[col])
            lines.append(f"  {_key(col)}: [{_number(x.min())}, {_number(x.max())}]")
    lines.append("categorical:" + ("" if roles.categorical else " {}"))
    for col in roles.categorical:
        values = sorted(frame[col].dropna().unique()) if frame is not None else []
        lines.append(f"  {_key(col)}: {yaml.safe_dump(values, default_flow_style=True).strip()}")
    return "\n".join(lines) + "\n"


def _key(name: str) -> str:
    return yaml.safe_dump(name).removesuffix("\n...\n").strip()


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
