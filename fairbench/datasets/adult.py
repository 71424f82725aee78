"""UCI Adult (Census Income, Kohavi & Becker 1996): predict income > 50K; sensitive attribute sex.

Preprocessing, as in the prior work the method papers compare against:

- `adult.data` and `adult.test` are concatenated (48,842 rows) and re-split by seed (75/25
  train/test, stratified on label x group; 15% of train held out for validation), as DP-FERMI
  describes ("around 48,000 entries ... combine ... train-test split of 3:1").
- Missing values (`?` in workclass, occupation, native-country; 3,620 rows) are kept as a
  category of their own by default (`missing: category`), which is what one-hot encoding the
  raw file does in DP-FERMI's public loader. `missing: drop` removes those rows instead
  (45,222 rows remain).
- Label: income `>50K` (class 1) vs `<=50K` (class 0); the test file's trailing periods are
  stripped.
- Categoricals are one-hot encoded over the vocabulary published in `adult.names` (plus `?`
  when kept); a category no kept row takes is left out (with `missing: drop`, that is
  workclass=Never-worked, whose rows all lack an occupation). The six numeric columns
  (fnlwgt included) are standardised with training statistics.
- The sensitive attribute (sex by default, or race with its 5 values) is not a model input
  unless `include_sensitive: true`.

Resulting input features: 106 by default; 102 with `missing: drop`, the count prior work
reports (it also reports ~48,000 rows, which only keeping the `?` rows gives: the two
statements cannot both hold with the public vocabulary). Add 2 when sex is an input.
On this split, scikit-learn's LogisticRegression reaches 0.8526 mean test accuracy over seeds
0-9 with the default and 0.8478 with `missing: drop`.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from fairbench.datasets.base import Dataset, DatasetOptions, build_task, one_hot
from fairbench.datasets.files import DataFile
from fairbench.errors import DataError
from fairbench.task import Task

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult"
COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
)
NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")
VOCABULARY = {
    "workclass": [
        "Private",
        "Self-emp-not-inc",
        "Self-emp-inc",
        "Federal-gov",
        "Local-gov",
        "State-gov",
        "Without-pay",
        "Never-worked",
    ],
    "education": [
        "Bachelors",
        "Some-college",
        "11th",
        "HS-grad",
        "Prof-school",
        "Assoc-acdm",
        "Assoc-voc",
        "9th",
        "7th-8th",
        "12th",
        "Masters",
        "1st-4th",
        "10th",
        "Doctorate",
        "5th-6th",
        "Preschool",
    ],
    "marital-status": [
        "Married-civ-spouse",
        "Divorced",
        "Never-married",
        "Separated",
        "Widowed",
        "Married-spouse-absent",
        "Married-AF-spouse",
    ],
    "occupation": [
        "Tech-support",
        "Craft-repair",
        "Other-service",
        "Sales",
        "Exec-managerial",
        "Prof-specialty",
        "Handlers-cleaners",
        "Machine-op-inspct",
        "Adm-clerical",
        "Farming-fishing",
        "Transport-moving",
        "Priv-house-serv",
        "Protective-serv",
        "Armed-Forces",
    ],
    "relationship": [
        "Wife",
        "Own-child",
        "Husband",
        "Not-in-family",
        "Other-relative",
        "Unmarried",
    ],
    "race": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
    "sex": ["Male", "Female"],
    "native-country": [
        "United-States",
        "Cambodia",
        "England",
        "Puerto-Rico",
        "Canada",
        "Germany",
        "Outlying-US(Guam-USVI-etc)",
        "India",
        "Japan",
        "Greece",
        "South",
        "China",
        "Cuba",
        "Iran",
        "Honduras",
        "Philippines",
        "Italy",
        "Poland",
        "Jamaica",
        "Vietnam",
        "Mexico",
        "Portugal",
        "Ireland",
        "France",
        "Dominican-Republic",
        "Laos",
        "Ecuador",
        "Taiwan",
        "Haiti",
        "Columbia",
        "Hungary",
        "Guatemala",
        "Nicaragua",
        "Scotland",
        "Thailand",
        "Yugoslavia",
        "El-Salvador",
        "Trinadad&Tobago",
        "Peru",
        "Hong",
        "Holand-Netherlands",
    ],
}
LABELS = ("<=50K", ">50K")
MISSING = "?"


class AdultOptions(DatasetOptions):
    sensitive: Literal["sex", "race"] = Field(
        "sex", description="group attribute: sex (2 groups) or race (5)"
    )
    include_sensitive: bool = Field(False, description="the group attribute is also a model input")
    missing: Literal["drop", "category"] = Field(
        "category", description="rows with '?': a category of their own, or dropped"
    )


def read_raw(path: Path) -> pd.DataFrame:
    """Parse one raw Adult file strictly: every data line must have 15 fields and a known label.

    Skips blank lines and the `|1x3 Cross validator` banner of `adult.test`.
    """
    rows = []
    with path.open(newline="") as fh:
        for lineno, fields in enumerate(csv.reader(fh, skipinitialspace=True), start=1):
            if not fields or (len(fields) == 1 and fields[0].startswith("|")):
                continue
            if len(fields) != len(COLUMNS):
                raise DataError(
                    f"adult: {path} line {lineno} has {len(fields)} fields, expected "
                    f"{len(COLUMNS)}; the file is truncated or corrupted: run "
                    "`fairbench data fetch adult` to restore it"
                )
            fields = [f.strip() for f in fields]
            fields[-1] = fields[-1].rstrip(".")
            if fields[-1] not in LABELS:
                raise DataError(
                    f"adult: {path} line {lineno} has income {fields[-1]!r}, expected one of "
                    f"{LABELS}; the file is corrupted: run `fairbench data fetch adult`"
                )
            rows.append(fields)
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for col in NUMERIC:
        frame[col] = pd.to_numeric(frame[col], errors="raise").astype(np.float64)
    return frame


class Adult(Dataset):
    name = "adult"
    description = "UCI Adult census income (48,842 rows): income >50K, sensitive sex or race"
    version = "uci-1996"
    files = (
        DataFile(
            "adult/adult.data",
            "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
            f"{UCI}/adult.data",
        ),
        DataFile(
            "adult/adult.test",
            "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
            f"{UCI}/adult.test",
        ),
    )
    Options = AdultOptions
    options: AdultOptions

    def load(self, seed: int, root: Path | None = None) -> Task:
        paths = self.locate(root)
        frame = pd.concat([read_raw(p) for p in paths.values()], ignore_index=True)
        opts = self.options
        vocabulary = dict(VOCABULARY)
        if opts.missing == "drop":
            frame = frame[~(frame == MISSING).any(axis=1)].reset_index(drop=True)
        else:
            vocabulary = {c: [*v, MISSING] for c, v in vocabulary.items()}
        groups = VOCABULARY[opts.sensitive]
        inputs = {
            c: v for c, v in vocabulary.items() if opts.include_sensitive or c != opts.sensitive
        }
        try:
            categorical = one_hot(frame, inputs)
        except ValueError as exc:
            raise DataError(f"adult: {exc}; run `fairbench data fetch adult`") from None
        return build_task(
            name=self.name,
            version=self.version,
            numeric=frame[list(NUMERIC)],
            categorical=categorical,
            y=(frame["income"] == LABELS[1]).to_numpy(),
            s=frame[opts.sensitive].map({g: i for i, g in enumerate(groups)}).to_numpy(),
            label_names=LABELS,
            group_names=groups,
            sensitive_name=opts.sensitive,
            seed=seed,
            sha256={p: self.files[i].sha256 for i, p in enumerate(paths)},
            preprocessing={"rows": len(frame), **opts.model_dump()},
        )
