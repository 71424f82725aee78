"""`n_train`: the training part is subsampled after the split, stratified on label x group,
seeded on its own stream, recorded; validation and test are those of the full task."""

from __future__ import annotations

import numpy as np
import pytest

from fairbench.datasets import get_dataset, registry
from fairbench.datasets.subsample import allocate
from fairbench.errors import ConfigError, DataError
from fairbench.runner.config import expand, parse_config
from fairbench.runner.trial import TrialSpec
from tests.conftest import needs_adult

OPTIONS = {"n_rows": 3000, "minority_fraction": 0.2}


def strata(split) -> np.ndarray:
    return split.y * 2 + split.s


@pytest.fixture(scope="module")
def full():
    return get_dataset("synthetic", **OPTIONS).load(seed=4)


@pytest.fixture(scope="module")
def small():
    return get_dataset("synthetic", **OPTIONS, n_train=300).load(seed=4)


def test_subsample_is_stratified_within_one_row_of_proportional(full, small):
    assert len(small.train) == 300
    values, counts = np.unique(strata(full.train), return_counts=True)
    kept = np.array([(strata(small.train) == v).sum() for v in values])
    assert np.all(np.abs(kept - 300 * counts / counts.sum()) < 1) and np.all(kept >= 1)


def test_allocation_keeps_a_row_of_every_stratum_and_the_total():
    take = allocate(np.array([1, 2, 997, 1000]), 10)
    assert take.sum() == 10 and np.all(take >= 1)
    assert np.all(np.abs(take - 10 * np.array([1, 2, 997, 1000]) / 2000) <= 1)


def test_subsample_is_seeded_on_a_stream_of_its_own(full, small):
    again = get_dataset("synthetic", **OPTIONS, n_train=300).load(seed=4)
    assert np.array_equal(small.train.X, again.train.X)
    other = get_dataset("synthetic", **OPTIONS, n_train=300).load(seed=5)
    assert not np.array_equal(small.train.y, other.train.y) or not np.allclose(
        small.train.X, other.train.X
    )
    # a subset of the full training part (features are re-standardised: compare raw values)
    raw = get_dataset("synthetic", **OPTIONS, n_train=len(full.train)).load(seed=4)
    assert len(raw.train) == len(full.train) and np.allclose(raw.train.X, full.train.X)


def test_validation_and_test_are_the_full_tasks(full, small):
    for part in ("val", "test"):
        a, b = getattr(full, part), getattr(small, part)
        assert np.array_equal(a.y, b.y) and np.array_equal(a.s, b.s)
    # numeric columns are standardised with the kept rows' statistics only
    assert np.allclose(small.train.X.mean(axis=0), 0, atol=1e-5)
    assert not np.allclose(small.test.X, full.test.X)
    assert np.allclose(np.corrcoef(small.test.X[:, 0], full.test.X[:, 0])[0, 1], 1.0, atol=1e-6)


def test_subsample_is_recorded_in_provenance(full, small):
    recorded = small.provenance.preprocessing
    assert recorded["n_train"] == 300
    assert recorded["train_rows_before_subsample"] == len(full.train)
    assert "stratified" in recorded["subsample"] and "untouched" in recorded["subsample"]
    assert "n_train" not in full.provenance.preprocessing


def test_too_large_or_too_small_n_train_is_one_config_error(full):
    with pytest.raises(ConfigError, match=f"the {len(full.train)} training rows available"):
        get_dataset("synthetic", **OPTIONS, n_train=len(full.train) + 1).load(seed=4)
    with pytest.raises(ConfigError, match="4 label x group strata"):
        get_dataset("synthetic", **OPTIONS, n_train=3).load(seed=4)
    config = {
        "name": "n",
        "methods": ["erm"],
        "seeds": [0],
        "datasets": [{"name": "synthetic", "options": {"n_train": 10**6}}],
    }
    with pytest.raises(ConfigError, match="training rows available"):
        expand(parse_config(config), warn=lambda _: None)  # before any run directory exists


def test_existing_trial_ids_are_unchanged_by_the_new_option():
    """Ids computed before `n_train` existed (commit 9224043): an unset option is left out."""
    hparams = {
        "model": "logistic",
        "hidden": 64,
        "lr": 0.5,
        "batch_size": 256,
        "epochs": 20.0,
        "weight_decay": 0.0,
    }
    pins = [
        ("synthetic", {}, "b275c3f3ed857b44"),
        ("adult", {"missing": "drop"}, "b7d6f6ac5e0d0f75"),
    ]
    for dataset, options, pinned in pins:
        resolved = get_dataset(dataset, **options).options.model_dump()
        assert "n_train" not in resolved
        spec = TrialSpec(
            dataset=dataset,
            dataset_options=resolved,
            method="erm",
            label="erm",
            hparams=hparams,
            constraint="demographic_parity",
            knob=None,
            epsilon=None,
            delta=1e-5,
            seed=3,
        )
        assert spec.trial_id == pinned
    with_n = get_dataset("synthetic", n_train=100).options.model_dump()
    assert with_n["n_train"] == 100


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_adapter_honours_n_train(name):
    """A guard for adapters to come: build_task reads n_train from the recorded options."""
    adapter = get_dataset(name, n_train=200)
    try:
        adapter.locate()
    except DataError:
        pytest.skip(f"{name} files not present")
    task = adapter.load(seed=0)
    assert len(task.train) == 200 and task.provenance.preprocessing["n_train"] == 200


@needs_adult
def test_adult_subsampled_to_5000_keeps_the_full_held_out_splits():
    full = get_dataset("adult").load(seed=0)
    small = get_dataset("adult", n_train=5000).load(seed=0)
    assert len(small.train) == 5000
    assert small.provenance.preprocessing["train_rows_before_subsample"] == len(full.train)
    for part in ("val", "test"):
        assert np.array_equal(getattr(full, part).y, getattr(small, part).y)
        assert np.array_equal(getattr(full, part).s, getattr(small, part).s)
    rate = lambda split: np.bincount(split.y * 2 + split.s, minlength=4) / len(split)  # noqa: E731
    assert np.allclose(rate(small.train), rate(full.train), atol=1 / 5000)
