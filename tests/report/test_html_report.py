"""report.html holds the whole report offline (every figure embedded, every table with the
CSVs' row counts and the Markdown's numbers, the config, the privacy ledger, the warnings),
and the .tex tables are well-formed booktabs tables that say what the Markdown says."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from fairbench.report import write_report
from fairbench.report.html import report_html
from fairbench.report.latex import cell, escape
from fairbench.report.ledger_summary import SUMMARY_COLUMNS
from fairbench.workflows.experiment import experiment_config, run_experiment

CONFIG = {
    "name": "html_check",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 800}}],
    "epsilons": [4.0],
    "seeds": 2,
    "methods": [
        {"name": "erm", "hparams": {"epochs": 2}},
        # 128 steps against raco-dp's 8: the report warns of lopsided budgets
        {"name": "dp-sgd", "hparams": {"epochs": 2, "batch_size": 8}},
        {"name": "raco-dp", "knobs": [0.05, 0.2], "hparams": {"epochs": 1}},
    ],
}


class Page(HTMLParser):
    """The parts of report.html the tests read: tags, image sources, links, and every table
    (its section, header cells and body rows)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.images: list[str] = []
        self.links: list[str] = []
        self.tables: list[dict] = []
        self.pre: list[str] = []
        self.h1: list[str] = []
        self.items: list[str] = []
        self._section = ""
        self._capture: list[str] | None = None
        self._where = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.add(tag)
        if tag == "section":
            self._section = attrs["id"]
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "a":
            self.links.append(attrs["href"])
        elif tag == "table":
            self.tables.append({"section": self._section, "header": [], "rows": []})
        elif tag in ("thead", "tbody"):
            self._where = tag
        elif tag == "tr" and self._where == "tbody":
            self.tables[-1]["rows"].append([])
        elif tag in ("th", "td", "pre", "h1", "li"):
            self._capture = []

    def handle_data(self, data):
        if self._capture is not None:
            self._capture.append(data)

    def handle_endtag(self, tag):
        if tag not in ("th", "td", "pre", "h1", "li") or self._capture is None:
            return
        text, self._capture = "".join(self._capture), None
        if tag == "th":
            self.tables[-1]["header"].append(text)
        elif tag == "td":
            self.tables[-1]["rows"][-1].append(text)
        else:
            {"pre": self.pre, "h1": self.h1, "li": self.items}[tag].append(text)

    def section_tables(self, section: str, first_header: str) -> list[dict]:
        return [
            t for t in self.tables if t["section"] == section and t["header"][:1] == [first_header]
        ]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "run"
    run_experiment(experiment_config(CONFIG), out, warn=lambda _: None)
    return out


@pytest.fixture(scope="module")
def page(run_dir) -> Page:
    return Page((run_dir / "report.html").read_text())


def markdown_rows(path: Path, first_header: str) -> list[list[str]]:
    """Body rows of the Markdown tables whose first column is `first_header`, as cells."""
    rows, keep = [], False
    for line in path.read_text().splitlines():
        if not line.startswith("|"):
            keep = False
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells[0] == first_header:
            keep = True
        elif keep and not set(line) <= set("|-: "):
            rows.append(cells)
    return rows


def test_every_figure_written_is_embedded(run_dir, page):
    pngs = sorted((run_dir / "figures").glob("*.png"))
    assert len(pngs) == 2  # the trade-off figure and raco-dp's satisfaction figure
    embedded = {
        base64.b64decode(src.removeprefix("data:image/png;base64,"))
        for src in page.images
        if src.startswith("data:image/png;base64,")
    }
    assert len(page.images) == len(pngs)
    assert embedded == {png.read_bytes() for png in pngs}


def test_it_needs_nothing_outside_the_file(run_dir, page):
    text = (run_dir / "report.html").read_text()
    assert not re.search(r"(src|href)\s*=\s*[\"']?\s*(https?:|//)", text, flags=re.IGNORECASE)
    assert not {"script", "link", "iframe", "object", "embed"} & page.tags
    assert "url(" not in text and "@import" not in text
    assert page.links and all(link.startswith("#") for link in page.links)
    assert {f"#{a}" for a in ("pareto", "paired", "constraints", "privacy", "config")} <= set(
        page.links
    )


def test_every_table_is_there_with_the_csvs_rows_and_the_markdowns_numbers(run_dir, page):
    for section, first, csv, md in (
        ("pareto", "method", "pareto.csv", "pareto.md"),
        ("paired", "method_a", "paired.csv", "paired.md"),
        ("constraints", "method", "constraints.csv", "constraints.md"),
    ):
        tables = page.section_tables(section, first)
        rows = [row for table in tables for row in table["rows"]]
        assert len(rows) == len(pd.read_csv(run_dir / csv)), section
        assert rows == markdown_rows(run_dir / md, first), section
    assert len(pd.read_csv(run_dir / "pareto.csv")) == 1 + 1 + 2  # erm, dp-sgd, raco-dp x 2
    values = page.section_tables("constraints", "constraint")
    assert [r[0] for t in values for r in t["rows"]][:2] == [
        "P(ŷ=0|s=0) - P(ŷ=0|s≠0)",
        "P(ŷ=1|s=0) - P(ŷ=1|s≠0)",
    ]


def test_privacy_ledger_summary_holds_the_accountants_numbers(run_dir, page):
    (table,) = [t for t in page.tables if t["section"] == "privacy"]
    assert table["header"][:6] == ["dataset", "constraint", "method", "privacy", "ε target", "δ"]
    rows = {row[2]: row for row in table["rows"]}
    assert set(rows) == {"erm", "dp-sgd", "raco-dp"}
    trials = pd.read_csv(run_dir / "trials.csv")
    for label in ("dp-sgd", "raco-dp"):
        spent = trials[trials["label"] == label]["epsilon_spent"]
        assert rows[label][4:9] == [
            "4",
            "1e-05",
            str(len(spent)),
            f"{spent.mean():.4f}",
            f"{spent.max():.4f}",
        ]
    assert "Poisson-sampled Gaussian (rounds 128, q " in rows["dp-sgd"][9]
    assert "Laplace" in rows["raco-dp"][9] and "σ 4" in rows["raco-dp"][9]
    assert rows["erm"][4:] == ["non-private", "", "2", "", "", ""]


def test_title_config_and_warnings(run_dir, page):
    assert page.h1 == ["html_check (defaults, untuned)"]
    assert page.pre == [(run_dir / "config.yaml").read_text()]
    (warning,) = page.items
    assert warning.startswith("synthetic · ε = 4: step counts differ 16x across methods")
    assert page.items == write_report(run_dir).warnings  # rewriting gives the same page
    assert Page((run_dir / "report.html").read_text()).tables == page.tables


def test_warnings_are_escaped_text():
    empty = pd.DataFrame(columns=SUMMARY_COLUMNS)
    text = report_html(
        Path("r"), "t <b>", ["<script>alert(1)</script> & γ"], [], empty, {}, "a: 1", 0
    )
    page = Page(text)
    assert "script" not in page.tags and "b" not in page.tags
    assert page.items == ["<script>alert(1)</script> & γ"] and page.h1 == ["t <b>"]


def test_latex_cells_escape_and_set_intervals_in_math():
    assert cell("0.1523 ± 0.0041 (0.2000)") == r"$0.1523 \pm 0.0041$ (0.2000)"
    assert cell("+0.0012 ± 0.0040") == r"$+0.0012 \pm 0.0040$"
    assert cell("-1,234.5 ± 6") == r"$-1{,}234.5 \pm 6$"
    assert escape("noise_multiplier 50% & #2 {x} a|b") == (
        r"noise\_multiplier 50\% \& \#2 \{x\} a\textbar{}b"
    )
    assert escape("ε = 1 · γ ≤ 0.05 ★") == r"$\varepsilon$ = 1 $\cdot$ $\gamma$ $\le$ 0.05 $\star$"


@pytest.mark.parametrize("name", ["pareto", "paired", "constraints"])
def test_tex_tables_are_booktabs_and_say_what_the_markdown_says(run_dir, name):
    tex = (run_dir / f"{name}.tex").read_text()
    markdown = (run_dir / f"{name}.md").read_text()
    assert tex.isascii()
    # the same cells as the Markdown's tables, each as LaTeX writes it, in the same order
    body_rows = [ln for ln in tex.splitlines() if ln.endswith(r"\\") and not ln.startswith("\\")]
    md_rows = [
        [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for line in markdown.splitlines()
        if line.startswith("|") and not set(line) <= set("|-: ")
    ]
    assert body_rows == [" & ".join(cell(c) for c in cells) + r" \\" for cells in md_rows]
    n_tables = len(re.findall(r"^\|[-:|]+\|$", markdown, flags=re.MULTILINE))
    for command in (
        r"\begin{tabular}",
        r"\end{tabular}",
        r"\toprule",
        r"\midrule",
        r"\bottomrule",
        r"\begin{table}",
        r"\end{table}",
    ):
        assert tex.count(command) == n_tables, command
    body = [line for line in tex.splitlines() if not line.startswith("%")]
    assert not re.search(r"(?<!\\)[_%#]", "\n".join(body))  # escaped, outside comments
    for spec, rows in re.findall(
        r"\\begin\{tabular\}\{([lr]+)\}\n(.*?)\\bottomrule", tex, flags=re.DOTALL
    ):
        lines = [ln for ln in rows.splitlines() if ln.endswith(r"\\")]
        assert all(len(re.findall(r"(?<!\\)&", ln)) == len(spec) - 1 for ln in lines)
        assert rows.splitlines()[0] == r"\toprule" and rows.splitlines()[2] == r"\midrule"
    if name == "pareto":
        points = pd.read_csv(run_dir / "pareto.csv")
        data_rows = [ln for ln in body if ln.endswith(r"\\") and not ln.startswith("method")]
        assert len(data_rows) == len(points)
        for r in points.itertuples():
            if r.test_error_ci95 == r.test_error_ci95:  # two seeds: an interval
                assert f"${r.test_error_mean:.4f} \\pm {r.test_error_ci95:.4f}$" in tex
