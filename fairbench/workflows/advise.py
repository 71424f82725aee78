"""`fairbench advise`: which private fair method at my epsilon on my data, and what it costs.

Three parts, with different promises (threat model and contents: docs/privacy.md, "What
`fairbench advise` releases"):

1. The release, (epsilon, delta)-DP at the user's epsilon and meant to be shared. One private
   selection (Papernot and Steinke 2022; `fairbench.privacy.selection`): per applicable
   method `support` configurations are drawn from its space, the per-candidate budget is
   calibrated over all of them, then the number K of candidates is Poisson with mean
   `candidates` x methods, and each candidate is a method drawn uniformly and one of its support
   configurations drawn uniformly, trained on the training part and scored on validation by
   Laplace-noised counts drawn by its privacy session. The best by the noisy score under the
   target is released: its model, configuration, noisy score and the accounting
   (OUT/release). K, the seeds, the other candidates and their scores never leave the
   procedure: the candidates train in a temporary folder that is deleted. Every random
   draw comes from the operating system's entropy unless `--seed` is given (then every
   output says it is not a DP release). The split gives each record its part by its own
   coin, so one record added or removed moves no other.
2. The plan's warnings read the validation groups' sizes through noisy counts, charged in
   the total below.
3. The comparison, an analysis for the user's eyes only. Per method, `repeats` private
   selections of its own at the same epsilon (`fairbench tune`'s `selection: private`), each
   on its own split, so that every method's test error has a confidence interval. Its
   mechanisms' cost is composed with the release's and the plan's and printed ("privacy
   spent on this data"); its test numbers, like every other exact statistic of the data
   (rows, groups, the released model's test error), are printed under one heading that says
   they are not private.

The test split is used only to report, never to choose.
"""

from __future__ import annotations

import json
import math
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import yaml
from dp_accounting import dp_event
from pydantic import Field

from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError, FairbenchError, Interrupted
from fairbench.methods import get_method, method_class
from fairbench.metrics import VIOLATIONS, majority_class_error
from fairbench.privacy import PrivacyBudget, PrivacyLedger, rdp
from fairbench.privacy.selection import ACCOUNTANT, PLD_NOTE, selection_curve
from fairbench.privacy.session import PrivacySession
from fairbench.rundir.lock import run_lock
from fairbench.rundir.models import MODELS
from fairbench.rundir.store import ResultStore, finished_rows
from fairbench.rundir.tuning import TuneLayout, read_analysis
from fairbench.runner.config_files import BUNDLED
from fairbench.runner.execute import execute
from fairbench.runner.trial import NOISE_SAMPLERS, SPLIT_SEED, TrialSpec
from fairbench.streams import numpy_stream, seed_sequence
from fairbench.task import Task
from fairbench.workflows.private_selection import (
    SelectionCalibration,
    bare,
    calibrate,
    candidate_seed,
    candidate_templates,
    refuse_partial,
    run_private,
    validation_score,
    whole_record_problem,
)
from fairbench.workflows.spaces import resolve_space
from fairbench.workflows.tune import (
    MethodSpace,
    TuneConfig,
    check_space,
    choose,
    is_infeasible,
    sample_configurations,
)

SPACES = BUNDLED / "advise" / "methods.yaml"  # the methods advise chooses among, and their spaces
# of the training rows: the range of fig-privacy-cost's batch spaces (configs/spaces.yaml), from
# about 1% to about a third (RaCO-DP's paper region)
BATCH_FRACTIONS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32)
TRAIN_SHARE = 0.75 * 0.85  # a record's chance of the training part (25% test, 15% of the rest)
SUPPORT = 8  # configurations per method a candidate is drawn from
PLAN_COUNT_SHARE = 0.1  # epsilon of the plan's noisy group counts, as a share of the user's
PLAN_COUNTS = "advise plan: noisy validation counts by group and label"
NOT_A_RELEASE = (
    "not a DP release: its noise can be regenerated from the seed (--seed); run without "
    "--seed for a release"
)


class AdviceConfig(TuneConfig):
    """A tune config whose repeats may be few (the release has one, the comparison is an
    analysis) and share one split: a split by per-record coins has a size of its own, which
    every calibration depends on, so repeats on splits of their own would each need one."""

    final_seeds: list[int] = Field(min_length=1)
    split: int

    def split_seed(self, repeat: int) -> int:
        return self.split


@dataclass(frozen=True)
class Request:
    """What the user asked: their data (a `csv:` dataset entry), epsilon, delta, constraint,
    target tau, expected candidates per method, comparison repeats, whether methods that
    read the sensitive attribute at test time may be recommended, the seed (None: the
    operating system's entropy, a DP release), the methods to consider, the search spaces
    (None: configs/advise/methods.yaml), configurations per method, and exact discrete noise."""

    dataset: dict[str, Any]
    epsilon: float
    constraint: str
    tau: float
    delta: float = 1e-5
    candidates: float = 4.0  # expected per method: the Poisson mean of K over methods
    repeats: int = 5
    allow_sensitive_at_test: bool = False
    seed: int | None = None
    only: tuple[str, ...] = ()
    spaces: str | None = None
    support: int = SUPPORT
    secure_noise: bool = False

    @property
    def seeded(self) -> bool:
        return self.seed is not None


@dataclass(frozen=True, repr=False)
class Roots:
    """The root seeds of the release and of the comparison: 128 bits of the operating
    system's entropy each, never written anywhere; derived from `--seed` for a reproducible
    demonstration (not a DP release)."""

    release: int
    comparison: int

    @classmethod
    def draw(cls, seed: int | None) -> Roots:
        if seed is None:
            return cls(secrets.randbits(128), secrets.randbits(128))
        state = np.random.SeedSequence(seed).generate_state(8, np.uint32)
        release, comparison = (
            sum(int(w) << (32 * i) for i, w in enumerate(state[k : k + 4])) for k in (0, 4)
        )
        return cls(release, comparison)

    def derived(self, root: int, name: str) -> int:
        """A 63-bit seed of `root`'s stream `name` (a split seed)."""
        return int(seed_sequence(root, name).generate_state(1, np.uint64)[0] >> np.uint64(1))


@dataclass
class Exact:
    """Statistics computed exactly from the user's data: shown to the user under one heading
    that says they are not private, never part of the release."""

    notices: list[str]
    rows: int
    parts: dict[str, int]  # the release's split: rows per part
    groups: dict[str, int]  # the release's training rows per group
    majority_error: float  # predicting the training majority label, on the release's test part


@dataclass
class Plan:
    """Everything decided before any training. `candidates` are the release's (secret: how
    many and which is never printed or written)."""

    request: Request
    methods: list[MethodSpace]
    skipped: dict[str, str]
    joint: AdviceConfig
    support: list[TrialSpec]
    budget: SelectionCalibration
    comparison: AdviceConfig
    candidates: list[TrialSpec] = field(repr=False)
    exact: Exact
    features: tuple[str, ...]  # the model's inputs (from the data unless --bounds)
    plan_counts_scale: float  # Laplace scale of the plan's noisy counts
    calibration_seconds: float = 0.0
    training_seconds: float | None = None  # estimated: expected candidates x steps x step time
    comparison_calibration_seconds: float | None = None  # estimated from the release's
    notes: list[str] = field(default_factory=list)

    @property
    def estimated_seconds(self) -> float | None:
        """Seconds still to go once the plan is printed: training plus the comparison's
        calibration (None without bench step times)."""
        if self.training_seconds is None or self.comparison_calibration_seconds is None:
            return None
        return self.training_seconds + self.comparison_calibration_seconds


def load_spaces(path: str | None) -> list[dict[str, Any]]:
    """The method entries of an advise spaces file (configs/advise/methods.yaml's form), their
    named spaces resolved (workflows.spaces)."""
    source = SPACES if path is None else Path(path)
    if not source.is_file():
        raise ConfigError(
            f"--spaces {source}: no such file; give a YAML like configs/advise/methods.yaml"
        )
    try:
        data = yaml.safe_load(source.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"--spaces {source}: malformed YAML ({getattr(exc, 'problem', exc)})"
        ) from None
    if not (isinstance(data, dict) and isinstance(data.get("methods"), list) and data["methods"]):
        raise ConfigError(
            f"--spaces {source}: give `methods:`, a list of method entries "
            "(name, hparams, space) like configs/advise/methods.yaml"
        )
    try:
        return [{**raw, "space": resolve_space(raw.get("space", {}))} for raw in data["methods"]]
    except ValueError as exc:
        raise ConfigError(f"--spaces {source}: {exc}") from None


def applicable(
    constraint: str,
    allow_sensitive_at_test: bool,
    n_train: int,
    only: tuple[str, ...] = (),
    spaces: str | None = None,
) -> tuple[list[MethodSpace], dict[str, str]]:
    """The methods advise may recommend, with batch sizes scaled to the data, and why each
    other method of the spaces file is left out."""
    entries = load_spaces(spaces)
    known = [str(raw.get("name")) for raw in entries]
    unknown = [m for m in only if m not in known]
    if unknown:
        raise ConfigError(f"--method {unknown[0]}: advise chooses among {', '.join(known)}")
    batches = sorted({max(8, round(n_train * f)) for f in BATCH_FRACTIONS})
    chosen, skipped = [], {}
    for raw in entries:
        cls = method_class(raw["name"])
        if only and raw["name"] not in only:
            skipped[raw["name"]] = "not among --method"
        elif cls.constraints is not None and constraint not in cls.constraints:
            skipped[raw["name"]] = f"does not support {constraint}"
        elif not cls.private:
            raise ConfigError(f"--spaces: {whole_record_problem(get_method(raw['name']))}")
        elif cls.sensitive_at_test and not allow_sensitive_at_test:
            skipped[raw["name"]] = (
                "reads the sensitive attribute at test time (--allow-sensitive-at-test)"
            )
        else:
            fixed = "batch_size" in raw.get("hparams", {})
            space = {**({} if fixed else {"batch_size": batches}), **raw.get("space", {})}
            entry = MethodSpace.model_validate({**raw, "space": space})
            try:
                check_space(entry)
            except ConfigError as exc:
                raise ConfigError(f"--spaces: {exc}") from None
            chosen.append(entry)
    if not chosen:
        raise ConfigError(
            f"no method left to advise on for {constraint}: "
            + "; ".join(f"{k} {v}" for k, v in skipped.items())
        )
    return chosen, skipped


def _config(
    request: Request,
    methods: list[MethodSpace],
    name: str,
    mean: float,
    seed: int,
    split: int,
    repeats: int,
) -> AdviceConfig:
    return AdviceConfig.model_validate(
        {
            "name": name,
            "datasets": [{**request.dataset, "split": "per-record"}],
            "constraint": request.constraint,
            "epsilons": [request.epsilon],
            "delta": request.delta,
            "targets": [request.tau],
            "draws": 1,
            "search_seeds": [-1],
            "final_seeds": list(range(repeats)),
            "split": split,
            "seed": seed,
            "selection": "private",
            "count": {"law": "poisson", "mean": mean},
            "support": request.support,
            "methods": [m.model_dump() for m in methods],
        }
    )


def _check(request: Request) -> None:
    if request.epsilon <= 0 or not math.isfinite(request.epsilon):
        raise ConfigError(f"--epsilon must be a finite number > 0, got {request.epsilon:g}")
    if not 0 < request.delta < 1:
        raise ConfigError(f"--delta must lie strictly between 0 and 1, got {request.delta:g}")
    rates = [c for c in VIOLATIONS if c != "bounded_group_loss"]  # scored from counts
    if request.constraint not in rates:
        raise ConfigError(
            f"--constraint {request.constraint}: advise scores the rate "
            f"constraints {', '.join(rates)}"
        )
    if not 0 < request.tau < 1:
        raise ConfigError(f"--tau is an allowed violation in (0, 1), got {request.tau:g}")
    if "csv" not in request.dataset:
        raise ConfigError("advise reads a CSV file: give the dataset as {csv: PATH, label, ...}")


def plan(request: Request, roots: Roots | None = None) -> Plan:
    """Load the data (one-line errors), choose the methods, refuse any configuration that is
    not whole-record DP, calibrate the release's per-candidate budget over every method's
    support, read the plan's noisy counts, then draw the release's candidates."""
    _check(request)
    roots = roots or Roots.draw(request.seed)
    split = roots.derived(roots.release, "advise/release split")
    options = {k if k != "csv" else "path": v for k, v in request.dataset.items()}
    adapter = get_dataset("csv", **options, split="per-record")
    notices = adapter.notices()
    task = adapter.load(split)
    rows = len(task.train) + len(task.val) + len(task.test)
    methods, skipped = applicable(
        request.constraint,
        request.allow_sensitive_at_test,
        round(rows * TRAIN_SHARE),
        request.only,
        request.spaces,
    )
    joint = _config(
        request,
        methods,
        "advise-release",
        request.candidates * len(methods),
        roots.release,
        split,
        1,
    )
    templates = candidate_templates(joint, sample_configurations(joint, request.support))
    support = list(templates.values())
    refuse_partial(support)
    started = time.perf_counter()
    budget = calibrate(joint, support)
    calibration = time.perf_counter() - started
    scale = 1 / (PLAN_COUNT_SHARE * request.epsilon)
    noisy = plan_counts(task, scale, roots.release, request.secure_noise)
    comparison = _config(
        request,
        methods,
        "advise-comparison",
        request.candidates,
        roots.comparison,
        roots.derived(roots.comparison, "advise/comparison split"),
        request.repeats,
    )
    exact = Exact(
        notices,
        rows,
        {"train": len(task.train), "validation": len(task.val), "test": len(task.test)},
        dict(
            zip(
                task.group_names,
                np.bincount(task.train.s, minlength=task.n_groups).tolist(),
                strict=True,
            )
        ),
        majority_class_error(task.train.y, task.test.y),
    )
    return Plan(
        request,
        methods,
        skipped,
        joint,
        support,
        budget,
        comparison,
        release_candidates(joint, templates, budget, roots.release, split, request.secure_noise),
        exact,
        task.feature_names,
        scale,
        calibration,
        notes=score_noise_notes(
            score_noise(noisy, task.group_names, request.constraint, budget.score_scale),
            request.tau,
        ),
    )


def release_candidates(
    joint: AdviceConfig,
    templates: dict[tuple, TrialSpec],
    budget: SelectionCalibration,
    root: int,
    split: int,
    secure: bool,
) -> list[TrialSpec]:
    """The release's candidates, from `root` and the public law alone: K from the count law,
    then per candidate a method uniformly and one of its support configurations uniformly,
    trained at the training epsilon with a seed of its own on the release's split."""
    assert joint.count is not None
    k = joint.count.sample(numpy_stream(root, "advise/release count"))
    labels = [m.label or m.name for m in joint.methods]
    dataset, eps = next(iter(templates))[:2]
    out = []
    for i in range(k):
        pick = numpy_stream(root, f"advise/release candidate/{i}")
        label = labels[int(pick.integers(len(labels)))]
        spec = templates[(dataset, eps, f"{label}#{int(pick.integers(joint.support))}")]
        options = {**spec.dataset_options, SPLIT_SEED: split}
        seed = candidate_seed(root, "release", 0, i)
        out.append(
            replace(
                spec,
                epsilon=budget.training_epsilon,
                secure_noise=secure,
                seed=seed,
                dataset_options=options,
            )
        )
    return out


def plan_counts(task: Task, scale: float, root: int, secure: bool) -> np.ndarray:
    """The validation part's rows by (group, label), each count plus Laplace(scale) noise
    drawn by a privacy session (one record is in one cell: sensitivity 1), floored at 0."""
    session = PrivacySession(
        seed_of(root, "advise/plan counts"), budget=PrivacyBudget(1 / scale), secure_noise=secure
    )
    ledger = PrivacyLedger()
    ledger.record(PLAN_COUNTS, dp_event.LaplaceDpEvent(scale))
    session.submit_plan(ledger)
    counts = np.zeros((task.n_groups, task.n_classes))
    np.add.at(counts, (task.val.s, task.val.y), 1.0)
    noisy = session.laplace_histogram(PLAN_COUNTS, scale).release(
        torch.as_tensor(counts, dtype=torch.float64), len(task.val), None
    )
    return np.clip(noisy.numpy(), 0.0, None)


def seed_of(root: int, name: str) -> int:
    return int(seed_sequence(root, name).generate_state(1, np.uint64)[0] >> np.uint64(1))


SWAMPS = "the validation score's noise swamps"
CONDITIONED = {
    "equalized_odds": (0, 1),
    "false_negative_rate": (1,),
    "false_negative_rate_parity": (1,),
}  # rates within a label


def score_noise(
    counts: np.ndarray, groups: tuple[str, ...], constraint: str, scale: float
) -> dict[str, tuple[int, float]]:
    """Per group: (the validation rows its rate divides by, from the noisy counts by (group,
    label), rounded; the std of the Laplace noise the private score puts on that rate). A
    rate's numerator sums two noisy cells of scale b (std 2b); the denominator's own noise is
    left out, so the std is a lower bound. Rates within a label (equalized odds,
    false-negative rates) divide by the group's rows of the rarest such label."""
    labels = CONDITIONED.get(constraint)
    out = {}
    for g, name in enumerate(groups):
        cells = counts[g] if labels is None else [min(counts[g][y] for y in labels)]
        rows = round(float(np.sum(cells)))
        out[name] = (rows, math.inf if rows == 0 else 2 * scale / rows)
    return out


def score_noise_notes(noise: dict[str, tuple[int, float]], tau: float) -> list[str]:
    """A warning when the private score cannot resolve tau: noise on even the best-measured
    group's rate over half of tau means the selection can barely tell a candidate within tau
    from one outside (expect few or no releases); otherwise the groups whose noise exceeds
    tau are named. Row counts are the plan's noisy ones."""
    best = min(noise, key=lambda g: noise[g][1])
    rows, std = noise[best]
    if std > tau / 2:
        worst = max(noise, key=lambda g: noise[g][1])
        return [
            f"{SWAMPS} tau = {tau:g}: the Laplace noise on a "
            f"group's rate has std at least {std:.2g} for the best-measured group "
            f"({best!r}, about {rows} validation rows) and {noise[worst][1]:.2g} for "
            f"{worst!r} (about {noise[worst][0]} rows), so few or no candidates will pass; "
            "raise --epsilon or --tau, lower --candidates, merge small groups (--other), or "
            "bring more rows"
        ]
    noisy = [g for g, (_, s) in noise.items() if s > tau]
    if noisy:
        return [
            f"group(s) {', '.join(repr(g) for g in noisy)} have so few validation rows "
            f"that the noise on their rates exceeds tau = {tau:g}; merging them (--other) "
            "makes the private score sharper"
        ]
    return []


@dataclass
class Release:
    """What the release put in OUT/release (`public`: release.json's content; None when
    nothing was selected) and, for the user's eyes only, the released model's exact test
    numbers."""

    public: dict[str, Any]
    test_error: float | None = None
    test_violation: float | None = None
    uses_sensitive_at_test: bool = False

    @property
    def selected(self) -> bool:
        return self.public["method"] is not None


def release(plan_: Plan, out: Path, workers: int) -> Release:
    """Train the release's candidates in a temporary folder, score each by its own session's
    noise, release the best under the target into OUT/release (model.pt and release.json),
    and delete everything else: K, the seeds and the other candidates stay inside."""
    folder = out / "release"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="fairbench-advise-") as work:
        run_dir = Path(work)
        (run_dir / MODELS).mkdir()
        try:
            done = execute(plan_.candidates, run_dir, workers, quiet=True)
            finished = finished_rows(run_dir, "release") if done.done else []
        except Interrupted:
            raise FairbenchError(
                "advise interrupted during the release: nothing was released"
            ) from None
        broken = [error for _, error in done.failed if not is_infeasible(error)]
        if broken:
            why = broken[0].splitlines()[-1]
            raise FairbenchError(f"a candidate of the release failed ({why}); nothing was released")
        rows = {r["trial_id"]: r for r in finished}
        scored: list[dict[str, Any]] = []
        for spec in plan_.candidates:
            row = rows.get(spec.trial_id)
            if row is None:  # uncalibratable at the training epsilon: runs nothing
                continue
            error, violation = validation_score(row, plan_.budget, plan_.request.constraint)
            scored.append({"row": row, "val_error": error, "val_violation": violation})
        best = None
        if scored:
            frame = pd.DataFrame(scored)[["val_error", "val_violation"]].astype(float)
            frame["val_violation"] = frame["val_violation"].fillna(math.inf)
            best = choose(frame, plan_.request.tau)
        chosen = None if best is None else scored[int(best.name)]
        if chosen is not None:
            shutil.copyfile(
                run_dir / MODELS / f"{chosen['row']['trial_id']}.pt", folder / "model.pt"
            )
    public = release_record(plan_, chosen)
    (folder / "release.json").write_text(_json(public))
    if chosen is None:
        return Release(public)
    row = chosen["row"]
    return Release(public, row["test_error"], row["test_violation"], row["uses_sensitive_at_test"])


def release_record(plan_: Plan, chosen: dict[str, Any] | None) -> dict[str, Any]:
    """release.json: the chosen configuration (no seed, index or count), its noisy score, the
    total epsilon and delta and how it was accounted: nothing about the other candidates."""
    r, b = plan_.request, plan_.budget
    row = None if chosen is None else chosen["row"]
    secure = r.secure_noise and not r.seeded
    return {
        "release": NOT_A_RELEASE
        if r.seeded
        else (
            "(epsilon, delta)-DP release of fairbench advise (whole record, add/remove one "
            "record): the model, its configuration and its noisy validation score"
        ),
        "method": None if row is None else bare(row["label"]).rsplit("#", 1)[0],
        "hparams": None if row is None else row["hparams"],
        "knob": None if row is None else row["knob"],
        "knob_name": None if row is None else row["knob_name"],
        "selected": "nothing: no candidate's noisy validation violation was within tau"
        if row is None
        else "the lowest noisy validation error within tau",
        "noisy_validation_error": None if chosen is None else chosen["val_error"],
        "noisy_validation_violation": None if chosen is None else chosen["val_violation"],
        "reads_sensitive_attribute_at_test": None if row is None else row["uses_sensitive_at_test"],
        "constraint": r.constraint,
        "tau": r.tau,
        "data": {
            k: v
            for k, v in r.dataset.items()
            if k in ("label", "sensitive", "positive", "drop", "other", "missing")
        },
        "epsilon": b.total_epsilon,
        "delta": r.delta,
        "accounting": {
            "event": "RepeatAndSelect (Papernot and Steinke 2022): K ~ Poisson, hidden",
            "count_law": plan_.joint.count.model_dump() if plan_.joint.count else None,
            "methods": [m.label or m.name for m in plan_.methods],
            "configurations_per_method": r.support,
            "candidate_epsilon": b.candidate_epsilon,
            "training_epsilon": b.training_epsilon,
            "score_laplace_scale": b.score_scale,
            "accountant": ACCOUNTANT,
            "note": PLD_NOTE,
            "costliest_candidate_ledger": b.ledger.to_json(),
        },
        "noise": (
            "seeded float64: regenerable from the seed"
            if r.seeded
            else NOISE_SAMPLERS[True]
            if secure
            else "float64, its randomness from the operating system's entropy (never written)"
        ),
        "preprocessing": "private (public bounds)"
        if "bounds" in r.dataset
        else (
            "not private: feature roles, scaling and category lists come from the data; the "
            "release is (epsilon, delta)-DP given them"
        ),
        "features": None if row is None else list(plan_.features),
    }


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, default=float) + "\n"


def compare(plan_: Plan, out: Path, workers: int, quiet: bool) -> pd.DataFrame:
    """Per method, its own private selections over the repeats: the analysis table (method,
    test error with CI, violation, satisfied fraction, steps, wall seconds)."""
    table, _ = run_private(
        plan_.comparison,
        out / "comparison",
        workers,
        quiet,
        warn=plan_.notes.append,
        skip_uncalibratable=True,
    )
    steps, walls = _effort(out / "comparison")
    table = table.copy()
    table["steps_mean"] = table["method"].map(lambda m: steps.get(bare(m), math.nan))
    table["wall_seconds"] = table["method"].map(lambda m: walls.get(bare(m), math.nan))
    return table


def _effort(comparison: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Per method label: mean steps per candidate and total wall seconds of its candidates."""
    steps: dict[str, list[float]] = {}
    walls: dict[str, float] = {}
    for store in sorted(TuneLayout(comparison).private.glob(f"*/{ResultStore.FILENAME}")):
        for row in finished_rows(store.parent, "comparison"):
            label = bare(row["label"]).rsplit("#", 1)[0]
            steps.setdefault(label, []).append(float(row["info"].get("steps") or math.nan))
            walls[label] = walls.get(label, 0.0) + float(row["wall_seconds"])
    means = {
        k: float(np.mean([x for x in v if not math.isnan(x)] or [math.nan]))
        for k, v in steps.items()
    }
    return means, walls


def run_advice(
    plan_: Plan, out: Path, workers: int, quiet: bool, say: Callable[[str], None] = print
) -> tuple[Release, pd.DataFrame]:
    """The release first (it is what the user keeps), then the comparison."""
    with run_lock(out):
        if not quiet:
            say("release: training its candidates (how many, and which, stays hidden)")
        record = release(plan_, out, workers)
        if not quiet:
            say(
                f"comparison: calibrating {len(plan_.methods)} methods' private selections, "
                "then training their candidates"
            )
        table = compare(plan_, out, workers, quiet)
    return record, table


def estimate(plan_: Plan, workers: int) -> None:
    """Estimated seconds of what is left once the plan is printed, from public quantities
    only (the expected number of candidates, not the drawn one): training, the support's
    mean steps (epochs x n / batch, times its iterations where it has them) times the bench
    table's CPU step time of its method, for the release's and the comparison's expected
    candidates over `workers` processes; and the comparison's calibration, one job per
    method, each taken to cost what the release's calibration (over every method's support
    at once) measured. Calibration, not training, dominates on data of a few thousand rows."""
    from fairbench.runner.preflight import step_milliseconds  # reads the bench table

    methods = len(plan_.methods)
    plan_.comparison_calibration_seconds = (
        plan_.calibration_seconds * methods / min(workers, methods)
    )
    step_ms = step_milliseconds()
    n = plan_.exact.rows * TRAIN_SHARE
    seconds = []
    for spec in plan_.support:
        hp, per_step = spec.hparams, step_ms.get(spec.method)
        if per_step is None or "epochs" not in hp or "batch_size" not in hp:
            continue
        steps = math.ceil(hp["epochs"] * n / hp["batch_size"])
        seconds.append(steps * hp.get("iterations", 1) * per_step / 1e3)
    if not seconds:
        return
    r = plan_.request
    expected = r.candidates * methods * (1 + r.repeats / methods)
    plan_.training_seconds = float(np.mean(seconds)) * expected / workers


def looking_cost(plan_: Plan, out: Path) -> dict[str, float]:
    """Epsilon at the user's delta of everything accounted that advise ran on the data, and
    its parts: the release's selection, the plan's noisy counts, and every comparison
    selection (one per method and repeat, whatever K turned out: the bound covers the law),
    their RDP curves added. Independent noise per method, candidate and repeat is what makes
    adding them valid."""
    assert plan_.joint.count is not None and plan_.comparison.count is not None
    release = selection_curve(plan_.budget.candidate_events(), plan_.joint.count)
    counts = rdp.rdp_curve(dp_event.LaplaceDpEvent(plan_.plan_counts_scale))
    comparison = np.zeros_like(release)
    for record in read_analysis(TuneLayout(out / "comparison")):
        score = dp_event.LaplaceDpEvent(record["score_laplace_scale"])
        events = [
            dp_event.ComposedDpEvent([PrivacyLedger.from_json(p).event, score])
            for p in record["candidate_plans"]
        ]
        if events and record["left_out"] is None:
            comparison = comparison + len(record["repeats"]) * selection_curve(
                events, plan_.comparison.count
            )
    delta = plan_.request.delta
    return {
        "total": rdp.epsilon(release + counts + comparison, delta),
        "release": plan_.budget.total_epsilon,
        "plan_counts": PLAN_COUNT_SHARE * plan_.request.epsilon,
        "comparison": rdp.epsilon(comparison, delta) if comparison.any() else 0.0,
    }
