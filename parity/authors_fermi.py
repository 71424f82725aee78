"""Driver for DP-FERMI's public code (devanshgupta160/Stochastic-Differentially-Private-and-
Fair-Learning @ 1c4dc84), run in THEIR environment (torch on CPU; see docs/parity.md). Our
code: it imports their modules from the checkout given as --authors, never modifies it, and
runs their unchanged `dp_fermi.py` with runpy in a scratch folder (the script saves its table
under ./PlotConstructionData, which would otherwise land in their checkout).

    python parity/authors_fermi.py run --authors PATH --data-file CSV --out-dir DIR --tag TAG \
        --epsilon 1 --lambd 0.5 --models 3 [--set epochs=200 ...] [--their-workers]
    python parity/authors_fermi.py figures --authors PATH --out FILE.json

`run` does what editing their args.py and running `python3 dp_fermi.py` does (their README's
interface): `Args` attributes are overridden after their `__init__` (dataset parkinsons, one
epsilon, one lambda, --models models seeded 0..models-1 by their loop, `--set` for the rest),
the data path points at --data-file. It writes, per model k, TAG_m{k}.json (result),
TAG_m{k}_preds.csv (its test predictions, re-predicted in row order when their script calls
`model.eval()` after training) and one TAG_split.json (their fixed split,
df.sample(frac=0.75, random_state=100): rows, labels, groups, feature digest).

PYTHONHASHSEED is pinned (re-exec; FAIRBENCH_AUTHORS_HASHSEED, default 0): their GeneralData
orders the feature columns as list(set(...)), so without it the column order, hence which
initial weight meets which feature, changes from process to process and so do the results.

Run-time changes, none of which touches their algorithm:
- torchvision stands in (parity/shims.py) while their modules are imported: models.py and
  dataloader.py import it for the image model and loader only;
- `metrics.equalized_opportunity_violation_binary/_multiple`, which dp_fermi.py calls but the
  published metrics.py does not define (their script dies with a NameError after the first
  model), are added as the largest true-positive-rate gap between groups; they only fill the
  `equalized_opportunity_list` of their table;
- their save folder `PlotConstructionData/FERMI/<dataset>` is created first (the script makes
  `.../DP-FERMI/<dataset>` but saves to `.../FERMI/<dataset>`);
- `pd.get_dummies` in their dataloader makes uint8 columns (the pandas < 2 default; with
  pandas >= 2 the bool dummies make object rows that torch rejects; Parkinsons has none);
- their DataLoaders run in the main process (`num_workers=0` instead of 2) unless
  --their-workers: the batches are the same (the shuffle's seed and the loader's base seed are
  drawn from the global generator in the same order either way; workers only fetch), and the
  per-record loop runs several times faster.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import runpy
import sys
import time
from pathlib import Path

HASHSEED = os.environ.get("FAIRBENCH_AUTHORS_HASHSEED", "0")
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != HASHSEED:
    os.environ["PYTHONHASHSEED"] = HASHSEED
    os.execv(sys.executable, [sys.executable, *sys.argv])

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from parity import protocol, shims  # noqa: E402

REPOSITORY = (
    "https://github.com/devanshgupta160/Stochastic-Differentially-Private-and-Fair-Learning"
)
COMMIT = "1c4dc84a4fe77355d5d2b94243b89f838729f831"


def import_theirs(path: Path, their_workers: bool):
    """Their args, dataloader, metrics and models modules, with the run-time changes above."""
    import pandas as pd
    import torch
    import torch.utils.data

    if not (path / "dp_fermi.py").is_file():
        sys.exit(f"parity: {path} is not a DP-FERMI checkout (no dp_fermi.py)")
    sys.path.insert(0, str(path))
    stand_in = shims.missing_modules(
        {"torchvision": {}, "torchvision.models": {}, "torchvision.transforms": {}}
    )
    with shims.stand_ins(stand_in) as used:
        import args as their_args
        import dataloader as their_loader
        import metrics as their_metrics
        import models as their_models

    if not hasattr(their_metrics, "equalized_opportunity_violation_binary"):
        their_metrics.equalized_opportunity_violation_binary = equal_opportunity_gap
        their_metrics.equalized_opportunity_violation_multiple = equal_opportunity_gap_multiple

    class Dummies:  # their dataloader's `pd`, with uint8 dummies
        def __getattr__(self, name):
            return getattr(pd, name)

        @staticmethod
        def get_dummies(*a, **k):
            return pd.get_dummies(*a, **{"dtype": np.uint8, **k})

    their_loader.pd = Dummies()
    if not their_workers:
        base = torch.utils.data.DataLoader

        class MainProcessLoader(base):
            def __init__(self, *a, **k):
                super().__init__(*a, **{**k, "num_workers": 0})

        torch.utils.data.DataLoader = MainProcessLoader
    return their_args, their_loader, their_metrics, their_models, used


def equal_opportunity_gap(sensitive, output, label) -> float:
    """Largest true-positive-rate difference between groups."""
    s, o, y = (np.asarray(v) for v in (sensitive, output, label))
    rates = [float((o[(s == g) & (y == 1)] == 1).mean()) for g in np.unique(s)]
    return max(rates) - min(rates)


def equal_opportunity_gap_multiple(sensitive, output, label) -> float:
    y, o = np.asarray(label), np.asarray(output)
    return max(
        equal_opportunity_gap(sensitive, (o == c).astype(int), (y == c).astype(int))
        for c in np.unique(y)
    )


def run(a: argparse.Namespace) -> None:
    import torch

    started = time.time()
    path = Path(a.authors).resolve()
    data_file = Path(a.data_file).resolve()
    out = Path(a.out_dir).resolve()
    scratch = out / f"{a.tag}_scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    their_args, their_loader, _their_metrics, their_models, used = import_theirs(
        path, a.their_workers
    )
    overrides = {
        "dataset": "parkinsons",
        "epsilon_list": [a.epsilon],
        "lambd_list": [a.lambd],
        "num_models_train": a.models,
    }
    for item in a.set:
        key, value = item.split("=", 1)
        overrides[key] = ast.literal_eval(value)
    init, assign = their_args.Args.__init__, their_args.Args.assign

    def patched_init(self):
        init(self)
        for key, value in overrides.items():
            setattr(self, key, value)

    def patched_assign(self):
        assign(self)
        self.path = str(data_file)

    their_args.Args.__init__, their_args.Args.assign = patched_init, patched_assign

    captured: list[dict] = []
    holder: dict = {}
    eval_ = their_models.LogisticRegression.eval

    def capturing_eval(model):
        result = eval_(model)
        test = holder["dataset_test"]
        with torch.no_grad():
            X = torch.stack([test[i][0] for i in range(len(test))]).float()
            _, prob = model(X)
        pred = (prob.squeeze(1) > 0.5).long().numpy()
        captured.append(
            {
                "pred": pred,
                "at": time.time(),
                "state": {k: v.tolist() for k, v in model.state_dict().items()},
            }
        )
        return result

    their_models.LogisticRegression.eval = capturing_eval

    # the datasets, built as their script builds them, for the split export and predictions
    probe = their_args.Args()
    probe.assign()
    full = their_loader.GeneralData(
        path=probe.path,
        sensitive_attributes=probe.sensitive_attributes,
        cols_to_norm=probe.cols_to_norm,
        output_col_name=probe.output_col_name,
        split=probe.split,
    )
    train, test = full.getTrain(), full.getTest()
    holder["dataset_test"] = test

    def part(data):
        items = [data[i] for i in range(len(data))]
        X = torch.stack([it[0] for it in items]).float().numpy()
        return X, np.array([int(it[2]) for it in items]), np.array([int(it[3]) for it in items])

    parts = {"train": part(train), "test": part(test)}
    attribute = probe.sensitive_attributes[0]
    split = protocol.make_split(
        method="dp-fermi",
        source={
            "repository": REPOSITORY,
            "commit": COMMIT,
            "authors_path": str(path),
            "seed": 0,
            "split": "df.sample(frac=0.75, random_state=100)",
        },
        data_file=data_file,
        rows={"train": full.df_train.index.tolist(), "test": full.df_test.index.tolist()},
        y={p: parts[p][1] for p in parts},
        s={p: parts[p][2] for p in parts},
        group_maps={"train": train.attr_no[attribute], "test": test.attr_no[attribute]},
        feature_names=list(full.non_sens_attr),
        features={p: parts[p][0] for p in parts},
        standardised_with=["train"],
    )
    protocol.write_json(out / f"{a.tag}_split.json", split)

    os.makedirs(scratch / "PlotConstructionData" / "FERMI" / "parkinsons", exist_ok=True)
    here, argv = os.getcwd(), sys.argv
    os.chdir(scratch)
    sys.argv = ["dp_fermi.py"]
    trained = time.time()
    try:
        scope = runpy.run_path(str(path / "dp_fermi.py"), run_name="__main__")
    finally:
        os.chdir(here)
        sys.argv = argv
    ga = scope["args"]
    table_file = (
        scratch
        / "PlotConstructionData"
        / "FERMI"
        / "parkinsons"
        / (f"eps_{ga.epsilon}_{ga.model_type}.pt")
    )
    table = torch.load(table_file, weights_only=False)[ga.lambd]
    n, batch = len(scope["dataset_train"]), ga.batch_size
    counts = np.bincount(parts["train"][2])
    schedule = {
        "n_train": n,
        "batch_size": batch,
        "epochs": ga.epochs,
        "updates": ga.epochs * (n // batch),
        "T_in_noise": ga.epochs * (n // batch + (1 if n % batch else 0)),
        "std_theta": float(ga.std_theta),
        "std_W": float(ga.std_W),
        "delta": float(ga.delta),
        "rho": (int(counts.min()) - 1) / n,
        "lipschitz_theta": ga.lipschitz_theta,
        "C": ga.C,
        "lr_theta": ga.lr_theta,
        "lr_W": ga.lr_W,
        "lambda": ga.lambd,
        "epsilon": ga.epsilon,
        "group_counts": counts.tolist(),
    }
    _X, y, z = parts["test"]
    previous = trained
    for k, cap in enumerate(captured):
        error, gap = protocol.error_and_gap(y, z, cap["pred"])
        theirs = {
            "test_error": float(table["misclassification_error_list"][k]),
            "test_gap": float(table["demographic_parity_list"][k]),
        }
        if abs(theirs["test_error"] - error) > 1e-6 or abs(theirs["test_gap"] - gap) > 1e-6:
            sys.exit(f"parity: model {k}: predictions {error, gap} != their table {theirs}")
        protocol.write_predictions(
            out / f"{a.tag}_m{k}_preds.csv", split["rows"]["test"], y, z, cap["pred"]
        )
        result = protocol.make_result(
            method="dp-fermi",
            implementation="authors",
            setting=a.setting,
            knob=ga.lambd,
            seed=k,
            steps=schedule["updates"],
            sampling_rate=None,
            delta=float(ga.delta),
            epsilon={"authors": float(ga.epsilon)},
            test_error=error,
            test_gap=gap,
            wall_seconds=cap["at"] - previous,
            sizes={"train": n, "val": 0, "test": len(y)},
            settings={
                k2: v
                for k2, v in vars(ga).items()
                if isinstance(v, int | float | str | bool | list) and k2 != "path"
            },
            extra={
                "schedule": schedule,
                "their_table": theirs,
                "final_state": cap["state"],
                "stand_ins": used,
                "main_process_loader": not a.their_workers,
                "process_wall_seconds": time.time() - started,
            },
        )
        previous = cap["at"]
        protocol.write_json(out / f"{a.tag}_m{k}.json", result)
        print(
            json.dumps(
                {
                    "model": k,
                    "test_error": error,
                    "test_gap": gap,
                    "wall_seconds": result["wall_seconds"],
                }
            )
        )


def figures(a: argparse.Namespace) -> None:
    """Every stored result under their Figures/ (torch-saved dicts) as one JSON file."""
    import torch

    root = Path(a.authors).resolve() / "Figures"

    def plain(v):
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        if hasattr(v, "tolist"):
            return v.tolist()
        return v

    stored = {
        str(p.relative_to(root)): plain(torch.load(p, weights_only=False))
        for p in sorted(root.rglob("*.pt"))
    }
    protocol.write_json(a.out, {"repository": REPOSITORY, "commit": COMMIT, "files": stored})
    print(f"{len(stored)} stored result files -> {a.out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--authors", required=True, help="a DP-FERMI checkout (untouched)")
    r.add_argument("--data-file", required=True, help=protocol.PARKINSONS_PROCESSED)
    r.add_argument("--out-dir", required=True)
    r.add_argument("--tag", required=True)
    r.add_argument("--setting", default="custom")
    r.add_argument("--epsilon", type=float, default=1.0)
    r.add_argument("--lambd", type=float, default=0.5)
    r.add_argument("--models", type=int, default=3, help="models seeded 0..models-1")
    r.add_argument("--set", action="append", default=[], help="Args attribute NAME=LITERAL")
    r.add_argument(
        "--their-workers",
        action="store_true",
        help="keep their num_workers=2 loaders (slower, same batches)",
    )
    f = sub.add_parser("figures")
    f.add_argument("--authors", required=True)
    f.add_argument("--out", required=True)
    a = parser.parse_args()
    run(a) if a.command == "run" else figures(a)


if __name__ == "__main__":
    main()
