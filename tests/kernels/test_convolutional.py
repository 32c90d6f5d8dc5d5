"""Convolutional kernels and inducing patches (docs/math.md §9), against direct loops over patches.

The references cut patches by indexing x.reshape(H, W, C)[i:i+h, j:j+w, c] in Python loops
and sum base-kernel values pair by pair: nothing shared with the unfold/GEMM implementation
but the base kernel's K on two single patches.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

import sparsegp as sg
from sparsegp import covariances as cov

H, W, C, h, w = 5, 4, 2, 2, 3


def loop_patches(x: np.ndarray, H: int, W: int, C: int, h: int, w: int) -> list[np.ndarray]:
    img = x.reshape(H, W, C)
    return [img[i:i + h, j:j + w, c].reshape(-1)
            for i in range(H - h + 1) for j in range(W - w + 1) for c in range(C)]


def kg(base, a: np.ndarray, b: np.ndarray) -> float:
    t = lambda v: torch.as_tensor(v, dtype=torch.float64)[None, :]  # noqa: E731
    with torch.no_grad():
        return float(base.K(t(a), t(b)))


def loop_kff(kernel, x, x2, weights, same_channel_only: bool = False) -> float:
    pa = loop_patches(x, H, W, C, h, w)
    pb = loop_patches(x2, H, W, C, h, w)
    return sum(weights[q] * weights[r] * kg(kernel.base_kernel, a, b)
               for (q, a), (r, b) in itertools.product(enumerate(pa), enumerate(pb))
               if not same_channel_only or q % C == r % C)  # q = p·C + c


def loop_kuf(kernel, z, x, weights) -> float:
    return sum(weights[q] * kg(kernel.base_kernel, z, a)
               for q, a in enumerate(loop_patches(x, H, W, C, h, w)))


@pytest.fixture
def weighted_kernel():
    base = sg.kernels.SquaredExponential(lengthscale=np.linspace(0.5, 1.5, h * w), variance=1.3)
    rng = np.random.default_rng(1)
    P = (H - h + 1) * (W - w + 1) * C
    return sg.kernels.Convolutional(base, image_shape=(H, W), patch_shape=(h, w), weighted=True,
                                    channels=C, weights=rng.normal(size=P))


def test_patches_follow_the_documented_order(weighted_kernel):
    x = np.random.default_rng(0).random((3, H * W * C))
    got = weighted_kernel.patches(torch.as_tensor(x)).numpy()
    for n in range(3):
        np.testing.assert_array_equal(got[n], np.stack(loop_patches(x[n], H, W, C, h, w)))


@pytest.mark.parametrize("base", [sg.kernels.SquaredExponential(lengthscale=0.8),
                                  sg.kernels.Matern32(lengthscale=1.1),
                                  sg.kernels.Linear(variance=0.7)])
def test_kernel_matrix_and_diagonal_equal_the_double_loop(base, weighted_kernel):
    k = sg.kernels.Convolutional(base, image_shape=(H, W), patch_shape=(h, w), weighted=True,
                                 channels=C)
    k.set_value("weights", weighted_kernel.weights.detach())
    wts = k.weights.detach().numpy()
    X = np.random.default_rng(2).random((4, H * W * C))
    X2 = np.random.default_rng(3).random((3, H * W * C))
    ref = np.array([[loop_kff(k, a, b, wts) for b in X2] for a in X])
    with torch.no_grad():
        np.testing.assert_allclose(k.K(torch.as_tensor(X), torch.as_tensor(X2)).numpy(), ref,
                                   rtol=1e-12)
        diag = np.array([loop_kff(k, a, a, wts) for a in X])
        np.testing.assert_allclose(k.K_diag(torch.as_tensor(X)).numpy(), diag, rtol=1e-12)
        np.testing.assert_allclose(k.K(torch.as_tensor(X)).diagonal().numpy(), diag, rtol=1e-12)


def test_kuf_and_kuu_equal_the_loop(weighted_kernel):
    rng = np.random.default_rng(4)
    Z, X = rng.random((6, h * w)), rng.random((5, H * W * C))
    feat = sg.features.InducingPatches(Z)
    wts = weighted_kernel.weights.detach().numpy()
    with torch.no_grad():
        got = cov.Kuf(feat, weighted_kernel, torch.as_tensor(X)).numpy()
        kuu = cov.Kuu(feat, weighted_kernel).numpy()
    ref = np.array([[loop_kuf(weighted_kernel, z, x, wts) for x in X] for z in Z])
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    np.testing.assert_allclose(kuu, [[kg(weighted_kernel.base_kernel, a, b) for b in Z] for a in Z],
                               rtol=1e-12)
    assert cov.width(feat, weighted_kernel) == 6 * weighted_kernel.num_patches


def test_translation_invariance_inside_a_zero_border():
    base = sg.kernels.SquaredExponential(lengthscale=0.9)
    k = sg.kernels.Convolutional(base, image_shape=(10, 10), patch_shape=(3, 3))
    content = np.random.default_rng(5).random((3, 3))
    a, b = np.zeros((10, 10)), np.zeros((10, 10))
    a[2:5, 3:6] = content  # every patch touching the content lies inside the image ...
    b[5:8, 2:5] = content  # ... in both positions, so the multisets of patches are equal
    other = np.random.default_rng(6).random((2, 100))
    X = torch.as_tensor(np.vstack([a.ravel(), b.ravel()]))
    feat = sg.features.InducingPatches(np.random.default_rng(7).random((4, 9)))
    with torch.no_grad():
        kd = k.K_diag(X)
        Kx = k.K(X, torch.as_tensor(other))
        kuf = cov.Kuf(feat, k, X)
    assert torch.allclose(kd[0], kd[1], rtol=1e-13)
    assert torch.allclose(Kx[0], Kx[1], rtol=1e-13)
    assert torch.allclose(kuf[:, 0], kuf[:, 1], rtol=1e-13)
    # and the weighted kernel with generic weights is not invariant (the test can fail)
    kw = sg.kernels.Convolutional(base, image_shape=(10, 10), patch_shape=(3, 3), weighted=True,
                                  weights=np.random.default_rng(8).random(64))
    with torch.no_grad():
        kdw = kw.K_diag(X)
    assert not torch.allclose(kdw[0], kdw[1], rtol=1e-3)


def test_weighted_with_unit_weights_equals_invariant():
    base = sg.kernels.SquaredExponential(lengthscale=0.7)
    inv = sg.kernels.Convolutional(base, image_shape=(H, W), patch_shape=(h, w), channels=C)
    wtd = sg.kernels.Convolutional(base, image_shape=(H, W), patch_shape=(h, w), channels=C,
                                   weighted=True)
    X = torch.as_tensor(np.random.default_rng(9).random((4, H * W * C)))
    feat = sg.features.InducingPatches(np.random.default_rng(10).random((3, h * w)))
    with torch.no_grad():
        assert torch.allclose(inv.K(X), wtd.K(X), rtol=1e-14)
        assert torch.allclose(cov.Kuf(feat, inv, X), cov.Kuf(feat, wtd, X), rtol=1e-14)


def test_gradients_by_finite_differences(weighted_kernel):
    """Kuf, K_diag and Kuu as functions of the inducing patches, the weights and the raw
    lengthscale, through the library's own code (parameters swapped in for the check)."""
    rng = np.random.default_rng(11)
    X = torch.as_tensor(rng.random((3, H * W * C)))
    feat, k = sg.features.InducingPatches(rng.random((4, h * w))), weighted_kernel

    def outputs(Z, wts, raw_ell):
        saved = (feat.Z, k.weights, k.base_kernel.raw_lengthscale)
        feat._parameters["Z"], k._parameters["weights"] = Z, wts
        k.base_kernel._parameters["raw_lengthscale"] = raw_ell
        try:
            return torch.cat([cov.Kuf(feat, k, X).reshape(-1), k.K_diag(X),
                              k.K(X).reshape(-1), cov.Kuu(feat, k).reshape(-1)])
        finally:
            feat._parameters["Z"], k._parameters["weights"] = saved[:2]
            k.base_kernel._parameters["raw_lengthscale"] = saved[2]

    inputs = tuple(t.detach().clone().requires_grad_()
                   for t in (feat.Z, k.weights, k.base_kernel.raw_lengthscale))
    assert gradcheck(outputs, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("weighted,channels", [(False, 1), (True, 1), (True, 3)])
def test_models_save_and_load_every_kernel(tmp_path, weighted, channels):
    rng = np.random.default_rng(12)
    X = rng.random((30, 6 * 5 * channels))
    y = (X.mean(1) > 0.5).astype(float)
    k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(6, 5),
                                 patch_shape=(3, 2), weighted=weighted, channels=channels)
    m = sg.SVGP(X, y, kernel=k, likelihood=sg.likelihoods.Bernoulli(), inducing_points=7)
    assert isinstance(m.feature, sg.features.InducingPatches) and m.num_inducing == 7
    with torch.no_grad():
        if weighted:
            m.kernel.weights.normal_()
        m.q_mu.normal_()
    m.save(tmp_path / "m.pt")
    back = sg.load(tmp_path / "m.pt")
    assert back.kernel.config() == m.kernel.config()
    np.testing.assert_array_equal(back.predict_proba(X), m.predict_proba(X))


def test_bad_shapes_get_clear_errors():
    se = sg.kernels.SquaredExponential()
    with pytest.raises(ValueError, match="larger than image_shape"):
        sg.kernels.Convolutional(se, image_shape=(4, 4), patch_shape=(5, 2))
    with pytest.raises(ValueError, match="channels"):
        sg.kernels.Convolutional(se, image_shape=(4, 4), patch_shape=(2, 2), channels=0)
    three = sg.kernels.Convolutional(se, image_shape=(4, 4), patch_shape=(2, 2),
                                     channels=np.int64(3))  # a numpy integer was refused
    assert three.channels == 3 and type(three.channels) is int
    with pytest.raises(TypeError, match="image_shape"):
        sg.kernels.Convolutional(se, image_shape=4, patch_shape=(2, 2))
    with pytest.raises(ValueError, match="weights must be 9"):
        sg.kernels.Convolutional(se, image_shape=(4, 4), patch_shape=(2, 2), weighted=True,
                                 weights=np.ones(3))
    k = sg.kernels.Convolutional(se, image_shape=(4, 4), patch_shape=(2, 2))
    with pytest.raises(ValueError, match="4×4 images with 1 channel"):
        k.K(torch.zeros(2, 15, dtype=torch.float64))
    X = np.random.default_rng(0).random((20, 16))
    with pytest.raises(ValueError, match="requires 16"):
        sg.SGPR(X[:, :15], X[:, 0], kernel=k, inducing_points=3)
    with pytest.raises(ValueError, match="patches are 2×2 = 4"):
        sg.SGPR(X, X[:, 0], kernel=k, inducing_points=sg.features.InducingPatches(np.ones((3, 5))))
    with pytest.raises(TypeError, match="standardize_X"):
        sg.SGPR(X, X[:, 0], kernel=k, inducing_points=3, standardize_X=True)
    with pytest.raises(TypeError, match="no Kuu registered for the feature InducingPatches with "
                                        "the kernel SquaredExponential"):
        sg.SGPR(X, X[:, 0], kernel=se, inducing_points=sg.features.InducingPatches(np.ones((3, 16))))


def test_vfe_with_every_patch_as_inducing_equals_the_exact_gp():
    """Binary 4×4 images with 2×2 patches have at most 16 distinct patches. With all of them as
    inducing patches, f(x) = Σ_q g(x^[q]) is a linear function of u, so Q_ff = K_ff and the
    VFE bound, FITC and the posterior equal the exact GP's (the exact limit of §9)."""
    rng = np.random.default_rng(13)
    X = (rng.random((40, 16)) > 0.5).astype(float)
    y = X[:, :8].sum(1) - X[:, 8:].sum(1) + 0.1 * rng.normal(size=40)
    allp = np.array(list(itertools.product([0.0, 1.0], repeat=4)))
    k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(lengthscale=1.3, variance=0.2),
                                 image_shape=(4, 4), patch_shape=(2, 2))
    exact = sg.GPR(X, y, kernel=k, noise_variance=0.3)
    Xs = (rng.random((7, 16)) > 0.5).astype(float)
    me, ve = exact.predict(Xs)
    for approx in ("vfe", "fitc"):
        m = sg.SGPR(X, y, kernel=k, noise_variance=0.3, approximation=approx,
                    inducing_points=sg.features.InducingPatches(allp), jitter=1e-12)
        assert m.log_marginal_likelihood() == pytest.approx(exact.log_marginal_likelihood(), abs=1e-7)
        mean, var = m.predict(Xs)
        np.testing.assert_allclose(mean, me, atol=1e-7)
        np.testing.assert_allclose(var, ve, atol=1e-7)
    # with half of the patches the bound is strictly lower (the test can fail)
    m = sg.SGPR(X, y, kernel=k, noise_variance=0.3, inducing_points=sg.features.InducingPatches(allp[::2]))
    assert m.log_marginal_likelihood() < exact.log_marginal_likelihood() - 1e-3


def test_multichannel_kernel_and_covariances_equal_the_loop(weighted_kernel):
    """§5.8, eq. 5.61–5.62: independent g_c per channel, u_cm = g_c(z_m)."""
    k = sg.kernels.Convolutional(weighted_kernel.base_kernel, image_shape=(H, W), patch_shape=(h, w),
                                 weighted=True, channels=C, multichannel=True,
                                 weights=weighted_kernel.weights.detach())
    wts = k.weights.detach().numpy()
    rng = np.random.default_rng(14)
    X, Z = rng.random((4, H * W * C)), rng.random((3, h * w))
    feat = sg.features.MultiChannelPatches(Z, channels=C)
    with torch.no_grad():
        Kx = k.K(torch.as_tensor(X)).numpy()
        kd = k.K_diag(torch.as_tensor(X)).numpy()
        kuf = cov.Kuf(feat, k, torch.as_tensor(X)).numpy()
        kuu = cov.Kuu(feat, k).numpy()
    ref = np.array([[loop_kff(k, a, b, wts, same_channel_only=True) for b in X] for a in X])
    np.testing.assert_allclose(Kx, ref, rtol=1e-12)
    np.testing.assert_allclose(kd, ref.diagonal(), rtol=1e-12)
    patches = [loop_patches(x, H, W, C, h, w) for x in X]
    ref_kuf = np.array([[sum(wts[q] * kg(k.base_kernel, z, a) for q, a in enumerate(patches[n])
                             if q % C == c) for n in range(len(X))] for c in range(C) for z in Z])
    np.testing.assert_allclose(kuf, ref_kuf, rtol=1e-12)
    block = np.array([[kg(k.base_kernel, a, b) for b in Z] for a in Z])
    np.testing.assert_allclose(kuu, np.kron(np.eye(C), block), rtol=1e-12)
    assert feat.num_inducing == 3 * C and cov.width(feat, k) == 3 * k.num_patches
    # it differs from the baseline kernel, which also pairs patches across channels
    base = sg.kernels.Convolutional(k.base_kernel, image_shape=(H, W), patch_shape=(h, w),
                                    weighted=True, channels=C, weights=wts)
    with torch.no_grad():
        assert not np.allclose(base.K_diag(torch.as_tensor(X)).numpy(), kd, rtol=1e-3)
    with pytest.raises(ValueError, match="MultiChannelPatches"):
        cov.Kuu(feat, base)
    with pytest.raises(ValueError, match="MultiChannelPatches"):
        cov.Kuu(sg.features.InducingPatches(Z), k)


def test_multichannel_vfe_with_every_patch_equals_the_exact_gp(tmp_path):
    rng = np.random.default_rng(15)
    X = (rng.random((40, 4 * 4 * 2)) > 0.5).astype(float)
    y = X[:, ::2].sum(1) - X[:, 1::2].sum(1) + 0.1 * rng.normal(size=40)
    allp = np.array(list(itertools.product([0.0, 1.0], repeat=4)))
    k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(lengthscale=1.3, variance=0.2),
                                 image_shape=(4, 4), patch_shape=(2, 2), channels=2,
                                 multichannel=True)
    exact = sg.GPR(X, y, kernel=k, noise_variance=0.3)
    m = sg.SGPR(X, y, kernel=k, noise_variance=0.3, jitter=1e-12,
                inducing_points=sg.features.MultiChannelPatches(allp, channels=2))
    assert m.num_inducing == 32
    assert m.log_marginal_likelihood() == pytest.approx(exact.log_marginal_likelihood(), abs=1e-7)
    m.save(tmp_path / "m.pt")
    back = sg.load(tmp_path / "m.pt")
    assert back.kernel.multichannel and back.feature.channels == 2
    np.testing.assert_array_equal(back.predict(X[:3])[1], m.predict(X[:3])[1])
    default = sg.SGPR(X, y, kernel=k, noise_variance=0.3, inducing_points=5)
    assert isinstance(default.feature, sg.features.MultiChannelPatches) and default.num_inducing == 10


@pytest.mark.parametrize("weighted,ard,multichannel", [(False, False, False), (True, True, False),
                                                       (True, False, True)])
def test_hand_derived_gradients_of_kuf_and_kdiag_equal_autograd(weighted, ard, multichannel,
                                                                monkeypatch):
    # the squared-exponential base differentiates Kuf and diag Kff by hand when the images
    # need no gradient; images that require one take the generic autograd path: the same
    # numbers. Small memory budgets make both go in several blocks of images.
    from sparsegp.covariances import patches
    from sparsegp.kernels import convolutional
    monkeypatch.setattr(patches, "CHUNK_MEMORY_BYTES", 20_000)
    monkeypatch.setattr(convolutional, "CHUNK_MEMORY_BYTES", 60_000)
    torch.manual_seed(0)
    C = 2 if multichannel else 1
    ell = (torch.rand(9) + 0.5).tolist() if ard else 0.8
    k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(lengthscale=ell, variance=1.3),
                                 image_shape=(6, 7), patch_shape=(3, 3), weighted=weighted,
                                 channels=C, multichannel=multichannel)
    if weighted:
        with torch.no_grad():
            k.weights.copy_(torch.randn(k.num_patches, dtype=torch.float64))
    Z = torch.rand(5, 9, dtype=torch.float64)
    feat = (sg.features.MultiChannelPatches(Z, channels=C) if multichannel
            else sg.features.InducingPatches(Z))
    X = torch.rand(11, 42 * C, dtype=torch.float64)
    gK = torch.randn(feat.num_inducing, 11, dtype=torch.float64)
    gd = torch.randn(11, dtype=torch.float64)
    params = [p for p in (*feat.parameters(), *k.parameters()) if p.requires_grad]

    def value_and_grads(images):
        kuf, kdiag = cov.Kuf(feat, k, images), k.K_diag(images)
        total = (kuf * gK).sum() + (kdiag * gd).sum()
        return kuf.detach(), kdiag.detach(), torch.autograd.grad(total, params)

    fast = value_and_grads(X)
    generic = value_and_grads(X.clone().requires_grad_(True))
    torch.testing.assert_close(fast[0], generic[0], rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(fast[1], generic[1], rtol=1e-14, atol=1e-15)
    for a, b in zip(fast[2], generic[2]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12 * float(b.abs().max()))
