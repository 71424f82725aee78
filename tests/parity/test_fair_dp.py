"""The fair-dp parity drivers' pure parts (no authors' code, no training): the Task built from
an exported split, the hyper-parameters each port is given, and the stand-ins."""

from __future__ import annotations

import sys

import numpy as np

from fairbench.methods import get_method
from parity.fair_dp import authors, fairbench_side


def test_task_from_exported_split(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {}
    for part, n in (("train", 7), ("test", 5)):
        arrays[f"X_{part}"] = rng.normal(size=(n, 3)).astype(np.float64)
        arrays[f"y_{part}"] = rng.integers(0, 2, n)
        arrays[f"s_{part}"] = np.arange(n) % 2
    np.savez(tmp_path / "split.npz", **arrays)
    task = fairbench_side.authors_task(str(tmp_path / "split.npz"), 3)
    assert (len(task.train), len(task.test), task.n_features) == (7, 5, 3)
    assert task.train.X.dtype == np.float32
    np.testing.assert_array_equal(task.test.s, [0, 1, 0, 1, 0])
    assert task.val is task.test  # their code validates on the test split
    assert task.group_names == ("Male", "Female")
    assert task.provenance.split_seed == 3


def test_ports_take_the_authors_settings():
    for name, hparams in fairbench_side.HPARAMS.items():
        method = get_method(name, **hparams, epochs=20.0)
        assert method.hparams.batch_size == 256
        if method.private:
            assert method.hparams.noise_multiplier == 1.0
    adapt = get_method("dpsgd-global-adapt", **fairbench_side.HPARAMS["dpsgd-global-adapt"])
    assert (adapt.hparams.lr, adapt.hparams.initial_bound, adapt.hparams.lr_bound) == (0.2, 50, 0.1)


def test_their_imports_stand_in_only_while_loading():
    with authors.their_imports() as used:
        assert "torchvision.datasets" in used and "torchvision.datasets" in sys.modules
    assert "torchvision.datasets" not in sys.modules
    assert "functorch" not in used  # torch ships it: their import resolves to the real one
