"""Every registered likelihood (recipes in `recipes.LIKELIHOODS`): its Gaussian expectations
(`variational_expectations`, `predict_log_density`, `predict_mean_and_var`) and Power EP's
tilted moments against brute-force integration of its own `log_prob`, `conditional_mean` and
`conditional_variance`; Jensen's inequality between the first two; config and state_dict round
trips; gradients of the log density and of the expectations against finite differences."""

from __future__ import annotations

import copy

import pytest
import torch

from sparsegp.likelihoods import Likelihood, likelihood_from_config

from .helpers import assert_plain, expectation, gradcheck_through, normal, perturb, uniform
from .recipes import built, cases

N = 5


def build(name, case):
    return built("likelihood", name, case, case.make())


def moments(lik, n=N, seed=0):
    """Latent means and variances [N] (or [N, C]) and targets [N]."""
    shape = (n,) if lik.num_latent == 1 else (n, lik.num_latent)
    return normal(*shape, seed=seed), uniform(*shape, seed=seed + 1, low=0.2, high=1.2)


def targets(lik, case, n=N):
    return lik.check_targets(case.targets(n).to(torch.float64))


def assert_matches(value, reference, error_bar, atol, what):
    """|value − reference| ≤ 6 × the reference's error bar + atol, elementwise."""
    gap = (value - reference).abs()
    allowed = 6.0 * error_bar + atol
    assert bool((gap <= allowed).all()), (
        f"{what}: worst gap {float(gap.max()):.3g}, allowed {float(allowed.max()):.3g}\n"
        f"value {value}\nreference {reference}")


@pytest.mark.parametrize("name,case", cases("likelihood", "expectations"))
def test_gaussian_expectations_match_brute_force_integration(name, case):
    lik = build(name, case)
    mean, var = moments(lik)
    y = targets(lik, case)
    with torch.no_grad():
        ve = lik.variational_expectations(mean, var, y)
        ref, err = expectation(lambda f: lik.log_prob(f, y), mean, var)
        assert ve.shape == (N,)
        assert_matches(ve, ref, err, case.atol, "E[log p(y | f)]")

        density = lik.predict_log_density(mean, var, y)
        ref, err = expectation(lambda f: lik.log_prob(f, y).exp(), mean, var)
        assert density.shape == (N,)
        assert_matches(density.exp(), ref, err, case.atol * ref, "E[p(y | f)]")

        Ey, Vy = lik.predict_mean_and_var(mean, var)
        ref_mean, err_mean = expectation(lik.conditional_mean, mean, var)
        ref_second, err_second = expectation(
            lambda f: lik.conditional_variance(f) + lik.conditional_mean(f) ** 2, mean, var)
        assert Ey.shape == Vy.shape == ref_mean.shape
        assert_matches(Ey, ref_mean, err_mean, case.atol, "E[y*]")
        assert_matches(Vy, ref_second - ref_mean**2, err_second + 2 * ref_mean.abs() * err_mean,
                       case.atol, "Var[y*]")
        assert bool((Vy >= 0).all())


@pytest.mark.parametrize("name,case", cases("likelihood", "jensen"))
def test_the_predictive_density_bounds_the_variational_expectation(name, case):
    # log E[p(y | f)] ≥ E[log p(y | f)]
    lik = build(name, case)
    mean, var = moments(lik, seed=4)
    y = targets(lik, case)
    with torch.no_grad():
        gap = lik.predict_log_density(mean, var, y) - lik.variational_expectations(mean, var, y)
    assert bool((gap >= -case.atol).all()), gap


@pytest.mark.parametrize("name,case", cases("likelihood", "tilted"))
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_tilted_moments_match_brute_force_integration(name, case, alpha):
    # log Z̃ = log E[p(y | f)^α] and its first two derivatives in the mean, from the tilted
    # distribution's mean m̃ and variance ṽ: (m̃ − μ)/v and (ṽ − v)/v²
    lik = build(name, case)
    mean, var = moments(lik, seed=6)
    y = targets(lik, case)
    if not case.tilted:
        with pytest.raises(TypeError):
            lik.tilted_moments(mean, var, y, alpha)
        return
    with torch.no_grad():
        log_Z, d1, d2 = lik.tilted_moments(mean, var, y, alpha)
        Z, _ = expectation(lambda f: (alpha * lik.log_prob(f, y)).exp(), mean, var)
        m1, _ = expectation(lambda f: (alpha * lik.log_prob(f, y)).exp() * f, mean, var)
        m2, _ = expectation(lambda f: (alpha * lik.log_prob(f, y)).exp() * f * f, mean, var)
    tilted_mean = m1 / Z
    tilted_var = m2 / Z - tilted_mean**2
    torch.testing.assert_close(log_Z, Z.log(), rtol=1e-9, atol=max(case.atol, 1e-9))
    torch.testing.assert_close(d1, (tilted_mean - mean) / var, rtol=1e-8, atol=max(case.atol, 1e-8))
    torch.testing.assert_close(d2, (tilted_var - var) / var**2, rtol=1e-7, atol=max(case.atol, 1e-7))


def outputs(lik, mean, var, y):
    return (lik.log_prob(mean, y), lik.variational_expectations(mean, var, y),
            lik.predict_log_density(mean, var, y), *lik.predict_mean_and_var(mean, var))


@pytest.mark.parametrize("name,case", cases("likelihood", "config"))
def test_config_rebuilds_the_same_likelihood(name, case):
    lik = build(name, case)
    perturb(lik)
    cfg = lik.config()
    assert_plain(cfg)
    assert cfg["type"] == name
    back = Likelihood.registry.build(copy.deepcopy(cfg))
    assert type(back) is type(lik) and type(likelihood_from_config(cfg)) is type(lik)
    back.load_state_dict(lik.state_dict())
    assert back.config() == cfg and back.num_latent == lik.num_latent
    mean, var = moments(lik)
    y = targets(lik, case)
    with torch.no_grad():
        for a, b in zip(outputs(back, mean, var, y), outputs(lik, mean, var, y)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("name,case", cases("likelihood", "state"))
def test_state_dict_carries_every_value(name, case):
    lik, fresh = build(name, case), build(name, case)
    perturb(lik, seed=3)
    fresh.load_state_dict(lik.state_dict())
    mean, var = moments(lik)
    y = targets(lik, case)
    with torch.no_grad():
        for a, b in zip(outputs(fresh, mean, var, y), outputs(lik, mean, var, y)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("name,case", cases("likelihood", "gradients"))
def test_gradients_match_finite_differences(name, case):
    # of log p(y | f) in f and the parameters, and of each Gaussian expectation in the mean,
    # the variance and the parameters
    lik = build(name, case)
    mean, var = moments(lik, n=4)
    y = targets(lik, case, n=4)
    mean, var = mean.requires_grad_(), var.requires_grad_()
    assert gradcheck_through([lik], lambda f: lik.log_prob(f, y), [mean])
    assert gradcheck_through([lik], lambda m, v: lik.variational_expectations(m, v, y), [mean, var])
    assert gradcheck_through([lik], lambda m, v: lik.predict_log_density(m, v, y), [mean, var])
    assert gradcheck_through([lik], lik.predict_mean_and_var, [mean, var])
