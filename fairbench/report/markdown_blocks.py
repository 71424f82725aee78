"""The report's Markdown read back as blocks (headings, paragraphs, warnings, tables), so that
the LaTeX tables and the HTML report are rendered from the very text of pareto.md, paired.md
and constraints.md: their cells, hence their numbers, cannot drift from the Markdown.

Only the subset the report writes is understood: `#` headings, paragraphs, the `> **Warnings**`
block of `caveats_markdown`, and pipe tables whose second line sets each column's alignment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Warnings:
    items: list[str]


@dataclass(frozen=True)
class Table:
    header: list[str]
    right_aligned: list[bool]  # per column: `---:` in the alignment row
    rows: list[list[str]]


Block = Heading | Paragraph | Warnings | Table

_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a `|` that is not written `\|`


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:-1]  # drop the outer pipes
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(inner)]


def parse(markdown: str) -> list[Block]:
    """The blocks of a report document, in order."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("#"):
            hashes = len(line) - len(line.lstrip("#"))
            blocks.append(Heading(hashes, line[hashes:].strip()))
            i += 1
        elif line.startswith(">"):
            quoted = []
            while i < len(lines) and lines[i].startswith(">"):
                quoted.append(lines[i][1:].strip())
                i += 1
            blocks.append(Warnings([q[2:] for q in quoted if q.startswith("- ")]))
        elif line.startswith("|"):
            table = []
            while i < len(lines) and lines[i].startswith("|"):
                table.append(lines[i])
                i += 1
            align = _cells(table[1])
            blocks.append(
                Table(
                    _cells(table[0]),
                    [a.endswith(":") for a in align],
                    [_cells(row) for row in table[2:]],
                )
            )
        else:
            text = []
            while i < len(lines) and lines[i].strip() and lines[i][0] not in "#>|":
                text.append(lines[i].strip())
                i += 1
            blocks.append(Paragraph(" ".join(text)))
    return blocks


def captioned_tables(blocks: list[Block]) -> list[tuple[str, Table]]:
    """Every table with the headings above it that name it (below the document's title), joined
    by ` — `: e.g. `adult · demographic_parity — constraint values · target 0.02`."""
    path: dict[int, str] = {}
    out = []
    for block in blocks:
        if isinstance(block, Heading):
            path = {lvl: text for lvl, text in path.items() if lvl < block.level}
            path[block.level] = block.text
        elif isinstance(block, Table):
            names = [text for lvl, text in sorted(path.items()) if lvl > 1]
            out.append((" — ".join(names) or path.get(1, ""), block))
    return out
