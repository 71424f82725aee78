"""ACS PUMS person records through folktables (Ding et al., "Retiring Adult", 2021).

Tasks: folktables' `ACSEmployment` (default; is ESR = 1, employed?) or `ACSIncome` (PINCP >
50,000 among adults who worked). Parameters: state, survey year, horizon (1-Year or 5-Year).
Groups: RAC1P with its 9 values (default; the RaCO-DP paper's Alabama 2018 5-Year ACSEmployment
configuration: 9 groups, 18 demographic-parity constraints), or SEX.

Files are read from `$FAIRBENCH_DATA/acs/<year>/<horizon>/psam_p<state code>.csv` (2017 on;
`ss<yy>p<state>.csv` before) by folktables' own loader with `download=False`. Where the file is
absent, one line names the expected path and the fetch command; `fairbench data fetch acs
--option state=AL ...` downloads it from the Census Bureau through folktables
(`download=True`). The census publishes no checksums for these files, so they are checked for
the columns the task reads.

Survey years from 2019 on rename RELP to RELSHIPP. folktables' ACSEmployment and ACSIncome
still read RELP, so those years are refused with that reason, not a KeyError.

Preprocessing: the task's categorical codes are one-hot encoded over the values the file takes.
AGEP (and WKHP for income) are standardised with training statistics. The sensitive attribute
is not an input unless `include_sensitive: true`; the other of RAC1P and SEX is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from fairbench.datasets.base import Dataset, DatasetOptions, build_task, one_hot
from fairbench.datasets.files import data_root
from fairbench.errors import DataError
from fairbench.task import Task

RACES = (
    "White",
    "Black",
    "American Indian",
    "Alaska Native",
    "AIAN tribes specified",
    "Asian",
    "Native Hawaiian / Pacific Islander",
    "Some other race",
    "Two or more races",
)
NUMERIC = {"employment": ["AGEP"], "income": ["AGEP", "WKHP"]}
RENAMED = {"RELP": "RELSHIPP"}  # 2019 on


class ACSOptions(DatasetOptions):
    state: str = Field("AL", description="two-letter US state code")
    year: int = Field(2018, ge=2014, description="survey year")
    horizon: Literal["1-Year", "5-Year"] = Field("5-Year", description="ACS sample horizon")
    problem: Literal["employment", "income"] = Field(
        "employment", description="folktables task: ACSEmployment or ACSIncome"
    )
    sensitive: Literal["race", "sex"] = Field(
        "race", description="group attribute: RAC1P (9 values) or SEX"
    )
    include_sensitive: bool = Field(False, description="the group attribute is also a model input")
    merge_groups_below: int | None = Field(
        None, ge=1, description="merge groups with fewer rows than this into one"
    )

    @field_validator("state")
    @classmethod
    def _known_state(cls, value: str) -> str:
        from folktables.load_acs import state_list

        if value.upper() not in state_list:
            raise ValueError(f"unknown state {value!r}; use a two-letter code such as AL")
        return value.upper()


class ACS(Dataset):
    name = "acs"
    description = "ACS PUMS via folktables: employment or income, race (9) or sex, any state"
    version = "folktables"
    Options = ACSOptions
    options: ACSOptions

    def relative_path(self) -> str:
        from folktables.load_acs import _STATE_CODES

        o = self.options
        name = (
            f"psam_p{_STATE_CODES[o.state]}.csv"
            if o.year >= 2017
            else f"ss{str(o.year)[-2:]}p{o.state.lower()}.csv"
        )
        return f"acs/{o.year}/{o.horizon}/{name}"

    def locate(self, root: Path | None = None) -> dict[str, Path]:
        root = data_root() if root is None else root
        path = root / self.relative_path()
        if not path.is_file():
            o = self.options
            raise DataError(
                f"acs: missing data file {path} ({o.state} {o.year} {o.horizon}); looked in "
                f"{root}. Run `fairbench data fetch acs --option state={o.state} --option "
                f"year={o.year} --option horizon={o.horizon}` or set FAIRBENCH_DATA"
            )
        return {self.relative_path(): path}

    def problem(self):
        from folktables import ACSEmployment, ACSIncome

        return ACSEmployment if self.options.problem == "employment" else ACSIncome

    def fetch(self, root: Path | None = None) -> list[Path]:
        """Download through folktables (`download=True`); never run by the tests."""
        from folktables import ACSDataSource

        root = data_root() if root is None else root
        o = self.options
        source = ACSDataSource(
            survey_year=str(o.year), horizon=o.horizon, survey="person", root_dir=str(root / "acs")
        )
        source.get_data(states=[o.state], download=True)
        return [root / self.relative_path()]

    def load(self, seed: int, root: Path | None = None) -> Task:
        from folktables import ACSDataSource

        ((name, path),) = self.locate(root).items()
        o = self.options
        problem = self.problem()
        header = pd.read_csv(path, nrows=0).columns
        needed = [*problem.features, problem.target]
        missing = [c for c in needed if c not in header]
        renamed = [c for c in missing if RENAMED.get(c) in header]
        if renamed:
            raise DataError(
                f"acs: {path} is a {o.year} file in which {renamed[0]} is renamed "
                f"{RENAMED[renamed[0]]}; folktables' ACSEmployment and ACSIncome read "
                f"{renamed[0]}, so survey years after 2018 are not supported"
            )
        if missing:
            raise DataError(
                f"acs: {path} lacks column(s) {', '.join(missing)}; it is not a "
                "PUMS person file: fetch it again"
            )
        source = ACSDataSource(
            survey_year=str(o.year),
            horizon=o.horizon,
            survey="person",
            root_dir=str(path.parents[2]),
        )
        raw = source.get_data(states=[o.state], download=False)
        features, label, _ = problem.df_to_pandas(raw)
        sensitive, other = ("RAC1P", "SEX") if o.sensitive == "race" else ("SEX", "RAC1P")
        codes = features[sensitive].astype(int)
        if o.sensitive == "race":
            if o.merge_groups_below is not None:  # small races into "Some other race" (8)
                counts = codes.value_counts()
                small = [
                    c for c in range(1, 10) if c != 8 and counts.get(c, 0) < o.merge_groups_below
                ]
                codes = codes.replace({c: 8 for c in small})
            present = sorted(codes.unique())  # a race absent from the state's file is no group
            index = {code: i for i, code in enumerate(present)}
            groups = [RACES[c - 1] for c in present]
        else:
            groups, index = ["male", "female"], {1: 0, 2: 1}
        numeric = NUMERIC[o.problem]
        categorical = [c for c in problem.features if c not in numeric and c != sensitive]
        if o.include_sensitive:
            categorical.append(sensitive)
        cats = features[categorical].astype(int).astype(str)
        vocab = {c: sorted(cats[c].unique(), key=int) for c in categorical}
        return build_task(
            name=self.name,
            version=self.version,
            numeric=features[numeric].astype(np.float64),
            categorical=one_hot(cats, vocab),
            y=label.to_numpy().ravel().astype(np.int64),
            s=codes.map(index).to_numpy(),
            label_names=("no", "yes"),
            group_names=tuple(groups),
            sensitive_name=sensitive,
            seed=seed,
            sha256={name: "(census PUMS: no published checksum; columns checked)"},
            preprocessing={"rows": len(features), **o.model_dump(), "other_demographic": other},
        )
