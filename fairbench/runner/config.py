"""Experiment configs: YAML validated by a schema, expanded into fully resolved trials.

Everything that can be wrong with a config is found here, before a run directory exists, so a
bad config never leaves a partial result behind.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fairbench import constraints
from fairbench.constraints import CustomConstraintSet
from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError, DataError
from fairbench.methods import get_method, method_class
from fairbench.methods.base import series_label
from fairbench.methods.trial import resolve_device
from fairbench.metrics import VIOLATIONS
from fairbench.privacy import DEFAULT_DELTA, PrivacyBudget
from fairbench.privacy.noise import OPENDP_MISSING
from fairbench.runner.config_files import read_config, resolve_path
from fairbench.runner.trial import TrialSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetEntry(_Strict):
    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    if_missing: Literal["error", "synthetic"] = "error"  # synthetic: fall back when files absent


class MethodEntry(_Strict):
    name: str
    label: str | None = None  # how reports name this entry; defaults to the method name
    hparams: dict[str, Any] = Field(default_factory=dict)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)  # cartesian product over values
    knobs: list[float] | None = None  # fairness knob values, for methods that have one


class ReferenceCurve(_Strict):
    """A published trade-off curve to compare against, point by point at matched violation."""

    label: str
    source: str = ""
    dataset: str
    constraint: str
    epsilon: float
    privacy_notion: str | None = None  # compare only with rows of this notion
    points: list[list[float]] = Field(min_length=1)  # [test error, violation] pairs

    @field_validator("points")
    @classmethod
    def _pairs(cls, value: list[list[float]]) -> list[list[float]]:
        if any(len(p) != 2 for p in value):
            raise ValueError("each point is [test error, violation]")
        return value


class ExperimentConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    datasets: list[DatasetEntry] = Field(min_length=1)
    methods: list[MethodEntry] = Field(min_length=1)
    constraint: str | CustomConstraintSet = "demographic_parity"
    epsilons: list[float] = Field(default_factory=list)
    delta: float = DEFAULT_DELTA
    seeds: int | list[int] = 10
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    # exact discrete Gaussian / Laplace noise from OpenDP instead of seeded float64 noise
    secure_noise: bool = False
    references: list[ReferenceCurve] = Field(default_factory=list)
    # the tune config that selected these hyper-parameters (written by `fairbench tune`);
    # None: set by hand, and figures say "defaults, untuned"
    tuned_by: str | None = None

    @field_validator("secure_noise")
    @classmethod
    def _opendp_installed(cls, value: bool) -> bool:
        if value and importlib.util.find_spec("opendp") is None:
            raise ValueError(OPENDP_MISSING)
        return value

    @field_validator("datasets", mode="before")
    @classmethod
    def _names_as_entries(cls, value: Any) -> Any:
        """Dataset entries: a bare name, or a `csv:` mapping (`_csv_entry`), as an entry; the
        tune config's datasets go through this too."""
        entries = _names_as_entries(value)
        if not isinstance(entries, list):
            return entries
        entries = [_csv_entry(v) for v in entries]
        if sum(isinstance(e, dict) and e.get("name") == "csv" for e in entries) > 1:
            raise ValueError("one CSV file per config: its rows are all named dataset `csv`")
        return entries

    @field_validator("methods", mode="before")
    @classmethod
    def _method_names_as_entries(cls, value: Any) -> Any:
        return _names_as_entries(value)

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


def _names_as_entries(value: Any) -> Any:
    """A bare name in a list of entries stands for `{name: NAME}`."""
    if not isinstance(value, list):
        return value
    return [{"name": v} if isinstance(v, str) else v for v in value]


def _csv_entry(value: Any) -> Any:
    """`{csv: PATH, label: COL, ...}` is the dataset entry `{name: csv, options: {path: PATH,
    label: COL, ...}}` (`datasets.csv_file`); `if_missing` stays the entry's own key."""
    if not (isinstance(value, dict) and "csv" in value):
        return value
    options = {k: v for k, v in value.items() if k not in ("csv", "if_missing")}
    entry = {"name": "csv", "options": {"path": value["csv"], **options}}
    return {**entry, **({"if_missing": value["if_missing"]} if "if_missing" in value else {})}


_TYPE_TAG = re.compile(r"^(int|float|str|bool|list\[.*\]|dict\[.*\]|[A-Z]\w*)$")


def _field_error(source: str, exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    # a union's errors carry the member type in their location (`seeds.int`): not a key
    loc = [p for p in err["loc"] if not (isinstance(p, str) and _TYPE_TAG.match(p))]
    where = ".".join(str(p) for p in loc) or "(top level)"
    if err["type"] == "extra_forbidden":
        sections: dict[str, type[BaseModel]] = {"datasets": DatasetEntry, "methods": MethodEntry}
        section = sections.get(str(err["loc"][0]) if len(err["loc"]) > 1 else "", ExperimentConfig)
        return ConfigError(
            f"{source}: unknown config key {where!r}; valid keys there: "
            f"{', '.join(section.model_fields)}"
        )
    return ConfigError(f"{source}: field {where!r}: {err['msg']}")


def load_config(name_or_path: str, overrides: list[str] | None = None) -> ExperimentConfig:
    """A run config file (or bundled name), its `extends:` chain merged, validated, with
    `key=value` overrides applied first (`runner.overrides`: checked like the file itself)."""
    path = resolve_path(name_or_path, "run")
    data = read_config(path, "run")
    if overrides:
        from fairbench.runner.overrides import apply_overrides

        data = apply_overrides(data, overrides)
        return parse_config(data, f"{path} with overrides {' '.join(overrides)}")
    return parse_config(data, str(path))


def parse_config(data: dict[str, Any], source: str = "config") -> ExperimentConfig:
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise _field_error(source, exc) from None
    return config


def expand(config: ExperimentConfig, warn=print, check_data: bool = True) -> list[TrialSpec]:
    """Validate everything a run needs and return its trials (fully resolved, hashable).

    Checks: known datasets with valid options and their files present and verified (unless
    `check_data` is off: listing a finished run's grid needs no data); known methods with
    valid hyperparameters; knobs only where a method has one, each inside its valid range;
    private methods given valid (epsilon, delta) targets; a known constraint.
    """
    constraint, definition = _constraint(config)
    for eps in config.epsilons or [1.0]:  # delta is checked even without private methods
        PrivacyBudget(eps, config.delta)  # raises a ConfigError naming the bad value
    # cuda without a GPU is refused now, not in every trial; `auto` is resolved here, so a
    # spec (and its trial id) names the device its trials actually run on
    device = resolve_device(config.device).type
    if not config.seed_list:
        raise ConfigError("seeds: give a positive count or a non-empty list of seeds")
    labels = [entry.label or entry.name for entry in config.methods]
    if len(set(labels)) != len(labels):
        raise ConfigError("two method entries share a label; give each variant its own `label`")
    datasets = [_resolve_dataset(entry, warn, check_data) for entry in config.datasets]
    if check_data:
        _check_shapes(config, datasets, constraint, definition)
    specs = [
        spec
        for resolved, entry in itertools.product(datasets, config.methods)
        for spec in _method_trials(config, entry, resolved, constraint, definition, device)
    ]
    # a fallback dataset may coincide with a listed one: each trial runs once
    return list({spec.trial_id: spec for spec in specs}.values())


def _constraint(config: ExperimentConfig) -> tuple[str, dict[str, Any] | None]:
    """(name, declared definition or None) of the config's constraint; unknown names refused."""
    if isinstance(config.constraint, CustomConstraintSet):
        return config.constraint.name, config.constraint.model_dump()
    if config.constraint in VIOLATIONS:
        return config.constraint, None
    raise ConfigError(
        f"unknown constraint {config.constraint!r}; known: {', '.join(VIOLATIONS)}, or "
        "declare a rate-constraint set (name, partition, constraints)"
    )


def _check_shapes(
    config: ExperimentConfig,
    datasets: list[tuple[str, dict[str, Any]]],
    constraint: str,
    definition: dict[str, Any] | None,
) -> None:
    """Load each dataset once where its options or a declared constraint could fail on it:
    an n_train above the training rows, a declared set against the task's shape."""
    for dataset, options in datasets:
        if options.get("n_train") is None and definition is None:
            continue
        task = get_dataset(dataset, **options).load(seed=config.seed_list[0])
        if definition is not None:
            constraints.build(constraint, definition, task.n_classes, task.n_groups, 0.0)


def _method_trials(
    config: ExperimentConfig,
    entry: MethodEntry,
    resolved: tuple[str, dict[str, Any]],
    constraint: str,
    definition: dict[str, Any] | None,
    device: str,
) -> list[TrialSpec]:
    """One method entry's trials on one dataset (name, options): every sweep point x knob x
    epsilon x seed, on `device` (resolved)."""
    dataset, options = resolved
    cls = method_class(entry.name)
    if cls.private and not config.epsilons:
        raise ConfigError(f"method {entry.name} is private: list target epsilons in the config")
    if entry.knobs is not None:
        if cls.knob is None:
            raise ConfigError(f"method {entry.name} has no fairness knob; remove its knobs")
        for value in entry.knobs:  # a bad value is refused before a run directory exists
            cls.knob.validate(value, method=entry.name)
        _check_constraint(cls, constraint, definition)
    specs = []
    for values in itertools.product(*entry.sweep.values()):
        raw = {**entry.hparams, **dict(zip(entry.sweep, values, strict=True))}
        hparams = get_method(entry.name, **raw).hparams.model_dump()
        for knob, eps, seed in itertools.product(
            entry.knobs if entry.knobs else [None],
            config.epsilons if cls.private else [None],
            config.seed_list,
        ):
            specs.append(
                TrialSpec(
                    dataset=dataset,
                    dataset_options=options,
                    method=entry.name,
                    label=series_label(entry.label or entry.name, cls),
                    hparams=hparams,
                    constraint=constraint,
                    constraint_definition=definition,
                    knob=knob,
                    epsilon=eps,
                    delta=config.delta,
                    seed=seed,
                    device=device,
                    secure_noise=config.secure_noise and cls.private,
                )
            )
    return specs


def _check_constraint(cls, constraint: str, definition: dict[str, Any] | None) -> None:
    """A method trained towards a constraint (knobs given) must support it."""
    if definition is not None:
        if not cls.declared_constraints:
            raise ConfigError(
                f"method {cls.name} does not train towards a declared rate-"
                "constraint set; use a named constraint, or a method that does "
                "(`fairbench describe METHOD` says)"
            )
    elif cls.constraints is not None and constraint not in cls.constraints:
        raise ConfigError(
            f"method {cls.name} does not support constraint {constraint}; it "
            f"supports {', '.join(cls.constraints)}"
        )


def _resolve_dataset(entry: DatasetEntry, warn, check_data: bool) -> tuple[str, dict[str, Any]]:
    """(name, options) a run records: with `check_data`, the files located (or the synthetic
    fallback), the adapter's notices warned and its file checksums pinned
    (`Dataset.resolved_options`)."""
    adapter = get_dataset(entry.name, **entry.options)
    if not check_data:
        return entry.name, adapter.options.model_dump()
    try:
        adapter.locate()
    except DataError as exc:
        if entry.if_missing == "error":
            raise
        warn(f"warning: {exc}; falling back to the synthetic dataset (if_missing: synthetic)")
        return "synthetic", get_dataset("synthetic").options.model_dump()
    for message in adapter.notices():
        warn(f"warning: {message}")
    return entry.name, adapter.resolved_options()
