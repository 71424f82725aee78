"""Every figure fairbench draws goes through here: one way to make a figure, to lay it out and
to save it, and one check that no text runs into other text.

- `new_figure`: a panel grid under matplotlib's constrained layout, not registered with pyplot
  (nothing to close, no global state between builders).
- `suptitle`, `legend_outside`, `legend_below`, `panel_note`: the title wrapped to the figure,
  the legend beside or under the panels (the figure grows by its size) and a note under a
  panel, all placed by the layout engine so they take their own room instead of covering
  panels, tick labels or each other.
- `place_labels`: labels written beside data points (knob values, published violations), each
  at the first offset where it touches no other text; one that fits nowhere is left out (the
  tables beside every figure hold the numbers).
- `finish`: the last step of every builder (and of `save`): notes wrapped to their panel's
  final width, then the labels placed.
- `save`: PNG and PDF at one resolution with fixed metadata, so rebuilding a figure from the
  same inputs rewrites the same bytes.
- `overlaps`: every pair of drawn texts (titles, axis labels, tick labels, legend entries,
  notes, annotations) whose boxes intersect, and every text that runs into a panel it does
  not belong to; the tests run it on every registered figure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import matplotlib

matplotlib.use("Agg")
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.text import Text
from matplotlib.transforms import Bbox

DPI = 150  # every PNG; the PDF is vector
# No creation date, producer or software version in the files: the same figure, the same bytes.
PNG_METADATA: dict[str, Any] = {"Software": None}
PDF_METADATA: dict[str, Any] = {"CreationDate": None, "Producer": None, "Creator": None}
NOTE_SIZE = 7  # points: notes under panels
TOLERANCE = 0.5  # pixels two boxes may share before they count as overlapping
# what `finish` still has to do, kept on the figure: the title to rewrap, notes to wrap and
# labels to place
_TITLE = "_fairbench_title"
_NOTES = "_fairbench_notes"
_LABELS = "_fairbench_labels"


def new_figure(
    rows: int, cols: int, panel: tuple[float, float], *, sharey: bool = False
) -> tuple[Figure, list[list[Axes]]]:
    """A figure of `rows` x `cols` panels, each about `panel` inches (width, height), laid out
    by the constrained layout engine; returns it and its axes as rows of columns."""
    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey)
    return fig, [list(row) for row in axes]


TITLE_ROOM = 1.0  # inches kept above a tall outside legend for a two-line title


def legend_outside(fig: Figure, axes: Iterable[Axes], extra: dict[str, Any] | None = None) -> None:
    """One legend for every series of every panel (a series may appear in some panels only),
    right of the panels; `extra` adds entries (label -> handle) after the panels' own."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    entries.update(extra or {})
    if entries:
        legend = fig.legend(
            entries.values(),
            entries.keys(),
            fontsize=8,
            loc="outside right center",
            frameon=False,
        )
        # the figure grows by the legend's width, so the panels keep theirs; and, where the
        # legend is taller than the panels (a one-panel figure of many methods), by the height
        # it needs to stay clear of the title above it
        extent = legend.get_window_extent(_renderer(fig))
        fig.set_figwidth(fig.get_figwidth() + extent.width / fig.dpi)
        if extent.height / fig.dpi > fig.get_figheight() - TITLE_ROOM:
            fig.set_figheight(extent.height / fig.dpi + TITLE_ROOM)


def legend_below(fig: Figure, handles: Sequence[Any], ncol: int) -> None:
    """A legend of `handles` under the panels, in `ncol` columns; the figure grows by its
    height, so the panels keep theirs."""
    legend = fig.legend(
        handles=handles, loc="outside lower center", ncol=ncol, fontsize=8, frameon=False
    )
    height = legend.get_window_extent(_renderer(fig)).height / fig.dpi
    fig.set_figheight(fig.get_figheight() + height)


def _fill(fig: Figure, text: str, fontsize: float, width_in: float) -> str:
    """`text` wrapped at spaces so that each line, as drawn at `fontsize` points, is at most
    `width_in` inches wide (a single word wider than that keeps its own line)."""
    renderer = _canvas(fig).get_renderer()
    prop = FontProperties(size=fontsize)
    limit = width_in * fig.dpi
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            trial = f"{line} {word}" if line else word
            width = renderer.get_text_width_height_descent(trial, prop, ismath=False)[0]
            if width <= limit or not line:
                line = trial
            else:
                lines.append(line)
                line = word
        lines.append(line)
    return "\n".join(lines)


def suptitle(fig: Figure, text: str, fontsize: float = 10) -> Text:
    """The figure's title, wrapped to the figure's width (again by `finish`, once a legend
    beside the panels has widened the figure)."""
    fig.__dict__[_TITLE] = (text, fontsize)
    return fig.suptitle(_fill(fig, text, fontsize, fig.get_figwidth() - 0.2), fontsize=fontsize)


def panel_note(ax: Axes, text: str, fontsize: float = NOTE_SIZE) -> Text:
    """A note under a panel, below its x-axis label; `finish` wraps it to the panel's final
    width, and the layout makes room for it (an annotation is an axis decoration to the
    constrained layout engine)."""
    fig = _figure(ax)
    spec = ax.get_subplotspec()
    share = 1.0 if spec is None else 1 / spec.get_gridspec().ncols
    note = ax.annotate(
        _fill(fig, text, fontsize, 0.6 * share * fig.get_figwidth()),  # until `finish`
        xy=(0.0, 0.0),
        xycoords=("axes fraction", ax.xaxis.label),
        xytext=(0, -4),
        textcoords="offset points",
        ha="left",
        va="top",
        fontsize=fontsize,
        annotation_clip=False,
    )
    note.set_in_layout(True)
    fig.__dict__.setdefault(_NOTES, []).append((ax, note, text, fontsize))
    return note


def place_labels(
    ax: Axes, labels: Iterable[tuple], *, color: Any = "black", fontsize: float = 6
) -> None:
    """Labels (text, x, y) or (text, x, y, colour) to write beside data points of `ax`; `finish`
    writes each at the first of a few offsets where its box stays inside the panel and touches
    no other text, and leaves out one that fits nowhere (the tables hold every number)."""
    ax.figure.__dict__.setdefault(_LABELS, []).append((ax, list(labels), color, fontsize))


def finish(fig: Figure) -> Figure:
    """Lay the figure out for good: the title wrapped to the figure's final width, each panel
    note to its panel's (twice: the layout moves as the notes shrink), then the labels written
    beside the points where they fit. Idempotent; `save` calls it too."""
    if _TITLE in fig.__dict__:
        text, fontsize = fig.__dict__.pop(_TITLE)
        fig.suptitle(_fill(fig, text, fontsize, fig.get_figwidth() - 0.2), fontsize=fontsize)
    notes = fig.__dict__.pop(_NOTES, [])
    for _ in range(2):
        renderer = _renderer(fig)
        for ax, note, text, fontsize in notes:
            width = 0.98 * ax.get_window_extent(renderer).width / fig.dpi
            note.set_text(_fill(fig, text, fontsize, width))
    for ax, labels, color, fontsize in fig.__dict__.pop(_LABELS, []):
        _place(ax, labels, color, fontsize)
    return fig


def _place(ax: Axes, labels: list[tuple], color: Any, fontsize: float) -> int:
    """`place_labels`' work, on the figure as drawn; returns the number left out."""
    fig = _figure(ax)
    renderer = _renderer(fig)
    taken = [_extent(t, renderer) for t, _ in _texts(fig, renderer)]
    panel = ax.get_window_extent(renderer)
    offsets = ((4, 3), (4, -9), (-4, 3), (-4, -9), (8, 10), (8, -16))
    left_out = 0
    for text, x, y, *colour in labels:
        for dx, dy in offsets:
            label = ax.annotate(
                text,
                (x, y),
                textcoords="offset points",
                xytext=(dx, dy),
                ha="left" if dx > 0 else "right",
                fontsize=fontsize,
                color=colour[0] if colour else color,
            )
            label.set_in_layout(False)  # inside the panel: it must not move the layout
            box = _extent(label, renderer)
            inside = panel.x0 <= box.x0 and box.x1 <= panel.x1 and panel.y0 <= box.y0
            if inside and box.y1 <= panel.y1 and not any(_intersect(box, o) for o in taken):
                taken.append(box)
                break
            label.remove()
        else:
            left_out += 1
    return left_out


def safe_stem(stem: Path) -> Path:
    """The file name with letters, digits, `.`, `_` and `-` only: no quoting in a shell."""
    return stem.with_name(re.sub(r"[^A-Za-z0-9_.-]+", "_", stem.name).strip("_"))


def save(fig: Figure, stem: Path) -> list[Path]:
    """Write `stem`.png (DPI) and `stem`.pdf with fixed metadata, each under a temporary name
    first (never a half-written file under the final one); returns both paths."""
    finish(fig)
    stem = safe_stem(Path(stem))
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix, metadata in ((".png", PNG_METADATA), (".pdf", PDF_METADATA)):
        path = stem.with_suffix(suffix)
        tmp = path.with_name(path.name + ".tmp")
        fig.savefig(
            tmp, format=suffix[1:], dpi=DPI, bbox_inches="tight", pad_inches=0.1, metadata=metadata
        )
        tmp.replace(path)
        paths.append(path)
    return paths


# -- the overlap check ---------------------------------------------------------------------


def _figure(ax: Axes) -> Figure:
    """The figure a panel is on (the suite draws no subfigures)."""
    if not isinstance(ax.figure, Figure):
        raise TypeError(f"a panel on a {type(ax.figure).__name__}: only figures are laid out")
    return ax.figure


def _canvas(fig: Figure) -> FigureCanvasAgg:
    """The figure's Agg canvas, attached first where it has another."""
    return fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)


def _renderer(fig: Figure):
    canvas = _canvas(fig)
    canvas.draw()
    return canvas.get_renderer()


def _shown(text: Text | None) -> TypeGuard[Text]:
    return text is not None and text.get_visible() and bool(text.get_text().strip())


def _texts(fig: Figure, renderer) -> list[tuple[Text, Axes | None]]:
    """Every text the figure draws, with the panel it belongs to (None: the figure's)."""
    out: list[tuple[Text, Axes | None]] = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        # the left and right titles' Text objects have no public getter
        titles = [ax.title, ax._left_title, ax._right_title]  # type: ignore[attr-defined]
        own: list[Text] = [*titles, *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):
            if not axis.get_visible():
                continue
            own += [axis.label, axis.get_offset_text()]
            # the ticks drawn (inside the view limits): a private method, no public equivalent
            for tick in axis._update_ticks():  # type: ignore[union-attr]
                own += [tick.label1, tick.label2]
        legend = ax.get_legend()
        if legend is not None:
            own += [*legend.get_texts(), legend.get_title()]
        out += [(t, ax) for t in own if _shown(t)]
    shared: list[Text | None] = [*fig.texts]
    for name in ("_suptitle", "_supxlabel", "_supylabel"):
        shared.append(getattr(fig, name, None))
    for legend in fig.legends:
        shared += [*legend.get_texts(), legend.get_title()]
    out += [(t, None) for t in shared if _shown(t)]
    seen: set[int] = set()  # the suptitle is also among fig.texts
    unique: list[tuple[Text, Axes | None]] = []
    for t, panel in out:
        if id(t) not in seen:
            seen.add(id(t))
            unique.append((t, panel))
    return unique


def _extent(text: Text, renderer) -> Bbox:
    return text.get_window_extent(renderer)


def _intersect(a: Bbox, b: Bbox) -> bool:
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width > TOLERANCE and height > TOLERANCE


def _name(text: Text, ax: Axes | None, fig: Figure) -> str:
    where = "figure" if ax is None else f"panel {fig.axes.index(ax)} {ax.get_title()!r}"
    content = text.get_text().replace("\n", " ")
    return f"{content[:60]!r} ({where})"


def overlaps(fig: Figure) -> list[str]:
    """One line per pair of drawn texts whose boxes intersect, and per text that runs into a
    panel other than its own (a figure's text into any panel); empty when the layout is clean."""
    renderer = _renderer(fig)
    texts = [(t, ax, _extent(t, renderer)) for t, ax in _texts(fig, renderer)]
    problems = []
    for i, (a, ax_a, box_a) in enumerate(texts):
        for b, ax_b, box_b in texts[i + 1 :]:
            if _intersect(box_a, box_b):
                problems.append(f"text {_name(a, ax_a, fig)} overlaps {_name(b, ax_b, fig)}")
    panels = [(ax, ax.get_window_extent(renderer)) for ax in fig.axes if ax.get_visible()]
    for text, ax_t, box in texts:
        for ax, area in panels:
            if ax is not ax_t and _intersect(box, area):
                problems.append(
                    f"text {_name(text, ax_t, fig)} runs into panel {fig.axes.index(ax)} "
                    f"{ax.get_title()!r}"
                )
    return problems
