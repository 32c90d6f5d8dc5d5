"""Second derivatives where an inducing input sits on a data input (as k-means++ places
them): right, not silently wrong.

Rounding leaves such a pair's squared distance at or a little below zero. The value is
clamped at zero, but the derivatives must stay those of the distance (a clamp in the graph
passed none, making ∂²r²/∂z² zero instead of 2/ℓ²), and the Matérn kernels, written in
r = √r², must be differentiated in r², where their profiles are smooth
(`sparsegp.kernels.profiles`).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.autograd import SecondDerivativeError
from sparsegp.kernels.profiles import Profile

RNG = np.random.default_rng(0)
X = torch.as_tensor(RNG.random((12, 2)) * 3)
LABELS = (np.sin(X.numpy().sum(1)) > 0).astype(float)

KERNELS = {
    "se": lambda: sg.kernels.SquaredExponential(lengthscale=[0.8, 1.3]),
    "matern32": lambda: sg.kernels.Matern32(lengthscale=[0.8, 1.3]),
    "matern52": lambda: sg.kernels.Matern52(lengthscale=[0.8, 1.3]),
    "rq": lambda: sg.kernels.RationalQuadratic(lengthscale=[0.8, 1.3]),
    "periodic": lambda: sg.kernels.Periodic(lengthscale=[0.8, 1.3]),
}


def _hvp_and_differences(f, z, v, eps):
    """(H v by autograd, central differences of the autograd gradient along v)."""
    z = z.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(z), z, create_graph=True)
    (hv,) = torch.autograd.grad((g * v).sum(), z)

    def grad_at(t):
        t = t.detach().requires_grad_(True)
        return torch.autograd.grad(f(t), t)[0]

    return hv, (grad_at(z + eps * v) - grad_at(z - eps * v)) / (2 * eps)


@pytest.mark.parametrize("name", list(KERNELS))
def test_hessian_in_inducing_inputs_on_top_of_data_inputs(name):
    kernel = KERNELS[name]()
    W = torch.as_tensor(RNG.standard_normal((12, 4)))

    def f(z):
        return (kernel.K(X, z) * W).sum() + (kernel.K(z) ** 2).sum()

    Z = torch.cat([X[:3], X[3:4] + 0.3])  # three inducing inputs exactly on data inputs
    v = torch.as_tensor(RNG.standard_normal(Z.shape))
    hv, fd = _hvp_and_differences(f, Z, v, 1e-6)
    torch.testing.assert_close(hv, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["se", "matern32", "matern52"])
def test_sgpc_hessian_with_inducing_inputs_on_data_inputs(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sg.SGPC(X.numpy(), LABELS, inducing_points=X[:5].numpy().copy(),
                        kernel=KERNELS[name]())
    g = torch.Generator().manual_seed(3)
    model.tau = 0.5 + torch.rand(12, generator=g, dtype=torch.float64)
    model.nu = torch.randn(12, generator=g, dtype=torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]
    assert any(p.shape == (5, 2) for p in params), "the inducing inputs must be trained"
    direction = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]
    loss = model.training_loss()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    hv = torch.autograd.grad(sum((a * d).sum() for a, d in zip(grads, direction)), params)
    # Matérn 3/2's third derivative grows as 1/r near a coincident pair, so central differences
    # of its gradient are first order there (their error halves with the step): a small step
    eps = 1e-7
    moved = []
    for s in (1.0, -1.0):
        with torch.no_grad():
            for p, d in zip(params, direction):
                p.add_(s * eps * d)
        moved.append(torch.autograd.grad(model.training_loss(), params))
        with torch.no_grad():
            for p, d in zip(params, direction):
                p.sub_(s * eps * d)
    for h, plus, minus in zip(hv, *moved):
        torch.testing.assert_close(h, (plus - minus) / (2 * eps), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["matern32", "matern52"])
def test_matern_profiles_gradcheck_gradgradcheck_and_refuse_a_third_derivative(name):
    kernel = KERNELS[name]()
    r2 = torch.tensor([0.05, 0.4, 1.7, 6.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: Profile.apply(t, kernel), (r2,))
    assert torch.autograd.gradgradcheck(lambda t: Profile.apply(t, kernel), (r2,))
    # at r² = 0 the first and second derivatives are the formulas' finite limits
    zero = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    (d1,) = torch.autograd.grad(Profile.apply(zero, kernel).sum(), zero, create_graph=True)
    expected = {"matern32": -1.5, "matern52": -5.0 / 6.0}[name]
    assert float(d1.detach()) == pytest.approx(expected, rel=1e-12)
    (d2,) = torch.autograd.grad(d1.sum(), zero, create_graph=True)
    assert torch.isfinite(d2).all()
    with pytest.raises(SecondDerivativeError, match="third derivative"):
        torch.autograd.grad(d2.sum(), zero)
