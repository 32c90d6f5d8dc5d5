"""The classification part of `sparsegp experiment bui2017` (paper §4.3): seeded stratified
splits standardised by training statistics, the metrics against independent formulas, one
quick run per method family on real data (crabs) giving a valid row, failures as rows, and
the report's win rates and ranks on rows whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sparsegp.experiments.bui2017 import classification as bc
from sparsegp.experiments.bui2017 import plots as bui2017_plots
from sparsegp.experiments.bui2017.classification_report import classification_section

from ...conftest import TEST_DATA_DIR, no_data_reason

HAVE_CRABS = not bc.missing_classification(TEST_DATA_DIR, ("crabs",))
needs_data = pytest.mark.skipif(not HAVE_CRABS, reason=no_data_reason("classification/crabs.csv"))
TINY = bc.Stochastic(epochs=3, batch_size=40, lr=0.02)


@pytest.fixture
def toy_dir(tmp_path):
    """A CSV of 50 rows (20 of class 1, 30 of class 0), a constant column and a scaled one."""
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(20), np.zeros(30)]
    X = np.c_[rng.normal(3.0, 2.0, 50), np.full(50, 7.0), 100 * rng.normal(size=50)]
    (tmp_path / "classification").mkdir()
    with (tmp_path / "classification" / "toy.csv").open("w") as f:
        f.write("a,b,c,label\n")
        for row, label in zip(X, y):
            f.write(",".join(f"{v:.17g}" for v in row) + f",{int(label)}\n")
    return tmp_path, X, y


def test_splits_are_seeded_stratified_and_partition_the_rows(toy_dir):
    _, _, y = toy_dir
    tr, te = bc.split_indices(y, "toy", 3)
    again = bc.split_indices(y, "toy", 3)
    assert np.array_equal(tr, again[0]) and np.array_equal(te, again[1])
    assert not np.array_equal(te, bc.split_indices(y, "toy", 4)[1])
    assert not np.array_equal(te, bc.split_indices(y, "other", 3)[1])  # seeded by the name too
    assert np.array_equal(np.sort(np.r_[tr, te]), np.arange(50))
    assert (y[te] == 1).sum() == 4 and (y[te] == 0).sum() == 6  # 20% of each class


def test_inputs_are_standardised_with_training_statistics(toy_dir):
    folder, X, y = toy_dir
    p = bc.classification_problem(folder, "toy", 0)
    tr, te = bc.split_indices(y, "toy", 0)
    mean, std = X[tr].mean(0), X[tr].std(0)
    np.testing.assert_allclose(p.X[:, [0, 2]], (X[tr][:, [0, 2]] - mean[[0, 2]]) / std[[0, 2]])
    np.testing.assert_allclose(p.Xs[:, [0, 2]], (X[te][:, [0, 2]] - mean[[0, 2]]) / std[[0, 2]])
    assert np.all(p.X[:, 1] == 0) and np.all(p.Xs[:, 1] == 0)  # constant: centred, not divided
    np.testing.assert_array_equal(p.y, y[tr])
    np.testing.assert_array_equal(p.ys, y[te])


def test_metrics_match_independent_formulas():
    ys = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
    p = np.array([0.9, 0.2, 0.4, 0.5, 1.0])
    assert bc.error_rate(ys, p) == pytest.approx(1 / 5)  # only the third; ½ predicts 0
    nll = -(math.log(0.9) + math.log(0.8) + math.log(0.4) + math.log(0.5) + math.log(1 - 1e-12)) / 5
    assert bc.bernoulli_nll(ys, p) == pytest.approx(nll, rel=1e-12)
    assert bc.bernoulli_nll(np.array([0.0]), np.array([1.0])) == pytest.approx(-math.log(1e-12))


def test_M_is_capped_at_the_distinct_training_inputs():
    X = np.repeat(np.arange(6.0).reshape(3, 2), 4, axis=0)  # 12 rows, 3 distinct
    assert bc.effective_M(X, 10) == 3 and bc.effective_M(X, 2) == 2


def test_the_full_grid_has_every_run_once(toy_dir):
    folder, _, _ = toy_dir
    cfg = bc.ClassificationConfig("x", datasets=("toy",), splits=3, Ms=(5, 10))
    tasks = bc.classification_tasks(cfg, folder)
    assert len({t.key for t in tasks}) == len(tasks) == 3 * 2 * 10
    assert {t.n_train for t in tasks} == {40}
    assert [m.power for m in bc.METHODS] == [0.0, 1e-3, 0.05, 0.1, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0]
    same = [t.seed for t in tasks if (t.split, t.M) == (1, 5)]
    assert len(same) == 10 and len(set(same)) == 1  # one inducing-input seed for all methods
    # the paper's nine methods and the small power's row
    assert len(bc.FULL.datasets) * bc.FULL.splits * len(bc.FULL.Ms) * 10 == 4320 + 480


@needs_data
@pytest.mark.parametrize("method", ["PEP 0.5", "VFE"])
def test_one_quick_run_per_method_family_gives_a_valid_row(method):
    task = bc.ClassificationTask("classification", "crabs", 0, 10, method, TINY.epochs, 160,
                                 fit=TINY)
    row = task.run(TEST_DATA_DIR)
    assert row["status"] == "ok", row["error"]
    assert (row["n_train"], row["n_test"], row["M_used"]) == (160, 40, 10)
    assert 0.0 <= row["error_rate"] <= 1.0 and row["error_rate"] * 40 == round(row["error_rate"] * 40)
    assert math.isfinite(row["nll"]) and row["nll"] > 0 and math.isfinite(row["energy"])
    assert row["steps"] == TINY.epochs * 4 and row["seconds"] > 0


@needs_data
def test_every_method_starts_from_the_same_inducing_inputs():
    data = bc.classification_problem(TEST_DATA_DIR, "crabs", 1)
    a, b, c = (bc.build_classifier(n, data, 12, 7) for n in ("VFE", "EP", "PEP 0.001"))
    assert type(a).__name__ == "SVGP" and type(b).__name__ == "SGPC" and b.alpha == 1.0
    assert type(c).__name__ == "SGPC" and c.alpha == 1e-3  # α → 0 by SGPC's own schedule
    np.testing.assert_array_equal(a.inducing_points, b.inducing_points)
    np.testing.assert_array_equal(a.inducing_points, c.inducing_points)


def test_an_unknown_method_is_named_with_the_choices(toy_dir):
    folder, _, _ = toy_dir
    data = bc.classification_problem(folder, "toy", 0)
    with pytest.raises(ValueError, match="unknown method 'PEP 0.3'.*PEP 0.001"):
        bc.build_classifier("PEP 0.3", data, 5, 0)


def test_a_failing_run_becomes_a_failed_row(tmp_path):
    task = bc.ClassificationTask("classification", "crabs", 0, 10, "EP", 1, 160, fit=TINY)
    row = task.run(tmp_path / "nowhere")
    assert row["status"] == "failed" and "crabs.csv" in row["error"]
    assert row["method"] == "EP" and row["seconds"] >= 0


def test_the_report_counts_wins_and_ranks(tmp_path, monkeypatch):
    # until bui2017_plots.LABELS names the classification metrics
    monkeypatch.setitem(bui2017_plots.LABELS, "error_rate", "test error rate")
    monkeypatch.setitem(bui2017_plots.LABELS, "nll", "test NLL")
    cfg = bc.ClassificationConfig("x", datasets=("a", "b"), splits=2, Ms=(10,))
    rows = []
    for d in cfg.datasets:
        for s in range(cfg.splits):
            for i, m in enumerate(bc.METHODS):  # error falls with α, NLL rises with α
                rows.append({"part": "classification", "dataset": d, "split": s, "M": 10,
                             "method": m.name, "status": "ok", "error_rate": 0.5 - 0.01 * i,
                             "nll": 0.3 + 0.01 * i})
    tasks = [bc.ClassificationTask("classification", r["dataset"], r["split"], 10, r["method"],
                                   1, 100) for r in rows]
    sec = classification_section(cfg, tasks, rows, tmp_path)
    wins = {(r[0], r[1], r[2]): r[-1] for r in sec.tables[0].rows}
    assert wins[("PEP 0.5", "VFE", "test error rate")] == 1.0
    assert wins[("PEP 0.5", "EP", "test error rate")] == 0.0
    assert wins[("EP", "VFE", "test NLL")] == 0.0
    # the small power's pairs: against SVGP's VFE (the optimiser) and PEP 0.5 against it
    assert wins[("PEP 0.001", "VFE", "test NLL")] == 0.0
    assert wins[("PEP 0.5", "PEP 0.001", "test error rate")] == 1.0
    ranks = {r[0]: r[1] for r in sec.tables[2].rows}  # the error rate's ranks at M = 10
    assert ranks["EP"] == 1.0 and ranks["PEP 0.001"] == 9.0 and ranks["VFE"] == 10.0
    assert "Complete: 40 of 40" in sec.description
    assert all(p.is_file() for p in sec.files) and len(sec.files) == 11
    assert sum(p.read_bytes().startswith(b"\x89PNG") for p in sec.files) == 5
