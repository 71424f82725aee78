"""LaTeX text for the reports' tables (`document.Table.latex`), for papers: pareto.tex beside
pareto.md, and so on, from the same cells as the Markdown, so numbers read exactly as there;
`mean ± CI` becomes `$mean \\pm CI$`, LaTeX's special characters are escaped and the reports'
Greek letters and symbols become math, so the file is plain ASCII that pdflatex reads with
nothing but `\\usepackage{booktabs}`.
"""

from __future__ import annotations

import re

# mean ± half-width, as the Markdown writes it (a signed difference included)
_PLUS_MINUS = re.compile(r"([+-]?\d[\d,]*(?:\.\d+)?) ± (\d[\d,]*(?:\.\d+)?)")
_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "|": r"\textbar{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}
_SYMBOLS = {
    "ε": r"$\varepsilon$",
    "δ": r"$\delta$",
    "γ": r"$\gamma$",
    "α": r"$\alpha$",
    "λ": r"$\lambda$",
    "σ": r"$\sigma$",
    "ρ": r"$\rho$",
    "±": r"$\pm$",
    "≤": r"$\le$",
    "≥": r"$\ge$",
    "≠": r"$\neq$",
    "×": r"$\times$",
    "·": r"$\cdot$",
    "★": r"$\star$",
    "→": r"$\to$",
    "−": "-",
    "–": "--",
    "—": "---",
    "ŷ": r"$\hat{y}$",
}


def escape(text: str) -> str:
    """Text for a LaTeX cell or caption: special characters escaped, symbols as math."""
    return "".join(_ESCAPES.get(ch) or _SYMBOLS.get(ch) or ch for ch in text)


def cell(text: str) -> str:
    """A Markdown cell in LaTeX: each `mean ± CI` as one math expression."""
    out, last = [], 0
    for match in _PLUS_MINUS.finditer(text):
        mean, half = (g.replace(",", "{,}") for g in match.groups())
        out += [escape(text[last : match.start()]), f"${mean} \\pm {half}$"]
        last = match.end()
    return "".join(out) + escape(text[last:])
