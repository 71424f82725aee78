"""UCI Statlog German Credit (Hofmann 1994): 1,000 loan applicants, 20 coded attributes;
predict good credit; sensitive attribute sex or age. The suite's small-data regime.

Preprocessing:

- Label: class 1 "good" is the positive class (y = 1; 700 rows), class 2 "bad" is y = 0, so
  that a positive prediction is the favourable outcome, as for the other datasets.
- The 13 qualitative attributes are one-hot encoded over the code vocabulary of the UCI
  documentation (A11..A14, A30..A34, ...); a code no row takes (A47, A95) gives no column. The
  7 numeric attributes are standardised with training statistics.
- Groups: `sex` (default) from attribute 9, personal status and sex: A91, A93, A94 male, A92,
  A95 female. `age`: attribute 13 > 25 (Kamiran & Calders 2009).
- As in `adult`, the sensitive attribute is not an input unless `include_sensitive: true`.
  With `sex`, that drops attribute 9 whole: its codes mix marital status with sex (A92 is
  "female: divorced/separated/married", A91 "male: divorced/separated"), so no sex-free
  marital status can be derived from it. With `age`, the age column is dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from fairbench.datasets.base import Dataset, DatasetOptions, build_task, one_hot
from fairbench.datasets.files import DataFile
from fairbench.errors import DataError
from fairbench.task import Task

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/statlog/german"
# attribute number (1-based, UCI `german.doc`) -> name, and the code vocabulary when qualitative
ATTRIBUTES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("checking_status", ("A11", "A12", "A13", "A14")),
    ("duration_months", ()),
    ("credit_history", ("A30", "A31", "A32", "A33", "A34")),
    ("purpose", tuple(f"A4{i}" for i in range(11))),  # A40..A49, A410
    ("credit_amount", ()),
    ("savings", ("A61", "A62", "A63", "A64", "A65")),
    ("employment_since", ("A71", "A72", "A73", "A74", "A75")),
    ("installment_rate", ()),
    ("personal_status_sex", ("A91", "A92", "A93", "A94", "A95")),
    ("other_debtors", ("A101", "A102", "A103")),
    ("residence_since", ()),
    ("property", ("A121", "A122", "A123", "A124")),
    ("age", ()),
    ("other_installment_plans", ("A141", "A142", "A143")),
    ("housing", ("A151", "A152", "A153")),
    ("existing_credits", ()),
    ("job", ("A171", "A172", "A173", "A174")),
    ("people_liable", ()),
    ("telephone", ("A191", "A192")),
    ("foreign_worker", ("A201", "A202")),
)
COLUMNS = (*(name for name, _ in ATTRIBUTES), "class")
NUMERIC = tuple(name for name, codes in ATTRIBUTES if not codes)
VOCABULARY = {name: list(codes) for name, codes in ATTRIBUTES if codes}
FEMALE = ("A92", "A95")
AGE_THRESHOLD = 25


class GermanOptions(DatasetOptions):
    sensitive: Literal["sex", "age"] = Field(
        "sex", description="sex (attribute 9) or age > 25 (attribute 13)"
    )
    include_sensitive: bool = Field(False, description="the group attribute is also a model input")


def read_raw(path: Path) -> pd.DataFrame:
    """Parse `german.data` strictly: 21 space-separated fields a line, UCI codes, class 1 or 2."""
    rows = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != len(COLUMNS):
                raise DataError(
                    f"german: {path} line {lineno} has {len(fields)} fields, expected "
                    f"{len(COLUMNS)}; the file is truncated or corrupted: run "
                    "`fairbench data fetch german`"
                )
            rows.append(fields)
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    try:
        for col in (*NUMERIC, "class"):
            frame[col] = pd.to_numeric(frame[col], errors="raise").astype(np.int64)
    except ValueError as exc:
        raise DataError(
            f"german: {path} has a non-numeric value ({exc}); run `fairbench data fetch german`"
        ) from None
    known: dict[str, list[str] | list[int]] = {**VOCABULARY, "class": [1, 2]}
    for col, codes in known.items():
        unknown = set(frame[col].unique()) - set(codes)
        if unknown:
            raise DataError(
                f"german: {path} has {col} value(s) {sorted(map(str, unknown))} outside the "
                "UCI code list; the file is corrupted: run `fairbench data fetch german`"
            )
    return frame


class German(Dataset):
    name = "german"
    description = "UCI Statlog German credit (1,000 rows): good credit, sensitive sex or age"
    version = "uci-1994"
    files = (
        DataFile(
            "german/german.data",
            "b21f3d81db8071257d5ff1deaeba1fd4303b62712e6fcc9715c7a86202cb5871",
            f"{UCI}/german.data",
        ),
    )
    Options = GermanOptions
    options: GermanOptions

    def load(self, seed: int, root: Path | None = None) -> Task:
        ((name, path),) = self.locate(root).items()
        frame = read_raw(path)
        o = self.options
        vocab, numeric = dict(VOCABULARY), list(NUMERIC)
        if o.sensitive == "sex":
            s = frame["personal_status_sex"].isin(FEMALE).to_numpy()
            groups = ("male", "female")
            if not o.include_sensitive:
                del vocab["personal_status_sex"]
        else:
            s = (frame["age"] > AGE_THRESHOLD).to_numpy()
            groups = (f"age <= {AGE_THRESHOLD}", f"age > {AGE_THRESHOLD}")
            if not o.include_sensitive:
                numeric.remove("age")
        return build_task(
            name=self.name,
            version=self.version,
            numeric=frame[numeric].astype(np.float64),
            categorical=one_hot(frame, vocab),
            y=(frame["class"] == 1).to_numpy(),
            s=s,
            label_names=("bad credit", "good credit"),
            group_names=groups,
            sensitive_name=o.sensitive,
            seed=seed,
            sha256={name: self.files[0].sha256},
            preprocessing={
                "rows": len(frame),
                **o.model_dump(),
                "label": "class 1 (good) -> 1, class 2 (bad) -> 0",
                "groups": "sex: A92, A95 female" if o.sensitive == "sex" else "age > 25",
            },
        )
