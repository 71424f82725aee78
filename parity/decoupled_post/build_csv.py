"""Rebuild the authors' `Datasets/Adult/adult_original_purified.csv` (listed in their repository,
its blob absent from the public snapshot) from UCI Adult: train and test rows, whitespace
stripped, rows with a '?' dropped, the label as `>50K` Yes/No. Their loader then one-hot encodes
102 inputs (as their args.py states). Usage: python build_csv.py UCI_ADULT_FOLDER OUT_CSV."""

from __future__ import annotations

import sys

import pandas as pd

COLUMNS = [
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
]


def main(folder: str, out: str) -> None:
    read = {"header": None, "names": COLUMNS, "skipinitialspace": True}
    train = pd.read_csv(f"{folder}/adult.data", **read)
    test = pd.read_csv(f"{folder}/adult.test", skiprows=1, **read)
    df = pd.concat([train, test], ignore_index=True)
    df = df[~(df == "?").any(axis=1)].dropna()
    df[">50K"] = df.pop("income").str.rstrip(".").map({">50K": "Yes", "<=50K": "No"})
    df.to_csv(out, index=False)
    print(len(df), df[">50K"].value_counts().to_dict(), df["sex"].value_counts().to_dict())


if __name__ == "__main__":
    main(*sys.argv[1:3])
