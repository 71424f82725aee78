"""Write the fair-dp authors' Adult split of one seed as arrays, for fairbench to train on.

    python parity/fair_dp/export_split.py AUTHORS ADULT_DIR OUT.npz SEED

Runs in the authors' environment (see authors.py): it calls their own
`datasets.tabular.get_tabular_datasets("adult", ..., "sex", [1, 1], make_valid_loader=False)`,
the call their main.py makes at adult_script.sh's settings, and saves the train and test
tensors it returns (features after their z-scoring and one-hot coding, income label, sex with
Male 0 and Female 1) as X_train, y_train, s_train, X_test, y_test, s_test. Their loader is
deterministic in the seed (pandas `sample(random_state=seed)`, and `random.seed(seed)` for
the group-ratio subsampling), so these are the rows their run trains and tests on.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from parity.fair_dp.authors import their_imports


def main(authors: str, adult: str, out: str, seed: int) -> None:
    sys.path.insert(0, str(Path(authors).resolve()))
    with their_imports():
        from datasets.tabular import get_tabular_datasets  # their module

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "adult"
        data.mkdir()
        for name in ("adult.data", "adult.test"):
            (data / name).symlink_to(Path(adult).resolve() / name)
        train, _, test = get_tabular_datasets("adult", tmp + "/", seed, "sex", [1, 1], False)
    arrays = {
        f"{key}_{name}": getattr(part, attr).numpy()
        for name, part in (("train", train), ("test", test))
        for key, attr in (("X", "x"), ("y", "y"), ("s", "z"))
    }
    np.savez_compressed(out, **arrays)
    print({k: v.shape for k, v in arrays.items()})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
