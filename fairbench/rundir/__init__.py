"""A run directory on disk: its file names, its saved config and (`store`) its results, one
`row.TrialRow` per trial.

Below both the runner, which writes run directories, and the report, which reads them, so
neither needs the other to find its way around one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG_FILE = "config.yaml"  # the resolved config the run was started with


def saved_config(run_dir: Path) -> Any:
    """The run's saved config as YAML data (unvalidated); {} when it has none."""
    path = run_dir / CONFIG_FILE
    return yaml.safe_load(path.read_text()) if path.is_file() else {}
