"""The one conditional q(f) from q(u) (conditionals.py): against the dense Gaussian
conditioning it stands for, in both parameterisations of q(v), and its folded form for
prediction against the per-point form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsegp.conditionals import (
    WhitenedGaussian,
    conditional,
    fold,
    folded_conditional,
    from_parameters,
    from_precision,
    whiten,
)


def spd(n, seed, jitter=1e-3):
    A = torch.as_tensor(np.random.default_rng(seed).normal(size=(n, n)))
    return A @ A.mT / n + jitter * torch.eye(n, dtype=torch.float64)


def joint(seed, M=5, B=4):
    """A joint covariance of (u, f) and its blocks."""
    K = spd(M + B, seed)
    return K[:M, :M], K[:M, M:], K[M:, M:]


def dense_conditional(Kuu, Kuf, Kff, m_u, S_u):
    """E and cov of f under ∫ p(f | u) N(u; m_u, S_u) du, by dense algebra."""
    P = torch.linalg.solve(Kuu, Kuf)  # Kuu⁻¹Kuf
    return P.mT @ m_u, Kff - Kuf.mT @ P + P.mT @ S_u @ P


@pytest.mark.parametrize("whitened", [True, False])
def test_conditional_equals_dense_gaussian_conditioning(whitened):
    Kuu, Kuf, Kff = joint(0)
    M, C = Kuu.shape[0], 2
    L = torch.linalg.cholesky(Kuu)
    rng = np.random.default_rng(1)
    q_mu = torch.as_tensor(rng.normal(size=(M, C)))
    q_sqrt = torch.tril(torch.as_tensor(rng.normal(size=(C, M, M))))
    q = from_parameters(L, q_mu, q_sqrt, whitened)
    mean, cov = conditional(whiten(L, Kuf), Kff, q, full_cov=True)
    _, var = conditional(whiten(L, Kuf), torch.diagonal(Kff), q)
    for c in range(C):
        m_u = L @ q_mu[:, c] if whitened else q_mu[:, c]
        S = q_sqrt[c] @ q_sqrt[c].mT
        S_u = L @ S @ L.mT if whitened else S
        ref_mean, ref_cov = dense_conditional(Kuu, Kuf, Kff, m_u, S_u)
        torch.testing.assert_close(mean[:, c], ref_mean, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(cov[c], ref_cov, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(var[:, c], torch.diagonal(ref_cov), rtol=1e-10, atol=1e-12)


def test_precision_parameterisation_equals_the_covariance_one():
    Kuu, Kuf, Kff = joint(2)
    L = torch.linalg.cholesky(Kuu)
    B = spd(Kuu.shape[0], 3) + torch.eye(Kuu.shape[0], dtype=torch.float64)
    L_B = torch.linalg.cholesky(B)
    e = torch.as_tensor(np.random.default_rng(4).normal(size=Kuu.shape[0]))
    q = from_precision(L_B, e)  # N(L_B⁻ᵀe, B⁻¹)
    root = torch.linalg.cholesky(torch.linalg.inv(B))
    explicit = WhitenedGaussian(torch.linalg.solve(L_B.mT, e)[:, None], root)
    A = whiten(L, Kuf)
    for full in (False, True):
        for a, b in zip(conditional(A, Kff if full else torch.diagonal(Kff), q, full),
                        conditional(A, Kff if full else torch.diagonal(Kff), explicit, full)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["precision", "covariance above the prior"])
def test_folded_form_for_prediction_equals_the_per_point_form(kind):
    Kuu, Kuf, Kff = joint(5, M=6, B=7)
    L = torch.linalg.cholesky(Kuu)
    rng = np.random.default_rng(6)
    if kind == "precision":  # S = B⁻¹ ⪯ I: every folded sign is +
        q = from_precision(torch.linalg.cholesky(spd(6, 7) + torch.eye(6, dtype=torch.float64)),
                           torch.as_tensor(rng.normal(size=6)))
    else:  # an SVGP q(v) whose S exceeds the prior's I in some directions: signs of both kinds
        q = WhitenedGaussian(torch.as_tensor(rng.normal(size=(6, 2))),
                             2.0 * torch.tril(torch.as_tensor(rng.normal(size=(2, 6, 6)))))
    f = fold(L, q)
    if kind != "precision":
        assert bool((f.sign > 0).any()) and bool((f.sign < 0).any())
    A = whiten(L, Kuf)
    for full in (False, True):
        kff = Kff if full else torch.diagonal(Kff)
        for a, b in zip(folded_conditional(Kuf, kff, f, full), conditional(A, kff, q, full)):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_root_products_keep_no_copy_of_the_root_per_chunk():
    """Over many chunks, autograd must keep the [C, M, M] root once, not a contiguous copy of
    its transpose per chunk (torch folds `root.mT @ A` into one product over such a copy)."""
    C, M, B = 4, 300, 10
    root = torch.randn(C, M, M, dtype=torch.float64).tril().requires_grad_()
    q = WhitenedGaussian(torch.zeros(M, C, dtype=torch.float64), root)
    A = torch.randn(M, B, dtype=torch.float64, requires_grad=True)
    out = q.root_t_times(A)
    saved = [t for t in _saved_tensors(out.grad_fn) if t.numel() >= M * M]
    assert all(t.untyped_storage().data_ptr() == root.untyped_storage().data_ptr() for t in saved)
    expected = root.detach().mT @ A.detach()
    torch.testing.assert_close(out.detach(), expected.expand(C, M, B), rtol=1e-13, atol=1e-13)


def _saved_tensors(fn) -> list:
    """Tensors an autograd node (and the nodes it feeds from) saved for the backward pass."""
    found, todo, seen = [], [fn], set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for name in dir(node):
            if name.startswith("_saved_"):
                value = getattr(node, name)
                if isinstance(value, torch.Tensor):
                    found.append(value)
        todo.extend(n for n, _ in node.next_functions)
    return found
