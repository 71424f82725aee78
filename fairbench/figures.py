"""Every paper figure built from finished `fairbench tune` (or `fairbench run`) outputs,
registered in one place (here, outside `fairbench.report`, so that the command line reads the
table without importing the report package and matplotlib).

A figure is a name, the module that builds it and where its committed copy lives. The module
defines `outputs(inputs)`: what the figure consists of, in order, as data (`Csv`, `Plot`,
`Doc`); it writes nothing. `build` writes them all one way: CSVs as pandas writes them, plots
through `figure.save` (PNG and PDF, one resolution, fixed metadata), documents as Markdown with
a LaTeX (booktabs) `.tex` of their tables beside, each file under a temporary name first.
`fairbench figure NAME` is generated from this table, and the tests render every entry from
its committed inputs (`committed`) and check that no text overlaps.

Modules are imported when a figure is built, so the command line starts without matplotlib.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fairbench.report.outputs import Output


@dataclass(frozen=True)
class FigureSpec:
    name: str  # `fairbench figure NAME`
    module: str  # defines outputs(inputs: list[Path]) -> Iterator[Output]
    out: str  # where the committed figure lives (the command's default --out)
    make: str  # the Makefile target that tunes and builds it
    summary: str  # the command's help
    inputs_help: str
    committed: tuple[str, ...]  # the tune outputs the committed figure is built from


def _paths(root: str, names: list[str]) -> tuple[str, ...]:
    return tuple(f"{root}/{name}" for name in names)


FIGURES: dict[str, FigureSpec] = {
    spec.name: spec
    for spec in (
        FigureSpec(
            name="privacy-cost",
            module="fairbench.report.privacy_cost",
            out="results/figures/fig-privacy-cost",
            make="fig-privacy-cost",
            summary="Test error of the configuration tuned at each violation target, against "
            "epsilon: per dataset a CSV, a figure per model (PNG, PDF) and a markdown note "
            "(does privacy bite?).",
            inputs_help="`fairbench tune --out` directories",
            # what the Makefile's default PRIVACY_COST commits (issue 40's regeneration)
            committed=_paths("results/tune/privacy-cost", ["german", "compas", "parkinsons"]),
        ),
        FigureSpec(
            name="tuning-cost",
            module="fairbench.report.tuning_cost",
            out="results/figures/fig-tuning-cost",
            make="fig-tuning-cost",
            summary="Tuning free versus paid for (private selection) at the same total "
            "epsilon: per dataset, method and epsilon the released models' test error, "
            "violation and rank under each.",
            inputs_help="`fairbench tune --out` directories of both arms (private and uncharged)",
            # what the Makefile's default TUNING_COST commits (issue 40's regeneration)
            committed=_paths(
                "results/tune/tuning-cost",
                [
                    f"{d}-{arm}"
                    for d in ("german", "compas", "parkinsons")
                    for arm in ("free", "paid")
                ],
            ),
        ),
        FigureSpec(
            name="literature",
            module="fairbench.report.literature",
            out="results/figures/fig-literature",
            make="fig-literature",
            summary="The literature baselines beside the seed methods, tuned, in both privacy "
            "notions: per dataset and constraint a CSV, a figure and the dominance table; the "
            "published Adult points against ours.",
            inputs_help="`fairbench tune --out` directories",
            committed=_paths("results/tune", ["literature", "literature-adult-dp"]),
        ),
        FigureSpec(
            name="disparate-impact",
            module="fairbench.report.disparate_impact",
            out="results/figures/fig-disparate-impact",
            make="fig-disparate-impact",
            summary="The group accuracy cost of privacy: per dataset, epsilon and method each "
            "group's test-accuracy drop from the non-private model on the same split, and the "
            "minority's drop paired by seed against DP-SGD's.",
            inputs_help="`fairbench run --out` directories holding erm beside private methods",
            committed=("results/figures/fig-disparate-impact/run",),
        ),
        FigureSpec(
            name="against-fixed",
            module="fairbench.report.against_fixed",
            out="results/figures/raco-dp-paper-default",
            make="raco-dp-paper-default",
            summary="A fixed configuration (e.g. a method's paper configuration) against the "
            "tuned selection on the tune's own final seeds: per target the paired test-error "
            "difference with its 95% interval.",
            inputs_help="a `fairbench run --out` directory of the fixed configuration and the "
            "`fairbench tune --out` directories it is compared with",
            committed=(
                "results/figures/raco-dp-paper-default/run",
                "results/tune/privacy-cost/parkinsons",
                "results/tune/literature-adult-dp",
            ),
        ),
    )
}


def outputs(name: str, inputs: list[Path]) -> Iterator[Output]:
    """The figure's outputs, in order, drawn but not written."""
    module = importlib.import_module(FIGURES[name].module)
    return module.outputs([Path(p) for p in inputs])


def _write_text(path: Path, text: str) -> Path:
    """Never a half-written file under the final name."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def write(output: Output, dest: Path) -> list[Path]:
    """One output into `dest`; returns the files written."""
    from fairbench.report.figure import save
    from fairbench.report.outputs import Csv, Plot

    if isinstance(output, Csv):
        return [_write_text(dest / output.name, output.frame.to_csv(index=False))]
    if isinstance(output, Plot):
        paths = save(output.figure, dest / output.stem)
        output.figure.clear()  # free the drawing now: a figure can hold many
        return paths
    md = _write_text(dest / f"{output.name}.md", output.document.markdown())
    tex = _write_text(dest / f"{output.name}.tex", output.document.latex(md.name))
    return [md, tex]


def build(name: str, inputs: list[Path], dest: Path) -> list[Path]:
    """Build figure `name` from `inputs` into `dest`; returns every file written."""
    written: list[Path] = []
    for output in outputs(name, inputs):
        dest.mkdir(parents=True, exist_ok=True)
        written += write(output, dest)
    return written
