"""What each column of a user's CSV is: the label (binarised), the sensitive attribute (its
values as groups), numeric or categorical features, or excluded with a reason.

Inference looks at the values of the whole file, which is not private (it is a choice of
features the file's contents make); the card and the run's warnings say which columns were
excluded and why, and the user's overrides (`numeric`, `categorical`, `drop`) always win. A
bounds file (`csv_bounds`) replaces inference by declared, public roles.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fairbench.datasets.csv_read import closest
from fairbench.errors import DataError

MAX_CATEGORIES = 50  # more distinct strings than this: free text, not a category
DATE_SHARE = 0.9  # columns whose values mostly look like dates or times are excluded
DATE = re.compile(
    r"^\s*(\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4})"
    r"([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?)?\s*$"
)
KEEP_HINT = "to keep one, list it under `numeric:` or `categorical:` (--numeric/--categorical)"


@dataclass(frozen=True)
class Roles:
    """Feature columns by role, and every other column with why it is not a feature."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    excluded: dict[str, str] = field(default_factory=dict)  # column -> reason

    def notice(self) -> str | None:
        """One line naming the inferred exclusions (not the user's own drops) and the override."""
        inferred = {c: r for c, r in self.excluded.items() if r != "dropped (drop:)"}
        if not inferred:
            return None
        listed = "; ".join(f"{c} ({r})" for c, r in inferred.items())
        return f"excluded {len(inferred)} column(s) from the features: {listed}; {KEEP_HINT}"


def as_numbers(values: pd.Series) -> pd.Series:
    """Numeric values of a string column; a present value that does not parse becomes NaN."""
    return pd.to_numeric(values, errors="coerce")


def check_numeric(frame: pd.DataFrame, columns: Sequence[str], path: Path) -> None:
    """Refuse text in a column declared numeric, naming the first offending line."""
    for col in columns:
        values = frame[col]
        bad = values.notna() & as_numbers(values).isna()
        if bad.any():
            line = int(np.flatnonzero(bad)[0]) + 2  # the header is line 1
            raise DataError(
                f"csv: {path}: column {col!r} is declared numeric but line {line} holds "
                f"{values[bad].iloc[0]!r}; fix the value, or declare the column categorical"
            )


def infer_roles(
    frame: pd.DataFrame,
    features: Sequence[str],
    numeric: Sequence[str],
    categorical: Sequence[str],
    path: Path,
) -> Roles:
    """Roles of the `features` columns: declared ones as declared (a declared numeric column
    holding text is refused), the others inferred (see `_inferred`)."""
    check_numeric(frame, [c for c in features if c in numeric], path)
    num, cat, excluded = [], [], {}
    for col in features:
        values = frame[col]
        if col in numeric:
            num.append(col)
        elif col in categorical:
            cat.append(col)
        else:
            role = _inferred(values.dropna())
            {"numeric": num, "categorical": cat}.get(role, []).append(col)
            if role not in ("numeric", "categorical"):
                excluded[col] = role
    return Roles(tuple(num), tuple(cat), excluded)


def _inferred(values: pd.Series) -> str:
    """numeric, categorical, or the reason the column is excluded: empty, constant, an id
    (a distinct integer or string on every row), a date, or free text (> 50 strings)."""
    n, distinct = len(values), values.nunique()
    if n == 0:
        return "empty: every value missing"
    if distinct == 1:
        return f"constant: {values.iloc[0]!r} on every row"
    numbers = as_numbers(values)
    if numbers.notna().all():
        whole = bool(np.all(np.mod(numbers, 1) == 0))
        return "id: a distinct integer on every row" if whole and distinct == n else "numeric"
    if values.str.match(DATE).mean() >= DATE_SHARE:
        return "date or time"
    if distinct == n:
        return "id: a distinct value on every row"
    if distinct > MAX_CATEGORIES:
        return f"free text: {distinct} distinct values"
    return "categorical"


@dataclass(frozen=True)
class Label:
    """The binarised label: y = 1 where the column holds `positive`."""

    y: np.ndarray
    positive: str
    negative: str  # the other value, or "not <positive>" when several values map to 0


def binarise(values: pd.Series, column: str, positive: object | None, path: Path) -> Label:
    """y from a label column without missing values: the rows holding `positive` are 1. With
    no `positive`, the column must have exactly two values, and the larger (numerically where
    both are numbers) is positive."""
    distinct = sorted(values.unique(), key=_order_key(values))
    if positive is None:
        if len(distinct) != 2:
            shown = ", ".join(map(repr, distinct[:8])) + (", ..." if len(distinct) > 8 else "")
            raise DataError(
                f"csv: {path}: label {column!r} has {len(distinct)} value(s) ({shown}); a "
                "binary label is needed: name the positive one with `positive: VALUE` "
                "(--positive VALUE)"
            )
        return Label((values == distinct[1]).to_numpy(), distinct[1], distinct[0])
    match = _matching(values, positive)
    if match is None:
        raise DataError(
            f"csv: {path}: positive value {positive!r} does not occur in label {column!r}; "
            f"its values: {', '.join(map(repr, distinct[:8]))}"
        )
    rest = [v for v in distinct if v != match]
    negative = rest[0] if len(rest) == 1 else f"not {match}"
    if not rest:
        raise DataError(f"csv: {path}: label {column!r} holds only {match!r}; nothing to predict")
    return Label((values == match).to_numpy(), match, negative)


def _order_key(values: pd.Series):
    numbers = as_numbers(pd.Series(values.unique()))
    if numbers.notna().all():
        return lambda v: float(v)
    return str


def _matching(values: pd.Series, positive: object) -> str | None:
    """The column's value equal to `positive`, as text or as a number (YAML reads `1` as an
    int, the file may hold "1" or "1.0")."""
    text = str(positive)
    if (values == text).any():
        return text
    try:
        wanted = float(text)
    except ValueError:
        return None
    numbers = as_numbers(values)
    hit = values[numbers == wanted]
    return None if hit.empty else str(hit.iloc[0])


def group_codes(
    values: pd.Series, column: str, names: Mapping[str, str], other: Sequence[str], path: Path
) -> tuple[np.ndarray, tuple[str, ...], dict[str, str]]:
    """(group index per row, group names, value -> group mapping). Every value is its own
    group, named by itself, unless `names` renames it (several values may share a name) or
    `other` merges it into "other" (into the file's own value "Other" where it has one).
    Groups are ordered largest first, equal sizes by name."""
    present = set(values.unique())
    for value in [*names, *other]:
        if value not in present:
            raise DataError(
                f"csv: {path}: sensitive column {column!r} has no value {value!r} "
                f"(groups:/other:); {closest(value, sorted(present))}"
            )
    # merged values join a value already called other (any case), else a group "other"
    merged = next((v for v in sorted(present) if v.lower() == "other" and v not in other), "other")
    mapping = {v: merged if v in other else names.get(v, v) for v in sorted(present)}
    named = values.map(mapping)
    counts = named.value_counts()
    order = tuple(sorted(counts.index, key=lambda g: (-int(counts[g]), g)))
    if len(order) < 2:
        raise DataError(
            f"csv: {path}: sensitive column {column!r} has one group ({order[0]!r}); fairness "
            "needs at least two: choose another column, or undo a groups:/other: merge"
        )
    codes = named.map({g: i for i, g in enumerate(order)}).to_numpy(dtype=np.int64)
    return codes, order, mapping
