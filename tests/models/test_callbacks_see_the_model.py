"""A fit's callback sees the model being fitted, for every training plan: inside it the
model's predictions are those of its current parameters (a full-batch plan's
`-training_loss()` is the objective passed), and the model at the last callback is the model
`fit()` returns."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import sparsegp as sg

DT = torch.float64


def data(n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=DT) * 4
    y = torch.sin(X[:, 0]) + 0.3 * X[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=DT)
    return X, y


def labels():
    X, y = data()
    return X, (y > y.median()).to(DT)


X_TEST = torch.rand(7, 2, generator=torch.Generator().manual_seed(9), dtype=DT) * 4

PLANS = {
    "gpr": (lambda: sg.GPR(*data()), dict(maxiter=15), True),
    "sgpr": (lambda: sg.SGPR(*data(150), inducing_points=10), dict(maxiter=15), True),
    "svgp collapsed": (lambda: sg.SVGP(*data(150), inducing_points=10), dict(maxiter=15), True),
    "svgp minibatch": (lambda: sg.SVGP(*data(150), inducing_points=10),
                       dict(batch_size=50, epochs=3), False),
    "svgp bernoulli": (lambda: sg.SVGP(*labels(), likelihood=sg.likelihoods.Bernoulli(),
                                       inducing_points=10), dict(epochs=3), False),
    "sgpc": (lambda: sg.SGPC(*labels(), inducing_points=10), dict(maxiter=3), True),
    "rff": (lambda: sg.RFF(*data(), num_features=20, seed=0), dict(maxiter=15), True),
    "sgpc stochastic": (lambda: sg.SGPC(*labels(), inducing_points=10),
                        dict(schedule="stochastic", epochs=3, batch_size=20), False),
    "kissgp": (lambda: sg.KISSGP(*data(), grid_size=10), dict(maxiter=10), False),
    "gplvm": (lambda: sg.BayesianGPLVM(torch.stack([data()[1], data(seed=1)[1]], 1), latent_dim=1,
                               inducing_points=8), dict(maxiter=10), True),
    "gplvm minibatch": (lambda: sg.BayesianGPLVM(torch.stack([data()[1], data(seed=1)[1]], 1),
                                         latent_dim=1, inducing_points=8),
                        dict(batch_size=20, epochs=2), False),
}


@pytest.mark.parametrize("plan", list(PLANS))
def test_the_callback_sees_the_model_being_fitted(plan):
    build, options, full_batch = PLANS[plan]
    model = build()
    seen = []

    def callback(step, objective):
        with torch.no_grad():
            mean, var = model.predict_f(X_TEST[:, :model.input_dim])
            loss = float(model.training_loss())
        seen.append((step, objective, -loss, mean.detach().clone(), var.detach().clone(),
                     copy.deepcopy(model.state_dict())))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(callback=callback, progress=False, **options)
    assert seen
    if full_batch:  # the objective passed is the model's at that moment
        for step, objective, current, *_ in seen:
            assert current == pytest.approx(objective, rel=1e-8, abs=1e-8), step
    # the last callback's model is the returned model
    _, _, _, mean, var, state = seen[-1]
    with torch.no_grad():
        final_mean, final_var = model.predict_f(X_TEST[:, :model.input_dim])
    torch.testing.assert_close(final_mean.detach(), mean, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(final_var.detach(), var, rtol=1e-9, atol=1e-9)
