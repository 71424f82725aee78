"""Run-time stand-ins that let the authors' unmodified code run on a CPU without TensorFlow,
torchvision, PIL or folktables (standard library and numpy only; our code, none of theirs).

The authors' tabular paths import these packages but do not need them: dp-raco's
`data/dataloader.py` imports torch, torchvision and PIL at the top for its image datasets,
`data/tabular.py` imports the folktables loader at the top, and `tabular_data_stream` builds its
batches with `tf.data`; DP-FERMI imports torchvision for its image model and loader. Instead of
patching their files, the drivers put these stand-ins into `sys.modules` while the authors'
modules are imported (or, for `tensorflow`, while their stream is built), then take them out.

`tensorflow_stand_in()` implements the part of `tf.data` that dp-raco's `tabular_data_stream`
uses, with the same batches in the same order: `Dataset.from_generator(generator,
output_signature)` iterates `generator()` afresh on every `as_numpy_iterator()` and casts each
item to the signature's dtypes (features float32, the count int32); `from_tensor_slices(arrays)
.batch(n, drop_remainder=False)` yields consecutive slices; `prefetch` only overlaps work, so it
returns the dataset unchanged. (Checked against tensorflow-cpu 2.21 by the groundwork: the first
40 Poisson batches, the train-evaluation pass, validation and test batches are identical.)
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np


class _Unavailable:
    """What a missing package's attribute stands for: fails loudly if the code path runs."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name} is not installed (parity stand-in): not a tabular path")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")


class _MissingModule(ModuleType):
    """A module whose attributes are `_Unavailable`, except those given."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self.__name__}.{attr}")


def missing_modules(names: Mapping[str, Mapping[str, Any]]) -> dict[str, ModuleType]:
    """Stand-in modules for dotted `names` (name -> attributes to set), parents linked to
    children so that `import a.b as c` and `from a import b` both resolve."""
    made: dict[str, ModuleType] = {}
    for name in sorted(names, key=lambda n: n.count(".")):
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            dotted = ".".join(parts[:depth])
            if dotted not in made:
                made[dotted] = _MissingModule(dotted)
                if depth > 1:
                    setattr(made[".".join(parts[: depth - 1])], parts[depth - 1], made[dotted])
        for attr, value in names[name].items():
            setattr(made[name], attr, value)
    return made


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@contextmanager
def stand_ins(modules: Mapping[str, ModuleType], force: bool = False) -> Iterator[list[str]]:
    """Put `modules` into sys.modules for the duration (only those whose top-level package is
    not installed, unless `force`), then remove them again. Yields the names stood in for."""
    used = [n for n in modules if force or not importable(n.split(".")[0])]
    saved = {n: sys.modules[n] for n in used if n in sys.modules}
    sys.modules.update({n: modules[n] for n in used})
    try:
        yield used
    finally:
        for name in used:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


# ----- tf.data, the part dp-raco's tabular stream uses -----------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    shape: Any
    dtype: Any


class Dataset:
    """A re-iterable stream: `as_numpy_iterator()` starts a fresh pass each time."""

    def __init__(self, make_iterator: Callable[[], Iterator[tuple]]) -> None:
        self._make_iterator = make_iterator

    @staticmethod
    def from_generator(generator: Callable[[], Any], output_signature: tuple) -> Dataset:
        dtypes = [spec.dtype for spec in output_signature]

        def items() -> Iterator[tuple]:
            for item in generator():
                yield tuple(np.asarray(v, dtype=d)[()] for v, d in zip(item, dtypes, strict=True))

        return Dataset(items)

    @staticmethod
    def from_tensor_slices(tensors: tuple) -> _Slices:
        return _Slices(tuple(np.asarray(t) for t in tensors))

    def prefetch(self, buffer_size: int) -> Dataset:
        return self

    def as_numpy_iterator(self) -> Iterator[tuple]:
        return self._make_iterator()

    def __iter__(self) -> Iterator[tuple]:
        return self._make_iterator()


class _Slices(Dataset):
    def __init__(self, arrays: tuple[np.ndarray, ...]) -> None:
        self._arrays = arrays
        n = len(arrays[0])
        super().__init__(lambda: (tuple(a[i] for a in arrays) for i in range(n)))

    def batch(self, batch_size: int, drop_remainder: bool = False) -> Dataset:
        arrays, n = self._arrays, len(self._arrays[0])
        stop = n - n % batch_size if drop_remainder else n

        def batches() -> Iterator[tuple]:
            for start in range(0, stop, batch_size):
                yield tuple(a[start : start + batch_size] for a in arrays)

        return Dataset(batches)


def tensorflow_stand_in() -> ModuleType:
    """A `tensorflow` module with `float32`, `int32`, `TensorSpec` and `data.{Dataset,
    AUTOTUNE}` as above; anything else fails loudly."""
    modules = missing_modules(
        {
            "tensorflow": {"float32": np.float32, "int32": np.int32, "TensorSpec": TensorSpec},
            "tensorflow.data": {"Dataset": Dataset, "AUTOTUNE": -1},
        }
    )
    tf = modules["tensorflow"]
    tf.data = modules["tensorflow.data"]
    return tf


def image_stack_stand_ins() -> dict[str, ModuleType]:
    """torch, torchvision and PIL for dp-raco's data/dataloader.py (only its image datasets use
    them; `class TabularDataset(Data.Dataset)` needs a base class: `object`)."""
    return missing_modules(
        {
            "torch": {},
            "torch.utils": {},
            "torch.utils.data": {"Dataset": object},
            "torchvision": {},
            "torchvision.transforms": {},
            "PIL": {},
            "PIL.Image": {},
        }
    )
