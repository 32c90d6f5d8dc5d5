"""An SGPR whose inducing inputs include every training input is the exact GP (Qff = Kff):
its objective, bounds, predictions, conditioning and saved files are `GPR`'s, for every
member of the family, at near-noiseless data where a jittered Kuu is far from it."""

import math

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.kernels import SquaredExponential


def close(got, want, **tolerances):
    np.testing.assert_allclose(torch.as_tensor(got).detach(), torch.as_tensor(want).detach(),
                               **tolerances)


def branin(X):
    x1, x2 = 15 * X[:, 0] - 5, 15 * X[:, 1]
    return -((x2 - 5.1 / (4 * math.pi ** 2) * x1 ** 2 + 5 / math.pi * x1 - 6) ** 2
             + 10 * (1 - 1 / (8 * math.pi)) * torch.cos(x1) + 10)


def near_noiseless(N=24):
    """Branin at N points, a long lengthscale and noise 1e-6 of var(y): K is ill-conditioned,
    the regime of Bayesian optimisation of a noiseless function."""
    X = torch.rand(N, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return X, branin(X)


def pair(approximation="vfe", alpha=None, **kwargs):
    X, y = near_noiseless()
    kernel = dict(lengthscale=[0.4, 0.9], variance=1.0)
    noise = 1e-6 * float(y.var())
    sgpr = sg.SGPR(X, y, SquaredExponential(**kernel), approximation=approximation, alpha=alpha,
                   noise_variance=noise, **kwargs)
    gpr = sg.GPR(X, y, SquaredExponential(**kernel), noise_variance=noise)
    return sgpr, gpr, X


@pytest.mark.parametrize("approximation, alpha", [("vfe", None), ("fitc", None), ("dtc", None),
                                                  ("pep", 0.5)])
def test_every_member_is_the_exact_gp_where_a_jittered_kuu_is_far_from_it(approximation, alpha):
    sgpr, gpr, X = pair(approximation, alpha)
    assert sgpr.is_exact and sgpr.num_inducing == X.shape[0]
    want = gpr.log_marginal_likelihood()
    assert sgpr.log_marginal_likelihood() == pytest.approx(want, rel=1e-10)
    assert sgpr.upper_bound() == pytest.approx(want, rel=1e-10)
    Xs = torch.rand(200, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for got, expected in zip(sgpr.predict_f(Xs, full_cov=True), gpr.predict_f(Xs, full_cov=True)):
        close(got, expected, rtol=1e-9, atol=1e-12)
    # with one inducing input 1e-9 off its input, the collapsed bound at the default jitter
    # on Kuu is far below: what the limit avoids
    if approximation == "vfe":
        jittered = sg.SGPR(X, branin(X), SquaredExponential(lengthscale=[0.4, 0.9]),
                           inducing_points=torch.cat([X[:-1], X[-1:] + 1e-9]),
                           noise_variance=1e-6 * float(branin(X).var()))
        assert not jittered.is_exact
        assert jittered.log_marginal_likelihood() < want - 10.0


def test_the_inducing_inputs_are_frozen_and_the_fit_is_the_exact_gps_fit():
    X, y = near_noiseless(16)
    sgpr, gpr = sg.SGPR(X, y), sg.GPR(X, y)
    assert dict(sgpr.named_parameters())["feature.Z"].requires_grad is False
    sgpr.fit()
    gpr.fit()
    assert sorted(map(tuple, sgpr.inducing_points.tolist())) == sorted(map(tuple, X.tolist()))
    close(sgpr.kernel.lengthscale, gpr.kernel.lengthscale, rtol=1e-6)
    assert sgpr.log_marginal_likelihood() == pytest.approx(gpr.log_marginal_likelihood(),
                                                           rel=1e-9)
    report = sgpr.diagnostics()
    assert report.approximation == "exact" and not report.warnings


def test_conditioning_stays_exact_and_equals_the_exact_gps():
    sgpr, gpr, _ = pair()
    X_new = torch.rand(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    Xs = torch.rand(50, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    one = sgpr.condition_on_observations(X_new, branin(X_new))
    assert one.is_exact and one.num_inducing == 27
    close(one.predict_f(Xs)[0],
                               gpr.condition_on_observations(X_new, branin(X_new)).predict_f(Xs)[0],
                               rtol=1e-9, atol=1e-9)
    Y = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    mean, var = sgpr.condition_on_observations(X_new, Y).predict_f(Xs)
    want_mean, want_var = gpr.condition_on_observations(X_new, Y).predict_f(Xs)
    assert mean.shape == (50, 4)
    close(mean, want_mean, rtol=1e-9, atol=1e-9)
    close(var, want_var, rtol=1e-9, atol=1e-12)


def test_an_exact_sgpr_and_its_conditioned_models_save_and_load(tmp_path):
    sgpr, _, X = pair()
    X_new = X[:2] + 0.01
    Xs = X + 0.003
    for name, model in [("plain", sgpr), ("conditioned", sgpr.condition_on_observations(
            X_new, branin(X_new))), ("fantasies", sgpr.condition_on_observations(
                X_new, torch.ones(3, 2, dtype=torch.float64)))]:
        model.save(tmp_path / name)
        loaded = sg.load(tmp_path / name)
        for got, want in zip(loaded.predict_f(Xs), model.predict_f(Xs)):
            close(got, want, rtol=0, atol=0)


def test_a_stream_from_an_exact_model_is_the_batch_posterior():
    X, y = near_noiseless(12)
    X_new = torch.rand(6, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    options = dict(noise_variance=1.0, jitter=0.0, standardize_y=False)
    exact = sg.SGPR(X, y, SquaredExponential(lengthscale=0.3, variance=100.0), **options)
    assert exact.is_exact
    streamed = exact.update(X_new, branin(X_new), inducing_points=torch.cat([X, X_new]),
                            fit=False)
    assert not streamed.is_exact
    batch = sg.SGPR(torch.cat([X, X_new]), branin(torch.cat([X, X_new])),
                    SquaredExponential(lengthscale=0.3, variance=100.0), **options)
    assert batch.is_exact
    Xs = torch.rand(20, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    for got, want in zip(streamed.predict_f(Xs), batch.predict_f(Xs)):
        close(got, want, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("case", ["fewer inducing inputs", "one input moved", "two outputs",
                                  "mixing"])
def test_a_model_whose_inducing_inputs_miss_an_input_is_sparse(case):
    X, y = near_noiseless(12)
    if case == "fewer inducing inputs":
        model = sg.SGPR(X, y, inducing_points=8)
    elif case == "one input moved":
        model = sg.SGPR(X, y, inducing_points=torch.cat([X[:-1], X[-1:] + 1e-9]))
    elif case == "two outputs":
        model = sg.SGPR(X, torch.stack([y, -y], 1))
    else:
        model = sg.SGPR(X, torch.stack([y, -y], 1), mixing=torch.eye(2))
    assert not model.is_exact
    assert dict(model.named_parameters())["feature.Z"].requires_grad
