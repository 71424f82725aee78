"""Trained parameters beside a run's results, for the runs that release a model.

A trial's fitted predictor travels back from its worker as plain arrays (`fitted_state`);
the single writer saves it as `MODELS/<trial_id>.pt` only where the run directory has a
`models/` folder (`fairbench advise` makes one for the selection whose winner it releases).
Other runs keep nothing: a benchmark's thousands of trials need their numbers, not weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fairbench.methods.trial import Fitted

MODELS = "models"


def fitted_state(fitted: Fitted) -> dict[str, Any]:
    """What predicts: each component's parameters (one for a deterministic model; one per
    group, in group order, for decoupled base classifiers), the mixture weights (None:
    uniform) and a derived predictor's table P(1 | prediction, group) where the method
    post-processes."""
    modules = fitted.components or fitted.group_models or [fitted.model]
    return {
        "decoupled": bool(fitted.group_models),
        "components": [
            {k: v.detach().cpu().numpy() for k, v in m.state_dict().items()} for m in modules
        ],
        "weights": None if fitted.weights is None else list(fitted.weights),
        "derived": None if fitted.derived is None else np.asarray(fitted.derived).tolist(),
    }


def save_model(run_dir: Path, trial_id: str, state: dict[str, Any] | None) -> Path | None:
    """Save a trial's parameters when the run keeps models; the path, or None."""
    folder = run_dir / MODELS
    if state is None or not folder.is_dir():
        return None
    path = folder / f"{trial_id}.pt"
    torch.save(state, path)
    return path
