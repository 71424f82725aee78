"""UCI Default of Credit Card Clients (Yeh & Lien 2009): predict default next month;
sensitive attribute SEX.

Source files, in the order looked for under `credit/`:
- `default_of_credit_card_clients.csv` (a comma-separated export of the workbook's values),
- `default of credit card clients.csv` (the same values, semicolon-separated),
- `default of credit card clients.xls` (the UCI workbook; needs the `xls` extra: xlrd).

No verified checksum of the UCI workbook exists, so every format is verified by a sha256 of its
30,000 x 25 integer values, which must equal that of the checksummed CSV.

Preprocessing, as prior work (85 input features):
- The undocumented codes are merged into "others": EDUCATION 0, 5, 6 → 4, and MARRIAGE 0 → 3.
- EDUCATION, MARRIAGE and the six repayment statuses PAY_0, PAY_2..PAY_6 are one-hot encoded
  over the values the file takes. PAY_* take -2 and 0 besides the documented -1 and 1..9.
- LIMIT_BAL, AGE, BILL_AMT1-6 and PAY_AMT1-6 are standardised with training statistics.
- ID is dropped. SEX (1 male, 2 female) is not an input unless `include_sensitive: true`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import Field

from fairbench.datasets.base import Dataset, DatasetOptions, build_task, one_hot, read_table
from fairbench.datasets.files import DataFile, data_root, locate, sha256_of
from fairbench.errors import DataError
from fairbench.task import Task

LABEL = "default payment next month"
PAY = ("PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6")
AMOUNTS = (
    "LIMIT_BAL",
    "AGE",
    *(f"BILL_AMT{i}" for i in range(1, 7)),
    *(f"PAY_AMT{i}" for i in range(1, 7)),
)
COLUMNS = ("ID", "LIMIT_BAL", "SEX", "EDUCATION", "MARRIAGE", "AGE", *PAY, *AMOUNTS[2:], LABEL)
VALUES_SHA256 = "7d0c12ad5a87c1ba4b09d18a85664be31614e173fe5fb6feca9bfb568e3f6749"
UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/00350"
CSV = DataFile(
    "credit/default_of_credit_card_clients.csv",
    "4edce6da569b2c30788a85fd98a9bafb1a983e8ca1a7aac875dd7ff853cbd0bb",
    "",  # a derived export: users fetch the workbook
)
SEMICOLON = DataFile(
    "credit/default of credit card clients.csv",
    "116c62783a92c39d827f663d93fe5a64ad62bd1967df3b7884412518a2365c03",
    "",
)
XLS = DataFile(
    "credit/default of credit card clients.xls",
    "",
    f"{UCI}/default%20of%20credit%20card%20clients.xls",
)


class CreditOptions(DatasetOptions):
    include_sensitive: bool = Field(False, description="SEX is also a model input")


def read_values(path: Path) -> pd.DataFrame:
    """The 25 integer columns from any of the three formats."""
    if path.suffix == ".xls":
        try:
            frame = pd.read_excel(path, header=1)
        except ImportError:
            raise DataError(
                f"credit: reading {path} needs xlrd: `pip install 'dp-fairbench[xls]'`, or "
                "export the workbook to CSV"
            ) from None
        missing = [c for c in COLUMNS if c not in frame.columns]
        if missing:
            raise DataError(f"credit: {path} lacks column(s) {', '.join(missing)}")
    else:
        sep = ";" if path.name == SEMICOLON.path.split("/")[-1] else ","
        frame = read_table(path, "credit", COLUMNS, sep=sep)
    try:
        values = frame[list(COLUMNS)].to_numpy(dtype=np.int64)
    except (ValueError, TypeError):
        raise DataError(f"credit: {path} has non-integer values; it is corrupted") from None
    if hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest() != VALUES_SHA256:
        raise DataError(
            f"credit: the values in {path} differ from the published dataset (value sha256 "
            "mismatch); re-export or re-fetch the UCI workbook: `fairbench data fetch credit`"
        )
    return pd.DataFrame(values, columns=list(COLUMNS))


class Credit(Dataset):
    name = "credit"
    description = "UCI default of credit card clients (30,000 rows): default, sensitive SEX"
    version = "uci-2016"
    files = (XLS,)  # what `fairbench data fetch credit` downloads
    Options = CreditOptions
    options: CreditOptions

    def locate(self, root: Path | None = None) -> dict[str, Path]:
        """The first present of the three formats; CSVs must match their checksums."""
        root = data_root() if root is None else root
        for f in (CSV, SEMICOLON, XLS):
            path = root / f.path
            if path.is_file():  # the workbook has no checksum: its values are checked on load
                return locate(self.name, (f,), root) if f.sha256 else {f.path: path}
        raise DataError(
            f"credit: missing data file {root / XLS.path} (or a CSV export beside it); looked "
            f"in {root}. Run `fairbench data fetch credit` or set FAIRBENCH_DATA"
        )

    def load(self, seed: int, root: Path | None = None) -> Task:
        ((name, path),) = self.locate(root).items()
        frame = read_values(path)
        frame["EDUCATION"] = frame["EDUCATION"].replace({0: 4, 5: 4, 6: 4})
        frame["MARRIAGE"] = frame["MARRIAGE"].replace({0: 3})
        categorical = ["EDUCATION", "MARRIAGE", *PAY]
        if self.options.include_sensitive:
            categorical.insert(0, "SEX")
        vocab = {c: sorted(frame[c].unique()) for c in categorical}  # over the public file
        return build_task(
            name=self.name,
            version=self.version,
            numeric=frame[list(AMOUNTS)].astype(np.float64),
            categorical=one_hot(frame, vocab),
            y=frame[LABEL].to_numpy(),
            s=(frame["SEX"] == 2).to_numpy(),
            label_names=("no default", "default"),
            group_names=("male", "female"),
            sensitive_name="SEX",
            seed=seed,
            sha256={name: sha256_of(path), "values": VALUES_SHA256},
            preprocessing={
                "rows": len(frame),
                **self.options.model_dump(),
                "merged_codes": "EDUCATION 0,5,6 -> 4; MARRIAGE 0 -> 3",
            },
        )
