"""The exact GP's evidence with its hand-derived gradient (∂F/∂C = ½(ααᵀ − C⁻¹)) against
autograd through a dense Gaussian log-density, for K, y and a scalar or per-point noise."""

from __future__ import annotations

import pytest
import torch

from sparsegp.objectives.exact import exact_log_marginal_likelihood


def problem(n=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64) * 3
    K = 1.3 * torch.exp(-0.5 * torch.cdist(X, X) ** 2 / 0.7**2)
    y = torch.sin(X.sum(1)) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return K, y


@pytest.mark.parametrize("per_point", [False, True])
def test_value_and_gradient_equal_dense_autograd(per_point):
    K, y = problem()
    noise = (torch.linspace(0.01, 0.2, 30, dtype=torch.float64) if per_point
             else torch.tensor(0.05, dtype=torch.float64))
    grads = []
    values = []
    for fast in (True, False):
        Kv, yv, nv = (t.clone().requires_grad_(True) for t in (K, y, noise))
        if fast:
            F = exact_log_marginal_likelihood(Kv, yv, nv)
        else:
            C = Kv + torch.diag(nv.expand(30))
            F = torch.distributions.MultivariateNormal(torch.zeros(30, dtype=torch.float64),
                                                       covariance_matrix=C).log_prob(yv)
        F.backward()
        values.append(float(F.detach()))
        grads.append([Kv.grad, yv.grad, nv.grad])
    assert values[0] == pytest.approx(values[1], rel=1e-12)
    # dense autograd gives a symmetric ∂/∂K only up to the symmetrisation of C's use
    gK_fast, gK_dense = grads[0][0], grads[1][0]
    torch.testing.assert_close(gK_fast + gK_fast.mT, gK_dense + gK_dense.mT, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(grads[0][2], grads[1][2], rtol=1e-9, atol=1e-11)


def test_without_gradients_it_is_the_same_value():
    K, y = problem()
    noise = torch.tensor(0.05, dtype=torch.float64)
    with torch.no_grad():
        a = exact_log_marginal_likelihood(K, y, noise)
    b = exact_log_marginal_likelihood(K.requires_grad_(True), y, noise)
    assert float(a) == pytest.approx(float(b.detach()), rel=1e-14)
