"""fairbench's `decoupled-post` on fairbench's Adult (sex) at Algorithm2.py's settings: clip 1.5,
lr 0.01, batch 1024, 50 epochs, a third of the training records held out for the rates, each
group's rates at epsilon 0.05 (`rate_share` 0.05 / epsilon), delta 1e-5, gamma 0 (exact parity).
One JSON line per seed. Usage: python fairbench_side.py SEEDS EPSILON."""

from __future__ import annotations

import json
import sys
import time

from fairbench import constraints
from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method
from fairbench.privacy import PrivacyBudget
from fairbench.runner.trial import evaluate

DP = "demographic_parity"


def main(seeds: int, eps: float) -> None:
    hparams = {
        "clip_norm": 1.5,
        "lr": 0.01,
        "batch_size": 1024,
        "epochs": 50.0,
        "holdout": 1 / 3,
        "rate_share": 0.05 / eps,
    }
    for seed in range(seeds):
        task = get_dataset("adult", sensitive="sex").load(seed)
        start = time.time()
        method = get_method("decoupled-post", **hparams)
        fitted = method.fit(task, PrivacyBudget(eps, 1e-5), FairnessSpec(DP, 0.0), seed)
        rate_set = constraints.build(DP, None, 2, task.n_groups, 0.0)
        scores = evaluate(fitted, task.test, task, rate_set, True)
        row = {
            "seed": seed,
            "eps": eps,
            "test_error": scores["error"],
            "dp_gap": scores["violation"],
            "epsilon_spent": fitted.ledger.epsilon(1e-5),
            "steps": fitted.info["steps"],
            "sigma": fitted.info["noise_multiplier"],
            "n_train": len(task.train),
            "noisy_rates": fitted.info["noisy_rates"],
            "seconds": time.time() - start,
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
