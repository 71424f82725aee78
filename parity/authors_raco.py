"""Driver for the RaCO-DP authors' code (cleverhans-lab/dp-raco @ 698dcb1), run in THEIR
environment (jax on CPU; see docs/parity.md). Our code: it imports their modules from the
checkout given as --authors, which it never modifies, and runs their training loop unchanged.

    python parity/authors_raco.py run --authors PATH --data-dir DIR --out-dir DIR --tag TAG \
        --seed FOLD --gamma G [--batch-size 256 --sigma 6 --laplace-parameter-b 0.1 ...]
    python parity/authors_raco.py epsilon --authors PATH --n-train N --batch-size B \
        --sigma S --laplace-parameter-b b --delta D --steps T [T ...]

`run`:
- builds the configuration as their demo notebooks do (OmegaConf.merge of
  examples/conf/dpraco.yaml with dataset/parkinsons.yaml, algorithm/
  dpraco_demographic_parity.yaml, model/logistic_regression.yaml), then the command line's
  overrides; unset options keep their defaults;
- `--seed s` seeds their PRNGKey(s) and picks fold s of their 8 folds (`training_params.seeds`
  = [0..7], which their loader indexes; without it their loader always takes fold 0);
- picks the step count with their accountant (`get_number_of_steps_for_target_epsilon`, after
  the stream has set `cfg.dataset.num_train_samples`), or `--steps N`;
- runs `training_routine.train_and_evaluate`, capturing the model at their last evaluation;
- writes TAG.json (result), TAG_split.json (rows, labels, groups and a digest of the features
  their code trained on) and TAG_preds.csv (final test predictions), per parity/protocol.py.
  `--split-file` trains on a given split instead of theirs (same preprocessing).

Run-time stand-ins (parity/shims.py) replace what their tabular path imports but does not use:
torch / torchvision / PIL (data/dataloader.py), folktables (data/ftables.py) and tf.data
(data/tabular.py's stream). PYTHONHASHSEED is pinned (re-exec): their GeneralData orders the
feature columns as list(set(...)), so the hash seed decides which initial weight meets which
feature.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HASHSEED = os.environ.get("FAIRBENCH_AUTHORS_HASHSEED", "0")
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != HASHSEED:
    os.environ["PYTHONHASHSEED"] = HASHSEED
    os.execv(sys.executable, [sys.executable, *sys.argv])

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from parity import protocol, shims  # noqa: E402

REPOSITORY = "https://github.com/cleverhans-lab/dp-raco"
COMMIT = "698dcb1f3d347a0320bed8e502773a536529e7fd"
TRAINING_KEYS = ("batch_size", "lr", "lr_lambda", "softmax_temperature", "MAX_STEPS", "momentum")
ALGORITHM_KEYS = ("sigma", "laplace_parameter_b", "C", "delta", "gamma")


class Authors:
    """Their modules, imported from PATH/src with the stand-ins in place."""

    def __init__(self, path: Path) -> None:
        # everything heavy first, outside the stand-ins, so no library sees a fake module
        import dp_accounting  # noqa: F401
        import flax  # noqa: F401
        import jax  # noqa: F401
        import optax  # noqa: F401
        import pandas  # noqa: F401
        import sklearn.metrics
        import sklearn.model_selection  # noqa: F401
        from omegaconf import OmegaConf

        src = path / "src"
        if not (src / "dpraco").is_dir():
            sys.exit(f"parity: {path} is not a dp-raco checkout (no src/dpraco)")
        sys.path.insert(0, str(src))
        missing = {**shims.image_stack_stand_ins(), **shims.missing_modules({"folktables": {}})}
        with shims.stand_ins(missing) as used:
            import dpraco.data.tabular as tabular
            import dpraco.training.training_routine as routine
            from dpraco.accounting import (
                get_accounting_step,
                get_number_of_steps_for_target_epsilon,
            )
            from dpraco.data import get_data_stream
            from dpraco.data.args import process_arguments
            from dpraco.data.dataloader import GeneralData, TabularDataset
            from dpraco.models import get_model
        self.stood_in = used
        self.OmegaConf = OmegaConf
        self.tabular, self.routine = tabular, routine
        self.get_accounting_step = get_accounting_step
        self.steps_for_epsilon = get_number_of_steps_for_target_epsilon
        self.process_arguments = process_arguments
        self.GeneralData, self.TabularDataset = GeneralData, TabularDataset
        self.get_model = get_model
        self._get_data_stream = get_data_stream
        self.conf = path / "examples" / "conf"

    def get_data_stream(self, cfg, key, seed):
        # their stream imports tensorflow when it is built; the tf.data stand-in serves it
        with shims.stand_ins({"tensorflow": shims.tensorflow_stand_in()}, force=True):
            return self._get_data_stream(cfg, key, seed=seed)

    def config(self, a: argparse.Namespace):
        load = self.OmegaConf.load
        base = load(self.conf / "dpraco.yaml")
        base.pop("defaults", None)
        base.pop("hydra", None)
        dataset = load(self.conf / "dataset" / "parkinsons.yaml")
        dataset.data_path = str(a.data_dir)
        cfg = self.OmegaConf.merge(
            base,
            self.OmegaConf.create(
                {
                    "dataset": dataset,
                    "algorithm": load(self.conf / "algorithm" / "dpraco_demographic_parity.yaml"),
                    "model": load(self.conf / "model" / "logistic_regression.yaml"),
                }
            ),
        )
        tp = cfg.training_params
        tp.target_epsilon = a.epsilon
        tp.seed = a.seed
        tp.seeds = list(range(int(tp.num_folds)))  # their loader: fold = seeds.index(seed)
        for key in TRAINING_KEYS:
            if getattr(a, key, None) is not None:
                tp[key] = getattr(a, key)
        for key in ALGORITHM_KEYS:
            if getattr(a, key, None) is not None:
                cfg.algorithm[key] = getattr(a, key)
        if getattr(a, "eval_every", None) is not None:
            cfg.eval.eval_every_k = a.eval_every
        return cfg


def their_split_rows(au: Authors, cfg, seed: int) -> dict:
    """The CSV rows of their train / validation / test parts, re-derived with their own classes
    as their get_data_tables does (GeneralData(split 0.75, default_rng(cfg.dataset.rng)), then
    their split_into_folds on the 75% pool, fold seeds.index(seed))."""
    args = argparse.Namespace(dataset=cfg.dataset.name, num_classes=2, split=1, seed=0)
    args = au.process_arguments(args, cfg.dataset.data_path)
    full = au.GeneralData(
        path=args.path,
        random_state=np.random.default_rng(cfg.dataset.rng),
        sensitive_attributes=args.sensitive_attributes,
        cols_to_norm=args.cols_to_norm,
        output_col_name=args.output_col_name,
        split=0.75,
    )
    pool = full.getTrain(return_tensor=False)
    features = np.concatenate([x[0][None, :] for x in pool], axis=0)
    labels = au.tabular.one_hot(np.array([x[2] for x in pool]), 2)
    sens = au.tabular.one_hot(np.array([x[3] for x in pool]), 2)
    folds = au.tabular.split_into_folds(
        features, labels, sens, cfg.training_params.num_folds, cfg.algorithm.constraint_type, None
    )
    train, val = folds[list(cfg.training_params.seeds).index(seed)]
    rows = full.df_train.index.to_numpy()
    attribute = args.sensitive_attributes[0]
    return {
        "rows": {"train": rows[train], "val": rows[val], "test": full.df_test.index.to_numpy()},
        "feature_names": list(full.non_sens_attr),
        "group_maps": {
            "train": pool.attr_no[attribute],
            "val": pool.attr_no[attribute],
            "test": full.getTest(return_tensor=False).attr_no[attribute],
        },
        "train_features": features[train],
    }


def injected_get_data_tables(au: Authors, split: dict):
    """A stand-in for their get_data_tables that uses the rows of a split file, with their
    preprocessing (get_dummies, z-scoring with the mean and std of train + validation rows,
    their TabularDataset's label and group coding)."""

    def get_data_tables(cfg, permute_train=False, seed=0):
        import pandas as pd

        args = argparse.Namespace(dataset=cfg.dataset.name, num_classes=2, split=1, seed=0)
        args = au.process_arguments(args, cfg.dataset.data_path)
        df = pd.read_csv(args.path)
        sens = sorted(args.sensitive_attributes)
        others = sorted(set(df.columns) - {*sens, args.output_col_name})
        df = pd.get_dummies(df, columns=list(set(others) - set(args.cols_to_norm)))
        names = list(set(df.columns) - {*sens, args.output_col_name})
        pool = df.loc[list(split["rows"]["train"]) + list(split["rows"]["val"])].copy()
        test = df.loc[list(split["rows"]["test"])].copy()
        mean, std = pool[args.cols_to_norm].mean(), pool[args.cols_to_norm].std()
        for col in args.cols_to_norm:
            pool[col] = (pool[col] - mean[col]) / std[col]
            test[col] = (test[col] - mean[col]) / std[col]

        def arrays(frame):
            data = au.TabularDataset(
                frame, names, sens, output_col_name=args.output_col_name, return_tensor=False
            )
            X = np.concatenate([x[0][None, :] for x in data], axis=0)
            y = au.tabular.one_hot(np.array([x[2] for x in data]), 2)
            z = au.tabular.one_hot(np.array([x[3] for x in data]), 2)
            return X, y, z

        (pX, py, pz), (tX, ty, tz) = arrays(pool), arrays(test)
        n = len(split["rows"]["train"])
        return pX[:n], py[:n], pz[:n], pX[n:], py[n:], pz[n:], tX, ty, tz

    return get_data_tables


def collect(stream) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, label index and group index of a whole evaluation stream."""
    parts = [tuple(np.asarray(a) for a in batch) for batch in stream(inference_mode=True)]
    X = np.concatenate([p[0] for p in parts])
    return (
        X,
        np.concatenate([p[1] for p in parts]).argmax(1),
        np.concatenate([p[2] for p in parts]).argmax(1),
    )


def run(a: argparse.Namespace) -> None:
    from jax import random

    started = time.time()
    au = Authors(Path(a.authors))
    cfg = au.config(a)
    injected = None
    if a.split_file:
        injected = protocol.read_split(a.split_file)
        au.tabular.get_data_tables = injected_get_data_tables(au, injected)
        derived = None
    else:
        derived = their_split_rows(au, cfg, a.seed)

    key = random.PRNGKey(cfg.training_params.seed)
    data_key, model_key, training_key = random.split(key, num=3)
    train_stream, val_data, test_data = au.get_data_stream(cfg, data_key, cfg.training_params.seed)
    n_train = int(cfg.dataset.num_train_samples)
    parts = {"train": collect(train_stream), "val": collect(val_data), "test": collect(test_data)}
    if derived is not None and not np.allclose(
        parts["train"][0], derived["train_features"], atol=1e-5
    ):
        sys.exit("parity: the re-derived split does not give the rows their loader trained on")

    steps = a.steps if a.steps is not None else int(au.steps_for_epsilon(cfg))
    cfg.training_params.number_of_steps = int(steps)
    epsilon = float(au.get_accounting_step(cfg, steps)) if steps > 0 else 0.0

    captured = {}
    evaluate = au.routine.evaluate_dataset

    def capture(cfg_, state, dataset_fn, *args, **kwargs):
        if kwargs.get("prefix") == "test":
            captured["state"] = state
        return evaluate(cfg_, state, dataset_fn, *args, **kwargs)

    au.routine.evaluate_dataset = capture
    trained = time.time()
    metrics = au.routine.train_and_evaluate(
        cfg=cfg,
        state=au.get_model(cfg, model_key),
        train_stream=train_stream,
        rng=training_key,
        test_data=test_data,
        val_data=val_data,
    )
    train_seconds = time.time() - trained
    au.routine.evaluate_dataset = evaluate

    state = captured["state"]
    X, y, z = parts["test"]
    pred = np.asarray(state.apply_fn({"params": state.params}, X, train=False)).argmax(1)
    test_error, test_gap = protocol.error_and_gap(y, z, pred)
    last = metrics.iloc[-1]
    # their own numbers for the same final model: must equal ours
    theirs = {
        "test_error": 1 - float(last["test_accuracy"]),
        "test_gap": float(last["test_hard_constraint"]),
        "train_gap": float(last["train_hard_constraint"]),
        "val_error": 1 - float(last["val_accuracy"]),
    }
    if abs(theirs["test_error"] - test_error) > 1e-6 or abs(theirs["test_gap"] - test_gap) > 1e-5:
        sys.exit(f"parity: predictions {test_error, test_gap} != their metrics {theirs}")

    rows = injected["rows"] if injected else {p: v.tolist() for p, v in derived["rows"].items()}
    out = Path(a.out_dir)
    names = derived["feature_names"] if derived else _injected_names(au, cfg)
    group_maps = derived["group_maps"] if derived else injected["group_maps"]
    split = protocol.make_split(
        method="raco-dp",
        source={
            "repository": REPOSITORY,
            "commit": COMMIT,
            "authors_path": str(a.authors),
            "fold": a.seed,
            "injected_from": a.split_file,
            "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
        },
        data_file=Path(cfg.dataset.data_path) / protocol.PARKINSONS_PROCESSED,
        rows=rows,
        y={p: parts[p][1] for p in protocol.PARTS},
        s={p: parts[p][2] for p in protocol.PARTS},
        group_maps=group_maps,
        feature_names=names,
        features={p: parts[p][0] for p in protocol.PARTS},
        standardised_with=["train", "val"],
    )
    protocol.write_json(out / f"{a.tag}_split.json", split)
    protocol.write_predictions(out / f"{a.tag}_preds.csv", rows["test"], y, z, pred)
    eval_rows = [
        {
            "step": int(r["step"]),
            "test_error": 1 - float(r["test_accuracy"]),
            "test_gap": float(r["test_hard_constraint"]),
            "train_gap": float(r["train_hard_constraint"]),
            "val_error": 1 - float(r["val_accuracy"]),
        }
        for _, r in metrics.iterrows()
    ]
    result = protocol.make_result(
        method="raco-dp",
        implementation="authors",
        setting=a.setting,
        knob=cfg.algorithm.gamma,
        seed=a.seed,
        steps=steps,
        sampling_rate=cfg.training_params.batch_size / n_train,
        delta=float(cfg.algorithm.delta),
        epsilon={"authors": epsilon},
        test_error=test_error,
        test_gap=test_gap,
        wall_seconds=time.time() - started,
        sizes={p: len(rows[p]) for p in protocol.PARTS},
        settings={
            "training_params": au.OmegaConf.to_container(cfg.training_params),
            "algorithm": au.OmegaConf.to_container(cfg.algorithm),
        },
        extra={
            "their_final_metrics": theirs,
            "eval_rows": eval_rows,
            "train_seconds": train_seconds,
            "stand_ins": [*au.stood_in, "tensorflow"],
            "sigma": float(cfg.algorithm.sigma),
            "laplace_scale": 1 / float(cfg.algorithm.laplace_parameter_b),
        },
    )
    protocol.write_json(out / f"{a.tag}.json", result)
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "setting",
                    "knob",
                    "seed",
                    "steps",
                    "epsilon",
                    "test_error",
                    "test_gap",
                    "wall_seconds",
                )
            }
        )
    )


def _injected_names(au: Authors, cfg) -> list[str]:
    import pandas as pd

    args = argparse.Namespace(dataset=cfg.dataset.name, num_classes=2, split=1, seed=0)
    args = au.process_arguments(args, cfg.dataset.data_path)
    df = pd.read_csv(args.path, nrows=5)
    sens = sorted(args.sensitive_attributes)
    others = sorted(set(df.columns) - {*sens, args.output_col_name})
    df = pd.get_dummies(df, columns=list(set(others) - set(args.cols_to_norm)))
    return list(set(df.columns) - {*sens, args.output_col_name})


def epsilon(a: argparse.Namespace) -> None:
    """Their accountant's epsilon for given schedules (one JSON line: steps -> epsilon)."""
    au = Authors(Path(a.authors))
    a.data_dir, a.seed, a.epsilon = ".", 0, 1.0
    cfg = au.config(a)
    cfg.dataset.num_train_samples = a.n_train
    print(json.dumps({str(t): float(au.get_accounting_step(cfg, t)) for t in a.steps}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--authors", required=True, help="a dp-raco checkout (untouched)")
    r.add_argument(
        "--data-dir",
        required=True,
        type=Path,
        help=f"folder holding {protocol.PARKINSONS_PROCESSED}",
    )
    r.add_argument("--out-dir", required=True)
    r.add_argument("--tag", required=True)
    r.add_argument("--setting", default="custom")
    r.add_argument("--epsilon", type=float, default=1.0)
    r.add_argument("--seed", type=int, default=0, help="PRNG seed and fold (0-7)")
    r.add_argument("--steps", type=int, help="fixed step count (skips their accountant)")
    r.add_argument("--split-file", help="train on this parity split file's rows")
    r.add_argument("--eval-every", type=int)
    e = sub.add_parser("epsilon")
    e.add_argument("--authors", required=True)
    e.add_argument("--n-train", type=int, required=True)
    e.add_argument("--steps", type=int, nargs="+", required=True)
    for p in (r, e):
        p.add_argument("--batch-size", dest="batch_size", type=int)
        p.add_argument("--sigma", type=float)
        p.add_argument("--laplace-parameter-b", dest="laplace_parameter_b", type=float)
        p.add_argument("--delta", type=float)
    r.add_argument("--gamma", type=float)
    r.add_argument("--C", type=float)
    r.add_argument("--lr", type=float)
    r.add_argument("--lr-lambda", dest="lr_lambda", type=float)
    r.add_argument("--temperature", dest="softmax_temperature", type=float)
    r.add_argument("--momentum", type=float)
    r.add_argument("--max-steps", dest="MAX_STEPS", type=int)
    a = parser.parse_args()
    run(a) if a.command == "run" else epsilon(a)


if __name__ == "__main__":
    main()
