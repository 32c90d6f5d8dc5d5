"""Minibatch natural-gradient steps under a non-conjugate likelihood never lower their
minibatch's bound (they are halved until it does not fall), so default fits of counts far from
the prior's scale do not blow up."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.training import minibatch
from sparsegp.training.natural_gradients import natural_update


def _counts(rate, N=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (N, 1))
    return X, rng.poisson(rate, N).astype(float)


def _gradients(model, X, y):
    """The natural gradients (in q(u)'s expectation parameters) of the minibatch bound, and
    the loss, as `minibatch._natural_step` takes them."""
    from sparsegp.training.natural_gradients import expectation_parameters

    eta = expectation_parameters(model.q_mu, model.q_sqrt)
    loss = -(model.elbo(X, y, q_mu=eta.mean, q_sqrt=eta.root) + model.log_prior())
    g1, g2 = torch.autograd.grad(loss, [eta.eta1, eta.eta2])
    return -g1, -g2, loss.detach()


def test_a_step_that_would_lower_the_bound_is_halved_until_it_does_not():
    X, y = _counts(100.0)
    model = sg.SVGP(X, y, likelihood=sg.likelihoods.Poisson(), inducing_points=5)
    assert model.natural_steps_can_overshoot
    Xb, yb = model.X[:100], model.y[:100]
    g1, g2, loss = _gradients(model, Xb, yb)
    start = model.q_mu.detach().clone(), model.q_sqrt.detach().clone()
    with torch.no_grad():
        before = float(model.elbo(Xb, yb))
    # the plain step of the default size overshoots: the bound falls by orders of magnitude
    natural_update(model.q_mu, model.q_sqrt, g1, g2, 0.1)
    with torch.no_grad():
        assert float(model.elbo(Xb, yb)) < before - 1e5
        model.q_mu.copy_(start[0])
        model.q_sqrt.copy_(start[1])
    step = minibatch._damped_update(model, Xb, yb, g1, g2, 0.1, loss)
    with torch.no_grad():
        after = float(model.elbo(Xb, yb))
    assert 0 < step < 0.1 and after > before


def test_only_unbounded_curvature_is_checked_and_a_constant_mean_starts_at_the_log_counts():
    X, y = _counts(20.0)
    lik = sg.likelihoods
    for likelihood, targets, checked in [(lik.Gaussian(), np.log(y + 1), False),
                                         (lik.Bernoulli(), y > 20, False),
                                         (lik.MultiClass(3), y % 3, False),
                                         (lik.HeteroscedasticGaussian(), np.log(y + 1), True),
                                         (lik.Poisson(), y, True)]:
        model = sg.SVGP(X, targets, likelihood=likelihood, inducing_points=5)
        assert model.natural_steps_can_overshoot is checked
    model = sg.SVGP(X, y, likelihood=sg.likelihoods.Poisson(), inducing_points=5, mean="constant")
    assert model.mean.constant.item() == pytest.approx(np.mean(np.log(y + 0.5)))
