"""The hand-derived chunked Kuf of inducing points under the rational quadratic kernel:
registered for the pair, its chunk values equal to Kuf, its gradients (summed over chunks)
equal to autograd's of an independent formula, and a model trained through it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances
from sparsegp.covariances.rational_quadratic import RationalQuadraticCrossCovariance


def rq(Z, X, ell, var, alpha):
    """σ² (1 + ‖(z − x)/ℓ‖²/(2α))^(−α), pair by pair by broadcasting."""
    r2 = (((Z[:, None, :] - X[None, :, :]) / ell) ** 2).sum(-1)
    return var * (1.0 + r2 / (2.0 * alpha)) ** (-alpha)


@pytest.mark.parametrize("ell", [0.7, [0.5, 1.0, 2.0]])
@pytest.mark.parametrize("alpha", [0.3, 4.0])
def test_chunk_values_and_gradients_match_autograd(ell, alpha):
    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.normal(size=(50, 3)))
    feature = sg.InducingPoints(X[:6] + 0.1)
    feature.Z.data[0] = X[7]  # an inducing point on a data point: u = 0 exactly
    kernel = sg.kernels.RationalQuadratic(lengthscale=ell, variance=1.7, alpha=alpha)
    fast = covariances.cross_covariance(feature, kernel)
    assert isinstance(fast, RationalQuadraticCrossCovariance)
    gK = torch.as_tensor(rng.normal(size=(6, 50)))
    gkd = torch.as_tensor(rng.normal(size=50))
    state = fast.grad_zeros()
    for sl in (slice(0, 20), slice(20, 50)):  # two chunks, accumulated
        Xb = X[sl]
        K = fast.value(Xb)
        torch.testing.assert_close(K, covariances.Kuf(feature, kernel, Xb).detach(),
                                   rtol=1e-12, atol=1e-14)
        fast.grad_chunk(state, Xb, K, gK[:, sl].clone(), gkd[sl])
    got = fast.grad_finish(state)
    Z, ell_t, var_t, alpha_t = fast.inputs
    ref = torch.autograd.grad((rq(Z, X, ell_t, var_t, alpha_t) * gK).sum() + (var_t * gkd).sum(),
                              fast.inputs)
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-11)


def test_a_model_fits_through_it():
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, (200, 2))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.normal(size=200)
    model = sg.SGPR(X, y, kernel=sg.kernels.RationalQuadratic(alpha=2.0), inducing_points=15)
    assert isinstance(covariances.cross_covariance(model.feature, model.kernel),
                      RationalQuadraticCrossCovariance)
    assert torch.autograd.gradcheck(lambda *p: model.training_loss(), tuple(model.parameters()))


def test_the_centred_chunked_kuf_keeps_no_graph_to_the_kernel_parameters():
    """`value(X, out=...)` outside torch.no_grad() (a buffer write needs no graph)."""
    import sparsegp as sg
    from sparsegp.covariances import cross_covariance

    Z = torch.linspace(0.0, 1.0, 4, dtype=torch.float64)[:, None]
    X = torch.linspace(0.0, 1.0, 6, dtype=torch.float64)[:, None]
    for kernel in (sg.kernels.SquaredExponential(lengthscale=0.3, variance=1.5),
                   sg.kernels.RationalQuadratic(lengthscale=0.3, variance=1.5, alpha=2.0)):
        cc = cross_covariance(sg.features.InducingPoints(Z), kernel)
        out = torch.empty(4, 6, dtype=torch.float64)
        cc.value(X, out=out)
        assert not out.requires_grad
        torch.testing.assert_close(out, kernel.K(Z, X).detach(), rtol=1e-12, atol=0)
