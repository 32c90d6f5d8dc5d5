"""The chunked objectives: gradients against autograd on a materialised Kuf, memory, float32."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances
from sparsegp.benchmarking.naive import naive_collapsed, se
from sparsegp.covariances.inducing_points import SquaredExponentialCrossCovariance

from ..conftest import make_problem

MEMBERS = [("vfe", None), ("fitc", None), ("dtc", None), ("pep", 0.5), ("pep", 0.05)]


def model(approx, alpha, kernel=None, **kw):
    X, y = make_problem(3, N=90, D=3)
    kernel = kernel or sg.kernels.SquaredExponential(lengthscale=[0.9, 1.4, 2.0], variance=1.3)
    Z = X[::9] + 0.05
    return sg.SGPR(X, y, kernel=kernel, inducing_points=Z, approximation=approx, alpha=alpha,
                   noise_variance=0.15, chunk_size=13, standardize_y=False, **kw)  # raw y


@pytest.mark.parametrize("approx,alpha", MEMBERS)
def test_chunked_value_and_gradient_equal_autograd_on_the_materialised_objective(approx, alpha):
    m = model(approx, alpha)
    params = list(m.parameters())
    loss = m.training_loss()
    grads = torch.autograd.grad(loss, params)
    F = naive_collapsed(m.feature.Z, m.kernel.value("lengthscale"), m.kernel.value("variance"),
                        m.value("noise_variance"), m.X, m.y, approx, alpha, jitter=m.jitter)
    ref = torch.autograd.grad(-F, params)
    assert loss.item() == pytest.approx(-F.item(), rel=1e-11)
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("approx,alpha", MEMBERS)
def test_generic_kernels_are_summed_through_autograd_recomputation(approx, alpha):
    # No hand-derived gradient for this kernel: the generic chunked Kuf recomputes chunks.
    kernel = sg.kernels.Matern32(lengthscale=[0.9, 1.4, 2.0]) + sg.kernels.Linear(variance=0.1)
    m = model(approx, alpha, kernel=kernel)
    assert type(covariances.cross_covariance(m.feature, m.kernel)) is \
        covariances.CrossCovariance
    assert torch.autograd.gradcheck(lambda *p: m.training_loss(), tuple(m.parameters()))


def test_fast_squared_exponential_chunk_gradient_matches_autograd():
    X, _ = make_problem(4, N=40, D=3)
    feature = sg.InducingPoints(torch.as_tensor(X[:6] + 0.1))
    for ell in (0.7, [0.5, 1.0, 2.0]):
        kernel = sg.kernels.SquaredExponential(lengthscale=ell, variance=1.7)
        fast = covariances.cross_covariance(feature, kernel)
        assert isinstance(fast, SquaredExponentialCrossCovariance)
        Xb = torch.as_tensor(X)
        K = fast.value(Xb)
        torch.testing.assert_close(K, kernel.K(feature.Z, Xb).detach(), rtol=1e-12, atol=1e-14)
        gK = torch.as_tensor(np.random.default_rng(0).normal(size=K.shape))
        gkd = torch.as_tensor(np.random.default_rng(1).normal(size=40))
        state = fast.grad_zeros()
        fast.grad_chunk(state, Xb, K, gK.clone(), gkd)
        got = fast.grad_finish(state)
        Z, ell_t, var_t = fast.inputs
        ref_K = se(Z, Xb, ell_t, var_t)  # an independent formula of the same tensors
        ref = torch.autograd.grad((ref_K * gK).sum() + (var_t * gkd).sum(), fast.inputs)
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, rtol=1e-11, atol=1e-12)


def test_chunks_never_exceed_the_chunk_size_forward_or_backward(monkeypatch):
    widths = []
    for cls in (covariances.CrossCovariance, SquaredExponentialCrossCovariance):
        for name, position in (("value", 0), ("grad_chunk", 1)):
            real = getattr(cls, name)

            def spy(self, *args, _real=real, _pos=position, **kw):
                widths.append(args[_pos].shape[0])  # the chunk Xb
                return _real(self, *args, **kw)
            monkeypatch.setattr(cls, name, spy)
    for approx, alpha in MEMBERS:
        for kernel in (None, sg.kernels.Matern52(lengthscale=1.0)):
            m = model(approx, alpha, kernel=kernel)
            torch.autograd.grad(m.training_loss(), list(m.parameters()))
            m.upper_bound()
    assert widths and max(widths) == 13 and m.num_data == 90


PEAK = textwrap.dedent("""
    import resource, torch, sparsegp as sg
    N, M = 200_000, 200
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, 8, dtype=torch.float64, generator=g)
    y = torch.randn(N, dtype=torch.float64, generator=g)
    kernel = sg.kernels.SquaredExponential(lengthscale=[2.0] * 8, variance=1.0)
    m = sg.SGPR(X, y, kernel=kernel, inducing_points=X[:M].clone(), approximation="{approx}")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(2):
        torch.autograd.grad(m.training_loss(), list(m.parameters()))
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
""")


@pytest.mark.parametrize("approx", ["vfe", "fitc"])
def test_value_and_gradient_memory_is_far_below_one_n_by_m_matrix(approx):
    # An N×M float64 matrix here is 320 MB; autograd on a materialised Kuf keeps several.
    out = subprocess.run([sys.executable, "-c", PEAK.format(approx=approx)], capture_output=True,
                         text=True, check=True)
    growth = int(out.stdout.strip().splitlines()[-1])
    assert growth < 64 * 2**20, f"peak memory grew by {growth / 2**20:.0f} MB"


def test_float32_compute_is_close_to_float64():
    for approx, alpha in MEMBERS:
        m64, m32 = model(approx, alpha), model(approx, alpha, compute_dtype=torch.float32)
        l64, l32 = m64.training_loss(), m32.training_loss()
        assert l32.item() == pytest.approx(l64.item(), rel=1e-5)
        g64 = torch.autograd.grad(l64, list(m64.parameters()))
        g32 = torch.autograd.grad(l32, list(m32.parameters()))
        for a, b in zip(g32, g64):
            torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3 * float(b.abs().max()))
        assert m32.feature.Z.dtype == torch.float64  # parameters stay float64
    with pytest.raises(TypeError, match="compute_dtype"):
        model("vfe", None, compute_dtype=torch.int32)


def test_predictions_in_chunks_equal_one_block():
    m = model("fitc", None)
    post = m.posterior()
    Xs = torch.as_tensor(np.random.default_rng(5).normal(size=(333, 3)))
    mean1, var1 = post.predict_f(Xs, chunk_size=333)
    for size in (1, 10, 100):
        mean, var = post.predict_f(Xs, chunk_size=size)
        torch.testing.assert_close(mean, mean1, rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(var, var1, rtol=1e-12, atol=1e-13)
    _, cov = post.predict_f(Xs[:20], full_cov=True)
    torch.testing.assert_close(torch.diagonal(cov), var1[:20], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("whiten", [True, False])
def test_chunked_sums_let_go_of_their_chunk_buffers_when_their_passes_end(whiten):
    from sparsegp.objectives.chunked import chunked_sum
    from sparsegp.objectives.collapsed.sums import PowerEPSums, WhitenedSums

    m = model("fitc", None)
    for power_ep in (False, True):
        kuf = covariances.cross_covariance(m.feature, m.kernel)
        L = torch.linalg.cholesky(covariances.Kuu(m.feature, m.kernel)
                                  + 1e-6 * torch.eye(m.num_inducing, dtype=torch.float64))
        stream = (PowerEPSums(kuf, L, m.value("noise_variance"), 0.5, torch.float64, 0, whiten)
                  if power_ep else WhitenedSums(kuf, L, torch.float64, 0, whiten))
        with torch.no_grad():
            chunked_sum(stream, m.X, m.y, 50)
        assert stream._buffers is None  # no backward pass follows
        sums = chunked_sum(stream, m.X, m.y, 50)
        assert stream._buffers is not None  # held for the backward pass
        torch.autograd.grad(sum(s.sum() for s in sums if s.requires_grad), kuf.inputs,
                            allow_unused=True)
        assert stream._buffers is None
