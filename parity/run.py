"""`python -m parity {raco-dp,dp-fermi} --authors PATH`: run the authors' code (in their
environment, through the drivers) and fairbench's port (here) on the same splits, then write
results/parity/<method>.{csv,md}. Re-running resumes: finished runs under the work folder are
kept. `--table-only` rebuilds the tables from results/parity/<method>/ without running.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parity import protocol, table

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Authors:
    """Where the authors' code comes from and the environment it runs in."""

    method: str
    repository: str
    commit: str
    marker: str  # a path that exists in a checkout
    venv: str  # default environment, made by `make parity-env-<method>`
    requirements: str
    python: str = "3.11"

    def instructions(self) -> str:
        return "\n".join(
            [
                f"The {self.method} parity table runs the authors' code: {self.repository}",
                f"at commit {self.commit}. Get it (any folder; it is never modified):",
                f"    git clone {self.repository} PATH",
                f"    git -C PATH checkout {self.commit}",
                f"Their environment (Python {self.python}, CPU only, pinned versions in",
                f"{self.requirements}):",
                f"    make parity-env-{self.method}",
                f"(= python3 -m venv {self.venv} && {self.venv}/bin/pip install -r "
                f"{self.requirements}), or pass AUTHORS_PYTHON=/path/to/python of an environment "
                "with those pins. Then:",
                f"    make parity-{self.method} AUTHORS=PATH",
                "See docs/parity.md for what it runs and how long it takes.",
            ]
        )


RACO = Authors(
    "raco-dp",
    "https://github.com/cleverhans-lab/dp-raco",
    "698dcb1f3d347a0320bed8e502773a536529e7fd",
    "src/dpraco/algorithm/update_lambdas.py",
    ".venv-raco-dp",
    "parity/requirements-raco-dp.txt",
)
FERMI = Authors(
    "dp-fermi",
    "https://github.com/devanshgupta160/Stochastic-Differentially-Private-and-Fair-Learning",
    "1c4dc84a4fe77355d5d2b94243b89f838729f831",
    "dp_fermi.py",
    ".venv-dp-fermi",
    "parity/requirements-dp-fermi.txt",
)


@dataclass(frozen=True)
class Setting:
    """One configuration run by both sides: the authors' driver options and fairbench's
    hyper-parameters (one entry per fairbench variant)."""

    name: str
    knobs: tuple[float, ...]
    authors_args: tuple[str, ...]
    fairbench: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: str = ""


IN_REGION_AUTHORS = (
    "--batch-size",
    "256",
    "--sigma",
    "6",
    "--laplace-parameter-b",
    "0.1",
    "--lr",
    "0.1",
    "--lr-lambda",
    "0.01",
    "--temperature",
    "1",
)
IN_REGION_FAIRBENCH = {
    "batch_size": 256,
    "noise_multiplier": 6.0,
    "laplace_scale": 10.0,
    "lr": 0.1,
    "lr_dual": 0.01,
    "temperature": 1.0,
    "clip_norm": 3.0,
    "calibrate": "steps",
}
RACO_DELTA = 1e-4  # the authors' delta; fairbench runs at the same delta here
# `"steps": AUTHORS_STEPS` in a variant: a harness option (`raco_target`), not a hyper-parameter
AUTHORS_STEPS = "the authors'"
RACO_AUTHORS = {**IN_REGION_FAIRBENCH, "dual_update": "clipped", "denominators": "frozen"}
PADDED = {"batches": "padded", "parity_unaccounted": True}
RACO_SETTINGS = (
    Setting(
        "in-region",
        (0.01, 0.02, 0.05),
        IN_REGION_AUTHORS,
        {
            "": IN_REGION_FAIRBENCH,
            "authors' dual update": {**IN_REGION_FAIRBENCH, "dual_update": "clipped"},
            "authors' dual update and frozen denominators": RACO_AUTHORS,
            "authors' dual update, frozen denominators, padded batches": {
                **RACO_AUTHORS,
                **PADDED,
            },
            "authors' dual update, frozen denominators, their step count": {
                **RACO_AUTHORS,
                "steps": AUTHORS_STEPS,
            },
            "all the authors' choices": {**RACO_AUTHORS, **PADDED, "steps": AUTHORS_STEPS},
        },
        "sigma 6, Laplace scale 10 (b 0.1), batch 256, lr 0.1, lr_lambda 0.01, "
        "temperature 1, C 3 (their defaults cannot run on Parkinsons: batch 4096 > n); "
        "fairbench with the paper's choices and, as variants, the authors' clipped dual "
        "update (dual_update: clipped), their frozen noisy denominators (denominators: "
        "frozen, accounted), their padded batches (batches: padded, not accounted: ε inf) "
        "and their step count (583, the steps their accountant allows; ε above 1 under "
        "fairbench's), each added in turn, and all of them",
    ),
    Setting(
        "in-region-lr-lambda-0",
        (0.02,),
        (*IN_REGION_AUTHORS[:-4], "--lr-lambda", "0", "--temperature", "1"),
        {
            "": {**IN_REGION_FAIRBENCH, "lr_dual": 1e-9},
            "their step count": {**IN_REGION_FAIRBENCH, "lr_dual": 1e-9, "steps": AUTHORS_STEPS},
        },
        "the same with the dual step 0 (fairbench: 1e-9, it refuses 0): DP-SGD with the "
        "same noise, the control for the dual update; and with the authors' step count",
    ),
)
FERMI_COMMON = {
    "batch_size": 1024,
    "epochs": 200.0,
    "lr": 0.005,
    "lr_w": 0.01,
    "clip_norm": 5.0,
    "clip_norm_w": 5.0,
    "w_diameter": 10.0,
}
AUTHORS_RHO = "(smallest group count - 1) / n"  # their rho; filled in from the split
# dp-fermi's parity switches (fairbench/methods/dp_fermi.py) set to the authors' choices, with
# the exact group shares their P_s^(-1/2) uses; and the paper's (fairbench's default) choices
FERMI_AUTHORS_SWITCHES = {
    "ermi": "first-group",
    "clipping": "batch-mean",
    "batches": "shuffled",
    "noise": "closed-form",
    "logits": "sigmoid",
    "w_init": "normal",
}
FERMI_PAPER_SWITCHES = {
    "ermi": "full",
    "clipping": "per-sample",
    "batches": "poisson",
    "noise": "calibrated",
    "logits": "softmax",
    "w_init": "zero",
}
FERMI_AUTHORS = {
    **FERMI_COMMON,
    "marginals": "public",
    **FERMI_AUTHORS_SWITCHES,
    "rho": AUTHORS_RHO,
    "parity_unaccounted": True,
}


def fermi_authors_but(switch: str) -> dict[str, Any]:
    """The authors' choices with one switch back at the paper's (what that choice changes)."""
    hp = {**FERMI_AUTHORS, switch: FERMI_PAPER_SWITCHES[switch]}
    if switch == "noise":
        del hp["rho"]  # read only by the closed form
    return hp


def fermi_paper_with(switch: str) -> dict[str, Any]:
    """fairbench's paper-faithful port with one switch at the authors' choice (what that choice
    changes on its own), labelled not accounted where the choice needs it."""
    hp = {**FERMI_COMMON, switch: FERMI_AUTHORS_SWITCHES[switch]}
    if switch == "noise":
        hp["rho"] = AUTHORS_RHO
    if switch in ("batches", "noise"):
        hp["parity_unaccounted"] = True
    return hp


FERMI_SETTINGS = (
    Setting(
        "defaults",
        (0.5,),
        (),
        {
            "sensitive-attribute, paper analysis, public marginals": {
                **FERMI_COMMON,
                "privacy_notion": "sensitive-attribute",
                "sensitive_accounting": "paper",
                "marginals": "public",
            },
            "full notion, private marginals": FERMI_COMMON,
            "authors' choices": FERMI_AUTHORS,
            **{
                f"authors' choices but {k}: {v}": fermi_authors_but(k)
                for k, v in FERMI_PAPER_SWITCHES.items()
            },
            **{
                f"paper's port with {k}: {v}": fermi_paper_with(k)
                for k, v in FERMI_AUTHORS_SWITCHES.items()
            },
        },
        "their args.py defaults (epochs 200, batch 1024, lr_theta 0.005, lr_W 0.01, C 5, "
        "L 5), Parkinsons, epsilon 1, lambda 0.5, delta 1/n^2; fairbench as the paper "
        "(its defaults: two variants), with every parity switch at the authors' choice "
        "(`authors' choices`, with their exact group shares; not accounted, as their "
        "schedule), with each switch back at the paper's in turn, and the paper's port "
        "(full notion, private marginals) with each switch alone at the authors' choice",
    ),
)
FERMI_EPSILON = 1.0


def fail(message: str, details: str = "") -> None:
    if details:
        print(details, file=sys.stderr)
    print(f"parity: {message}", file=sys.stderr)
    raise SystemExit(2)


def preflight(authors: Authors, path: str | None, python: str | None) -> tuple[Path, Path]:
    """The checkout and the interpreter of the authors' environment, or a clear exit."""
    if not path:
        fail(
            f"no AUTHORS=PATH given: the {authors.method} parity table needs the authors' "
            "repository (instructions above)",
            authors.instructions(),
        )
    checkout = Path(path).expanduser().resolve()
    if not (checkout / authors.marker).is_file():
        fail(
            f"{checkout} is not a checkout of {authors.repository} (no {authors.marker})",
            authors.instructions(),
        )
    interpreter = Path(python or REPO / authors.venv / "bin" / "python")
    if not interpreter.exists():
        fail(
            f"no interpreter for the authors' environment at {interpreter}", authors.instructions()
        )
    head = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode == 0 and head.stdout.strip() != authors.commit:
        print(f"parity: warning: {checkout} is at {head.stdout.strip()}, not {authors.commit}")
    elif head.returncode != 0:
        print(f"parity: note: {checkout} is not a git checkout; its commit is not checked")
    return checkout, interpreter


def driver(interpreter: Path, script: str, *args: str) -> str:
    command = [str(interpreter), str(REPO / "parity" / script), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        fail(
            f"the authors' driver failed: {' '.join(command)}",
            done.stdout[-3000:] + done.stderr[-3000:],
        )
    return done.stdout


def progress(text: str) -> None:
    print(f"parity: {text}", flush=True)


# ----- RaCO-DP ---------------------------------------------------------------------------------


def run_raco(a: argparse.Namespace) -> list[dict]:
    from parity import fairbench_side as fb

    checkout, py = preflight(RACO, a.authors, a.python)
    work = Path(a.work) / "raco-dp"
    data = fb.write_processed_parkinsons(Path(a.work) / "data")
    raw, _ = fb.parkinsons_raw()
    results = []
    for setting in RACO_SETTINGS:
        for knob in setting.knobs:
            for seed in range(a.seeds):
                tag = f"{setting.name}_g{knob}_s{seed}"
                theirs = work / "authors" / f"{tag}.json"
                if not theirs.exists():
                    started = time.time()
                    driver(
                        py,
                        "authors_raco.py",
                        "run",
                        "--authors",
                        str(checkout),
                        "--data-dir",
                        str(data.parent),
                        "--out-dir",
                        str(theirs.parent),
                        "--tag",
                        tag,
                        "--setting",
                        setting.name,
                        "--seed",
                        str(seed),
                        "--gamma",
                        str(knob),
                        *setting.authors_args,
                    )
                    progress(f"authors {tag}: {time.time() - started:.0f} s")
                authors = protocol.read_result(theirs)
                split = protocol.read_split(work / "authors" / f"{tag}_split.json")
                task = fb.task_from_split(split, raw)
                # the authors' schedule under fairbench's accountant
                authors["epsilon"]["fairbench"] = fb.epsilon_of_schedule(
                    authors["sampling_rate"],
                    authors["extra"]["sigma"],
                    authors["steps"],
                    authors["delta"],
                    authors["extra"]["laplace_scale"],
                )
                results.append(authors)
                for v, (variant, hp) in enumerate(setting.fairbench.items()):
                    mine = work / "fairbench" / f"{tag}{f'_v{v}' if v else ''}.json"
                    results.append(
                        raco_port(
                            mine,
                            setting.name,
                            variant,
                            v,
                            hp,
                            task,
                            split,
                            knob,
                            seed,
                            work / "authors" / f"{tag}_preds.csv",
                            authors["steps"],
                        )
                    )
    # fairbench's schedules under the authors' accountant: one call per training-set size
    args = {
        "--batch-size": "256",
        "--sigma": "6",
        "--laplace-parameter-b": "0.1",
        "--delta": str(RACO_DELTA),
    }
    wanted: dict[int, set[int]] = {}
    for r in results:
        if r["implementation"] == "fairbench":
            wanted.setdefault(r["sizes"]["train"], set()).add(r["steps"])
    for n, steps in sorted(wanted.items()):
        out = driver(
            py,
            "authors_raco.py",
            "epsilon",
            "--authors",
            str(checkout),
            "--n-train",
            str(n),
            "--steps",
            *map(str, sorted(steps)),
            *[v for kv in args.items() for v in kv],
        )
        eps = json.loads(out.strip().splitlines()[-1])
        for r in results:
            if r["implementation"] == "fairbench" and r["sizes"]["train"] == n:
                r["epsilon"]["authors"] = eps[str(r["steps"])]
    return results


def port_result(
    method: str,
    r: dict[str, Any],
    setting: str,
    knob: float,
    seed: int,
    delta: float,
    split: dict,
    hp: dict[str, Any],
    extra: dict[str, Any],
) -> dict:
    """The result file of one fairbench run (`fairbench_side.run_port`'s output `r`)."""
    return protocol.make_result(
        method=method,
        implementation="fairbench",
        setting=setting,
        knob=knob,
        seed=seed,
        steps=r["steps"],
        sampling_rate=r["sampling_rate"],
        delta=delta,
        epsilon={"fairbench": r["epsilon"]},
        test_error=r["test_error"],
        test_gap=r["test_gap"],
        wall_seconds=r["wall_seconds"],
        sizes={p: len(split["rows"][p]) for p in protocol.PARTS},
        settings=hp,
        extra={**extra, **{k: r[k] for k in ("info", "noise", "notion", "lambda")}},
    )


def raco_port(
    mine: Path,
    setting: str,
    variant: str,
    index: int,
    hp: dict[str, Any],
    task: Any,
    split: dict,
    knob: float,
    seed: int,
    authors_preds: Path,
    authors_steps: int,
) -> dict:
    """fairbench's raco-dp (one variant of a setting) on the authors' split, run once and
    kept in `mine` (with its test predictions beside it); its agreement with the authors'
    predictions added."""
    from parity import fairbench_side as fb

    preds = mine.with_name(mine.stem + "_preds.csv")
    if not mine.exists():
        hparams, target = raco_target(hp, len(task.train), authors_steps)
        r = fb.run_port(
            "raco-dp", hparams, task, knob=knob, seed=seed, target_epsilon=target, delta=RACO_DELTA
        )
        if hparams is not hp and r["steps"] != authors_steps:
            fail(f"{mine.stem}: fairbench ran {r['steps']} steps, not the authors' {authors_steps}")
        protocol.write_predictions(
            preds, split["rows"]["test"], task.test.y, task.test.s, r["pred"]
        )
        extra = {} if hparams is hp else {"target_epsilon": target}
        result = port_result("raco-dp", r, setting, knob, seed, RACO_DELTA, split, hp, extra)
        protocol.write_json(mine, result)
        progress(f"fairbench {mine.stem}: {r['wall_seconds']:.0f} s")
    result = protocol.read_result(mine)
    if variant:
        result["extra"].update(variant=variant, variant_index=index)
    result["extra"]["agreement_with_authors"] = protocol.agreement(
        protocol.read_predictions(authors_preds), protocol.read_predictions(preds)
    )
    return result


def raco_target(hp: dict[str, Any], n: int, steps: int) -> tuple[dict[str, Any], float]:
    """fairbench's hyper-parameters and target ε for one run: `hp` and ε = 1, or, under
    `"steps": AUTHORS_STEPS`, `hp` without that key and the largest target at which
    `calibrate: steps` stops at the authors' `steps` (just under ε(steps + 1) by fairbench's
    own accountant, the frozen count release included). The ledger then reports ε(steps),
    above 1, and the table prints it: the accountant is not changed, only the target."""
    if hp.get("steps") != AUTHORS_STEPS:
        return hp, 1.0
    from fairbench.methods.raco_dp import frozen_counts
    from parity import fairbench_side as fb

    hp = {k: v for k, v in hp.items() if k != "steps"}
    q, scale = min(1.0, hp["batch_size"] / n), hp["laplace_scale"]
    extra = [frozen_counts(q, scale)] if hp.get("denominators") == "frozen" else None
    beyond = fb.epsilon_of_schedule(q, hp["noise_multiplier"], steps + 1, RACO_DELTA, scale, extra)
    return hp, beyond * (1 - 1e-9)


# ----- DP-FERMI --------------------------------------------------------------------------------


def run_fermi(a: argparse.Namespace) -> list[dict]:
    from parity import fairbench_side as fb

    checkout, py = preflight(FERMI, a.authors, a.python)
    work = Path(a.work) / "dp-fermi"
    data = fb.write_processed_parkinsons(Path(a.work) / "data")
    raw, _ = fb.parkinsons_raw()
    results = []
    for setting in FERMI_SETTINGS:
        for knob in setting.knobs:
            tag = f"{setting.name}_eps{FERMI_EPSILON:g}_lam{knob}"
            files = [work / "authors" / f"{tag}_m{k}.json" for k in range(a.seeds)]
            if not all(f.exists() for f in files):
                started = time.time()
                driver(
                    py,
                    "authors_fermi.py",
                    "run",
                    "--authors",
                    str(checkout),
                    "--data-file",
                    str(data),
                    "--out-dir",
                    str(files[0].parent),
                    "--tag",
                    tag,
                    "--setting",
                    setting.name,
                    "--epsilon",
                    str(FERMI_EPSILON),
                    "--lambd",
                    str(knob),
                    "--models",
                    str(a.seeds),
                    *setting.authors_args,
                )
                progress(f"authors {tag}: {time.time() - started:.0f} s")
            split = protocol.read_split(work / "authors" / f"{tag}_split.json")
            task = fb.task_from_split(split, raw)
            for k, file in enumerate(files):
                authors = protocol.read_result(file)
                authors["epsilon"].update(fb.fermi_schedule_epsilons(authors["extra"]["schedule"]))
                results.append(authors)
                theirs_preds = protocol.read_predictions(work / "authors" / f"{tag}_m{k}_preds.csv")
                for v, (variant, hp) in enumerate(setting.fairbench.items()):
                    mine = work / "fairbench" / f"{tag}_v{v}_s{k}.json"
                    delta = authors["delta"]
                    hp = fermi_hparams(hp, task, authors["extra"]["schedule"])
                    if not mine.exists():
                        r = fb.run_port(
                            "dp-fermi",
                            hp,
                            task,
                            knob=knob,
                            seed=k,
                            target_epsilon=FERMI_EPSILON,
                            delta=delta,
                        )
                        protocol.write_predictions(
                            mine.with_name(mine.stem + "_preds.csv"),
                            split["rows"]["test"],
                            task.test.y,
                            task.test.s,
                            r["pred"],
                        )
                        variant_of = {"variant": variant, "variant_index": v}
                        result = port_result(
                            "dp-fermi", r, setting.name, knob, k, delta, split, hp, variant_of
                        )
                        protocol.write_json(mine, result)
                        progress(f"fairbench {tag} ({variant}) seed {k}: {r['wall_seconds']:.0f} s")
                    mine_result = protocol.read_result(mine)
                    mine_result["extra"]["agreement_with_authors"] = protocol.agreement(
                        theirs_preds,
                        protocol.read_predictions(mine.with_name(mine.stem + "_preds.csv")),
                    )
                    results.append(mine_result)
    figures = Path(a.work) / "dp-fermi" / "figures.json"
    if not figures.exists():
        driver(py, "authors_fermi.py", "figures", "--authors", str(checkout), "--out", str(figures))
    table.write_figures(json.loads(figures.read_text()), Path(a.out) / "dp-fermi")
    return results


def fermi_hparams(hp: dict[str, Any], task: Any, schedule: dict[str, Any]) -> dict[str, Any]:
    """`hp` with `rho: AUTHORS_RHO` replaced by its value on the task's training split,
    checked against the authors' (their `Args.calculate_noise`)."""
    if hp.get("rho") != AUTHORS_RHO:
        return hp
    counts = np.bincount(task.train.s)
    rho = (int(counts.min()) - 1) / len(task.train)
    if not np.isclose(rho, schedule["rho"], rtol=1e-12):
        fail(f"rho {rho} from the split differs from the authors' {schedule['rho']}")
    return {**hp, "rho": rho}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m parity", description=__doc__)
    parser.add_argument("method", choices=["raco-dp", "dp-fermi"])
    parser.add_argument("--authors", help="a checkout of the authors' repository")
    parser.add_argument("--python", help="the authors' environment's interpreter")
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="folds / seeds per setting (raco-dp 8, all their folds; dp-fermi 3)",
    )
    parser.add_argument("--work", default=str(REPO / "runs" / "parity"))
    parser.add_argument("--out", default=str(REPO / "results" / "parity"))
    parser.add_argument(
        "--table-only", action="store_true", help="rebuild the tables from the committed results"
    )
    a = parser.parse_args(argv)
    a.seeds = a.seeds or (8 if a.method == "raco-dp" else 3)
    out = Path(a.out)
    started = time.time()
    if a.table_only:
        results = [
            protocol.read_result(p)
            for p in sorted((out / a.method).glob("*.json"))
            if not p.name.startswith("figures")
        ]
    else:
        results = run_raco(a) if a.method == "raco-dp" else run_fermi(a)
        for r in results:
            index = r["extra"].get("variant_index")
            name = f"{r['implementation']}_{r['setting']}_k{r['knob']:g}_s{r['seed']}" + (
                "" if index is None else f"_v{index}"
            )
            protocol.write_json(out / a.method / f"{name}.json", r)
    meta = {
        "command": f"make parity-{a.method}",
        "seeds": a.seeds,
        "settings": RACO_SETTINGS if a.method == "raco-dp" else FERMI_SETTINGS,
        "authors": RACO if a.method == "raco-dp" else FERMI,
        "wall_seconds": None if a.table_only else time.time() - started,
    }
    table.write(a.method, results, out, meta)
    progress(f"wrote {out / a.method}.csv and .md ({len(results)} runs)")
