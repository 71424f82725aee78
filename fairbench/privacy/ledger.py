"""The privacy ledger: every mechanism a method ran on training data, as DpEvents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dp_accounting import dp_event

from fairbench.privacy import events
from fairbench.privacy.accountant import epsilon


@dataclass(frozen=True)
class LedgerEntry:
    """One accounted release (possibly many rounds of it), with a label saying what it was."""

    label: str
    event: dp_event.DpEvent


@dataclass
class PrivacyLedger:
    """What a fitted method spent; its epsilon comes from the suite's accountant, never from
    the method."""

    entries: list[LedgerEntry] = field(default_factory=list)

    def record(self, label: str, event: dp_event.DpEvent) -> None:
        self.entries.append(LedgerEntry(label, event))

    @property
    def event(self) -> dp_event.DpEvent:
        """All entries composed (a no-op event for a ledger with nothing on it)."""
        if not self.entries:
            return dp_event.NoOpDpEvent()
        return dp_event.ComposedDpEvent([e.event for e in self.entries])

    def epsilon(self, delta: float) -> float:
        """Epsilon spent at `delta` (0 for an empty ledger: nothing private was released)."""
        return epsilon(self.event, delta) if self.entries else 0.0

    def to_json(self) -> list[dict[str, Any]]:
        return [{"label": e.label, "event": events.to_dict(e.event)} for e in self.entries]

    @classmethod
    def from_json(cls, data: list[dict[str, Any]]) -> PrivacyLedger:
        return cls([LedgerEntry(d["label"], events.from_dict(d["event"])) for d in data])
