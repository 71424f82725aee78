"""The dataset adapter interface and the preprocessing every adapter shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from fairbench.datasets.files import DataFile, fetch, locate
from fairbench.datasets.subsample import subsample_train
from fairbench.errors import ConfigError, DataError
from fairbench.streams import numpy_stream
from fairbench.task import Provenance, Split, Task

TEST_FRACTION = 0.25
VAL_FRACTION = 0.15  # of the training part
# a dataset option the runner reads itself: the seed of the split when it is not the trial's
# (private selection's candidates share one split and draw independent noise)
SPLIT_SEED = "split_seed"


class DatasetOptions(BaseModel):
    """Base for adapter options: unknown keys are errors, never silently ignored.

    Every adapter inherits `n_train` (subsample the training part, see `build_task`). While
    unset it is left out of the dump, so the trial ids and provenance of configs that never
    set it are what they were before the option existed; an adapter's options added later
    are listed in `OMITTED_AT` with the value at which they are left out likewise.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    OMITTED_AT: ClassVar[dict[str, Any]] = {"n_train": None}

    n_train: int | None = Field(None, ge=1, description="training rows to keep (stratified)")

    @model_serializer(mode="wrap")
    def _omit_later_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key, value in self.OMITTED_AT.items():
                if key in data and data[key] == value:
                    del data[key]
        return data


class Dataset(ABC):
    """A dataset adapter: raw files in, a split and preprocessed `Task` out.

    Options are explicit and validated at construction (scikit-learn style); `load(seed)` is
    deterministic given the seed, which fixes the train/validation/test split.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    version: ClassVar[str]
    files: ClassVar[tuple[DataFile, ...]] = ()
    Options: ClassVar[type[DatasetOptions]] = DatasetOptions

    def __init__(self, **options: Any) -> None:
        try:
            self.options = self.Options(**options)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ConfigError(
                f"dataset {self.name}: option {where!r}: {err['msg']} "
                f"(valid options: {', '.join(self.Options.model_fields)})"
            ) from None

    def locate(self, root: Path | None = None) -> dict[str, Path]:
        """Paths of the verified raw files (raises `DataError` if missing or corrupted)."""
        return locate(self.name, self.files, root)

    def fetch(self, root: Path | None = None) -> list[Path]:
        """Download the raw files from their public source, verified before they land."""
        return fetch(self.name, self.files, root)

    def resolved_options(self) -> dict[str, Any]:
        """The options a run records for this adapter. A built-in's files are pinned by their
        checksums, so its options as given; a user's file adds its checksum (`csv_file`), so
        that a changed file gives new trial ids instead of resuming stale results."""
        return self.options.model_dump()

    def notices(self) -> list[str]:
        """Warnings a run on this data starts with (`expand` prints them); none for the
        built-ins, whose cards document their preprocessing. May raise a `FairbenchError`
        for data a run must refuse."""
        return []

    @abstractmethod
    def load(self, seed: int, root: Path | None = None) -> Task:
        """Read, preprocess and split the data; the seed fixes the split."""


def stratified_split(strata: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train / validation / test indices, stratified on `strata` (e.g. label x group).

    Test takes 25% of every stratum, validation 15% of what remains; each part is sorted so
    that the split depends on the seed only, not on iteration order.
    """
    rng = numpy_stream(seed, "split")
    parts: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    for value in np.unique(strata):
        idx = rng.permutation(np.flatnonzero(strata == value))
        n_test = round(TEST_FRACTION * len(idx))
        n_val = round(VAL_FRACTION * (len(idx) - n_test))
        parts[2].append(idx[:n_test])
        parts[1].append(idx[n_test : n_test + n_val])
        parts[0].append(idx[n_test + n_val :])
    train, val, test = (np.sort(np.concatenate(p)) for p in parts)
    return train, val, test


def independent_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train / validation / test indices with each record's part decided by its own coin
    (test with probability 25%, validation 15% of the rest, else train), independently of
    every other record and of the data: adding or removing a record moves no other record
    between parts, which the add/remove analysis of a release that trains on one part and
    scores on another needs (a stratified split does not give it). Parts' sizes are random."""
    u = numpy_stream(seed, "split").random(n)
    val_end = TEST_FRACTION + (1 - TEST_FRACTION) * VAL_FRACTION
    test, val = u < TEST_FRACTION, (u >= TEST_FRACTION) & (u < val_end)
    return np.flatnonzero(~(test | val)), np.flatnonzero(val), np.flatnonzero(test)


def unit_split(
    units: np.ndarray, strata: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train / validation / test indices keeping every unit (e.g. a subject with several
    recordings) in one part. Within each stratum (a property constant per unit, e.g. sex),
    units are shuffled and taken until the part has its share of that stratum's rows (25%
    test, 15% of the rest validation), so every stratum appears in every part when it has
    at least three units."""
    rng = numpy_stream(seed, "split")
    parts: tuple[list, list, list] = ([], [], [])
    for value in np.unique(strata):
        order = rng.permutation(np.unique(units[strata == value]))
        sizes = np.array([(units == u).sum() for u in order])
        done = np.cumsum(sizes)
        n_test = min(len(order) - 2, int(np.searchsorted(done, TEST_FRACTION * done[-1])) + 1)
        rest = done[n_test:] - done[n_test - 1]
        n_val = min(len(rest) - 1, int(np.searchsorted(rest, VAL_FRACTION * rest[-1])) + 1)
        for part, chosen in zip(
            parts,
            (order[n_test + n_val :], order[n_test : n_test + n_val], order[:n_test]),
            strict=True,
        ):
            part.append(np.flatnonzero(np.isin(units, chosen)))
    train, val, test = (np.sort(np.concatenate(p)) for p in parts)
    return train, val, test


def read_table(path: Path, dataset: str, columns: Sequence[str], **read_csv: Any) -> pd.DataFrame:
    """A CSV file with the columns an adapter needs, or one clear `DataError`."""
    try:
        frame = pd.read_csv(path, **read_csv)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(
            f"{dataset}: cannot parse {path} ({exc}); run `fairbench data fetch {dataset}`"
        ) from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DataError(
            f"{dataset}: {path} lacks column(s) {', '.join(missing)}; it is not the expected "
            f"file: run `fairbench data fetch {dataset}`"
        )
    return frame


def one_hot(frame: pd.DataFrame, vocabularies: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """One-hot encode categorical columns over a public vocabulary.

    A category of the vocabulary that no row of `frame` takes would give a constant zero
    column; it is left out (this depends only on the checksummed raw file, not on the split).
    """
    columns = {}
    for col, vocab in vocabularies.items():
        unknown = set(frame[col].unique()) - set(vocab)
        if unknown:
            raise ValueError(f"column {col} has values outside its vocabulary: {sorted(unknown)}")
        for value in vocab:
            indicator = (frame[col] == value).to_numpy(dtype=np.float32)
            if indicator.any():
                columns[f"{col}={value}"] = indicator
    return pd.DataFrame(columns, index=frame.index)


def _check_groups(
    name: str, s: np.ndarray, group_names: Sequence[str], parts: Mapping[str, np.ndarray]
) -> None:
    """Every group must have rows in every part: a rate of an empty group is undefined."""
    for part, idx in parts.items():
        present = np.bincount(s[idx], minlength=len(group_names))
        if (present == 0).any():
            empty = group_names[int(np.argmax(present == 0))]
            raise DataError(
                f"{name}: group {empty!r} has no rows in the {part} split; choose another "
                "sensitive attribute or merge small groups (see the dataset card's options)"
            )


def _features(numeric: pd.DataFrame, categorical: pd.DataFrame, train: np.ndarray) -> np.ndarray:
    """Numeric columns standardised with the training rows' statistics (a zero spread is left
    unscaled), then the one-hot columns, as float32."""
    num = numeric.to_numpy(dtype=np.float64)
    mean = num[train].mean(axis=0)
    std = num[train].std(axis=0)
    std[std == 0] = 1.0
    return np.hstack([(num - mean) / std, categorical.to_numpy(dtype=np.float64)]).astype(
        np.float32
    )


def build_task(
    *,
    name: str,
    version: str,
    numeric: pd.DataFrame,
    categorical: pd.DataFrame,
    y: np.ndarray,
    s: np.ndarray,
    label_names: Sequence[str],
    group_names: Sequence[str],
    sensitive_name: str,
    seed: int,
    sha256: Mapping[str, str],
    preprocessing: Mapping[str, Any],
    split: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> Task:
    """Split and standardise numeric columns with train statistics.

    Unless the adapter passes its own `split` (train, validation, test indices), classification
    splits are stratified on label x group and regression ones on group. Every group must have
    rows in every part, or the task is refused. The standardisation statistics are computed on
    the training part without privacy: a documented exception inherited from prior work.

    `preprocessing["n_train"]` (the adapter's options, which every adapter records there)
    subsamples the training part after the split, stratified like it, on a stream of its own;
    validation and test are untouched, so error and violation are measured on the same
    held-out rows as the full task, and standardisation uses the kept rows only.
    """
    s = np.asarray(s, dtype=np.int64)
    if label_names:
        y = np.asarray(y, dtype=np.int64)
        strata = y * len(group_names) + s
    else:
        y = np.asarray(y, dtype=np.float64)
        strata = s
    (train, val, test), preprocessing = split_rows(
        strata, seed, preprocessing, name, bool(label_names), split
    )
    _check_groups(name, s, group_names, {"train": train, "validation": val, "test": test})
    X = _features(numeric, categorical, train)
    feature_names = (*numeric.columns, *categorical.columns)

    def part(idx: np.ndarray) -> Split:
        return Split(X=np.ascontiguousarray(X[idx]), y=y[idx], s=s[idx])

    return Task(
        name=name,
        train=part(train),
        val=part(val),
        test=part(test),
        feature_names=tuple(str(f) for f in feature_names),
        label_names=tuple(label_names),
        group_names=tuple(group_names),
        sensitive_name=sensitive_name,
        provenance=Provenance(
            dataset=name,
            version=version,
            sha256=dict(sha256),
            preprocessing=_recorded(preprocessing),
            split_seed=seed,
        ),
    )


def split_rows(
    strata: np.ndarray,
    seed: int,
    preprocessing: Mapping[str, Any],
    name: str,
    classification: bool,
    split: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], Mapping[str, Any]]:
    """The (train, validation, test) indices `build_task` uses, and the preprocessing record
    saying how the training rows were kept (`n_train`). An adapter that must fit its
    preprocessing on the training rows before `build_task` (a user CSV's imputation and
    category lists) calls this first and passes both results on: a record that already says
    it was subsampled is not subsampled again, so both see the same rows."""
    train, val, test = split if split is not None else stratified_split(strata, seed)
    if preprocessing.get("n_train") is not None and (
        "train_rows_before_subsample" not in preprocessing
    ):
        train, preprocessing = _subsampled(train, strata, preprocessing, seed, name, classification)
    return (train, val, test), preprocessing


def _subsampled(train, strata, preprocessing, seed, name, classification: bool):
    """The kept training rows, and the preprocessing record saying how they were kept."""
    preprocessing = {
        **preprocessing,
        "train_rows_before_subsample": len(train),
        "subsample": f"stratified on {'label x group' if classification else 'group'}, "
        "proportional with >= 1 row per stratum, seeded by the split seed on its own "
        "stream; validation and test untouched",
    }
    return subsample_train(train, strata, preprocessing["n_train"], seed, name), preprocessing


def _recorded(preprocessing: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **preprocessing,
        "numeric_standardised_with": preprocessing.get(
            "numeric_standardised_with", "training-split statistics (not private)"
        ),
        "split": preprocessing.get("split", "stratified on label x group")
        + ": 25% test, 15% of the rest validation",
    }
