"""What runs where trials are sent (a pool process, a Dask task): the trials themselves, with
failures turned into messages. Shared by both executors, so neither imports the other."""

from __future__ import annotations

import traceback

import torch

from fairbench.errors import FairbenchError
from fairbench.rundir.row import TrialRow
from fairbench.runner.trial import TrialSpec, run_trial


def init_worker() -> None:
    torch.set_num_threads(1)  # workers are the parallelism; avoid oversubscribing cores


def failure_message(exc: BaseException) -> str:
    if isinstance(exc, FairbenchError):
        return f"{type(exc).__name__}: {exc}"
    return "".join(traceback.format_exception(exc)).strip()


def run_batch(specs: list[TrialSpec]) -> list[tuple[TrialSpec, TrialRow | None, str | None]]:
    """Run trials one after another where this is called (a remote task of a distributed
    executor): (spec, result, None) or (spec, None, error) for each."""
    init_worker()
    out: list[tuple[TrialSpec, TrialRow | None, str | None]] = []
    for spec in specs:
        try:
            out.append((spec, run_trial(spec), None))
        except Exception as exc:  # a failed trial is reported, the batch goes on
            out.append((spec, None, failure_message(exc)))
    return out
