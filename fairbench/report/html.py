"""One self-contained HTML page per run (report.html): title, warnings, every figure (PNG,
base64-embedded), the privacy ledger summary, every table of pareto.md, paired.md and
constraints.md (rendered from the same `Document` as the Markdown, so the numbers are the
same), and the run's config. No script, no font, no stylesheet or image outside the file: it
opens offline, and mailed or archived it still shows everything.
"""

from __future__ import annotations

import base64
import math
from html import escape
from pathlib import Path

import pandas as pd

from fairbench.report.document import Document, Table, inline_html

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222;
       padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
.meta, figcaption, .note { color: #555; font-size: 0.9em; }
.scroll { overflow-x: auto; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { padding: 0.2em 0.6em; border-bottom: 1px solid #ddd; vertical-align: top; }
thead th { border-bottom: 2px solid #444; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
ul.warnings li { color: #8a4b00; margin-bottom: 0.3em; }
figure { margin: 1em 0; } img { max-width: 100%; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 0.85em; }
"""
# the report's Markdown documents, in the order the page shows them: (anchor, contents entry)
DOCUMENTS = {
    "pareto.md": ("pareto", "Pareto tables"),
    "paired.md": ("paired", "Paired comparisons"),
    "constraints.md": ("constraints", "Constraint satisfaction"),
    "references.md": ("references", "Published curves"),
    "group_losses.md": ("group-losses", "Group losses"),
}


def _eps(value: float) -> str:
    return "non-private" if math.isinf(value) else f"{value:g}"


def privacy_html(summary: pd.DataFrame) -> str:
    header = [
        "dataset",
        "constraint",
        "method",
        "privacy",
        "ε target",
        "δ",
        "trials",
        "ε spent (mean)",
        "ε spent (max)",
        "releases: mechanism (parameters)",
    ]
    rows = []
    for r in summary.itertuples(index=False):
        private = not math.isinf(r.epsilon)  # a non-private entry has no delta and spends 0
        rows.append(
            [
                r.dataset,
                r.constraint,
                r.label,
                r.privacy_notion,
                _eps(r.epsilon),
                f"{r.delta:g}" if private else "",
                str(r.trials),
                f"{r.epsilon_spent_mean:.4f}" if private else "",
                f"{r.epsilon_spent_max:.4f}" if private else "",
                r.releases,
            ]
        )
    note = (
        "ε spent: computed by the suite's PLD accountant from each trial's ledger of "
        "DpEvents (add/remove-one neighbours unless the privacy notion says otherwise). "
        "Releases: each accounted mechanism with its rounds, sampling rate q, Gaussian "
        "noise multiplier σ and Laplace scale b; a range spans the trials "
        "(hyper-parameters and calibration differ between them)."
    )
    return f'<p class="note">{escape(note)}</p>\n' + Table(header, rows, "llllrrrrrl").html()


def figure_html(png: Path, run_dir: Path) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    name = png.relative_to(run_dir).as_posix() if png.is_relative_to(run_dir) else png.name
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{escape(png.stem)}">'
        f"<figcaption>{escape(name)} (PDF beside it)</figcaption></figure>"
    )


def report_html(
    run_dir: Path,
    title: str,
    warnings: list[str],
    figures: list[Path],
    summary: pd.DataFrame,
    documents: dict[str, Document],
    config_yaml: str,
    n_trials: int,
) -> str:
    """The page. `documents` maps the report's Markdown file names to their documents."""
    from fairbench import __version__

    sections = [("warnings", "Warnings"), ("figures", "Figures"), ("privacy", "Privacy ledger")]
    sections += [DOCUMENTS[name] for name in DOCUMENTS if name in documents]
    sections.append(("config", "Config"))
    nav = " · ".join(f'<a href="#{anchor}">{escape(name)}</a>' for anchor, name in sections)
    warned = (
        '<ul class="warnings">' + "".join(f"<li>{inline_html(w)}</li>" for w in warnings) + "</ul>"
        if warnings
        else "<p>None.</p>"
    )
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta">run directory {escape(run_dir.name)} · {n_trials} finished trials · '
        f"fairbench {escape(__version__)}</p>",
        f"<nav>{nav}</nav>",
        f'<section id="warnings"><h2>Warnings</h2>\n{warned}</section>',
        '<section id="figures"><h2>Figures</h2>\n'
        + "\n".join(figure_html(f, run_dir) for f in figures)
        + "</section>",
        f'<section id="privacy"><h2>Privacy ledger</h2>\n{privacy_html(summary)}</section>',
        *(
            f'<section id="{DOCUMENTS[name][0]}">\n{documents[name].html()}</section>'
            for name in DOCUMENTS
            if name in documents
        ),
        f'<section id="config"><h2>Config</h2>\n<pre>{escape(config_yaml)}</pre></section>',
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
