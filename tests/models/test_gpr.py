"""Exact GP regression: dense reference predictions, a fit on the Snelson data, a fit on raw
inputs that backs off from failing trial steps, and each model's Cholesky message."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.linalg import cho_factor, cho_solve

import sparsegp as sg

from ..conftest import make_problem


def se(A, B, ell, var):
    d = (A[:, None, :] - B[None, :, :]) / ell
    return var * np.exp(-0.5 * (d**2).sum(-1))


def test_objective_and_predictions_match_dense_formulas():
    X, y = make_problem(0, N=25)
    Xs = np.random.default_rng(1).uniform(-3, 3, (6, 2))
    ell, var, noise = np.array([0.8, 1.7]), 1.4, 0.07
    m = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=ell, variance=var),
               noise_variance=noise, standardize_y=False)  # the dense formulas' raw y
    C = se(X, X, ell, var) + noise * np.eye(25)
    c = cho_factor(C, lower=True)
    lml = -0.5 * y @ cho_solve(c, y) - np.log(np.diag(c[0])).sum() - 12.5 * np.log(2 * np.pi)
    assert m.log_marginal_likelihood() == pytest.approx(lml, rel=1e-12)
    Ks = se(X, Xs, ell, var)
    mean = Ks.T @ cho_solve(c, y)
    cov = se(Xs, Xs, ell, var) - Ks.T @ cho_solve(c, Ks)
    mu, v = m.predict(Xs)
    np.testing.assert_allclose(mu, mean, rtol=1e-10)
    np.testing.assert_allclose(v, np.diag(cov), rtol=1e-9)
    mu, S = m.predict(Xs, full_cov=True)
    np.testing.assert_allclose(S, cov, rtol=1e-9, atol=1e-12)
    _, vy = m.predict_y(Xs)
    np.testing.assert_allclose(vy, np.diag(cov) + noise, rtol=1e-10)


def test_fit_on_snelson_recovers_the_known_hyperparameters():
    X, y = sg.datasets.snelson()
    m = sg.GPR(X, y, standardize_y=False)  # data-based start, SE-ARD kernel; the published
    # values are those of the zero-mean GP on y as given
    res = m.fit()
    assert res.success
    # Published values for this data set (e.g. Snelson & Ghahramani 2006; Bauer et al. 2016):
    # lengthscale ≈ 0.6, signal variance ≈ 0.8, noise variance ≈ 0.08, log p(y) ≈ −55.9.
    assert 0.5 < float(m.kernel.lengthscale[0]) < 0.75
    assert 0.5 < m.kernel.variance < 1.1
    assert 0.06 < m.noise_variance < 0.1
    assert m.log_marginal_likelihood() == pytest.approx(-55.9, abs=0.1)
    # A stationary point: the gradient vanishes.
    m.training_loss().backward()
    assert max(float(p.grad.abs().max()) for p in m.parameters()) < 1e-3


def concrete_like(seed, n=60, duplicates=5):
    """Inputs in raw units with a mix like the UCI concrete data's: columns of kg/m³ with
    large offsets, three of them zero for a third to a half of the rows, an age in days from
    nine values, and some rows repeated; y a smooth function of them plus noise."""
    rng = np.random.default_rng(seed)

    def sometimes_zero(p, high):
        return np.where(rng.uniform(size=n) < p, 0.0, rng.uniform(0, high, n))

    X = np.column_stack([rng.uniform(100, 540, n), sometimes_zero(0.45, 360),
                         sometimes_zero(0.55, 200), rng.uniform(120, 250, n),
                         sometimes_zero(0.35, 32), rng.uniform(800, 1150, n),
                         rng.uniform(590, 990, n),
                         rng.choice([1.0, 3, 7, 14, 28, 56, 90, 180, 365], n)])
    X = np.round(X, 1)
    X = np.vstack([X, X[rng.choice(n, duplicates, replace=False)]])
    y = (0.08 * X[:, 0] + 0.06 * X[:, 1] - 0.15 * X[:, 3] + 8 * np.log(X[:, 7])
         + 5 * rng.standard_normal(len(X)))
    return X, y


@pytest.mark.parametrize("seed", [1, 4])
def test_a_fit_backs_off_from_trial_steps_whose_cholesky_fails(seed):
    # On raw inputs L-BFGS-B's early trial steps overshoot, one lengthscale to its floor,
    # where the squared distances of the age column (values to 365) lose their
    # significant digits and K + σ²I is no longer positive definite; the line search backs
    # off from them (`lbfgs._TrialSteps`). Stopping there instead (iteration 13 and 17)
    # left the objective 29 and 15 nats below the fit on standardised inputs, whose
    # optimum is the same (the lengthscales rescaled).
    X, y = concrete_like(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sg.ScaleWarning)
        raw = sg.GPR(X, y).fit()
    standardised = sg.GPR(X, y, standardize_X=True).fit()
    assert raw.success and "non_finite" not in raw.info
    assert raw.info["failed_trials"] >= 1  # it met (and backed off from) failing steps
    assert raw.iterations > 50
    # the stall rule's tolerance (N/2500 nats to come) and L-BFGS-B's on raw units: 1.5 nats
    assert raw.objective > standardised.objective - 1.5


class _NotACovariance(sg.kernels.Kernel):
    """σ²‖x − x'‖²: a function of two inputs that is no covariance (indefinite)."""

    def __init__(self, variance=None):
        super().__init__()
        self._declare("variance", variance, 1.0, 1e-6)

    def K(self, X, X2=None):
        X2 = X if X2 is None else X2
        return self.value("variance") * torch.cdist(X, X2) ** 2

    def K_diag(self, X):
        return X.new_zeros(X.shape[0])


def test_each_models_cholesky_message_names_remedies_that_apply_to_it():
    X, y = make_problem(3, N=30)
    exact = sg.GPR(X, y, kernel=_NotACovariance())
    with pytest.raises(sg.CholeskyError, match=r"Cholesky of K \+ σ²I") as err:
        exact.training_loss()
    text = str(err.value)
    assert "inducing" not in text  # a GPR has none
    for remedy in ("standardize_X=True", "duplicate rows", 'set_bounds("noise_variance"',
                   "`jitter=`", "float64"):
        assert remedy in text
    with pytest.raises(RuntimeError, match="cannot fit GPR: at the starting parameters") as err:
        exact.fit()
    assert "standardize_X=True" in str(err.value) and "inducing" not in str(err.value)
    for sparse in (sg.SGPR(X, y, kernel=_NotACovariance(), inducing_points=X[:6]),
                   sg.SVGP(X, y, kernel=_NotACovariance(), inducing_points=X[:6])):
        with pytest.raises(sg.CholeskyError, match="Cholesky of Kuu") as err:
            sparse.training_loss()
        assert "re-initialise the inducing inputs" in str(err.value)
        assert "standardize_X" not in str(err.value)
