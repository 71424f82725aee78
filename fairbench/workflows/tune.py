"""`fairbench tune`: hyperparameter search with the same number of draws for every method.

Protocol (one rule for all methods, so no method is favoured by how hard it was tuned):
1. Search: per method, `draws` configurations drawn at random from its space (the fairness
   knob included, as key `knob`), each fitted on every `search_seeds` seed at every epsilon.
   The search is an ordinary run (OUT/search), so it resumes and parallelises like one.
2. Select, per (dataset, constraint, epsilon, target, method), on the validation split only:
   the lowest mean validation error among configurations whose mean validation violation is
   within the target. A method with no such configuration cannot reach the target. A method
   marked `unconstrained` (an accuracy reference such as ERM) is selected by validation error
   alone, whatever its violation.
3. Final: each selected configuration is re-run on `final_seeds` fresh seeds (disjoint from
   the search seeds) and evaluated once on test (OUT/final/<dataset>-eps<e>). The selected
   configurations are saved as run configs (OUT/selected/<dataset>-eps<e>.yaml), which
   `fairbench run` reuses as they are; OUT/tune.yaml keeps the validated tune config, so
   that reports built from OUT (fairbench.report.privacy_cost) know its targets and draws.
   OUT/tuning.json is the result table every tuning path writes (`fairbench.rundir.tuning`:
   the layout and the row), a row per selection and final seed.

Methods joining. Running a tune config with method entries added into an output it already
filled keeps every finished trial (search and final) and runs only the new entries' (their
draws are their own generators', so the others' draws do not move); any other change is
refused, as for a run directory.

Infeasible draws. A drawn configuration whose noise cannot be calibrated to an epsilon (a
Laplace scale too small for epsilon 0.1, say) fails with a `CalibrationError` at that epsilon.
That is an outcome of the method's search space, not a broken run: the draw still counts
among the method's draws, the table reports it (`infeasible`), and tune does not fail.

Privacy of tuning. By default (`selection: free`) it is not charged, as in the papers, and
every output says so ("tuning not charged"). `selection: private` pays for it out of the
stated epsilon by private selection (fairbench.workflows.private_selection), and
`selection: uncharged` runs that procedure's twin with tuning not charged (each candidate at
the full epsilon, exact validation scores: the papers' convention, measured the same way, so
that the two differ only in what is paid; fig-tuning-cost pairs them). Under free,
`charge_tuning` reports, per selection, the epsilon of the whole procedure under the stated
bound: the validation split is treated as public (selection is then post-processing of the
search fits), so tuning plus one final model costs the PLD composition of every search fit of
that method and epsilon and of the final fit, all on the same training split.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import yaml
from dp_accounting import dp_event
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from fairbench.errors import CalibrationError, ConfigError
from fairbench.methods import method_class
from fairbench.privacy import PrivacyLedger, epsilon
from fairbench.privacy.selection import CountLaw
from fairbench.report import write_report
from fairbench.report.aggregate import ci95, trials_frame
from fairbench.rundir import tuning
from fairbench.rundir.lock import run_lock
from fairbench.rundir.store import finished_rows
from fairbench.rundir.tuning import TuneLayout, TuningRow, write_table
from fairbench.runner.config import DatasetEntry, ExperimentConfig, _Strict, parse_config
from fairbench.runner.config_files import read_config, resolve_path
from fairbench.runner.execute import RunSummary, execute, prepare_run
from fairbench.runner.trial import TrialSpec
from fairbench.workflows.spaces import resolve_space

KNOB = "knob"
CHOOSE = "choose"  # a space's alternative sub-spaces, one drawn per configuration
DEFAULT = "default"  # a space's always-included configurations, draws 0, 1, ...
NOT_CHARGED = "tuning not charged"
SCORE_SHARE = 0.5  # default share of a private candidate's privacy budget spent on its noisy score
SUPPORT = 16  # default configurations per method a private selection draws its candidates from
CHARGED_BY_COMPOSITION = "tuning charged by composition (validation treated as public)"


class MethodSpace(_Strict):
    name: str
    label: str | None = None
    hparams: dict[str, Any] = Field(default_factory=dict)  # fixed, not searched
    # name -> a list (uniform choice), {log: [lo, hi]} or {uniform: [lo, hi]}; `knob` is the
    # method's fairness knob; `choose:` alternative sub-spaces, `default:` the first draws (see
    # `sample_configurations`). Or named spaces (workflows.spaces): `raco-dp`, `[raco-dp, ...]`
    space: dict[str, Any] = Field(default_factory=dict)
    # an accuracy reference (ERM; DP-SGD, the private one): selected on validation error alone,
    # the targets ignored
    unconstrained: bool = False

    @field_validator("space", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        return resolve_space(value)

    @field_validator("space")
    @classmethod
    def _distributions(cls, value: dict[str, Any]) -> dict[str, Any]:
        common = {k: v for k, v in value.items() if k not in (CHOOSE, DEFAULT)}
        _check_distributions(common, "space")
        alternatives = value.get(CHOOSE)
        if CHOOSE in value:
            if not (isinstance(alternatives, list) and alternatives):
                raise ValueError(f"space.{CHOOSE}: give a non-empty list of sub-spaces")
            for i, alternative in enumerate(alternatives):
                where = f"space.{CHOOSE}.{i}"
                if not isinstance(alternative, dict):
                    raise ValueError(f"{where}: give a mapping of hyper-parameter -> distribution")
                _check_distributions(alternative, where)
                shared = sorted(set(alternative) & set(common))
                if shared:
                    raise ValueError(f"{where}: {shared[0]} is also in the space outside {CHOOSE}")
        default = value.get(DEFAULT)
        listed = default if isinstance(default, list) and default else [default]
        if DEFAULT in value and not all(
            isinstance(one, dict)
            and one
            and all(not isinstance(v, dict | list) for v in one.values())
            for one in listed
        ):
            raise ValueError(
                f"space.{DEFAULT}: give a mapping of hyper-parameter -> one value, or a list "
                "of them"
            )
        return value

    def defaults(self) -> list[dict[str, Any]]:
        """The always-included configurations, in draw order (`default:`: one or a list)."""
        default = self.space.get(DEFAULT)
        if default is None:
            return []
        return [dict(one) for one in (default if isinstance(default, list) else [default])]

    def subspaces(self) -> list[dict[str, Any]]:
        """The space as its alternatives, each merged with the keys outside `choose:` (one
        when there is no `choose:`); `default:` left out."""
        common = {k: v for k, v in self.space.items() if k not in (CHOOSE, DEFAULT)}
        return [{**common, **alt} for alt in self.space.get(CHOOSE, [{}])]


def _check_distributions(value: dict[str, Any], where: str) -> None:
    for name, dist in value.items():
        if isinstance(dist, list) and dist:
            continue
        if isinstance(dist, dict) and len(dist) == 1:
            ((kind, bounds),) = dist.items()
            if kind in ("log", "uniform") and _interval(bounds, kind == "log"):
                continue
        raise ValueError(
            f"{where}.{name}: give a non-empty list, {{log: [lo, hi]}} (0 < lo < hi) or "
            "{uniform: [lo, hi]} (lo < hi)"
        )


def _interval(bounds: Any, positive: bool) -> bool:
    return (
        isinstance(bounds, list)
        and len(bounds) == 2
        and all(isinstance(b, int | float) for b in bounds)
        and bounds[0] < bounds[1]
        and (bounds[0] > 0 or not positive)
    )


class TuneConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    datasets: list[DatasetEntry] = Field(min_length=1)
    constraint: str = "demographic_parity"
    epsilons: list[float] = Field(min_length=1)
    delta: float = 1e-5
    targets: list[float] = Field(min_length=1)  # allowed validation violation
    draws: int = Field(ge=1)  # configurations drawn per method (per dataset, constraint, epsilon)
    search_seeds: list[int] = Field(min_length=1)
    final_seeds: list[int] = Field(min_length=10)
    seed: int = 0  # of the random search
    methods: list[MethodSpace] = Field(min_length=1)
    # free: validation public, tuning not charged; private: see workflows.private_selection;
    # uncharged: private's procedure (random count, repeats) with tuning not charged, its twin
    selection: Literal["free", "private", "uncharged"] = "free"
    count: CountLaw | None = None  # the law of the number of candidates, for private
    score_share: float = Field(SCORE_SHARE, gt=0, lt=1)  # of a candidate's ε, for its score
    # private or uncharged: configurations drawn per method before the count, the selection's
    # support; each candidate is one of them uniformly at random, its ε is calibrated over them all
    support: int = Field(SUPPORT, ge=1)
    # a method none of whose candidates can be calibrated at an epsilon under private
    # selection: refuse the whole tune (error) or record it as releasing nothing (leave_out)
    uncalibratable: Literal["error", "leave_out"] = "error"

    @field_validator("datasets", mode="before")
    @classmethod
    def _names_as_entries(cls, value: Any) -> Any:
        return ExperimentConfig._names_as_entries(value)

    def split_seed(self, repeat: int) -> int:
        """The seed of the data split repeat `repeat` (a final seed) of a private selection
        runs on: its own."""
        return repeat

    @model_validator(mode="after")
    def _consistent(self):
        if set(self.search_seeds) & set(self.final_seeds):
            raise ValueError("final_seeds must be fresh: share no seed with search_seeds")
        if any(t <= 0 for t in self.targets):
            raise ValueError("targets are allowed violations: each must be > 0")
        labels = [m.label or m.name for m in self.methods]
        if len(set(labels)) != len(labels):
            raise ValueError("two methods share a label; give each its own `label`")
        if self.selection in ("private", "uncharged"):
            if self.count is None:
                raise ValueError(
                    f"selection: {self.selection} needs `count`, e.g. {{law: poisson, mean: 10}}"
                )
            public = [m.name for m in self.methods if not method_class(m.name).private]
            if public and self.selection == "private":
                raise ValueError(
                    f"selection: private pays for tuning out of epsilon; method {public[0]} is "
                    "not private: drop it or use selection: free"
                )
        elif self.count is not None:
            raise ValueError("count applies to selection: private or uncharged only")
        if self.selection == "free" and self.support != SUPPORT:
            raise ValueError("support applies to selection: private or uncharged only")
        if self.selection != "private" and self.score_share != SCORE_SHARE:
            raise ValueError("score_share applies to selection: private only")
        if self.selection != "private" and self.uncalibratable != "error":
            raise ValueError("uncalibratable applies to selection: private only")
        return self


def load_tune_config(name_or_path: str) -> TuneConfig:
    """A tune config file (or bundled name), its `extends:` chain merged, validated."""
    path = resolve_path(name_or_path, "tune")
    data = read_config(path, "tune")
    try:
        config = TuneConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            sections: dict[str, type[BaseModel]] = {
                "methods": MethodSpace,
                "datasets": DatasetEntry,
            }
            section = sections.get(str(err["loc"][0]) if len(err["loc"]) > 1 else "", TuneConfig)
            raise ConfigError(
                f"{path}: unknown key {where!r}; valid keys there: "
                f"{', '.join(section.model_fields)}"
            ) from None
        raise ConfigError(f"{path}: field {where!r}: {err['msg']}") from None
    for entry in config.methods:
        try:
            check_space(entry)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return config


def check_space(entry: MethodSpace) -> None:
    """Refuse a space the method cannot run: a searched knob on a method without one, or a
    knob value outside its valid range (every listed value, both ends of an interval); a
    `default:` without the knob the space searches; and, for `default:` and both corners of
    each alternative (every key at its first value or lower end, then at its last value or
    upper end), hyper-parameters the method's `Hparams` refuses (an unknown key, a value out
    of range, a combination its validators rule out)."""
    cls = method_class(entry.name)
    subspaces = entry.subspaces()
    defaults = entry.defaults()
    searched = any(KNOB in sub for sub in subspaces)
    fixed = [one[KNOB] for one in defaults if KNOB in one]
    if searched or fixed:
        if cls.knob is None:
            raise ConfigError(f"method {entry.name} has no fairness knob to search")
        values = [v for sub in subspaces if KNOB in sub for v in _ends(sub[KNOB])]
        for value in values + fixed:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"method {entry.name}: space.knob holds numbers, got {value!r}")
            try:
                cls.knob.validate(value, method=entry.name)
            except ConfigError as exc:
                raise ConfigError(f"space.knob: {exc}") from None
    if searched and len(fixed) < len(defaults):
        raise ConfigError(f"method {entry.name}: space.{DEFAULT} needs a knob value (`knob:`)")
    corners = {
        f"space.{DEFAULT}" + (f".{i}" if len(defaults) > 1 else ""): one
        for i, one in enumerate(defaults)
    }
    for i, sub in enumerate(subspaces):
        where = f"space.{CHOOSE}.{i}" if CHOOSE in entry.space else "space"
        corners[f"{where} (lower ends)"] = {k: _ends(d)[0] for k, d in sub.items()}
        corners[f"{where} (upper ends)"] = {k: _ends(d)[-1] for k, d in sub.items()}
    for where, corner in corners.items():
        hparams = {**entry.hparams, **{k: v for k, v in corner.items() if k != KNOB}}
        try:
            cls(**hparams)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None


def _ends(dist: Any) -> list[Any]:
    """A distribution's listed values, or its interval's two ends."""
    return list(dist) if isinstance(dist, list) else list(next(iter(dist.values())))


def sample_configurations(
    config: TuneConfig, count: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """label -> the first `count` (default `draws`) configurations (hparams with the knob
    under `knob`), drawn by one seeded generator per method, so adding a method never changes
    another's draws.

    The first draws are the space's `default:` configurations where it has them (the paper's
    configuration, and fairbench's own hand-set one: always candidates); every other draw is
    random: its alternative first (one of `choose:`'s sub-spaces, uniformly; none drawn
    without `choose:`), then each hyper-parameter of that sub-space in name order. Each draw
    takes the generator where the one before left it, so a longer draw starts with the
    shorter one: raising `draws` (budgets 4, 8, 16 of one search) appends configurations and
    keeps the earlier ones, and a resumed or extended tune finds its finished trials under
    the same labels (`method#i`). A space without `default:`
    and `choose:` draws exactly what it drew before they existed. The draws depend on `seed`
    (a different `seed` moves the random draws, never the defaults), not on the search seeds:
    every configuration, the defaults included, is fitted on each search seed at each epsilon
    and selected on its mean over them."""
    out = {}
    for index, entry in enumerate(config.methods):
        rng = np.random.default_rng([config.seed, index])
        total = config.draws if count is None else count
        head = entry.defaults()
        subspaces = entry.subspaces()
        drawn = [_configuration(subspaces, rng) for _ in range(total - len(head))]
        out[entry.label or entry.name] = (head + drawn)[:total]
    return out


def _configuration(subspaces: list[dict[str, Any]], rng: np.random.Generator) -> dict[str, Any]:
    space = subspaces[int(rng.integers(len(subspaces)))] if len(subspaces) > 1 else subspaces[0]
    return {name: _draw(dist, rng) for name, dist in sorted(space.items())}


def _draw(dist: Any, rng: np.random.Generator) -> Any:
    if isinstance(dist, list):
        value = dist[int(rng.integers(len(dist)))]
        return value.item() if isinstance(value, np.generic) else value
    ((kind, (lo, hi)),) = dist.items()
    if kind == "log":
        value = float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    else:
        value = float(rng.uniform(lo, hi))
    return round(value, 6)


def search_config(
    config: TuneConfig, draws: dict[str, list[dict[str, Any]]] | None = None
) -> ExperimentConfig:
    """The search as one run: an entry per (method, configuration), labelled `label#i`
    (`draws`: the configurations, default `sample_configurations(config)`)."""
    draws = draws if draws is not None else sample_configurations(config)
    methods = []
    for entry in config.methods:
        label = entry.label or entry.name
        for i, drawn in enumerate(draws[label]):
            hparams = {**entry.hparams, **{k: v for k, v in drawn.items() if k != KNOB}}
            knobs = [drawn[KNOB]] if KNOB in drawn else None
            methods.append(
                {"name": entry.name, "label": f"{label}#{i}", "hparams": hparams, "knobs": knobs}
            )
    return parse_config(
        {
            "name": f"{config.name}-search",
            "datasets": [d.model_dump() for d in config.datasets],
            "constraint": config.constraint,
            "epsilons": config.epsilons,
            "delta": config.delta,
            "seeds": config.search_seeds,
            "methods": methods,
        },
        f"{config.name} (search)",
    )


def choose(candidates: pd.DataFrame, target: float | None) -> pd.Series | None:
    """The selection rule on one method's candidates (rows with mean `val_error` and
    `val_violation`): the lowest validation error among those whose validation violation is
    within `target` (every candidate when `target` is None); ties go to the earlier row.
    None when no candidate is within the target."""
    feasible = candidates if target is None else candidates[candidates["val_violation"] <= target]
    if feasible.empty:
        return None
    return feasible.sort_values("val_error", kind="stable").iloc[0]


def select(
    config: TuneConfig,
    search_rows: list[dict],
    infeasible: dict[tuple[str, float, str], int] | None = None,
) -> pd.DataFrame:
    """One row per (dataset, constraint, epsilon, target, method): the selected configuration
    (or none), from validation means over the search seeds only. `infeasible` counts, per
    (dataset, epsilon, method), the draws that could not be calibrated there; a method all of
    whose draws were infeasible at an epsilon still gets its (empty) rows."""
    infeasible = infeasible or {}
    free = {m.label or m.name for m in config.methods if m.unconstrained}
    trials = trials_frame(search_rows)
    trials["method_label"] = trials["label"].str.rsplit("#", n=1).str[0]
    means = (
        trials.groupby(["dataset", "epsilon", "method_label", "label"])
        .agg(
            val_error=("val_error", "mean"),
            val_violation=("val_violation", "mean"),
            seeds=("seed", "nunique"),
            hparams=("hparams", "first"),
            knob=("knob", "first"),
        )
        .reset_index()
    )
    groups = {key: group for key, group in means.groupby(["dataset", "epsilon", "method_label"])}
    for key in infeasible:
        groups.setdefault(key, means.iloc[0:0])
    rows = []
    for target, (dataset, eps, label) in itertools.product(config.targets, sorted(groups)):
        group = groups[(dataset, eps, label)]
        best = choose(group, None if label in free else target)
        feasible = len(group) if label in free else int((group["val_violation"] <= target).sum())
        row = {
            "dataset": dataset,
            "constraint": config.constraint,
            "epsilon": eps,
            "target": target,
            "method": label,
            "candidates": len(group),
            "feasible": feasible,
            "infeasible": infeasible.get((dataset, eps, label), 0),
            "selected": None,
            "hparams": None,
            "knob": None,
            "val_error": math.nan,
            "val_violation": math.nan,
        }
        if best is not None:
            knob = None if pd.isna(best["knob"]) else float(best["knob"])
            row.update(
                selected=best["label"],
                hparams=best["hparams"],
                knob=knob,
                val_error=float(best["val_error"]),
                val_violation=float(best["val_violation"]),
            )
        rows.append(row)
    return pd.DataFrame(rows)


def infeasible_draws(
    specs: list[TrialSpec], failed: list[tuple[str, str]]
) -> dict[tuple[str, float, str], int]:
    """(dataset, epsilon, method label) -> how many drawn configurations failed calibration
    there (a `CalibrationError` on any search seed)."""
    by_id = {spec.trial_id: spec for spec in specs}
    draws: dict[tuple[str, float, str], set[str]] = {}
    for trial_id, error in failed:
        spec = by_id.get(trial_id)
        if spec is None or not is_infeasible(error):
            continue
        eps = math.inf if spec.epsilon is None else float(spec.epsilon)
        key = (spec.dataset, eps, spec.label.rsplit("#", 1)[0])
        draws.setdefault(key, set()).add(spec.label)
    return {key: len(labels) for key, labels in draws.items()}


def is_infeasible(error: str) -> bool:
    """A failed trial's message (as the runner records it) is a calibration failure."""
    return error.startswith(f"{CalibrationError.__name__}: ")


def final_configs(config: TuneConfig, selection: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """File stem -> a run config of the selected configurations for one dataset and epsilon,
    on the fresh seeds. A configuration selected at several targets runs once."""
    datasets = {d.name: d.model_dump() for d in config.datasets}
    names = {m.label or m.name: m.name for m in config.methods}
    out = {}
    chosen = selection.dropna(subset=["selected"])
    for (dataset, eps), group in chosen.groupby(["dataset", "epsilon"], sort=True):
        methods, seen = [], set()
        for row in group.itertuples(index=False):
            if row.selected in seen:
                continue
            seen.add(row.selected)
            methods.append(
                {
                    "name": names[row.method],
                    "label": row.selected.replace("#", "-"),
                    "hparams": row.hparams,
                    "knobs": None if pd.isna(row.knob) else [float(row.knob)],
                }
            )
        private = math.isfinite(eps)
        stem = f"{dataset}-eps{eps:g}" if private else f"{dataset}-nonprivate"
        out[stem] = {
            "name": f"{config.name}-{stem}",
            "datasets": [datasets[dataset]],
            "constraint": config.constraint,
            "epsilons": [float(eps)] if private else [],
            "delta": config.delta,
            "seeds": config.final_seeds,
            "methods": methods,
            "tuned_by": config.name,
        }
    return out


def summarise(
    selection: pd.DataFrame, final_rows: list[dict], search_rows: list[dict], charge: bool
) -> pd.DataFrame:
    """The selection table with each selected configuration's final test error and violation
    (mean ± 95% CI over the fresh seeds) and, with `charge`, the tuning epsilon bound."""
    final = trials_frame(final_rows) if final_rows else pd.DataFrame()
    out = selection.copy()
    for column in (
        "final_seeds",
        "test_error",
        "test_error_ci95",
        "test_violation",
        "test_violation_ci95",
        "tuning_epsilon",
    ):
        out[column] = math.nan
    out["selection"] = "free"
    out["tuning"] = CHARGED_BY_COMPOSITION if charge else NOT_CHARGED
    for i, row in out.iterrows():
        if pd.isna(row["selected"]):
            continue
        trials = _final_trials(final, row)
        if len(trials):
            out.loc[i, "final_seeds"] = trials["seed"].nunique()
            out.loc[i, "test_error"] = trials["test_error"].mean()
            out.loc[i, "test_error_ci95"] = ci95(trials["test_error"])
            out.loc[i, "test_violation"] = trials["test_violation"].mean()
            out.loc[i, "test_violation_ci95"] = ci95(trials["test_violation"])
        if charge and math.isfinite(row["epsilon"]) and len(trials):
            out.loc[i, "tuning_epsilon"] = tuning_epsilon(
                search_rows, row["dataset"], row["epsilon"], row["method"], trials.iloc[0]
            )
    return out


def _final_trials(final: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """The final trials of the configuration a selection row names (empty if none ran)."""
    if final.empty:
        return final
    return final[
        (final["label"] == row["selected"].replace("#", "-"))
        & (final["dataset"] == row["dataset"])
        & (final["epsilon"] == row["epsilon"])
    ]


def result_rows(
    config: TuneConfig, summary: pd.DataFrame, final_rows: list[dict]
) -> list[TuningRow]:
    """The result table: each summary row once per final seed, with that seed's test numbers
    (NaN where the selection chose nothing or its trial did not finish)."""
    final = trials_frame(final_rows) if final_rows else pd.DataFrame()
    rows = []
    for _, row in summary.iterrows():
        chosen = not pd.isna(row["selected"])
        trials = _final_trials(final, row) if chosen else final.iloc[0:0]
        by_seed = {int(t["seed"]): t for _, t in trials.iterrows()}
        for seed in config.final_seeds:
            trial = by_seed.get(seed)
            rows.append(
                TuningRow(
                    dataset=row["dataset"],
                    constraint=row["constraint"],
                    epsilon=float(row["epsilon"]),
                    method=row["method"],
                    target=float(row["target"]),
                    selection="free",
                    repeat=seed,
                    selected=row["selected"] if chosen else None,
                    hparams=row["hparams"] if chosen else None,
                    knob=math.nan if pd.isna(row["knob"]) else float(row["knob"]),
                    val_error=float(row["val_error"]),
                    val_violation=float(row["val_violation"]),
                    test_error=math.nan if trial is None else float(trial["test_error"]),
                    test_violation=math.nan if trial is None else float(trial["test_violation"]),
                    candidates=int(row["candidates"]),
                    feasible=int(row["feasible"]),
                    infeasible=int(row["infeasible"]),
                    uses_sensitive_at_test=trial is not None
                    and bool(trial.get("uses_sensitive_at_test", False)),
                    tuning=row["tuning"],
                    tuning_epsilon=float(row["tuning_epsilon"]),
                    candidate_epsilon=math.nan,
                    training_epsilon=math.nan,
                    score_laplace_scale=math.nan,
                    accountant=None,
                    left_out=None,
                )
            )
    return rows


def tuning_epsilon(
    search_rows: list[dict], dataset: str, eps: float, method: str, final_row: pd.Series
) -> float:
    """The stated bound: the PLD composition of every search fit of `method` at `eps` on
    `dataset` and one final fit (validation treated as public; see the module docstring)."""
    ledgers = [
        PrivacyLedger.from_json(r["ledger"])
        for r in search_rows
        if r["dataset"] == dataset
        and r["epsilon"] == eps
        and r["label"].rsplit("#", 1)[0] == method
    ]
    ledgers.append(PrivacyLedger.from_json(final_row["ledger"]))
    composed = dp_event.ComposedDpEvent([ledger.event for ledger in ledgers])
    return epsilon(composed, float(final_row["delta"]))


def tuning_markdown(summary: pd.DataFrame, config: TuneConfig, charge: bool) -> str:
    lines = [
        f"# {config.name}: tuning with equal draws",
        "",
        f"Random search: {config.draws} configurations per method, each fitted on "
        f"{len(config.search_seeds)} search seed(s) at every epsilon. Selection on the "
        "validation split only: the lowest mean validation error among configurations whose "
        "mean validation violation is within the target. Final: the selected configuration "
        f"on {len(config.final_seeds)} fresh seeds, evaluated once on test (mean ± 95% CI).",
        "",
        (
            "Tuning epsilon: PLD composition of every search fit and one final fit, with the "
            "validation split treated as public (the bound stated in fairbench.workflows.tune)."
            if charge
            else f"Selection: free, {NOT_CHARGED} (as in the papers): the ε of each final "
            "model covers its own training only. `--charge-tuning` reports a bound; "
            "`selection: private` pays for tuning out of ε."
        ),
    ]
    for (dataset, eps, target), group in summary.groupby(["dataset", "epsilon", "target"]):
        columns = [
            "method",
            "feasible / candidates",
            "selected",
            "knob",
            "val error",
            "val violation",
            "test error",
            "test violation",
        ]
        header = "| " + " | ".join(columns + (["tuning ε"] if charge else [])) + " |"
        rule = "|---|---:|---|---:|---:|---:|---:|---:|" + ("---:|" if charge else "")
        title = f"## {dataset} · {config.constraint} · ε = {eps:g} · target {target:g}" + (
            "" if charge else f" · {NOT_CHARGED}"
        )
        lines += ["", title, "", header, rule]
        for r in group.itertuples(index=False):
            counts = f"{r.feasible} / {r.candidates}"
            if getattr(r, "infeasible", 0):
                counts += f" (+{r.infeasible} infeasible at this ε)"
            if pd.isna(r.selected):
                cells = [r.method, counts, "cannot reach the target", "", "", "", "", ""]
            else:
                cells = [
                    r.method,
                    counts,
                    r.selected,
                    "" if pd.isna(r.knob) else f"{r.knob:g}",
                    f"{r.val_error:.4f}",
                    f"{r.val_violation:.4f}",
                    f"{r.test_error:.4f} ± {r.test_error_ci95:.4f}",
                    f"{r.test_violation:.4f} ± {r.test_violation_ci95:.4f}",
                ]
            if charge:
                cells.append("" if math.isnan(r.tuning_epsilon) else f"{r.tuning_epsilon:.3f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(
    out: Path,
    summary: pd.DataFrame,
    final_rows: list[dict],
    finals: dict[str, dict],
    config: TuneConfig,
    charge: bool,
) -> None:
    """The selected run configs, the result table and its notes (TuneLayout's names)."""
    layout = TuneLayout(out)
    for stem, data in finals.items():
        path = layout.selected_config(stem)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    write_table(layout, result_rows(config, summary, final_rows))
    layout.notes.write_text(tuning_markdown(summary, config, charge))


def run_tune(
    config: TuneConfig,
    out: Path,
    workers: int,
    quiet: bool,
    charge: bool,
    warn: Callable[[str], None] = print,
    executor: str = "local",
    scheduler: str | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """Search, select, re-run on fresh seeds, write everything under `out`, every trial on
    `executor` (`runner.execute.execute`). Returns the
    summary and the failed trials' messages (search and final); search draws that failed
    calibration are not failures (the summary's `infeasible` counts them)."""
    search_dir = TuneLayout(out).search
    specs = prepare_run(search_config(config), search_dir, warn, extend=True)
    with run_lock(out):  # one tune per output; each run directory under it is locked too
        run = partial(execute, workers=workers, quiet=quiet, executor=executor, scheduler=scheduler)
        return _tune(config, out, specs, run, charge, warn)


def _tune(
    config: TuneConfig,
    out: Path,
    specs: list[TrialSpec],
    run: Callable[[list[TrialSpec], Path], RunSummary],
    charge: bool,
    warn: Callable[[str], None],
) -> tuple[pd.DataFrame, list[str]]:
    failures = []
    layout = TuneLayout(out)
    search_dir = layout.search
    write_tune_config(out, config)
    summary = run(specs, search_dir)
    failures += [
        f"search {trial}: {error.splitlines()[-1]}"
        for trial, error in summary.failed
        if not is_infeasible(error)
    ]
    write_report(search_dir)  # every candidate's numbers, for the record
    rows = finished_rows(search_dir, "select from")
    selection = select(config, rows, infeasible_draws(specs, summary.failed))
    finals = final_configs(config, selection)
    final_rows: list[dict] = []
    for stem, data in finals.items():
        run_dir = layout.final_run(stem)
        specs = prepare_run(parse_config(data, stem), run_dir, warn, extend=True)
        done = run(specs, run_dir)
        failures += [f"final {trial}: {error.splitlines()[-1]}" for trial, error in done.failed]
        write_report(run_dir)
        final_rows += finished_rows(run_dir, "summarise")
    table = summarise(selection, final_rows, rows, charge)
    write_outputs(out, table, final_rows, finals, config, charge)
    return table, failures


def write_tune_config(out: Path, config: TuneConfig) -> None:
    """OUT/tune.yaml: what the outputs were tuned under (targets, draws, seeds, spaces)."""
    tuning.write_tune_config(TuneLayout(out), config.model_dump())
