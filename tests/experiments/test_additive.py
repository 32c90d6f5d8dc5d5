"""The additive-GP experiment: its components add up to the model's prediction, and its quick
run writes the table and the figure."""

import numpy as np
import pytest

from sparsegp.experiments import additive
from sparsegp.experiments.additive import QUICK, components, fit_pair
from sparsegp.experiments.shared.data import missing_uci

from ..conftest import TEST_DATA_DIR, no_data_reason


def test_the_components_add_up_to_the_posterior_mean():
    # Σ_d f_d(x_d) + the mean of y is the additive model's predictive mean: the identity that
    # makes the figure a decomposition of the prediction
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (120, 3))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2 / 4 + 0.1 * rng.standard_normal(120)
    ard, model = fit_pair(X, y, QUICK)
    Xs = rng.uniform(-2, 2, (15, 3))
    f = components(model, Xs)
    mean = model.predict_f(Xs)[0]
    np.testing.assert_allclose(f.sum(1) + float(model.y_shift), mean, rtol=1e-9, atol=1e-9)
    # the column without an effect gets the smallest component
    assert np.ptp(f[:, 2]) < 0.2 * min(np.ptp(f[:, 0]), np.ptp(f[:, 1]))


@pytest.mark.skipif(bool(missing_uci(TEST_DATA_DIR, ("concrete",), QUICK.splits)),
                    reason=no_data_reason("uci/concrete"))
def test_the_quick_run_writes_the_table_and_the_figure(tmp_path):
    files = additive.run(tmp_path, quick=True, data_dir=TEST_DATA_DIR)
    assert {p.name for p in files} >= {"components.png", "results.md"}
    text = (tmp_path / "results.md").read_text()
    assert "additive model's mean test RMSE" in text and "non-commercial" in text


def test_without_its_data_nothing_runs_and_the_status_is_two(tmp_path):
    assert additive.main(["--quick", "--data-dir", str(tmp_path), "--out",
                          str(tmp_path / "out")]) == 2
