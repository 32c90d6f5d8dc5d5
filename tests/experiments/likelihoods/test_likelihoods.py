"""`sparsegp experiment likelihoods`: the quick run writes its results; on simulated
over-dispersed counts the negative binomial beats the Poisson by held-out log density; the
UCI parts run when their data are there and are skipped with the reason when not; the data
helpers do what they say."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from scipy.stats import norm

from sparsegp.experiments.likelihoods import experiment as lk
from sparsegp.experiments.likelihoods.data import (
    class_scores,
    count_mean,
    inject_outliers,
    rounded_class_probabilities,
    simulated_counts,
)

from ...conftest import TEST_DATA_DIR, no_data_reason

PNG = b"\x89PNG\r\n\x1a\n"
UCI_FILES = "uci/concrete/data and uci/wine-quality-red/data"


def _has_uci() -> bool:
    return not any(lk.missing_data(TEST_DATA_DIR, quick=True).values())


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("likelihoods")
    data = TEST_DATA_DIR if TEST_DATA_DIR.is_dir() else tmp_path_factory.mktemp("empty")
    status = lk.main(["--quick", "--data-dir", str(data), "--out", str(out)])
    return status, out


def test_quick_run_writes_the_results(quick_run):
    status, out = quick_run
    assert status == 0
    names = {f.name for f in out.iterdir()}
    assert {"results.md", "counts.csv"} <= names
    report = (out / "results.md").read_text()
    for title in ("1. Robust regression", "2. Counts", "3. Ordinal regression"):
        assert f"## {title}" in report
    if _has_uci():
        assert names == {"results.md", "counts.csv", "robust.csv", "robust.png", "ordinal.csv"}
        assert (out / "robust.png").read_bytes()[:8] == PNG
    else:
        assert report.count("skipped: data not found") >= 1


def _rows(path):
    return list(csv.DictReader(path.open()))


def test_negative_binomial_beats_poisson_on_over_dispersed_counts(quick_run):
    _, out = quick_run
    rows = {(r["true r"], r["likelihood"]): r for r in _rows(out / "counts.csv")}
    assert set(rows) == {(r, n) for r in ("2", "10") for n in ("negative binomial", "Poisson")}
    nb, po = rows[("2", "negative binomial")], rows[("2", "Poisson")]
    # measured in the quick run: −2.64 against −3.24 nats per count
    assert float(nb["log density"]) > float(po["log density"]) + 0.2
    assert 0 < float(nb["fitted r"]) < 20
    assert po["fitted r"] == ""
    assert all(math.isfinite(float(r["log density"])) for r in rows.values())


@pytest.mark.skipif(not _has_uci(), reason=no_data_reason(UCI_FILES))
def test_uci_parts_make_sense(quick_run):
    _, out = quick_run
    robust = {(r["model"], r["outliers"]): r for r in _rows(out / "robust.csv")}
    clean = float(robust[("SVGP Gaussian (clean data)", "0%")]["RMSE"])
    for frac in ("5%", "10%"):
        gauss = float(robust[("SVGP Gaussian", frac)]["RMSE"])
        student = float(robust[("SVGP Student-t", frac)]["RMSE"])
        # the outliers hurt the Gaussian fit; the Student-t fit is hurt less
        assert gauss > clean and student < gauss
    ordinal = {r["model"]: r for r in _rows(out / "ordinal.csv")}
    assert set(ordinal) == {"SVGP Gaussian, rounded", "SVGP Ordinal", "SGPC Ordinal (α = 0.5)"}
    for r in ordinal.values():
        assert 0.3 < float(r["accuracy"]) <= 1 and 0 <= float(r["MAE (classes)"]) < 1.5


def test_without_data_only_the_simulated_part_runs(tmp_path, capsys):
    out = tmp_path / "out"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert lk.main(["--quick", "--data-dir", str(empty), "--out", str(out)]) == 0
    assert {f.name for f in out.iterdir()} == {"results.md", "counts.csv"}
    report = (out / "results.md").read_text()
    assert report.count("skipped: data not found") == 2
    assert "index_train_0.txt" in report
    err = capsys.readouterr().err
    assert "skipped for missing data" in err and "concrete" in err and "wine-quality-red" in err


def test_injected_outliers_are_the_stated_fraction_and_size():
    y = np.random.default_rng(1).standard_normal(400)
    dirty, chosen = inject_outliers(y, 0.05, seed=3)
    assert chosen.shape == (20,) and np.unique(chosen).shape == (20,)
    shift = np.abs(dirty - y) / y.std()
    assert np.all((shift[chosen] >= 5) & (shift[chosen] <= 10))
    assert np.count_nonzero(shift) == 20
    again, _ = inject_outliers(y, 0.05, seed=3)
    np.testing.assert_array_equal(dirty, again)


def test_simulated_counts_have_the_negative_binomial_variance():
    d = simulated_counts(20000, 10, dispersion=2.0, seed=0)
    mu = count_mean(d.X)
    z = (d.y - mu) / np.sqrt(mu + mu**2 / 2.0)  # standardised by the stated mean and variance
    assert abs(z.mean()) < 0.03 and abs(z.var() - 1) < 0.06
    assert np.all(d.y == np.round(d.y)) and d.y.min() >= 0


def test_rounded_class_probabilities_are_interval_masses():
    mean, var = np.array([0.2, 2.6]), np.array([0.5, 2.0])
    p = rounded_class_probabilities(mean, var, 4)
    np.testing.assert_allclose(p.sum(1), 1.0)
    s = np.sqrt(var[1])
    assert p[1, 2] == pytest.approx(norm.cdf((2.5 - 2.6) / s) - norm.cdf((1.5 - 2.6) / s))
    assert p[1, 3] == pytest.approx(1 - norm.cdf((2.5 - 2.6) / s))
    assert p[0, 0] == pytest.approx(norm.cdf((0.5 - 0.2) / np.sqrt(0.5)))


def test_class_scores_against_a_direct_count():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.5, 0.3]])
    labels = np.array([0, 0, 1])
    acc, mae, nlpd = class_scores(p, labels, p.argmax(1))
    assert acc == pytest.approx(2 / 3) and mae == pytest.approx(2 / 3)
    assert nlpd == pytest.approx(-np.mean(np.log([0.7, 0.1, 0.5])))
