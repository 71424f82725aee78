"""`fairbench check`: the project's own regression benchmark against its committed baseline,
and readable, non-zero failures when a method regresses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BASELINE = Path(__file__).resolve().parents[2] / "results" / "baselines" / "ci-regression.json"


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    from fairbench.runner.config import load_config
    from fairbench.runner.execute import execute, prepare_run

    out = tmp_path_factory.mktemp("ci") / "run"
    specs = prepare_run(load_config("ci-regression"), out)
    assert len(specs) == 18 and not execute(specs, out, 1, quiet=True).failed
    return out


def test_the_ci_benchmark_matches_its_committed_baseline(cli, ci_run):
    code, out, _ = cli("check", str(ci_run), "--baseline", str(BASELINE))
    assert code == 0, out
    assert "6 series checked" in out and "0 regression(s)" in out


def test_a_regression_is_reported_series_by_series_with_exit_one(cli, ci_run, tmp_path):
    baseline = json.loads(BASELINE.read_text())
    raco = next(e for e in baseline["entries"] if e["label"] == "raco-dp" and e["epsilon"] == 1)
    raco["error_at"]["0.1"] -= 0.05  # the baseline was better than the run now is
    raco["epsilon_spent_max"] -= 0.1
    dp_sgd = next(e for e in baseline["entries"] if e["label"] == "dp-sgd")
    dp_sgd["error_at"]["0.05"] = 0.2  # a level the run no longer reaches
    tampered = tmp_path / "b.json"
    tampered.write_text(json.dumps(baseline))
    code, out, _ = cli("check", str(ci_run), "--baseline", str(tampered))
    assert code == 1 and "3 regression(s)" in out
    assert (
        "REGRESSION raco-dp · synthetic · demographic_parity · full · ε=1: error at "
        "violation 0.1" in out
    )
    assert "epsilon spent" in out and "not reached" in out


def test_bad_baselines_are_one_error_line(cli, ci_run, tmp_path):
    code, _, err = cli("check", str(ci_run), "--baseline", str(tmp_path / "none.json"))
    assert code == 2 and "not found" in err
    (tmp_path / "bad.json").write_text("{}")
    code, _, err = cli("check", str(ci_run), "--baseline", str(tmp_path / "bad.json"))
    assert code == 2 and "malformed" in err
    code, _, err = cli("check", str(ci_run))
    assert code == 2 and "exactly one of" in err
