"""The privacy ledger: every mechanism a method ran on training data, as DpEvents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dp_accounting import dp_event

from fairbench.privacy import events
from fairbench.privacy.accountant import REPORT_DISCRETISATION, epsilon


@dataclass(frozen=True)
class LedgerEntry:
    """One accounted release (possibly many rounds of it), with a label saying what it was.
    `group`: the only group whose records the release reads (None: all records)."""

    label: str
    event: dp_event.DpEvent
    group: int | None = None


@dataclass
class PrivacyLedger:
    """What a fitted method spent; its epsilon comes from the suite's accountant, never from
    the method.

    `parallel_groups`: groups are disjoint and a group's entries read only its own records, so
    a record pays for the shared entries plus its own group's (parallel composition); the
    epsilon is the worst group's. Otherwise every entry composes (sequential).
    """

    entries: list[LedgerEntry] = field(default_factory=list)
    parallel_groups: bool = False

    @classmethod
    def of(cls, *entries: tuple[str, dp_event.DpEvent]) -> PrivacyLedger:
        """A ledger of (label, event) entries, each over all records, in release order."""
        return cls([LedgerEntry(label, event) for label, event in entries])

    def record(self, label: str, event: dp_event.DpEvent, group: int | None = None) -> None:
        self.entries.append(LedgerEntry(label, event, group))

    @property
    def groups(self) -> list[int]:
        return sorted({e.group for e in self.entries if e.group is not None})

    @property
    def event(self) -> dp_event.DpEvent:
        """All entries composed (a no-op event for a ledger with nothing on it)."""
        return _compose(self.entries)

    def group_event(self, group: int) -> dp_event.DpEvent:
        """What one record of `group` pays for: the shared entries and its group's own."""
        return _compose([e for e in self.entries if e.group in (None, group)])

    def epsilon(self, delta: float) -> float:
        """Epsilon spent at `delta` (0 for an empty ledger: nothing private was released)."""
        if not self.entries:
            return 0.0
        if self.parallel_groups and self.groups:
            return max(self.group_epsilons(delta))
        return epsilon(self.event, delta)

    def group_epsilons(self, delta: float, interval: float = REPORT_DISCRETISATION) -> list[float]:
        """Per group: the epsilon its records pay (parallel composition over groups); a coarser
        `interval` is faster and still an upper bound (the PLD rounds pessimistically)."""
        return [epsilon(self.group_event(g), delta, _interval=interval) for g in self.groups]

    def to_json(self) -> dict[str, Any]:
        return {
            "parallel_groups": self.parallel_groups,
            "entries": [
                {"label": e.label, "event": events.to_dict(e.event), "group": e.group}
                for e in self.entries
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | list[dict[str, Any]]) -> PrivacyLedger:
        if isinstance(data, list):  # the form written before group tags existed
            data = {"entries": data}
        entries = [
            LedgerEntry(d["label"], events.from_dict(d["event"]), d.get("group"))
            for d in data["entries"]
        ]
        return cls(entries, data.get("parallel_groups", False))


def _compose(entries: list[LedgerEntry]) -> dp_event.DpEvent:
    if not entries:
        return dp_event.NoOpDpEvent()
    return dp_event.ComposedDpEvent([e.event for e in entries])
