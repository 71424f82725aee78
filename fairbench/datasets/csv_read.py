"""Reading a user's CSV file into a table of strings, refusing what cannot be a dataset.

Everything is read as text: the roles of the columns (numeric, categorical, excluded) are
decided afterwards by `csv_roles`, from the values, never by the parser's guesses. Each
refusal is one `DataError` line naming the file and the fix: no file, an empty file, a header
without rows, a file read with the wrong delimiter (one column found), a duplicated header
whose columns differ, rows of the wrong length.
"""

from __future__ import annotations

import csv
import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fairbench.errors import DataError

# tokens read as a missing value (pandas' defaults would also read "None" or "n/a" loosely;
# this list is recorded in the card so a user knows what counted as missing)
MISSING_TOKENS = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "?")
OTHER_DELIMITERS = (";", "\t", "|")


@dataclass(frozen=True)
class CsvTable:
    """The file's rows as strings (missing values as NaN), and what reading it decided."""

    frame: pd.DataFrame
    duplicates: tuple[str, ...]  # header names that appeared twice with identical columns


def read_csv_file(path: Path, delimiter: str = ",") -> CsvTable:
    """The file as a table of strings, or one `DataError` naming what is wrong with it."""
    if not path.is_file():
        raise DataError(f"csv: no file at {path}; give the path of a CSV file")
    # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8" export) is not part of the first name
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as fh:
        header = next(csv.reader(fh, delimiter=delimiter), None)
    if header is None or not any(name.strip() for name in header):
        raise DataError(f"csv: {path} is empty; a CSV file needs a header line and data rows")
    header = [name.strip() for name in header]
    if len(header) == 1:
        raise DataError(_one_column(path, header[0], delimiter))
    try:
        frame = pd.read_csv(
            path,
            sep=delimiter,
            dtype=str,
            keep_default_na=False,
            na_values=list(MISSING_TOKENS),
            skipinitialspace=True,
            encoding="utf-8-sig",
        )
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[-1]
        raise DataError(
            f"csv: cannot parse {path} ({detail}); check the delimiter and quoting"
        ) from None
    if frame.empty:
        raise DataError(f"csv: {path} has a header but no data rows")
    frame.columns = header  # pandas renamed duplicates (`x.1`); the checks below need the names
    frame, duplicates = _collapse_duplicates(frame, path)
    return CsvTable(frame, duplicates)


def _one_column(path: Path, name: str, delimiter: str) -> str:
    found = [d for d in OTHER_DELIMITERS if d in name]
    shown = {"\t": "\\t"}
    if found:
        other = shown.get(found[0], found[0])
        return (
            f"csv: {path} has one column with delimiter {delimiter!r}, but its header "
            f"contains {other!r}: the file is {other!r}-separated; set `delimiter: "
            f"'{other}'` (--delimiter '{other}')"
        )
    return (
        f"csv: {path} has one column with delimiter {delimiter!r}; a dataset needs a label, "
        "a sensitive column and features: check the delimiter (`delimiter:`)"
    )


def _collapse_duplicates(frame: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """A header name given twice is refused, unless both columns hold the same values on
    every row (ProPublica's COMPAS file repeats decile_score and priors_count so): then it
    is kept once and the card says so."""
    names = list(frame.columns)
    keep, collapsed = [], []
    for i, name in enumerate(names):
        first = names.index(name)
        if first == i:
            keep.append(i)
            continue
        if not frame.iloc[:, first].equals(frame.iloc[:, i]):
            raise DataError(
                f"csv: {path} has the header {name!r} twice (columns {first + 1} and {i + 1}) "
                "with different values; rename one of them"
            )
        collapsed.append(name)
    return frame.iloc[:, keep], tuple(dict.fromkeys(collapsed))


def require_columns(
    columns: Iterable[str], wanted: Mapping[str, Iterable[str]], path: Path
) -> None:
    """Every column an option names exists; else one error naming the option, the column and
    the closest header name (difflib)."""
    present = list(columns)
    for option, names in wanted.items():
        for name in names:
            if name not in present:
                raise DataError(
                    f"csv: {path}: {option} column {name!r} not found; {closest(name, present)}"
                )


def closest(name: str, candidates: list[str]) -> str:
    """`did you mean 'X'?` for the nearest candidate, else the list of candidates."""
    match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if match:
        return f"did you mean {match[0]!r}?"
    shown = ", ".join(candidates[:12]) + (", ..." if len(candidates) > 12 else "")
    return f"the columns are: {shown}"
