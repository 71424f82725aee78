"""The parity harness's pure parts (parity/): file formats, the run-time stand-ins, the Task
rebuilt from a split file, the tables. No authors' code, no JAX: seconds."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pandas as pd
import pytest

from parity import fairbench_side, protocol, run, shims, table

NAMES = list(fairbench_side.INPUTS)


def toy_raw(n: int = 120, seed: int = 0) -> pd.DataFrame:
    """A frame with the UCI Parkinsons columns (random values)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(n, len(NAMES))) * 3 + 1, columns=NAMES)
    frame.insert(0, "subject#", rng.integers(1, 43, n))
    frame["sex"] = rng.integers(0, 2, n)
    frame["total_UPDRS"] = rng.normal(28, 10, n)
    return frame


def authors_split(raw: pd.DataFrame, seed: int = 1) -> dict:
    """A split file as the authors' driver writes it, computed here independently with pandas
    the way their loaders preprocess (z-scoring with the pool's mean and std, ddof 1; labels
    from the processed file's rule; groups by first appearance in each part)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(raw))
    rows = {"train": order[:70], "val": order[70:90], "test": order[90:]}
    processed = fairbench_side.processed_parkinsons(raw)
    shuffled = rng.permutation(NAMES).tolist()  # their column order is hash-dependent
    pool = processed.loc[np.concatenate([rows["train"], rows["val"]]), shuffled]
    z = (processed[shuffled] - pool.mean()) / pool.std()
    maps, ys, ss = {}, {}, {}
    for part, r in rows.items():
        sexes = processed.loc[r, "sex"]
        maps[part] = {v: i for i, v in enumerate(sexes.unique())}
        ys[part] = (processed.loc[r, "total_UPDRS"] == "Yes").astype(int).to_numpy()
        ss[part] = sexes.map(maps[part]).to_numpy()
    return {
        "rows": rows,
        "y": ys,
        "s": ss,
        "group_maps": maps,
        "feature_names": shuffled,
        "features": {p: z.loc[r].to_numpy(np.float32) for p, r in rows.items()},
    }


def write_toy_split(tmp_path, raw: pd.DataFrame) -> tuple[dict, object]:
    parts = authors_split(raw)
    data = tmp_path / "data.csv"
    raw.to_csv(data, index=False)
    content = protocol.make_split(
        method="raco-dp",
        source={"fold": 1},
        data_file=data,
        standardised_with=["train", "val"],
        **parts,
    )
    path = tmp_path / "split.json"
    protocol.write_json(path, content)
    return parts, path


def test_split_file_round_trip(tmp_path):
    parts, path = write_toy_split(tmp_path, toy_raw())
    split = protocol.read_split(path)
    for part in protocol.PARTS:
        assert split["rows"][part] == parts["rows"][part].tolist()
        assert split["y"][part] == parts["y"][part].tolist()
    assert split["feature_names"] == parts["feature_names"]
    digest = protocol.feature_digest(parts["features"]["test"], parts["feature_names"])
    assert protocol.digest_mismatches(digest, split["digest"]["test"]) == []


def test_a_malformed_split_file_is_refused(tmp_path):
    _, path = write_toy_split(tmp_path, toy_raw())
    split = protocol.read_split(path)
    twice = {**split, "rows": {**split["rows"], "test": split["rows"]["train"][:3]}}
    with pytest.raises(protocol.ProtocolError, match=r"appears twice|one label"):
        protocol.check_split(twice)
    with pytest.raises(protocol.ProtocolError, match="format"):
        protocol.check_split({**split, "format": "something else"})


def test_digest_names_what_differs():
    X = np.arange(12, dtype=float).reshape(4, 3)
    a = protocol.feature_digest(X, ["a", "b", "c"])
    b = protocol.feature_digest(X[:, [2, 1, 0]], ["c", "b", "a"])  # column order is irrelevant
    assert protocol.digest_mismatches(a, b) == []
    c = protocol.feature_digest(X + np.array([0, 0, 1]), ["a", "b", "c"])
    assert [m.split(":")[0] for m in protocol.digest_mismatches(a, c)] == ["mean of c", "sq of c"]


def test_predictions_round_trip_error_gap_and_agreement(tmp_path):
    rows, y = [5, 3, 9, 1], [1, 0, 1, 0]
    z, pred = [0, 0, 1, 1], [1, 1, 0, 0]
    protocol.write_predictions(tmp_path / "p.csv", rows, y, z, pred)
    back = protocol.read_predictions(tmp_path / "p.csv")
    assert back["row"].tolist() == rows and back["pred"].tolist() == pred
    assert (tmp_path / "p.csv").read_text().splitlines()[0] == "row,y,z_index,pred"
    error, gap = protocol.error_and_gap(back["y"], back["z_index"], back["pred"])
    assert error == 0.5 and gap == 1.0
    # the same rows in another order: rows 1, 9, 3 agree, row 5 does not
    other = {**back, "row": back["row"][::-1], "pred": np.array([0, 0, 1, 0])}
    assert protocol.agreement(back, other) == 0.75


def test_fairbench_builds_the_task_the_split_file_describes(tmp_path):
    raw = toy_raw()
    parts, path = write_toy_split(tmp_path, raw)
    task = fairbench_side.task_from_split(protocol.read_split(path), raw)
    assert (len(task.train), len(task.val), len(task.test)) == (70, 20, 30)
    assert task.feature_names == tuple(parts["feature_names"])
    for part, split in (("train", task.train), ("val", task.val), ("test", task.test)):
        np.testing.assert_allclose(split.X, parts["features"][part], atol=1e-5)
        assert split.y.tolist() == parts["y"][part].tolist()
        # fairbench codes sex 0 male, 1 female; the file's index is by first appearance
        names = ["Male", "Female"]
        expected = [parts["group_maps"][part][names[g]] for g in split.s]
        assert expected == parts["s"][part].tolist()
    assert task.provenance.preprocessing["standardised_with"] == ["train", "val"]


def test_a_task_that_differs_from_the_file_is_refused(tmp_path):
    raw = toy_raw()
    _, path = write_toy_split(tmp_path, raw)
    split = protocol.read_split(path)
    flipped = {**split, "y": {**split["y"], "test": [1 - v for v in split["y"]["test"]]}}
    with pytest.raises(fairbench_side.ParityError, match="labels differ"):
        fairbench_side.task_from_split(flipped, raw)
    moved = raw.copy()
    moved["age"] = moved["age"] * 2  # other data: the standardised features no longer match
    moved.loc[0, "age"] += 50
    with pytest.raises(fairbench_side.ParityError, match="age"):
        fairbench_side.task_from_split(split, moved)


def test_the_processed_file_rule():
    raw = toy_raw(11)
    out = fairbench_side.processed_parkinsons(raw)
    assert "subject#" not in out.columns and set(out["sex"]) <= {"Male", "Female"}
    assert (out["total_UPDRS"] == "Yes").sum() == 5  # above the median of 11 values
    assert list(out.columns) == [c for c in raw.columns if c != "subject#"]


def test_tensorflow_stand_in_batches_like_tf_data():
    tf = shims.tensorflow_stand_in()

    class Source:  # re-iterable, like their TrainDataGenerator
        def __iter__(self):
            for i in range(3):
                yield np.full((2, 2), i, dtype=np.float64), np.ones((2, 1)), np.zeros((2, 1)), 2

    spec = (
        (tf.TensorSpec(shape=(None, 2), dtype=tf.float32),)
        + (tf.TensorSpec(shape=(None, 1), dtype=tf.float32),) * 2
        + (tf.TensorSpec(shape=(), dtype=tf.int32),)
    )
    source = Source()
    ds = tf.data.Dataset.from_generator(generator=lambda: source, output_signature=spec)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    first = list(ds.as_numpy_iterator())
    assert len(first) == 3 and len(list(ds.as_numpy_iterator())) == 3  # a fresh pass each time
    x, _, _, n = first[2]
    assert x.dtype == np.float32 and x[0, 0] == 2 and isinstance(n, np.int32)
    a = np.arange(10.0)
    batches = list(tf.data.Dataset.from_tensor_slices((a, a * 2)).batch(4).as_numpy_iterator())
    assert [len(b[0]) for b in batches] == [4, 4, 2] and batches[2][1].tolist() == [16.0, 18.0]
    assert batches[0][0].dtype == np.float64  # from_tensor_slices keeps the dtype
    with pytest.raises(RuntimeError, match="not installed"):
        tf.constant(1)


def test_stand_ins_exist_only_while_needed():
    name = "parity_test_missing_pkg"
    modules = shims.missing_modules({f"{name}.sub.leaf": {"Dataset": object}})
    with shims.stand_ins(modules) as used:
        assert sorted(used) == [name, f"{name}.sub", f"{name}.sub.leaf"]
        leaf = importlib.import_module(f"{name}.sub.leaf")
        assert leaf.Dataset is object
        exec(f"import {name}.sub.leaf as alias\nfrom {name}.sub import leaf as other", {})
        with pytest.raises(RuntimeError, match=f"{name}.sub.leaf.transforms"):
            leaf.transforms.Compose([])
    assert name not in sys.modules
    with shims.stand_ins({"json": shims.missing_modules({"json": {}})["json"]}) as used:
        assert used == []  # an installed package is never replaced unless forced
    assert sys.modules["json"].dumps


def results_fixture() -> list[dict]:
    """Three folds of one setting: the authors and fairbench, with known numbers."""
    out = []
    for seed, (ea, ga, ef, gf) in enumerate([(0.04, 0.02, 0.05, 0.04), (0.05, 0.01, 0.05, 0.05),
                                             (0.06, 0.03, 0.08, 0.06)]):  # fmt: skip
        for impl, err, gap, eps in (
            ("authors", ea, ga, {"authors": 0.9997, "fairbench": 1.008}),
            ("fairbench", ef, gf, {"fairbench": 0.999, "authors": 0.98}),
        ):
            out.append(protocol.make_result(
                method="raco-dp", implementation=impl, setting="in-region", knob=0.02,
                seed=seed, steps=583 if impl == "authors" else 574, sampling_rate=0.066,
                delta=1e-4, epsilon=eps, test_error=err, test_gap=gap, wall_seconds=10,
                sizes={"train": 3855, "val": 551, "test": 1469}, settings={},
                extra={"agreement_with_authors": 0.9} if impl == "fairbench" else {},
            ))  # fmt: skip
    return out


def test_table_numbers_on_a_fixture(tmp_path):
    df = table.frame(results_fixture())
    s = table.summary(df).set_index("implementation")
    assert s.loc["authors", "test_error"] == pytest.approx(0.05)
    # t(0.975, 2) * sd / sqrt(3), sd of (0.04, 0.05, 0.06) = 0.01
    assert s.loc["authors", "test_error_ci95"] == pytest.approx(4.302653 * 0.01 / 3**0.5, 1e-5)
    assert s.loc["fairbench", "steps"] == "574" and s.loc["fairbench", "seeds"] == 3
    assert s.loc["authors", "epsilon_fairbench"] == pytest.approx(1.008)
    p = table.paired(df).iloc[0]
    # gap differences 0.02, 0.04, 0.03: mean 0.03, sd 0.01 -> the interval excludes 0
    assert p["test_gap_diff"] == pytest.approx(0.03)
    assert not p["test_gap_within"]
    # error differences 0.01, 0, 0.02: mean 0.01, half-width 0.0248 -> within
    assert p["test_error_within"]
    meta = {"settings": run.RACO_SETTINGS, "authors": run.RACO, "wall_seconds": 60.0}
    table.write("raco-dp", results_fixture(), tmp_path, meta)
    text = (tmp_path / "raco-dp.md").read_text()
    assert "**differs**" in text and "0.0500 ± 0.0248" in text and "| 1.0080 |" in text
    back = pd.read_csv(tmp_path / "raco-dp.csv")
    assert len(back) == 6 and set(back["implementation"]) == {"authors", "fairbench"}


def test_stored_figures_table():
    dp = "Demographic Parity Experiments"
    stored = {"files": {
        f"{dp}/PFLD/parkinsons/parkinsons_eps_1_old_logistic_regression.pt":
            {"Misclassification Error": 0.3, "Demographic Parity": 0.01},
        f"{dp}/FERMI_Multiple_Models/parkinsons/final_eps_1_logistic-regression.pt":
            {"0.5": {"misclassification": 0.06, "demographic_parity":
                     {"mean": 0.05, "lower": 0.04, "upper": 0.06}}},
        "Equalized Odds Experiments/Jagielski-Inprocessing/adult/eps_0.5.pt":
            {"misclassificaton": [0.2, 0.3], "equalized_odds":
             {"mean": [0.1, 0.05], "lower": [0.09, 0.04], "upper": [0.11, 0.06]}},
    }}  # fmt: skip
    rows = table.figure_rows(stored)
    assert len(rows) == 4
    pfld = rows[rows["method"].str.startswith("PF-LD")].iloc[0]
    assert (pfld["dataset"], pfld["epsilon"], pfld["code"]) == (
        "parkinsons",
        "1",
        "stored results only",
    )
    jag = rows[rows["method"].str.startswith("Jagielski")]
    assert jag["violation"].tolist() == [0.1, 0.05] and set(jag["violation_kind"]) == {
        "equalized odds"
    }
    text = "\n".join(table.figures_markdown(stored, table.summary(table.frame(results_fixture()))))
    assert "stored results only" in text
    baselines = {line.split(" | ")[0]: line for line in text.splitlines() if "| `" in line}
    assert baselines["| PF-LD (Tran et al. 2021b)"].endswith("(1 point) | 1 (below) |")
    assert baselines["| DP-ERM mitigation (Tran et al. 2021a)"].endswith("| nothing | none |")
    jagielski = baselines["| Jagielski et al. 2019 (in-processing)"]
    assert "equalized odds on adult, ε 0.5 (2 points) | none |" in jagielski


def test_without_authors_the_harness_says_how_to_get_them(capsys):
    with pytest.raises(SystemExit) as stop:
        run.main(["raco-dp"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert run.RACO.commit in err and "git clone https://github.com/cleverhans-lab/dp-raco" in err
    assert "make parity-env-raco-dp" in err
    assert err.strip().splitlines()[-1].startswith("parity: no AUTHORS=PATH given")
    with pytest.raises(SystemExit):
        run.main(["dp-fermi"])
    assert run.FERMI.commit in capsys.readouterr().err


def test_a_folder_that_is_not_their_checkout_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        run.main(["raco-dp", "--authors", str(tmp_path)])
    assert "is not a checkout of" in capsys.readouterr().err.splitlines()[-1]


def test_fermi_variants_are_valid_ports_with_the_authors_rho():
    """Every fairbench variant of the DP-FERMI settings builds dp-fermi once `rho` is read off
    the split (their (smallest group count - 1) / n, checked against the authors' own);
    `authors' choices` sets every parity switch at the authors' choice, labelled."""
    from types import SimpleNamespace

    from fairbench.methods import get_method

    class Train(SimpleNamespace):
        def __len__(self):
            return len(self.s)

    task = SimpleNamespace(train=Train(s=np.array([0] * 30 + [1] * 11)))
    schedule = {"rho": 10 / 41}
    for setting in run.FERMI_SETTINGS:
        for hp in setting.fairbench.values():
            get_method("dp-fermi", **run.fermi_hparams(hp, task, schedule))
    authors = run.fermi_hparams(setting.fairbench["authors' choices"], task, schedule)
    assert authors["rho"] == 10 / 41 and authors["parity_unaccounted"]
    assert {k: authors[k] for k in run.FERMI_AUTHORS_SWITCHES} == run.FERMI_AUTHORS_SWITCHES
    with pytest.raises(SystemExit):  # a split whose groups are not the authors'
        run.fermi_hparams(run.FERMI_AUTHORS, task, {"rho": 0.3})


def test_fermi_choices_table_reads_each_switch_both_ways():
    def row(impl, err, gap):
        return {"implementation": impl, "test_error": err, "test_error_ci95": 0.01,
                "test_gap": gap, "test_gap_ci95": 0.02}  # fmt: skip

    s = pd.DataFrame([
        row("authors", 0.2, 0.1),
        row("fairbench (full notion, private marginals)", 0.05, 0.06),
        row("fairbench (authors' choices)", 0.25, 0.1),
        row("fairbench (paper's port with ermi: first-group)", 0.07, 0.03),
        row("fairbench (authors' choices but ermi: full)", 0.24, 0.12),
    ])  # fmt: skip
    text = table.fermi_choices(s)
    assert "| `ermi` | `first-group` | 0.0700 ± 0.0100 / 0.0300 ± 0.0200 | `full` |" in text
    assert "| (none) | - | 0.0500 ± 0.0100 / 0.0600 ± 0.0200 | - |" in text
    assert table.fermi_choices(s.iloc[:2]) == ""  # without those variants: no table


def test_raco_variants_are_valid_ports_and_the_step_option_lands_on_the_authors_steps():
    """Every fairbench variant of the RaCO-DP settings builds raco-dp once the harness option
    `steps` is taken out; padded batches always come declared not accounted; and the target
    `raco_target` gives makes `calibrate: steps` stop at the authors' 583 steps (n = 3855),
    with and without the frozen count release, while fairbench's ledger reports more than 1."""
    from fairbench.methods import get_method
    from fairbench.methods.raco_dp import frozen_counts
    from fairbench.privacy.accountant import PLAIN, StepShape, calibrate_steps

    for setting in run.RACO_SETTINGS:
        for hp in setting.fairbench.values():
            hparams, target = run.raco_target(hp, 3855, 583)
            get_method("raco-dp", **hparams)
            assert hparams.get("parity_unaccounted", False) == (hp.get("batches") == "padded")
            assert (hparams is hp) == (target == 1.0) == ("steps" not in hp)
    variants = run.RACO_SETTINGS[0].fairbench
    for name in ("authors' dual update, frozen denominators, their step count",
                 "all the authors' choices"):  # fmt: skip
        assert variants[name]["steps"] == run.AUTHORS_STEPS
    for frozen in (False, True):
        hp = {**run.IN_REGION_FAIRBENCH, "steps": run.AUTHORS_STEPS}
        hp |= {"denominators": "frozen"} if frozen else {}
        hparams, target = run.raco_target(hp, 3855, 583)
        q = 256 / 3855
        shape = StepShape(extra=frozen_counts(q, 10.0)) if frozen else PLAIN
        assert calibrate_steps(q, 6.0, target, 1e-4, 10.0, shape) == 583
        extra = [frozen_counts(q, 10.0)] if frozen else None
        spent = fairbench_side.epsilon_of_schedule(q, 6.0, 583, 1e-4, 10.0, extra)
        assert 1.0 < spent < target


def test_raco_table_shows_the_variants_with_their_epsilons(tmp_path):
    """Rows of the padded variants print ε inf, rows at the authors' step count their ε above 1
    and steps 583; the γ table has a column for all the authors' choices."""
    results = results_fixture()
    for r in [r for r in results if r["implementation"] == "fairbench"]:
        for index, (variant, eps) in enumerate(
            [("all the authors' choices", float("inf")), ("their step count", 1.0081)], 4
        ):
            results.append({**r, "steps": 583, "epsilon": {"fairbench": eps, "authors": 0.9996},
                            "extra": {**r["extra"], "variant": variant, "variant_index": index,
                                      "lambda": [0.0, 1.5]}})  # fmt: skip
    meta = {"settings": run.RACO_SETTINGS, "authors": run.RACO, "wall_seconds": 60.0}
    table.write("raco-dp", results, tmp_path, meta)
    text = (tmp_path / "raco-dp.md").read_text()
    rows = {}  # the side-by-side rows (the paired table's come after them)
    for line in text.splitlines():
        if line.startswith("| in-"):
            rows.setdefault(line.split(" | ")[2], line)
    assert "| 583 | 0.9996 | inf |" in rows["fairbench (all the authors' choices)"]
    assert "| 583 | 0.9996 | 1.0081 |" in rows["fairbench (their step count)"]
    assert "| 574 | 0.9800 | 0.9990 |" in rows["fairbench"]
    assert "test gap (all the authors' choices)" in text and "| 1.500 |" in text
    assert '"steps": "the authors\'"' in text and '"batches": "padded"' in text
