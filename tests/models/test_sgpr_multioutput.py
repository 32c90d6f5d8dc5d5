"""SGPR with several outputs y [N, P]: a sum of single-output models sharing the kernel, the
inducing variables and the noise; missing outputs (NaN); units; persistence; refusals."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.models.core import regression

LENGTHSCALE, VARIANCE, NOISE = 0.8, 1.3, 0.1
JITTER = 1e-6  # the library's default relative jitter on Kuu, reproduced in the dense reference
FAMILY = [("vfe", None), ("dtc", None), ("fitc", None), ("pep", 0.5)]
FAMILY_IDS = ["vfe", "dtc", "fitc", "pep0.5"]


def _data(seed: int, N: int = 40, D: int = 1, P: int = 3, noise: float = 0.09):
    """X [N, D] in [-3, 3]^D and P smooth outputs of the summed inputs, plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(N, D))
    s = X.sum(1) / np.sqrt(D)
    F = np.stack([np.sin(s), np.cos(1.3 * s), 0.5 * s - 0.3 * np.sin(2 * s),
                  np.sin(0.7 * s) + 0.2, np.cos(0.5 * s) - 0.4][:P], axis=1)
    return X, F + np.sqrt(noise) * rng.standard_normal((N, P))


def _inducing(D: int, M: int = 6, seed: int = 100) -> np.ndarray:
    if D == 1:
        return np.linspace(-2.7, 2.7, M)[:, None]
    return np.random.default_rng(seed).uniform(-2.5, 2.5, size=(M, D))


def _with_missing(Y: np.ndarray) -> np.ndarray:
    """Column 0 fully observed; columns 1 and 2 missing at the same rows; column 3 elsewhere."""
    Y = Y.copy()
    Y[[0, 3, 4, 9, 17, 30], 1] = np.nan
    Y[[0, 3, 4, 9, 17, 30], 2] = np.nan
    Y[[1, 2, 20, 21, 22, 35, 38], 3] = np.nan
    return Y


def _model(X, y, Z, approx="vfe", alpha=None, noise=NOISE, **kw) -> sg.SGPR:
    """An SGPR with fixed SE hyperparameters (a fresh kernel, not shared between models), on
    y as given unless told (the identities with single-output models and the dense
    references hold in one unit of y, which standardising would make each model's own)."""
    kernel = sg.kernels.SquaredExponential(lengthscale=LENGTHSCALE, variance=VARIANCE)
    kw.setdefault("standardize_y", False)
    return sg.SGPR(X, y, kernel=kernel, inducing_points=Z, approximation=approx, alpha=alpha,
                   noise_variance=noise, **kw)


def _column_models(X, Y, Z, approx="vfe", alpha=None, **kw) -> list[sg.SGPR]:
    """One single-output SGPR per column of Y, on the rows where that column is observed."""
    models = []
    for p in range(Y.shape[1]):
        rows = ~np.isnan(Y[:, p])
        models.append(_model(X[rows], Y[rows, p], Z, approx, alpha, **kw))
    return models


def _gradients(m: sg.SGPR) -> dict[str, np.ndarray]:
    m.zero_grad()
    m.training_loss().backward()
    return {name: p.grad.detach().numpy().copy() for name, p in m.named_parameters()}


def _se(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return VARIANCE * np.exp(-d2 / (2 * LENGTHSCALE**2))


def _log_normal(y: np.ndarray, S: np.ndarray) -> float:
    _, logdet = np.linalg.slogdet(S)
    return -0.5 * (len(y) * np.log(2 * np.pi) + logdet + y @ np.linalg.solve(S, y))


def _dense_objective(X, y, Z, approx, alpha) -> float:
    """The collapsed family member's objective for one output, from dense N×N matrices."""
    Kuu = _se(Z, Z)
    Kuu = Kuu + JITTER * np.mean(np.diag(Kuu)) * np.eye(len(Z))
    Kuf = _se(Z, X)
    Qff = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    d = VARIANCE - np.diag(Qff)  # diag(Kff − Qff)
    eye = np.eye(len(y))
    if approx == "vfe":
        return _log_normal(y, Qff + NOISE * eye) - d.sum() / (2 * NOISE)
    if approx == "dtc":
        return _log_normal(y, Qff + NOISE * eye)
    if approx == "fitc":
        return _log_normal(y, Qff + np.diag(d) + NOISE * eye)
    return (_log_normal(y, Qff + np.diag(alpha * d + NOISE))
            - (1 - alpha) / (2 * alpha) * np.log1p(alpha * d / NOISE).sum())


def _assert_predictions_match_columns(m: sg.SGPR, columns: list[sg.SGPR], Xs, rtol=1e-10):
    for full_cov in (False, True):
        for noise in (False, True):
            mean, var = m.predict(Xs, full_cov=full_cov, include_noise=noise)
            P = len(columns)
            assert mean.shape == (len(Xs), P)
            assert var.shape == ((P, len(Xs), len(Xs)) if full_cov else (len(Xs), P))
            for p, single in enumerate(columns):
                mean_p, var_p = single.predict(Xs, full_cov=full_cov, include_noise=noise)
                np.testing.assert_allclose(mean[:, p], mean_p, rtol=rtol, atol=1e-12)
                np.testing.assert_allclose(var[p] if full_cov else var[:, p], var_p,
                                           rtol=rtol, atol=1e-12)


# -- 1. fully observed: the sum of P single-output models ------------------------------------
@pytest.mark.parametrize("approx,alpha", FAMILY, ids=FAMILY_IDS)
def test_several_outputs_are_the_sum_of_single_output_models(approx, alpha):
    X, Y = _data(0, N=40, D=2, P=3)
    Z = _inducing(2)
    m = _model(X, Y, Z, approx, alpha)
    columns = _column_models(X, Y, Z, approx, alpha)
    assert m.num_outputs == 3 and all(c.num_outputs == 1 for c in columns)

    total = sum(c.log_marginal_likelihood() for c in columns)
    assert m.log_marginal_likelihood() == pytest.approx(total, rel=1e-10)
    assert m.training_loss().item() == pytest.approx(-total, rel=1e-10)

    grads = _gradients(m)
    column_grads = [_gradients(c) for c in columns]
    assert set(grads) == {"raw_noise_variance", "kernel.raw_lengthscale",
                          "kernel.raw_variance", "feature.Z"}
    for name, g in grads.items():
        expected = sum(cg[name] for cg in column_grads)
        assert np.abs(expected).max() > 1e-3, name  # the comparison is not between zeros
        np.testing.assert_allclose(g, expected, rtol=1e-8, atol=1e-10 * np.abs(expected).max(),
                                   err_msg=name)

    Xs = np.random.default_rng(1).uniform(-3.5, 3.5, size=(7, 2))
    _assert_predictions_match_columns(m, columns, Xs)
    # include_noise adds the one shared noise variance to every output
    _, f_var = m.predict(Xs)
    _, y_var = m.predict(Xs, include_noise=True)
    np.testing.assert_allclose(y_var - f_var, NOISE, rtol=1e-10)


# -- 2. missing outputs: each output on its observed rows ------------------------------------
@pytest.mark.parametrize("approx,alpha", FAMILY, ids=FAMILY_IDS)
def test_missing_outputs_equal_dropping_those_rows_per_output(approx, alpha):
    X, Y = _data(2, N=40, D=2, P=4)
    Y = _with_missing(Y)
    Z = _inducing(2)
    m = _model(X, Y, Z, approx, alpha)
    columns = _column_models(X, Y, Z, approx, alpha)
    assert [c.num_data for c in columns] == [40, 34, 34, 33]

    total = sum(c.log_marginal_likelihood() for c in columns)
    assert m.log_marginal_likelihood() == pytest.approx(total, rel=1e-10)

    grads = _gradients(m)
    column_grads = [_gradients(c) for c in columns]
    for name, g in grads.items():
        expected = sum(cg[name] for cg in column_grads)
        np.testing.assert_allclose(g, expected, rtol=1e-8, atol=1e-10 * np.abs(expected).max(),
                                   err_msg=name)

    Xs = np.random.default_rng(3).uniform(-3.0, 3.0, size=(6, 2))
    _assert_predictions_match_columns(m, columns, Xs)
    # the missing entries matter: columns 1 and 2 do not predict as if fully observed
    full = _model(X, _data(2, N=40, D=2, P=4)[1], Z, approx, alpha)
    assert not np.allclose(m.predict(Xs)[0][:, 1], full.predict(Xs)[0][:, 1], rtol=1e-6)


@pytest.mark.parametrize("approx,alpha", FAMILY, ids=FAMILY_IDS)
def test_objective_with_missing_outputs_matches_a_dense_numpy_evaluation(approx, alpha):
    X, Y = _data(4, N=40, D=2, P=4)
    Y = _with_missing(Y)
    Z = _inducing(2, seed=5)
    m = _model(X, Y, Z, approx, alpha)
    dense = 0.0
    for p in range(Y.shape[1]):
        rows = ~np.isnan(Y[:, p])
        dense += _dense_objective(X[rows], Y[rows, p], Z, approx, alpha)
    assert m.log_marginal_likelihood() == pytest.approx(dense, rel=1e-8)


def test_vfe_predictions_with_missing_outputs_match_the_dense_posterior():
    # f* | y_p = Ksu Σ⁻¹ Kuf y_p, Σ = σ²Kuu + Kuf Kfu (Titsias 2009, eq. 6), column by column
    X, Y = _data(6, N=40, D=1, P=4)
    Y = _with_missing(Y)
    Z = _inducing(1)
    m = _model(X, Y, Z, "vfe", jitter=1e-12)
    Xs = np.linspace(-3, 3, 5)[:, None]
    mean, var = m.predict(Xs)
    Kuu, Ksu = _se(Z, Z), _se(Xs, Z)
    for p in range(4):
        rows = ~np.isnan(Y[:, p])
        Kuf = _se(Z, X[rows])
        Sigma = NOISE * Kuu + Kuf @ Kuf.T
        mean_p = Ksu @ np.linalg.solve(Sigma, Kuf @ Y[rows, p])
        var_p = (VARIANCE - np.einsum("ij,ji->i", Ksu, np.linalg.solve(Kuu, Ksu.T))
                 + NOISE * np.einsum("ij,ji->i", Ksu, np.linalg.solve(Sigma, Ksu.T)))
        np.testing.assert_allclose(mean[:, p], mean_p, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(var[:, p], var_p, rtol=1e-6, atol=1e-9)


# -- 3. the upper bound ----------------------------------------------------------------------
@pytest.mark.parametrize("missing", [False, True], ids=["observed", "missing"])
def test_upper_bound_is_the_sum_of_the_outputs_bounds(missing):
    X, Y = _data(7, N=40, D=2, P=4)
    if missing:
        Y = _with_missing(Y)
    Z = _inducing(2, M=5)
    m = _model(X, Y, Z, "fitc")  # the bound is the same for every member: VFE's statistics
    columns = _column_models(X, Y, Z, "fitc")
    upper = m.upper_bound()
    assert upper == pytest.approx(sum(c.upper_bound() for c in columns), rel=1e-10)
    # and it bounds the exact evidence, which bounds the VFE objective
    exact = 0.0
    for p in range(Y.shape[1]):
        rows = ~np.isnan(Y[:, p])
        exact += _log_normal(Y[rows, p], _se(X[rows], X[rows]) + NOISE * np.eye(rows.sum()))
    vfe = _model(X, Y, Z, "vfe").log_marginal_likelihood()
    assert vfe < exact < upper
    assert _model(X, Y, Z, "vfe").upper_bound() == pytest.approx(upper, rel=1e-12)


# -- 4. standardize_y: per-column offsets, one pooled scale ----------------------------------
def test_standardize_y_uses_column_means_and_one_pooled_standard_deviation():
    X, Y = _data(8, N=40, D=1, P=4)
    Y = _with_missing(Y) * [1.0, 2.0, 0.5, 1.5] + [3.0, -1.0, 0.0, 10.0]
    Z = _inducing(1)
    observed = ~np.isnan(Y)
    n_obs = int(observed.sum())
    col_mean = np.nanmean(Y, axis=0)
    sd = np.sqrt(np.nansum((Y - col_mean) ** 2) / (n_obs - Y.shape[1]))

    m = _model(X, Y, Z, "vfe", noise=0.2, standardize_y=True)
    ref = _model(X, (Y - col_mean) / sd, Z, "vfe", noise=0.2 / sd**2)
    assert m.noise_variance == pytest.approx(0.2, rel=1e-12)
    assert m.log_marginal_likelihood() == pytest.approx(
        ref.log_marginal_likelihood() - n_obs * np.log(sd), rel=1e-12)
    Xs = np.linspace(-3, 3, 6)[:, None]
    mean, var = m.predict(Xs, include_noise=True)
    mean_ref, var_ref = ref.predict(Xs, include_noise=True)
    np.testing.assert_allclose(mean, col_mean + sd * mean_ref, rtol=1e-10)
    np.testing.assert_allclose(var, sd**2 * var_ref, rtol=1e-10)


@pytest.mark.parametrize("approx,alpha", [("vfe", None), ("pep", 0.5)], ids=["vfe", "pep0.5"])
def test_standardize_y_objective_and_predictions_follow_an_affine_change_of_units(approx, alpha):
    X, Y = _data(9, N=40, D=2, P=4)
    Y = _with_missing(Y)
    Z = _inducing(2)
    c, b = 3.7, np.array([10.0, -4.0, 0.5, 2.0])
    n_obs = int((~np.isnan(Y)).sum())
    assert n_obs == 40 * 4 - 6 - 6 - 7
    m = _model(X, Y, Z, approx, alpha, noise=0.15, standardize_y=True)
    t = _model(X, Y * c + b, Z, approx, alpha, noise=0.15 * c**2, standardize_y=True)
    assert t.log_marginal_likelihood() == pytest.approx(
        m.log_marginal_likelihood() - n_obs * np.log(c), rel=1e-10)
    assert t.upper_bound() == pytest.approx(m.upper_bound() - n_obs * np.log(c), rel=1e-10)
    assert t.noise_variance == pytest.approx(c**2 * m.noise_variance, rel=1e-12)
    Xs = np.random.default_rng(10).uniform(-3, 3, size=(5, 2))
    for full_cov in (False, True):
        for noise in (False, True):
            mean_m, var_m = m.predict(Xs, full_cov=full_cov, include_noise=noise)
            mean_t, var_t = t.predict(Xs, full_cov=full_cov, include_noise=noise)
            np.testing.assert_allclose(mean_t, c * mean_m + b, rtol=1e-10)
            np.testing.assert_allclose(var_t, c**2 * var_m, rtol=1e-10, atol=1e-12)


# -- 5. fitting --------------------------------------------------------------------------------
def test_fit_of_several_outputs_improves_the_objective_without_approximation_warnings():
    rng = np.random.default_rng(11)
    X = rng.uniform(-3.0, 3.0, size=(60, 1))
    x = X[:, 0]
    F = np.stack([np.sin(x), np.cos(1.5 * x), 0.5 * np.sin(2 * x) + 0.3 * x], axis=1)
    Y = F + np.sqrt(0.1) * rng.standard_normal(F.shape)
    m = sg.SGPR(X, Y, inducing_points=8)
    start = m.log_marginal_likelihood()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = m.fit(maxiter=200)
    assert isinstance(result, sg.FitResult)
    approximation_warnings = [w for w in caught if issubclass(w.category, sg.ApproximationWarning)]
    assert approximation_warnings == []
    assert m.log_marginal_likelihood() > start + 10.0
    assert result.objective == pytest.approx(m.log_marginal_likelihood(), rel=1e-10)
    assert 0.05 < m.noise_variance < 0.2  # one noise variance learned from all 180 targets
    mean, _ = m.predict(X)
    assert np.sqrt(np.mean((mean - F) ** 2)) < 0.15


# -- 6. persistence ----------------------------------------------------------------------------
def test_save_and_load_of_several_outputs_with_missing_values(tmp_path):
    X, Y = _data(12, N=40, D=2, P=4)
    Y = _with_missing(Y) + [0.0, 5.0, -2.0, 1.0]
    m = _model(X, Y, _inducing(2), "pep", 0.5, standardize_y=True)
    m.save(tmp_path / "m.pt")
    back = sg.load(tmp_path / "m.pt")
    assert type(back) is sg.SGPR and back.num_outputs == 4 and back.X is None
    Xs = np.random.default_rng(13).uniform(-3, 3, size=(6, 2))
    for full_cov in (False, True):
        for noise in (False, True):
            a, b = m.predict(Xs, full_cov, noise), back.predict(Xs, full_cov, noise)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
    # with the data: the same objective and bound, and the missing entries are kept
    m.save(tmp_path / "d.pt", include_data=True)
    back = sg.load(tmp_path / "d.pt")
    assert back.log_marginal_likelihood() == m.log_marginal_likelihood()
    assert back.upper_bound() == m.upper_bound()
    np.testing.assert_array_equal(np.isnan(back.y.numpy()), np.isnan(Y))


# -- 7. refusals -------------------------------------------------------------------------------
def _refusal_cases():
    X, Y = _data(14, N=20, D=1, P=3)
    nan_single = Y[:, 0].copy()
    nan_single[4] = np.nan
    empty = Y.copy()
    empty[:, 1] = np.nan
    inf = Y.copy()
    inf[3, 2] = np.inf
    ninf = Y.copy()
    ninf[5, 0] = -np.inf
    groups = np.arange(20) % 2
    return [
        ("nan-single", lambda: sg.SGPR(X, nan_single, inducing_points=4), r"NaN"),
        ("nan-column", lambda: sg.SGPR(X, nan_single[:, None], inducing_points=4), r"NaN"),
        ("empty-column", lambda: sg.SGPR(X, empty, inducing_points=4),
         r"column.*\[1\].*no observed value"),
        ("inf", lambda: sg.SGPR(X, inf, inducing_points=4), r"inf"),
        ("minus-inf", lambda: sg.SGPR(X, ninf, inducing_points=4), r"inf"),
        ("noise-groups", lambda: sg.SGPR(X, Y, inducing_points=4, noise_groups=groups),
         r"noise_groups"),
        ("per-point-noise", lambda: sg.SGPR(X, Y, inducing_points=4,
                                            noise_variance=np.full(20, 0.1)),
         r"noise_variance per point"),
        ("constant-mean", lambda: sg.SGPR(X, Y, inducing_points=4, mean=sg.means.Constant()),
         r"mean takes one output"),
        ("gpr", lambda: sg.GPR(X, Y), r"1-D|column"),
    ]


@pytest.mark.parametrize("case", _refusal_cases(), ids=lambda case: case[0])
def test_what_several_outputs_cannot_do_is_refused_by_name(case):
    _, build, message = case
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize("missing", [False, True], ids=["observed", "missing"])
def test_diagnostics_refuse_several_outputs_with_a_value_error(missing):
    X, Y = _data(15, N=40, D=1, P=4)
    if missing:
        Y = _with_missing(Y)
    m = _model(X, Y, _inducing(1, M=5))
    with pytest.raises(ValueError, match="diagnostics take one output; this model has 4"):
        m.diagnostics()


def test_fit_skips_the_post_fit_diagnostics_for_several_outputs(monkeypatch):
    X, Y = _data(16, N=30, D=1, P=2)
    m = _model(X, Y, _inducing(1, M=5))
    called = []
    monkeypatch.setattr(regression, "warn_if_unhealthy", lambda model, **kw: called.append(model))
    start = m.log_marginal_likelihood()
    result = m.fit(maxiter=5)  # diagnose=True by default: skipped, not raised
    assert isinstance(result, sg.FitResult) and called == []
    assert m.log_marginal_likelihood() > start
    single = _model(X, Y[:, 0], _inducing(1, M=5))  # the control: one output is checked
    single.fit(maxiter=5)
    assert called == [single]
