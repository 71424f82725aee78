"""`selection: private` for `fairbench tune`: tuning paid for out of the stated epsilon.

Under `selection: free` (the papers' convention) the validation split is treated as public
and the privacy spent on tuning is not charged. Here the whole procedure is one
(epsilon, delta)-DP release per (dataset, epsilon, method, target), by Papernot and Steinke's
private selection (`fairbench.privacy.selection`):

1. Whole records only. A candidate whose configuration is not (epsilon, delta)-DP for the
   whole record (not private, another notion, a statistic read exactly, a plan that grows
   during training, a plan with no noisy release) is refused before anything runs
   (`refuse_partial`; a plan-time guard catches a method whose plan says otherwise).
2. Repeats. Each of the config's `final_seeds` is one repeat of the whole procedure: it fixes
   the data split (the split seed), so the released models' test errors over the repeats give
   the mean and its 95% CI. `search_seeds` are not used.
3. Support. Per method, `support` configurations are drawn from its space before anything
   else (the free search's sampling); the budget is calibrated over all of them, so it does
   not depend on how many candidates are drawn, nor on which.
4. Count and candidates. Per (method, repeat) the number of candidates K is drawn from the
   config's `count` law, and each candidate's configuration uniformly from the support, on
   seeded streams of their own, independently of the data. Each candidate is then the same
   mechanism Q (a uniform mixture over the support), as the theorem needs. Candidate i trains
   at the calibrated training epsilon on the repeat's split with a seed of its own
   (`candidate_seed`: distinct per method, repeat and candidate, so no two candidates, of
   one method or of two, share noise or batches), then gets a noisy validation score drawn
   by a privacy session of that seed: the validation split is private data too
   (`noisy_cells`).
5. Release: per target, the candidate with the lowest noisy validation error among those whose
   noisy validation violation is within the target (`tune.choose`; noisy error alone for an
   `unconstrained` method). Its test error is the repeat's result; no candidate within the
   target, or K = 0, releases nothing.
6. Budget. One candidate (training plus score) is one mechanism Q; the selection is
   `RepeatAndSelectDpEvent(Q, mean, shape)`, accounted by RDP (the PLD accountant cannot
   represent it; `privacy.selection`). Q mixes the support's plans (a space that changes the
   batch size, the epochs, a Laplace scale), so it is accounted by the pointwise maximum of
   their RDP curves. A candidate's budget b is split: training is calibrated by the method
   itself to (1 - score_share) b, the score's Laplace noise has scale 1 / (score_share b); b
   is the largest (by bisection) whose total meets the target epsilon.

What tune writes beside the releases (K per repeat, every candidate's noisy score, seeds) is
an analysis of the selection on shipped data, not part of a DP release (`ANALYSIS`); what
`fairbench advise` releases on a user's data is the released model, its configuration, its
noisy score and the accounting, nothing else.

Candidates of several targets are shared to save compute: each target's release is
(epsilon, delta)-DP on its own, releasing several targets' models together is not covered by
the stated total.

`selection: uncharged` is the twin with tuning not charged (the papers' convention): the same
counts, candidates, seeds and splits, but every candidate trains at the full epsilon and is
scored exactly on validation, and nothing is accounted beyond each candidate's own epsilon.
The pair isolates what paying for tuning costs (fig-tuning-cost).
"""

from __future__ import annotations

import json
import math
import multiprocessing
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from dp_accounting import dp_event

from fairbench.errors import CalibrationError, ConfigError
from fairbench.methods import get_method
from fairbench.methods.base import SENSITIVE_MARK, Method
from fairbench.metrics import VIOLATIONS, error_rate
from fairbench.privacy import PrivacyBudget, PrivacyLedger, rdp
from fairbench.privacy.selection import (
    ACCOUNTANT,
    PLD_NOTE,
    calibrate_candidate,
    selection_epsilon,
)
from fairbench.privacy.session import PrivacyContractError, PrivacySession, check_plan
from fairbench.report import write_report
from fairbench.report.aggregate import ci95
from fairbench.rundir.lock import run_lock
from fairbench.rundir.store import finished_rows
from fairbench.rundir.tuning import (
    TuneLayout,
    TuningRow,
    nan_if_none,
    write_analysis,
    write_table,
)
from fairbench.runner.config import expand
from fairbench.runner.execute import execute
from fairbench.runner.preflight import capture
from fairbench.runner.progress_display import trial_progress
from fairbench.runner.trial import NOISE_SAMPLERS, SPLIT_SEED, TrialSpec
from fairbench.runner.worker import init_worker
from fairbench.streams import numpy_stream, seed_sequence
from fairbench.workflows.tune import (
    TuneConfig,
    choose,
    is_infeasible,
    sample_configurations,
    search_config,
    write_tune_config,
)

SCORE_LABEL = "private selection: noisy validation counts"
CHARGED = "tuning charged: private selection (RDP accountant)"
NOT_CHARGED = "tuning not charged"
INFEASIBLE = "infeasible"  # a candidate whose draw no calibration meets at its epsilon
BISECTED = 3  # plans the budget's bisection runs on at first (then 3 more while it falls short)
CANDIDATE_COLUMNS = [
    "label",
    "hparams",
    "knob",
    "val_error",
    "val_violation",
    "test_error",
    "test_violation",
]
ANALYSIS = (
    "analysis of the selection, not part of the DP release: K per repeat, every candidate's "
    "noisy score, test numbers and seeds are kept to study the procedure; a DP release "
    "publishes only the released model, its configuration, its noisy score and the accounting"
)


@dataclass(frozen=True)
class SelectionCalibration:
    """One (dataset, epsilon, method)'s calibrated private selection."""

    candidate_epsilon: float  # b: the per-candidate budget the bisection solved for
    training_epsilon: float  # (1 - score_share) b, met by the method's own calibration
    score_scale: float  # Laplace scale of each validation count, 1 / (score_share b)
    total_epsilon: float  # the selection's epsilon at delta, RDP
    ledger: PrivacyLedger  # the costliest candidate's: its training plan and its score
    plans: tuple[dict, ...] = ()  # every distinct candidate training plan (ledger JSON)
    plan_of: tuple[tuple[str, int], ...] = ()  # (candidate label `method#i`, index in plans)
    left_out: str | None = None  # why no candidate could be calibrated: nothing runs

    def candidate_events(self) -> list[dp_event.DpEvent]:
        """Each distinct candidate's mechanism, training plus score."""
        return [_candidate_event(PrivacyLedger.from_json(p), self.score_scale) for p in self.plans]

    def plan_for(self, label: str) -> PrivacyLedger | None:
        """The training plan candidate `label` (`method#i`) was accounted with; None for a
        candidate that could not be calibrated at the training epsilon (it runs nothing)."""
        index = dict(self.plan_of).get(label)
        return None if index is None else PrivacyLedger.from_json(self.plans[index])

    @classmethod
    def uncharged(cls, epsilon: float) -> SelectionCalibration:
        """`selection: uncharged`: train at the full epsilon, score exactly, charge nothing."""
        return cls(epsilon, epsilon, 0.0, math.nan, PrivacyLedger())

    @classmethod
    def leaving_out(cls, reason: str) -> SelectionCalibration:
        """`uncalibratable: leave_out`: no candidate runs, every repeat releases nothing, and
        nothing is spent on the data."""
        return cls(math.nan, math.nan, math.nan, 0.0, PrivacyLedger(), left_out=reason)

    @property
    def charged(self) -> bool:
        return self.score_scale > 0 or self.left_out is not None

    def notes(self) -> str:
        if self.left_out is not None:
            return f"left out, no candidate calibrates: {self.left_out}"
        if not self.charged:
            return f"{NOT_CHARGED}: each candidate at the full epsilon, exact validation scores"
        return PLD_NOTE


def candidate_seed(root: int, label: str, repeat: int, index: int) -> int:
    """Candidate `index` of method `label` in repeat `repeat`: a trial seed of its own (its
    noise, init, batches and score noise), from the selection's root seed, so that no two
    candidates share randomness, whether of one method or of two (the composed cost of
    several methods' selections assumes independent noise). 63 bits: a store's integer."""
    state = seed_sequence(root, f"selection candidate/{label}/{repeat}/{index}")
    return int(state.generate_state(1, np.uint64)[0] >> np.uint64(1))


def draw_counts(config: TuneConfig) -> dict[str, list[int]]:
    """Method label -> K per repeat (in `final_seeds` order), each from its own stream."""
    assert config.count is not None
    out = {}
    for index, entry in enumerate(config.methods):
        label = entry.label or entry.name
        streams = [
            numpy_stream(config.seed, f"selection count/{index}/{repeat}")
            for repeat in config.final_seeds
        ]
        out[label] = [config.count.sample(rng) for rng in streams]
    return out


def draw_picks(config: TuneConfig, counts: dict[str, list[int]]) -> dict[str, list[list[int]]]:
    """Method label -> per repeat, each candidate's configuration as an index into the
    method's support, drawn uniformly (with replacement) on a stream of its own: every
    candidate is then one draw of the same mixture, independently of the others."""
    out = {}
    for label, ks in counts.items():
        out[label] = [
            numpy_stream(config.seed, f"selection picks/{label}/{repeat}")
            .integers(config.support, size=k)
            .tolist()
            for repeat, k in zip(config.final_seeds, ks, strict=True)
        ]
    return out


def noisy_cells(cells: np.ndarray, scale: float, seed: int, secure: bool = False) -> np.ndarray:
    """The validation table of counts by (group, label, prediction) plus independent
    Laplace(scale) noise per cell, drawn like every release by a privacy session (of the
    candidate's `seed`, its stream "noise/<SCORE_LABEL>", or OpenDP's exact sampler from the
    OS's entropy under `secure`) that plans and records it. Sensitivity: one record adds 1
    to one cell (a randomized predictor's record adds weights summing to 1), so under
    add/remove neighbours the table moves by 1 in l1 norm and the release is
    (1 / scale)-DP: `LaplaceDpEvent(scale)`."""
    session = PrivacySession(seed, budget=PrivacyBudget(1 / scale), secure_noise=secure)
    plan = PrivacyLedger()
    plan.record(SCORE_LABEL, dp_event.LaplaceDpEvent(scale))
    session.submit_plan(plan)
    table = torch.as_tensor(np.reshape(cells, (-1, np.shape(cells)[-1])), dtype=torch.float64)
    records = max(1, round(float(np.sum(cells))))
    noisy = session.laplace_histogram(SCORE_LABEL, scale).release(table, records, None)
    check_plan("private selection", session.plan, session.ledger())
    return noisy.numpy().reshape(np.shape(cells))


def score(cells: np.ndarray, constraint: str) -> tuple[float, float]:
    """(error, violation) of a table of counts by (group, label, prediction), noisy or not:
    post-processing, by the suite's own metrics on the table's cells as weighted records.
    Negative noisy counts are clipped to 0; a group whose counts vanish makes the violation
    NaN (never within a target)."""
    cells = np.clip(cells, 0.0, None)
    groups, labels, preds = np.indices(cells.shape).reshape(3, -1)
    weight = cells.reshape(-1)
    if weight.sum() <= 0:
        return math.nan, math.nan
    error = error_rate(labels, preds, weight)
    if (cells.sum(axis=(1, 2)) <= 0).any():
        return error, math.nan
    return error, float(VIOLATIONS[constraint](labels, preds, groups, weight))


def candidate_templates(config: TuneConfig, draws: dict[str, list[dict]]) -> dict[tuple, TrialSpec]:
    """(dataset, epsilon, candidate label `method#i`) -> its trial spec as the free search
    would run it on the first repeat's seed and split (hyper-parameters, knob, dataset
    options): the spec a calibration plans."""
    first = config.final_seeds[0]
    one_seed = config.model_copy(update={"search_seeds": [first]})
    specs = expand(search_config(one_seed, draws), lambda _: None)
    split = {SPLIT_SEED: config.split_seed(first)}
    return {
        (s.dataset, float(s.epsilon), bare(s.label)): replace(
            s, dataset_options={**s.dataset_options, **split}
        )
        for s in specs
        if s.epsilon is not None  # every candidate is private (`whole_record_problem`)
    }


def bare(label: str) -> str:
    """A candidate's label without the A-at-test mark (`series_label` adds it after `#i`), so
    that `method#i` finds it."""
    return label.replace(SENSITIVE_MARK, "")


def _candidate_event(plan: PrivacyLedger, scale: float) -> dp_event.DpEvent:
    return dp_event.ComposedDpEvent([plan.event, dp_event.LaplaceDpEvent(scale)])


def whole_record_problem(method: Method) -> str | None:
    """Why a configured method cannot be a candidate of a private selection, which releases
    (epsilon, delta)-DP for the whole record only: not private, a partial guarantee (another
    notion, a statistic of the data read exactly; the fix names the hyper-parameter and its
    whole-record value), or a plan that grows during training (its cost is not known before
    it trains). None when it can."""
    name = method.name
    if not method.private:
        return (
            f"method {name} is not private; private selection releases (epsilon, delta)-DP "
            "for the whole record: leave it out"
        )
    guarantee = method.guarantee()
    if not guarantee.whole_record:
        fields = type(method.hparams).model_fields
        settings = ", ".join(f"{h}: {getattr(method.hparams, h)}" for h in guarantee.because)
        fixes = " and ".join(f"{h}: {fields[h].default}" for h in guarantee.because)
        return (
            f"method {name}"
            + (f" with {settings}" if settings else "")
            + f" is not (epsilon, delta)-DP for the whole record ({guarantee.shortfall()}); "
            "private selection releases whole-record DP only: "
            + (f"set {fixes} or leave the method out" if fixes else "leave the method out")
        )
    if method.adaptive_plan:
        return (
            f"method {name} plans adaptively (its plan grows with noisy outputs during "
            "training), so its cost is not known before it trains; private selection "
            "accounts every candidate by its plan: leave it out"
        )
    return None


def refuse_partial(specs: Iterable[TrialSpec]) -> None:
    """Refuse, before anything runs, the first candidate (one line naming it, its setting
    and the fix) whose configuration `whole_record_problem` refuses."""
    seen = set()
    for spec in specs:
        key = (spec.method, json.dumps(spec.hparams, sort_keys=True, default=str))
        if key in seen:
            continue
        seen.add(key)
        problem = whole_record_problem(get_method(spec.method, **spec.hparams))
        if problem is not None:
            raise ConfigError(f"candidate {bare(spec.label)}: {problem}")


def calibrate(config: TuneConfig, specs: list[TrialSpec]) -> SelectionCalibration:
    """Solve the per-candidate budget b for the config's target epsilon (the specs' epsilon)
    over the support `specs`, which may run different mechanisms (batch sizes, epochs,
    Laplace scales, even methods): the selection is bounded from the pointwise maximum of
    their RDP curves (`selection.selection_curve`). A configuration that cannot be calibrated
    at a budget runs nothing there (it releases nothing and spends nothing).

    Each plan costs a calibration of the method's own noise, and plans calibrated to one
    training epsilon have nearly equal curves (within 1% on a 16-configuration support), so
    the bisection runs on the `BISECTED` distinct plans whose selections alone cost most at
    the target. At the solved budget every configuration's plan is captured, recorded
    (`SelectionCalibration.plan_of`) and the total recomputed over all of them; while plans left out
    of the bisection push it over the target, it runs again with the costliest of those
    added."""
    spec = specs[0]
    assert config.count is not None and spec.epsilon is not None
    share, target = config.score_share, spec.epsilon
    # infeasible at the target's training share, a candidate is infeasible at every smaller
    # budget the solution can have (feasibility grows with epsilon)
    at_target = _plans(specs, (1 - share) * target)
    if not at_target:
        raise CalibrationError(
            f"no candidate can be calibrated at training epsilon {(1 - share) * target:.3g}"
        )
    key_of = {s: key for s, key, _ in at_target}
    representative = {key: s for s, key, _ in at_target}

    def costliest(planned: list[tuple[TrialSpec, str, PrivacyLedger]], scale: float) -> set:
        """The representatives of the `BISECTED` plans whose selections alone cost most."""
        assert config.count is not None
        own: dict[TrialSpec, float] = {}
        for s, _, p in planned:
            rep = representative.get(key_of.get(s, ""))
            if rep is not None and rep not in active:
                event = _candidate_event(p, scale)
                own[rep] = max(
                    own.get(rep, 0.0), selection_epsilon([event], config.count, config.delta)
                )
        return set(sorted(own, key=own.__getitem__, reverse=True)[:BISECTED])

    active: set[TrialSpec] = set()
    active |= costliest(at_target, 1 / (share * target))
    while True:
        bisected = sorted(active, key=specs.index)
        candidates = partial(_candidate_events, bisected, share)
        budget, _ = calibrate_candidate(target, config.delta, config.count, candidates)
        training, scale = (1 - share) * budget, 1 / (share * budget)
        planned = _plans(specs, training)
        keys = list(dict.fromkeys(key for _, key, _ in planned))  # distinct, in support order
        if not keys:
            raise CalibrationError(
                f"no candidate can be calibrated at training epsilon {training:.3g}"
            )
        plans = [next(p for _, k, p in planned if k == key) for key in keys]
        events = [_candidate_event(p, scale) for p in plans]
        total = selection_epsilon(events, config.count, config.delta)
        if total <= target * (1 + 1e-9):
            break
        grown = active | costliest(planned, scale)
        if grown == active:
            raise CalibrationError(
                f"the candidates' plans at the solved budget spend epsilon {total:.4g} > "
                f"{target:g} (a candidate's plan depends on the budget unlike its "
                "representative's); narrow the space"
            )
        active = grown
    worst = max(
        range(len(plans)), key=lambda i: rdp.epsilon(rdp.rdp_curve(events[i]), config.delta)
    )
    ledger = PrivacyLedger([*plans[worst].entries])
    ledger.record(SCORE_LABEL, dp_event.LaplaceDpEvent(scale))
    plan_of = tuple((bare(s.label), keys.index(key)) for s, key, _ in planned)
    return SelectionCalibration(
        budget, training, scale, total, ledger, tuple(p.to_json() for p in plans), plan_of
    )


def _candidate_events(
    specs: list[TrialSpec], share: float, budget: float
) -> list[dp_event.DpEvent]:
    """The distinct candidate mechanisms of `specs` at per-candidate budget `budget`."""
    plans = {key: p for _, key, p in _plans(specs, (1 - share) * budget)}
    return [_candidate_event(p, 1 / (share * budget)) for p in plans.values()]


def _plans(specs: list[TrialSpec], epsilon: float) -> list[tuple[TrialSpec, str, PrivacyLedger]]:
    """(spec, its plan's key, its plan) for each spec that calibrates at `epsilon`; the key
    (the plan's JSON) tells distinct plans apart."""
    out = []
    for spec in specs:
        try:
            plan = _plan_at(spec, epsilon)
        except CalibrationError:
            continue
        out.append((spec, json.dumps(plan.to_json(), sort_keys=True), plan))
    return out


@lru_cache(maxsize=4096)
def _plan_at(spec: TrialSpec, epsilon: float) -> PrivacyLedger:
    """The candidate's plan at `epsilon`, memoised per process (a `TrialSpec` hashes and
    compares by value): the bisection asks for a (candidate, budget) again (its last step,
    the final re-planning, advise's comparison). A calibration error is not cached.
    Read-only: callers copy before recording on it. A guard behind `refuse_partial`: a plan
    submitted under a guarantee other than whole-record, or with no noisy release (a model
    that would read the data without noise), is refused."""
    plan, guarantee = capture(spec, epsilon)
    if not guarantee.whole_record:
        raise PrivacyContractError(
            f"candidate {bare(spec.label)}: method {spec.method} submitted its plan under "
            f"{guarantee.label!r}, not whole-record DP ({guarantee.shortfall()}); private "
            "selection releases whole-record DP only: leave it out"
        )
    if not plan.entries:
        raise ConfigError(
            f"candidate {bare(spec.label)}: method {spec.method} plans no noisy release, so its "
            "model would read the data without noise; private selection releases "
            "whole-record DP only: leave it out"
        )
    return plan


def run_private(
    config: TuneConfig,
    out: Path,
    workers: int,
    quiet: bool,
    warn: Callable[[str], None] = print,
    skip_uncalibratable: bool = False,
    executor: str = "local",
    scheduler: str | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """Refuse any candidate that is not whole-record DP (`refuse_partial`), calibrate every
    (dataset, epsilon, method) over its support first (nothing is written when one fails;
    with `skip_uncalibratable`, such a method is left out with a warning instead,
    or under `uncalibratable: leave_out`, recorded as releasing nothing in every repeat),
    then train the candidates (OUT/private/<dataset>-eps<e>, resumable runs), select, and write
    tune.yaml, the selection analysis (`TuneLayout.analysis`; per method: law, K per repeat,
    budgets, the costliest configuration's ledger, every distinct training plan and each
    configuration's (`plan_of`); per repeat and target: every candidate's noisy score and the
    release), the result table (`result_rows`) and tuning.md. Candidates train on `executor`
    (`runner.execute.execute`; calibration stays local). Returns the per-target summary
    (tuning.md's) and the failed trials."""
    templates = candidate_templates(config, sample_configurations(config, config.support))
    if config.selection == "private":
        refuse_partial(templates.values())
    picks = draw_picks(config, draw_counts(config))
    keys = sorted({(d, e, lab.rsplit("#", 1)[0]) for d, e, lab in templates})
    if config.selection == "uncharged":
        solved: list[SelectionCalibration | str] = [
            SelectionCalibration.uncharged(eps) for _, eps, _ in keys
        ]
    else:
        jobs = [
            [templates[(dataset, eps, f"{label}#{u}")] for u in range(config.support)]
            for dataset, eps, label in keys
        ]
        solved = _calibrate_all(config, jobs, workers, quiet)
    budgets: dict[tuple[str, float, str], SelectionCalibration] = {}
    for (dataset, eps, label), budget in zip(keys, solved, strict=True):
        if isinstance(budget, str):
            message = f"method {label} on {dataset} at epsilon {eps:g}: {budget}"
            if not (skip_uncalibratable or config.uncalibratable == "leave_out"):
                raise CalibrationError(message)
            warn(f"left out: {message}")
            budget = SelectionCalibration.leaving_out(budget)
        budgets[(dataset, eps, label)] = budget
    if all(b.left_out is not None for b in budgets.values()):
        raise CalibrationError("no method can be calibrated for private selection here")
    with run_lock(out):
        write_tune_config(out, config)
        run = partial(execute, workers=workers, quiet=quiet, executor=executor, scheduler=scheduler)
        return _run(config, out, picks, templates, budgets, run)


def _calibrate_all(
    config: TuneConfig, jobs: list[list[TrialSpec]], workers: int, quiet: bool = True
) -> list[SelectionCalibration | str]:
    """Each job's calibration (its candidates' specs) or the reason it has none, in job
    order. The jobs are independent and deterministic, and each takes seconds to minutes (the
    methods' own noise calibration inside the bisection), so several run in spawned worker
    processes; progress counts finished calibrations (`failed`: none calibrates)."""
    out: list[SelectionCalibration | str | None] = [None] * len(jobs)
    with trial_progress(len(jobs), quiet, "calibrations") as advance:
        if workers <= 1 or len(jobs) <= 1:
            for index, specs in enumerate(jobs):
                out[index] = _calibrate_or_reason(config, specs)
                advance(isinstance(out[index], str))
        else:
            pool = ProcessPoolExecutor(
                min(workers, len(jobs)),
                initializer=init_worker,
                mp_context=multiprocessing.get_context("spawn"),
            )
            try:
                futures = {
                    pool.submit(_calibrate_or_reason, config, specs): index
                    for index, specs in enumerate(jobs)
                }
                for future in as_completed(futures):
                    out[futures[future]] = future.result()
                    advance(isinstance(out[futures[future]], str))
            except BaseException:  # Ctrl-C: do not wait for the queued calibrations
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown()
    return out  # type: ignore[return-value]  # every job's entry is set above


def _calibrate_or_reason(config: TuneConfig, specs: list[TrialSpec]) -> SelectionCalibration | str:
    try:
        return calibrate(config, specs)
    except CalibrationError as exc:
        return str(exc)


def candidate_specs(
    config: TuneConfig,
    picks: dict[str, list[list[int]]],
    templates: dict[tuple, TrialSpec],
    budgets: dict[tuple[str, float, str], SelectionCalibration],
) -> dict[tuple[str, float, str, int, int], TrialSpec]:
    """(dataset, epsilon, method label, repeat, candidate index) -> the candidate's trial: its
    support configuration at the training epsilon, its own seed, the repeat's split."""
    out = {}
    for (dataset, eps, label), budget in budgets.items():
        if budget.left_out is not None:
            continue
        for repeat, chosen in zip(config.final_seeds, picks[label], strict=True):
            for i, u in enumerate(chosen):
                spec = templates[(dataset, eps, f"{label}#{u}")]
                out[(dataset, eps, label, repeat, i)] = replace(
                    spec,
                    epsilon=budget.training_epsilon,
                    seed=candidate_seed(config.seed, label, repeat, i),
                    dataset_options={**spec.dataset_options, SPLIT_SEED: config.split_seed(repeat)},
                )
    return out


def _run(config, out, picks, templates, budgets, run) -> tuple[pd.DataFrame, list[str]]:
    failures: list[str] = []
    runs: dict[tuple[str, float], dict[str, tuple]] = {}  # trial id -> candidate key
    for key, spec in candidate_specs(config, picks, templates, budgets).items():
        runs.setdefault(key[:2], {})[spec.trial_id] = (key, spec)
    # (dataset, epsilon, method, repeat, candidate index) -> its trial's row, taken by the
    # trial id of the spec run here, never another configuration's row in the store
    rows: dict[tuple[str, float, str, int, int], dict] = {}
    for (dataset, eps), members in sorted(runs.items()):
        run_dir = TuneLayout(out).private_run(dataset, eps)
        done = run([spec for _, spec in members.values()], run_dir)
        key_of = {trial: key for trial, (key, _) in members.items()}
        for trial, error in done.failed:
            if is_infeasible(error):  # a draw no calibration meets: it runs nothing
                rows[key_of[trial]] = {INFEASIBLE: error}
            else:
                failures.append(f"candidate {trial}: {error.splitlines()[-1]}")
        if done.done + done.skipped > 0:
            write_report(run_dir)
            rows.update(
                {
                    key_of[r["trial_id"]]: r
                    for r in finished_rows(run_dir, "select from")
                    if r["trial_id"] in key_of
                }
            )
    records, summary = [], []
    for (dataset, eps, label), budget in sorted(budgets.items()):
        record = _select(config, dataset, eps, label, budget, picks[label], rows)
        records.append(record)
        summary += _summary_rows(config, record, budget)
    layout = TuneLayout(out)
    write_analysis(layout, records)
    write_table(layout, [row for record in records for row in result_rows(config, record)])
    table = pd.DataFrame(summary)
    layout.notes.write_text(private_markdown(table, config))
    return table, failures


def _select(
    config: TuneConfig,
    dataset: str,
    eps: float,
    label: str,
    budget: SelectionCalibration,
    picks: list[list[int]],
    rows: dict,
) -> dict[str, Any]:
    """Score every candidate of every repeat (noise from the candidate's own seed) and
    release, per target, the best by the one rule; a repeat with a missing candidate (its
    trial failed) releases nothing."""
    free = {m.label or m.name for m in config.methods if m.unconstrained}
    repeats = []
    for repeat, chosen in zip(config.final_seeds, picks, strict=True):
        k = len(chosen)
        candidates = []
        for i, u in enumerate([] if budget.left_out is not None else chosen):
            row = rows.get((dataset, eps, label, repeat, i))
            if row is None:
                break
            if INFEASIBLE in row:  # nothing trained, nothing released or spent: never chosen
                candidates.append(
                    {
                        "label": f"{label}#{u}",
                        "hparams": None,
                        "knob": None,
                        "val_error": None,
                        "val_violation": None,
                        "test_error": math.nan,
                        "test_violation": math.nan,
                        INFEASIBLE: row[INFEASIBLE].splitlines()[-1],
                    }
                )
                continue
            error, violation = validation_score(row, budget, config.constraint)
            candidates.append(
                {
                    "label": row["label"],
                    "trial_id": row["trial_id"],
                    "hparams": row["hparams"],
                    "knob": row["knob"],
                    "val_error": error,
                    "val_violation": violation,
                    "test_error": row["test_error"],
                    "test_violation": row["test_violation"],
                    "uses_sensitive_at_test": row["uses_sensitive_at_test"],
                }
            )
        complete = budget.left_out is None and len(candidates) == k
        releases = {}
        for target in config.targets:
            frame = pd.DataFrame(
                candidates, columns=["label", "val_error", "val_violation", INFEASIBLE]
            )
            frame = frame[frame[INFEASIBLE].isna()].astype({"val_error": float})
            frame["val_violation"] = frame["val_violation"].astype(float).fillna(math.inf)
            best = choose(frame, None if label in free else target) if complete else None
            releases[f"{target:g}"] = None if best is None else int(best.name)
        repeats.append(
            {
                "repeat": repeat,
                "count": k,
                "complete": complete,
                "candidates": candidates,
                "released": releases,
            }
        )
    assert config.count is not None
    return {
        "dataset": dataset,
        "epsilon": eps,
        "method": label,
        "count_law": config.count.model_dump(),
        "count_mean": config.count.expected,
        "count_shape": config.count.shape,
        "score_share": config.score_share,
        "candidate_epsilon": budget.candidate_epsilon,
        "training_epsilon": budget.training_epsilon,
        "score_laplace_scale": budget.score_scale,
        "total_epsilon": budget.total_epsilon,
        "delta": config.delta,
        "accountant": ACCOUNTANT,
        "accounting_note": budget.notes(),
        "candidate_ledger": budget.ledger.to_json(),
        "candidate_plans": list(budget.plans),
        "plan_of": dict(budget.plan_of),
        "left_out": budget.left_out,
        "support": config.support,
        "note": ANALYSIS,
        "repeats": repeats,
    }


def validation_score(
    row: dict, budget: SelectionCalibration, constraint: str
) -> tuple[float, float]:
    """A finished candidate's validation (error, violation) from its exact counts; when the
    selection is charged, its ledger is first checked against its plan and the counts get the
    score's Laplace noise from a privacy session of the candidate's seed (the exact sampler
    when the candidate trained with it)."""
    cells = np.asarray(row["info"]["val_outcome_cells"])
    if budget.charged:
        _check_ledger(row, budget)
        secure = row["info"].get("noise_sampler") == NOISE_SAMPLERS[True]
        cells = noisy_cells(cells, budget.score_scale, row["seed"], secure)
    return score(cells, constraint)


def _check_ledger(row: dict, budget: SelectionCalibration) -> None:
    """A candidate ran under whole-record DP and its recorded training ledger is the plan the
    selection accounted it with (the same RDP curve as `budget.plan_for` its label), or the
    stated total would be wrong."""
    label = bare(row["label"])
    if row["privacy_notion"] != "full":
        raise PrivacyContractError(
            f"candidate {label} (seed {row['seed']}) ran under {row['privacy_notion']!r}, not "
            "whole-record DP"
        )
    planned = budget.plan_for(label)
    recorded = rdp.rdp_curve(PrivacyLedger.from_json(row["ledger"]).event)
    if planned is None or not np.allclose(
        recorded, rdp.rdp_curve(planned.event), rtol=1e-9, atol=0.0
    ):
        raise PrivacyContractError(
            f"candidate {label} (seed {row['seed']}) recorded a training ledger other than "
            "the plan its selection was accounted with"
        )


def result_rows(config: TuneConfig, record: dict[str, Any]) -> list[TuningRow]:
    """The result table's rows of one (dataset, epsilon, method)'s selection record: per
    target and repeat, what the repeat released (NaN numbers where nothing), its K and how
    many of its candidates were (noisy-)feasible or could not be calibrated."""
    free = {m.label or m.name for m in config.methods if m.unconstrained}
    charged = record["score_laplace_scale"] > 0 or record["left_out"] is not None
    marked = any(
        c.get("uses_sensitive_at_test") for r in record["repeats"] for c in r["candidates"]
    )
    out = []
    for target in config.targets:
        for repeat in record["repeats"]:
            index = repeat["released"][f"{target:g}"]
            chosen = {} if index is None else repeat["candidates"][index]
            scored = [c for c in repeat["candidates"] if INFEASIBLE not in c]
            feasible = [
                c
                for c in scored
                if record["method"] in free
                or (c["val_violation"] is not None and c["val_violation"] <= target)
            ]
            out.append(
                TuningRow(
                    dataset=record["dataset"],
                    constraint=config.constraint,
                    epsilon=float(record["epsilon"]),
                    method=record["method"],
                    target=float(target),
                    selection=config.selection,
                    repeat=int(repeat["repeat"]),
                    selected=chosen.get("label"),
                    hparams=chosen.get("hparams"),
                    knob=nan_if_none(chosen.get("knob")),
                    val_error=nan_if_none(chosen.get("val_error")),
                    val_violation=nan_if_none(chosen.get("val_violation")),
                    test_error=nan_if_none(chosen.get("test_error")),
                    test_violation=nan_if_none(chosen.get("test_violation")),
                    candidates=int(repeat["count"]),
                    feasible=len(feasible),
                    infeasible=len(repeat["candidates"]) - len(scored),
                    uses_sensitive_at_test=marked,
                    tuning=CHARGED if charged else NOT_CHARGED,
                    tuning_epsilon=float(record["total_epsilon"]),
                    candidate_epsilon=float(record["candidate_epsilon"]),
                    training_epsilon=float(record["training_epsilon"]),
                    score_laplace_scale=float(record["score_laplace_scale"]),
                    accountant=record["accountant"] if config.selection == "private" else None,
                    left_out=record["left_out"],
                )
            )
    return out


def _summary_rows(config: TuneConfig, record: dict, budget: SelectionCalibration) -> list[dict]:
    """One tuning.md row per target: the released models' test error and violation over
    the repeats (mean ± 95% CI), the most often released candidate, and the selection's
    budget."""
    out = []
    for target in config.targets:
        released = [
            r["candidates"][r["released"][f"{target:g}"]]
            for r in record["repeats"]
            if r["released"][f"{target:g}"] is not None
        ]
        frame = pd.DataFrame(released, columns=CANDIDATE_COLUMNS)
        top = Counter(frame["label"]).most_common(1)
        chosen = frame[frame["label"] == top[0][0]].iloc[0] if top else None
        counts = [r["count"] for r in record["repeats"]]
        marked = any(
            c.get("uses_sensitive_at_test") for r in record["repeats"] for c in r["candidates"]
        )
        out.append(
            {
                "dataset": record["dataset"],
                "constraint": config.constraint,
                "epsilon": record["epsilon"],
                "target": target,
                "method": record["method"] + (SENSITIVE_MARK if marked else ""),
                "candidates": float(np.mean(counts)),
                "feasible": len(frame),
                "infeasible": 0,
                "selected": None if chosen is None else chosen["label"],
                "hparams": None if chosen is None else chosen["hparams"],
                "knob": None if chosen is None else chosen["knob"],
                "val_error": frame["val_error"].mean(),
                "val_violation": frame["val_violation"].mean(),
                "final_seeds": len(frame),
                "test_error": frame["test_error"].mean(),
                "test_error_ci95": ci95(frame["test_error"]),
                "test_violation": frame["test_violation"].mean(),
                "test_violation_ci95": ci95(frame["test_violation"]),
                "satisfied_fraction": float((frame["test_violation"] <= target).mean())
                if len(frame)
                else math.nan,
                "tuning_epsilon": budget.total_epsilon,
                "selection": config.selection,
                "tuning": CHARGED if budget.charged else NOT_CHARGED,
                "count_law": record["count_law"],
                "candidates_drawn": counts,
                "candidate_epsilon": budget.candidate_epsilon,
                "training_epsilon": budget.training_epsilon,
                "score_laplace_scale": budget.score_scale,
                "total_epsilon": budget.total_epsilon,
                "accountant": ACCOUNTANT,
                "accounting_note": budget.notes(),
                "left_out": budget.left_out,
            }
        )
    return out


def _total(epsilon: float) -> str:
    return "not charged" if pd.isna(epsilon) else f"{epsilon:.4f}"


def private_markdown(table: pd.DataFrame, config: TuneConfig) -> str:
    assert config.count is not None
    law = ", ".join(f"{k} {v}" for k, v in config.count.model_dump().items())
    if config.selection == "uncharged":
        intro = [
            f"# {config.name}: {NOT_CHARGED} (the twin of private selection)",
            "",
            f"Per method and repeat, K candidates with K drawn from {law} (mean "
            f"{config.count.expected:.3g}), each one of the method's {config.support} support "
            "configurations (drawn from its space) uniformly at random, each "
            "trained at the full ε and scored exactly on validation (validation treated as "
            "public); the released model is the lowest validation error among feasible "
            f"candidates. {len(config.final_seeds)} repeats (one per final seed: its split); "
            "test error of the released models, mean ± 95% CI over the repeats that released "
            f"one. {NOT_CHARGED.capitalize()}: the ε is each candidate's, not the selection's.",
        ]
    else:
        intro = [
            f"# {config.name}: tuning paid for (private selection)",
            "",
            f"Private selection (Papernot and Steinke 2022): per method and repeat, K "
            f"candidates with K drawn from {law} (mean {config.count.expected:.3g}); each "
            f"candidate is one of the method's {config.support} support configurations (drawn "
            "from its space; the budget is calibrated over all of them) uniformly at random, "
            "trained with its own seed at the training ε below "
            "and scored on validation by Laplace-noised counts (scale below, sensitivity 1); the "
            "released model is the lowest noisy validation error among noisy-feasible "
            f"candidates. {len(config.final_seeds)} repeats (one per final seed: its split); "
            "test error of the released models, mean ± 95% CI over the repeats that released "
            "one.",
            "",
            f"Total ε: one RepeatAndSelect event per (dataset, ε, method, target), {PLD_NOTE}. "
            "Each target's release meets it on its own; the targets share candidates.",
        ]
    lines = [*intro, "", f"Note: this file is an {ANALYSIS}."]
    for (dataset, eps, target), group in table.groupby(["dataset", "epsilon", "target"]):
        lines += [
            "",
            f"## {dataset} · {config.constraint} · ε = {eps:g} · target {target:g}",
            "",
            "| method | K drawn | released / repeats | most released | noisy val error | "
            "test error | test violation | candidate ε | training ε | score scale | "
            "total ε (RDP) |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in group.itertuples(index=False):
            if isinstance(r.left_out, str):
                lines.append(
                    f"| {r.method} | {' '.join(str(k) for k in r.candidates_drawn)} | "
                    f"0 / {len(r.candidates_drawn)} | left out: {r.left_out} |" + " |" * 7
                )
                continue
            test = "" if pd.isna(r.test_error) else f"{r.test_error:.4f} ± {r.test_error_ci95:.4f}"
            violation = (
                ""
                if pd.isna(r.test_violation)
                else f"{r.test_violation:.4f} ± {r.test_violation_ci95:.4f}"
            )
            cells = [
                r.method,
                " ".join(str(k) for k in r.candidates_drawn),
                f"{r.feasible} / {len(r.candidates_drawn)}",
                r.selected if isinstance(r.selected, str) else "none",
                "" if pd.isna(r.val_error) else f"{r.val_error:.4f}",
                test,
                violation,
                f"{r.candidate_epsilon:.4g}",
                f"{r.training_epsilon:.4g}",
                f"{r.score_laplace_scale:.4g}",
                _total(r.total_epsilon),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    notes = sorted({n.removeprefix(PLD_NOTE).removeprefix("; ") for n in table["accounting_note"]})
    lines += [f"\nNote: {n}." for n in notes if n]
    return "\n".join(lines) + "\n"
