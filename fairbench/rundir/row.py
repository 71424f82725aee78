"""One finished trial's row, as the runner hands it to the store: typed fields for the fixed
columns and the two held-out splits' metrics, and `to_record`, the flat dict the store, the
CSV export and the reports read (its keys, their order and their values are the store's
format, which this type must never change).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

# The fixed columns, in stored order: the trial's ids, its spec (`TrialSpec`'s fields), then
# what running it gave. `knob_name` is the method's knob's name (a string), None without one.
COLUMNS = (
    "trial_id",
    "config_id",
    "dataset",
    "dataset_options",
    "method",
    "label",
    "hparams",
    "constraint",
    "knob",
    "epsilon",
    "delta",
    "seed",
    "device",
    "constraint_definition",
    "knob_name",
    "privacy_notion",
    "uses_sensitive_at_test",
    "epsilon_spent",
    "epsilon_checks",
    "target_accounting",
    "wall_seconds",
    "n_train",
    "group_names",
    "group_sizes_train",
    "task_kind",
    "dataset_sha256",
    "budget",
    "info",
    "ledger",
    "stamp",
)
SPLITS = ("val", "test")  # each split's metrics follow, as `val_<metric>` then `test_<metric>`
# a classification task's metrics against a rate-constraint set; with more than two groups,
# `demographic_parity_ovr` (one group against the rest) follows them
RATE_METRICS = (
    "predictions_sha256",
    "error",
    "violation",
    "rate_constraints",
    "demographic_parity",
    "equalized_odds",
    "group_error",
    "group_log_loss",
    "false_negative_rate",
)
# bounded group loss, and every regression task
GROUP_LOSS_METRICS = (
    "predictions_sha256",
    "error",
    "violation",
    "rate_constraints",
    "group_loss",
    "smallest_group_loss",
)


def columns(metrics: tuple[str, ...]) -> list[str]:
    """Every column of a row whose splits hold `metrics`, in stored order."""
    return [*COLUMNS, *(f"{split}_{m}" for split in SPLITS for m in metrics)]


TRANSIENT = ("model_state",)  # fields a row carries to the writer but the store never keeps


@dataclass(frozen=True)
class TrialRow:
    """A finished trial. The fields up to `stamp` are the columns of `COLUMNS`, in order;
    `val` and `test` map each split's metric names to their values."""

    trial_id: str
    config_id: str
    dataset: str
    dataset_options: dict[str, Any]
    method: str
    label: str
    hparams: dict[str, Any]
    constraint: str
    knob: float | None
    epsilon: float | None  # None: a non-private method
    delta: float
    seed: int
    device: str
    constraint_definition: dict[str, Any] | None
    knob_name: str | None
    privacy_notion: str
    uses_sensitive_at_test: bool  # predictions read the group (never compared silently)
    epsilon_spent: float
    epsilon_checks: dict[str, Any]
    target_accounting: str
    wall_seconds: float
    n_train: int
    group_names: list[str]
    group_sizes_train: list[int]
    task_kind: str
    dataset_sha256: dict[str, str]
    budget: dict[str, Any] | None
    info: dict[str, Any]
    ledger: dict[str, Any]
    stamp: dict[str, Any]
    val: dict[str, Any]
    test: dict[str, Any]
    # the trained parameters (`rundir.models.fitted_state`), carried back from the worker and
    # saved only where the run directory asks for them (a `models/` folder); never stored
    model_state: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_record(self) -> dict[str, Any]:
        """The row as the store keeps it: the fixed columns, then `val_*` and `test_*`."""
        record = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in (*SPLITS, *TRANSIENT)
        }
        for split in SPLITS:
            record.update({f"{split}_{k}": v for k, v in getattr(self, split).items()})
        return record
