"""Block (PITC-like) Power EP against independent dense evaluations and its exact limits.

The reference is written from docs/math.md §2 ("Blocks") with dense numpy linear algebra on the
N×N matrices:  Λ = blockdiag(α_b D_b + σ²I) with D_b the diagonal blocks of Kff − Qff,

  F = log N(y; 0, Qff + Λ) − Σ_b (1−α_b)/(2α_b) log|I + α_b D_b/σ²|,

and, for gradients, the same formula in torch on dense matrices under autograd.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.objectives.collapsed import blocks as blocks_module

LOG2PI = np.log(2.0 * np.pi)
ELL, VAR, NOISE = 0.8, 1.3, 0.04


def data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 4.0, (n, 2))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.2 * rng.standard_normal(n)
    Z = rng.uniform(0.0, 4.0, (7, 2))
    return X, y, Z


def se(A, B):
    r2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return VAR * np.exp(-0.5 * r2 / ELL**2)


def model(X, y, Z, labels=None, approximation="pep", alpha=0.5, **kw):
    k = sg.kernels.SquaredExponential()
    k.lengthscale, k.variance = ELL, VAR
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sg.ScaleWarning)
        return sg.SGPR(X, y, kernel=k, inducing_points=Z, approximation=approximation,
                       alpha=alpha, noise_variance=NOISE, blocks=labels, jitter=0.0,
                       standardize_y=False, **kw)  # y as given: the dense references


def dense_block_pep(X, y, Z, labels, alphas):
    """F of docs/math.md §2 (blocks) on dense N×N matrices; alphas: {label: α_b}."""
    Kff, Kuf, Kuu = se(X, X), se(Z, X), se(Z, Z)
    Qff = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    N = len(y)
    Lam = np.zeros((N, N))
    penalty = 0.0
    for b, a in alphas.items():
        idx = np.flatnonzero(labels == b)
        D = (Kff - Qff)[np.ix_(idx, idx)]
        Lam[np.ix_(idx, idx)] = a * D + NOISE * np.eye(len(idx))
        penalty += (1 - a) / (2 * a) * np.linalg.slogdet(np.eye(len(idx)) + a * D / NOISE)[1]
    C = Qff + Lam
    return (-0.5 * N * LOG2PI - 0.5 * np.linalg.slogdet(C)[1]
            - 0.5 * y @ np.linalg.solve(C, y) - penalty)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.2])
def test_block_pep_equals_dense_evaluation(alpha):
    X, y, Z = data()
    labels = np.random.default_rng(1).integers(0, 8, len(y))
    m = model(X, y, Z, labels, alpha=alpha)
    ref = dense_block_pep(X, y, Z, labels, {b: alpha for b in np.unique(labels)})
    assert m.log_marginal_likelihood() == pytest.approx(ref, rel=1e-10, abs=1e-9)


def test_pitc_is_fitc_with_blocks_and_per_block_alpha_equals_dense():
    X, y, Z = data()
    labels = np.repeat(["a", "b", "c", "d"], 15)  # string labels
    pitc = model(X, y, Z, labels, approximation="fitc", alpha=None)
    ref = dense_block_pep(X, y, Z, labels, {b: 1.0 for b in "abcd"})
    assert pitc.log_marginal_likelihood() == pytest.approx(ref, rel=1e-10)
    assert pitc.approximation == "fitc" and pitc.alpha == 1.0
    powers = [0.1, 0.4, 0.7, 1.0]
    m = model(X, y, Z, labels, alpha=powers)
    ref = dense_block_pep(X, y, Z, labels, dict(zip("abcd", powers)))
    assert m.log_marginal_likelihood() == pytest.approx(ref, rel=1e-10)
    assert m.alpha is None and m.blocks == {"labels": list("abcd"), "alpha": powers}


@pytest.mark.parametrize("approximation,alpha", [("fitc", None), ("pep", 0.5), ("pep", 0.05)])
def test_blocks_of_one_point_are_the_pointwise_family(approximation, alpha):
    X, y, Z = data()
    blocks = model(X, y, Z, np.arange(len(y)), approximation, alpha)
    point = model(X, y, Z, None, approximation, alpha)
    assert blocks.log_marginal_likelihood() == pytest.approx(point.log_marginal_likelihood(),
                                                             rel=1e-12)
    gb, gp = _grads(blocks), _grads(point)
    for name in gp:
        np.testing.assert_allclose(gb[name], gp[name], rtol=1e-9, atol=1e-10, err_msg=name)
    Xs = np.linspace(0, 4, 9)[:, None].repeat(2, 1)
    for a, b in zip(blocks.predict(Xs), point.predict(Xs)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_one_block_of_all_data_with_alpha_one_is_the_exact_gp():
    # Qff + Kff − Qff + σ²I = Kff + σ²I for any inducing inputs, here M = 7 < N.
    X, y, Z = data()
    pitc = model(X, y, Z, np.zeros(len(y), dtype=int), "fitc", None)
    K = se(X, X) + NOISE * np.eye(len(y))
    exact = -0.5 * len(y) * LOG2PI - 0.5 * np.linalg.slogdet(K)[1] - 0.5 * y @ np.linalg.solve(K, y)
    assert pitc.log_marginal_likelihood() == pytest.approx(exact, rel=1e-10)


def test_small_alpha_tends_to_vfe_for_any_blocking():
    X, y, Z = data()
    labels = np.random.default_rng(2).integers(0, 5, len(y))
    vfe = model(X, y, Z, None, "vfe", None).log_marginal_likelihood()
    gaps = [model(X, y, Z, labels, alpha=a).log_marginal_likelihood() - vfe
            for a in (1e-3, 1e-4, 1e-5)]
    # F_α − F_VFE = O(α): each tenfold smaller α brings it ten times closer
    assert abs(gaps[2]) < 1e-3 * abs(vfe)
    assert abs(gaps[1]) == pytest.approx(abs(gaps[0]) / 10, rel=0.05)
    assert abs(gaps[2]) == pytest.approx(abs(gaps[1]) / 10, rel=0.05)


def _grads(m):
    m.zero_grad()
    m.training_loss().backward()
    return {n: p.grad.detach().clone().numpy() for n, p in m.named_parameters()}


@pytest.mark.parametrize("keep", [True, False], ids=["factors-kept", "recomputed"])
def test_gradient_equals_dense_autograd_and_does_not_depend_on_chunks(keep, monkeypatch):
    # the backward pass with the forward pass's factors kept, and recomputing them per run
    if not keep:
        monkeypatch.setattr(blocks_module, "KEEP_BYTES", 0)
    X, y, Z = data(n=50)
    labels = np.r_[np.zeros(20, int), np.ones(3, int), 2 * np.ones(17, int), np.arange(3, 13)]
    powers = np.linspace(0.2, 1.0, 13)
    grads = []
    for chunk in (None, 4, 19):  # runs of whole blocks; a block larger than a chunk stays whole
        m = model(X, y, Z, labels, alpha=powers, chunk_size=chunk)
        grads.append(_grads(m))
        value = m.log_marginal_likelihood()
    # the dense objective in torch, differentiated by autograd, at the model's own parameters
    m = model(X, y, Z, labels, alpha=powers)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    Zt = m.feature.Z
    k, noise = m.kernel, m.value("noise_variance")
    Kff, Kuf, Kuu = k.K(Xt), k.K(Zt, Xt), k.K(Zt)
    Qff = Kuf.mT @ torch.linalg.solve(Kuu, Kuf)
    Lam = torch.zeros(len(y), len(y), dtype=torch.float64)
    penalty = 0.0
    for b, a in enumerate(powers):
        idx = torch.as_tensor(np.flatnonzero(labels == b))
        D = (Kff - Qff)[idx][:, idx]
        eye = torch.eye(len(idx), dtype=torch.float64)
        Lam = Lam.index_put((idx[:, None], idx[None, :]), a * D + noise * eye)
        penalty = penalty + (1 - a) / (2 * a) * torch.logdet(eye + a * D / noise)
    F = torch.distributions.MultivariateNormal(torch.zeros(len(y), dtype=torch.float64),
                                               Qff + Lam).log_prob(yt) - penalty
    assert value == pytest.approx(float(F.detach()), rel=1e-10)
    m.zero_grad()
    (-F).backward()
    dense = {n: p.grad.detach().numpy() for n, p in m.named_parameters()}
    for g in grads:
        for name in dense:
            np.testing.assert_allclose(g[name], dense[name], rtol=1e-7,
                                       atol=1e-8 * np.abs(dense[name]).max(), err_msg=name)


def test_order_of_the_data_does_not_matter():
    X, y, Z = data()
    labels = np.random.default_rng(3).integers(0, 6, len(y))
    perm = np.random.default_rng(4).permutation(len(y))
    a = model(X, y, Z, labels).log_marginal_likelihood()
    b = model(X[perm], y[perm], Z, labels[perm]).log_marginal_likelihood()
    assert a == pytest.approx(b, rel=1e-12)


def test_fit_improves_and_save_load_keeps_the_blocks(tmp_path):
    X, y, Z = data(n=120)
    labels = sg.cluster_blocks(X, 10, seed=0)
    m = model(X, y, Z, labels, alpha=0.5)
    start = m.log_marginal_likelihood()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sg.ApproximationWarning)
        m.fit(maxiter=30)
    assert m.log_marginal_likelihood() > start
    path = os.fspath(tmp_path / "m.pt")
    m.save(path, include_data=True)
    back = sg.load(path)
    assert back.blocks == m.blocks
    assert back.log_marginal_likelihood() == pytest.approx(m.log_marginal_likelihood(), rel=1e-12)
    m.save(path)  # without data: predicts from the saved posterior
    np.testing.assert_allclose(sg.load(path).predict(X[:5])[0], m.predict(X[:5])[0], rtol=1e-12)
    assert "PEP" in str(m.diagnostics()) and "10 blocks" in str(m.diagnostics())


def test_cluster_blocks_groups_nearby_points():
    X = np.r_[np.random.default_rng(0).normal(0, 0.1, (30, 2)),
              np.random.default_rng(1).normal(5, 0.1, (30, 2))]
    labels = sg.cluster_blocks(X, 2, seed=0)
    assert sorted(np.bincount(labels)) == [30, 30]
    assert len(set(labels[:30])) == 1 and len(set(labels[30:])) == 1
    np.testing.assert_array_equal(labels, sg.cluster_blocks(X, 2, seed=0))
    with pytest.raises(ValueError, match="num_blocks"):
        sg.cluster_blocks(X, 61)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(approximation="vfe", alpha=None), ValueError, "blocks apply"),
    (dict(approximation="dtc", alpha=None), ValueError, "blocks apply"),
    (dict(labels=np.zeros(5)), ValueError, "one label per data point"),
    (dict(labels=np.full(60, np.nan)), ValueError, "NaN"),
    (dict(alpha=[0.5, 0.5]), ValueError, "one per block"),
    (dict(alpha=1.5), ValueError, r"\(0, 1\]"),
    (dict(alpha=None), ValueError, "alpha is required"),
    (dict(approximation="fitc", alpha=0.5), ValueError, "alpha"),
])
def test_bad_block_arguments_are_named(kwargs, error, match):
    X, y, Z = data()
    args = dict(labels=np.arange(60) % 3, approximation="pep", alpha=0.5)
    args.update(kwargs)
    labels = args.pop("labels")
    with pytest.raises(error, match=match):
        model(X, y, Z, labels, **args)


@pytest.mark.parametrize("keep", [True, False], ids=["factors-kept", "recomputed"])
def test_gradient_with_any_kernel_and_group_noise_equals_dense_autograd(keep, monkeypatch):
    # Matérn 3/2 + Linear (no fast cross-covariance; the Linear part's blocks by the default
    # `K_blocks`), one noise per group, blocks of mixed sizes (padded batches: 9 and 8, 5 and
    # 4, then single points), per-block powers
    if not keep:
        monkeypatch.setattr(blocks_module, "KEEP_BYTES", 0)
    X, y, Z = data(n=40)
    labels = np.r_[np.zeros(9, int), np.ones(8, int), 2 * np.ones(5, int), 3 * np.ones(4, int),
                   np.arange(4, 18)]
    powers = np.linspace(0.3, 1.0, 18)
    groups = (X[:, 0] > 2.0).astype(int)
    k = sg.kernels.Matern32(lengthscale=[0.7, 1.1]) + sg.kernels.Linear(variance=0.3)
    m = sg.SGPR(X, y, kernel=k, inducing_points=Z, approximation="pep", alpha=powers,
                blocks=labels, noise_variance=[0.03, 0.08], noise_groups=groups, jitter=0.0,
                chunk_size=12, standardize_y=False)  # y as given: the dense reference
    got = _grads(m)
    Xt, yt, Zt = torch.as_tensor(X), torch.as_tensor(y), m.feature.Z
    Kff, Kuf, Kuu = m.kernel.K(Xt), m.kernel.K(Zt, Xt), m.kernel.K(Zt)
    Qff = Kuf.mT @ torch.linalg.solve(Kuu, Kuf)
    s2 = m.value("noise_variance")[torch.as_tensor(groups)]
    Lam = torch.zeros(len(y), len(y), dtype=torch.float64)
    penalty = 0.0
    for b, a in enumerate(powers):
        idx = torch.as_tensor(np.flatnonzero(labels == b))
        D = (Kff - Qff)[idx][:, idx]
        S = torch.diag(s2[idx])
        Lam = Lam.index_put((idx[:, None], idx[None, :]), a * D + S)
        penalty = penalty + (1 - a) / (2 * a) * (torch.logdet(a * D + S) - torch.logdet(S))
    F = torch.distributions.MultivariateNormal(torch.zeros(len(y), dtype=torch.float64),
                                               Qff + Lam).log_prob(yt) - penalty
    assert m.log_marginal_likelihood() == pytest.approx(float(F.detach()), rel=1e-10)
    m.zero_grad()
    (-F).backward()
    for name, p in m.named_parameters():
        np.testing.assert_allclose(got[name], p.grad.numpy(), rtol=1e-7,
                                   atol=1e-8 * np.abs(p.grad.numpy()).max(), err_msg=name)


def test_batches_of_similar_blocks_cover_every_block_once():
    from sparsegp.objectives.collapsed.blocks import PAD_FRACTION, PAD_WORK, _batches
    sizes = [3, 1, 200, 190, 2, 1, 180, 5, 400, 60]  # any order
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    seen = []
    for first, count, S in _batches(sizes, M=50):
        top, own = S * S * (S + 50), np.array([s * s * (s + 50) for s in count])
        assert S == max(count)
        assert ((top - own <= own * (PAD_FRACTION**-3 - 1)).all()
                or (top - own).sum() <= PAD_WORK)
        seen += list(zip(first, count))
    assert sorted(seen) == sorted(zip(starts.tolist(), sizes))
    assert len(_batches([1, 2, 3, 5, 8], M=5)) == 1  # small blocks: one batch
