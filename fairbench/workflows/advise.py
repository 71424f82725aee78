"""`fairbench advise`: which private fair method at my epsilon on my data, and what it costs.

Two parts, with different promises:

1. The release. One private selection (Papernot and Steinke 2022;
   `fairbench.privacy.selection`) over candidates drawn from every applicable method: the
   number K is Poisson with mean `budget` x methods; candidate i's method is drawn uniformly
   and its configuration is that method's next search-space draw, all independently of the
   data. Each candidate trains at the calibrated training epsilon and is scored on validation
   by Laplace-noised counts; the best by the noisy score under the target is released. The
   released model, its method (the recommendation) and its noisy score are (epsilon,
   delta)-DP at the user's epsilon: one RepeatAndSelect event over the candidates' mechanisms
   (`private_selection.calibrate`), accounted by the RDP accountant.
2. The comparison. Per method, `repeats` private selections of its own at the same epsilon
   (`fairbench tune`'s `selection: private`), each on its own split, so that every method's
   test error has a confidence interval. It is an analysis, not a DP release: its runs spend
   privacy on the same data, and the total under composition is printed beside it.

The test split is used only to report, never to choose.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from pydantic import Field

from fairbench.errors import ConfigError
from fairbench.methods import method_class
from fairbench.metrics import VIOLATIONS, majority_class_error
from fairbench.rundir.lock import run_lock
from fairbench.rundir.models import MODELS
from fairbench.rundir.store import finished_rows
from fairbench.runner.execute import execute
from fairbench.runner.trial import SPLIT_SEED, TrialSpec, load_task
from fairbench.streams import numpy_stream
from fairbench.task import Task
from fairbench.workflows.private_selection import (
    MethodBudget,
    bare,
    calibrate,
    candidate_seed,
    candidate_templates,
    run_private,
    validation_score,
)
from fairbench.workflows.tune import MethodSpace, TuneConfig, choose, sample_configurations

SPACES = Path(__file__).resolve().parent.parent / "configs" / "advise.yaml"
BATCH_FRACTIONS = (0.01, 0.02, 0.04, 0.08)  # of the training rows: fig-privacy-cost's rates
JOINT_REPEAT = 2**31 - 1  # the release's candidate seeds: no comparison repeat's


class AdviceConfig(TuneConfig):
    """A tune config whose repeats may be fewer than ten (the comparison is an analysis)."""

    final_seeds: list[int] = Field(min_length=2)


@dataclass(frozen=True)
class Request:
    """What the user asked: their data (a `csv:` dataset entry), epsilon, delta, constraint,
    target tau, expected candidates per method, comparison repeats, and whether methods that
    read the sensitive attribute at test time may be recommended."""

    dataset: dict[str, Any]
    epsilon: float
    constraint: str
    tau: float
    delta: float = 1e-5
    budget: float = 4.0
    repeats: int = 5
    allow_sensitive_at_test: bool = False
    seed: int = 0
    only: tuple[str, ...] = ()  # restrict to these methods (empty: every applicable one)


@dataclass
class Plan:
    """Everything decided before any training: the methods, the release's candidates and
    budget, the comparison's config and budgets, and the estimated seconds."""

    request: Request
    methods: list[MethodSpace]
    skipped: dict[str, str]
    joint: AdviceConfig
    joint_specs: list[TrialSpec]
    joint_budget: MethodBudget
    comparison: AdviceConfig
    n_train: int
    calibration_seconds: float = 0.0  # what calibrating the release took, measured
    majority_error: float = math.nan  # predicting the majority label, on the release's split
    training_seconds: float | None = None  # estimated: every candidate's steps, bench table
    comparison_calibration_seconds: float | None = None  # estimated from the release's
    notes: list[str] = field(default_factory=list)

    @property
    def estimated_seconds(self) -> float | None:
        """Seconds still to go once the plan is printed: training plus the comparison's
        calibration (None without bench step times)."""
        if self.training_seconds is None or self.comparison_calibration_seconds is None:
            return None
        return self.training_seconds + self.comparison_calibration_seconds


def applicable(constraint: str, allow_sensitive_at_test: bool, n_train: int,
               only: tuple[str, ...] = ()) -> tuple[list[MethodSpace], dict[str, str]]:  # fmt: skip
    """The methods advise may recommend, with batch sizes scaled to the data, and why each
    other method of advise.yaml is left out."""
    spaces = yaml.safe_load(SPACES.read_text())["methods"]
    known = [raw["name"] for raw in spaces]
    unknown = [m for m in only if m not in known]
    if unknown:
        raise ConfigError(f"--method {unknown[0]}: advise chooses among {', '.join(known)}")
    batches = sorted({max(8, round(n_train * f)) for f in BATCH_FRACTIONS})
    chosen, skipped = [], {}
    for raw in spaces:
        cls = method_class(raw["name"])
        if only and raw["name"] not in only:
            skipped[raw["name"]] = "not among --method"
        elif cls.constraints is not None and constraint not in cls.constraints:
            skipped[raw["name"]] = f"does not support {constraint}"
        elif cls.sensitive_at_test and not allow_sensitive_at_test:
            skipped[raw["name"]] = ("reads the sensitive attribute at test time "
                                    "(--allow-sensitive-at-test)")  # fmt: skip
        else:
            space = {**raw.get("space", {}), "batch_size": batches}
            chosen.append(MethodSpace.model_validate({**raw, "space": space}))
    if not chosen:
        raise ConfigError(f"no method left to advise on for {constraint}: "
                          + "; ".join(f"{k} {v}" for k, v in skipped.items()))  # fmt: skip
    return chosen, skipped


def _tune_config(request: Request, methods: list[MethodSpace], name: str, mean: float,
                 seeds: list[int]) -> AdviceConfig:  # fmt: skip
    return AdviceConfig.model_validate({
        "name": name, "datasets": [request.dataset], "constraint": request.constraint,
        "epsilons": [request.epsilon], "delta": request.delta, "targets": [request.tau],
        "budget": 1, "search_seeds": [2**31 - 2], "final_seeds": seeds, "seed": request.seed,
        "selection": "private", "count": {"law": "poisson", "mean": mean},
        "methods": [m.model_dump() for m in methods],
    })  # fmt: skip


def joint_candidates(config: AdviceConfig) -> list[str]:
    """The release's candidates, `method#j` each: K ~ the count law, then each candidate's
    method uniformly at random and its configuration that method's next draw (data-free)."""
    assert config.count is not None
    k = config.count.sample(numpy_stream(config.seed, "advise/joint count"))
    pick = numpy_stream(config.seed, "advise/joint methods")
    labels = [m.label or m.name for m in config.methods]
    seen: dict[str, int] = {}
    out = []
    for _ in range(k):
        label = labels[int(pick.integers(len(labels)))]
        out.append(f"{label}#{seen.get(label, 0)}")
        seen[label] = seen.get(label, 0) + 1
    return out


def plan(request: Request) -> Plan:
    """Load the data (one-line errors), choose the methods, draw the release's candidates
    and calibrate its per-candidate budget to the user's epsilon."""
    if request.epsilon <= 0 or not math.isfinite(request.epsilon):
        raise ConfigError(f"--epsilon must be a finite number > 0, got {request.epsilon:g}")
    rates = [c for c in VIOLATIONS if c != "bounded_group_loss"]  # scored from counts
    if request.constraint not in rates:
        raise ConfigError(f"--constraint {request.constraint}: advise scores the rate "
                          f"constraints {', '.join(rates)}")  # fmt: skip
    if not 0 < request.tau < 1:
        raise ConfigError(f"--tau is an allowed violation in (0, 1), got {request.tau:g}")
    probe = _tune_config(request, [MethodSpace(name="dp-sgd")], "advise", 1.0, [0, 1])
    probe_spec = candidate_templates(probe, sample_configurations(probe, 1))
    task = load_task(next(iter(probe_spec.values())))
    n_train = len(task.train)
    methods, skipped = applicable(request.constraint, request.allow_sensitive_at_test, n_train,
                                  request.only)  # fmt: skip
    comparison = _tune_config(request, methods, "advise-comparison", request.budget,
                              list(range(request.repeats)))  # fmt: skip
    joint = _tune_config(request, methods, "advise-release", request.budget * len(methods),
                         [request.seed, request.seed + 1])  # fmt: skip
    labels = joint_candidates(joint)
    if not labels:
        raise ConfigError(
            "the release's candidate count came out 0 (a Poisson draw): nothing would be "
            "released; run again with another --seed or a larger --budget"
        )
    per_label = Counter(c.rsplit("#", 1)[0] for c in labels)  # draws each method needs
    draws = sample_configurations(joint, max(per_label.values()))
    templates = candidate_templates(joint, draws)
    candidates = [templates[(task_name(request), request.epsilon, c)] for c in labels]
    started = time.perf_counter()
    budget = calibrate(joint, candidates[0], candidates[1:])
    calibration = time.perf_counter() - started
    specs = [replace(spec, epsilon=budget.training_epsilon, seed=candidate_seed(JOINT_REPEAT, i),
                     dataset_options={**spec.dataset_options, SPLIT_SEED: request.seed})
             for i, spec in enumerate(candidates)]  # fmt: skip
    release_split = load_task(specs[0])  # the majority-class reference is reported on it
    notes = score_noise_notes(score_noise(task, request.constraint, budget.score_scale),
                              request.tau)  # fmt: skip
    return Plan(request, methods, skipped, joint, specs, budget, comparison, n_train, calibration,
                majority_class_error(release_split.train.y, release_split.test.y),
                notes=notes)  # fmt: skip


SWAMPS = "the validation score's noise swamps"
CONDITIONED = {"equalized_odds": (0, 1), "false_negative_rate": (1,),
               "false_negative_rate_parity": (1,)}  # fmt: skip  # rates within a label


def score_noise(task: Task, constraint: str, scale: float) -> dict[str, tuple[int, float]]:
    """Per group: (the validation rows its rate divides by, the std of the Laplace noise the
    private score puts on that rate). A rate's numerator sums two noisy cells of scale b
    (std 2b); the denominator's own noise is left out, so the std is a lower bound. Rates
    within a label (equalized odds, false-negative rates) divide by the group's rows of the
    rarest such label."""
    out = {}
    labels = CONDITIONED.get(constraint)
    for g, name in enumerate(task.group_names):
        mine = task.val.s == g
        rows = int(mine.sum()) if labels is None else min(int((mine & (task.val.y == y)).sum())
                                                          for y in labels)  # fmt: skip
        out[name] = (rows, math.inf if rows == 0 else 2 * scale / rows)
    return out


def score_noise_notes(noise: dict[str, tuple[int, float]], tau: float) -> list[str]:
    """A warning when the private score cannot resolve tau: noise on even the best-measured
    group's rate over half of tau means the selection can barely tell a candidate within tau
    from one outside (expect few or no releases); otherwise the groups whose noise exceeds
    tau are named."""
    best = min(noise, key=lambda g: noise[g][1])
    rows, std = noise[best]
    if std > tau / 2:
        worst = max(noise, key=lambda g: noise[g][1])
        return [f"{SWAMPS} tau = {tau:g}: the Laplace noise on a "
                f"group's rate has std at least {std:.2g} for the best-measured group "
                f"({best!r}, {rows} validation rows) and {noise[worst][1]:.2g} for "
                f"{worst!r} ({noise[worst][0]} rows), so few or no candidates will pass; "
                "raise --epsilon or --tau, lower --budget, merge small groups (--other), or "
                "bring more rows"]  # fmt: skip
    noisy = [g for g, (_, s) in noise.items() if s > tau]
    if noisy:
        return [f"group(s) {', '.join(repr(g) for g in noisy)} have so few validation rows "
                f"that the noise on their rates exceeds tau = {tau:g}; merging them (--other) "
                "makes the private score sharper"]  # fmt: skip
    return []


def task_name(request: Request) -> str:
    return "csv" if "csv" in request.dataset else request.dataset["name"]


def release(plan_: Plan, out: Path, workers: int, quiet: bool) -> dict[str, Any]:
    """Train the release's candidates (their parameters kept), score each privately and
    release the best under the target: the record of the selection, the chosen candidate
    (None when no candidate's noisy violation is within tau) and the model's folder."""
    run_dir = out / "release"
    (run_dir / MODELS).mkdir(parents=True, exist_ok=True)
    done = execute(plan_.joint_specs, run_dir, workers, quiet)
    failed = {t for t, error in done.failed}
    rows = {r["trial_id"]: r for r in finished_rows(run_dir, "release")}
    budget = plan_.joint_budget
    candidates = []
    for spec in plan_.joint_specs:
        row = rows.get(spec.trial_id)
        if row is None:
            reason = "failed" if spec.trial_id in failed else "missing"
            candidates.append({"label": bare(spec.label), "trial_id": spec.trial_id,
                               "status": reason})  # fmt: skip
            continue
        error, violation = validation_score(row, budget, plan_.request.constraint)
        candidates.append({
            "label": bare(spec.label), "trial_id": spec.trial_id, "status": "done",
            "method": row["method"], "hparams": row["hparams"], "knob": row["knob"],
            "noisy_val_error": error, "noisy_val_violation": violation,
            "test_error": row["test_error"], "test_violation": row["test_violation"],
            "steps": row["info"].get("steps"), "wall_seconds": row["wall_seconds"],
            "uses_sensitive_at_test": row["uses_sensitive_at_test"],
        })  # fmt: skip
    scored = pd.DataFrame([c for c in candidates if c["status"] == "done"])
    best = None
    if len(scored):
        frame = scored.rename(columns={"noisy_val_error": "val_error",
                                       "noisy_val_violation": "val_violation"})  # fmt: skip
        frame["val_violation"] = frame["val_violation"].fillna(math.inf)
        best = choose(frame, plan_.request.tau)
    chosen = None if best is None else scored.loc[best.name].to_dict()
    record = {
        "candidates": candidates, "count": len(plan_.joint_specs),
        "count_law": plan_.joint.count.model_dump() if plan_.joint.count else None,
        "candidate_epsilon": budget.candidate_epsilon,
        "training_epsilon": budget.training_epsilon,
        "score_laplace_scale": budget.score_scale, "total_epsilon": budget.total_epsilon,
        "delta": plan_.request.delta, "accounting_note": budget.notes(),
        "candidate_ledger": budget.ledger.to_json(), "released": chosen,
    }  # fmt: skip
    if chosen is not None:
        _save_release(out, run_dir, chosen, record, plan_)
    (run_dir / "selection.json").write_text(json.dumps(record, indent=1, default=float))
    return record


def _save_release(out: Path, run_dir: Path, chosen: dict[str, Any], record: dict[str, Any],
                  plan_: Plan) -> None:  # fmt: skip
    """OUT/model: the released parameters, the configuration that trains them, and the
    ledger of the selection that released them."""
    model = out / "model"
    model.mkdir(exist_ok=True)
    shutil.copyfile(run_dir / MODELS / f"{chosen['trial_id']}.pt", model / "parameters.pt")
    spec = next(s for s in plan_.joint_specs if s.trial_id == chosen["trial_id"])
    (model / "config.yaml").write_text(yaml.safe_dump({
        "method": spec.method, "hparams": spec.hparams, "knob": spec.knob,
        "constraint": spec.constraint, "dataset": plan_.request.dataset,
        "dataset_options": spec.dataset_options, "training_epsilon": spec.epsilon,
        "delta": spec.delta, "seed": spec.seed,
    }, sort_keys=False))  # fmt: skip
    (model / "ledger.json").write_text(json.dumps({
        "release": "RepeatAndSelect over the candidates below (Papernot and Steinke 2022)",
        "total_epsilon": record["total_epsilon"], "delta": record["delta"],
        "accounting_note": record["accounting_note"], "count_law": record["count_law"],
        "count": record["count"], "candidate_epsilon": record["candidate_epsilon"],
        "candidate_ledger": record["candidate_ledger"],
    }, indent=1, default=float))  # fmt: skip


def compare(plan_: Plan, out: Path, workers: int, quiet: bool) -> pd.DataFrame:
    """Per method, its own private selections over the repeats: the analysis table (method,
    test error with CI, violation, satisfied fraction, steps, wall seconds)."""
    table, _ = run_private(plan_.comparison, out / "comparison", workers, quiet,
                           warn=plan_.notes.append, skip_uncalibratable=True)  # fmt: skip
    steps, walls = _effort(out / "comparison")
    table = table.copy()
    table["steps_mean"] = table["method"].map(lambda m: steps.get(bare(m), math.nan))
    table["wall_seconds"] = table["method"].map(lambda m: walls.get(bare(m), math.nan))
    return table


def _effort(comparison: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Per method label: mean steps per candidate and total wall seconds of its candidates."""
    steps: dict[str, list[float]] = {}
    walls: dict[str, float] = {}
    for store in sorted((comparison / "private").glob("*/results.sqlite")):
        for row in finished_rows(store.parent, "comparison"):
            label = bare(row["label"]).rsplit("#", 1)[0]
            steps.setdefault(label, []).append(float(row["info"].get("steps") or math.nan))
            walls[label] = walls.get(label, 0.0) + float(row["wall_seconds"])
    means = {k: float(np.mean([x for x in v if not math.isnan(x)] or [math.nan]))
             for k, v in steps.items()}  # fmt: skip
    return means, walls


def run_advice(plan_: Plan, out: Path, workers: int, quiet: bool,
               say: Callable[[str], None] = print) -> tuple[dict, pd.DataFrame]:  # fmt: skip
    """The release first (it is what the user keeps), then the comparison."""
    with run_lock(out):
        if not quiet:
            say(f"release: training {len(plan_.joint_specs)} candidates")
        record = release(plan_, out, workers, quiet)
        if not quiet:
            say(f"comparison: calibrating {len(plan_.methods)} methods' private selections, "
                "then training their candidates")  # fmt: skip
        table = compare(plan_, out, workers, quiet)
    return record, table


def estimate(plan_: Plan, workers: int) -> None:
    """Estimated seconds of what is left once the plan is printed, two upper estimates:
    training, each release candidate's steps (epochs x n / batch, times its iterations where
    it has them) times the bench table's CPU step time of its method, scaled to the release's
    and the comparison's expected candidate count, over `workers` processes; and the
    comparison's calibration, one job per method, each taken to cost what the release's
    calibration (over every method's candidates at once) measured. Calibration, not training,
    dominates on data of a few thousand rows (COMPAS: 53 s to calibrate the release, 9 s to
    train its 31 candidates)."""
    from fairbench.runner.preflight import step_milliseconds

    methods = len(plan_.methods)
    plan_.comparison_calibration_seconds = (
        plan_.calibration_seconds * methods / min(workers, methods)
    )

    step_ms = step_milliseconds()
    seconds = []
    for spec in plan_.joint_specs:
        hp, per_step = spec.hparams, step_ms.get(spec.method)
        if per_step is None or "epochs" not in hp or "batch_size" not in hp:
            continue
        steps = math.ceil(hp["epochs"] * plan_.n_train / hp["batch_size"])
        seconds.append(steps * hp.get("iterations", 1) * per_step / 1e3)
    if not seconds:
        return
    comparison = plan_.request.repeats * plan_.request.budget * methods
    candidates = len(plan_.joint_specs) + comparison
    plan_.training_seconds = float(np.mean(seconds)) * candidates / workers


def plan_text(plan_: Plan) -> str:
    from fairbench.runner.preflight import describe_seconds

    r, b = plan_.request, plan_.joint_budget
    picked: dict[str, int] = {}
    for spec in plan_.joint_specs:
        name = bare(spec.label).rsplit("#", 1)[0]
        picked[name] = picked.get(name, 0) + 1
    lines = [
        f"plan: {r.constraint} within tau = {r.tau:g} at epsilon = {r.epsilon:g}, delta = "
        f"{r.delta:g}, on {plan_.n_train} training rows",
        f"  methods: {', '.join(m.name for m in plan_.methods)}",
        *(f"  skipped {name}: {why}" for name, why in plan_.skipped.items()),
        f"  release: one private selection over K = {len(plan_.joint_specs)} candidates "
        f"(K ~ Poisson({plan_.joint.count.expected:g}); "  # type: ignore[union-attr]
        + ", ".join(f"{k} {v}" for k, v in sorted(picked.items())) + ")",
        f"    per candidate: training epsilon {b.training_epsilon:.3g}, validation score "
        f"Laplace scale {b.score_scale:.3g}; total epsilon {b.total_epsilon:.4f} (RDP)",
        f"  comparison: {r.repeats} repeats x {len(plan_.methods)} methods, each its own "
        f"private selection at epsilon {r.epsilon:g} (~{r.budget:g} candidates): an "
        "analysis, not a release",
        f"  calibrating the release took {describe_seconds(plan_.calibration_seconds)}",
        "  estimated time from here: " + (
            "unknown (no bench step times)" if plan_.estimated_seconds is None else
            f"{describe_seconds(plan_.estimated_seconds)} (training "
            f"{describe_seconds(plan_.training_seconds or 0.0)} from the bench table's step "
            "times, calibrating the comparison "
            f"{describe_seconds(plan_.comparison_calibration_seconds or 0.0)} from the "
            "release's; upper estimates)"),
        *(f"  warning: {w}" for w in plan_.notes),
    ]  # fmt: skip
    return "\n".join(lines)


def looking_cost(plan_: Plan, out: Path) -> float:
    """Epsilon at the user's delta of everything advise ran on the data: the release's
    selection composed with every comparison selection (one per method and repeat that ran a
    candidate), their RDP curves added (`selection.selection_curve`). The comparison is why
    it exceeds the user's epsilon."""
    from dp_accounting import dp_event

    from fairbench.privacy import rdp
    from fairbench.privacy.ledger import PrivacyLedger
    from fairbench.privacy.selection import selection_curve

    assert plan_.joint.count is not None and plan_.comparison.count is not None
    curve = selection_curve(plan_.joint_budget.candidate_events(), plan_.joint.count)
    path = out / "comparison" / "private" / "selections.json"
    for record in json.loads(path.read_text()) if path.is_file() else []:
        score = dp_event.LaplaceDpEvent(record["score_laplace_scale"])
        events = [dp_event.ComposedDpEvent([PrivacyLedger.from_json(p).event, score])
                  for p in record["candidate_plans"]]  # fmt: skip
        ran = sum(1 for r in record["repeats"] if r["count"] > 0)
        if events and ran:
            curve = curve + ran * selection_curve(events, plan_.comparison.count)
    return rdp.epsilon(curve, plan_.request.delta)


def comparison_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per method. `held` counts the repeats whose released model held tau on test,
    and `satisfied` is its share of ALL repeats: a repeat that released nothing is a miss
    (fig-tuning-cost's rule)."""
    out = []
    for r in table.itertuples(index=False):
        repeats = len(r.candidates_drawn)
        held = 0 if r.feasible == 0 else round(r.satisfied_fraction * r.feasible)
        out.append({
            "method": r.method, "test_error": r.test_error, "ci95": r.test_error_ci95,
            "violation": r.test_violation, "held": held, "satisfied": held / repeats,
            "released": f"{r.feasible}/{repeats}",
            "steps": r.steps_mean, "wall_seconds": r.wall_seconds,
            "left_out": r.left_out if isinstance(r.left_out, str) else None,
        })  # fmt: skip
    return out


def _num(value: float, fmt: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else (
        format(value, fmt))  # fmt: skip


def comparison_text(table: pd.DataFrame, spent: float, plan_: Plan) -> str:
    r = plan_.request
    lines = [f"\ncomparison (an analysis, not a DP release): each method alone, tuned by its "
             f"own private selection at epsilon {r.epsilon:g}, {r.repeats} repeats on their "
             "own splits; test error of the released models, mean ± 95% CI; held tau: "
             "repeats whose released model held tau on test (nothing released is a miss)",
             f"{'method':<28} {'test error':>17} {'violation':>9} {'held tau':>8} "
             f"{'released':>8} {'steps':>7} {'wall s':>7}"]  # fmt: skip
    for row in comparison_rows(table):
        error = ("cannot calibrate" if row["left_out"] else "none released"
                 if math.isnan(row["test_error"]) else f"{row['test_error']:.3f} (one)"
                 if math.isnan(row["ci95"]) else
                 f"{row['test_error']:.3f} ± {row['ci95']:.3f}")  # fmt: skip
        held = f"{row['held']}/{r.repeats}"
        lines.append(
            f"{row['method']:<28} {error:>17} {_num(row['violation'], '.3f'):>9} "
            f"{held:>8} {row['released']:>8} "
            f"{_num(row['steps'], '.0f'):>7} {_num(row['wall_seconds'], '.0f'):>7}"
        )
    lines.append(f"{'majority class (reference)':<28} {plan_.majority_error:>17.3f} "
                 f"{0:>9.3f} {'-':>8} {'-':>8} {0:>7} {'-':>7}")  # fmt: skip
    lines += [f"  {note}" for note in plan_.notes if note.startswith("left out")]
    lines.append(f"privacy spent on this data by everything above (release and comparison, "
                 f"composed, RDP): epsilon {spent:.3g} at delta {r.delta:g}; the release alone "
                 f"is epsilon {plan_.joint_budget.total_epsilon:.3g}")  # fmt: skip
    return "\n".join(lines)


def recommendation_text(plan_: Plan, record: dict[str, Any], table: pd.DataFrame) -> str:
    r = plan_.request
    chosen = record["released"]
    if chosen is None:
        return (f"\nrecommendation: none. No candidate's noisy validation violation was within "
                f"tau = {r.tau:g} at epsilon {r.epsilon:g}, so nothing was released (the "
                "selection still spent its epsilon). Loosen tau, raise epsilon, or collect "
                "more data; the comparison above shows which methods come closest."
                + (" The plan warned why: the validation score's noise swamps tau."
                   if any(n.startswith(SWAMPS) for n in plan_.notes) else ""))  # fmt: skip
    method = chosen["method"]
    row = table[table["method"].map(bare) == method]
    mine = comparison_rows(row)
    alone = ("" if not mine or math.isnan(mine[0]["test_error"]) else
             f" Alone, under the same paid tuning, {method} averaged test error "
             f"{mine[0]['test_error']:.3f} ± {mine[0]['ci95']:.3f} over the repeats that "
             f"released a model, and held tau in {mine[0]['held']} of its {r.repeats} "
             "repeats.")  # fmt: skip
    return (
        f"\nrecommendation: {method} ({chosen['label']}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(chosen["hparams"].items()))
        + (f", knob {chosen['knob']:g}" if chosen["knob"] is not None else "")
        + f"). It won the private selection with noisy validation error "
        f"{chosen['noisy_val_error']:.3f} and violation {chosen['noisy_val_violation']:.3f}; "
        f"its test error is {chosen['test_error']:.3f}, violation "
        f"{chosen['test_violation']:.3f} (test data, reported, never used to choose).{alone} "
        f"Caveats: the released model, its method and its noisy score are "
        f"({record['total_epsilon']:.3g}, {r.delta:g})-DP as one RepeatAndSelect event "
        "(RDP accountant); the comparison is not, and its cost is printed above; one split "
        "and one draw of K decide the winner, and the comparison's intervals say how much "
        "methods differ beyond that"
        + (
            "; preprocessing was not private (no --bounds): feature roles, scaling and "
            "category lists come from the data"
            if "bounds" not in r.dataset
            else ""
        )
        + (
            f"; {method} reads the sensitive attribute at test time"
            if chosen.get("uses_sensitive_at_test")
            else ""
        )
        + (
            f"; its test error is not below the majority-class predictor's "
            f"({plan_.majority_error:.3f}, violation 0): at this epsilon it has learnt nothing "
            "a constant prediction does not give"
            if chosen["test_error"] >= plan_.majority_error
            else ""
        )
        + (
            f"; on test its violation {chosen['test_violation']:.3f} exceeds tau: the noisy "
            "validation score let it through"
            if chosen["test_violation"] > r.tau
            else ""
        )
        + "."
    )


def advice_json(plan_: Plan, record: dict[str, Any], table: pd.DataFrame, spent: float,
                out: Path) -> dict[str, Any]:  # fmt: skip
    r = plan_.request
    return {
        "data": r.dataset, "epsilon": r.epsilon, "delta": r.delta,
        "constraint": r.constraint, "tau": r.tau,
        "methods": [m.name for m in plan_.methods], "skipped": plan_.skipped,
        "release": {k: v for k, v in record.items() if k != "candidate_ledger"},
        "comparison": comparison_rows(table), "majority_error": plan_.majority_error,
        "epsilon_spent_on_data": spent,
        "warnings": plan_.notes,
        "recommendation": None if record["released"] is None else record["released"]["method"],
        "report": str(out / "report.html"),
        "model": None if record["released"] is None else str(out / "model"),
    }  # fmt: skip


def write_report(plan_: Plan, record: dict[str, Any], table: pd.DataFrame, spent: float,
                 out: Path) -> Path:  # fmt: skip
    """OUT/report.md and a self-contained OUT/report.html (no file or URL outside it): the
    plan, the comparison, the privacy spent, the recommendation, the request."""
    from html import escape

    from fairbench.report.html import STYLE, document_html

    rows = comparison_rows(table)
    repeats = plan_.request.repeats
    body = "\n".join([
        "## Comparison (an analysis, not a DP release)", "",
        "| method | test error | ±95% CI | violation | held τ | released | steps | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *(f"| {x['method']} | {_num(x['test_error'], '.4f')} | {_num(x['ci95'], '.4f')} | "
          f"{_num(x['violation'], '.4f')} | {x['held']}/{repeats} | {x['released']} | "
          f"{_num(x['steps'], '.0f')} | {_num(x['wall_seconds'], '.0f')} |" for x in rows),
        f"| majority class (reference) | {plan_.majority_error:.4f} | | 0 | | | 0 | |",
        "", f"Privacy spent on this data by the release and the comparison, composed (RDP): "
        f"ε = {spent:.3g} at δ = {plan_.request.delta:g}.", "",
        "## Recommendation", "", recommendation_text(plan_, record, table).strip(), "",
    ])  # fmt: skip
    plan_block = plan_text(plan_)
    request = yaml.safe_dump(vars(plan_.request), sort_keys=False)
    (out / "report.md").write_text(
        f"# fairbench advise\n\n## Plan\n\n```\n{plan_block}\n```"
        f"\n\n{body}\n## Request\n\n```yaml\n{request}```\n"
    )
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>fairbench advise</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        "<h1>fairbench advise</h1>\n"
        f"<section id=\"plan\"><h2>Plan</h2>\n<pre>{escape(plan_block)}</pre></section>\n"
        f"<section id=\"comparison\">\n{document_html(body)}</section>\n"
        f"<section id=\"request\"><h2>Request</h2>\n<pre>{escape(request)}</pre></section>\n"
        "</body>\n</html>\n"
    )  # fmt: skip
    (out / "report.html").write_text(page)
    return out / "report.html"
