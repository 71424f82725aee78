"""`dpse`: group-aware privacy-budget tailoring by private standard errors (Alabi and Wiggins,
"Privacy Budget Tailoring in Private Data Analysis", TMLR), and `dpnose`, its baseline.

Stage 1 (Algorithm 1), budget tau (a share `stage1_share` of the total):
- X^T X and X^T Y with Gaussian noise (Analyze-Gauss, Lemma D.1), rows clipped to `clip_x` and
  targets to `clip_y`; a symmetric noise matrix for X^T X. Privacy budget tau/(K+1), split in two.
- The precursor: beta = (X^T X)^-1 X^T Y for regression. For classification, a logistic
  precursor instead: `precursor_steps` of full-batch gradient descent, each step a Gaussian sum
  of per-record gradients clipped to `clip_x`, the same tau/(K+1) split across the steps.
- Per group, S_k = sum of residual losses clipped to [0, Delta^2] plus Gaussian noise, budget
  tau/(K+1); s_k = sqrt(S_k / n_k), normalised so that sum s_k^2 = 1. The uniform vector is the
  fallback when the noisy X^T X is not positive definite or a noisy S_k is not positive.
Stage 2 (Algorithm 2; Algorithm 3 without a constraint), budget mu: T rounds of full-batch
gradient descent. Per round and group, a Gaussian sum of per-record gradients clipped to
Delta and (with the constraint) a Gaussian sum of losses clipped to [0, Delta^2], at budget
mu s_k^2 / T per round (halved between the two with the constraint). The step is
  grad h = sum_k M1_k / n_k + G 1[g(M2) >= 0] M1_k* / n_k*,
for f = the sum of the group mean losses (Algorithm 2, line 10: per-group means) and
g = max_k M2_k / n_k - bound (bounded group loss, k* the argmax), then projection onto the
box [-box, box]^P. Algorithm 3 (no constraint) writes the raw sum of group gradient sums
instead, i.e. the pooled loss where every record weighs the same: `objective: pooled` (the
step divides by the total n). The default keeps Algorithm 2's f for both. With the pooled loss,
only the total noise of one aggregated gradient matters, sum_k 1/rho_k, which uneven budgets
can only increase: tailoring cannot help any group. Per-group means divide group k's noise by
n_k, so budget moved towards small or poorly fitted groups can pay off, the paper's premise.
Squared loss for regression; the logistic loss for binary classification
(the paper's "easily translated" variant). The model has an intercept.

Linear only (`dpse` and `dpnose` alike; there is no `model` hyperparameter, and giving one,
e.g. `model: mlp`, is a ConfigError). The paper's method is built on the linear model: stage
1's precursor is the closed form (X^T X)^-1 X^T Y from Analyze-Gauss releases of X^T X and
X^T Y, the standard errors that tailor the budget are that linear fit's residuals, and stage 2
is full-batch projected gradient descent of theta^T [x, 1] over the box C_P of coefficients,
whose convexity the paper's analysis assumes. None of these has a counterpart for a hidden
layer; an MLP variant would be another method, not this paper's.

Noise scale. Algorithm 2 (lines 10-11) adds N(0, Delta^2 / (2 mu_T)) to each group's *mean*
gradient, whose sensitivity is Delta / n_k: n_k times more noise than the budget requires.
Here each release is noised at its own sensitivity (the clipped sum, then divided by n_k), so
at the paper's budgets (rho >= 2) the privacy noise is small next to the data's own.

An earlier `noise_scale: paper` option noised at the paper's scale. It was removed: its noise
multipliers were n_k times the calibrated ones with n_k the noisy group sizes, so the epsilon
its ledger reported depended on the data through them, and was no (epsilon, delta) guarantee.

Group sizes n_k: the paper takes them as public. Here they come from one Gaussian count
release (share `count_share`) unless `group_sizes: public`, which the row's notion then says.

Privacy. The paper accounts in rho-zCDP (Gaussian of sensitivity D and std sigma: rho =
D^2 / (2 sigma^2)) and composes every release sequentially: total rho = the budget. All
releases are Gaussian, so the suite's PLD of their composition is exactly that of one
Gaussian with the same total rho; the budget rho is calibrated so that this PLD epsilon meets
the target (under add/remove neighbours, sensitivities = the clip bounds). The row's info
reports rho and the paper's conversion rho + 2 sqrt(rho ln(1/delta)), labelled as such.

Groups are disjoint, so a record only pays for the shared releases (counts, X^T X, X^T Y)
and its own group's; `info.group_epsilons` reports each group's epsilon (under sequential
composition too, where it shows what the tailoring charges each group: with rho = 2 on the
5-group mixture, 4.1 for the majority and 4.3-4.4 for the minorities against 10 overall).
`composition: parallel` calibrates so that the worst group meets the target instead. That
changes the method's premise: the groups no longer share one budget, so tailoring cannot move budget
from the majority to the minority. Each group's stage-2 budget is then mu s_k^2 / max_j s_j^2:
the group with the largest standard error gets the full mu and the others less than they
could have. Stage 1's S_k share is per group too (tau/2), and X^T X, X^T Y take tau/4 each.

`dpnose` is the paper's baseline, "standard linear regression computed via DPGD (budget of
rho) but with no group aware budget allocation": by default (`objective: pooled`, no
constraint) T rounds of one Gaussian sum of all records' clipped gradients at the whole budget,
with no counts and no stage 1. With a constraint, or `objective: group_means`, it runs DPSE's
stage 2 with s_k^2 = 1/K (the tailoring ablation: only the budget split differs from dpse).

Device. Stage 2 and DPNoSE's rounds (`_descend`, `_pooled_descent`) run on the trial's
device in float64 and read nothing on the host (the bounded-group-loss step is selected on
the device); the model is returned there. Stage 1 and the counts stay numpy on the host: they
run once, before the rounds, and their outputs (standard errors, group sizes) set the noise
multipliers of stage 2's plan, which the host needs anyway.

What the comparison measures (fig-dpse, README). DPSE and DPNoSE as the paper defines them
differ in two things: the budget tailoring and the objective (group means against the pooled
loss). On the paper's mixtures (groups with opposite slopes) the objective moves the fit
between groups, the tailoring only moves noise; fig-dpse reports both changes separately.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch
from dp_accounting import dp_event
from pydantic import Field

from fairbench.errors import ConfigError
from fairbench.methods.base import Method
from fairbench.methods.engine import Outcome, TrainingProgram
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan, TrainingBudget
from fairbench.methods.trial import Device, FairnessSpec, Hparams, Trial
from fairbench.models import build_model
from fairbench.privacy import PrivacyBudget, PrivacyLedger, calibrate_noise_multiplier
from fairbench.privacy.accountant import REPORT_DISCRETISATION, SEARCH_DISCRETISATION
from fairbench.privacy.contributions import Rows, clip_factors
from fairbench.privacy.session import Guarantee
from fairbench.task import Task

COUNTS = "dpse: Gaussian group counts"
PRECURSOR = "dpse stage 1: logistic precursor gradient sums"
GRAM = "dpse stage 1: X^T X (Analyze-Gauss)"
XTY = "dpse stage 1: X^T Y"
RESIDUALS = "dpse stage 1: residual sum of group"
STAGE2 = "dpse stage 2: Gaussian sums per round for group"
STANDARD = "dpnose stage 2: standard DP gradient descent, one Gaussian sum per round"


class LinearRegressor(torch.nn.Module):
    """theta^T [x, 1]: the predictor DPSE returns for regression tasks (on theta's device)."""

    def __init__(self, theta: torch.Tensor) -> None:
        super().__init__()
        self.linear = torch.nn.utils.skip_init(
            torch.nn.Linear, len(theta) - 1, 1, device=theta.device
        )
        with torch.no_grad():
            self.linear.weight.copy_(theta[:-1][None, :])
            self.linear.bias.copy_(theta[-1:])

    def forward(self, x):
        return self.linear(x)


class DPSEHparams(Hparams):
    # the paper's settings (Section 6, Appendix B): rho split 20/80, Delta = 2, C_P = [-5, 5]^P
    stage1_share: float = Field(0.2, gt=0, lt=1, description="tau / rho")
    count_share: float = Field(0.02, gt=0, lt=0.5, description="budget of the group counts")
    clip_norm: float = Field(2.0, gt=0, description="Delta: gradient clip; losses to Delta^2")
    clip_x: float = Field(5.0, gt=0, description="row norm bound for X^T X, X^T Y")
    clip_y: float = Field(5.0, gt=0, description="target bound for X^T Y")
    steps: int = Field(100, ge=1, description="T, full-batch rounds of stage 2")
    lr: float = Field(0.1, gt=0, description="stage 2 gradient-descent step")
    box: float = Field(5.0, gt=0, description="C_P = [-box, box]^P")
    lagrange: float = Field(1.0, ge=0, description="G, weight of the constraint gradient")
    precursor_steps: int = Field(25, ge=1, description="classification: logistic precursor")
    precursor_lr: float = Field(
        0.5, gt=0, description="step of the logistic precursor's gradient descent"
    )
    composition: Literal["sequential", "parallel"] = Field(
        "sequential",
        description="sequential: the whole record meets the target; parallel: the worst group does",
    )
    group_sizes: Literal["private", "public"] = Field(
        "private",
        description="group sizes n_k: a private Gaussian count release, or public (the paper's)",
    )
    # stage 2's f: `group_means` weighs every group equally (Algorithm 2, line 10), `pooled`
    # weighs every record equally (Algorithm 3's sum of group sums; DPNoSE's "standard DPGD")
    objective: Literal["group_means", "pooled"] = Field(
        "group_means", description="stage 2's f: per-group means (Algorithm 2) or pooled"
    )


class _RhoSplit:
    """rho of every release, from the total and the split (see the module docstring)."""

    def __init__(self, rho: float, hp: DPSEHparams, k: int, tailored: bool, counts: bool):
        self.counts = hp.count_share * rho if counts else 0.0
        rest = rho - self.counts
        self.stage1 = hp.stage1_share * rest if tailored else 0.0
        self.stage2 = rest - self.stage1
        parallel = hp.composition == "parallel"
        self.design = self.stage1 / (4 if parallel else 2 * (k + 1))  # X^T X, and X^T Y
        self.residuals = self.stage1 / (2 if parallel else k + 1)  # each group's S_k


def _std(sensitivity: float, rho: float) -> float:
    """Gaussian std for a rho-zCDP release of the given l2 sensitivity."""
    return sensitivity / math.sqrt(2 * rho)


def _gauss(rho: float) -> dp_event.GaussianDpEvent:
    """The DpEvent of a rho-zCDP Gaussian (noise multiplier 1 / sqrt(2 rho))."""
    return dp_event.GaussianDpEvent(_nm(rho))


def _nm(rho: float) -> float:
    """The noise multiplier of a rho-zCDP Gaussian."""
    return 1.0 / math.sqrt(2 * rho)


def _model(theta: torch.Tensor, task: Task, classify: bool) -> torch.nn.Module:
    """theta as the suite's logistic classifier (class 1's logit) or a linear regressor, on
    theta's device."""
    if not classify:
        return LinearRegressor(theta)
    model = build_model("logistic", task.n_features, 2).to(theta.device)
    with torch.no_grad():
        model.linear.weight.zero_()
        model.linear.bias.zero_()
        model.linear.weight[1] = theta[:-1]
        model.linear.bias[1] = theta[-1]
    return model


def _logistic_or_squared(margin, y, classify: bool):
    """Per-record losses and d loss / d margin of the margin [x, 1] theta (numpy or torch)."""
    if not classify:
        return (margin - y) ** 2, 2.0 * (margin - y)
    sign = 2.0 * y - 1.0
    if isinstance(margin, np.ndarray):
        return np.logaddexp(0.0, -sign * margin), -sign / (1.0 + np.exp(sign * margin))
    loss = torch.logaddexp(torch.zeros_like(margin), -sign * margin)
    return loss, -sign / (1.0 + torch.exp(sign * margin))


def _on_device(z: np.ndarray, y: np.ndarray, s: np.ndarray | None, k: int, device: torch.device):
    """The design, targets (float64) and each group's record indices on the device."""
    groups = (
        []
        if s is None
        else [torch.as_tensor(np.flatnonzero(s == g), device=device) for g in range(k)]
    )
    return (
        torch.as_tensor(z, dtype=torch.float64, device=device),
        torch.as_tensor(y, dtype=torch.float64, device=device),
        groups,
    )


def _clip_rows(v: np.ndarray, bound: float) -> np.ndarray:
    """Rows scaled to l2 norm at most `bound` (the suite's clipping rule, here to bound the
    design the precursor fits on; the mechanisms clip their own inputs again)."""
    return v * clip_factors(np.linalg.norm(v, axis=1), bound)[:, None]


class DPSE(Method):
    name = "dpse"
    description = "DPSE: per-group budgets from private standard errors, then DP GD on BGL"
    private = True
    paper = (
        "Alabi, Wiggins (2023): Privacy Budget Tailoring in Private Data Analysis. "
        "Transactions on Machine Learning Research (TMLR)"
    )
    constraints = ("bounded_group_loss",)  # with its knob; without, it trains unconstrained
    knob = Knob(
        "bound",
        "largest allowed mean loss of any group",
        Direction.LOOSER,
        low=0.0,
        required=False,  # None: unconstrained
    )
    Hparams = DPSEHparams
    hparams: DPSEHparams
    tailored = True  # dpnose: False
    adaptive_plan = True  # stage 2's plan is submitted once stage 1's noisy outputs set it

    def guarantee(self) -> Guarantee:
        """Whole-record unless `group_sizes: public` (the paper's reading): then the group
        sizes are read exactly."""
        if self.hparams.group_sizes == "public":
            return Guarantee(public=("group-sizes",), because=("group_sizes",))
        return Guarantee()

    def __init__(self, **hparams: Any) -> None:
        if "model" in hparams:
            raise ConfigError(
                f"method {self.name} is linear-only and takes no `model` hyperparameter (got "
                f"model: {hparams['model']}): the DPSE paper's precursor, standard errors and "
                "box-projected descent are those of a linear model; use dp-sgd, sgda, raco-dp, "
                "dp-fermi or cgoo for model: mlp"
            )
        super().__init__(**hparams)

    def check(self, fairness: FairnessSpec) -> None:
        """Without a bound DPSE trains unconstrained, and is evaluated on any constraint; a
        bound constrains bounded_group_loss only (the class attributes)."""
        if fairness.knob is not None:
            super().check(fairness)

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """The total rho meeting the target, and stage 1's releases with the group counts
        (none for standard DPGD). `run` extends the plan with stage 2 (or standard DPGD's
        rounds), whose budgets stage 1's noisy standard errors set (`adaptive_plan`)."""
        classify = shape.n_classes > 0  # a regression task has no classes
        if classify and shape.n_classes != 2:
            raise ConfigError(f"method {self.name} handles regression and binary tasks only")
        hp, privacy = self.hparams, self.required_target(target)
        rho = self._calibrate(privacy)
        info: dict[str, Any] = {"steps": hp.steps, "stage1_rho": 0.0, "count_rho": 0.0}
        if self._standard(fairness.knob):
            ledger = PrivacyLedger()
        else:
            split = self._budget(rho, shape.n_groups)
            ledger = PrivacyLedger(parallel_groups=hp.composition == "parallel")
            for label, event, group in self._stage1_plan(split, shape.n_groups, classify):
                ledger.record(label, event, group)
            info |= {"stage1_rho": split.stage1, "count_rho": split.counts}
        info["rho"] = rho
        if classify:  # the bound is on a group's mean logistic loss, not its error rate
            info["bounded_loss"] = "log_loss"
        info["epsilon_paper_zcdp"] = rho + 2 * math.sqrt(rho * math.log(1 / privacy.delta))
        # full-batch rounds; the zCDP budget rho is what the accountant solved for
        budget = TrainingBudget(hp.steps, None, {"rho": rho}, "rho")
        return Plan(ledger, budget=budget, info=info)

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """A fit of its own (`run`): the stages on the host and the device, which extend the
        plan with stage 2 before drawing it."""
        (trial,) = trials
        fitted: list[Outcome] = []

        def run() -> None:
            fitted.append(self._fit(trial, plan))

        return TrainingProgram([], run=run, outcomes=lambda: fitted)

    def _standard(self, bound: float | None) -> bool:
        """Whether this is DPNoSE as the paper defines it: standard DPGD, no stage 1."""
        return not self.tailored and bound is None and self.hparams.objective == "pooled"

    def _budget(self, rho: float, k: int) -> _RhoSplit:
        """The rho of every release of stage 1 and stage 2 from the total, for k groups."""
        return _RhoSplit(rho, self.hparams, k, self.tailored, self.hparams.group_sizes == "private")

    # -- losses and per-record gradients of [x, 1] theta ------------------------------------
    def _loss_grad(self, z, y, theta, classify: bool):
        """Per-record losses and gradients in theta (numpy on the host, torch on a device)."""
        loss, coef = _logistic_or_squared(z @ theta, y, classify)
        return loss, coef[:, None] * z

    def _stage1_plan(self, budget: _RhoSplit, k: int, classify: bool) -> list[tuple]:
        """(label, event, group) of stage 1 and the counts: fixed before any data is read."""
        hp = self.hparams
        plan = []
        if budget.counts:
            plan.append((COUNTS, _gauss(budget.counts), None))
        if not self.tailored:
            return plan
        if classify:
            rho_step = 2 * budget.design / hp.precursor_steps
            steps = dp_event.SelfComposedDpEvent(_gauss(rho_step), hp.precursor_steps)
            plan.append((PRECURSOR, steps, None))
        else:
            plan += [(GRAM, _gauss(budget.design), None), (XTY, _gauss(budget.design), None)]
        return plan + [(f"{RESIDUALS} {g}", _gauss(budget.residuals), g) for g in range(k)]

    def _precursor(self, z, y, classify, budget: _RhoSplit, session) -> np.ndarray | None:
        hp = self.hparams
        zc = _clip_rows(z, hp.clip_x)
        if classify:  # logistic precursor: noisy full-batch gradient steps on the design share
            theta = np.zeros(z.shape[1])
            rho_step = 2 * budget.design / hp.precursor_steps
            gradient_sum = session.gaussian_sum(PRECURSOR, hp.clip_x, _nm(rho_step))
            for _ in range(hp.precursor_steps):
                _, grads = self._loss_grad(zc, y, theta, True)
                noisy = gradient_sum(Rows.of(grads))[0]
                theta = np.clip(theta - hp.precursor_lr * noisy / len(y), -hp.box, hp.box)
            return theta
        yc = np.clip(y, -hp.clip_y, hp.clip_y)
        xtx = session.gaussian_gram(GRAM, hp.clip_x, _nm(budget.design))(z)
        xty_sum = session.gaussian_sum(XTY, hp.clip_x * hp.clip_y, _nm(budget.design))
        xty = xty_sum(Rows.of(zc * yc[:, None]))[0]
        if np.linalg.eigvalsh(xtx).min() <= 0:
            return None
        return np.linalg.solve(xtx, xty)

    def standard_errors(self, z, y, s, sizes, k, classify, budget, session) -> np.ndarray:
        """Algorithm 1: normalised private standard errors (uniform on fallback)."""
        hp = self.hparams
        uniform = np.full(k, 1 / math.sqrt(k))
        beta = self._precursor(z, y, classify, budget, session)
        delta2 = hp.clip_norm**2
        noisy = np.empty(k)
        for g in range(k):
            loss, _ = self._loss_grad(
                z[s == g], y[s == g], beta if beta is not None else np.zeros(z.shape[1]), classify
            )
            residual_sum = session.gaussian_sum(
                f"{RESIDUALS} {g}", delta2, _nm(budget.residuals), g
            )
            noisy[g] = residual_sum(Rows.of(loss[:, None]))[0][0]
        if beta is None or (noisy <= 0).any():
            return uniform
        se = np.sqrt(noisy / sizes)
        return se / np.linalg.norm(se)

    def _sizes(self, s, k, budget, session) -> np.ndarray:
        if budget.counts == 0:
            return np.bincount(s, minlength=k).astype(np.float64)
        return np.maximum(session.gaussian_counts(COUNTS, _nm(budget.counts))(s, k), 1.0)

    def _fit(self, trial: Trial, plan: Plan) -> Outcome:
        """Train on the trial's data; each group's epsilon read from its ledger afterwards."""
        task, session, hp = trial.task, trial.session, self.hparams
        classify = task.kind == "classification"
        theta, info = self._run(task, plan.info["rho"], trial.fairness.knob, session, classify)
        # per group, what its records pay by parallel composition: under `parallel` the
        # target (their max); under `sequential` information, at the coarser (faster) grid
        interval = REPORT_DISCRETISATION if hp.composition == "parallel" else SEARCH_DISCRETISATION
        delta = self.required_target(session.budget).delta
        info["group_epsilons"] = session.ledger().group_epsilons(delta, interval)
        return Outcome(info, _model(theta, task, classify))

    def _calibrate(self, privacy: PrivacyBudget) -> float:
        """Total rho whose single-Gaussian PLD epsilon meets the target: the composition of
        Gaussians is one Gaussian of the summed rho (per group under parallel composition)."""
        sigma = calibrate_noise_multiplier(1.0, 1, privacy.epsilon, privacy.delta)
        return 1.0 / (2 * sigma**2)

    def _fit_stage2(self, session, stage1: list[tuple], stage2: Callable[[float], list[tuple]]):
        """Submit stage 2's plan, with its rho shrunk by the largest factor (<= 1) that keeps
        the whole composition within the target: the PLD's pessimistic rounding of many
        Gaussians can exceed the single Gaussian `_calibrate` solved for."""
        privacy, parallel = session.budget, self.hparams.composition == "parallel"
        factor = 1.0
        while True:
            planned = stage2(factor)
            ledger = PrivacyLedger(parallel_groups=parallel)
            for label, event, group in stage1 + planned:
                ledger.record(label, event, group)
            spent = ledger.epsilon(privacy.delta)
            if spent <= privacy.epsilon:
                break
            factor *= 0.999 * (privacy.epsilon / spent) ** 2
        extension = PrivacyLedger()
        for label, event, group in planned:
            extension.record(label, event, group)
        session.extend_plan(extension)
        return factor

    def _run(self, task: Task, rho: float, bound: float | None, session, classify: bool):
        """The stages after the plan's submission: (theta, what the row reports of them)."""
        hp = self.hparams
        x, y, s = task.train.X.astype(np.float64), task.train.y, task.train.s
        y = y.astype(np.float64)
        z = np.hstack([x, np.ones((len(y), 1))])
        k = task.n_groups
        constrained = bound is not None
        if self._standard(bound):
            return self._standard_dpgd(z, y, classify, rho, session)
        budget = self._budget(rho, k)
        stage1 = self._stage1_plan(budget, k, classify)
        sizes = self._sizes(s, k, budget, session)
        if self.tailored:
            se = self.standard_errors(z, y, s, sizes, k, classify, budget, session)
        else:
            se = np.full(k, 1 / math.sqrt(k))
        share = se**2 / (se**2).max() if hp.composition == "parallel" else se**2
        releases = 2 if constrained else 1

        def multipliers(factor: float) -> np.ndarray:  # per group, per release and round
            rho_round = factor * budget.stage2 * share / (hp.steps * releases)
            return 1 / np.sqrt(2 * rho_round)

        def stage2(factor: float) -> list[tuple]:
            return [
                (
                    f"{STAGE2} {g}",
                    dp_event.SelfComposedDpEvent(
                        dp_event.GaussianDpEvent(float(nm)), hp.steps * releases
                    ),
                    g,
                )
                for g, nm in enumerate(multipliers(factor))
            ]

        factor = self._fit_stage2(session, stage1, stage2)
        data = _on_device(z, y, s, k, session.device)
        sizes_t = torch.as_tensor(sizes, dtype=torch.float64, device=session.device)
        theta = self._descend(data, sizes_t, multipliers(factor), bound, classify, session)
        info = {
            "standard_errors": se.tolist(),
            "budget_shares": share.tolist(),
            "stage2_rho": budget.stage2 * factor,
            "bound": bound,
        }
        return theta, info

    def _descend(self, data, sizes, multipliers, bound, classify, session) -> torch.Tensor:
        """Stage 2 on the device: full-batch projected descent on the group-mean (or pooled)
        loss, with the bounded-group-loss step when a bound is given (selected on the
        device: nothing is read on the host)."""
        hp, k = self.hparams, len(sizes)
        z, y, groups = data
        delta2 = hp.clip_norm**2
        grad_sums = [
            session.gaussian_sum(f"{STAGE2} {g}", hp.clip_norm, float(multipliers[g]), g)
            for g in range(k)
        ]
        loss_sums = [
            session.gaussian_sum(f"{STAGE2} {g}", delta2, float(multipliers[g]), g)
            for g in range(k)
        ]
        theta = z.new_zeros(z.shape[1])
        for _ in range(hp.steps):
            loss, grads = self._loss_grad(z, y, theta, classify)
            m1 = torch.stack(
                [grad_sums[g](Rows.of(grads.index_select(0, groups[g])))[0] for g in range(k)]
            )
            if hp.objective == "group_means":  # grad of f = the sum of group mean losses
                step = (m1 / sizes[:, None]).sum(dim=0)
            else:  # the pooled mean loss
                step = m1.sum(dim=0) / sizes.sum()
            if bound is not None:
                # a loss clipped to [0, Delta^2] has sensitivity Delta^2 (losses are >= 0)
                m2 = torch.stack(
                    [
                        loss_sums[g](Rows.of(loss.index_select(0, groups[g])[:, None]))[0][0]
                        for g in range(k)
                    ]
                )
                group_loss = m2 / sizes
                worst = group_loss.argmax().view(1)  # a device index, read on the device
                push = hp.lagrange * m1.index_select(0, worst)[0] / sizes.index_select(0, worst)
                step = torch.where(group_loss.max() - bound >= 0, step + push, step)
            theta = (theta - hp.lr * step).clamp(-hp.box, hp.box)
        return theta

    def _standard_dpgd(self, z, y, classify: bool, rho: float, session):
        """DPNoSE as the paper defines it, "standard DPGD": per round, one Gaussian sum of the
        clipped per-record gradients of all records at the whole stage-2 budget."""
        hp = self.hparams
        n = len(y)  # public, as in DP-SGD

        def plan(factor: float) -> list[tuple]:
            nm = 1 / math.sqrt(2 * factor * rho / hp.steps)
            return [
                (
                    STANDARD,
                    dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(nm), hp.steps),
                    None,
                )
            ]

        factor = self._fit_stage2(session, [], plan)
        nm = plan(factor)[0][1].event.noise_multiplier
        z, y, _ = _on_device(z, y, None, 0, session.device)
        theta = self._pooled_descent(
            z, y, n, classify, session.gaussian_sum(STANDARD, hp.clip_norm, nm)
        )
        info = {
            "standard_errors": [],
            "budget_shares": [],
            "stage2_rho": rho * factor,
            "bound": None,
        }
        return theta, info

    def _pooled_descent(self, z, y, n: int, classify: bool, gradient_sum) -> torch.Tensor:
        """DPNoSE's rounds on the device: one clipped, noised gradient sum of all records each,
        divided by the public n."""
        hp = self.hparams
        theta = z.new_zeros(z.shape[1])
        for _ in range(hp.steps):
            _, grads = self._loss_grad(z, y, theta, classify)
            noisy = gradient_sum(Rows.of(grads))[0]
            theta = (theta - hp.lr * noisy / n).clamp(-hp.box, hp.box)
        return theta

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        raise ConfigError(f"method {self.name} runs full-batch rounds; `bench` does not time it")


class DPNoSEHparams(DPSEHparams):
    objective: Literal["group_means", "pooled"] = "pooled"  # the paper's "standard DPGD"


class DPNoSE(DPSE):
    name = "dpnose"
    description = "DPNoSE: standard DP gradient descent, no group-aware budget (the baseline)"
    paper = (
        "DPNoSE, the baseline of Alabi, Wiggins (2023): Privacy Budget Tailoring in "
        "Private Data Analysis. TMLR"
    )
    Hparams = DPNoSEHparams
    hparams: DPNoSEHparams
    tailored = False
