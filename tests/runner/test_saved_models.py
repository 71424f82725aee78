"""A run directory with a `models/` folder keeps each trial's trained parameters; others keep
none. The saved parameters are the ones that made the stored predictions."""

import numpy as np
import torch

from fairbench.rundir.models import MODELS
from fairbench.rundir.store import finished_rows
from fairbench.runner.config import expand, parse_config
from fairbench.runner.execute import execute
from fairbench.runner.trial import load_task

CONFIG = {
    "name": "m",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 600}}],
    "epsilons": [2.0],
    "seeds": 2,
    "methods": [
        {"name": "dp-sgd", "hparams": {"epochs": 1, "batch_size": 64}},
        {"name": "cgoo", "hparams": {"iterations": 3}, "knobs": [0.1]},
    ],
}


def test_models_are_saved_only_where_the_run_asks_and_reproduce_the_predictions(tmp_path):
    specs = expand(parse_config(CONFIG, "m"), lambda _: None)
    plain, keeping = tmp_path / "plain", tmp_path / "keeping"
    (keeping / MODELS).mkdir(parents=True)
    execute(specs, plain, quiet=True)
    execute(specs, keeping, quiet=True)
    assert not (plain / MODELS).exists()
    saved = {p.stem for p in (keeping / MODELS).iterdir()}
    assert saved == {s.trial_id for s in specs}
    spec = next(s for s in specs if s.method == "dp-sgd")
    state = torch.load(keeping / MODELS / f"{spec.trial_id}.pt", weights_only=False)
    assert len(state["components"]) == 1 and state["weights"] is None
    params = state["components"][0]
    weight, bias = (np.asarray(v) for k, v in sorted(params.items(), reverse=True))  # w, b
    task = load_task(spec)
    logits = task.test.X @ weight.T + bias
    row = next(r for r in finished_rows(keeping, "test") if r["trial_id"] == spec.trial_id)
    error = float((logits.argmax(axis=1) != task.test.y).mean())
    assert error == row["test_error"]
    mixture = next(s for s in specs if s.method == "cgoo")
    state = torch.load(keeping / MODELS / f"{mixture.trial_id}.pt", weights_only=False)
    assert len(state["components"]) >= 1
