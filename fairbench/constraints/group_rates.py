"""Group-rate view of a constraint: each group's rate against a reference population.

Some methods do not train on a `RateConstraintSet`'s terms but compare every group's rate
with a reference, as fairlearn's Moments do for its reductions: PF-LD and Jagielski et al.'s
auditor compare each group with the whole population of its event, Hardt et al.'s
post-processing compares the groups pairwise, dp-fermi conditions its group marginals on the
events. For a constraint name this view says
- its *events*: the sets of true labels a rate is conditioned on; a group's rate in event e
  averages over the records of that group whose label is in e, and its reference population
  is e's records of every group. Demographic and accuracy parity: one event of all labels;
  equalized odds: one per label; false-negative-rate parity (binary): the positive label;
- its *score*: what a rate averages, `prediction` (the predicted class: P(ŷ = k) for each
  class k, class 1 alone for binary tasks, class 0 being its complement) or `error`
  (P(ŷ ≠ y)).
Histograms are read with any leading (trial) axes, either label-resolved (..., groups,
labels) or over the view's own partition, part = event * groups + group (its `part_table`:
the builders' partition for demographic parity and equalized odds; for accuracy parity a
record's row, (1 - p_y, p_y), carries its label instead of its part).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from fairbench.errors import ConfigError

Score = Literal["prediction", "error"]
Events = tuple[tuple[int, ...], ...]  # the true labels of each event


@dataclass(frozen=True)
class GroupRates:
    """A constraint's events (tuples of true labels) and score, on K classes and G groups."""

    name: str
    events: Events
    score: Score
    n_classes: int
    n_groups: int

    @property
    def n_events(self) -> int:
        return len(self.events)

    @property
    def n_parts(self) -> int:
        return self.n_events * self.n_groups

    def event_matrix(self) -> np.ndarray:
        """(events, labels) 0/1: which labels make up each event."""
        matrix = np.zeros((self.n_events, self.n_classes))
        for e, labels in enumerate(self.events):
            matrix[e, list(labels)] = 1.0
        return matrix

    def label_events(self) -> np.ndarray:
        """(labels,) the event of each label (events are disjoint), -1 for a label in none."""
        out = np.full(self.n_classes, -1, dtype=np.int64)
        for e, labels in enumerate(self.events):
            out[list(labels)] = e
        return out

    def _covering_events(self) -> np.ndarray:
        """`label_events`, where every label is in an event (a partition of the records)."""
        events = self.label_events()
        if (events < 0).any():
            raise ConfigError(f"{self.name}: its events leave labels out: no partition")
        return events

    @property
    def part_table(self) -> np.ndarray:
        """(labels, groups) -> part event * G + group: the partition rates are read over."""
        return self._covering_events()[:, None] * self.n_groups + np.arange(self.n_groups)

    def cells(self, y: torch.Tensor) -> torch.Tensor:
        """Each record's event from its label, on the labels' device (read at set-up)."""
        return torch.as_tensor(self._covering_events(), device=y.device)[y]

    def parts(self, y: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """Each record's part, event * G + group."""
        return torch.as_tensor(self.part_table, device=y.device)[y, s]

    # -- the score as histogram rows (l1 norm 1 per record) ---------------------------------
    @property
    def score_columns(self) -> slice:
        """The columns of a histogram row (`rows`) that are scores, the rest only count: a
        slice, so that reading them on a GPU copies no index from the host."""
        if self.score == "error":
            return slice(0, 1)
        return slice(1, 2) if self.n_classes == 2 else slice(0, self.n_classes)

    @property
    def n_scores(self) -> int:
        return self.score_columns.stop - self.score_columns.start

    @property
    def row_width(self) -> int:
        return 2 if self.score == "error" else self.n_classes

    def rows(self, soft: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each record's histogram row from its class probabilities (..., B, K): the
        probabilities themselves, or (1 - p_y, p_y) for an error score."""
        if self.score != "error":
            return soft
        right = soft.gather(-1, y.unsqueeze(-1))
        return torch.cat([1 - right, right], dim=-1)

    def class_weights(self, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-record score weights w (..., B, scores) as class weights c (..., B, K) with
        sum_k c_k p_k = sum_m w_m s_m (for an error score s = 1 - p_y = sum_{k != y} p_k)."""
        if self.score == "error":
            return w * (1 - F.one_hot(y, self.n_classes).to(w.dtype))
        if self.n_classes == 2:
            return torch.cat([torch.zeros_like(w), w], dim=-1)
        return w

    # -- reading histograms -------------------------------------------------------------------
    def on(self, device: torch.device | str) -> DeviceEvents:
        """The event tables on a device, built once before a step loop reads them."""
        return DeviceEvents(
            torch.as_tensor(self.event_matrix(), dtype=torch.float32, device=device),
            torch.as_tensor(self.label_events(), device=device),
        )

    def positive_rates(
        self, positives: np.ndarray, totals: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Label-resolved (..., groups, labels) counts of positive predictions and of records
        (numpy) -> per (event, group) the rate of positive predictions (..., E, G) and the
        records it is over (..., E, G)."""
        matrix = self.event_matrix()
        size = np.einsum("...gy,ey->...eg", totals, matrix)
        return np.einsum("...gy,ey->...eg", positives, matrix) / size, size

    def counts(self, hist: torch.Tensor, floor: float) -> torch.Tensor:
        """A histogram over the parts (..., parts, width) -> its (..., E, G) record counts
        (row totals), floored at a public constant."""
        return hist.sum(dim=-1).unflatten(-1, (self.n_events, self.n_groups)).clamp(min=floor)

    def gaps(self, hist: torch.Tensor, floor: float) -> torch.Tensor:
        """A histogram over the parts (..., parts, width) -> (..., E, G, scores): each
        group's mean score minus its event's, counts floored at `floor`."""
        sums = hist[..., self.score_columns].unflatten(-2, (self.n_events, self.n_groups))
        counts = hist.sum(dim=-1).unflatten(-1, (self.n_events, self.n_groups))
        return group_gaps(sums, counts, floor)


@dataclass(frozen=True)
class DeviceEvents:
    """A view's events on a device: `matrix` (E, labels) float32, `of_label` (labels,)."""

    matrix: torch.Tensor
    of_label: torch.Tensor

    def per_event(self, stats: torch.Tensor) -> torch.Tensor:
        """Label-resolved statistics (..., groups, labels) summed into events (..., E, G)."""
        return torch.einsum("...gy,ey->...eg", stats, self.matrix)

    def gaps(self, positives: torch.Tensor, counts: torch.Tensor, floor: float) -> torch.Tensor:
        """Label-resolved positive-prediction and record counts (..., groups, labels) -> each
        group's positive rate minus its event's (..., E, G), counts floored at `floor`."""
        sums = self.per_event(positives).unsqueeze(-1)
        return group_gaps(sums, self.per_event(counts), floor)[..., 0]


def group_gaps(sums: torch.Tensor, counts: torch.Tensor, floor: float) -> torch.Tensor:
    """Score sums (..., E, G, M) and counts (..., E, G) -> each group's mean minus its event's
    population mean (..., E, G, M), every count floored at `floor` (public)."""
    group = sums / counts.clamp(min=floor).unsqueeze(-1)
    event = sums.sum(dim=-2) / counts.sum(dim=-1).clamp(min=floor).unsqueeze(-1)
    return group - event.unsqueeze(-2)


# per constraint: its events on K classes, and its score
_VIEWS: dict[str, tuple[Callable[[int], Events], Score]] = {
    "demographic_parity": (lambda k: (tuple(range(k)),), "prediction"),
    "equalized_odds": (lambda k: tuple((y,) for y in range(k)), "prediction"),
    "accuracy_parity": (lambda k: (tuple(range(k)),), "error"),
    "false_negative_rate_parity": (lambda k: ((1,),), "prediction"),  # binary: TPR
}


def group_rates(name: str, n_classes: int, n_groups: int) -> GroupRates:
    """The group-rate view of a named constraint (module docstring)."""
    if name not in _VIEWS:
        raise ConfigError(f"constraint {name!r} has no group-rate view; known: {', '.join(_VIEWS)}")
    if name == "false_negative_rate_parity" and n_classes != 2:
        raise ConfigError(
            "false_negative_rate_parity's group-rate view compares the rate of the positive "
            f"class (binary tasks); this task has {n_classes} classes"
        )
    events, score = _VIEWS[name]
    return GroupRates(name, events(n_classes), score, n_classes, n_groups)
