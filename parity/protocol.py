"""The files the two halves of the parity harness exchange (standard library and numpy only:
imported by the drivers in the authors' environments too).

- split file (JSON, `SPLIT_FORMAT`): which data rows (0-based rows of the data file, header
  excluded) are train / validation / test, in the order the authors' code uses them; the label
  and group index of each row as the authors' code coded them; the feature names; and a digest
  of the features the authors' code trained on (per part and feature: mean and mean of squares),
  so that the other side can check that it rebuilt the same features.
- predictions file (CSV): `row,y,z_index,pred` for every test row of a final model.
- result file (JSON, `RESULT_FORMAT`): one run of one implementation: its schedule, epsilon under
  each accountant that was computed, test error and test demographic-parity gap.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

SPLIT_FORMAT = "fairbench-parity-split/1"
RESULT_FORMAT = "fairbench-parity-result/1"
PARTS = ("train", "val", "test")
PREDICTION_COLUMNS = ("row", "y", "z_index", "pred")
IMPLEMENTATIONS = ("authors", "fairbench")
# the Parkinsons file both authors' repositories read (DP-FERMI's Datasets/Parkinsons/), which
# `parity.data` rebuilds byte for byte from the UCI file
PARKINSONS_PROCESSED = "parkinsons_updrs_processed.csv"
PARKINSONS_PROCESSED_SHA256 = "21dd89771306259668e86b0fc637dabaea7e138470683b9e5efc2ab7881a72ff"


class ProtocolError(ValueError):
    """A parity file that does not say what the format requires."""


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def feature_digest(X: np.ndarray, names: Sequence[str]) -> dict[str, Any]:
    """Per feature (by name, so column order does not matter): mean and mean of squares, in
    float64, and the number of rows."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != len(names):
        raise ProtocolError(f"features of shape {X.shape} for {len(names)} names")
    mean = X.mean(axis=0) if len(X) else np.zeros(len(names))
    sq = (X**2).mean(axis=0) if len(X) else np.zeros(len(names))
    return {
        "n": len(X),
        "mean": {str(n): float(m) for n, m in zip(names, mean, strict=True)},
        "sq": {str(n): float(m) for n, m in zip(names, sq, strict=True)},
    }


def digest_mismatches(
    ours: Mapping[str, Any], theirs: Mapping[str, Any], tol: float = 1e-4
) -> list[str]:
    """What differs between two feature digests (empty: the same features up to `tol`)."""
    bad = []
    if ours["n"] != theirs["n"]:
        bad.append(f"rows {ours['n']} != {theirs['n']}")
    if set(ours["mean"]) != set(theirs["mean"]):
        bad.append(f"features {sorted(set(ours['mean']) ^ set(theirs['mean']))} not on both sides")
    for stat in ("mean", "sq"):
        for name in sorted(set(ours[stat]) & set(theirs[stat])):
            a, b = ours[stat][name], theirs[stat][name]
            if not math.isclose(a, b, rel_tol=tol, abs_tol=tol):
                bad.append(f"{stat} of {name}: {a:.6g} != {b:.6g}")
    return bad


def make_split(
    *,
    method: str,
    source: Mapping[str, Any],
    data_file: str | Path,
    rows: Mapping[str, Sequence[int]],
    y: Mapping[str, Sequence[int]],
    s: Mapping[str, Sequence[int]],
    group_maps: Mapping[str, Mapping[str, int]],
    feature_names: Sequence[str],
    features: Mapping[str, np.ndarray],
    standardised_with: Sequence[str],
) -> dict[str, Any]:
    """A split file's content. `rows`, `y`, `s` and `features` per part ("val" may be empty);
    `group_maps[part]`: group value -> the index the authors' code gave it in that part;
    `standardised_with`: the parts whose statistics z-scored the features."""
    split = {
        "format": SPLIT_FORMAT,
        "method": method,
        "source": dict(source),
        "data": {"file": Path(data_file).name, "sha256": sha256_file(data_file)},
        "rows": {p: [int(r) for r in rows.get(p, [])] for p in PARTS},
        "y": {p: [int(v) for v in y.get(p, [])] for p in PARTS},
        "s": {p: [int(v) for v in s.get(p, [])] for p in PARTS},
        "group_maps": {p: {str(k): int(v) for k, v in m.items()} for p, m in group_maps.items()},
        "feature_names": [str(n) for n in feature_names],
        "standardised_with": list(standardised_with),
        "digest": {
            p: feature_digest(features.get(p, np.zeros((0, len(feature_names)))), feature_names)
            for p in PARTS
        },
    }
    check_split(split)
    return split


def check_split(split: Mapping[str, Any]) -> None:
    """Raise ProtocolError unless `split` is a well-formed split file's content."""
    if split.get("format") != SPLIT_FORMAT:
        raise ProtocolError(f"not a parity split file (format {split.get('format')!r})")
    for key in ("rows", "y", "s", "digest"):
        if set(split.get(key, {})) != set(PARTS):
            raise ProtocolError(f"split file: {key!r} needs the parts {PARTS}")
    seen: set[int] = set()
    for part in PARTS:
        rows = split["rows"][part]
        if len(split["y"][part]) != len(rows) or len(split["s"][part]) != len(rows):
            raise ProtocolError(f"split file: {part}: one label and one group per row")
        if split["digest"][part]["n"] != len(rows):
            raise ProtocolError(f"split file: {part}: digest of {split['digest'][part]['n']} rows")
        if seen & set(rows) or len(set(rows)) != len(rows):
            raise ProtocolError(f"split file: {part}: a row appears twice")
        seen |= set(rows)
    if not split["rows"]["train"] or not split["rows"]["test"]:
        raise ProtocolError("split file: train and test must not be empty")


def write_json(path: str | Path, content: Mapping[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(content, indent=1, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON: {type(value).__name__}")


def read_split(path: str | Path) -> dict[str, Any]:
    split = json.loads(Path(path).read_text())
    check_split(split)
    return split


def write_predictions(
    path: str | Path,
    rows: Sequence[int],
    y: Sequence[int],
    z_index: Sequence[int],
    pred: Sequence[int],
) -> None:
    columns = [np.asarray(c, dtype=np.int64) for c in (rows, y, z_index, pred)]
    if len({len(c) for c in columns}) != 1:
        raise ProtocolError("predictions: one row, label, group and prediction per test row")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(PREDICTION_COLUMNS)
        writer.writerows(zip(*(c.tolist() for c in columns), strict=True))


def read_predictions(path: str | Path) -> dict[str, np.ndarray]:
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        header = tuple(next(reader))
        if header != PREDICTION_COLUMNS:
            raise ProtocolError(f"{path}: columns {header}, expected {PREDICTION_COLUMNS}")
        body = np.array([[int(v) for v in line] for line in reader], dtype=np.int64)
    body = body.reshape(-1, len(PREDICTION_COLUMNS))
    return {name: body[:, i] for i, name in enumerate(PREDICTION_COLUMNS)}


def error_and_gap(y: np.ndarray, z: np.ndarray, pred: np.ndarray) -> tuple[float, float]:
    """Test error and demographic-parity gap (largest minus smallest positive-prediction rate
    over groups; for two groups the absolute difference, what both authors' codes report)."""
    y, z, pred = (np.asarray(a) for a in (y, z, pred))
    rates = [float((pred[z == g] == 1).mean()) for g in np.unique(z)]
    return float((pred != y).mean()), max(rates) - min(rates)


def agreement(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> float:
    """Share of test rows on which two prediction files agree (the same rows required)."""
    order_a, order_b = np.argsort(a["row"]), np.argsort(b["row"])
    if not np.array_equal(a["row"][order_a], b["row"][order_b]):
        raise ProtocolError("predictions on different test rows")
    return float((a["pred"][order_a] == b["pred"][order_b]).mean())


def make_result(
    *,
    method: str,
    implementation: str,
    setting: str,
    knob: float,
    seed: int,
    steps: int,
    sampling_rate: float | None,
    delta: float,
    epsilon: Mapping[str, float | None],
    test_error: float,
    test_gap: float,
    wall_seconds: float,
    sizes: Mapping[str, int],
    settings: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A result file's content. `epsilon`: accountant name ("authors", "fairbench", ...) ->
    the epsilon it gives this run's schedule (None: not computed)."""
    if implementation not in IMPLEMENTATIONS:
        raise ProtocolError(f"implementation {implementation!r} not in {IMPLEMENTATIONS}")
    return {
        "format": RESULT_FORMAT,
        "method": method,
        "implementation": implementation,
        "setting": setting,
        "knob": float(knob),
        "seed": int(seed),
        "steps": int(steps),
        "sampling_rate": None if sampling_rate is None else float(sampling_rate),
        "delta": float(delta),
        "epsilon": {k: (None if v is None else float(v)) for k, v in epsilon.items()},
        "test_error": float(test_error),
        "test_gap": float(test_gap),
        "wall_seconds": float(wall_seconds),
        "sizes": {k: int(v) for k, v in sizes.items()},
        "settings": dict(settings),
        "extra": dict(extra or {}),
    }


def read_result(path: str | Path) -> dict[str, Any]:
    result = json.loads(Path(path).read_text())
    if result.get("format") != RESULT_FORMAT:
        raise ProtocolError(f"{path}: not a parity result file")
    return result
