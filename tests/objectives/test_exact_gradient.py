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


RADIAL = ["SquaredExponential", "Matern12", "Matern32", "Matern52"]


@pytest.mark.parametrize("name", RADIAL)
@pytest.mark.parametrize("ard", [False, True])
@pytest.mark.parametrize("per_point", [False, True])
def test_radial_kernels_by_hand_equal_autograd_through_k(name, ard, per_point, monkeypatch):
    import sparsegp as sg
    from sparsegp.objectives import exact

    monkeypatch.setattr(exact, "_row_blocks",  # several blocks of rows, one of them short
                        lambda X: list(exact.chunk_slices(X.shape[0], 7)))
    g = torch.Generator().manual_seed(1)
    X = torch.randn(40, 3, generator=g, dtype=torch.float64)
    X[5] = X[9]  # a repeated input: r² = 0 off the diagonal too (Matérn ½'s ρ' is infinite)
    if name == "Matern12":  # … and its K is not smooth there: both paths round differently,
        X[5] += 0.3  # so the two agree only to ~1e-7 (finite and close: the next test)
    y = torch.sin(X.sum(1)) + 0.1 * torch.randn(40, generator=g, dtype=torch.float64)
    results = []
    for by_hand in (True, False):
        kernel = getattr(sg.kernels, name)(lengthscale=[0.6, 1.1, 2.0] if ard else 0.9,
                                           variance=1.4)
        noise = (torch.linspace(0.01, 0.2, 40, dtype=torch.float64) if per_point
                 else torch.tensor(0.05, dtype=torch.float64)).requires_grad_(True)
        yv = y.clone().requires_grad_(True)  # targets minus a trainable mean
        F = (exact.exact_objective(kernel, X, yv, noise) if by_hand
             else exact.exact_log_marginal_likelihood(kernel.K(X), yv, noise))
        params = [*kernel.parameters(), noise, yv]
        results.append((F.detach(), torch.autograd.grad(F, params)))
    (F1, g1), (F2, g2) = results
    torch.testing.assert_close(F1, F2, rtol=1e-12, atol=1e-10)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_other_kernels_take_the_autograd_path():
    import sparsegp as sg
    from sparsegp.objectives import exact

    X = torch.linspace(0, 1, 20, dtype=torch.float64)[:, None]
    y = torch.sin(6 * X[:, 0])
    noise = torch.tensor(0.1, dtype=torch.float64)
    for kernel in (sg.kernels.Linear(variance=0.5),
                   sg.kernels.SquaredExponential(lengthscale=0.3) + sg.kernels.Constant()):
        torch.testing.assert_close(exact.exact_objective(kernel, X, y, noise),
                                   exact.exact_log_marginal_likelihood(kernel.K(X), y, noise))


def test_repeated_inputs_give_finite_gradients_for_matern_one_half():
    import sparsegp as sg
    from sparsegp.objectives import exact

    X = torch.tensor([[0.0], [0.5], [0.5], [1.2]], dtype=torch.float64)
    y = torch.tensor([0.1, -0.3, -0.2, 0.4], dtype=torch.float64)
    kernel = sg.kernels.Matern12(lengthscale=0.7, variance=1.1)
    F = exact.exact_objective(kernel, X, y, torch.tensor(0.05, dtype=torch.float64))
    grads = torch.autograd.grad(F, list(kernel.parameters()))
    reference = torch.autograd.grad(exact.exact_log_marginal_likelihood(
        kernel.K(X), y, torch.tensor(0.05, dtype=torch.float64)), list(kernel.parameters()))
    for a, b in zip(grads, reference):
        assert bool(torch.isfinite(a).all())
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)
