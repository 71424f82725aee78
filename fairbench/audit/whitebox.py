"""The white-box adversary: a privacy session that shows the auditor every noisy gradient
release (Nasr et al. 2021's strongest threat model: all iterates seen, canaries crafted so
their gradients are known), the test it runs on what it saw, and the two broken mechanisms
the audit must catch.

Each canary sits alone in its own feature column (`fairbench.audit.canary`), so every other
record, canaries included, contributes exactly 0 to that column of a linear model's weight
gradient. In a binary task a record's logit gradient is a multiple of (1, -1), so in a watched
release R (the weight-gradient sum, classes x features) canary c's coordinate
z = (R[0, c] - R[1, c]) / sqrt 2 is, given everything released before it,

    z = b * g + N(0, s^2),   b ~ Bernoulli(q) if the canary is in the data, b = 0 if not,

with s = noise multiplier x clip (the claimed noise), q the batch's sampling rate and g the
canary's clipped contribution along that coordinate. The canary's raw gradient is far above
the clip, so |g| = clip x `share` (the part of a clipped canary gradient in its column; the
rest falls on the shared bias). The sign of g follows the method's state (a fair method's
dual variables or costs can reverse it), so a canary's score is the likelihood ratio of "in"
with the sign a fair coin, summed over every watched release:

    sum_t log((1 - q_t) + q_t exp(-g^2 / 2 s_t^2) cosh(z_t g / s_t^2)).

s_t is the claimed noise times the scale the canary coordinates actually show (a robust
estimate over all of them; the rare canary spikes barely move it): the adversary reads the
noise off the releases rather than trusting the claim, which is what exposes a mechanism
that draws less noise than it records. With a constant |g|, a known sign and the true noise
this is the Neyman-Pearson test for the observations; it sees only gradient sums, never the
model, labels or other records.

Watched releases (`WATCHED`, by the mechanism's label): DP-SGD's gradient sum, RaCO-DP's
Lagrangian gradient sum, DP-FERMI's theta-gradient sum, CGOO's oracle gradient sums. Not
watched: RaCO-DP's Laplace histogram, DP-FERMI's W-gradient sum and group counts, CGOO's
confusion counts (a canary is not alone in any coordinate of those). A test on part of the
releases is still a valid test, so the bound stays sound; it only misses what those carry.

Broken variants (for the audit's power; never used by a run): `one-third-noise` releases
exact + (noisy - exact) / 3 from every Gaussian sum, while the ledger records the full noise;
`no-clipping` adds the (full) noise to the unclipped sum of contributions. Both break the
Gaussian sums only (the releases the audit watches), not counts, Gram matrices or histograms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import torch

from fairbench.methods import cgoo, dp_fermi, dp_sgd, raco_dp
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.contributions import Array, Contributions, clipped_sum
from fairbench.privacy.session import Batch, PrivacySession

Broken = Literal["one-third-noise", "no-clipping"]
BROKEN: tuple[Broken, ...] = get_args(Broken)
NORMAL_MAD = 0.6744897501960817  # median |N(0, 1)|

# the Gaussian sums whose weight-gradient release carries the canary's column, per method
WATCHED: dict[str, tuple[str, ...]] = {
    "dp-sgd": (dp_sgd.LABEL,),
    "raco-dp": (raco_dp.GRADIENT,),
    "dp-fermi": (dp_fermi.THETA,),
    "cgoo": (cgoo.ORACLE,),
}


@dataclass(frozen=True)
class Watch:
    """What the adversary looks at: the releases (`labels`), the canaries' feature `columns`,
    and the `share` of a clipped canary gradient that lies in its column."""

    labels: tuple[str, ...]
    columns: slice
    share: float


@dataclass(frozen=True)
class Observation:
    """One watched release: each canary's coordinate z, the noise std s the release claims,
    the canary's clipped contribution |g| and the batch's sampling rate q."""

    z: torch.Tensor  # (canaries,)
    std: float
    signal: float
    rate: float


class AuditSession(PrivacySession):
    """A trial's privacy session that records the canary coordinates of every watched release
    (`observations`) and, if `broken` is set, breaks every Gaussian sum."""

    def __init__(
        self, seed: int, budget: PrivacyBudget, watch: Watch, broken: Broken | None = None
    ) -> None:
        super().__init__(seed, torch.device("cpu"), budget)
        self.watch, self.broken = watch, broken
        self.observations: list[Observation] = []

    # not a GaussianSum but called like one (stacked releases check a mechanism's exact type)
    def gaussian_sum(  # type: ignore[override]
        self, label: str, clip: float, noise_multiplier: float, group: int | None = None
    ) -> WatchedSum:
        return WatchedSum(
            self,
            super().gaussian_sum(label, clip, noise_multiplier, group),
            label,
            clip,
            noise_multiplier,
        )


class WatchedSum:
    """A Gaussian sum mechanism seen by the adversary (and broken, in a broken session)."""

    def __init__(
        self, session: AuditSession, inner, label: str, clip: float, noise_multiplier: float
    ) -> None:
        self.session, self.inner, self.label, self.clip = session, inner, label, clip
        self.std = noise_multiplier * clip * session.substitution_factor(2.0)

    def __call__(self, contributions: Contributions, batch: Batch | None = None) -> list[Array]:
        noisy = self.inner(contributions, batch)
        session = self.session
        if session.broken is not None:
            exact = clipped_sum(contributions, self.clip)
            if session.broken == "one-third-noise":
                noisy = [e + (v - e) / 3 for e, v in zip(exact, noisy, strict=True)]
            else:
                raw = clipped_sum(contributions, math.inf)
                noisy = [r + (v - e) for r, e, v in zip(raw, exact, noisy, strict=True)]
        watch = session.watch
        if self.label in watch.labels:
            columns = torch.as_tensor(noisy[0][:, watch.columns], dtype=torch.float64)
            rate = 1.0 if batch is None or batch.rate is None else batch.rate
            session.observations.append(
                Observation(
                    (columns[0] - columns[1]) / math.sqrt(2),
                    self.std,
                    self.clip * watch.share,
                    rate,
                )
            )
        return noisy


def canary_scores(observations: list[Observation]) -> np.ndarray:
    """Each canary's log-likelihood ratio of "in" over every watched release, with the sign
    of its contribution unknown and the noise std the releases show (see the module text)."""
    z = torch.stack([o.z for o in observations]).numpy()  # (releases, canaries)
    std, g, q = (
        np.array([getattr(o, k) for o in observations])[:, None] for k in ("std", "signal", "rate")
    )
    std = std * noise_ratio(z / std)
    x = np.abs(z * g / std**2)
    log_cosh = x + np.log1p(np.exp(-2 * x)) - math.log(2)
    log_sampled = log_cosh - g**2 / (2 * std**2)
    with np.errstate(divide="ignore"):  # q = 1: log(1 - q) = -inf, the term is log_sampled
        return np.logaddexp(np.log1p(-q), np.log(q) + log_sampled).sum(axis=0)


def noise_ratio(standardised: np.ndarray) -> float:
    """The noise the canary coordinates show, as a multiple of the claimed noise: a robust
    scale (median absolute value / 0.6745) that the rare canary spikes barely move."""
    return float(np.median(np.abs(standardised)) / NORMAL_MAD)
