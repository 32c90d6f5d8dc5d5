"""`sparsegp experiment randominputs`: the quick run writes every table and figure; MNIST is
skipped with the reason when its data are absent; the baselines' pieces are correct."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from sparsegp.cli import main
from sparsegp.experiments.randominputs import experiment as ri
from sparsegp.experiments.randominputs.data import (
    SYSTEMS,
    fit_linear_ssm,
    linear_forecast,
    nearest_neighbour_error,
)

from ...conftest import TEST_DATA_DIR

PNG = b"\x89PNG\r\n\x1a\n"


def test_quick_run_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["experiment", "randominputs", "--quick", "--out", str(out)]) == 0
    captured = capsys.readouterr()  # the data from SPARSEGP_DATA_DIR (tests/conftest.py)
    log = captured.out
    names = {f.name for f in out.iterdir()}
    expected = {"results.md", "gplvm-three-phase.csv", "gplvm-three-phase.png",
                "gpssm_kink.csv", "gpssm_kink.png", "gpssm_bistable.csv", "gpssm_bistable.png",
                "gpssm_kink_q.csv", "gpssm_bistable_q.csv"}
    has_mnist = (TEST_DATA_DIR / "mnist" / "mnist.npz").is_file()
    if has_mnist:
        expected |= {"gplvm-mnist.csv", "gplvm-mnist.png"}
    assert names == expected
    report = (out / "results.md").read_text()
    if not has_mnist:  # the other sections ran: status 0, and the skipped one is named
        assert "skipped: data not found" in report and "mnist.npz in mnist/" in report
        assert "skipped for missing data: GP-LVM on MNIST (section 2);" in captured.err
    for name in names - {"results.md"}:
        if name.endswith(".png"):
            assert (out / name).read_bytes()[:8] == PNG and (out / name).stat().st_size > 10_000
    rows = list(csv.DictReader((out / "gplvm-three-phase.csv").open()))
    assert [r["embedding"] for r in rows] == ["PCA", "Bayesian GP-LVM", "true latent points"]
    # the three clusters are well separated in the true latent space
    assert float(rows[2]["2-D (top two dimensions)"]) < 0.05
    for system in ("kink", "bistable"):
        rows = list(csv.DictReader((out / f"gpssm_{system}.csv").open()))
        assert len(rows) == ri.QUICK.horizon
        assert all(math.isfinite(float(v)) for r in rows for k, v in r.items() if k != "k")
        rows = list(csv.DictReader((out / f"gpssm_{system}_q.csv").open()))
        assert [r["q(x)"] for r in rows] == ["Markov", "mean-field"]
        assert all(math.isfinite(float(v)) for r in rows for k, v in r.items() if k != "q(x)")
    # ARD finds the two latent dimensions of the synthetic data (measured: third relevance
    # 0.005 of the largest); the learned transitions are close to the truth
    assert "2 dimension(s) above 5% of the largest" in log
    for rmse in (float(x) for x in _transition_rmse(report)):
        assert rmse < 0.5


def _transition_rmse(report: str) -> list[str]:
    import re

    return re.findall(r"transition RMSE over the visited states \(5–95% quantiles\): ([0-9.]+)",
                      report)


def test_nearest_neighbour_error_against_a_direct_count():
    Z = np.array([[0.0], [0.1], [1.0], [1.2], [5.0]])
    labels = np.array([0, 0, 1, 0, 1])
    # neighbours: 1, 0, 3, 2, 3 -> labels 0, 0, 0, 1, 0: wrong for points 2, 3 and 4
    assert nearest_neighbour_error(Z, labels) == pytest.approx(3 / 5)


def test_the_linear_baseline_recovers_a_linear_system_and_forecasts_its_mean():
    rng = np.random.default_rng(0)
    a, b, q, r = 0.7, 0.3, 0.05, 0.02
    x = [1.0]
    for _ in range(149):
        x.append(a * x[-1] + b + np.sqrt(q) * rng.standard_normal())
    Y = (np.array(x) + np.sqrt(r) * rng.standard_normal(150))[:, None]
    ssm = fit_linear_ssm(Y, iterations=20)
    assert float(ssm.A) == pytest.approx(a, abs=0.1)
    assert float(ssm.b) / (1 - float(ssm.A)) == pytest.approx(b / (1 - a), abs=0.1)
    mean, var = linear_forecast(ssm, Y, 30)
    # far ahead the forecast is the stationary distribution of y
    assert mean[-1] == pytest.approx(float(ssm.b) / (1 - float(ssm.A)), rel=1e-3)
    stationary = float(ssm.Qn) / (1 - float(ssm.A) ** 2) + float(ssm.R)
    assert var[-1] == pytest.approx(stationary, rel=1e-3)
    assert np.all(np.diff(var) > 0)


def test_systems_simulate_their_transition():
    for system in SYSTEMS:
        states, Y = system.simulate(200, seed=0)
        resid = states[1:] - system.f(states[:-1])
        assert abs(np.var(resid) - system.q) < 0.3 * system.q
        assert abs(np.var(Y[:, 0] - states) - system.r) < 0.3 * system.r
