"""Generated files shaped like ACS PUMS person files, for testing the ACS adapter offline.

Each file has the record identifiers (RT, SERIALNO, DIVISION, SPORDER, PUMA, REGION, ST,
ADJINC), the person weight PWGTP and its 80 replicate weights PWGTP1..PWGTP80, and every column
folktables' ACSEmployment and ACSIncome read, with codes in their documented ranges and blanks
where the census leaves them blank (e.g. no COW under 16). It is not the full 286-column
layout: that header could not be verified offline, and these tests do not claim to check it.
Survey years from 2019 on carry RELSHIPP where earlier years have RELP, as the census renamed it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

STATE_CODES = {"AL": "01", "AK": "02", "CA": "06"}
# Alabama's two large groups; the small races raised to ~1% so that a few thousand rows put
# every race in every split (the real 5-year file has ~240,000 rows)
RACE_SHARES = [0.62, 0.25, 0.01, 0.01, 0.01, 0.02, 0.01, 0.03, 0.04]


def pums_path(root: Path, state: str, year: int, horizon: str) -> Path:
    name = (
        f"psam_p{STATE_CODES[state]}.csv"
        if year >= 2017
        else f"ss{str(year)[-2:]}p{state.lower()}.csv"
    )
    return root / "acs" / str(year) / horizon / name


def write_pums(
    root: Path,
    state: str = "AL",
    year: int = 2018,
    horizon: str = "5-Year",
    rows: int = 3000,
    seed: int = 0,
) -> Path:
    rng = np.random.default_rng(seed)
    age = rng.integers(0, 95, rows)
    school = np.where(age >= 3, rng.integers(1, 25, rows), np.nan)
    employed = (age >= 16) & (
        rng.random(rows) < 0.25 + 0.02 * np.nan_to_num(school) - 0.004 * np.abs(age - 40)
    )
    esr = np.where(age < 16, np.nan, np.where(employed, 1, rng.choice([3, 6], rows)))
    hours = np.where(employed, rng.integers(10, 70, rows), np.nan)
    blank_under = lambda limit, values: np.where(age >= limit, values, np.nan)  # noqa: E731
    columns = {
        "RT": "P",
        "SERIALNO": [f"{year}HU{i:07d}" for i in range(rows)],
        "DIVISION": 6,
        "SPORDER": rng.integers(1, 6, rows),
        "PUMA": rng.choice([100, 200, 301, 302], rows),
        "REGION": 3,
        "ST": int(STATE_CODES[state]),
        "ADJINC": 1013097,
        "PWGTP": rng.integers(1, 200, rows),
        "AGEP": age,
        "CIT": rng.choice([1, 2, 3, 4, 5], rows, p=[0.95, 0.01, 0.01, 0.02, 0.01]),
        "COW": blank_under(16, rng.integers(1, 10, rows)),
        "DEAR": rng.choice([1, 2], rows, p=[0.04, 0.96]),
        "DEYE": rng.choice([1, 2], rows, p=[0.03, 0.97]),
        "DREM": blank_under(5, rng.choice([1, 2], rows, p=[0.06, 0.94])),
        "MAR": rng.integers(1, 6, rows),
        "MIG": blank_under(1, rng.choice([1, 2, 3], rows, p=[0.85, 0.01, 0.14])),
        "MIL": blank_under(17, rng.choice([1, 2, 3, 4], rows, p=[0.01, 0.08, 0.01, 0.9])),
        "RELSHIPP" if year >= 2019 else "RELP": rng.integers(0, 18, rows),
        "SCHL": school,
        "SEX": rng.choice([1, 2], rows),
        "WKHP": hours,
        "ANC": rng.choice([1, 2, 3, 4, 8], rows),
        "DIS": rng.choice([1, 2], rows, p=[0.17, 0.83]),
        "ESP": blank_under(0, np.where(age < 18, rng.integers(1, 9, rows), np.nan)),
        "ESR": esr,
        "NATIVITY": rng.choice([1, 2], rows, p=[0.96, 0.04]),
        "OCCP": np.where(employed, rng.choice([10, 2310, 4720, 9130], rows), np.nan),
        "PINCP": np.where(age >= 15, np.round(rng.lognormal(10, 1, rows), -2), np.nan),
        "POBP": rng.choice([1, 13, 48, 303], rows),
        "RAC1P": rng.choice(np.arange(1, 10), rows, p=RACE_SHARES),
    }
    frame = pd.DataFrame(columns)
    for i in range(1, 81):
        frame[f"PWGTP{i}"] = rng.integers(0, 300, rows)
    path = pums_path(root, state, year, horizon)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path
