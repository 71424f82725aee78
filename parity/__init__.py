"""Parity harness: the authors' code and fairbench's port, side by side (issue 37).

Not part of the `fairbench` package and not needed by it. Two halves that talk through files:

- the drivers `authors_raco.py` and `authors_fermi.py` run in the AUTHORS' environment (JAX for
  RaCO-DP, torch for DP-FERMI), import the authors' modules from a pristine checkout given by
  the user, replace at run time only what needs TensorFlow / torchvision / folktables
  (`shims.py`), and write the split, the final test predictions and a result JSON;
- `fairbench_side.py` runs in fairbench's environment: it rebuilds the same Task from the split
  file and fairbench's own copy of the data, trains fairbench's port through the public API
  (`Method.fit`), and writes the same files; `table.py` puts the two side by side.

`protocol.py` (standard library and numpy only) defines the files and is imported by both
halves. `python -m parity` runs everything (`make parity-raco-dp`, `make parity-dp-fermi`).
Nothing of the authors' code is copied here.
"""
