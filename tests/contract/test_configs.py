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
from fairbench.runner.config_files import BUNDLED, KINDS, bundled, merge, read_config
from fairbench.workflows.advise import load_spaces
from fairbench.workflows.spaces import named_spaces
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


def write(path, text):
    path.write_text(text)
    return path


def test_extends_merges_mappings_and_replaces_everything_else(tmp_path):
    write(
        tmp_path / "base.yaml",
        "name: base\nmethods: [erm, dp-sgd]\nepsilons: [1.0, 2.0]\n"
        "datasets: [{name: synthetic, options: {n: 500, d: 4}}]\n",
    )
    write(tmp_path / "mid.yaml", "extends: base\nepsilons: [3.0]\n")
    child = write(
        tmp_path / "child.yaml",
        "extends: mid.yaml\nname: child\ndatasets: [synthetic]\nseeds: 2\n",
    )
    assert read_config(child, "run") == {
        "name": "child",
        "methods": ["erm", "dp-sgd"],
        "epsilons": [3.0],  # a list replaced whole, through two levels
        "datasets": ["synthetic"],
        "seeds": 2,
    }
    assert merge({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "d": None}) == {
        "a": {"b": 1, "c": [3]},  # mappings merged key by key, lists replaced
        "d": None,
    }
    assert load_config(str(child)).epsilons == [3.0]


def test_extends_finds_a_bundled_base_by_name(tmp_path):
    paid = write(tmp_path / "mine.yaml", "extends: tuning-cost-german-free\nname: mine\n")
    assert (
        load_tune_config(str(paid)).methods == load_tune_config("tuning-cost-german-free").methods
    )


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a.yaml": "extends: nowhere\nname: a\n"}, r"a.yaml: extends 'nowhere': no such file"),
        (
            {"a.yaml": "extends: b\nname: a\n", "b.yaml": "extends: a.yaml\n"},
            r"a.yaml: extends cycle: a.yaml -> b.yaml -> a.yaml; remove one",
        ),
        ({"a.yaml": "extends: a\n"}, r"extends cycle: a.yaml -> a.yaml"),
        ({"a.yaml": "extends: [b, c]\n"}, r"extends: give one config name or path"),
    ],
)
def test_bad_extends_are_one_line_errors(tmp_path, files, message):
    for name, text in files.items():
        write(tmp_path / name, text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(str(tmp_path / "a.yaml"))
    assert "\n" not in str(info.value)


def test_a_named_space_is_the_registrys_and_a_list_merges_in_order():
    entry = MethodSpace.model_validate(
        {"name": "raco-dp", "space": ["raco-dp", "batch-16-256", {"knob": [0.1]}]}
    )
    assert entry.space == {
        **named_spaces()["raco-dp"],
        "batch_size": [16, 32, 64, 128, 256],
        "knob": [0.1],
    }
    assert (
        MethodSpace.model_validate({"name": "erm", "space": "erm"}).space == named_spaces()["erm"]
    )


def test_an_unknown_space_is_a_one_line_error(tmp_path):
    tune = write(
        tmp_path / "t.yaml",
        "extends: tuning-cost-german-free\nname: t\n"
        "methods: [{name: cgoo, space: [cgo, batch-16-256]}]\n",
    )
    with pytest.raises(
        ConfigError, match=r"methods.0.space.*unknown search space 'cgo'; the named"
    ) as info:
        load_tune_config(str(tune))
    assert "\n" not in str(info.value)
    spaces = write(tmp_path / "s.yaml", "methods: [{name: cgoo, space: nope}]\n")
    with pytest.raises(ConfigError, match=r"--spaces .*s.yaml: unknown search space 'nope'"):
        load_spaces(str(spaces))


# named spaces no bundled config uses yet, each with why (spaces.yaml says so beside it)
UNUSED = {"dpse": "bounded group loss: no tuned figure runs it (fig-dpse: the paper's settings)"}


def test_every_named_space_is_valid_and_named_by_a_bundled_config():
    """No space in configs/spaces.yaml is dead (but the listed ones), and each is a valid
    space on its own."""
    named = set(UNUSED)
    for path in [*bundled("tune"), BUNDLED / "advise" / "methods.yaml"]:
        for entry in read_config(path, "tune").get("methods", []):
            space = entry.get("space", {})
            parts = [space] if isinstance(space, str | dict) else space
            named |= {part for part in parts if isinstance(part, str)}
    assert named == set(named_spaces())
    for name in named_spaces():
        MethodSpace.model_validate({"name": "erm", "space": name})
