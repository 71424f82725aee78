"""`fairbench describe NAME`: a method's or a dataset's card, for people or (`--json`) scripts."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fairbench.catalog.datasets import DatasetCard
from fairbench.catalog.fields import FieldRow
from fairbench.catalog.methods import MethodCard
from fairbench.cli.common import console


def describe(
    name: Annotated[str, typer.Argument(metavar="NAME", help="a method or a dataset")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """A method's hyper-parameters (defaults, ranges, meaning), knob, privacy notions,
    constraints and paper; or a dataset's rows, groups, files, checksums and card."""
    from fairbench.catalog import as_json as card_json
    from fairbench.catalog import describe as card_of

    card = card_of(name)
    if as_json:
        print(json.dumps(card_json(card), indent=2))
    elif isinstance(card, MethodCard):
        _print_method(card)
    else:
        _print_dataset(card)


def _lines(pairs: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        console.print(
            f"{key + ':':{width + 1}s} {value}", highlight=False, markup=False, soft_wrap=True
        )


def _print_method(card: MethodCard) -> None:
    console.print(f"{card.name}: {card.description}", highlight=False, markup=False, soft_wrap=True)
    knob = card.knob
    if knob is None and card.target_metric:
        knob_text = "none (trains for its target metric, below, with nothing to tune)"
    elif knob is None:
        knob_text = "none (trains for no fairness constraint)"
    elif knob.range is None:
        knob_text = knob.name
    else:
        knob_text = f"{knob.name} in {knob.range}: {knob.meaning} (larger is {knob.direction})"
    if card.constraints is None:
        constraints = "not declared by the plugin"
    else:
        constraints = ", ".join(card.constraints)
        constraints += "; or a declared rate-constraint set" if card.declared_constraints else ""
        constraints += " (ignored in training: evaluated only)" if card.ignores_fairness else ""
    _lines(
        [
            ("paper", card.paper or "(not declared by the plugin)"),
            ("private", "yes" if card.private else "no"),
            (
                "privacy notion",
                " or ".join(card.privacy_notions)
                + (" (set by hparams.privacy_notion)" if len(card.privacy_notions) > 1 else ""),
            ),
            ("fairness knob", knob_text),
            ("constraints", constraints),
            ("models", ", ".join(card.models)),
            (
                "reads A at test",
                "yes (group-aware post-processing)" if card.sensitive_at_test else "no",
            ),
            (
                "reconstructed",
                card.reconstructed or "no (implemented from a complete specification)",
            ),
            *([("target metric", card.target_metric)] if card.target_metric else []),
        ]
    )
    _print_fields(
        card.hyperparameters,
        f"hyper-parameters (config: methods: - name: {card.name}, hparams: {{...}})",
    )


def _print_fields(rows: list[FieldRow], title: str) -> None:
    table = Table(title=title, title_justify="left")
    for col in ("name", "type", "default", "valid", "meaning"):
        table.add_column(col, overflow="fold")
    for r in rows:
        default = "null" if r.default is None else str(r.default)
        default = default.lower() if isinstance(r.default, bool) else default
        table.add_row(*(escape(x) for x in (r.name, r.type, default, r.valid, r.meaning)))
    Console(width=max(console.width, 120)).print(table)  # logs and CI: wider than 80


def _print_dataset(card: DatasetCard) -> None:
    console.print(f"{card.name}: {card.description}", highlight=False, markup=False, soft_wrap=True)
    status = {
        "verified": "files present and verified",
        "generated": "generated (no files)",
        "missing": "files missing",
        "corrupted": "a file does not verify",
    }[card.status]
    pairs = [("version", card.version), ("status", status)]
    if card.problem:
        pairs.append(("fix", card.problem))
    pairs += [(k.lower(), v) for k, v in card.card.items()]
    s = card.summary
    if s is not None:
        pairs += [
            ("loaded rows", f"{s.rows:,} (features {s.features})"),
            (
                "loaded groups",
                f"{s.sensitive_attribute}: " + ", ".join(f"{g.name} {g.rows:,}" for g in s.groups),
            ),
            (
                "loaded label",
                " / ".join(s.label)
                + ("" if s.positive_rate is None else f" (positive rate {s.positive_rate:.3f})")
                if s.label
                else "regression target",
            ),
            ("splits (seed 0)", ", ".join(f"{k} {v:,}" for k, v in s.splits.items())),
        ]
    else:
        pairs.append(
            (
                "loaded counts",
                "need the data files (see fix)" if card.status != "generated" else "-",
            )
        )
    pairs += [("data folder", card.data_root), ("card", card.card_path or "not in this install")]
    _lines(pairs)
    if card.files:
        table = Table(title="files", title_justify="left")
        for col in ("path", "present", "sha256", "expected", "verified", "read"):
            table.add_column(col, overflow="fold")
        for f in card.files:
            ok = {True: "yes", False: "NO: mismatch", None: "-"}[f.sha256_ok]
            table.add_row(
                escape(f.path),
                "yes" if f.present else "no",
                (f.sha256 or "-")[:16],
                (f.expected_sha256 or "none published")[:16],
                ok,
                "yes" if f.read else "",
            )
        Console(width=max(console.width, 120)).print(table)
    _print_fields(
        card.options, f"options (config: datasets: - name: {card.name}, options: {{...}})"
    )
