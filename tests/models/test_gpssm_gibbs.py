"""Particle Gibbs for the GPSSM: each conditional against an exact Gaussian, and the whole
sampler against the exact posterior of a linear transition (by quadrature)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.objectives.latent.kalman import LinearSSM, kalman_filter
from sparsegp.objectives.latent.particle_gibbs import (
    Emission,
    csmc_as,
    effective_sample_size,
    particle_gibbs,
    sample_v,
    transition,
    v_conditional,
)
from sparsegp.quadrature import nodes_and_weights
from sparsegp.runtime.threads import threads_for

F64 = torch.float64


def _t(x):
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


def _sequence(T, seed, slope=0.8, q=0.1, r=0.09):
    rng = np.random.default_rng(seed)
    x = [0.5]
    for _ in range(T - 1):
        x.append(slope * x[-1] + math.sqrt(q) * rng.standard_normal())
    return _t(np.array(x)[:, None] + math.sqrt(r) * rng.standard_normal((T, 1)))


def _linear(variance=0.5):
    # f(x) = x·u with one inducing point at z = 1: u = f(1) ~ N(0, σ²), the whitened
    # v = u/σ ~ N(0, 1), the slope σv, and no residual (k(x, x) = Q(x, x))
    kernel = sg.kernels.Linear(variance=variance)
    Z = _t([[1.0]])
    return kernel, Z, torch.sqrt(kernel.K(Z))


def test_the_conditional_of_v_is_the_dense_gaussian_posterior_of_u():
    # u_j ~ N(0, Kuu), x_{t+1,j} = Φ_t u_j + N(0, λ_tj) with Φ = K_fu Kuu⁻¹, λ = k − Q + q_j:
    # the posterior of u in its own coordinates, then v = L⁻¹u
    g = torch.Generator().manual_seed(0)
    kernel = sg.kernels.SquaredExponential(lengthscale=[0.7, 1.3], variance=0.9)
    Z = torch.randn(5, 2, generator=g, dtype=F64)
    Kuu = kernel.K(Z) + 1e-8 * torch.eye(5, dtype=F64)
    L = torch.linalg.cholesky(Kuu)
    states = torch.randn(12, 2, generator=g, dtype=F64)
    q = _t([0.05, 0.2])
    with torch.no_grad():
        mean, roots = v_conditional(kernel, Z, L, states, q)
        Kfu = kernel.K(states[:-1], Z)
        Phi = Kfu @ torch.linalg.inv(Kuu)
        resid = kernel.K_diag(states[:-1]) - (Phi * Kfu).sum(1)
        for j in range(2):
            lam = resid + q[j]
            cov_u = torch.linalg.inv(torch.linalg.inv(Kuu) + Phi.mT @ (Phi / lam[:, None]))
            mean_u = cov_u @ Phi.mT @ (states[1:, j] / lam)
            Linv = torch.linalg.inv(L)
            torch.testing.assert_close(mean[:, j], Linv @ mean_u, rtol=1e-8, atol=1e-10)
            cov_v = torch.cholesky_inverse(roots[j])
            torch.testing.assert_close(cov_v, Linv @ cov_u @ Linv.mT, rtol=1e-8, atol=1e-10)
        # and the draws have that mean and covariance (4000 draws: 5 standard errors)
        with threads_for(0.0):  # tiny factorisations: one thread
            draws = torch.stack([sample_v(kernel, Z, L, states, q, g) for _ in range(4000)])
        for j in range(2):
            cov_v = torch.cholesky_inverse(roots[j])
            se = torch.sqrt(torch.diagonal(cov_v) / 4000)
            assert bool(((draws[:, :, j].mean(0) - mean[:, j]).abs() < 5 * se).all())
            emp = torch.cov(draws[:, :, j].mT)
            assert float((emp - cov_v).abs().max()) < 0.1 * float(torch.diagonal(cov_v).max())


def test_conditional_smc_leaves_the_states_posterior_invariant():
    # v fixed: a linear-Gaussian state-space model, whose p(x | y) is a dense Gaussian; the
    # CSMC-AS chain's time averages agree with its means and variances (ESS-based errors)
    T, slope_v = 6, 1.1
    y = _sequence(T, seed=1)
    kernel, Z, L = _linear()
    v = _t([[slope_v]])
    slope = float(L[0, 0].detach()) * slope_v
    q, r = 0.1, 0.09
    emission = Emission(_t([[1.0]]), _t([0.0]), _t([r]))
    step = transition(kernel, Z, L, v, _t([q]))
    g = torch.Generator().manual_seed(2)
    x = torch.zeros(T, 1, dtype=F64)
    chain = []
    with torch.no_grad(), threads_for(0.0):
        for sweep in range(2300):
            x = csmc_as(y, emission, step, x, 8, g)
            if sweep >= 300:
                chain.append(x[:, 0])
    chain = torch.stack(chain)  # [S, T]
    # the dense joint: x_0 ~ N(0, 1), x_{t+1} = slope x_t + N(0, q); y = x + N(0, r)
    var = [1.0]
    for _ in range(T - 1):
        var.append(slope**2 * var[-1] + q)
    cov = torch.zeros(T, T, dtype=F64)
    for i in range(T):
        for j in range(i, T):
            cov[i, j] = cov[j, i] = slope ** (j - i) * var[i]
    gain = cov @ torch.linalg.inv(cov + r * torch.eye(T, dtype=F64))
    post_mean = gain @ y[:, 0]
    post_var = torch.diagonal(cov - gain @ cov)
    for t in range(T):
        ess = effective_sample_size(chain[:, t])
        se = math.sqrt(float(post_var[t]) / ess)
        assert abs(float(chain[:, t].mean()) - float(post_mean[t])) < 5 * se
        assert float(chain[:, t].var()) == pytest.approx(float(post_var[t]), rel=0.25)


def test_particle_gibbs_finds_the_exact_posterior_of_a_linear_transition():
    # f(x) = w x with w ~ N(0, σ²) (a linear kernel, one inducing point: v = w/σ exactly);
    # p(v | y) ∝ N(v; 0, 1) Kalman(y | slope σv) by Gauss–Hermite over v: its mean and
    # variance against the sampler's (both conditionals exact: a full Gibbs sampler)
    T, q, r = 12, 0.1, 0.09
    y = _sequence(T, seed=3)
    kernel, Z, L = _linear(variance=0.5)
    sigma = float(L[0, 0].detach())
    nodes, weights = nodes_and_weights(80, _t(0.0))
    logs = torch.stack([kalman_filter(y, LinearSSM(A=_t([[sigma * float(a)]]), b=_t([0.0]),
                                                   Qn=_t([[q]]), C=_t([[1.0]]), d=_t([0.0]),
                                                   R=_t([[r]]), m0=_t([0.0]),
                                                   P0=_t([[1.0]])))[0] for a in nodes])
    post = torch.softmax(logs + torch.log(weights), 0)
    exact_mean = float((post * nodes).sum())
    exact_var = float((post * nodes**2).sum()) - exact_mean**2
    emission = Emission(_t([[1.0]]), _t([0.0]), _t([r]))
    with torch.no_grad():
        samples = particle_gibbs(y, emission, kernel, Z, L, _t([q]), y.clone(), 1500, 200,
                                 10, seed=4)
    v = samples.v[:, 0, 0]
    se = math.sqrt(exact_var / effective_sample_size(v))
    assert abs(float(v.mean()) - exact_mean) < 5 * se
    assert float(v.var()) == pytest.approx(exact_var, rel=0.25)
    assert float(samples.moved.mean()) > 0.5  # the particles renew most of the trajectory


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_effective_sample_size_of_an_autoregressive_chain(phi):
    # AR(1) with coefficient φ: τ = (1 + φ)/(1 − φ), so ESS = n(1 − φ)/(1 + φ)
    n = 20000
    g = torch.Generator().manual_seed(5)
    eps = torch.randn(n, generator=g, dtype=F64)
    x = torch.empty(n, dtype=F64)
    x[0] = eps[0]
    for t in range(1, n):
        x[t] = phi * x[t - 1] + math.sqrt(1 - phi**2) * eps[t]
    assert effective_sample_size(x) == pytest.approx(n * (1 - phi) / (1 + phi), rel=0.15)
