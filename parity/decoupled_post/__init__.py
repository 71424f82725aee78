"""Algorithm2.py (hradghoukasian/dp_fair_binary) beside fairbench's `decoupled-post` on Adult:
`build_csv.py` rebuilds the authors' data file (absent from the public snapshot) from UCI Adult,
`authors.py` runs their script, `fairbench_side.py` runs the port. Results and how to rerun them:
results/parity/decoupled-post.md. Not wired into `python -m parity` (no shared split: the
authors' script draws its own split and reports only its means)."""
