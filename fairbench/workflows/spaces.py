"""Named search spaces (configs/spaces.yaml): each method's space is written once and tune
configs and advise's method list name it, so the same space cannot drift between copies.

A method entry's `space:` is a mapping (hyper-parameter -> distribution), the name of a space,
or a list of names and mappings merged in order under `extends:`'s rule
(`fairbench.runner.config_files.merge`): `[raco-dp, batch-32-1024]` is RaCO-DP's space with the
batch sizes of a dataset of a few thousand training rows. A space's `choose:` and `default:`
are the sampler's (`fairbench.workflows.tune.sample_configurations`).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from fairbench.runner.config_files import BUNDLED, merge, read_yaml

SPACES = BUNDLED / "spaces.yaml"


@functools.cache
def named_spaces() -> dict[str, dict[str, Any]]:
    """Space name -> its mapping, as configs/spaces.yaml states them."""
    return read_yaml(SPACES)


def resolve_space(value: Any) -> Any:
    """The mapping a `space:` stands for; anything else than a mapping, a name or a non-empty
    list of names and mappings is returned as is, for the schema to refuse."""
    if isinstance(value, dict):
        return value
    parts = [value] if isinstance(value, str) else value
    if not (isinstance(parts, list) and parts):
        return value
    out: dict[str, Any] = {}
    for part in parts:
        if isinstance(part, str):
            if part not in named_spaces():
                raise ValueError(
                    f"unknown search space {part!r}; the named spaces ({SPACES.name}): "
                    f"{', '.join(named_spaces())}"
                )
            part = copy.deepcopy(named_spaces()[part])
        elif not isinstance(part, dict):
            raise ValueError(f"give space names or mappings, got {part!r}")
        out = merge(out, part)
    return out
