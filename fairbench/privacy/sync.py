"""Host syncs on the training path, and the checks that wait for the end of training.

Reading a tensor's value on the host (`.item()`, `bool(t)`, `float(t)`, a numpy copy) is free
on the CPU; on an accelerator it stalls the host until the device has caught up, so a loop
that reads one value per step runs at the speed of that round trip. The step loop therefore
reads nothing: conditions that must hold (a Poisson chunk reached the end of the data, a
histogram row has l1 norm at most 1) are kept as device booleans in the session's
`DeviceChecks` and read once, after the last step, before the trial can be stored
(`Method.fit` calls `verify`).

Where the CPU's results must stay bit-identical to the established ones (a sampler whose
random stream would change, a refusal that must come before the noise is drawn), the CPU keeps
its host path: `host_reads_free(device)` chooses. `device_paths()` forces the device paths on
the CPU too, so that tests run, on a CPU, the code an accelerator runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

_forced = 0


def host_reads_free(device: torch.device | str) -> bool:
    """True on the CPU (outside `device_paths()`), where a value read on the host costs
    nothing and the host path (exact, established results) is taken."""
    return torch.device(device).type == "cpu" and not _forced


@contextmanager
def device_paths() -> Iterator[None]:
    """Inside the block every device, the CPU included, takes the sync-free device paths."""
    global _forced
    _forced += 1
    try:
        yield
    finally:
        _forced -= 1


class DeviceChecks:
    """Failure conditions accumulated on the device without a host read, one flag per name,
    and read once by `verify` (one host sync per trial)."""

    def __init__(self) -> None:
        self._flags: dict[str, tuple[torch.Tensor, Callable[[], Exception]]] = {}

    def fail_if(self, name: str, failed: torch.Tensor, error: Callable[[], Exception]) -> None:
        """Record `failed` (a boolean tensor, any shape) under `name`; `verify` raises
        `error()` if it was ever true."""
        failed = failed.any()
        if name in self._flags:
            failed = failed | self._flags[name][0]
        self._flags[name] = (failed, error)

    def verify(self) -> None:
        """Raise the error of the first condition that failed; forget them all either way."""
        flags, self._flags = self._flags, {}
        for failed, error in flags.values():
            if bool(failed):
                raise error()
