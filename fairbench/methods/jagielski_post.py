"""`jagielski-post`: private post-processing for group fairness (Jagielski, Kearns, Mao,
Oprea, Roth, Sharifi-Malvajerdi and Ullman, ICML 2019, Sec. 4): Hardt, Price and Srebro's
(2016) derived predictor, made private by noising the statistics its linear program reads.

1. A base classifier h is trained without reading the sensitive attribute (features and
   label only).
2. The joint histogram c[yhat, a, y] of h's hard predictions, groups and labels on the
   post-processing records is released once with Laplace noise (each record in one cell:
   l1 sensitivity 1 under add/remove, 2 under substitution of its group). Noisy counts are
   floored at 1 (public), so no run is discarded (the authors' code discards runs whose noisy
   masses are negative, which biases its averages).
3. A linear program over p[yhat, a] = P(output 1 | yhat, a), on the noisy counts only
   (post-processing): minimise the expected error subject to, for every pair of groups,
   |R_a(p) - R_b(p)| <= gamma + slack for each rate R the constraint names: FPR and TPR
   (`equalized_odds`), TPR (`false_negative_rate_parity`, equal opportunity) or the positive
   rate (`demographic_parity`, the variant the paper's framework admits). The rates are the
   events of the constraint's group-rate view (`fairbench.constraints.group_rates`), read
   from the histogram by it. The constant predictor is always feasible, so the program
   always has a solution.
4. Prediction draws the output from p[h(x), a]: the sensitive attribute is needed at test
   time (`sensitive_at_test`: every row, table and legend says so). Evaluation is exact (each
   record weighted by its output probabilities), as for every randomized classifier here.

Privacy notions (`privacy_notion`, in every row):
- `full` (default): the whole record is private, so the base classifier must be private too:
  DP-SGD (Poisson batches, per-sample clipping, Gaussian noise) on the training records. The
  histogram gets `histogram_share` of epsilon (its Laplace scale calibrated by the suite's
  accountant for that share, at delta); DP-SGD's noise is then calibrated so that the whole
  ledger (the Poisson-sampled Gaussian rounds composed with the one Laplace release) meets the
  target. The paper's theory covers the A-only notion; this split is the notes' recommendation.
- `sensitive-attribute` (the paper's notion, Definition in Sec. 2): features and labels are
  public, so the base classifier trains without noise (plain SGD on Poisson batches, which
  reads no group) and the whole budget goes to the histogram: one Laplace release, pure
  epsilon-DP, accounted exactly.

Choices where the paper or its code is loose (and why):
- Slack. The paper widens gamma by s_y = 4 ln(8/beta) / (m eps min_a q[., a, y]) so that the
  true optimum is feasible with probability 1 - beta. At fairbench's scales that slack is
  larger than any gamma worth tuning (Adult, eps 1, full notion: about 0.7 for the smallest
  (group, label) cell), which switches the constraint off; it is therefore off by default and
  `beta` turns it on (the slack is then 2 b ln(cells / beta) / min noisy count per rate, with b
  the Laplace scale actually drawn; the effective bound is stored in `info`).
- Post-processing records. The paper post-processes in sample (the base model's training
  data). That is the default here too (`holdout: 0`); `holdout > 0` sends each training record
  to the post-processing set by an independent coin (from the trial's own stream, so it reads
  no data and the two stages compose in parallel; the ledger composes them sequentially, which
  is always valid), giving unbiased rate estimates at the price of fewer records per stage.
- Binary labels only (Hardt et al.'s program); any number of groups (pairwise constraints).

Trials run one at a time: the knob enters only the linear program, but each trial's base
classifier is its own session's (seed's) DP-SGD run.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal

import numpy as np
import torch
from dp_accounting import dp_event
from pydantic import Field
from scipy.optimize import linprog

from fairbench import constraints
from fairbench.constraints import GroupRates
from fairbench.errors import ConfigError
from fairbench.methods.base import Method
from fairbench.methods.engine import (
    Outcome,
    StackedData,
    TrainingProgram,
    calibrated,
    exact_sums,
    expected_batch,
    init_models,
    uncalibrated,
)
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan, Schedule
from fairbench.methods.trial import CalibratedHparams, FairnessSpec, Trial
from fairbench.models.grad_sample import CrossEntropy
from fairbench.models.stacked import stack_models
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.accountant import StepShape, calibrate_laplace_scale
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import PrivacySession
from fairbench.privacy.stacked import StackedBatches, gaussian_sums
from fairbench.streams import numpy_stream
from fairbench.task import Split

BASE = "jagielski-post: base classifier, clipped gradient sum"
HISTOGRAM = "jagielski-post: Laplace histogram of (prediction, group, label)"
CONSTRAINTS = ("equalized_odds", "false_negative_rate_parity", "demographic_parity")


class JagielskiPostHparams(CalibratedHparams):
    # the base classifier's DP-SGD, with dp-sgd's defaults
    lr: float = Field(1.0, gt=0)
    batch_size: int = Field(512, ge=1)
    clip_norm: float = Field(1.0, gt=0, description="per-sample clip of the base's gradient")
    privacy_notion: Literal["full", "sensitive-attribute"] = Field(
        "full", description="full: DP-SGD base + histogram; sensitive-attribute: histogram only"
    )
    histogram_share: float = Field(
        0.1, gt=0, lt=1, description="share of epsilon for the histogram (full notion)"
    )
    holdout: float = Field(
        0.0, ge=0, lt=1, description="share of training records post-processed (0: in sample)"
    )
    beta: float | None = Field(
        None, gt=0, lt=1, description="the paper's slack confidence; None: no slack"
    )


def rate_matrices(counts: np.ndarray, rates: GroupRates) -> tuple[np.ndarray, np.ndarray]:
    """From counts c[yhat, a, y]: the rates the constraint equalises (one per event of its
    group-rate view) as linear functions of p[yhat, a]. Returns (P, n): P[r, a] = share of
    group a's records in rate r's event that h predicts 1 (rate r of group a is
    p[1, a] P[r, a] + p[0, a] (1 - P[r, a])), and n[r, a] the records of that event."""
    return rates.positive_rates(counts[1], counts.sum(axis=0))


def derived_predictor(counts: np.ndarray, rates: GroupRates, bound: np.ndarray) -> np.ndarray:
    """Hardt et al.'s linear program on counts c[yhat, a, y]: p[yhat, a] in [0, 1] minimising
    the expected error, with every pair of groups within `bound[r]` on each rate r."""
    k = counts.shape[1]
    # error = sum_{yhat,a} p c[yhat,a,0] + (1 - p) c[yhat,a,1]: linear in p up to a constant
    cost = (counts[:, :, 0] - counts[:, :, 1]).reshape(-1)
    shares, _ = rate_matrices(counts, rates)
    rows, limits = [], []
    for r, share in enumerate(shares):
        for a in range(k):
            for b in range(k):
                if a == b:
                    continue
                row = np.zeros((2, k))  # R_a(p) - R_b(p) <= bound
                row[1, a], row[0, a] = share[a], 1 - share[a]
                row[1, b], row[0, b] = -share[b], -(1 - share[b])
                rows.append(row.reshape(-1))
                limits.append(bound[r])
    solved = linprog(
        cost, A_ub=np.array(rows), b_ub=np.array(limits), bounds=(0.0, 1.0), method="highs"
    )
    if solved.status != 0:  # the constant predictor is feasible: this is a solver failure
        raise RuntimeError(f"jagielski-post: the linear program failed ({solved.message})")
    return np.clip(solved.x.reshape(2, k), 0.0, 1.0)


class JagielskiPost(Method):
    name = "jagielski-post"
    description = (
        "Jagielski et al. 2019: Hardt et al.'s equalized-odds post-processing on a Laplace "
        "histogram (needs the sensitive attribute at test time)"
    )
    private = True
    paper = (
        "Jagielski, Kearns, Mao, Oprea, Roth, Sharifi-Malvajerdi, Ullman (2019): "
        "Differentially Private Fair Learning. ICML 2019 (DP post-processing of Hardt, "
        "Price, Srebro 2016)"
    )
    constraints = CONSTRAINTS
    sensitive_at_test = True
    knob = Knob(
        "gamma",
        "allowed gap of each equalised rate between groups",
        Direction.LOOSER,
        low=0.0,
        high=1.0,
        typical=0.05,
    )
    Hparams = JagielskiPostHparams
    hparams: JagielskiPostHparams

    @property
    def sensitive(self) -> bool:
        return self.hparams.privacy_notion == "sensitive-attribute"

    def budget_split(self, n: int, privacy: PrivacyBudget | None) -> tuple[Schedule, float]:
        """The base classifier's schedule on n records and the histogram's Laplace scale (in
        units of its sensitivity): the scale meets the histogram's share of epsilon, and the
        base's noise the rest, by the suite's accountant on the composed ledger. Without a
        budget (the non-private twin): steps from `epochs`, exact statistics."""
        hp = self.hparams
        if privacy is None:
            return uncalibrated(hp, n), math.inf
        if self.sensitive:  # the base reads no group: it is free, the histogram gets it all
            return uncalibrated(hp, n), calibrate_laplace_scale(privacy.epsilon, privacy.delta)
        scale = calibrate_laplace_scale(hp.histogram_share * privacy.epsilon, privacy.delta)
        schedule = calibrated(hp, n, privacy, None, StepShape(extra=dp_event.LaplaceDpEvent(scale)))
        return schedule, scale

    def _post_mask(self, n: int, seed: int) -> np.ndarray | None:
        """Which of n training records are post-processed (None: all of them, and all train
        the base too): an independent coin per record from the trial's stream "holdout",
        public randomness that reads no data."""
        share = self.hparams.holdout
        if share == 0:
            return None
        post = numpy_stream(seed, "holdout").random(n) < share
        if post.all() or not post.any():
            raise ConfigError(
                f"method {self.name}: holdout {share} left a stage empty on "
                f"{n} training records; change holdout"
            )
        return post

    def _stages(self, train: Split, seed: int) -> tuple[Split, Split]:
        """(base classifier's records, post-processing records): the training set twice, or
        split by the holdout coin."""
        post = self._post_mask(len(train), seed)
        if post is None:
            return train, train
        return (
            Split(train.X[~post], train.y[~post], train.s[~post]),
            Split(train.X[post], train.y[post], train.s[post]),
        )

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """The base classifier's schedule on its records (all training records, or those the
        holdout coin leaves it) and the histogram's Laplace scale; the base's steps (under the
        full notion) and the one histogram."""
        if shape.n_classes != 2:
            raise ConfigError(
                f"method {self.name} post-processes binary classifiers; "
                f"the task has {shape.n_classes} classes"
            )
        post = self._post_mask(shape.n, seed)
        n_post = shape.n if post is None else int(post.sum())
        n_base = shape.n if post is None else shape.n - n_post
        schedule, scale = self.budget_split(n_base, target)
        ledger = PrivacyLedger()
        if not math.isinf(scale):  # the non-private twin releases nothing
            if not self.sensitive:
                q, sigma = schedule.sampling_rate, schedule.noise_multiplier
                ledger.record(BASE, sgd_steps(q, sigma, schedule.steps))
            ledger.record(HISTOGRAM, dp_event.LaplaceDpEvent(scale))
        info = {
            **schedule.info(),
            "clip_norm": self.hparams.clip_norm,
            "laplace_scale": scale,
            "post_records": n_post,
        }
        laplace = {} if self.sensitive or math.isinf(scale) else {"laplace": scale}
        return Plan(ledger, schedule, budget=schedule.budget(**laplace), info=info)

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """The base classifier's steps on its records (`n`: the engine draws the batches among
        them): DP-SGD under the full notion; plain SGD on the same Poisson batches under the
        sensitive-attribute notion (it reads no group) or without a budget. Afterwards, the
        histogram of its predictions on the post-processing records and the linear program."""
        (trial,) = trials
        hp, task, session = self.hparams, trial.task, trial.session
        base_records, post_records = self._stages(task.train, session.seed)
        models = init_models(hp, trials)
        stack = stack_models(models)
        data = StackedData([replace(task, train=base_records)], session.device)
        schedule = plan.loop
        noisy = session.private and not self.sensitive
        sigma = schedule.noise_multiplier
        sums = [session.gaussian_sum(BASE, hp.clip_norm, sigma)] if noisy else []
        step_size = hp.lr / expected_batch(schedule, data.n)

        def step(round_: StackedBatches) -> None:
            rows = data.gather(round_)
            x = rows.rows(data.x)
            logits = stack.logits(x)
            contributions = stack.contributions(
                x, CrossEntropy(rows.rows(data.y)), logits, rows, rows.rows(data.x_sq)
            )
            grads = (
                gaussian_sums(sums, contributions, round_.batches)
                if noisy
                else exact_sums(contributions)
            )
            stack.descend(grads, step_size)

        def outcomes() -> list[Outcome]:
            gamma, scale = trial.fairness.knob_value, plan.info["laplace_scale"]
            rates = constraints.group_rates(trial.fairness.constraint, 2, task.n_groups)
            counts = self._histogram(models[0], post_records, task.n_groups, session, scale)
            bound, slack = self._bound(counts, rates, gamma, scale)
            derived = derived_predictor(counts, rates, bound)
            info = {
                "gamma": gamma,
                "slack": slack,
                "effective_gamma": bound.tolist(),
                "derived": derived.tolist(),
            }
            return [Outcome(info, derived=derived, privacy_notion=hp.privacy_notion)]

        return TrainingProgram(models, step, outcomes, n=data.n)

    def _histogram(
        self, model, records: Split, n_groups: int, session: PrivacySession, scale: float
    ) -> np.ndarray:
        """Noisy counts c[yhat, a, y] (floored at 1, public) of the base's hard predictions."""
        with torch.no_grad():
            x = torch.as_tensor(records.X, dtype=torch.float32, device=session.device)
            yhat = model(x).argmax(dim=1)
        s = torch.as_tensor(records.s, device=session.device)
        y = torch.as_tensor(records.y, device=session.device)
        cells = (yhat * n_groups + s) * 2 + y
        rows = torch.ones((len(cells), 1), dtype=torch.float32, device=session.device)
        noisy = session.laplace_histogram(HISTOGRAM, scale)(rows, cells, 2 * n_groups * 2)
        return noisy.double().clamp(min=1.0).reshape(2, n_groups, 2).cpu().numpy()

    def _bound(
        self, counts: np.ndarray, rates: GroupRates, gamma: float, scale: float
    ) -> tuple[np.ndarray, list[float]]:
        """Per equalised rate: gamma, plus the paper's slack when `beta` is set."""
        _, n = rate_matrices(counts, rates)
        slack = np.zeros(len(n))
        if self.hparams.beta is not None:
            drawn = scale * (2.0 if self.sensitive else 1.0)  # the noise scale actually drawn
            slack = 2 * drawn * math.log(counts.size / self.hparams.beta) / n.min(axis=1)
        return gamma + slack, slack.tolist()
