"""Noise samplers for the suite's mechanisms, and the one place every noisy release passes
through.

Float samplers (the default). Noise is float64, drawn from the mechanism's seeded torch
stream (`fairbench.streams`), and added to the statistic in float64. torch's own uniforms stop
at 2^-53, so its Box-Muller normal cannot exceed 8.6 sigma (5.8 sigma in float32) and resolves
its far tail coarsely; where the tails matter the samplers use a uniform resolved to 2^-160
near 0 (`fine_uniform`):
- Gaussian: an exact mixture. With probability TAIL_MASS = 2 Q(5) (rounded to a multiple of
  2^-53, so one uniform selects it exactly) a draw from the tail beyond 5 sigma, by the normal
  quantile of a fine tail probability (support `GAUSSIAN_SUPPORT`, 15.6 sigma); otherwise
  torch's float64 normal, redrawn past 5 sigma, where 53-bit uniforms resolve it finely. The
  mass left out, about 4e-55 per coordinate, is below the float64 resolution of any delta the
  suite accounts, whatever the number of draws. Cost: about twice torch's `randn`.
  That redraw is a host decision; off the CPU (`privacy.sync`) the same mixture is drawn
  densely (`dense_standard_gaussian`): the uniform that selects the tail also places a body
  draw by the normal quantile, no value is read on the host.
- Laplace: a random sign times an exponential (-log of a fine uniform): support 110.9
  scales, no clamping, hence no atom at the tails (the inverse-CDF sampler had one).
These are still floating-point samplers: an adversary who sees the low-order bits of a noisy
float can learn more than the accountant says (Mironov 2012), and a seeded PRNG is no defence
against one who knows the seed. `secure_noise: true` (`SecureNoise`) closes both.

Secure samplers. Exact discrete Gaussian and discrete Laplace noise on a grid (Canonne, Kamath
& Steinke 2020), sampled by OpenDP (a maintained, audited library, rather than a sampler of
our own) from the operating system's entropy. The statistic, computed in float64, is rounded
to the grid gamma = 2^(floor(log2 sensitivity) - GRID_BITS) and the noise is added in integer
grid units, so the output reveals nothing through its bits. Rounding moves each coordinate by
at most half a unit, and float64 summation of up to `MAX_SECURE_RECORDS` clipped records errs
by less than half a unit, so the grid statistic's sensitivity is at most
sensitivity / gamma + 1 + sqrt(d) (l2; + d in l1). The noise scale is that bound times the
planned noise multiplier, so the planned DpEvent stays valid: the accounting is unchanged and
the price is noise larger by (1 + sqrt(d)) / 2^GRID_BITS relative (0.27% for d = 100). The
discrete Gaussian's privacy equals the continuous one's up to terms of order
exp(-2 pi^2 sigma^2 k / (k + 1)) in the grid-unit scale sigma (CKS20, Sec. 4); here sigma >=
2^GRID_BITS * noise multiplier, so they underflow to 0. Cost: about 15 us per noise coordinate
on one core (OpenDP samples exactly, with arbitrary-precision arithmetic), against tens of ns
for the float samplers; results are not reproducible from the seed (that is the point).

Randomized response (k-ary, local DP). The float sampler draws two float64 uniforms per value
from the mechanism's seeded stream: the first keeps the value when below the keep probability
(so the realised probability is a multiple of 2^-53, within 2^-53 of the planned one), the
second picks one of the k - 1 other values. The secure sampler is OpenDP's exact randomized
response (`make_randomized_response`) on the operating system's entropy, one value at a time.

Every release calls `_release`, so a verification harness can watch or replace what a method
releases (`observe_releases`): the data-access check replays one run's releases into another.
The runner never installs an observer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Literal, TypeVar

import numpy as np
import torch

from fairbench.errors import ConfigError
from fairbench.privacy.sync import host_reads_free

Kind = Literal["gaussian", "laplace", "randomized_response"]
Value = TypeVar("Value", torch.Tensor, np.ndarray, list[torch.Tensor | np.ndarray])
# (kind, exact value, noisy value) -> the value the method receives
ReleaseObserver = Callable[[Kind, Value, Value], Value]

UNIFORM_WORDS = 3  # 53-bit words per fine uniform: its smallest value is 2^-160
SMALLEST_UNIFORM = 2.0 ** (-53 * UNIFORM_WORDS - 1)
TAIL_MASS = 5_163_855_649 * 2.0**-53  # P(|Z| > TAIL_START), 2 Q(5) rounded to 2^-53
TAIL_START = 5.000000000007513  # -ndtri(TAIL_MASS / 2)
GAUSSIAN_SUPPORT = 15.6394224  # -ndtri(TAIL_MASS / 2 * SMALLEST_UNIFORM): the largest |z|
LAPLACE_SUPPORT = -math.log(SMALLEST_UNIFORM)
GRID_BITS = 12
MAX_SECURE_RECORDS = 500_000  # float64 sums of this many clipped records err < gamma / 2
OPENDP_MISSING = "secure_noise needs OpenDP's samplers: pip install 'dp-fairbench[secure]'"

_observer: ReleaseObserver | None = None


@contextmanager
def observe_releases(observer: ReleaseObserver) -> Iterator[None]:
    """Route every release made inside the block through `observer` (not re-entrant)."""
    global _observer
    if _observer is not None:
        raise RuntimeError("a release observer is already installed")
    _observer = observer
    try:
        yield
    finally:
        _observer = None


def _release(kind: Kind, exact: Value, noisy: Value) -> Value:
    return noisy if _observer is None else _observer(kind, exact, noisy)


def fine_uniform(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """float64 uniform on (0, 1], resolved to 2^-160 near 0: three 53-bit words, each one
    filling in below the last (u = w0 + 2^-53 (w1 + 2^-53 (w2 + 2^-54)))."""
    return _fine(_words(UNIFORM_WORDS, shape, generator))


def _words(count: int, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return torch.rand(
        (count, *shape), generator=generator, dtype=torch.float64, device=generator.device
    )


def _fine(words: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """The fine uniform of the first `UNIFORM_WORDS` words (a tensor's leading axis, or
    already unbound)."""
    if isinstance(words, torch.Tensor):
        words = words[:UNIFORM_WORDS].unbind(0)
    *above, u = words
    u = u + 2.0**-54
    for word in reversed(above):
        u = torch.add(word, u, alpha=2.0**-53)
    return u


def _laplace(words: torch.Tensor) -> torch.Tensor:
    """Standard Laplace from `UNIFORM_WORDS` + 1 words: a fine uniform's -log, then a sign
    (the words unbound in one call: a release's draw is small, each call counts)."""
    *fine, sign = words.unbind(0)
    return _with_signs(_fine(fine).log_().neg_(), sign)


def _with_signs(magnitudes: torch.Tensor, word: torch.Tensor) -> torch.Tensor:
    """Each magnitude with a fair random sign: negative exactly when `word` < 1/2."""
    return torch.copysign(magnitudes, word - 0.5)


def standard_gaussian(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """float64 N(0, 1) as an exact mixture: with probability TAIL_MASS (a multiple of 2^-53,
    so one 53-bit uniform selects it exactly) a draw from the tail |Z| > TAIL_START, otherwise
    torch's float64 normal conditioned on |Z| <= TAIL_START (redrawn beyond it). The body
    needs no more than torch's 53-bit uniforms resolve; the tail is `gaussian_tail`'s.
    Off the CPU, `dense_standard_gaussian` (the redraws would read values on the host)."""
    device = generator.device
    if not host_reads_free(device):
        return dense_standard_gaussian(shape, generator)
    z = torch.randn(shape, generator=generator, dtype=torch.float64, device=device)
    tail = torch.rand(shape, generator=generator, dtype=torch.float64, device=device) < TAIL_MASS
    beyond = z.abs() > TAIL_START
    if not bool((beyond | tail).any()):  # the common case: 1.1e-6 of the draws are either
        return z
    return _rare_draws(z, tail, beyond, generator)


def _rare_draws(
    z: torch.Tensor, tail: torch.Tensor, beyond: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """`standard_gaussian`'s rare path: body draws past the tail start redrawn, tail-selected
    coordinates drawn from the tail, continuing `generator`."""
    device = generator.device
    beyond &= ~tail  # body draws past the tail start: redrawn
    while bool(beyond.any()):
        z[beyond] = torch.randn(
            int(beyond.sum()), generator=generator, dtype=torch.float64, device=device
        )
        beyond &= z.abs() > TAIL_START
    if bool(tail.any()):
        z[tail] = gaussian_tail(int(tail.sum()), generator)
    return z


def dense_standard_gaussian(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """float64 N(0, 1), the same exact mixture as `standard_gaussian` with no data-dependent
    control flow (no host read), for accelerators. |Z| is the normal quantile of its two-sided
    tail probability p = P(|Z| > |z|), which is uniform on (0, 1]: one 53-bit uniform w selects
    the tail when w < TAIL_MASS (probability TAIL_MASS, exactly) and otherwise is p itself,
    uniform on [TAIL_MASS, 1), a body draw |Z| <= TAIL_START resolved to 2^-53 in p; in the
    tail p is a fine uniform times TAIL_MASS (`gaussian_tail`'s draw, resolved to 2^-160).
    Both are computed for every coordinate and one quantile taken; a last word gives the sign.
    Not the CPU's draws (that one uses torch's normal for the body), the same distribution."""
    return _dense_gaussian(_words(UNIFORM_WORDS + 2, shape, generator))


def _dense_gaussian(words: torch.Tensor) -> torch.Tensor:
    """`dense_standard_gaussian` from its words: select/body, 3 fine words, sign."""
    tail = words[0] < TAIL_MASS
    p = torch.where(tail, _fine(words[1 : UNIFORM_WORDS + 1]).mul_(TAIL_MASS), words[0])
    magnitude = torch.special.ndtri(p.mul_(0.5)).neg_()
    return _with_signs(magnitude, words[UNIFORM_WORDS + 1])


def gaussian_tail(count: int, generator: torch.Generator) -> torch.Tensor:
    """`count` draws of Z given |Z| > TAIL_START: a sign times the normal quantile of a tail
    probability uniform on (0, TAIL_MASS / 2], resolved to 2^-160 of it (support 15.6 sigma)."""
    words = _words(UNIFORM_WORDS + 1, (count,), generator)
    depth = torch.special.ndtri(_fine(words).mul_(TAIL_MASS / 2)).neg_()
    return _with_signs(depth, words[UNIFORM_WORDS])


def stacked_standard_gaussian(generators: list[torch.Generator], width: int) -> torch.Tensor:
    """(T, width): row t is `standard_gaussian((width,), generators[t])`, draw for draw; the
    per-row draws are torch's, the rest is one tensor program over the stack."""
    if not host_reads_free(generators[0].device):
        return _dense_gaussian(_stacked_words(UNIFORM_WORDS + 2, generators, width))
    shape, device = (len(generators), width), generators[0].device
    if len(generators) == 1:  # one trial: its draws straight into its (1, width) row
        z = torch.randn(shape, generator=generators[0], dtype=torch.float64, device=device)
        u = torch.rand(shape, generator=generators[0], dtype=torch.float64, device=device)
    else:
        z, u = (torch.empty(shape, dtype=torch.float64, device=device) for _ in range(2))
        for t, generator in enumerate(generators):
            torch.randn((width,), generator=generator, dtype=torch.float64, out=z[t])
            torch.rand((width,), generator=generator, dtype=torch.float64, out=u[t])
    tail, beyond = u < TAIL_MASS, z.abs() > TAIL_START
    flagged = beyond | tail
    if bool(flagged.any()):
        for t in flagged.any(dim=1).nonzero().flatten().tolist():
            z[t] = _rare_draws(z[t], tail[t], beyond[t], generators[t])
    return z


def standard_laplace(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """float64 Laplace(0, 1): a sign times an exponential (-log of a fine uniform)."""
    return _laplace(_words(UNIFORM_WORDS + 1, shape, generator))


def stacked_standard_laplace(generators: list[torch.Generator], width: int) -> torch.Tensor:
    """(T, width): row t is `standard_laplace((width,), generators[t])`, draw for draw."""
    return _laplace(_stacked_words(UNIFORM_WORDS + 1, generators, width))


def _stacked_words(count: int, generators: list[torch.Generator], width: int) -> torch.Tensor:
    """(count, T, width): trial t's `_words(count, (width,), generators[t])` at [:, t] (one
    trial: its words, drawn as they are, with the trial axis added)."""
    if len(generators) == 1:
        return _words(count, (width,), generators[0]).unsqueeze(1)
    words = torch.empty(
        (len(generators), count, width), dtype=torch.float64, device=generators[0].device
    )
    for row, generator in zip(words, generators, strict=True):
        torch.rand((count, width), generator=generator, dtype=torch.float64, out=row)
    return words.transpose(0, 1)


class FloatNoise:
    """The default samplers, on one seeded stream (see the module docstring)."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def gaussian(
        self, values: torch.Tensor, noise_multiplier: float, sensitivity: float, records: int
    ) -> torch.Tensor:
        """`values` (float64) plus N(0, (noise_multiplier * sensitivity)^2) per coordinate."""
        noise = standard_gaussian(tuple(values.shape), self.generator)
        return values + noise.mul_(noise_multiplier * sensitivity)

    def laplace(
        self, values: torch.Tensor, scale: float, sensitivity: float, records: int
    ) -> torch.Tensor:
        """`values` (float64) plus Laplace(scale * sensitivity) per coordinate (l1)."""
        return values + standard_laplace(tuple(values.shape), self.generator).mul_(
            scale * sensitivity
        )

    def randomized_response(self, values: torch.Tensor, keep: float, k: int) -> torch.Tensor:
        """Each of `values` (int64 in range(k)) kept with probability `keep`, otherwise moved
        to one of the other k - 1 values uniformly."""
        u = torch.rand(
            (2, *values.shape), generator=self.generator, dtype=torch.float64, device=values.device
        )
        other = (values + 1 + torch.floor(u[1] * (k - 1)).long()) % k
        return torch.where(u[0] < keep, values, other)


class SecureNoise:
    """Exact discrete noise on a grid, from OpenDP (see the module docstring)."""

    def randomized_response(self, values: torch.Tensor, keep: float, k: int) -> torch.Tensor:
        draw = _opendp_randomized_response(k, keep)
        noisy = [draw(v) for v in values.detach().cpu().tolist()]
        return torch.tensor(noisy, dtype=values.dtype, device=values.device)

    def gaussian(
        self, values: torch.Tensor, noise_multiplier: float, sensitivity: float, records: int
    ) -> torch.Tensor:
        grid, units = _on_grid(values, sensitivity, records)
        bound = sensitivity / grid + 1 + math.sqrt(units.numel())
        noisy = _opendp_sampler("gaussian", noise_multiplier * bound)(units.tolist())
        return _off_grid(noisy, grid, values)

    def laplace(
        self, values: torch.Tensor, scale: float, sensitivity: float, records: int
    ) -> torch.Tensor:
        grid, units = _on_grid(values, sensitivity, records)
        bound = sensitivity / grid + 1 + units.numel()
        noisy = _opendp_sampler("laplace", scale * bound)(units.tolist())
        return _off_grid(noisy, grid, values)


def _on_grid(values: torch.Tensor, sensitivity: float, records: int) -> tuple[float, torch.Tensor]:
    if records > MAX_SECURE_RECORDS:
        raise ConfigError(
            f"secure_noise rounds statistics of at most {MAX_SECURE_RECORDS:,} records to its "
            f"grid (float64 summation error must stay under half a grid unit); this release "
            f"reads {records:,}: subsample the data or turn secure_noise off"
        )
    grid = 2.0 ** (math.floor(math.log2(sensitivity)) - GRID_BITS)
    return grid, torch.round(values.detach().cpu().double().flatten() / grid).to(torch.int64)


def _off_grid(noisy: list[int], grid: float, like: torch.Tensor) -> torch.Tensor:
    out = torch.tensor(noisy, dtype=torch.float64).mul_(grid)
    return out.reshape(like.shape).to(like.device)


@lru_cache(maxsize=64)
def _opendp_sampler(kind: Kind, scale: float) -> Callable[[list[int]], list[int]]:
    """OpenDP's exact discrete Gaussian / Laplace on i64 vectors, noise scale `scale`."""
    try:
        import opendp.prelude as dp
    except ImportError as exc:
        raise ConfigError(OPENDP_MISSING) from exc

    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T="i64"))
    if kind == "gaussian":
        return dp.m.make_gaussian(domain, dp.l2_distance(T="i64"), scale=scale)
    return dp.m.make_laplace(domain, dp.l1_distance(T="i64"), scale=scale)


@lru_cache(maxsize=16)
def _opendp_randomized_response(k: int, keep: float) -> Callable[[int], int]:
    """OpenDP's exact k-ary randomized response on i64 values in range(k)."""
    try:
        import opendp.prelude as dp
    except ImportError as exc:
        raise ConfigError(OPENDP_MISSING) from exc

    dp.enable_features("contrib")
    return dp.m.make_randomized_response(list(range(k)), keep, T="i64")


NoiseSource = FloatNoise | SecureNoise


def randomized_response(
    noise: NoiseSource, values: torch.Tensor, keep: float, k: int
) -> torch.Tensor:
    """One release of `values` (int64 in range(k)) by k-ary randomized response."""
    return _release("randomized_response", values, noise.randomized_response(values, keep, k))


def noisy_sums(
    kind: Kind, noise: NoiseSource, sums: list, multiplier: float, sensitivity: float, records: int
) -> list:
    """One release of the concatenated `sums` (torch or numpy, any float dtype): computed in
    float64, returned in each sum's own type and dtype."""
    parts = [
        torch.from_numpy(np.asarray(s, dtype=np.float64))
        if isinstance(s, np.ndarray)
        else s.double()
        for s in sums
    ]
    flat = parts[0].reshape(-1) if len(parts) == 1 else torch.cat([p.reshape(-1) for p in parts])
    draw = noise.gaussian if kind == "gaussian" else noise.laplace
    pieces = draw(flat, multiplier, sensitivity, records).split([p.numel() for p in parts])
    noisy = [_like(piece.view(s.shape), s) for piece, s in zip(pieces, sums, strict=True)]
    return _release(kind, sums, noisy)


def stacked_noisy_sums(
    kind: Kind,
    sources: list[NoiseSource],
    sums: list[torch.Tensor],
    multipliers: list[float],
    sensitivities: list[float],
    records: list[int],
) -> list[torch.Tensor]:
    """T releases at once: trial t's release of the concatenated `[s[t] for s in sums]`
    (each sum stacked on a leading trial axis) from `sources[t]` at its own noise multiplier
    and sensitivity, equal to `noisy_sums` of that trial alone. Float samplers draw each
    trial's noise from its own stream and add it in one tensor program (its scale one float
    where every trial's is the same, else a float64 column of the trials' own); other
    sources (or an installed observer) go trial by trial."""
    n_trials = len(sources)
    floats = [x for x in sources if isinstance(x, FloatNoise)]
    if _observer is not None or len(floats) != n_trials:
        per_trial = [
            noisy_sums(kind, source, [s[t] for s in sums], mult, sens, records[t])
            for t, (source, mult, sens) in enumerate(
                zip(sources, multipliers, sensitivities, strict=True)
            )
        ]
        return [torch.stack(parts) for parts in zip(*per_trial, strict=True)]
    # concatenated, then in float64 (exact either way), then back in the sums' one dtype and
    # split: one conversion each way, not one per sum, and none of it for a single sum
    flat = sums[0].reshape(n_trials, -1)
    if len(sums) > 1:
        flat = torch.cat([s.reshape(n_trials, -1) for s in sums], dim=1)
    draw = stacked_standard_gaussian if kind == "gaussian" else stacked_standard_laplace
    noise = draw([x.generator for x in floats], flat.shape[1])
    scales = [m * s for m, s in zip(multipliers, sensitivities, strict=True)]
    scale: float | torch.Tensor = scales[0]
    if len(set(scales)) > 1:
        scale = torch.tensor(scales, dtype=torch.float64, device=flat.device).unsqueeze(1)
    noisy = flat.double() + noise.mul_(scale)
    dtypes = {s.dtype for s in sums}
    if len(dtypes) == 1:
        noisy = noisy.to(dtypes.pop())
    if len(sums) == 1:
        return [noisy.view(sums[0].shape).to(sums[0].dtype)]
    pieces = noisy.split_with_sizes([s[0].numel() for s in sums], 1)
    return [piece.reshape(s.shape).to(s.dtype) for piece, s in zip(pieces, sums, strict=True)]


def _like(value: torch.Tensor, like: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
    """`value` in the type and dtype of `like`."""
    if isinstance(like, np.ndarray):
        return value.numpy().astype(like.dtype)
    return value.to(like.dtype)


def noisy_symmetric(
    noise: NoiseSource, matrix: np.ndarray, multiplier: float, sensitivity: float, records: int
) -> np.ndarray:
    """A symmetric matrix plus symmetric Gaussian noise, i.i.d. on and above the diagonal
    (Analyze-Gauss: one record moves the matrix by a symmetric outer product)."""
    upper = np.triu_indices(len(matrix))
    values = torch.as_tensor(matrix[upper], dtype=torch.float64)
    noisy_upper = noise.gaussian(values, multiplier, sensitivity, records).numpy()
    noisy = np.zeros_like(matrix, dtype=np.float64)
    noisy[upper] = noisy_upper
    noisy = noisy + np.triu(noisy, 1).T
    return _release("gaussian", matrix, noisy.astype(matrix.dtype))
