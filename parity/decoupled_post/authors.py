"""Run the authors' Algorithm2.py from a checkout (its args.py defaults: 50 epochs, batch 1024;
Algorithm2.py: noise std 3.13, clip 1.5, lr 0.01, eps_0 = eps_1 = 0.05, delta 1e-5) with three
stand-ins, none of which changes a number: torchvision (imported by their dataloader, unused on
tabular data) stubbed; their TabularDataset's per-item pandas lookups served from arrays built
once (the same values); `num_models_train` from the command line (theirs: 10).
`fixed-groups` also gives every split one group index (theirs: order of first appearance in
each split, which swaps the groups between their post-processing and test splits on the rebuilt
file). Usage: python authors.py CHECKOUT SEED MODELS [fixed-groups]."""

from __future__ import annotations

import os
import runpy
import sys
import types

import numpy as np
import torch


def main(checkout: str, seed: int, models: int, fixed: bool) -> None:
    stub = types.ModuleType("torchvision")
    stub.transforms = types.ModuleType("torchvision.transforms")
    sys.modules["torchvision"] = stub
    sys.modules["torchvision.transforms"] = stub.transforms
    os.chdir(checkout)
    sys.path.insert(0, checkout)
    import args as their_args
    import dataloader

    original_init = dataloader.TabularDataset.__init__

    def cached_init(self, *a, **k):
        original_init(self, *a, **k)
        if fixed:
            self.attr_no = {
                c: {v: i for i, v in enumerate(sorted(self.df[c].unique()))} for c in self.attr_no
            }
        self._x = np.array(self.one_hot_non_senstive, dtype=np.float32)
        looked = [self.onehotlookup(self.sensitive_table.iloc[i]) for i in range(len(self))]
        self._s = [s for s, _ in looked]
        self._si = [i for _, i in looked]
        self._y = [1 if v == "Yes" else 0 for v in self.output]

    def cached_getitem(self, idx):
        return torch.from_numpy(self._x[idx]), self._s[idx], self._y[idx], self._si[idx]

    dataloader.TabularDataset.__init__ = cached_init
    dataloader.TabularDataset.__getitem__ = cached_getitem
    args_init = their_args.Args.__init__

    def fewer(self):
        args_init(self)
        self.num_models_train = models

    their_args.Args.__init__ = fewer
    torch.manual_seed(seed)
    runpy.run_path("Algorithm2.py", run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] == ["fixed-groups"])
