"""What a paper figure consists of, as data: tables (`Csv`), drawings (`Plot`) and documents
(`Doc`). A builder yields them; `fairbench.figures.build` writes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from fairbench.report.document import Document


@dataclass(frozen=True)
class Csv:
    name: str  # file name in the output folder
    frame: pd.DataFrame


@dataclass(frozen=True)
class Plot:
    stem: str  # file name without suffix: `<stem>.png` and `<stem>.pdf`
    figure: Figure


@dataclass(frozen=True)
class Doc:
    name: str  # `<name>.md`, its tables also in `<name>.tex`
    document: Document


Output = Csv | Plot | Doc
