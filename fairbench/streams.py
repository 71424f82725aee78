"""Named, independent random streams: one trial seed, one stream per purpose.

Every random choice in fairbench draws from a stream spawned from the trial seed by name
(numpy `SeedSequence(seed, spawn_key=hash(name))`): the data split ("split"), a subsample
("subsample"), model initialisation ("init"), Poisson batches ("sampling"), each mechanism's
noise ("noise/<label>", per group "noise/<label>/group<k>"), a method's own choices (e.g.
"iterate"). Streams with different names are statistically independent, so adding a draw to
one leaves every other stream's values unchanged, and no two mechanisms share noise. Nothing
seeds or reads the global numpy or torch generators: a trial leaves them as it found them.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def seed_sequence(seed: int, name: str) -> np.random.SeedSequence:
    """The stream `name` of `seed`: a child of `SeedSequence(seed)` keyed by the name's hash."""
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.SeedSequence(seed, spawn_key=(key,))


def numpy_stream(seed: int, name: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, name)))


def torch_stream(seed: int, name: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator on `device` seeded with 64 bits of the stream `name`."""
    state = int(seed_sequence(seed, name).generate_state(1, np.uint64)[0])
    return torch.Generator(device=device).manual_seed(state)
