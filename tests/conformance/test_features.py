"""Every registered inducing feature (recipes in `recipes.FEATURES`, each paired with a kernel):
Kuu symmetric and positive semi-definite, Kuf [M, N], the joint covariance of (u, f(X))
positive semi-definite, the Cholesky factor of Kuu, config and state_dict round trips,
gradients of Kuu and Kuf against finite differences, the chunked (chunk-at-a-time) Kuf against
the plain one, `extended` and `transformed` consistent with Kuu and Kuf (or refused, as the
recipe declares), and the limit where the inducing variables determine f(X): SGPR (VFE)
equals the exact GP.

A list feature whose parts go with one kernel each (`features.Separate`) is checked part by
part (`covariances.separate_pairs`)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances as cov
from sparsegp.features import InducingFeature
from sparsegp.kernels.stationary import RadialKernel

from .helpers import assert_plain, assert_psd, gradcheck_through, normal, perturb
from .recipes import FEATURES, built, cases, registered

N = 6


def build(name, case):
    feature, kernel = case.make()
    return built("feature", name, case, feature), kernel


def pairs(feature, kernel):
    """(feature, kernel) pairs with a Kuu and Kuf of their own."""
    return cov.separate_pairs(feature, kernel) or [(feature, kernel)]


def inputs(case, feature, kernel, n=N, seed=1):
    return case.X(n, seed, cov.input_dim(*pairs(feature, kernel)[0]))


@pytest.mark.parametrize("name,case", cases("feature", "covariances"))
def test_kuu_and_the_joint_covariance_are_positive_semidefinite(name, case):
    feature, kernel = build(name, case)
    X = inputs(case, feature, kernel)
    for f, k in pairs(feature, kernel):
        Kuu, Kuf, Kff = cov.Kuu(f, k).detach(), cov.Kuf(f, k, X).detach(), k.K(X).detach()
        M = f.num_inducing
        assert Kuu.shape == (M, M) and Kuf.shape == (M, N)
        assert cov.Kuf(f, k, X[:0]).shape == (M, 0)
        assert_psd(Kuu, f"{name} Kuu")
        joint = torch.cat([torch.cat([Kuu, Kuf], 1), torch.cat([Kuf.mT, Kff], 1)])
        assert_psd((joint + joint.mT) / 2, f"{name} cov[(u, f(X))]")


@pytest.mark.parametrize("name,case", cases("feature", "cholesky"))
def test_the_cholesky_factor_of_kuu(name, case):
    # what the models factorise (block by block where a pair registers structure; one factor
    # per output [P, M, M] for features.Separate): lower triangular, L Lᵀ = Kuu
    feature, kernel = build(name, case)
    L, used = cov.Kuu_cholesky(feature, kernel, 0.0)
    assert used == 0.0, f"the recipe's Kuu needed jitter {used}"
    parts = pairs(feature, kernel)
    factors = list(L) if L.dim() == 3 else [L]
    assert len(factors) == len(parts) if L.dim() == 3 else len(parts) == 1
    for Lp, (f, k) in zip(factors, parts):
        Lp = Lp.detach()
        Kuu = cov.Kuu(f, k).detach()
        torch.testing.assert_close(Lp, Lp.tril(), rtol=0, atol=0)
        torch.testing.assert_close(Lp @ Lp.mT, Kuu, rtol=1e-10, atol=1e-12 * float(Kuu.diagonal().max()))


@pytest.mark.parametrize("name,case", cases("feature", "config"))
def test_config_rebuilds_the_same_feature(name, case):
    feature, kernel = build(name, case)
    perturb(feature)
    cfg = feature.config()
    assert_plain(cfg)
    assert cfg["type"] == name
    back = InducingFeature.registry.build(copy.deepcopy(cfg))
    assert type(back) is type(feature)
    back.load_state_dict(feature.state_dict())
    assert back.config() == cfg and back.num_inducing == feature.num_inducing
    X = inputs(case, feature, kernel)
    for (f, k), (b, _) in zip(pairs(feature, kernel), pairs(back, kernel)):
        torch.testing.assert_close(cov.Kuu(b, k), cov.Kuu(f, k), rtol=0, atol=0)
        torch.testing.assert_close(cov.Kuf(b, k, X), cov.Kuf(f, k, X), rtol=0, atol=0)


@pytest.mark.parametrize("name,case", cases("feature", "state"))
def test_state_dict_carries_every_value(name, case):
    (feature, kernel), (fresh, _) = build(name, case), build(name, case)
    perturb(feature, seed=3)
    fresh.load_state_dict(feature.state_dict())
    X = inputs(case, feature, kernel)
    for (f, k), (b, _) in zip(pairs(feature, kernel), pairs(fresh, kernel)):
        torch.testing.assert_close(cov.Kuf(b, k, X), cov.Kuf(f, k, X), rtol=0, atol=0)
        torch.testing.assert_close(cov.Kuu(b, k), cov.Kuu(f, k), rtol=0, atol=0)


@pytest.mark.parametrize("name,case", cases("feature", "gradients"))
def test_gradients_of_kuu_and_kuf_match_finite_differences(name, case):
    # with respect to every parameter of the feature and of the kernel, and to X
    feature, kernel = build(name, case)
    X = inputs(case, feature, kernel, n=4).requires_grad_()
    for f, k in pairs(feature, kernel):
        assert gradcheck_through([f, k], lambda f=f, k=k: cov.Kuu(f, k))
        assert gradcheck_through([f, k], lambda X, f=f, k=k: cov.Kuf(f, k, X), [X])


@pytest.mark.parametrize("name,case", cases("feature", "chunked"))
def test_chunked_kuf_and_its_gradient_equal_the_plain_ones(name, case):
    # the objectives' chunk-at-a-time Kuf (a hand-derived one where registered): its value per
    # chunk, and its accumulated gradient of ⟨G, Kuf⟩ + ⟨g, diag Kff⟩, reach the parameters as
    # autograd's gradient of the plain Kuf does
    feature, kernel = build(name, case)
    X = inputs(case, feature, kernel, n=8)
    G = normal(feature.num_inducing, 8, seed=4)
    g = normal(8, seed=5)
    for f, k in pairs(feature, kernel):
        M = f.num_inducing
        params = [p for p in (*f.parameters(), *k.parameters()) if p.requires_grad]
        c = cov.cross_covariance(f, k)
        state = c.grad_zeros()
        for rows in (slice(0, 5), slice(5, 8)):
            K = c.value(X[rows])
            torch.testing.assert_close(K, cov.Kuf(f, k, X[rows]).detach(), rtol=1e-12, atol=1e-13)
            torch.testing.assert_close(c.kdiag(X[rows]), k.K_diag(X[rows]).detach(), rtol=1e-12,
                                       atol=1e-13)
            c.grad_chunk(state, X[rows], K.clone(), G[:M, rows].clone(), g[rows].clone())
        grads = c.grad_finish(state)
        streamed = torch.autograd.grad(c.inputs, params, grads, allow_unused=True)
        plain = torch.autograd.grad((G[:M] * cov.Kuf(f, k, X)).sum() + (g * k.K_diag(X)).sum(),
                                    params, allow_unused=True)
        for p, a, b in zip(params, streamed, plain):
            a = torch.zeros_like(p) if a is None else a
            b = torch.zeros_like(p) if b is None else b
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name,case", cases("feature", "extended"))
def test_extended_adds_inducing_points_consistently(name, case):
    # feature.extended(Z) = the feature plus inducing points f(Z): its Kuu holds the old Kuu,
    # Kuf(old feature, Z) as the cross block and K(Z, Z); its new Kuf rows are K(Z, X). This
    # ties every feature's Kuu to its own Kuf.
    feature, kernel = build(name, case)
    X = inputs(case, feature, kernel)
    Z = inputs(case, feature, kernel, n=3, seed=7)
    if not case.extends:
        with pytest.raises(TypeError):
            feature.extended(Z)
        return
    big = feature.extended(Z)
    assert type(big) is type(feature)
    M = feature.num_inducing
    assert big.num_inducing == M + 3
    Kuu, Kuf = cov.Kuu(big, kernel).detach(), cov.Kuf(big, kernel, X).detach()
    tol = {"rtol": 1e-9, "atol": 1e-11}
    torch.testing.assert_close(Kuu[:M, :M], cov.Kuu(feature, kernel).detach(), **tol)
    torch.testing.assert_close(Kuu[:M, M:], cov.Kuf(feature, kernel, Z).detach(), **tol)
    torch.testing.assert_close(Kuu[M:, M:], kernel.K(Z).detach(), **tol)
    torch.testing.assert_close(Kuf[:M], cov.Kuf(feature, kernel, X).detach(), **tol)
    torch.testing.assert_close(Kuf[M:], kernel.K(Z, X).detach(), **tol)


def in_standardised_units(kernel, shift, scale):
    """The kernel k' with k'(x', x'') = k(scale·x' + shift, scale·x'' + shift) [scale: D], for
    radial and periodic kernels and their sums, products and lists; None for any other."""
    if isinstance(kernel, (sg.kernels.Sum, sg.kernels.Product, sg.kernels.Separate)):
        parts = [in_standardised_units(k, shift, scale) for k in kernel.kernels]
        return None if any(p is None for p in parts) else type(kernel)(parts)
    if not isinstance(kernel, (RadialKernel, sg.kernels.Periodic)):
        return None
    args = dict(kernel.config()["args"], ard=True)
    ell = kernel.value("lengthscale").detach().expand(scale.shape)
    if isinstance(kernel, sg.kernels.Periodic):  # sin²(π(x − x')/p): the period scales
        args["period"] = (kernel.value("period").detach().expand(scale.shape) / scale).tolist()
        args["lengthscale"] = ell.tolist()
    else:
        args["lengthscale"] = (ell / scale).tolist()
    return type(kernel)(**args)


@pytest.mark.parametrize("name,case", cases("feature", "transformed"))
def test_transformed_defines_the_same_inducing_variables(name, case):
    # a model with standardize_X works with x' = (x − shift)/scale: the transformed feature
    # with the kernel in those units gives the same Kuu and Kuf
    feature, kernel = build(name, case)
    D = cov.input_dim(*pairs(feature, kernel)[0])
    shift, scale = normal(D, seed=8), 0.5 + torch.arange(1, D + 1, dtype=torch.float64) / D
    if not case.transforms:
        with pytest.raises(TypeError):
            feature.transformed(shift, scale)
        return
    moved = feature.transformed(shift, scale)
    assert type(moved) is type(feature) and moved.num_inducing == feature.num_inducing
    units = in_standardised_units(kernel, shift, scale)
    assert units is not None, f"no rescaled form of {kernel!r}: extend in_standardised_units"
    X = inputs(case, feature, kernel)
    Xs = (X - shift) / scale
    for (f, k), (g, ks) in zip(pairs(feature, kernel), pairs(moved, units)):
        torch.testing.assert_close(cov.Kuu(g, ks), cov.Kuu(f, k), rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(cov.Kuf(g, ks, Xs), cov.Kuf(f, k, X), rtol=1e-10, atol=1e-12)


def _smooth_targets(X, outputs=1):
    y = torch.sin(2.0 * X).sum(1) + 0.1 * normal(X.shape[0], seed=12)
    y = y - y.mean()
    return y.numpy() if outputs == 1 else np.stack([y.numpy(), np.cos(X[:, 0].numpy())], 1)


@pytest.mark.parametrize("name,case", cases("feature", "complete",
                                             lambda case: case.complete is not None))
def test_vfe_with_inducing_variables_that_determine_f_equals_the_exact_gp(name, case):
    # u = f(X) (Z = X for inducing points; every patch of the images for inducing patches;
    # the limit of vanishing windows): the collapsed bound is the log marginal likelihood and
    # the predictions are the exact GP's. No jitter: it would be the only difference.
    X = inputs(case, *build(name, case), n=10, seed=2)
    feature, kernel = case.complete(X)
    assert type(feature) is registered("feature")[name]
    parts = cov.separate_pairs(feature, kernel)
    y = _smooth_targets(X, 1 if parts is None else len(parts))
    Xnew = inputs(case, feature, kernel, n=4, seed=3)
    noise = 0.05
    # in the units of y on both sides (a standardised model's kernel lives in units that
    # depend on all its outputs)
    sparse = sg.SGPR(X.numpy(), y, kernel=kernel, inducing_points=feature, approximation="vfe",
                     noise_variance=noise, jitter=0.0, standardize_y=False)
    mean, var = sparse.predict(Xnew.numpy())
    kernels = [k for _, k in parts] if parts else [kernel]
    targets = [y[:, p] for p in range(len(parts))] if parts else [y]
    exact_lml = 0.0
    for p, (k, yp) in enumerate(zip(kernels, targets)):
        exact = sg.GPR(X.numpy(), yp, kernel=copy.deepcopy(k), noise_variance=noise,
                       standardize_y=False)
        exact_lml += exact.log_marginal_likelihood()
        m, v = exact.predict(Xnew.numpy())
        np.testing.assert_allclose(mean if parts is None else mean[:, p], m, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(var if parts is None else var[:, p], v, rtol=1e-8, atol=1e-10)
    assert sparse.log_marginal_likelihood() == pytest.approx(exact_lml, rel=1e-10, abs=1e-9)


def test_every_feature_without_a_complete_configuration_says_why():
    for name, recipes in FEATURES.items():
        for case in recipes:
            assert case.complete is not None or case.no_complete, \
                f"{name} {case.id}: give `complete` or the reason in `no_complete`"
