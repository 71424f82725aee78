"""The bad-input matrix: every case is one `error:` line on stderr naming the problem and its
fix, exit status 2, and nothing written (every file under the test's directory unchanged).

Config-file cases of `fairbench run` live in tests/runner/test_runner.py (BAD_CONFIGS); these
are the command-line, lifecycle and pre-flight ones. `BAD_INPUTS` is importable: the issue note's
table is printed from it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

TINY = {
    "name": "tiny",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 800}}],
    "epsilons": [1.0],
    "seeds": 1,
    "methods": [
        {"name": "erm", "hparams": {"epochs": 1}},
        {"name": "dp-sgd", "hparams": {"epochs": 1, "batch_size": 64}},
    ],
}


def config(tmp: Path, data: dict | str, name: str = "exp.yaml") -> str:
    path = tmp / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def with_methods(*methods: dict) -> dict:
    return {**TINY, "methods": list(methods)}


Case = Callable[[Path, Path], list[str]]  # (tmp dir, a finished run of TINY) -> argv


def run_args(data: dict | str, *extra: str) -> Case:
    return lambda tmp, _: ["run", config(tmp, data), "--out", str(tmp / "run"), "--quiet", *extra]


BAD_INPUTS: dict[str, tuple[Case, str]] = {
    "infeasible epsilon (calibration)": (
        run_args(
            {
                **with_methods({"name": "raco-dp", "knobs": [0.05], "hparams": {"epochs": 1}}),
                "epsilons": [0.01],
            }
        ),
        "method raco-dp on synthetic at epsilon 0.01: even one step exceeds",
    ),
    "empty methods list": (run_args({**TINY, "methods": []}), "field 'methods'"),
    "wrong type (seeds)": (run_args({**TINY, "seeds": "three"}), "field 'seeds': Input should"),
    "wrong type (epsilons)": (
        run_args({**TINY, "epsilons": ["one"]}),
        "field 'epsilons.0': Input should be a valid number",
    ),
    "unknown hyper-parameter": (
        run_args(with_methods({"name": "erm", "hparams": {"lrate": 1}})),
        "method erm: hyperparameter 'lrate'",
    ),
    "knob on a method without one": (
        run_args(with_methods({"name": "erm", "knobs": [0.1]})),
        "method erm has no fairness knob",
    ),
    "knob outside its range (pf-ld alpha < 0)": (
        run_args(with_methods({"name": "pf-ld", "knobs": [-0.1]})),
        "method pf-ld: knob alpha = -0.1 is outside its valid range",
    ),
    "constraint the method does not support": (
        run_args(
            {
                **with_methods({"name": "dp-fermi", "knobs": [1.0]}),
                "constraint": "false_negative_rate_parity",
            }
        ),
        "method dp-fermi does not support constraint false_negative_rate_parity; it supports",
    ),
    "private method without epsilons": (
        run_args({**TINY, "epsilons": []}),
        "method dp-sgd is private: list target epsilons",
    ),
    "unknown dataset option": (
        run_args({**TINY, "datasets": [{"name": "synthetic", "options": {"n_rowz": 5}}]}),
        "dataset synthetic: option 'n_rowz'",
    ),
    "duplicate method labels": (
        run_args(with_methods({"name": "erm"}, {"name": "erm"})),
        "two method entries share a label",
    ),
    "empty seed list": (run_args({**TINY, "seeds": []}), "seeds: give a positive count"),
    "config file not found": (
        lambda tmp, _: ["run", str(tmp / "nope.yaml"), "--out", str(tmp / "run")],
        "config '" + "{tmp}/nope.yaml' not found",
    ),
    "config not a mapping": (run_args("- erm\n"), "expected a mapping of config keys"),
    "override without =": (run_args(TINY, "seeds"), "override 'seeds': write KEY=VALUE"),
    "override naming no entry": (
        run_args(TINY, "methods.raco-dp.knobs=[0.05]"),
        "methods.raco-dp names no entry; entries there: erm, dp-sgd",
    ),
    "override with an invalid value": (
        run_args(TINY, "epsilons=[-1]"),
        "epsilon must be a finite number > 0",
    ),
    "--out is an existing file": (
        lambda tmp, _: ["run", config(tmp, TINY), "--out", config(tmp, "x", "file.txt")],
        "is an existing file; give a directory path",
    ),
    "unwritable output directory": (
        lambda tmp, _: ["run", config(tmp, TINY), "--out", "/proc/fairbench-run"],
        "cannot write the run directory /proc/fairbench-run",
    ),
    "--resume with a different config": (
        lambda tmp, done: ["run", config(tmp, {**TINY, "epsilons": [2.0]}), "--resume", str(done)],
        "holds a run of a different config (epsilons: [1.0] there, [2.0] here)",
    ),
    "--resume with an override that changes it": (
        lambda tmp, done: ["run", "--resume", str(done), "seeds=2"],
        "holds a run of a different config (seeds: 1 there, 2 here)",
    ),
    "--resume of a directory that is no run": (
        lambda tmp, _: ["run", "--resume", str(tmp)],
        "is not a run directory",
    ),
    "--resume and another --out": (
        lambda tmp, done: ["run", "--resume", str(done), "--out", str(tmp / "other")],
        "--resume names the run directory; drop --out",
    ),
    "--scheduler without --executor dask": (
        run_args(TINY, "--scheduler", "tcp://x:1"),
        "--scheduler addresses a Dask cluster: add --executor dask",
    ),
    "export into a missing directory": (
        lambda tmp, done: [
            "export",
            str(done),
            "--format",
            "csv",
            "--out",
            str(tmp / "missing" / "t.csv"),
        ],
        "the directory {tmp}/missing does not exist",
    ),
    "report of a directory that is no run": (
        lambda tmp, _: ["report", str(tmp)],
        "has no results store",
    ),
    "verify of a directory that does not exist": (
        lambda tmp, _: ["verify", str(tmp / "nope")],
        "nope: no such run directory",
    ),
}
if not torch.cuda.is_available():
    BAD_INPUTS["--device cuda without a GPU"] = (
        run_args(TINY, "--device", "cuda"),
        "device 'cuda' requested but no CUDA device is available",
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished run of TINY, for the cases that resume or export one."""
    from fairbench.cli import main

    root = tmp_path_factory.mktemp("done")
    out = root / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            "sys.argv",
            [
                "fairbench",
                "run",
                config(root, TINY),
                "--out",
                str(out),
                "--quiet",
                "--workers",
                "1",
            ],
        )
        with pytest.raises(SystemExit) as ended:
            main()
    assert ended.value.code in (0, None)
    return out


def snapshot(*roots: Path) -> dict[Path, tuple[int, int]]:
    return {
        p: (p.stat().st_mtime_ns, p.stat().st_size)
        for root in roots
        for p in [root, *root.rglob("*")]
    }


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, tmp_path, finished_run, case):
    make_args, message = BAD_INPUTS[case]
    args = make_args(tmp_path, finished_run)
    before = snapshot(tmp_path, finished_run)
    code, _, stderr = cli(*args)
    lines = stderr.strip().splitlines()
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert message.replace("{tmp}", str(tmp_path)) in lines[0], lines[0]
    assert snapshot(tmp_path, finished_run) == before
