"""VFE's and DTC's sums whitened once (Σ Kuf Kfu, then L⁻¹·L⁻ᵀ) instead of chunk by chunk, and
FITC's and Power EP's gradient without a triangular solve per chunk (Kuf times L⁻ᵀGL⁻¹ and
Kuu⁻¹): taken only where `unwhitened_is_safe` says so, and then equal to the whitened path."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.covariances import cross_covariance
from sparsegp.objectives.chunked import chunked_sum
from sparsegp.objectives.collapsed import sums as st


def problem(n=3000, m=60, d=3, ls=1.0, noise=0.1, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, d))
    y = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2] + np.sqrt(noise) * rng.normal(size=n)
    return X, y, X[rng.choice(n, m, replace=False)]


MEMBERS = {"vfe": ("vfe", None), "dtc": ("dtc", None), "fitc": ("fitc", None),
           "pep": ("pep", 0.5)}


def sgpr(X, y, Z, ls, noise, member="vfe", mean=None):
    approximation, alpha = MEMBERS[member]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sg.JitterWarning)
        return sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=ls), mean=mean,
                       inducing_points=Z, noise_variance=noise, approximation=approximation,
                       alpha=alpha, standardize_y=False, chunk_size=700)


def paths(monkeypatch):
    """Record the `whiten` flag of every WhitenedSums and PowerEPSums built."""
    chosen = []
    for cls in (st.WhitenedSums, st.PowerEPSums):
        def spy(self, *args, __init=cls.__init__, **kw):
            __init(self, *args, **kw)
            chosen.append(self.whiten)
        monkeypatch.setattr(cls, "__init__", spy)
    return chosen


def loss_and_grads(m):
    loss = m.training_loss()
    params = [p for p in m.parameters() if p.requires_grad]
    return float(loss.detach()), torch.autograd.grad(loss, params)


@pytest.mark.parametrize("member", list(MEMBERS))
def test_well_conditioned_unwhitened_path_agrees_with_the_whitened_one(monkeypatch, member):
    X, y, Z = problem()
    chosen = paths(monkeypatch)
    m = sgpr(X, y, Z, 0.7, 0.1, member, mean=sg.means.Constant())  # cond(Kuu) ≈ 650
    monkeypatch.setattr(st, "UNWHITENED_MIN_WORK", 10**30)
    ref_loss, ref_grads = loss_and_grads(m)
    monkeypatch.setattr(st, "UNWHITENED_MIN_WORK", 0)
    loss, grads = loss_and_grads(m)
    assert chosen == [True, False]
    assert loss == pytest.approx(ref_loss, rel=1e-10)
    for g, r in zip(grads, ref_grads):
        assert float((g - r).abs().max()) <= 1e-10 * max(1.0, float(r.abs().max()))


def three_outputs():
    """X [900, 3], three differentiable target columns Y, a kernel, 25 inducing inputs at
    data points (d_n ≈ 0 there) and chol(Kuu) as a leaf that requires grad."""
    X, y, Z = (torch.tensor(a) for a in problem(n=900, m=25))
    Y = torch.stack([y, y.sin(), 2.0 * y], 1).requires_grad_(True)
    kernel = sg.kernels.SquaredExponential(lengthscale=[0.8, 1.0, 1.2])
    feature = sg.features.InducingPoints(Z.clone())
    L = torch.linalg.cholesky(sg.covariances.Kuu(feature, kernel)
                              + 1e-8 * torch.eye(25, dtype=torch.float64))
    return X, Y, kernel, feature, L.detach().requires_grad_(True)


def test_stream_sums_and_gradients_agree_for_several_outputs_and_differentiable_targets():
    X, Y, kernel, feature, L = three_outputs()
    weights = [torch.randn(25, 25, dtype=torch.float64), torch.randn(25, 3, dtype=torch.float64),
               torch.tensor(0.3, dtype=torch.float64), torch.tensor(-0.7, dtype=torch.float64)]
    results = []
    for whiten in (True, False):
        kuf = cross_covariance(feature, kernel)
        sums = chunked_sum(st.WhitenedSums(kuf, L, torch.float64, 3, whiten), X, Y, 200)
        value = sum((w * s).sum() for w, s in zip(weights, sums))
        inputs = [Y, L, *kuf.inputs]
        results.append((sums, torch.autograd.grad(value, inputs)))
    (sums_w, grads_w), (sums_u, grads_u) = results
    for a, b in zip(sums_u, sums_w):
        assert float((a - b).detach().abs().max()) <= 1e-11 * max(1.0, float(b.detach().abs().max()))
    for a, b in zip(grads_u, grads_w):
        assert float((a - b).abs().max()) <= 1e-10 * max(1.0, float(b.abs().max()))


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_power_ep_gradients_agree_for_several_outputs_and_differentiable_targets(alpha):
    """The same sums (the forward pass is shared) and, to rounding, the same gradients with
    respect to the targets, chol(Kuu), the noise and the kernel's inputs."""
    X, Y, kernel, feature, L = three_outputs()
    noise = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    g = torch.Generator().manual_seed(2)
    weights = [torch.randn(25, 25, dtype=torch.float64, generator=g),
               torch.randn(25, 3, dtype=torch.float64, generator=g),
               *torch.randn(4, dtype=torch.float64, generator=g)]
    results = []
    for whiten in (True, False):
        kuf = cross_covariance(feature, kernel)
        stream = st.PowerEPSums(kuf, L, noise, alpha, torch.float64, 3, whiten)
        sums = chunked_sum(stream, X, Y, 200)
        value = sum((w * s).sum() for w, s in zip(weights, sums))
        inputs = [Y, L, noise, *kuf.inputs]
        results.append((sums, torch.autograd.grad(value, inputs)))
    (sums_w, grads_w), (sums_u, grads_u) = results
    for a, b in zip(sums_u, sums_w):
        assert torch.equal(a, b)
    for a, b in zip(grads_u, grads_w):
        assert float((a - b).abs().max()) <= 1e-10 * max(1.0, float(b.abs().max()))


def test_smooth_low_noise_data_take_the_whitened_path_and_fit(monkeypatch):
    """Long lengthscales and σ² = 1e-6 on 10⁴ points: whitened once, I + Q/σ² is far from
    positive definite; the objective takes the per-chunk whitening and stays finite."""
    X, y, Z = problem(n=10_000, m=100, ls=None, noise=1e-6, seed=3)
    monkeypatch.setattr(st, "UNWHITENED_MIN_WORK", 0)
    chosen = paths(monkeypatch)
    m = sgpr(X, y, Z, [4.0, 6.0, 8.0], 1.01e-6)
    kuf = cross_covariance(m.feature, m.kernel)
    L, _ = sg.covariances.Kuu_cholesky(m.feature, m.kernel, m.jitter)
    noise = m.value("noise_variance").detach()
    assert not st.unwhitened_is_safe(L, kuf, m.X, noise, 10_000)
    with torch.no_grad():  # what the other path would give: I + Q/σ² indefinite
        Q = chunked_sum(st.WhitenedSums(kuf, L, torch.float64, 0, False), m.X, m.y, 700)[0]
        assert float(torch.linalg.eigvalsh(torch.eye(100, dtype=torch.float64) + Q / noise)[0]) < 0
    loss, grads = loss_and_grads(m)
    assert chosen == [False, True]  # the stream above, then the objective's
    assert np.isfinite(loss) and all(bool(torch.isfinite(g).all()) for g in grads)
    fitc = sgpr(X, y, Z, [4.0, 6.0, 8.0], 1.01e-6, "fitc")
    loss_and_grads(fitc)
    assert chosen[-1] is True  # FITC's gradient keeps its solves per chunk here too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fit is stopped early on purpose
        m.fit(maxiter=5)
    assert np.isfinite(float(m.training_loss().detach()))


def test_the_condition_estimate_matches_the_eigenvalues():
    rng = np.random.default_rng(1)
    Z = torch.tensor(rng.uniform(-1.0, 1.0, (80, 2)))
    K = sg.kernels.SquaredExponential(lengthscale=0.7).K(Z).detach()
    K += 1e-6 * torch.eye(80, dtype=torch.float64)
    ev = torch.linalg.eigvalsh(K)
    est = st.condition_of_factored(torch.linalg.cholesky(K))
    assert est == pytest.approx(float(ev[-1] / ev[0]), rel=0.05)


def test_power_ep_unwhitened_gradient_in_float32_compute_with_float64_targets():
    """float32 Kuf chunks, float64 targets and accumulators: both backward passes run and agree
    to float32's precision."""
    X, y, Z = (torch.tensor(a) for a in problem(n=600, m=20))
    kernel = sg.kernels.SquaredExponential(lengthscale=[0.8, 1.0, 1.2])
    feature = sg.features.InducingPoints(Z.clone())
    L = torch.linalg.cholesky(sg.covariances.Kuu(feature, kernel)
                              + 1e-3 * torch.eye(20, dtype=torch.float64)).detach()
    noise = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    grads = []
    for whiten in (True, False):
        kuf = cross_covariance(feature, kernel, torch.float32)
        Lw = L.clone().requires_grad_(True)
        sums = chunked_sum(st.PowerEPSums(kuf, Lw, noise, 0.5, torch.float64, 0, whiten),
                           X, y, 128)
        value = sum(s.sum() for s in sums if s.requires_grad)
        grads.append(torch.autograd.grad(value, [Lw, noise, *kuf.inputs], allow_unused=True))
    for a, b in zip(*grads):
        if b is not None:
            assert float((a - b).abs().max()) <= 1e-3 * max(1.0, float(b.abs().max()))
