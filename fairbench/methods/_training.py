"""Pieces the gradient-trained methods share: seeding, tensors on the device, batching."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from fairbench.errors import ConfigError
from fairbench.methods.base import Budget, TrainingHparams
from fairbench.models import build_model
from fairbench.privacy import PrivacyBudget, calibrate_noise_multiplier, calibrate_steps
from fairbench.privacy.accountant import PLAIN, StepShape, at_search_bound
from fairbench.task import Task


def init_model(hp: TrainingHparams, task: Task, seed: int, device: torch.device) -> nn.Module:
    """The classifier, initialised from `seed` alone (the global torch RNG is left untouched)."""
    if task.kind != "classification":
        raise ConfigError(
            f"{task.name} is a {task.kind} task and this method trains classifiers; choose the "
            "classification task in the dataset's options"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(hp.model, task.n_features, task.n_classes, hp.hidden)
    return model.to(device)


def train_tensors(task: Task, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Training features and class labels on the device."""
    x = torch.as_tensor(task.train.X, dtype=torch.float32, device=device)
    y = torch.as_tensor(task.train.y, dtype=torch.int64, device=device)
    return x, y


def generator(seed: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def shuffled_batches(
    n: int, batch_size: int, gen: torch.Generator, device: torch.device
) -> Callable[[], torch.Tensor]:
    """Index batches from a fresh permutation each epoch (non-private sampling)."""
    state = {"perm": torch.empty(0, dtype=torch.int64, device=device), "pos": 0}

    def next_batch() -> torch.Tensor:
        if state["pos"] >= len(state["perm"]):
            state["perm"] = torch.randperm(n, generator=gen, device=device)
            state["pos"] = 0
        batch = state["perm"][state["pos"] : state["pos"] + batch_size]
        state["pos"] += batch_size
        return batch

    return next_batch


def poisson_batches(
    n: int, sampling_rate: float, gen: torch.Generator, device: torch.device
) -> Callable[[], torch.Tensor]:
    """Poisson sampling: every record joins each batch independently with `sampling_rate`,
    as the accountant's PoissonSampledDpEvent assumes (batch size varies; may be empty).

    Drawn in O(batch) rather than O(n): the gaps between included indices of a Bernoulli(q)
    process are i.i.d. Geometric(q), so cumulative sums of geometric draws are exactly the
    included indices.
    """
    if sampling_rate >= 1.0:
        everyone = torch.arange(n, device=device)
        return lambda: everyone
    chunk = math.ceil(n * sampling_rate + 6 * math.sqrt(n * sampling_rate) + 16)

    def next_batch() -> torch.Tensor:
        parts, last = [], -1.0
        while last < n:
            gaps = torch.empty(chunk, dtype=torch.float64, device=device)
            positions = last + torch.cumsum(gaps.geometric_(sampling_rate, generator=gen), 0)
            parts.append(positions)
            last = positions[-1].item()
        positions = parts[0] if len(parts) == 1 else torch.cat(parts)
        return positions[positions < n].long()

    return next_batch


def check_one_free_quantity(hp: TrainingHparams) -> None:
    """`calibrate: noise` solves for sigma, `calibrate: steps` for the step count given
    `noise_multiplier`: exactly one of the two is free (a pydantic validator's check)."""
    if hp.calibrate == "steps" and hp.noise_multiplier is None:
        raise ValueError("calibrate: steps needs noise_multiplier")
    if hp.calibrate == "noise" and hp.noise_multiplier is not None:
        raise ValueError("noise_multiplier is calibrated; set calibrate: steps to fix it")


def calibrated_schedule(
    hp: TrainingHparams,
    n: int,
    privacy: PrivacyBudget,
    laplace_scale: float | None = None,
    shape: StepShape = PLAIN,
) -> tuple[float, int, float]:
    """(sampling rate, steps, noise multiplier) meeting the budget on n training records:
    steps from `epochs` and sigma solved (`calibrate: noise`), or sigma fixed and the largest
    step count solved (`calibrate: steps`)."""
    q = min(1.0, hp.batch_size / n)
    eps, delta = privacy.epsilon, privacy.delta
    if hp.calibrate == "noise":
        steps = max(1, round(hp.epochs / q))
        return q, steps, calibrate_noise_multiplier(q, steps, eps, delta, laplace_scale, shape)
    sigma = float(hp.noise_multiplier)
    return q, calibrate_steps(q, sigma, eps, delta, laplace_scale, shape), sigma


def schedule_budget(
    sampling_rate: float,
    steps: int,
    noise_multiplier: float,
    calibrated: str | None,
    **other_noise: float,
) -> Budget:
    """The `Budget` of a Poisson-sampled schedule: the Gaussian noise multiplier under
    `gradient`, other releases' scales by name. Noise 0 is a non-private run: no noise and
    nothing calibrated."""
    if noise_multiplier <= 0:
        return Budget(int(steps), float(sampling_rate))
    return Budget(
        steps=int(steps),
        sampling_rate=float(sampling_rate),
        noise={"gradient": float(noise_multiplier)} | {k: float(v) for k, v in other_noise.items()},
        calibrated=calibrated,
        at_bound=at_search_bound(steps, noise_multiplier),
    )


def calibrated_quantity(hp: TrainingHparams) -> str:
    """What `calibrated_schedule` solved for under these hyperparameters."""
    return "steps" if getattr(hp, "calibrate", "noise") == "steps" else "noise_multiplier"
