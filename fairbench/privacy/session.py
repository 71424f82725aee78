"""A trial's privacy session: the only source of privacy noise, and the ledger it writes.

The ledger is produced by the noise, not declared beside it. A method obtains its mechanisms
(clipped Gaussian sums, Gaussian counts, Laplace histograms, Analyze-Gauss Gram matrices)
and its Poisson sampler from the session; every mechanism call draws its noise and records
its DpEvent at that moment, tagged with the batch it read. Before the first draw the method
submits its plan (the events it will run). A release the plan does not allow (another noise
multiplier, a release it never mentions, one step more than planned) is refused before its
noise is drawn; `check_plan` compares what was recorded with what was planned at the end
(fewer rounds than planned also differ), and the runner refuses to store such a trial.

Mechanisms bound sensitivities themselves: a sum clips each record's contribution (the suite's
one clipping rule, `contributions.clipped_sum`), a count builds its counts from cell indices,
a histogram refuses rows of l1 norm above 1. The recorded noise multiplier is the one the
noise was drawn with, so a variant that draws less noise than it planned, releases something
it did not plan, runs an extra step or widens a clip records exactly that.

Ledger form. Releases on one Poisson batch share its sampling: a round is
`PoissonSampledDpEvent(q, release)` or, for several releases on the batch,
`PoissonSampledDpEvent(q, ComposedDpEvent([...]))` (`SubstitutionSampledDpEvent` under the
sensitive-attribute notion). Identical rounds (and identical full-data releases) are counted
into one `SelfComposedDpEvent`; entries are ordered sampled rounds first, each sorted by its
event's text, which is the form the calibration routines account (so epsilons agree exactly).

Local DP of the attribute (`PrivacyNotion.LOCAL_ATTRIBUTE`). Each record's group is
released once by k-ary randomized response (`randomized_response`) before the learner sees
it, and the rest of the record is public: there is no curator, so a session of that notion
draws no central release (a sum, count, histogram or Gram matrix is refused), and randomized
response is refused under the other notions. Its ledger is one randomized-response event:
records are released by independent randomizers, each once, so the epsilon is each record's.

Random streams (`fairbench.streams`). Poisson batches come from the stream "sampling"; each
mechanism draws its noise from its own stream "noise/<label>" ("noise/<label>/group<k>" for a
group's), on the device of the statistic it noises, so mechanisms never share noise and a
method that adds a release leaves every other release's noise unchanged. A mechanism built
twice under one name continues its stream (it never replays noise). `stream` and `rng` give
a method streams of its own for non-private choices. With `secure_noise` the noise comes from
OpenDP's exact discrete samplers and the operating system's entropy instead
(`privacy.noise.SecureNoise`): the plan and the ledger are the same, the noise is not seeded.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

import numpy as np
import torch
from dp_accounting import dp_event

from fairbench.errors import FairbenchError
from fairbench.privacy import events
from fairbench.privacy.budget import PrivacyBudget
from fairbench.privacy.contributions import (
    Array,
    Contributions,
    as_float64,
    clip_factors,
    clipped_sum,
)
from fairbench.privacy.ledger import PrivacyLedger
from fairbench.privacy.noise import (
    FloatNoise,
    NoiseSource,
    SecureNoise,
    noisy_sums,
    noisy_symmetric,
    randomized_response,
)
from fairbench.privacy.pld import SubstitutionSampledDpEvent
from fairbench.privacy.sampling import poisson_batches, shuffled_batches
from fairbench.privacy.sync import DeviceChecks, host_reads_free
from fairbench.streams import numpy_stream, torch_stream

L1_ROUNDING = 1e-6  # a float32 softmax row sums to 1 within this


class PrivacyNotion(str, Enum):
    """Which neighbouring datasets a trial's guarantee is stated for."""

    FULL = "full"  # add or remove one whole record
    SENSITIVE_ATTRIBUTE = "sensitive-attribute"  # one record's group substituted
    # each record's group released by a local randomizer, the rest of the record public
    LOCAL_ATTRIBUTE = "local-dp-attribute"
    NONE = "non-private"


@dataclass(frozen=True)
class Guarantee:
    """What a private trial's epsilon is a statement about: the neighbouring datasets
    (`notion`) and the statistics of the training data the method reads exactly and treats as
    public (`public`, e.g. "marginals"). Only the full notion with nothing read exactly is
    (epsilon, delta)-DP for the whole record, the one guarantee a release may state;
    `because` names the hyper-parameters that made it partial (for the error that says so)."""

    notion: PrivacyNotion = PrivacyNotion.FULL
    public: tuple[str, ...] = ()
    because: tuple[str, ...] = field(default=(), compare=False)

    @property
    def whole_record(self) -> bool:
        return self.notion is PrivacyNotion.FULL and not self.public

    @property
    def label(self) -> str:
        """The row's `privacy_notion`: the notion, then `+public-<statistic>` per exact read."""
        return self.notion.value + "".join(f"+public-{name}" for name in self.public)

    def shortfall(self) -> str:
        """Why it is not whole-record DP ("" when it is)."""
        if self.notion is PrivacyNotion.NONE:
            return "it is not private"
        reasons = (
            []
            if self.notion is PrivacyNotion.FULL
            else [f"its epsilon is stated for the {self.notion.value} notion only"]
        )
        reasons += [f"it reads the {name.replace('-', ' ')} exactly" for name in self.public]
        return " and ".join(reasons)


class PrivacyContractError(FairbenchError):
    """A method drew noise outside its plan, or its recorded events differ from the plan."""


@dataclass(frozen=True)
class Batch:
    """Indices of one sampled batch; `rate` None marks a full, unsampled pass."""

    indices: torch.Tensor
    rate: float | None
    round: int


@dataclass(frozen=True)
class Release:
    """One noisy release as drawn: its unsampled event and where it read."""

    label: str
    event: dp_event.DpEvent
    round: int | None  # the Poisson round it read; None: the whole dataset
    rate: float | None
    group: int | None  # the only group whose records it read (None: all)


@dataclass
class PrivacySession:
    """One trial's noise and ledger. `budget` None: a non-private trial, whose mechanisms
    return exact statistics and record nothing."""

    seed: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    budget: PrivacyBudget | None = None
    releases: list[Release] = field(default_factory=list)
    plan: PrivacyLedger | None = None
    guarantee: Guarantee = field(default_factory=Guarantee)
    secure_noise: bool = False

    def __post_init__(self) -> None:
        self.device = torch.device(self.device)
        self._streams: dict[tuple[str, str], torch.Generator] = {}
        self._noise: dict[tuple[str, str], NoiseSource] = {}
        self._rounds = 0
        self._allowance: Counter[tuple] = Counter()
        self._drawn: Counter[tuple] = Counter()
        self._texts: dict[int, tuple[dp_event.DpEvent, str]] = {}
        self._ledger: tuple[tuple, PrivacyLedger] | None = None
        self.extended = False  # the plan grew after training began (`extend_plan`)
        self.checks = DeviceChecks()  # read once after training (`privacy.sync`)
        if self.budget is None:
            self.guarantee = Guarantee(PrivacyNotion.NONE)

    @property
    def notion(self) -> PrivacyNotion:
        return self.guarantee.notion

    @property
    def private(self) -> bool:
        return self.budget is not None

    # -- the plan -----------------------------------------------------------------------------
    def submit_plan(
        self, plan: PrivacyLedger, guarantee: Guarantee | PrivacyNotion = PrivacyNotion.FULL
    ) -> None:
        """Declare the events this trial will run, before any noise is drawn, and what its
        epsilon is a statement about (a bare notion: nothing read exactly). A plan may be
        extended (`extend_plan`) by releases whose parameters depend on earlier noisy output."""
        if self.plan is not None:
            raise PrivacyContractError("a plan was already submitted; use extend_plan")
        self.plan = PrivacyLedger(list(plan.entries), plan.parallel_groups)
        self._allowance = planned_releases(self.plan)
        if self.private:
            self.guarantee = (
                guarantee
                if isinstance(guarantee, Guarantee)
                else Guarantee(PrivacyNotion(guarantee))
            )

    def extend_plan(self, entries: PrivacyLedger) -> None:
        """Add planned entries after an adaptive stage (e.g. budgets set by noisy outputs)."""
        if self.plan is None:
            raise PrivacyContractError("submit a plan before extending it")
        self.plan.entries.extend(entries.entries)
        self._allowance += planned_releases(entries)
        self.extended = True

    # -- random streams -----------------------------------------------------------------------
    def stream(self, name: str, device: torch.device | str | None = None) -> torch.Generator:
        """The trial's torch stream `name` on `device` (the trial's by default), created once:
        asking again continues it."""
        device = torch.device(self.device if device is None else device)
        key = (name, str(device))
        if key not in self._streams:
            self._streams[key] = torch_stream(self.seed, name, device)
        return self._streams[key]

    def rng(self, name: str) -> np.random.Generator:
        """A fresh numpy generator on the trial's stream `name` (a method's own choices)."""
        return numpy_stream(self.seed, name)

    def noise(self, label: str, group: int | None, device: torch.device) -> NoiseSource:
        """The noise source of mechanism `label` (of `group`) for statistics on `device`."""
        name = f"noise/{label}" if group is None else f"noise/{label}/group{group}"
        key = (name, str(device))
        if key not in self._noise:
            self._noise[key] = (
                SecureNoise() if self.secure_noise else FloatNoise(self.stream(name, device))
            )
        return self._noise[key]

    # -- sampling -----------------------------------------------------------------------------
    def poisson(self, n: int, rate: float) -> Callable[[], Batch]:
        """Poisson batches (each record independently with probability `rate`), the sampling
        the accountant amplifies by; batches are numbered so releases can name theirs."""
        draw = poisson_batches(n, rate, self.stream("sampling"), self.device, self.checks)
        return lambda: self.numbered(draw(), rate)

    def numbered(self, indices: torch.Tensor, rate: float) -> Batch:
        """The session's next Poisson round, of `indices` drawn from its "sampling" stream."""
        self._rounds += 1
        return Batch(indices, rate, self._rounds)

    def shuffled(self, n: int, batch_size: int, drop_last: bool = False) -> Callable[[], Batch]:
        """Batches from a fresh permutation each epoch (`sampling.shuffled_batches`; with
        `drop_last` each epoch's n mod batch_size records left over are skipped). Shuffling
        gives no amplification the accountant models: a private trial draws them only when its
        plan declares it not accounted (`unaccounted`); releases on them are recorded as
        unsampled."""
        if self.private and not self.not_accounted:
            raise PrivacyContractError(
                "a private trial samples Poisson batches, not shuffles (unless its plan "
                "declares it not accounted)"
            )
        draw = shuffled_batches(n, batch_size, self.stream("sampling"), self.device, drop_last)
        return lambda: Batch(draw(), None, 0)

    @property
    def not_accounted(self) -> bool:
        """The submitted plan declares the trial not accounted (its epsilon is infinite)."""
        return self.plan is not None and any(
            events.not_accounted(entry.event) for entry in self.plan.entries
        )

    def unaccounted(self, label: str) -> None:
        """Record the release that makes a trial not accounted: one `NonPrivateDpEvent`,
        planned like any other, for a run the suite cannot account (a parity run with an
        author's choice, e.g. shuffled batches or noise from a paper's closed form). The
        trial's epsilon is then infinite: its row never states a false one."""
        if self.private:
            self._record(label, dp_event.NonPrivateDpEvent(), None, None)

    # -- mechanisms ---------------------------------------------------------------------------
    def gaussian_sum(
        self, label: str, clip: float, noise_multiplier: float, group: int | None = None
    ) -> GaussianSum:
        return GaussianSum(self, label, clip, noise_multiplier, group)

    def gaussian_counts(
        self, label: str, noise_multiplier: float, group: int | None = None
    ) -> GaussianCounts:
        return GaussianCounts(self, label, noise_multiplier, group)

    def laplace_histogram(
        self, label: str, scale: float, group: int | None = None
    ) -> LaplaceHistogram:
        return LaplaceHistogram(self, label, scale, group)

    def gaussian_gram(self, label: str, clip: float, noise_multiplier: float) -> GaussianGram:
        return GaussianGram(self, label, clip, noise_multiplier)

    def randomized_response(
        self, label: str, event: dp_event.RandomizedResponseDpEvent
    ) -> RandomizedResponse:
        return RandomizedResponse(self, label, event)

    def substitution_factor(self, substituted: float) -> float:
        """How far one neighbour moves a per-record quantity bounded by 1 under add/remove:
        1, or `substituted` when neighbours swap one record's group (2 for a clipped vector,
        sqrt 2 for a count vector, whose record leaves one cell and enters another)."""
        return substituted if self.notion is PrivacyNotion.SENSITIVE_ATTRIBUTE else 1.0

    def _record(self, label: str, event, batch: Batch | None, group: int | None) -> None:
        if self.plan is None:
            raise PrivacyContractError(
                f"undeclared release {label!r}: submit the trial's plan before drawing noise"
            )
        rate = None if batch is None else batch.rate
        round_ = None if batch is None or batch.rate is None else batch.round
        key = (rate, self._text(event), group)
        self._drawn[key] += 1
        if self._drawn[key] > self._allowance[key]:  # refused before its noise is drawn
            raise PrivacyContractError(
                f"release {label!r} beyond the plan: {event} (sampling rate {rate}) drawn "
                f"{self._drawn[key]} time(s), planned {self._allowance[key]}"
            )
        self.releases.append(Release(label, event, round_, rate, group))

    def _text(self, event: dp_event.DpEvent) -> str:
        """repr(event), computed once per event object (a mechanism records one per step)."""
        hit = self._texts.get(id(event))
        if hit is None or hit[0] is not event:
            hit = self._texts[id(event)] = (event, repr(event))
        return hit[1]

    def _check_noise(self, label: str, noise_multiplier: float, sensitivity: float) -> bool:
        """True when noise is to be drawn; a private session refuses a noiseless release."""
        if not self.private:
            return False
        if self.notion is PrivacyNotion.LOCAL_ATTRIBUTE:
            raise PrivacyContractError(
                f"release {label!r}: a central release in a session of the local-dp-attribute "
                "notion, whose only releases are each record's randomized response"
            )
        if not (noise_multiplier > 0 and math.isfinite(sensitivity)):
            raise PrivacyContractError(
                f"release {label!r}: a private trial needs a noise multiplier > 0 and a finite "
                f"sensitivity (got {noise_multiplier}, {sensitivity})"
            )
        return True

    # -- the ledger ---------------------------------------------------------------------------
    def ledger(self) -> PrivacyLedger:
        """What was recorded, in the accountant's form (see the module docstring); built once
        per state of the record (a long run's ledger takes a while to group)."""
        parallel = self.plan.parallel_groups if self.plan is not None else False
        state = (len(self.releases), self.notion, parallel)
        if self._ledger is None or self._ledger[0] != state:
            self._ledger = (state, ledger_of(self.releases, self.notion, parallel))
        built = self._ledger[1]
        return PrivacyLedger(list(built.entries), built.parallel_groups)


class GaussianSum:
    """sum_i clip(v_i, clip) + N(0, (noise_multiplier * sensitivity)^2 I), where the
    sensitivity is the clip (twice it when neighbours substitute a record's group)."""

    def __init__(self, session, label, clip, noise_multiplier, group) -> None:
        self.session, self.label, self.clip = session, label, clip
        self.noise_multiplier, self.group = noise_multiplier, group
        self._event = dp_event.GaussianDpEvent(noise_multiplier)

    @property
    def secure(self) -> bool:
        """Exact discrete noise: the sum is taken in float64 for its grid."""
        return self.session.private and self.session.secure_noise

    def __call__(self, contributions: Contributions, batch: Batch | None = None) -> list[Array]:
        exact = clipped_sum(as_float64(contributions) if self.secure else contributions, self.clip)
        noisy = self.release(exact, len(contributions), batch)
        return [_as_dtype(v, contributions.dtype) for v in noisy] if self.secure else noisy

    @property
    def sensitivity(self) -> float:
        return self.clip * self.session.substitution_factor(2.0)

    def release(self, exact: list[Array], records: int, batch: Batch | None) -> list[Array]:
        """The noisy release of `exact`, a clipped sum over `records` records."""
        noise = self.record(batch, _device(exact[0]))
        if noise is None:
            return exact
        return noisy_sums(
            "gaussian", noise, exact, self.noise_multiplier, self.sensitivity, records
        )

    def record(self, batch: Batch | None, device: torch.device) -> NoiseSource | None:
        """Check and record one release (refused beyond the plan, before any noise is drawn):
        the noise source to draw it from on `device`, None in a non-private session."""
        session = self.session
        if not session._check_noise(self.label, self.noise_multiplier, self.sensitivity):
            return None
        session._record(self.label, self._event, batch, self.group)
        return session.noise(self.label, self.group, device)


Cells = TypeVar("Cells", torch.Tensor, np.ndarray)


class GaussianCounts:
    """How many records fall in each of `n_cells` cells, plus N(0, (nm * sensitivity)^2) per
    cell. Each record is in one cell, so the l2 sensitivity is 1 (sqrt 2 under substitution)."""

    def __init__(self, session, label, noise_multiplier, group) -> None:
        self.session, self.label = session, label
        self.noise_multiplier, self.group = noise_multiplier, group

    def __call__(self, cells: Cells, n_cells: int, batch: Batch | None = None) -> Cells:
        if isinstance(cells, np.ndarray):
            counts = np.bincount(cells, minlength=n_cells).astype(np.float64)
        else:
            ones = torch.ones(len(cells), dtype=torch.float64, device=cells.device)
            counts = torch.zeros(n_cells, dtype=torch.float64, device=cells.device)
            counts.index_add_(0, cells, ones)
        return self.release(counts, len(cells), batch)

    def release(self, counts: Cells, records: int, batch: Batch | None) -> Cells:
        """The noisy release of `counts`, built from at most `records` records each counted
        in one cell (the caller's construction: `__call__`, `stacked.gaussian_counts`)."""
        sensitivity = self.session.substitution_factor(math.sqrt(2))
        if not self.session._check_noise(self.label, self.noise_multiplier, sensitivity):
            return counts
        self.session._record(
            self.label, dp_event.GaussianDpEvent(self.noise_multiplier), batch, self.group
        )
        noise = self.session.noise(self.label, self.group, _device(counts))
        return noisy_sums("gaussian", noise, [counts], self.noise_multiplier, sensitivity, records)[
            0
        ]


class LaplaceHistogram:
    """H[q, k] = sum of the batch's rows in part q, plus Laplace(scale * sensitivity) per cell.
    Every row must have l1 norm at most 1 (l1 sensitivity 1; 2 under substitution). `group`:
    the only group whose records the rows are (None: any), for parallel composition."""

    def __init__(self, session, label, scale, group=None) -> None:
        self.session, self.label, self.scale, self.group = session, label, scale, group
        self._event = dp_event.LaplaceDpEvent(scale)

    @property
    def secure(self) -> bool:
        """Exact discrete noise: the histogram is summed in float64 for its grid."""
        return self.session.private and self.session.secure_noise

    def __call__(
        self, rows: torch.Tensor, parts: torch.Tensor, n_parts: int, batch: Batch | None = None
    ) -> torch.Tensor:
        summed = rows.double() if self.secure else rows
        hist = torch.zeros((n_parts, rows.shape[1]), dtype=summed.dtype, device=rows.device)
        hist.index_add_(0, parts, summed)
        if self.session.private:
            check_l1_rows(self.label, rows, self.session.checks)
        return self.release(hist, len(rows), batch).to(rows.dtype)

    @property
    def sensitivity(self) -> float:
        return self.session.substitution_factor(2.0)

    def release(self, hist: torch.Tensor, records: int, batch: Batch | None) -> torch.Tensor:
        """The noisy release of `hist`, summed over `records` rows whose l1 norms were checked."""
        noise = self.record(batch, hist.device)
        if noise is None:
            return hist
        return noisy_sums("laplace", noise, [hist], self.scale, self.sensitivity, records)[0]

    def record(self, batch: Batch | None, device: torch.device) -> NoiseSource | None:
        """As `GaussianSum.record`."""
        if not self.session._check_noise(self.label, self.scale, self.sensitivity):
            return None
        self.session._record(self.label, self._event, batch, self.group)
        return self.session.noise(self.label, self.group, device)


class RandomizedResponse:
    """Each record's value (in range(k), k the event's buckets) released once by k-ary
    randomized response: kept with probability e^eps / (e^eps + k - 1), else one of the other
    k - 1 values uniformly (`events.randomized_response`). Pure eps-DP for each record's value
    on its own, with no curator (local DP). Recorded as one event for the whole release: each
    record goes through its own randomizer once, so the records compose in parallel."""

    def __init__(self, session, label, event: dp_event.RandomizedResponseDpEvent) -> None:
        self.session, self.label, self.event = session, label, event

    def __call__(self, values: np.ndarray) -> np.ndarray:
        k = self.event.num_buckets
        if len(values) and not (values.min() >= 0 and values.max() < k):
            raise PrivacyContractError(f"release {self.label!r}: values outside range({k})")
        session = self.session
        if not session.private:
            return values
        if session.notion is not PrivacyNotion.LOCAL_ATTRIBUTE:
            raise PrivacyContractError(
                f"release {self.label!r}: randomized response is the local-dp-attribute "
                f"notion's mechanism, not the {session.notion.value} notion's"
            )
        session._record(self.label, self.event, None, None)
        cpu = torch.device("cpu")
        exact = torch.as_tensor(values, dtype=torch.int64)
        keep = events.keep_probability(self.event)
        noisy = randomized_response(session.noise(self.label, None, cpu), exact, keep, k)
        return noisy.numpy().astype(values.dtype)


def check_l1_rows(label: str, rows: torch.Tensor, checks: DeviceChecks) -> None:
    """Refuse a histogram whose rows (records, last axis: cells) exceed l1 norm 1: its
    sensitivity would exceed the declared one. On the CPU before the noise is drawn; on a
    device after training (`privacy.sync`), before the trial can be stored."""
    if not rows.numel():
        return
    longest = rows.abs().sum(dim=-1).max()

    def error() -> PrivacyContractError:
        return PrivacyContractError(
            f"release {label!r}: a histogram row has l1 norm above 1; its sensitivity "
            "would exceed the declared one"
        )

    if not host_reads_free(rows.device):
        checks.fail_if(label, longest.double() > 1 + L1_ROUNDING, error)
    elif longest.item() > 1 + L1_ROUNDING:  # the float32 value, exactly, as a Python float
        raise error()


class GaussianGram:
    """Analyze-Gauss: sum_i z_i z_i^T over rows clipped to l2 norm `clip`, plus symmetric
    Gaussian noise (one record moves the matrix by at most clip^2 in Frobenius norm)."""

    def __init__(self, session, label, clip, noise_multiplier) -> None:
        self.session, self.label, self.clip = session, label, clip
        self.noise_multiplier = noise_multiplier

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        rows = rows.astype(np.float64)
        zc = rows * clip_factors(np.linalg.norm(rows, axis=1), self.clip)[:, None]
        gram = zc.T @ zc
        sensitivity = self.clip**2 * self.session.substitution_factor(2.0)
        if not self.session._check_noise(self.label, self.noise_multiplier, sensitivity):
            return gram
        self.session._record(
            self.label, dp_event.GaussianDpEvent(self.noise_multiplier), None, None
        )
        noise = self.session.noise(self.label, None, torch.device("cpu"))
        return noisy_symmetric(noise, gram, self.noise_multiplier, sensitivity, len(rows))


def _device(value: Array) -> torch.device:
    return value.device if isinstance(value, torch.Tensor) else torch.device("cpu")


def _as_dtype(value: Array, dtype: torch.dtype | np.dtype) -> Array:
    if isinstance(value, torch.Tensor) and isinstance(dtype, torch.dtype):
        return value.to(dtype)
    if isinstance(value, np.ndarray) and not isinstance(dtype, torch.dtype):
        return value.astype(dtype)
    raise TypeError(f"a {type(value).__name__} cannot take the dtype {dtype}")


def ledger_of(
    releases: list[Release], notion: PrivacyNotion, parallel_groups: bool = False
) -> PrivacyLedger:
    """Releases grouped into rounds (one per Poisson batch, or one per full-data release),
    identical rounds counted into self-compositions. Each distinct round's event is built
    and printed once (a run records tens of thousands of identical rounds)."""
    sampled = (
        SubstitutionSampledDpEvent
        if notion is PrivacyNotion.SENSITIVE_ATTRIBUTE
        else (dp_event.PoissonSampledDpEvent)
    )
    texts: dict[int, str] = {}  # repr by event object: releases keep their events alive

    def text(event: dp_event.DpEvent) -> str:
        if id(event) not in texts:
            texts[id(event)] = repr(event)
        return texts[id(event)]

    by_round: dict[int, list[Release]] = {}
    whole: list[tuple[str, dp_event.DpEvent, int | None]] = []
    for r in releases:
        if r.round is None:
            whole.append((r.label, r.event, r.group))
        else:
            by_round.setdefault(r.round, []).append(r)
    built: dict[tuple, tuple[dp_event.DpEvent, str]] = {}
    events: dict[str, dp_event.DpEvent] = {}
    # DpEvents holding lists do not hash; their text does. Insertion order: sampled first
    counted: Counter[tuple[str, str, int | None]] = Counter()
    for parts in by_round.values():
        parts = sorted(parts, key=lambda r: text(r.event))
        groups = {r.group for r in parts}
        group = groups.pop() if len(groups) == 1 else None
        label = " + ".join(r.label for r in parts)
        key = (label, parts[0].rate, tuple(text(r.event) for r in parts), group)
        if key not in built:
            inner = (
                parts[0].event
                if len(parts) == 1
                else dp_event.ComposedDpEvent([r.event for r in parts])
            )
            rate = parts[0].rate
            assert rate is not None  # a release with a round read a sampled batch (`_record`)
            event = sampled(rate, inner)
            built[key] = (event, repr(event))
        event, event_text = built[key]
        events[event_text] = event
        counted[(label, event_text, group)] += 1
    for label, event, group in whole:
        events[text(event)] = event
        counted[(label, text(event), group)] += 1
    ledger = PrivacyLedger(parallel_groups=parallel_groups)
    for (label, event_text, group), times in counted.items():
        event = events[event_text]
        ledger.record(
            label, event if times == 1 else dp_event.SelfComposedDpEvent(event, times), group
        )
    return ledger


def planned_releases(plan: PrivacyLedger) -> Counter[tuple]:
    """How many times each release may be drawn, by (sampling rate, event, group): the plan's
    rounds unpacked into the releases a session records one by one."""
    out: Counter[tuple] = Counter()
    for entry in plan.entries:
        out += _releases(entry.event, None, entry.group)
    return out


def _releases(event: dp_event.DpEvent, rate: float | None, group: int | None) -> Counter[tuple]:
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return Counter({k: v * event.count for k, v in _releases(event.event, rate, group).items()})
    if isinstance(event, dp_event.ComposedDpEvent):
        total: Counter[tuple] = Counter()
        for e in event.events:
            total += _releases(e, rate, group)
        return total
    if isinstance(event, dp_event.NoOpDpEvent):
        return Counter()
    if isinstance(event, dp_event.PoissonSampledDpEvent | SubstitutionSampledDpEvent):
        return _releases(event.event, event.sampling_probability, group)
    return Counter({(rate, repr(event), group): 1})


def canonical(ledger: PrivacyLedger) -> Counter[tuple[int | None, str]]:
    """The multiset of rounds a ledger composes, by group: two ledgers with equal canonical
    forms account the same mechanisms, however their entries are written."""
    out: Counter[tuple[int | None, str]] = Counter()
    for entry in ledger.entries:
        for atom, times in _atoms(entry.event).items():
            out[(entry.group, atom)] += times
    return out


def _atoms(event: dp_event.DpEvent) -> Counter[str]:
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return Counter({k: v * event.count for k, v in _atoms(event.event).items()})
    if isinstance(event, dp_event.ComposedDpEvent):
        total: Counter[str] = Counter()
        for e in event.events:
            total += _atoms(e)
        return total
    if isinstance(event, dp_event.NoOpDpEvent):
        return Counter()
    if isinstance(event, dp_event.PoissonSampledDpEvent | SubstitutionSampledDpEvent):
        inner = sorted(_atoms(event.event).elements())
        return Counter({f"{type(event).__name__}({event.sampling_probability!r}, {inner})": 1})
    return Counter({repr(event): 1})


def check_plan(method: str, plan: PrivacyLedger | None, recorded: PrivacyLedger) -> None:
    """Raise `PrivacyContractError` naming `method` and the first event whose count differs
    between what it planned and what it recorded."""
    if plan is None:
        if recorded.entries:
            raise PrivacyContractError(f"method {method} drew noise without a plan")
        return
    planned, drawn = canonical(plan), canonical(recorded)
    if planned == drawn:
        return
    for key in list(drawn) + list(planned):
        if planned[key] != drawn[key]:
            group, atom = key
            where = "" if group is None else f" (group {group})"
            raise PrivacyContractError(
                f"method {method}: recorded privacy events differ from its plan: {atom}{where} "
                f"ran {drawn[key]} time(s), planned {planned[key]}"
            )
