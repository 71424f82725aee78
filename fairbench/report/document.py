"""Reports as data: a `Document` is a list of blocks (headings, paragraphs, a warning block,
bullet lists, images and `Table`s), rendered to Markdown, HTML and LaTeX from the same
objects, so a table's cells, hence its numbers, are written once and read the same in all
three.

A `Table` holds its columns, its rows as the cells to print (formatted once, by whoever builds
it), each column's alignment (`l` or `r`), a caption and notes. An empty caption means the
table is named by the headings above it (below the document's title, joined by ` — `, e.g.
`adult · demographic_parity — constraint values · target 0.02`): Markdown and HTML show those
headings, LaTeX (where a table floats away from them) writes them as its caption.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape as html_escape

from fairbench.report.latex import cell as latex_cell
from fairbench.report.latex import escape as latex_escape


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[str]]
    align: str  # one letter per column: `l` (text) or `r` (numbers)
    caption: str = ""
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.align) != len(self.columns) or set(self.align) - {"l", "r"}:
            raise ValueError(f"align {self.align!r}: one of l/r per column of {self.columns}")
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"row {row} has {len(row)} cells for {len(self.columns)} columns")

    def markdown(self) -> str:
        """A pipe table, `|` in cells written `\\|`; the caption (if any) and notes after it."""

        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

        # an empty header cell is written `| |`, one space, as a Markdown reader expects
        head = "|" + "|".join(f" {c} " if c else " " for c in self.columns) + "|"
        rule = "|" + "".join("---:|" if a == "r" else "---|" for a in self.align)
        lines = [head, rule, *(line(row) for row in self.rows)]
        if self.caption:
            lines += ["", f"Table: {self.caption}"]
        for note in self.notes:
            lines += ["", note]
        return "\n".join(lines)

    def html(self) -> str:
        """A table in a scrolling box; right-aligned (numeric) columns get class `num`."""
        cls = [' class="num"' if a == "r" else "" for a in self.align]
        head = "".join(
            f"<th{c}>{html_escape(h)}</th>" for h, c in zip(self.columns, cls, strict=True)
        )
        body = "".join(
            "<tr>"
            + "".join(f"<td{c}>{html_escape(v)}</td>" for v, c in zip(row, cls, strict=True))
            + "</tr>\n"
            for row in self.rows
        )
        caption = f"<caption>{html_escape(self.caption)}</caption>\n" if self.caption else ""
        notes = "".join(f'\n<p class="note">{inline_html(n)}</p>' for n in self.notes)
        return (
            f'<div class="scroll"><table>\n{caption}<thead><tr>{head}</tr></thead>\n<tbody>\n'
            f"{body}</tbody></table></div>{notes}"
        )

    def latex(self, caption: str = "") -> list[str]:
        """A booktabs `table` float: `caption` (the headings above it) unless it has its own;
        each `mean ± CI` cell as one math expression; notes under the tabular."""
        spec = "".join(self.align)
        lines = [
            r"\begin{table}[htbp]",
            r"\centering\small",
            f"\\caption{{{latex_escape(self.caption or caption)}}}",
            f"\\begin{{tabular}}{{{spec}}}",
            r"\toprule",
            " & ".join(latex_escape(h) for h in self.columns) + r" \\",
            r"\midrule",
            *(" & ".join(latex_cell(c) for c in row) + r" \\" for row in self.rows),
            r"\bottomrule",
            r"\end{tabular}",
        ]
        lines += [f"\\par\\footnotesize {latex_escape(note)}" for note in self.notes]
        return [*lines, r"\end{table}"]


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Warnings:
    """The block that opens a report; empty: not written."""

    items: list[str]


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Images:
    """Figures shown in the Markdown, one per line: (alt text, file name)."""

    files: list[tuple[str, str]]


Block = Heading | Paragraph | Warnings | Bullets | Images | Table


def inline_html(text: str) -> str:
    """Escaped text with the reports' inline Markdown (`**bold**`, `code`) as HTML."""
    out = html_escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


@dataclass
class Document:
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block | str) -> Document:
        """Append blocks; a string is a paragraph. Returns the document (to chain)."""
        self.blocks += [Paragraph(b) if isinstance(b, str) else b for b in blocks]
        return self

    def heading(self, level: int, text: str) -> Document:
        return self.add(Heading(level, text))

    def extend(self, other: Document | Iterable[Block]) -> Document:
        self.blocks += other.blocks if isinstance(other, Document) else list(other)
        return self

    @property
    def title(self) -> str:
        return next((b.text for b in self.blocks if isinstance(b, Heading) and b.level == 1), "")

    def tables(self) -> list[tuple[str, Table]]:
        """Every table with the headings above it that name it (below the document's title,
        joined by ` — `; the title when there are none)."""
        path: dict[int, str] = {}
        out = []
        for block in self.blocks:
            if isinstance(block, Heading):
                path = {lvl: text for lvl, text in path.items() if lvl < block.level}
                path[block.level] = block.text
            elif isinstance(block, Table):
                names = [text for lvl, text in sorted(path.items()) if lvl > 1]
                out.append((" — ".join(names) or path.get(1, ""), block))
        return out

    def markdown(self) -> str:
        """Blocks separated by one blank line; an empty warning block is left out."""
        parts = []
        for block in self.blocks:
            if isinstance(block, Heading):
                parts.append("#" * block.level + " " + block.text)
            elif isinstance(block, Paragraph):
                parts.append(block.text)
            elif isinstance(block, Warnings):
                if block.items:
                    quoted = ["> **Warnings**", ">", *(f"> - {i}" for i in block.items)]
                    parts.append("\n".join(quoted))
            elif isinstance(block, Bullets):
                parts.append("\n".join(f"- {item}" for item in block.items))
            elif isinstance(block, Images):
                parts.append("\n".join(f"![{alt}]({src})" for alt, src in block.files))
            else:
                parts.append(block.markdown())
        return "\n\n".join(parts) + "\n"

    def html(self) -> str:
        """The blocks as HTML, headings one level down (a page has its own h1); the warning
        block is left out (a page shows its warnings once, at the top), images too (a page
        embeds its figures itself)."""
        parts = []
        for block in self.blocks:
            if isinstance(block, Heading):
                level = min(block.level + 1, 6)
                parts.append(f"<h{level}>{inline_html(block.text)}</h{level}>")
            elif isinstance(block, Paragraph):
                parts.append(f'<p class="note">{inline_html(block.text)}</p>')
            elif isinstance(block, Bullets):
                items = "".join(f"<li>{inline_html(i)}</li>" for i in block.items)
                parts.append(f'<ul class="note">{items}</ul>')
            elif isinstance(block, Table):
                parts.append(block.html())
        return "\n".join(parts)

    def latex(self, source: str) -> str:
        """Every table as a booktabs float captioned with its headings; `source` (the file the
        document is written to) is named in the header comment. Plain ASCII that pdflatex
        reads with nothing but `\\usepackage{booktabs}`."""
        parts = [
            f"% {latex_escape(self.title or source)}",
            f"% generated by fairbench from {source}; needs \\usepackage{{booktabs}}",
        ]
        for caption, table in self.tables():
            parts += ["", *table.latex(caption)]
        return "\n".join(parts) + "\n"
