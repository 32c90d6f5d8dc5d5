"""What a streaming update checks (`models.core.stream_checks`, and the checks after a streamed
fit): a new batch that has moved gives a ScaleWarning that names the shift; a fitted update
on fewer rows than trained hyperparameters an ApproximationWarning; a streamed SGPR's fit the
checks a batch fit runs. A batch from the same process gives none of these (the shift test's
false-alarm rate is measured below)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.models.core.stream_checks import (
    SHIFT_P,
    batch_shift,
    few_rows,
    trained_hyperparameters,
)


def data(n, seed=0, shift=0.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n, 1))
    return X, np.sin(1.5 * X[:, 0]) + shift + 0.3 * rng.standard_normal(n)


@pytest.fixture(scope="module")
def fitted():
    X, y = data(150)
    m = sg.SGPR(X, y, inducing_points=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(progress=False)
    return m


def recorded(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, caught


def of(caught, kind):
    return [str(w.message) for w in caught if issubclass(w.category, kind)]


def test_a_batch_that_moved_is_named_and_the_model_is_still_returned(fitted):
    # 50 rows 50 sd(y) above the data the model was fitted to: absorbed as noise, as the
    # update assumes one function and one noise level; the warning names the shift
    X, y = data(50, seed=1)
    shift = 50.0 * float(np.std(y))
    new, caught = recorded(lambda: fitted.update(X, y + shift, fit=False))
    moved = of(caught, sg.ScaleWarning)
    assert len(moved) == 1 and "does not look like the data this model has seen" in moved[0]
    assert "above the model's predictions" in moved[0] and "fit a new model" in moved[0]
    # the shift it names is the batch's mean residual (units of y): the shift, within the
    # residuals' own scatter (sd about 0.3/√50 plus the model's error)
    stated = float(moved[0].split("sit ")[1].split(" ")[0])
    assert stated == pytest.approx(shift, abs=0.2)
    assert isinstance(new, sg.models.SGPR) and new.num_data == 50
    # and a shift below it as well
    _, caught = recorded(lambda: fitted.update(X, y - shift, fit=False))
    assert "below the model's predictions" in of(caught, sg.ScaleWarning)[0]


def test_a_batch_from_the_same_process_gives_no_warning(fitted):
    X, y = data(60, seed=2)
    _, caught = recorded(lambda: fitted.update(X, y, fit=False))
    assert of(caught, sg.ScaleWarning) == [] and of(caught, sg.ApproximationWarning) == []


def test_the_shift_test_false_alarm_rate_is_below_its_level(fitted):
    # 400 batches of 1 to 40 rows drawn from the model's own predictive distribution (so the
    # model is right by construction): Σz² ~ χ²_N, and the test (at p = 1e-6, and at least 3
    # sd in root mean square) must not fire; P(any of 400 fires) ≤ 400·1e-6
    rng = np.random.default_rng(3)
    fired = 0
    for _ in range(400):
        n = int(rng.integers(1, 41))
        X = rng.uniform(0.0, 6.0, (n, 1))
        mean, var = fitted.predict_y(X)
        y = np.asarray(mean) + np.sqrt(np.asarray(var)) * rng.standard_normal(n)
        fired += batch_shift(fitted, X, y) is not None
    assert fired == 0 and 400 * SHIFT_P < 1e-3


def test_a_shift_of_one_sd_on_a_large_batch_is_detectable_but_not_material(fitted):
    # 2,000 rows one predictive sd above: Σz² ≈ 2N, far beyond the χ² quantile, but an rms of
    # √2 < 3 sd: no warning (the update can follow such a change); at 4 sd it warns
    rng = np.random.default_rng(4)
    X = rng.uniform(0.0, 6.0, (2000, 1))
    mean, var = fitted.predict_y(X)
    sd = np.sqrt(np.asarray(var))
    noise = rng.standard_normal(2000)
    assert batch_shift(fitted, X, np.asarray(mean) + sd * (1.0 + noise)) is None
    assert batch_shift(fitted, X, np.asarray(mean) + sd * (4.0 + noise)) is not None


def test_a_fitted_update_on_fewer_rows_than_hyperparameters_warns(fitted):
    # the noise is judged on the new rows alone: on one row the fit takes it far from the
    # 150-row value (measured: 0.11 → 0.02, ±2 sd then covering 79% of fresh data)
    assert trained_hyperparameters(fitted) == 3  # noise, lengthscale, variance
    X, y = data(3, seed=5)
    new, caught = recorded(lambda: fitted.update(X[:1], y[:1], progress=False))
    small = of(caught, sg.ApproximationWarning)
    assert any("1 row for 3 trained hyperparameters" in s and "fit=False" in s for s in small)
    assert new.num_data == 1
    # without the fit, or with as many rows as hyperparameters, no such warning
    _, caught = recorded(lambda: fitted.update(X[:1], y[:1], fit=False))
    assert not any("trained hyperparameters" in s for s in of(caught, sg.ApproximationWarning))
    assert few_rows(fitted, 3) is None and few_rows(fitted, 2) is not None


def test_frozen_hyperparameters_are_not_counted():
    X, y = data(40)
    m = sg.SGPR(X, y, inducing_points=6)
    m.freeze("noise_variance")
    assert trained_hyperparameters(m) == 2
    s = sg.SVGP(X, y, inducing_points=6)  # q(u) and the inducing inputs are not counted
    assert trained_hyperparameters(s) == 3


def test_classifiers_are_not_shift_tested():
    X, y = data(40)
    c = sg.SGPC(X, (y > 0).astype(float), inducing_points=6)
    assert batch_shift(c, X, 1.0 - (y > 0)) is None


def test_a_streamed_fit_runs_the_checks_a_batch_fit_runs(fitted):
    # a batch with a fast wiggle, which 2 inducing inputs cannot represent: the streamed
    # fit's checks warn (the bounds 73 nats apart, measured), as a batch fit's do;
    # diagnose=False skips them
    rng = np.random.default_rng(6)
    X = rng.uniform(0.0, 6.0, (200, 1))
    y = np.sin(1.5 * X[:, 0]) + np.sin(25.0 * X[:, 0]) + 0.05 * rng.standard_normal(200)
    _, caught = recorded(lambda: fitted.update(X, y, inducing_points=2, maxiter=200,
                                               progress=False))
    checks = [s for s in of(caught, sg.ApproximationWarning) if "StreamingSGPR" in s]
    assert checks and "model.diagnostics()" in checks[0]
    _, caught = recorded(lambda: fitted.update(X, y, inducing_points=2, maxiter=200,
                                               progress=False, diagnose=False))
    assert not [s for s in of(caught, sg.ApproximationWarning) if "StreamingSGPR" in s]
