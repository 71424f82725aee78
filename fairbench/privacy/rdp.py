"""Rényi DP curves of every event the suite's methods record, with sampling amplification.

Private selection (`privacy.selection`) is accounted by RDP: the suite's PLD accountant cannot
represent a repeat-and-select event. dp-accounting's RDP accountant has no formula for a
Poisson batch on which a Laplace is released (RaCO-DP's histogram beside its gradient sum,
PF-LD's), so those steps would have to be accounted as if run on the whole data: sigma 4 and
~600 steps unamplified cost an epsilon in the hundreds, and the method would look unusable
under private selection because of the accounting, not of the method. This module computes
the RDP of such a step exactly (at integer orders) instead.

`rdp_curve(event, orders)` is the RDP epsilon at each order for add/remove-one neighbours:
Gaussian and Laplace releases (sensitivity 1), compositions (curves add), and
`PoissonSampledDpEvent(q, inner)` with `inner` a Gaussian, a Laplace, or Gaussians with at
most one Laplace on the same batch (Gaussians sharing a batch are one Gaussian of noise
multiplier (sum sigma_i^-2)^-1/2, as in `pld.one_batch`). A sampled step is the pair
P = N(0, s^2) x Lap(0, b) and M = (1 - q) P + q Q with Q = N(1, s^2) x Lap(1, b) (one record
moves each release by 1, the pair the suite's PLD accounts), in both directions:

- D_a(M || P) exactly, for integer a, by the binomial expansion
  sum_k C(a, k) (1 - q)^(a - k) q^k E_P[(Q/P)^k], where the coordinates are independent:
  E_P[(Q/P)^k] = exp(k (k - 1) / (2 s^2)) * M_L(k), with the Laplace factor in closed form
  M_L(k) = (k e^((k - 1)/b) + (k - 1) e^(-k/b)) / (2k - 1) (Mironov 2017's Laplace moment).
  For a Gaussian alone this is dp-accounting's own sum (Mironov, Talwar and Zhang 2019).
- D_a(P || M) = log E_P[((1 - q) + q R)^-(a - 1)] / (a - 1), R = Q/P, by quadrature: see
  `_reverse`. P/M <= 1/(1 - q) pointwise, so this direction never exceeds -log(1 - q); it is
  computed only at orders where the exact forward direction is below that cap.

Restricting to integer orders keeps the minimum over orders in the epsilon conversion an upper
bound (every order's RDP is valid on its own). Unsupported events raise `ConfigError`.
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.special import gammaln, log_ndtr, logsumexp

from fairbench.errors import ConfigError
from fairbench.privacy.pld import SubstitutionSampledDpEvent, one_batch

ORDERS: tuple[int, ...] = (*range(2, 257), 320, 384, 448, 512, 640, 768, 1024)
TAIL = 12.0  # the Gaussian coordinate is integrated over |z| <= TAIL standard deviations
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(16)
_SQRT_2PI = math.sqrt(2 * math.pi)


def rdp_curve(event: dp_event.DpEvent, orders: tuple[int, ...] = ORDERS) -> np.ndarray:
    """RDP epsilon of `event` at each (integer) order, add/remove-one neighbours."""
    if isinstance(event, dp_event.NoOpDpEvent):
        return np.zeros(len(orders))
    if isinstance(event, dp_event.ComposedDpEvent):
        return sum((rdp_curve(e, orders) for e in event.events), np.zeros(len(orders)))
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return event.count * rdp_curve(event.event, orders)
    if isinstance(event, SubstitutionSampledDpEvent):
        raise ConfigError(
            "RDP accounts whole-record DP; a sensitive-attribute-only release cannot be "
            "accounted: run the method in the full privacy notion"
        )
    if isinstance(event, dp_event.GaussianDpEvent | dp_event.LaplaceDpEvent):
        return _sampled(1.0, *one_batch(event), tuple(orders)).copy()
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        q = float(event.sampling_probability)
        return _sampled(q, *one_batch(event.event), tuple(orders)).copy()
    raise ConfigError(f"no RDP curve for {type(event).__name__}: {event}")


def epsilon(curve: np.ndarray, delta: float, orders: tuple[int, ...] = ORDERS) -> float:
    """Epsilon at `delta` from an RDP curve (dp-accounting's conversion, the minimum over
    orders of Canonne, Kamath and Steinke's bound)."""
    absl = logging.getLogger("absl")  # it logs a warning per negative (rounding) RDP value
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        return float(rdp_privacy_accountant.compute_epsilon(orders, curve, delta)[0])
    finally:
        absl.setLevel(level)


@lru_cache(maxsize=4096)
def _sampled(
    q: float, sigma: float | None, scale: float | None, orders: tuple[int, ...]
) -> np.ndarray:
    """RDP of Gaussians of combined noise multiplier `sigma` and a Laplace of `scale` (either
    may be None) released on a Poisson batch of rate q; q = 1 is the unsampled release."""
    a = np.asarray(orders, dtype=float)
    if not (0 <= q <= 1) or min(orders) < 2 or any(int(o) != o for o in orders):
        raise ValueError(f"need 0 <= q <= 1 and integer orders >= 2 (q={q})")
    if q == 0:
        return np.zeros(len(a))
    gauss = np.zeros(len(a)) if sigma is None else a / (2 * sigma**2)
    if q == 1:  # the unsampled pair: Gaussian and Laplace RDP add (independent coordinates)
        laplace = 0.0 if scale is None else _log_laplace_moment(a, scale) / (a - 1)
        return gauss + laplace
    forward = _forward(q, sigma, scale, a)
    cap = -math.log1p(-q)
    low = forward < cap  # elsewhere the reverse direction cannot exceed the forward one
    reverse = np.zeros(len(a))
    if low.any():
        reverse[low] = np.minimum(_reverse(q, sigma, scale, a[low]), cap)
    return np.maximum(forward, reverse)


def _log_laplace_moment(k: np.ndarray, scale: float) -> np.ndarray:
    """log E_{y ~ Lap(0, b)}[exp(k (|y| - |y - 1|) / b)] for k >= 1 (0 at k = 0 and 1)."""
    k = np.asarray(k, dtype=float)
    out = np.zeros_like(k)
    big = k >= 1
    kk = k[big]
    out[big] = (kk - 1) / scale + np.log(
        (kk + (kk - 1) * np.exp(-(2 * kk - 1) / scale)) / (2 * kk - 1)
    )
    return out


def _forward(q: float, sigma: float | None, scale: float | None, a: np.ndarray) -> np.ndarray:
    """D_a((1 - q) P + q Q || P) at each integer order, by the binomial expansion in log
    space (terms with k > a are masked out)."""
    k = np.arange(a.max() + 1)[None, :]
    n = a[:, None]
    with np.errstate(invalid="ignore"):  # gammaln at negative n - k: masked below
        terms = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    terms = terms + (n - k) * math.log1p(-q) + k * math.log(q)
    if sigma is not None:
        terms = terms + k * (k - 1) / (2 * sigma**2)
    if scale is not None:
        terms = terms + _log_laplace_moment(k, scale)
    terms = np.where(k <= n, terms, -np.inf)
    return logsumexp(terms, axis=1) / (a - 1)


def _reverse(q: float, sigma: float | None, scale: float | None, a: np.ndarray) -> np.ndarray:
    """D_a(P || (1 - q) P + q Q) at each order, by quadrature, erring upward.

    With rho = q / (1 - q), D = -log(1 - q) + log J / (a - 1), J = E_P[(1 + rho R)^-(a - 1)]
    in (0, 1], an integral over the law of u = log R under P (`_log_ratio_law`). The
    Laplace's privacy loss has atoms at -1/b and +1/b and a density on the interval between
    (constant R_L for y < 0 and y > 1), so J is one 1-D Gaussian integral per atom plus one
    over the Gaussian convolved with that density, whose inner integral is closed-form. Each is
    composite 16-point Gauss-Legendre in u with panels no wider than min(1/2, 1/s) (the
    integrand moves on the scale 1 in u, the Gaussian's on 1/s).

    Error control: J is computed with n panels and with 2n, and their difference (the usual
    a-posteriori estimate; Gauss-Legendre converges exponentially on these analytic
    integrands, so the finer value is far better than it) is added to the finer value, then
    the Gaussian mass left outside TAIL standard deviations (2 Phi(-TAIL): the integrand is
    at most 1). The caller also caps the result at -log(1 - q), a rigorous bound."""
    rho = q / (1 - q)
    coarse = _reverse_moment(rho, sigma, scale, a, refine=1)
    fine = _reverse_moment(rho, sigma, scale, a, refine=2)
    tail = 0.0 if sigma is None else 2 * math.exp(log_ndtr(-TAIL))
    moment = np.minimum(fine + np.abs(fine - coarse) + tail, 1.0)
    return -math.log1p(-q) + np.log(moment) / (a - 1)


def _reverse_moment(
    rho: float, sigma: float | None, scale: float | None, a: np.ndarray, refine: int
) -> np.ndarray:
    """J at each order from the quadrature rule with `refine` x the base panel count."""
    log_r, weights = _log_ratio_law(sigma, scale, refine)
    log1p_rho_r = np.logaddexp(0.0, math.log(rho) + log_r)  # log(1 + rho R), stably
    # exponents below -700 are raised to it (an upward error under e^-700): denormal
    # numbers would make the sum ~20x slower
    return np.array(
        [weights @ np.exp(np.maximum(-(order - 1) * log1p_rho_r, -700.0)) for order in a]
    )


def _gauss_legendre(lo: float, hi: float, panels: int) -> tuple[np.ndarray, np.ndarray]:
    edges = np.linspace(lo, hi, panels + 1)
    mid, rad = (edges[1:] + edges[:-1]) / 2, (edges[1:] - edges[:-1]) / 2
    nodes = (mid[:, None] + rad[:, None] * _NODES[None, :]).ravel()
    return nodes, (rad[:, None] * _WEIGHTS[None, :]).ravel()


def _log_ratio_law(
    sigma: float | None, scale: float | None, refine: int
) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes u of log R under P and their weights (summing to 1 but for the
    Gaussian tails). Under P the Gaussian's part is N(-1/(2 s^2), 1/s^2); the Laplace's is
    -1/b with mass 1/2, +1/b with mass e^(-1/b) / 2, and density e^(-l/2 - 1/(2b)) / 4 on
    (-1/b, 1/b) (as in `pld._laplace_loss_law`)."""
    width = 0.5 if sigma is None else min(0.5, 1 / sigma)

    def rule(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        return _gauss_legendre(lo, hi, refine * max(1, math.ceil((hi - lo) / width)))

    if sigma is None:  # the Laplace's law alone
        assert scale is not None
        u, w = rule(-1 / scale, 1 / scale)
        density = np.exp(-u / 2 - 1 / (2 * scale)) / 4
        values, masses = _atoms(scale)
        return np.concatenate([values, u]), np.concatenate([masses, w * density])
    mean, sd = -1 / (2 * sigma**2), 1 / sigma
    atoms = ([0.0], [1.0]) if scale is None else _atoms(scale)
    nodes, weights = [], []
    for shift, mass in zip(*atoms, strict=True):  # the Gaussian around each atom
        u, w = rule(mean + shift - TAIL * sd, mean + shift + TAIL * sd)
        nodes.append(u)
        weights.append(mass * w * np.exp(-(((u - mean - shift) / sd) ** 2) / 2) / (sd * _SQRT_2PI))
    if scale is not None:  # the Gaussian convolved with the Laplace's density
        u, w = rule(mean - 1 / scale - TAIL * sd, mean + 1 / scale + TAIL * sd)
        nodes.append(u)
        weights.append(w * _gauss_laplace_density(u - mean, sd, scale))
    return np.concatenate(nodes), np.concatenate(weights)


def _atoms(scale: float) -> tuple[list[float], list[float]]:
    """The Laplace privacy loss's atoms under P: (values, masses)."""
    return [-1 / scale, 1 / scale], [0.5, math.exp(-1 / scale) / 2]


def _gauss_laplace_density(v: np.ndarray, sd: float, scale: float) -> np.ndarray:
    """int_{-1/b}^{1/b} N(v - l; 0, sd^2) e^(-l/2 - 1/(2b)) / 4 dl: completing the square,
    e^(-v/2 + sd^2/8 - 1/(2b)) / 4 * (Phi(beta) - Phi(alpha)) with c = v - sd^2/2,
    alpha = (-1/b - c)/sd, beta = (1/b - c)/sd; the difference in log space from the side
    where it does not cancel."""
    c = v - sd**2 / 2
    alpha, beta = (-1 / scale - c) / sd, (1 / scale - c) / sd
    upper = alpha > 0  # both far right: Phi(-alpha) - Phi(-beta) instead
    hi = np.where(upper, log_ndtr(-alpha), log_ndtr(beta))
    lo = np.where(upper, log_ndtr(-beta), log_ndtr(alpha))
    log_diff = hi + np.log1p(-np.exp(lo - hi))
    return np.exp(-v / 2 + sd**2 / 8 - 1 / (2 * scale) + log_diff) / 4
