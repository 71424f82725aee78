"""The rows of a hyper-parameter or option table, read off a pydantic model.

`fairbench describe` shows every field a config may set with its type, default, valid range and
meaning. Deriving the rows from the model itself (annotations, `Field` constraints, `Literal`
choices, descriptions) means the table cannot drift from what validation actually enforces.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class FieldRow:
    """One settable field: `type` as a config writes it, the `default` a config that omits the
    field gets, the `valid` values (an interval such as `(0, inf)`, or choices `a | b`) and
    one line of `meaning` ("" where the model documents none)."""

    name: str
    type: str
    default: Any
    valid: str
    meaning: str


def field_rows(model: type[BaseModel]) -> list[FieldRow]:
    """Every field of `model`, in declaration order."""
    defaults = _resolved_defaults(model)
    return [
        FieldRow(
            name,
            _type_text(info.annotation),
            defaults.get(name, _plain_default(info)),
            _valid_text(info),
            _meaning(model, name),
        )
        for name, info in model.model_fields.items()
    ]


def _resolved_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """What an empty config resolves to, validators included (e.g. raco-dp's noise multiplier
    is 4 under its default `calibrate: steps`); {} where some field has no default."""
    try:
        return model().model_dump(mode="json")
    except ValidationError:
        return {}


def _plain_default(info: FieldInfo) -> Any:
    if info.is_required():
        return None
    return info.get_default(call_default_factory=True)


def _meaning(model: type[BaseModel], name: str) -> str:
    """The field's description; a subclass that re-declares a field only to change its default
    keeps the meaning its base documents."""
    for cls in model.__mro__:
        fields = getattr(cls, "model_fields", None) if isinstance(cls, type) else None
        if fields and name in fields and fields[name].description:
            return fields[name].description
    return ""


def _members(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a union (`float | None`), or the annotation alone."""
    if get_origin(annotation) in (Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def _type_text(annotation: Any) -> str:
    parts = []
    for member in _members(annotation):
        if member is type(None):
            parts.append("null")
        elif get_origin(member) is Literal:
            parts.append("choice")
        elif get_origin(member) is not None:  # list[int], dict[str, float], ...
            parts.append(str(member).replace("typing.", ""))
        else:
            parts.append(getattr(member, "__name__", str(member)))
    return " | ".join(dict.fromkeys(parts))


def _valid_text(info: FieldInfo) -> str:
    """Interval notation from ge/gt/le/lt, the choices of a Literal, `true | false` for a bool;
    `any` where nothing is enforced; `or null` where None is accepted too."""
    members = _members(info.annotation)
    nullable = type(None) in members
    choices = [str(c) for m in members if get_origin(m) is Literal for c in get_args(m)]
    if choices:
        text = " | ".join(choices)
    elif bool in members:
        text = "true | false"
    else:
        text = _interval(info.metadata)
    return f"{text} or null" if nullable and text != "any" else text


def _interval(metadata: list[Any]) -> str:
    low: Any = -math.inf  # annotated_types' bounds: any comparable value (int or float here)
    high: Any = math.inf
    low_open, high_open = True, True
    for rule in metadata:
        if isinstance(rule, Ge):
            low, low_open = rule.ge, False
        elif isinstance(rule, Gt):
            low, low_open = rule.gt, True
        elif isinstance(rule, Le):
            high, high_open = rule.le, False
        elif isinstance(rule, Lt):
            high, high_open = rule.lt, True
    if math.isinf(low) and math.isinf(high):
        return "any"
    left = "(" if low_open or math.isinf(low) else "["
    right = ")" if high_open or math.isinf(high) else "]"
    return f"{left}{_number(low)}, {_number(high)}{right}"


def _number(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:g}"
