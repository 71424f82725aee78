"""Privacy plumbing: DpEvents, the PLD accountant, calibration, ledgers and clipping.

Knows no method: methods build their mechanisms from these parts and record them.
"""

from fairbench.privacy.accountant import calibrate_noise_multiplier, calibrate_steps, epsilon
from fairbench.privacy.budget import DEFAULT_DELTA, PrivacyBudget
from fairbench.privacy.ledger import LedgerEntry, PrivacyLedger

__all__ = [
    "DEFAULT_DELTA",
    "LedgerEntry",
    "PrivacyBudget",
    "PrivacyLedger",
    "calibrate_noise_multiplier",
    "calibrate_steps",
    "epsilon",
]
