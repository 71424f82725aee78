"""A public conformance kit for plugins, in the spirit of scikit-learn's `check_estimator`.

`check_method(MyMethod, hparams={...})` runs the method contract the runner relies on (class
attributes, hyper-parameter validation and JSON round trip, determinism under a seed, a ledger
equal to the plan and within the target, the metrics row, a knob smoke test) and
`check_adapter(get_dataset(...))` the dataset contract. Both return the names of the checks
passed and raise `AssertionError`, one line naming the plugin and the check, at the first
failure, so they drop into any test suite. From a shell:

    python -m fairbench.testing my_package.module:MyMethod
"""

from fairbench.testing.adapters import check_adapter, iter_adapter_checks
from fairbench.testing.methods import KNOB_TOLERANCE, TARGETS, check_method, iter_checks

__all__ = [
    "KNOB_TOLERANCE",
    "TARGETS",
    "check_adapter",
    "check_method",
    "iter_adapter_checks",
    "iter_checks",
]
