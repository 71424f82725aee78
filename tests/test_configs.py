"""The top-level `configs/` folder: the configs users edit and run, one copy with the package.

`configs` is a symbolic link to `fairbench/configs/` (the package data every install ships), so
the file a user edits and the bundled name are one file and cannot drift. Configs sit in one
folder per kind (runs/, tunes/, advise/) and are addressed by name by their command. These
tests pin that design: the link, every config the Makefile and the docs run by name present in
its kind's folder, every bundled config loading, and a config run by path expanding to exactly
the trials of the same config run by name.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from fairbench.errors import ConfigError
from fairbench.runner.config import expand, load_config
from fairbench.runner.config_files import BUNDLED, KINDS, bundled
from fairbench.workflows.advise import load_spaces
from fairbench.workflows.tune import MethodSpace, load_tune_config
from tests.conftest import REPO

CONFIGS = REPO / "configs"


def test_configs_is_the_package_folder_not_a_copy():
    assert CONFIGS.is_symlink()
    assert CONFIGS.resolve() == BUNDLED.resolve()


def test_every_config_the_makefile_runs_is_in_its_kinds_folder():
    targets = ["run", "figures", "fig-acs", "fig-literature", "fig-privacy-cost", "tune-adult-dp"]
    plan = subprocess.run(["make", "-n", *targets], cwd=REPO, capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    runs = re.findall(r"fairbench (run|tune) ([\w-]+)", plan.stdout)
    assert {"default", "fig-adult-dp", "tune-adult-dp", "privacy-cost-german"} <= {
        name for _, name in runs
    }
    missing = sorted(
        f"{KINDS[kind]}/{name}"
        for kind, name in runs
        if not (CONFIGS / KINDS[kind] / f"{name}.yaml").is_file()
    )
    assert not missing, f"run by name but not in configs/: {missing}"
    assert (CONFIGS / "runs" / "smoke.yaml").is_file()


def test_a_config_by_path_and_by_name_is_the_same_grid(monkeypatch):
    monkeypatch.chdir(REPO)
    by_path = expand(load_config("configs/runs/smoke.yaml"), warn=lambda _: None)
    by_name = expand(load_config("smoke"), warn=lambda _: None)
    assert len(by_path) == 6
    assert [s.trial_id for s in by_path] == [s.trial_id for s in by_name]


def test_every_bundled_config_loads():
    """Every run and tune config validates (its `extends:` and named spaces resolved), and
    advise's method list resolves to valid spaces."""
    runs = [load_config(p.stem) for p in bundled("run")]
    tunes = [load_tune_config(p.stem) for p in bundled("tune")]
    assert runs and tunes
    assert len({c.name for c in runs + tunes}) == len(runs) + len(tunes)
    assert all(MethodSpace.model_validate(raw).space for raw in load_spaces(None))


def test_a_name_of_the_other_kind_says_which_command_runs_it():
    with pytest.raises(ConfigError, match="is a tune config: run it with `fairbench tune"):
        load_config("privacy-cost-german")
    with pytest.raises(ConfigError, match="is a run config: run it with `fairbench run smoke`"):
        load_tune_config("smoke")


def test_list_configs_names_every_file_in_configs(cli):
    code, out, _ = cli("list", "configs")
    assert code == 0
    listed = {tuple(line.split()[:2]) for line in out.splitlines() if line.strip()}
    assert listed == {
        (p.stem, kind) for kind in KINDS for p in (CONFIGS / KINDS[kind]).glob("*.yaml")
    }
