"""Run the fair-dp authors' unmodified `main.py` on Adult at their adult_script.sh settings.

    python parity/fair_dp/authors.py AUTHORS ADULT_DIR OUT METHOD SEED [EPOCHS]

AUTHORS: a checkout of layer6ai-labs/fair-dp (imported from there, never copied). ADULT_DIR:
a folder holding UCI's adult.data and adult.test; their loader writes a formatted CSV beside
them, so they are linked into OUT/data/adult first. METHOD: regular, dpsgd, dpsgd-f or
dpsgd-global-adapt. Their code needs opacus 1.1 and pandas < 2 (opacus 1.6 lacks a private
helper their optimizers import; pandas 3 refuses their loader's column assignment): measured
with a venv over fairbench's holding opacus 1.1.3, pandas 1.5.3, numpy 1.26.4, regex,
tensorboardX and tqdm (docs/parity.md). torchvision (image datasets only) stands in while
their modules load (functorch too, where torch does not ship it: it serves only gradient
angles and Hessians, off in their Adult script). Their logs land in OUT/runs/<METHOD>_<SEED>.
"""

from __future__ import annotations

import os
import runpy
import sys
from contextlib import AbstractContextManager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from parity.shims import missing_modules, stand_ins

# torchvision: their image datasets only; functorch (gradient angles and Hessians, off here):
# only where torch does not ship it (torch 2.13 does, with make_functional, vjp and grad).
STAND_INS = ("torchvision", "torchvision.datasets", "torchvision.transforms", "functorch")


def their_imports() -> AbstractContextManager[list[str]]:
    """Stand-ins for the packages their tabular path imports but never uses."""
    return stand_ins(missing_modules({name: {} for name in STAND_INS}))


# experiment_scripts/adult_script.sh, per method (their lr differs for Global-Adapt).
COMMON = [
    "group_ratios=1,1",
    "make_valid_loader=0",
    "net=mlp",
    "train_batch_size=256",
    "valid_batch_size=256",
    "test_batch_size=256",
]
PRIVATE = ["delta=1e-6", "noise_multiplier=1"]
SETTINGS: dict[str, list[str]] = {
    "regular": ["lr=0.01"],
    "dpsgd": ["lr=0.01", *PRIVATE, "l2_norm_clip=0.5"],
    "dpsgd-f": ["lr=0.01", *PRIVATE, "base_max_grad_norm=0.5", "counts_noise_multiplier=10"],
    "dpsgd-global-adapt": [
        *PRIVATE,
        "l2_norm_clip=0.5",
        "strict_max_grad_norm=50",
        "lr=0.2",
        "bits_noise_multiplier=10",
        "lr_Z=0.1",
        "threshold=1",
    ],
}


def main(argv: list[str]) -> None:
    authors, adult, out, method, seed = argv[:5]
    epochs = argv[5] if len(argv) > 5 else "20"
    root = Path(out).resolve()
    data = root / "data" / "adult"
    data.mkdir(parents=True, exist_ok=True)
    for name in ("adult.data", "adult.test"):
        link = data / name
        if not link.exists():
            link.symlink_to(Path(adult).resolve() / name)
    config = [
        *COMMON,
        *SETTINGS[method],
        f"max_epochs={epochs}",
        f"seed={seed}",
        f"data_root={str(root / 'data') + '/'!r}",
        f"logdir_root={str(root / 'runs')!r}",
        f"logdir={f'{method}_{seed}'!r}",
    ]
    sys.argv = ["main.py", "--dataset=adult", f"--method={method}"]
    sys.argv += [arg for kv in config for arg in ("--config", kv)]
    sys.path.insert(0, str(Path(authors).resolve()))
    os.chdir(root)
    with their_imports():
        runpy.run_path(str(Path(authors) / "main.py"), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
