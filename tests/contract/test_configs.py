"""The top-level `configs/` folder: the configs users edit and run, one copy with the package.

`configs` is a symbolic link to `fairbench/configs/` (the package data every install ships), so
the file a user edits and the bundled name are one file and cannot drift. These tests pin that
design: the link, every config the Makefile and the docs run by name present in the folder,
and a config run by path expanding to exactly the trials of the same config run by name.
"""

from __future__ import annotations

import re
import subprocess

from fairbench.runner.config import BUNDLED, expand, load_config
from tests.conftest import REPO

CONFIGS = REPO / "configs"


def test_configs_is_the_package_folder_not_a_copy():
    assert CONFIGS.is_symlink()
    assert CONFIGS.resolve() == BUNDLED.resolve()


def test_every_config_the_makefile_runs_is_in_configs():
    targets = ["run", "figures", "fig-acs", "fig-literature", "fig-privacy-cost", "tune-adult-dp"]
    plan = subprocess.run(["make", "-n", *targets], cwd=REPO, capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    names = set(re.findall(r"fairbench (?:run|tune) ([\w-]+)", plan.stdout))
    assert {"default", "fig-adult-dp", "tune-adult-dp", "privacy-cost-german"} <= names
    missing = sorted(n for n in names if not (CONFIGS / f"{n}.yaml").is_file())
    assert not missing, f"run by name but not in configs/: {missing}"
    assert (CONFIGS / "smoke.yaml").is_file()


def test_a_config_by_path_and_by_name_is_the_same_grid(monkeypatch):
    monkeypatch.chdir(REPO)
    by_path = expand(load_config("configs/smoke.yaml"), warn=lambda _: None)
    by_name = expand(load_config("smoke"), warn=lambda _: None)
    assert len(by_path) == 6
    assert [s.trial_id for s in by_path] == [s.trial_id for s in by_name]


def test_list_configs_names_every_file_in_configs(cli):
    code, out, _ = cli("list", "configs")
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert listed == {p.stem for p in CONFIGS.glob("*.yaml")}
