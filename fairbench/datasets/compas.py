"""ProPublica COMPAS two-year recidivism (Angwin et al., "Machine Bias", 2016): predict
two_year_recid; sensitive attribute race or sex.

Preprocessing, as ProPublica's analysis and the fairness papers that reuse it:

- ProPublica's row filter: days_b_screening_arrest within [-30, 30] (rows where it is missing
  are dropped too, as R's `filter` does), is_recid != -1, c_charge_degree != "O" and
  score_text != "N/A". 6,172 of the 7,214 rows remain; in this file only the first condition
  removes rows.
- Groups: `race_bw` (default) African-American vs Caucasian, the comparison ProPublica
  reports; rows of the other four races are dropped (5,278 rows remain; provenance records how
  many were dropped). `race` keeps all 6 values; `sex` uses Male / Female.
- Inputs: age, juv_fel_count, juv_misd_count, juv_other_count and priors_count (standardised
  with training statistics), c_charge_degree one-hot (F, M), and the demographic attribute that
  is not the sensitive one (sex, or race with its 6 values) one-hot. As in `adult`, the
  sensitive attribute is not an input unless `include_sensitive: true`.
- Left out: decile_score and the other COMPAS scores (they are the tool's own prediction, the
  object of the audit, not an input a fair learner should copy), age_cat (a binning of age),
  ids, names, dates, case numbers, charge descriptions and every recidivism-outcome column
  other than the label.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from fairbench.datasets.base import Dataset, DatasetOptions, build_task, one_hot, read_table
from fairbench.datasets.files import DataFile
from fairbench.errors import DataError
from fairbench.task import Task

SOURCE = "https://raw.githubusercontent.com/propublica/compas-analysis/master"
LABEL = "two_year_recid"
NUMERIC = ("age", "juv_fel_count", "juv_misd_count", "juv_other_count", "priors_count")
FILTER = ("days_b_screening_arrest", "is_recid", "c_charge_degree", "score_text")
COLUMNS = (*NUMERIC, "sex", "race", *FILTER, LABEL)
RACES = ["African-American", "Caucasian", "Hispanic", "Other", "Asian", "Native American"]
SEXES = ["Male", "Female"]
DEGREES = ["F", "M"]  # felony, misdemeanour ("O" rows are filtered out)
FILTER_TEXT = (
    "ProPublica: -30 <= days_b_screening_arrest <= 30, is_recid != -1, "
    "c_charge_degree != 'O', score_text != 'N/A'"
)


class CompasOptions(DatasetOptions):
    sensitive: Literal["race_bw", "race", "sex"] = Field(
        "race_bw", description="race_bw (African-American vs Caucasian), race (6 values) or sex"
    )
    include_sensitive: bool = Field(False, description="the group attribute is also a model input")


def propublica_filter(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows ProPublica's analysis keeps (a missing screening gap fails the range test)."""
    keep = (
        frame["days_b_screening_arrest"].between(-30, 30)
        & (frame["is_recid"] != -1)
        & (frame["c_charge_degree"] != "O")
        & (frame["score_text"] != "N/A")
    )
    return frame[keep].reset_index(drop=True)


def read_raw(path: Path) -> pd.DataFrame:
    """The columns the adapter uses, typed, or one `DataError` naming the fix.

    "N/A" is kept as text (ProPublica's filter compares score_text to it); only empty fields
    are missing.
    """
    frame = read_table(path, "compas", COLUMNS, keep_default_na=False, na_values=[""])
    frame = frame[list(COLUMNS)]
    try:
        for col in (*NUMERIC, "days_b_screening_arrest", "is_recid", LABEL):
            frame[col] = pd.to_numeric(frame[col], errors="raise")
    except (ValueError, TypeError) as exc:
        raise DataError(
            f"compas: {path} has a non-numeric value ({exc}); run `fairbench data fetch compas`"
        ) from None
    return frame


def check_values(frame: pd.DataFrame, path: Path) -> None:
    """Refuse filtered rows with an empty input, or a code or label outside the vocabulary."""
    empty = [c for c in NUMERIC if frame[c].isna().any()]
    if empty:
        raise DataError(
            f"compas: {path} has empty {', '.join(empty)} in kept rows; the file is corrupted: "
            "run `fairbench data fetch compas`"
        )
    for col, vocab in (
        ("c_charge_degree", DEGREES),
        ("sex", SEXES),
        ("race", RACES),
        (LABEL, [0, 1]),
    ):
        unknown = set(frame[col].unique()) - set(vocab)
        if unknown:
            raise DataError(
                f"compas: {path} has {col} value(s) {sorted(map(str, unknown))} outside "
                f"{vocab}; the file is corrupted: run `fairbench data fetch compas`"
            )


class Compas(Dataset):
    name = "compas"
    description = "ProPublica COMPAS (6,172 rows filtered): two-year recidivism, race or sex"
    version = "propublica-2016"
    files = (
        DataFile(
            "compas/compas-scores-two-years.csv",
            "c451db85908b2f7fef1d83203bedf6b71ecda0d5af468d82ae62178f91d0cc7d",
            f"{SOURCE}/compas-scores-two-years.csv",
        ),
    )
    Options = CompasOptions
    options: CompasOptions

    def load(self, seed: int, root: Path | None = None) -> Task:
        ((name, path),) = self.locate(root).items()
        o = self.options
        frame = propublica_filter(read_raw(path))
        check_values(frame, path)
        filtered = len(frame)
        races = RACES
        if o.sensitive == "race_bw":
            races = ["African-American", "Caucasian"]
            frame = frame[frame["race"].isin(races)].reset_index(drop=True)
        column = "sex" if o.sensitive == "sex" else "race"
        groups = SEXES if column == "sex" else races
        vocab = {"c_charge_degree": DEGREES, "sex": SEXES, "race": races}
        if not o.include_sensitive:
            del vocab[column]
        return build_task(
            name=self.name,
            version=self.version,
            numeric=frame[list(NUMERIC)].astype(np.float64),
            categorical=one_hot(frame, vocab),
            y=frame[LABEL].to_numpy(),
            s=frame[column].map({g: i for i, g in enumerate(groups)}).to_numpy(),
            label_names=("no recidivism in two years", "recidivism in two years"),
            group_names=tuple(groups),
            sensitive_name=column,
            seed=seed,
            sha256={name: self.files[0].sha256},
            preprocessing={
                "filter": FILTER_TEXT,
                "rows_after_filter": filtered,
                "rows_dropped_other_races": filtered - len(frame),
                "rows": len(frame),
                **o.model_dump(),
                "excluded": "decile_score and other COMPAS scores, age_cat, ids, dates, text",
            },
        )
