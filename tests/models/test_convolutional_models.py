"""Convolutional kernels in models: separate inducing sets for sums of kernels (van der Wilk
2018, §5.7.2; `features.Stacked`), mean-field q(u), multi-class SVGP on images."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import sparsegp as sg

ALL_PATCHES = np.array(list(itertools.product([0.0, 1.0], repeat=4)))  # every binary 2×2 patch


def images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = (rng.random((n, 16)) > 0.5).astype(float)
    return X, X[:, :8].sum(1) - X[:, 8:].sum(1) + 0.1 * rng.normal(size=n)


def conv(variance: float = 0.2) -> sg.kernels.Convolutional:
    return sg.kernels.Convolutional(sg.kernels.SquaredExponential(lengthscale=1.3, variance=variance),
                                    image_shape=(4, 4), patch_shape=(2, 2))


def test_separate_sets_with_every_patch_and_every_image_equal_the_exact_gp():
    """f = f_conv + f_SE: all 16 patches determine f_conv at any binary image and Z = X
    determines f_SE at the data, so the VFE bound and the posterior are exact."""
    X, y = images(40, 0)
    k = conv() + sg.kernels.SquaredExponential(lengthscale=2.0, variance=0.5)
    exact = sg.GPR(X, y, kernel=k, noise_variance=0.3)
    feat = sg.features.Stacked([sg.features.InducingPatches(ALL_PATCHES), sg.features.InducingPoints(X)])
    m = sg.SGPR(X, y, kernel=k, noise_variance=0.3, inducing_points=feat, jitter=1e-12)
    assert m.log_marginal_likelihood() == pytest.approx(exact.log_marginal_likelihood(), abs=1e-7)
    np.testing.assert_allclose(m.predict(X[:5])[0], exact.predict(X[:5])[0], atol=1e-7)
    # without the image set the bound is strictly lower (the SE part is not captured)
    half = sg.features.Stacked([sg.features.InducingPatches(ALL_PATCHES),
                                sg.features.InducingPoints(X[:5])])
    m2 = sg.SGPR(X, y, kernel=k, noise_variance=0.3, inducing_points=half)
    assert m2.log_marginal_likelihood() < exact.log_marginal_likelihood() - 1e-2


@pytest.mark.parametrize("mean_field", [False, True])
def test_conv_plus_vanishing_se_equals_conv(mean_field):
    X, y = images(30, 1)
    labels = (y > 0).astype(float)
    rng = np.random.default_rng(2)
    Zp, Zi = rng.random((5, 4)), X[:4]
    lik = sg.likelihoods.Bernoulli()
    alone = sg.SVGP(X, labels, kernel=conv(), likelihood=lik,
                    inducing_points=sg.features.InducingPatches(Zp))
    se_var = 1e-5  # the SE part vanishes as its variance → 0 (floor 1e-6)
    k = conv() + sg.kernels.SquaredExponential(lengthscale=1.0, variance=se_var)
    both = sg.SVGP(X, labels, kernel=k, likelihood=sg.likelihoods.Bernoulli(), mean_field=mean_field,
                   inducing_points=sg.features.Stacked([sg.features.InducingPatches(Zp),
                                                        sg.features.InducingPoints(Zi)]))
    with torch.no_grad():
        alone.q_mu.copy_(torch.as_tensor(rng.normal(size=(5, 1))))
        alone.q_sqrt.copy_(torch.as_tensor(np.tril(rng.normal(size=(1, 5, 5)) * 0.3 + np.eye(5))))
        both.q_mu.zero_()
        both.q_mu[:5] = alone.q_mu
        both.q_sqrt.copy_(torch.eye(9, dtype=torch.float64))
        both.q_sqrt[:, :5, :5] = alone.q_sqrt
    # q(v_SE) = N(0, I) is the prior: f_SE keeps its prior marginals N(0, se_var) exactly
    mean_b, var_b = both.predict_f(X)
    mean_a, var_a = alone.predict_f(X)
    np.testing.assert_allclose(mean_b, mean_a, atol=1e-12)
    np.testing.assert_allclose(var_b, var_a + se_var, atol=1e-12)
    gap = abs(both.log_marginal_likelihood() - alone.log_marginal_likelihood())
    assert gap < 30 * se_var
    # coupling the blocks changes the joint bound, and not the mean-field one
    before = both.log_marginal_likelihood()
    with torch.no_grad():
        both.q_sqrt[:, 7, 2] = 0.5
    after = both.log_marginal_likelihood()
    assert (after == before) if mean_field else (abs(after - before) > 1e-6)


def test_no_factorisation_larger_than_one_inducing_set(monkeypatch):
    X, y = images(30, 3)
    k = conv() + sg.kernels.SquaredExponential(lengthscale=2.0, variance=0.5)
    m = sg.SVGP(X, y, kernel=k, inducing_points=6)
    assert m.feature.blocks == [6, 6]
    sizes = []
    real = torch.linalg.cholesky_ex

    def spy(A, *args, **kwargs):
        sizes.append(A.shape[-1])
        return real(A, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "cholesky_ex", spy)
    m.training_loss().backward()
    m.predict_f(X, full_cov=False)
    assert sizes and max(sizes) == 6


def test_stacked_models_save_and_load(tmp_path):
    X, y = images(30, 4)
    k = conv() + sg.kernels.SquaredExponential(lengthscale=2.0, variance=0.5)
    m = sg.SVGP(X, y, kernel=k, inducing_points=5, mean_field=True)
    with torch.no_grad():
        m.q_mu.normal_()
    m.save(tmp_path / "m.pt")
    back = sg.load(tmp_path / "m.pt")
    assert back.mean_field and back.feature.blocks == [5, 5]
    np.testing.assert_array_equal(back.predict_f(X)[1], m.predict_f(X)[1])


def test_errors_name_the_problem():
    X, y = images(20, 5)
    with pytest.raises(ValueError, match="mean_field=True factorises q"):
        sg.SVGP(X, y, kernel=conv(), inducing_points=3, mean_field=True)
    k = conv() + sg.kernels.SquaredExponential()
    with pytest.raises(ValueError, match="one feature per part"):
        sg.SVGP(X, y, kernel=k,
                inducing_points=sg.features.Stacked([sg.features.InducingPatches(ALL_PATCHES)]))


@pytest.mark.parametrize("link", ["robustmax", "softmax"])
def test_multiclass_svgp_on_images_learns(link):
    """Three classes by which image quarter is brightest; independent latent GPs share the
    convolutional kernel and the inducing patches."""
    rng = np.random.default_rng(6)
    n = 90
    labels = rng.integers(0, 3, n)
    X = rng.random((n, 6, 6)) * 0.3
    for i, c in enumerate(labels):
        X[i, 3 * (c // 2):3 * (c // 2) + 3, 3 * (c % 2):3 * (c % 2) + 3] += 0.7
    X = X.reshape(n, 36)
    k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(6, 6),
                                 patch_shape=(3, 3), weighted=True)
    m = sg.SVGP(X, labels, kernel=k, inducing_points=8,
                likelihood=sg.likelihoods.MultiClass(3, link=link, num_samples=64))
    assert m.num_latent == 3 and m.q_mu.shape == (8, 3)
    start = m.log_marginal_likelihood()
    m.fit(batch_size=30, epochs=60, lr=0.05, progress=False)
    assert m.log_marginal_likelihood() > start + 10
    p = m.predict_proba(X)
    assert p.shape == (n, 3)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-6)
    assert (p.argmax(1) == labels).mean() > 0.6


CONV_PEAK = """
import resource, torch, sparsegp as sg
g = torch.Generator().manual_seed(0)
X = (torch.rand(200, 784, dtype=torch.float64, generator=g) > 0.8).to(torch.float64)
y = (X[:, :392].sum(1) > X[:, 392:].sum(1)).to(torch.float64)
k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(28, 28),
                             patch_shape=(5, 5), weighted=True)
m = sg.SVGP(X, y, kernel=k, likelihood=sg.likelihoods.Bernoulli(),
            inducing_points=sg.features.InducingPatches(torch.rand(100, 25, generator=g)))
Xb, yb = m.internal_batch(X[:100], y[:100])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(2):
    torch.autograd.grad(m(Xb, yb), [p for p in m.parameters() if p.requires_grad])
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def test_a_minibatch_step_keeps_one_block_of_patch_kernel_values_alive():
    """100 images of 28×28 with 5×5 patches: Kuf holds M·Q = 57,600 base-kernel values per
    image and the diagonal Q² = 331,776; kept for the backward pass they would take > 1 GB
    (measured 1.3 GB before the blocks were checkpointed); one block at a time 40-300 MB
    (the peak resident size varies with the allocator's reuse of freed blocks)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", CONV_PEAK], capture_output=True, text=True, check=True)
    growth = int(out.stdout.strip().splitlines()[-1])
    assert growth < 512 * 2**20, f"peak memory grew by {growth / 2**20:.0f} MB"


def test_images_with_blank_borders_get_no_advice_the_kernel_refuses():
    """Constant border pixels would trigger the per-column scale check, whose advice
    (standardize_X=True) a convolutional kernel refuses: no ScaleWarning for such kernels."""
    import warnings

    X, y = images(30, 7)
    X = np.pad(X.reshape(30, 4, 4), ((0, 0), (1, 1), (1, 1))).reshape(30, 36) * 1e-3  # blank border
    k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(6, 6), patch_shape=(2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ScaleWarning)
        sg.SGPR(X, y, kernel=k, inducing_points=4)
    with pytest.warns(sg.ScaleWarning, match="standardize_X"):  # a plain kernel still warns
        sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(), inducing_points=4)
