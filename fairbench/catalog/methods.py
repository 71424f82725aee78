"""What `fairbench describe METHOD` shows, as data: read off the plugin class, never restated.

Every entry comes from a declaration the code enforces: the hyper-parameter table from the
pydantic `Hparams`, the knob from its `Knob`, the constraints from the tuple the plugin checks
trials against, the privacy notions from its `privacy_notion` choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args, get_origin

from fairbench.catalog.fields import FieldRow, field_rows
from fairbench.methods.base import Method
from fairbench.methods.knob import Knob


@dataclass(frozen=True)
class KnobCard:
    """The fairness knob: range in interval notation; meaning and direction where declared
    (a third-party plugin may name its knob only)."""

    name: str
    range: str | None = None
    meaning: str | None = None
    direction: str | None = None


@dataclass(frozen=True)
class MethodCard:
    kind: Literal["method"]
    name: str
    description: str
    paper: str
    private: bool
    privacy_notions: list[str]
    knob: KnobCard | None
    constraints: list[str] | None  # None: the plugin declares none
    declared_constraints: bool
    ignores_fairness: bool  # no knob: trains for no constraint, evaluated on the run's
    models: list[str]
    reconstructed: str | None
    sensitive_at_test: bool
    target_metric: str | None = None
    hyperparameters: list[FieldRow] = field(default_factory=list)


def describe_method(cls: type[Method]) -> MethodCard:
    hparams = cls.Hparams
    constraints = getattr(cls, "constraints", None)
    return MethodCard(
        kind="method",
        name=cls.name,
        description=cls.description,
        paper=getattr(cls, "paper", ""),
        private=cls.private,
        privacy_notions=_notions(cls),
        knob=_knob(cls.knob),
        constraints=None if constraints is None else list(constraints),
        declared_constraints=getattr(cls, "declared_constraints", False),
        ignores_fairness=cls.knob is None,
        models=_choices(hparams, "model") or ["linear"],
        reconstructed=cls.reconstructed,
        sensitive_at_test=cls.sensitive_at_test,
        target_metric=getattr(cls, "target_metric", None),
        hyperparameters=field_rows(hparams),
    )


def _knob(knob: Knob | str | None) -> KnobCard | None:
    if knob is None:
        return None
    if isinstance(knob, str):
        return KnobCard(knob)
    return KnobCard(knob.name, knob.range_text, knob.meaning, knob.direction.value)


def _notions(cls: type[Method]) -> list[str]:
    """The `privacy_notion` choices where the method has the hyper-parameter (default first);
    else `full` for a private method and `non-private` for the others."""
    choices = _choices(cls.Hparams, "privacy_notion")
    if choices:
        default = cls.Hparams.model_fields["privacy_notion"].default
        return sorted(choices, key=lambda c: c != default)
    return ["full"] if cls.private else ["non-private"]


def _choices(hparams, name: str) -> list[str]:
    info = hparams.model_fields.get(name)
    if info is None or get_origin(info.annotation) is not Literal:
        return []
    return [str(c) for c in get_args(info.annotation)]
