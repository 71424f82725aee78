"""A user's own CSV file as a dataset: `datasets: [{csv: PATH, label: COL, sensitive: COL}]`.

The file is read as text (`csv_read`), its columns given roles (`csv_roles`: inferred, with
the user's overrides, or declared by a public bounds file, `csv_bounds`), rows with a missing
label or group dropped, and the standard split and validation hold-out of every adapter
applied (`base.build_task`). The file's sha256 is pinned in the run's options when the run
starts (`resolved_options`), enters every trial id and row, and is checked on every load.

Privacy of the preprocessing. With `bounds:` every feature is a fixed function of its own
record (clip and scale by public ranges, one-hot over public lists). Without it, the roles
are inferred from the whole file and the standardisation, median imputation and category
lists come from the training split: the provenance records `preprocessing_private: false`,
every trial row carries it (`info.preprocessing`), and the run's warnings and reports say
"preprocessing not private". Either way the set of groups is the sensitive column's values.

Not registered as an entry point: every registered adapter loads without options, and this
one needs a file; `get_dataset("csv", ...)` finds it (see `fairbench.datasets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from fairbench.datasets.base import (
    Dataset,
    DatasetOptions,
    build_task,
    independent_split,
    split_rows,
)
from fairbench.datasets.csv_bounds import Bounds, bounded_features, load_bounds
from fairbench.datasets.csv_read import read_csv_file, require_columns
from fairbench.datasets.csv_roles import (
    Label,
    Roles,
    as_numbers,
    binarise,
    check_numeric,
    group_codes,
    infer_roles,
)
from fairbench.datasets.files import sha256_of
from fairbench.errors import DataError
from fairbench.task import Task

MIN_GROUP_TRAIN = 30  # fewer training rows in a group: a warning, or an error with `strict`
MISSING = "(missing)"  # the category a missing categorical value becomes under `impute`
NOT_PRIVATE = (
    "preprocessing not private: feature roles, standardisation, imputation and category lists "
    "come from the data (training split); declare public bounds (`bounds:`, see `fairbench "
    "data bounds-template`) to make it private"
)


class CsvOptions(DatasetOptions):
    OMITTED_AT: ClassVar[dict[str, Any]] = {**DatasetOptions.OMITTED_AT, "split": "stratified"}
    path: str = Field(description="the CSV file (relative paths: from the current directory)")
    label: str = Field(description="the label column")
    sensitive: str = Field(description="the sensitive-attribute column; its values are groups")
    positive: str | int | float | None = Field(
        None, description="the label value that is 1 (required when it has over two values)"
    )
    numeric: list[str] = Field(default_factory=list, description="columns forced numeric")
    categorical: list[str] = Field(default_factory=list, description="columns forced categorical")
    drop: list[str] = Field(default_factory=list, description="columns left out")
    missing: Literal["drop", "impute"] = Field(
        "drop", description="rows with a missing feature: dropped, or imputed"
    )
    groups: dict[str, str] = Field(
        default_factory=dict, description="sensitive value -> group name (merges values)"
    )
    other: list[str] = Field(default_factory=list, description="sensitive values merged as other")
    bounds: str | None = Field(None, description="public bounds YAML: private preprocessing")
    strict: bool = Field(False, description="a group under 30 training rows is an error")
    include_sensitive: bool = Field(False, description="the group attribute is also an input")
    delimiter: str = Field(",", description="the field separator")
    sha256: str | None = Field(None, description="the file's checksum (pinned when a run starts)")
    bounds_sha256: str | None = Field(None, description="the bounds file's checksum (pinned)")
    split: Literal["stratified", "per-record"] = Field(
        "stratified",
        description="stratified on label x group, or each row's part by its own coin "
        "(what `fairbench advise` uses: the add/remove analysis of its release needs it)",
    )

    @field_validator("path", "bounds")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        return None if value is None else str(Path(value).expanduser().absolute())

    @field_validator("groups", mode="before")
    @classmethod
    def _text_keys(cls, value: Any) -> Any:
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else value

    @field_validator("other", mode="before")
    @classmethod
    def _text_values(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value


@dataclass(frozen=True)
class Profile:
    """The file read and every split-independent decision taken on it."""

    path: Path
    sha256: str
    rows_read: int
    frame: pd.DataFrame  # the kept rows, as text
    roles: Roles
    label: Label
    s: np.ndarray
    group_names: tuple[str, ...]
    group_of: dict[str, str]  # sensitive value -> group name
    rows_dropped: dict[str, int]  # why -> rows
    missing: dict[str, int]  # feature column -> missing values among the kept rows
    duplicates: tuple[str, ...]
    bounds: Bounds | None


class CsvFile(Dataset):
    name = "csv"
    description = "a user's CSV file: label, sensitive column, inferred or declared features"
    version = "user-file"
    Options = CsvOptions
    options: CsvOptions

    def locate(self, root: Path | None = None) -> dict[str, Path]:
        """The file (and bounds file), verified against the pinned checksums if any."""
        o = self.options
        found = {"csv": Path(o.path)}
        if o.bounds is not None:
            found["bounds"] = Path(o.bounds)
        for kind, pinned in (("csv", o.sha256), ("bounds", o.bounds_sha256)):
            if kind not in found:
                continue
            path = found[kind]
            if not path.is_file():
                raise DataError(f"csv: no {'' if kind == 'csv' else 'bounds '}file at {path}")
            if pinned is not None and sha256_of(path) != pinned:
                raise DataError(
                    f"csv: {path} changed since the run started (sha256 {sha256_of(path)[:12]}…,"
                    f" pinned {pinned[:12]}…); start a new run (--out) for the new file"
                )
        return found

    def resolved_options(self) -> dict[str, Any]:
        found = self.locate()
        pinned = {"sha256": sha256_of(found["csv"])}
        if "bounds" in found:
            pinned["bounds_sha256"] = sha256_of(found["bounds"])
        return {**self.options.model_dump(), **pinned}

    @cached_property
    def profile(self) -> Profile:
        """Read the file, check the options against it and give every column its role."""
        o = self.options
        path = self.locate()["csv"]
        bounds = load_bounds(Path(o.bounds)) if o.bounds is not None else None
        table = read_csv_file(path, o.delimiter)
        frame = table.frame
        declared = {
            "label": [o.label],
            "sensitive": [o.sensitive],
            "numeric": o.numeric,
            "categorical": o.categorical,
            "drop": o.drop,
        }
        if bounds is not None:
            declared[f"bounds ({bounds.path.name})"] = [*bounds.numeric, *bounds.categorical]
        require_columns(frame.columns, declared, path)
        _check_declarations(o, bounds, path)
        rows_read = len(frame)
        present = frame[o.label].notna() & frame[o.sensitive].notna()
        frame = frame[present].reset_index(drop=True)
        dropped = {"label or sensitive value missing": int(rows_read - len(frame))}
        roles = _roles(frame, o, bounds, path)
        features = [*roles.numeric, *roles.categorical]
        missing = {c: int(n) for c, n in frame[features].isna().sum().items() if n}
        if o.missing == "drop" and missing:
            complete = frame[features].notna().all(axis=1)
            dropped["feature value missing (missing: drop)"] = int((~complete).sum())
            frame = frame[complete].reset_index(drop=True)
            if frame.empty:
                counts = ", ".join(f"{c}: {n}" for c, n in missing.items())
                raise DataError(
                    f"csv: {path}: every row misses a feature value ({counts}); "
                    "use `missing: impute` or drop those columns"
                )
        try:
            label = binarise(frame[o.label], o.label, o.positive, path)
            s, group_names, group_of = group_codes(
                frame[o.sensitive], o.sensitive, o.groups, o.other, path
            )
        except DataError as exc:  # say what was dropped first: it may be why
            dropped_now = {why: n for why, n in dropped.items() if n}
            if not dropped_now:
                raise
            raise DataError(
                f"{exc} (after dropping {_counts(dropped_now)} of {rows_read} rows)"
            ) from None
        return Profile(
            path,
            sha256_of(path),
            rows_read,
            frame,
            roles,
            label,
            s,
            group_names,
            group_of,
            dropped,
            missing,
            table.duplicates,
            bounds,
        )

    def train_group_sizes(self) -> list[int]:
        """Training rows per group. The split's per-stratum counts, and `n_train`'s
        allocation, do not depend on the seed, so seed 0 stands for every seed."""
        p = self.profile
        (train, _, _), _ = split_rows(self._strata(p), 0, self._record(p), self.name, True)
        return np.bincount(p.s[train], minlength=len(p.group_names)).tolist()

    def notices(self) -> list[str]:
        """The exclusions, duplicates and dropped rows a user must hear about, small groups
        (a `DataError` under `strict`), and "preprocessing not private" without bounds."""
        p = self.profile
        out = [f"csv {p.path.name}: {text}" for text in [p.roles.notice()] if text]
        if p.duplicates:
            out.append(
                f"csv {p.path.name}: header(s) {', '.join(p.duplicates)} appear twice "
                "with identical values; each is kept once"
            )
        dropped = {why: n for why, n in p.rows_dropped.items() if n}
        if dropped:
            out.append(f"csv {p.path.name}: dropped {_counts(dropped)} of {p.rows_read} rows")
        small = [
            (g, n)
            for g, n in zip(p.group_names, self.train_group_sizes(), strict=True)
            if n < MIN_GROUP_TRAIN
        ]
        if small:
            text = (
                f"csv {p.path.name}: group(s) with under {MIN_GROUP_TRAIN} training rows: "
                f"{', '.join(f'{g!r} ({n})' for g, n in small)}; their rates are noisy: "
                "merge them (`other: [...]` or `groups: {VALUE: NAME}`)"
            )
            if self.options.strict:
                raise DataError(f"{text} (strict: true)")
            out.append(text)
        if p.bounds is None:
            out.append(f"csv {p.path.name}: {NOT_PRIVATE}")
        return out

    def load(self, seed: int, root: Path | None = None) -> Task:
        p = self.profile
        given = independent_split(len(p.s), seed) if self.options.split == "per-record" else None
        (train, val, test), record = split_rows(
            self._strata(p), seed, self._record(p), self.name, True, given
        )
        if p.bounds is not None:
            numeric, categorical = (
                pd.DataFrame(index=p.frame.index),
                bounded_features(p.frame, p.bounds),
            )
        else:
            numeric, categorical = _fitted_features(p, train)
        sha = {p.path.name: p.sha256}
        if p.bounds is not None:
            sha[p.bounds.path.name] = p.bounds.sha256
        return build_task(
            name=self.name,
            version=self.version,
            numeric=numeric,
            categorical=categorical,
            y=p.label.y,
            s=p.s,
            label_names=(
                f"{self.options.label} = {p.label.negative}",
                f"{self.options.label} = {p.label.positive}",
            ),
            group_names=p.group_names,
            sensitive_name=self.options.sensitive,
            seed=seed,
            sha256=sha,
            preprocessing=record,
            split=(train, val, test),
        )

    @staticmethod
    def _strata(p: Profile) -> np.ndarray:
        return p.label.y.astype(np.int64) * len(p.group_names) + p.s

    def _record(self, p: Profile) -> dict[str, Any]:
        """The provenance's preprocessing record: options, rows, roles and their privacy."""
        private = p.bounds is not None
        scaling = (
            f"public bounds from {p.bounds.path.name}: clipped, scaled to [-1, 1]"
            if p.bounds is not None
            else "training-split statistics (not private)"
        )
        return {
            **self.options.model_dump(),
            "file": str(p.path),
            "rows_read": p.rows_read,
            "rows": len(p.frame),
            "rows_dropped": p.rows_dropped,
            "label": f"{self.options.label} == {p.label.positive!r} -> 1",
            "groups": p.group_of,
            "numeric": list(p.roles.numeric),
            "categorical": list(p.roles.categorical),
            "excluded": p.roles.excluded,
            "missing_values": p.missing,
            "roles_from": "the bounds file" if private else "the whole file (not private)",
            "numeric_standardised_with": scaling,
            "preprocessing_private": private,
        }


def _check_declarations(o: CsvOptions, bounds: Bounds | None, path: Path) -> None:
    """Options that contradict each other, refused before any value is read."""
    if o.label == o.sensitive:
        raise DataError(f"csv: {path}: the label and the sensitive column are both {o.label!r}")
    for option in ("numeric", "categorical", "drop"):
        for role, column in (("label", o.label), ("sensitive", o.sensitive)):
            if column in getattr(o, option):
                raise DataError(f"csv: {path}: {option}: lists the {role} column {column!r}")
    both = sorted(set(o.numeric) & set(o.categorical))
    if both:
        raise DataError(f"csv: {path}: column {both[0]!r} is declared numeric and categorical")
    if bounds is not None:
        listed = {*bounds.numeric, *bounds.categorical}
        if o.label in listed:
            raise DataError(
                f"csv: bounds {bounds.path}: lists the label {o.label!r}; the label "
                "is not a feature"
            )
        if o.sensitive in listed and not o.include_sensitive:
            raise DataError(
                f"csv: bounds {bounds.path}: lists the sensitive column "
                f"{o.sensitive!r}; set `include_sensitive: true` to make it an "
                "input, or remove it"
            )


def _roles(frame: pd.DataFrame, o: CsvOptions, bounds: Bounds | None, path: Path) -> Roles:
    """Declared by the bounds file, or inferred from the file with the user's overrides."""
    skip = {o.label, *([] if o.include_sensitive else [o.sensitive])}
    candidates = [c for c in frame.columns if c not in skip and c not in o.drop]
    dropped = {c: "dropped (drop:)" for c in o.drop}
    if bounds is None:
        roles = infer_roles(frame, candidates, o.numeric, o.categorical, path)
        return Roles(roles.numeric, roles.categorical, {**roles.excluded, **dropped})
    listed = {*bounds.numeric, *bounds.categorical}
    check_numeric(frame, list(bounds.numeric), path)
    excluded = {c: "not in the bounds file" for c in candidates if c not in listed}
    return Roles(tuple(bounds.numeric), tuple(bounds.categorical), {**excluded, **dropped})


def _fitted_features(p: Profile, train: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Without bounds: numeric columns (missing values: the training median) for `build_task`
    to standardise with training statistics, and categorical ones one-hot over the values
    the training rows take (a missing value is its own category, `(missing)`; a value no
    training row takes is all zeros)."""
    numeric = pd.DataFrame(index=p.frame.index)
    for col in p.roles.numeric:
        x = as_numbers(p.frame[col])
        median = x.iloc[train].median()
        numeric[col] = x.fillna(0.0 if np.isnan(median) else median).astype(np.float64)
    columns: dict[str, np.ndarray] = {}
    for col in p.roles.categorical:
        values = p.frame[col].fillna(MISSING)
        for value in sorted(values.iloc[train].unique()):
            columns[f"{col}={value}"] = (values == value).to_numpy(dtype=np.float32)
    return numeric, pd.DataFrame(columns, index=p.frame.index)


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} ({why})" for why, n in counts.items())
