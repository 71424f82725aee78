"""`decoupled-post`: private decoupled classifiers with private post-processing for statistical
parity (Ghoukasian and Asoodeh, "Differentially Private Fair Binary Classifications", ISIT
2024, Algorithm 2; authors' code hradghoukasian/dp_fair_binary, `Algorithm2.py` @ 9daeaa5).

1. Decoupled base classifiers: one DP-SGD classifier h_a per group a, trained on that group's
   records only (Poisson batches at rate q = batch_size / n over the base records; group a's
   clipped gradient sum over the batch's group-a rows, Gaussian noise). Its step is divided by
   group a's expected batch q n_a, with n_a from one Laplace count of the group's base records
   (share `count_share` of epsilon): group sizes are not public here (DESIGN rule 4).
2. Rates: each group's positive rate r_a = P(h_a(x) = 1 | a) on the post-processing records,
   from a Laplace histogram of h_a's hard predictions over group a's records (two cells, l1
   sensitivity 1 under add/remove; share `rate_share` of epsilon). Noisy counts are clamped at
   0 (post-processing); r_a = c_1 / (c_0 + c_1).
3. Flips: every group's rate moves to the band [m - gamma/2, m + gamma/2] around the midrange
   m = (max r + min r) / 2 (a rate inside it stays): a group above it keeps a positive
   prediction with probability t_a / r_a, a group below turns a negative one positive with
   probability (t_a - r_a) / (1 - r_a). This is the authors' rule (both groups meet halfway,
   `Algorithm2.py`) with gamma = 0, widened to a tolerance gamma (the knob) and to any number
   of groups. It flips the fewest predictions in the sense that the largest share of any one
   group's predictions flipped, max_a |t_a - r_a| = (max r - min r - gamma) / 2, is the least
   any rule meeting the tolerance can flip; fewest flips counted over all records would move
   only the smallest group, and need the group sizes.
4. Prediction reads the record's group twice (its group's classifier, its group's flip):
   `sensitive_at_test`, and every row, table and legend says so. Evaluation is exact (each
   record weighted by its output probabilities).

Privacy. Whole record, add/remove neighbours, (epsilon, delta). Each release reads one group's
records only (its count, its classifier's gradient sums, its rates), and groups are disjoint,
so groups compose in parallel (`PrivacyLedger.parallel_groups`): a record pays for its own
group's count, T Poisson-sampled Gaussian rounds and rate histogram, and the trial's epsilon is
the worst group's (all groups run the same plan, so every group's is the same). The Laplace
scales are calibrated by the suite's accountant for their shares; DP-SGD's noise then for the
rest of the target on that composition. The paper states only this whole-record notion (its
(epsilon', delta')-DP), so there is no attribute-only variant: decoupling routes each record by
its group, so under group substitution nothing would be free and groups would not compose in
parallel.

Where the paper and its code are loose (DESIGN: the suite's accountant and notion decide):
- The code trains one logistic regression on all groups with the attribute as an input; the
  paper (and issue 39) decouple it: one classifier per group, as here.
- The code scales the rates' Laplace noise by the exact group sizes (1 / (n_a eps_a)), an
  unaccounted read; here noisy counts give the rates, and the base's normaliser has its own
  accounted count.
- The code reports eps_SGD (RDP) + eps_0 + eps_1 (basic composition, sequential across the
  groups); here the PLD accountant composes per group, in parallel across them.
- Post-processing records: the code holds out 1/3 of the training records (the default here,
  `holdout`, by a public coin per record from the trial's stream); `holdout: 0` post-processes
  in sample. The ledger composes the two stages sequentially (always valid).
Binary labels only.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch
from dp_accounting import dp_event
from pydantic import Field

from fairbench.errors import ConfigError
from fairbench.methods.base import Method
from fairbench.methods.engine import (
    Gathered,
    Outcome,
    StackedData,
    TrainingProgram,
    calibrated,
    init_model,
    uncalibrated,
)
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan, Schedule
from fairbench.methods.trial import CalibratedHparams, FairnessSpec, Trial
from fairbench.models.grad_sample import CrossEntropy
from fairbench.models.stacked import stack_models
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.accountant import StepShape, calibrate_laplace_scale
from fairbench.privacy.session import PrivacySession
from fairbench.privacy.stacked import StackedBatches, gaussian_sums
from fairbench.streams import numpy_stream
from fairbench.task import Split

BASE = "decoupled-post: group's classifier, clipped gradient sum"
COUNT = "decoupled-post: Laplace count of the group's base records"
RATES = "decoupled-post: Laplace histogram of the group's predictions"


class DecoupledPostHparams(CalibratedHparams):
    # each group's DP-SGD, with dp-sgd's defaults
    lr: float = Field(1.0, gt=0)
    batch_size: int = Field(512, ge=1, description="expected batch over all groups' records")
    clip_norm: float = Field(1.0, gt=0, description="per-sample clip of each group's gradient")
    count_share: float = Field(
        0.02, gt=0, lt=0.5, description="share of epsilon for each group's record count"
    )
    rate_share: float = Field(
        0.1, gt=0, lt=0.5, description="share of epsilon for each group's prediction histogram"
    )
    holdout: float = Field(
        1 / 3, ge=0, lt=1, description="share of training records post-processed (0: in sample)"
    )


def parity_targets(rates: np.ndarray, gamma: float) -> np.ndarray:
    """Each group's rate after the flips: clipped into the band of width gamma centred on the
    midrange of `rates` (the rates themselves when they already lie within gamma)."""
    middle = (rates.max() + rates.min()) / 2
    if rates.max() - rates.min() <= gamma:
        return rates.copy()
    return np.clip(rates, middle - gamma / 2, middle + gamma / 2)


def parity_flips(rates: np.ndarray, gamma: float) -> np.ndarray:
    """The derived predictor p[yhat, a] = P(output 1 | base prediction yhat, group a) that moves
    each group's positive rate to its `parity_targets` by flipping only one kind of prediction:
    positives to negative above the band, negatives to positive below it."""
    targets = parity_targets(rates, gamma)
    keep = np.ones_like(rates)  # p[1, a]
    turn = np.zeros_like(rates)  # p[0, a]
    down, up = targets < rates, targets > rates
    keep[down] = targets[down] / rates[down]
    turn[up] = (targets[up] - rates[up]) / (1 - rates[up])
    return np.stack([turn, keep])


class DecoupledPost(Method):
    name = "decoupled-post"
    description = (
        "Ghoukasian-Asoodeh 2024: one DP-SGD classifier per group, then Laplace-noised group "
        "rates set the fewest flips for statistical parity (needs the sensitive attribute at "
        "test time)"
    )
    private = True
    paper = (
        "Ghoukasian, Asoodeh (2024): Differentially Private Fair Binary Classifications. "
        "IEEE ISIT 2024 (Algorithm 2)"
    )
    constraints = ("demographic_parity",)
    sensitive_at_test = True
    knob = Knob(
        "gamma",
        "allowed gap between groups' positive rates after the flips",
        Direction.LOOSER,
        low=0.0,
        high=1.0,
        rate_tolerance=True,
        typical=0.0,
    )
    Hparams = DecoupledPostHparams
    hparams: DecoupledPostHparams

    def budget_split(self, n: int, privacy: PrivacyBudget | None) -> tuple[Schedule, float, float]:
        """Each group's schedule on n base records and its two Laplace scales (count, rates; in
        units of their sensitivity 1): the scales meet their shares of epsilon, DP-SGD's noise
        the rest, by the suite's accountant on one group's composition. Without a budget (the
        non-private twin): steps from `epochs`, exact statistics."""
        hp = self.hparams
        if privacy is None:
            return uncalibrated(hp, n), math.inf, math.inf
        count = calibrate_laplace_scale(hp.count_share * privacy.epsilon, privacy.delta)
        rates = calibrate_laplace_scale(hp.rate_share * privacy.epsilon, privacy.delta)
        # a tuple, not a list: the calibration caches on its (hashable) shape
        once = dp_event.ComposedDpEvent(
            (dp_event.LaplaceDpEvent(count), dp_event.LaplaceDpEvent(rates))
        )
        return calibrated(hp, n, privacy, None, StepShape(extra=once)), count, rates

    def _post_mask(self, n: int, seed: int) -> np.ndarray | None:
        """Which of n training records are post-processed (None: all, and all train the base
        too): an independent coin per record from the trial's stream "holdout", public
        randomness that reads no data."""
        share = self.hparams.holdout
        if share == 0:
            return None
        post = numpy_stream(seed, "holdout").random(n) < share
        if post.all() or not post.any():
            raise ConfigError(
                f"method {self.name}: holdout {share} left a stage empty on {n} training "
                "records; change holdout"
            )
        return post

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """Per group: its count, its classifier's T Poisson-sampled Gaussian rounds and its rate
        histogram, each tagged with the group (parallel composition across groups)."""
        if shape.n_classes != 2:
            raise ConfigError(
                f"method {self.name} post-processes binary classifiers; "
                f"the task has {shape.n_classes} classes"
            )
        post = self._post_mask(shape.n, seed)
        n_post = shape.n if post is None else int(post.sum())
        n_base = shape.n if post is None else shape.n - n_post
        schedule, count, rates = self.budget_split(n_base, target)
        ledger = PrivacyLedger(parallel_groups=True)
        if target is not None:  # the non-private twin releases nothing
            for g in range(shape.n_groups):
                ledger.record(COUNT, dp_event.LaplaceDpEvent(count), g)
                ledger.record(BASE, schedule.rounds_event(), g)
                ledger.record(RATES, dp_event.LaplaceDpEvent(rates), g)
        info = {
            **schedule.info(),
            "clip_norm": self.hparams.clip_norm,
            "count_scale": count,
            "rate_scale": rates,
            "post_records": n_post,
        }
        noise = {} if target is None else {"count": count, "laplace": rates}
        return Plan(ledger, schedule, budget=schedule.budget(**noise), info=info)

    def _stages(self, train: Split, seed: int) -> tuple[Split, Split]:
        """(base classifiers' records, post-processing records): the training set twice, or
        split by the holdout coin."""
        post = self._post_mask(len(train), seed)
        if post is None:
            return train, train
        return (
            Split(train.X[~post], train.y[~post], train.s[~post]),
            Split(train.X[post], train.y[post], train.s[post]),
        )

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """Each group's count, then per round each group's DP-SGD step on its rows of the
        round's Poisson batch (a release of its own, on a round numbered for it), then each
        group's rate histogram and the flips."""
        (trial,) = trials
        hp, task, session = self.hparams, trial.task, trial.session
        k, schedule = task.n_groups, plan.loop
        base_records, post_records = self._stages(task.train, session.seed)
        models = [init_model(hp, task, session) for _ in range(k)]  # "init" continues
        stacks = [stack_models([m]) for m in models]
        data = StackedData([replace(task, train=base_records)], session.device)
        groups = data.per_record(lambda t: t.train.s, torch.int64)
        sizes = group_counts(base_records, k, session, plan.info["count_scale"])
        sums = [
            session.gaussian_sum(BASE, hp.clip_norm, schedule.noise_multiplier, g) for g in range(k)
        ]
        step_sizes = [hp.lr / (schedule.sampling_rate * size) for size in sizes]

        def step(round_: StackedBatches) -> None:
            rows = data.gather(round_)
            x, labels, in_group = rows.x, CrossEntropy(rows.y), rows.rows(groups)
            (batch,) = round_.batches
            for g, stack in enumerate(stacks):
                mask = in_group == g if rows.mask is None else (in_group == g) & rows.mask
                own = Gathered(rows.index, mask, None)  # the round's rows of group g alone
                logits = stack.logits(x)
                contributions = stack.contributions(x, labels, logits, own, rows.x_sq)
                released = session.numbered(batch.indices, schedule.sampling_rate)
                stack.descend(gaussian_sums([sums[g]], contributions, [released]), step_sizes[g])

        def outcomes() -> list[Outcome]:
            gamma = trial.fairness.knob_value
            rates = positive_rates(models, post_records, session, plan.info["rate_scale"])
            derived = parity_flips(rates, gamma)
            info = {
                "gamma": gamma,
                "noisy_rates": rates.tolist(),
                "target_rates": parity_targets(rates, gamma).tolist(),
                "derived": derived.tolist(),
            }
            return [Outcome(info, derived=derived, group_models=models)]

        return TrainingProgram(models[:1], step, outcomes, n=data.n)


def group_counts(records: Split, k: int, session: PrivacySession, scale: float) -> list[float]:
    """Each group's record count, each through its own Laplace count (floored at 1, public)."""
    counts = []
    for g in range(k):
        own = torch.ones((int((records.s == g).sum()), 1), device=session.device)
        cells = torch.zeros(len(own), dtype=torch.int64, device=session.device)
        noisy = session.laplace_histogram(COUNT, scale, g)(own, cells, 1)
        counts.append(max(float(noisy[0, 0]), 1.0))
    return counts


def positive_rates(
    models: list[torch.nn.Module], records: Split, session: PrivacySession, scale: float
) -> np.ndarray:
    """Each group's share of positive predictions by its own classifier, from a Laplace
    histogram of (negative, positive) over the group's records (counts clamped at 0)."""
    rates = []
    for g, model in enumerate(models):
        x = torch.as_tensor(records.X[records.s == g], dtype=torch.float32, device=session.device)
        with torch.no_grad():
            cells = model(x).argmax(dim=1)
        own = torch.ones((len(cells), 1), device=session.device)
        noisy = session.laplace_histogram(RATES, scale, g)(own, cells, 2)
        negative, positive = (max(float(c), 0.0) for c in noisy[:, 0])
        rates.append(positive / (negative + positive) if negative + positive > 0 else 0.5)
    return np.asarray(rates)
