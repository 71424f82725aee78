"""From canary guesses to an epsilon lower bound that holds at a stated confidence: the
one-run audit of Steinke, Nasr and Jagielski (2023, "Privacy auditing with one (1) training
run", Theorem 3.1 with its delta term as in their Algorithm 2).

Each of m canaries is included in the training data independently with probability 1/2. The
auditor sees the output and guesses "in" for r of them (abstaining on the rest). If the
training is (epsilon, delta)-DP in each canary, the number v of correct guesses satisfies

    P[v >= v0] <= P[Binomial(r, e^eps / (1 + e^eps)) >= v0] + 2 m delta alpha(v0),

alpha(v0) = max over i in 1..v0 of P[v0 > Binomial(r, ...) >= v0 - i] / i, whatever the
dependence between canaries. The lower bound is the largest epsilon rejected at level
1 - confidence. Independent training runs pool into one mechanism (each canary is in one run
only), so their canaries add up.

How many guesses to make (the top share of canaries by score) is chosen on a tuning half of
the canaries and applied to the other half, which that choice never saw; the bound counts the
test half only, so it stays valid whatever the score.

Saturation: r correct guesses out of r bound epsilon by about log(r / 3) at 95% confidence,
and never beyond the share of "in" canaries the score can single out.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

GUESS_SHARES = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)  # of canaries guessed "in"


def p_value(m: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """P[at least `correct` of `guesses` right] for an (epsilon, delta)-DP training on m
    canaries (the theorem's bound, capped at 1)."""
    if correct == 0:
        return 1.0
    p = 1 / (1 + math.exp(-epsilon))  # accuracy of epsilon-DP randomized response
    beta = stats.binom.sf(correct - 1, guesses, p)
    # P[v0 > B >= v0 - i] for i = 1..v0: the pmf of v0 - 1, v0 - 2, ... summed
    below = np.cumsum(stats.binom.pmf(np.arange(correct - 1, -1, -1), guesses, p))
    alpha = float(np.max(below / np.arange(1, correct + 1)))
    return min(1.0, float(beta) + 2 * m * delta * alpha)


def epsilon_lower_bound(
    m: int, guesses: int, correct: int, delta: float, confidence: float
) -> float:
    """The largest epsilon (to 1e-4) whose p-value for the observed guesses is below
    1 - confidence; 0 when even epsilon = 0 is not rejected."""
    level = 1 - confidence
    if p_value(m, guesses, correct, 0.0, delta) >= level:
        return 0.0
    low, high = 0.0, 1.0
    while p_value(m, guesses, correct, high, delta) < level:
        low, high = high, 2 * high
    while high - low > 1e-4:
        mid = (low + high) / 2
        low, high = (mid, high) if p_value(m, guesses, correct, mid, delta) < level else (low, mid)
    return low


def _top_guesses(scores: np.ndarray, member: np.ndarray, share: float) -> tuple[int, int]:
    """(guesses, correct guesses) of "in" for the top `share` of the canaries by score: a
    number of guesses fixed before the output is seen, as the theorem asks."""
    r = max(1, round(share * len(scores)))
    top = np.argsort(-scores, kind="stable")[:r]
    return r, int(member[top].sum())


def choose_share(scores: np.ndarray, member: np.ndarray, delta: float, confidence: float) -> float:
    """The share of canaries to guess "in" (one of `GUESS_SHARES`) that bounds epsilon best on
    these canaries."""
    bounds = [
        epsilon_lower_bound(len(scores), *_top_guesses(scores, member, share), delta, confidence)
        for share in GUESS_SHARES
    ]
    return GUESS_SHARES[int(np.argmax(bounds))]


def bound_from_scores(
    scores: np.ndarray, member: np.ndarray, tuning: np.ndarray, delta: float, confidence: float
) -> tuple[float, int, int, float]:
    """(lower bound, guesses, correct guesses, share guessed): the share chosen on the
    canaries marked `tuning`, the bound counted on the others."""
    share = choose_share(scores[tuning], member[tuning], delta, confidence)
    test = ~tuning
    r, v = _top_guesses(scores[test], member[test], share)
    return epsilon_lower_bound(int(test.sum()), r, v, delta, confidence), r, v, share
