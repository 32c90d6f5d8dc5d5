"""torch.func over predictions: `grad`, `jacrev` and `vmap` of `predict_f`, `predict_y`,
`predict_log_density` and `predict_f_samples` give what plain autograd and a batched call
give, for every model that predicts from a posterior — built inside the transform when the
first prediction is a transformed one (outside it: it does not depend on the inputs) or read
from the cache; KISS-GP, which cannot be transformed, says why."""

from __future__ import annotations

import pytest
import torch
from torch.func import grad, jacrev, vmap

import sparsegp as sg

DT = torch.float64


def data(n=120):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, 2, generator=g, dtype=DT) * 3
    y = torch.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=DT)
    return X, y


def labels(n=120):
    X, y = data(n)
    return X, (y > y.median()).to(DT)


MODELS = {
    "gpr": lambda: sg.GPR(*data(40), noise_variance=0.01),
    "sgpr exact": lambda: sg.SGPR(*data(40), noise_variance=0.01),
    "sgpr": lambda: sg.SGPR(*data(), inducing_points=12, noise_variance=0.01),
    "sgpr fitc": lambda: sg.SGPR(*data(), inducing_points=12, approximation="fitc",
                                 noise_variance=0.01),
    "svgp": lambda: sg.SVGP(*data(), inducing_points=12),
    "svgp bernoulli": lambda: sg.SVGP(*labels(), likelihood=sg.likelihoods.Bernoulli(),
                                      inducing_points=12),
    "sgpc": lambda: sg.SGPC(*labels(), inducing_points=12),
    "rff": lambda: sg.RFF(*data(), num_features=16, seed=0),
}
X_TEST = torch.rand(5, 2, generator=torch.Generator().manual_seed(3), dtype=DT) * 3


def targets(name):
    return (labels if name in ("svgp bernoulli", "sgpc") else data)()[1][:5]


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("cached", [False, True])
def test_grad_jacrev_and_vmap_give_what_autograd_and_a_batch_give(name, cached):
    model = MODELS[name]()
    model.requires_grad_(False)  # gradients to the inputs only
    if cached:
        model.posterior()
    y = targets(name)
    x = X_TEST[0]
    # grad of the mean at one point, the first transformed call when not cached
    got = grad(lambda x: model.predict_f(x[None])[0][0])(x)
    xa = x.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(model.predict_f(xa[None])[0][0], xa)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # the Jacobian of the means at several points
    got = jacrev(lambda X: model.predict_f(X)[0])(X_TEST[:3])
    want = torch.autograd.functional.jacobian(lambda X: model.predict_f(X)[0], X_TEST[:3])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # vmap of the predictive variance of y, point by point, against one batched call
    got = vmap(lambda x: model.predict_y(x[None])[1][0])(X_TEST)
    torch.testing.assert_close(got, model.predict_y(X_TEST)[1], rtol=1e-10, atol=1e-12)
    # the log density of observed targets, and samples with a seed
    got = grad(lambda X: model.predict_log_density(X, y).sum())(X_TEST)
    Xa = X_TEST.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(model.predict_log_density(Xa, y).sum(), Xa)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    got = grad(lambda X: model.predict_f_samples(X, 3, seed=0).sum())(X_TEST)
    (want,) = torch.autograd.grad(model.predict_f_samples(Xa, 3, seed=0).sum(), Xa)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_a_posterior_built_inside_a_transform_is_the_models():
    model = MODELS["sgpr"]()
    model.requires_grad_(False)
    vmap(lambda x: model.predict_f(x[None])[0][0])(X_TEST)  # builds and caches it
    assert model._holds_its_posterior()
    fresh = MODELS["sgpr"]()
    fresh.requires_grad_(False)  # its posterior cached too, built outside any transform
    torch.testing.assert_close(model.predict_f(X_TEST)[1], fresh.predict_f(X_TEST)[1],
                               rtol=0, atol=0)


def test_kissgp_says_it_cannot_be_transformed():
    model = sg.KISSGP(*data(), grid_size=12)
    model.requires_grad_(False)
    with pytest.raises(RuntimeError, match="sparse CSR matrices, which torch.func"):
        grad(lambda x: model.predict_f(x[None])[0][0])(X_TEST[0])


@pytest.mark.parametrize("name", ["gpr", "sgpr"])
def test_hessians_match_finite_differences_and_transforms_follow_each_other(name):
    """The posterior and its cache key are built outside the transforms: a `grad` after a
    `hessian` (nested transforms) reads the same cache."""
    model = MODELS[name]()
    model.requires_grad_(False)

    def f(x):
        return model.predict_f(x[None])[0][0]

    x = X_TEST[1]
    H = torch.func.hessian(f)(x)
    g, h = grad(f), 1e-5
    columns = [(g(x + h * e) - g(x - h * e)) / (2 * h) for e in torch.eye(2, dtype=DT)]
    torch.testing.assert_close(H, torch.stack(columns, 1), rtol=1e-6, atol=1e-8)
    assert model._holds_its_posterior()
