"""`fairbench verify`: a run re-run by today's code is reported bit-identical, and a stored
result that today's code does not reproduce is named, field by field, with exit 1."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

TINY = (
    "name: tiny\ndatasets: [{name: synthetic, options: {n_rows: 400}}]\nseeds: 1\n"
    "epsilons: [1.0]\n"
    "methods: [{name: erm, hparams: {epochs: 1}}, {name: dp-sgd, hparams: {epochs: 1}}]\n"
)


@pytest.mark.slow
def test_verify_reproduces_a_run_and_names_what_differs(cli, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    run_dir = tmp_path / "run"
    assert cli("run", str(config), "--out", str(run_dir), "--quiet")[0] == 0

    code, out, _ = cli("verify", str(run_dir), "--workers", "1")
    assert code == 0 and "2 of 2 trials bit-identical" in out

    # a committed figure keeps only trials.csv: change one stored epsilon there
    committed = tmp_path / "committed"
    committed.mkdir()
    shutil.copy(run_dir / "trials.csv", committed / "trials.csv")
    rows = pd.read_csv(committed / "trials.csv")
    private = rows.index[rows["method"] == "dp-sgd"][0]
    rows.loc[private, "epsilon_spent"] *= 1 + 1e-12
    rows.to_csv(committed / "trials.csv", index=False)
    code, out, _ = cli("verify", str(committed), "--workers", "1", "--sample", "2")
    assert code == 1 and "1 of 2 trials bit-identical" in out
    assert f"differs {rows.loc[private, 'trial_id']}" in out and "epsilon_spent" in out

    # a row written before the fingerprints were recorded: named, nothing re-run, exit 1
    rows.drop(columns=["val_predictions_sha256"]).to_csv(committed / "trials.csv", index=False)
    code, out, _ = cli("verify", str(committed), "--workers", "1", "--sample", "2")
    assert code == 1 and "0 of 2 trials bit-identical" in out
    assert "has no val_predictions_sha256 (written before fairbench recorded it)" in out


REPO = Path(__file__).resolve().parents[2]
COMMITTED_TUNE = REPO / "results/tune/privacy-cost/parkinsons/final/parkinsons-eps1"


@pytest.mark.data("parkinsons/parkinsons_updrs.data")
def test_todays_code_reproduces_a_committed_tuned_figure_bit_for_bit(cli):
    """The committed tuned figure is what today's code produces (`make verify-figures` checks
    every committed run directory; CI re-runs two trials of this one)."""
    code, out, _ = cli("verify", str(COMMITTED_TUNE), "--workers", "1", "--sample", "2")
    assert code == 0 and "2 of 2 trials bit-identical" in out, out


def test_a_sampled_trial_is_re_run_in_the_stack_the_run_trained_it_in():
    from dataclasses import asdict

    from fairbench.runner.trial import TrialSpec
    from fairbench.workflows.verify import stacks_of

    def draw(i: int, seed: int, lr: float) -> TrialSpec:
        hparams = {"lr": lr, "epochs": 1, "calibrate": "noise"}
        return TrialSpec(
            "synthetic", {"n_rows": 400}, "raco-dp", f"raco-dp#{i}", hparams,
            "demographic_parity", 0.05, 1.0, 1e-5, seed,
        )  # fmt: skip

    specs = [draw(i, seed, lr) for i, lr in enumerate((0.1, 0.5, 2.0)) for seed in (0, 1)]
    other = TrialSpec(
        "synthetic", {"n_rows": 400}, "erm", "erm", {}, "demographic_parity", None, None, 1e-5, 0
    )
    rows = [{**asdict(s), "trial_id": s.trial_id} for s in [*specs, other]]
    stack = stacks_of(rows, {specs[3].trial_id})
    assert sorted(s.trial_id for s in stack) == sorted(s.trial_id for s in specs)
    assert stacks_of(rows, {other.trial_id}) == [other]
