"""LSAC bar passage, Kusner et al. (2017) version (`law_data.csv`, 21,791 rows).

Tasks: `classification` (default) of first_pf, passing the bar at the first try; or
`regression` of ZFYA, the first-year law-school grade z-score. The DPSE paper regressed the
final GPA, which this version of the data does not have.

Groups: `race` with its 8 values (White, Black, Asian, Hispanic, Mexican, Other, Puertorican,
Amerindian); `race_bw` (white vs black as in DPSE; other rows dropped); or `sex`.
`merge_groups_below: N` merges race values with fewer than N rows into "Other", an explicit
choice for when a small group would be empty in a split.

Inputs: LSAT and UGPA (standardised with training statistics), region_first one-hot, and the
demographic attribute that is not the sensitive one (sex, or race). `sander_index`, an
admission index derived from LSAT and UGPA, is left out. The single row with region `PO` is
dropped, as Kusner et al. do (21,790 rows). The sex coding is 1 = female, 2 = male, from the
authors' R code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from fairbench.datasets.base import Dataset, DatasetOptions, build_task, one_hot, read_table
from fairbench.datasets.files import DataFile
from fairbench.task import Task

RACES = ["White", "Black", "Asian", "Hispanic", "Mexican", "Other", "Puertorican", "Amerindian"]
REGIONS = ["NE", "GL", "FW", "SE", "MS", "SC", "Mt", "NG", "MW", "NW"]
COLUMNS = ("race", "sex", "LSAT", "UGPA", "region_first", "ZFYA", "first_pf")
SOURCE = "https://github.com/mkusner/counterfactual-fairness"  # links the file from its README


class LawSchoolOptions(DatasetOptions):
    task: Literal["classification", "regression"] = Field(
        "classification",
        description="classification (passed the bar at first try) or regression (ZFYA)",
    )
    sensitive: Literal["race", "race_bw", "sex"] = Field(
        "race", description="race (8 values), race_bw (white vs black) or sex"
    )
    merge_groups_below: int | None = Field(
        None, ge=1, description="merge race values with fewer rows than this into Other"
    )


class LawSchool(Dataset):
    name = "lawschool"
    description = "LSAC law school (21,790 rows): first-try bar passage or ZFYA, race or sex"
    version = "kusner-2017"
    files = (
        DataFile(
            "lawschool/law_data.csv",
            "cbf494af5e0ac317015cf64945a20587c08ec77118e183d3ddb0026719956d88",
            SOURCE,
            direct=False,  # distributed through a Dropbox link in that README
        ),
    )
    Options = LawSchoolOptions
    options: LawSchoolOptions

    def load(self, seed: int, root: Path | None = None) -> Task:
        ((name, path),) = self.locate(root).items()
        frame = read_table(path, self.name, COLUMNS)
        frame = frame[frame["region_first"] != "PO"].reset_index(drop=True)
        o = self.options
        frame["sex"] = frame["sex"].map({1: "female", 2: "male"})
        races = list(RACES)
        if o.merge_groups_below is not None:
            counts = frame["race"].value_counts()
            small = [r for r in races if counts.get(r, 0) < o.merge_groups_below and r != "Other"]
            frame["race"] = frame["race"].replace({r: "Other" for r in small})
            races = [r for r in races if r not in small]
        if o.sensitive == "race_bw":
            frame = frame[frame["race"].isin(["White", "Black"])].reset_index(drop=True)
            groups, column = ["White", "Black"], "race"
        elif o.sensitive == "race":
            groups, column = races, "race"
        else:
            groups, column = ["female", "male"], "sex"
        other = "sex" if column == "race" else "race"
        vocab = {"region_first": REGIONS, other: ["female", "male"] if other == "sex" else races}
        classification = o.task == "classification"
        return build_task(
            name=self.name,
            version=self.version,
            numeric=frame[["LSAT", "UGPA"]].astype(np.float64),
            categorical=one_hot(frame, vocab),
            y=frame["first_pf" if classification else "ZFYA"].to_numpy(),
            s=frame[column].map({g: i for i, g in enumerate(groups)}).to_numpy(),
            label_names=("failed first try", "passed first try") if classification else (),
            group_names=tuple(groups),
            sensitive_name=column,
            seed=seed,
            sha256={name: self.files[0].sha256},
            preprocessing={"rows": len(frame), **o.model_dump()},
        )
