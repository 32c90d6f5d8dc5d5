"""Checks shared by the tests of the hand-derived chunked Kuf classes: chunk values and
summed gradients against the generic autograd `CrossCovariance`, and an SGPR objective and
its gradient with the fast class against the same with the generic one forced."""

from __future__ import annotations

import numpy as np
import torch

import sparsegp as sg
from sparsegp import covariances
from sparsegp.covariances import chunked

CHUNKS = (slice(0, 7), slice(7, 20), slice(20, 31))  # three chunks of 31 rows, accumulated


def fast_and_generic_gradients(feature, kernel, X, fast_type, gkdiag=True, seed=0,
                               perturb=None):
    """(fast, generic): the gradients of Σ_chunks ⟨gK, Kuf_b⟩ (+ ⟨g, diag Kff_b⟩) with respect
    to the generic class's inputs (the parameters), the fast class's chained back to them
    from its own inputs (constrained values) by autograd. Also checks every chunk's value
    and kdiag against the generic ones. `perturb(grads)` alters the fast gradients first
    (to show the comparison catches a wrong formula)."""
    fast = covariances.cross_covariance(feature, kernel)
    assert type(fast) is fast_type
    generic = covariances.CrossCovariance(feature, kernel)
    rng = np.random.default_rng(seed)
    N = X.shape[0]
    gK = torch.as_tensor(rng.normal(size=(fast.num_inducing, N)))
    gkd = torch.as_tensor(rng.normal(size=N)) if gkdiag else None
    s_fast, s_gen = fast.grad_zeros(), generic.grad_zeros()
    for sl in CHUNKS:
        Xb = X[sl]
        K, Kg = fast.value(Xb), generic.value(Xb)
        assert K.dtype == Kg.dtype
        torch.testing.assert_close(K, Kg, rtol=1e-12, atol=1e-14 * float(Kg.abs().max()))
        out = torch.empty_like(Kg)
        assert fast.value(Xb, out=out) is out
        torch.testing.assert_close(out, K, rtol=0, atol=0)
        torch.testing.assert_close(fast.kdiag(Xb), generic.kdiag(Xb), rtol=1e-12, atol=1e-14)
        g = None if gkd is None else gkd[sl]
        K_seen = K.clone()
        fast.grad_chunk(s_fast, Xb, K, gK[:, sl].clone(), g)
        assert torch.equal(K, K_seen)  # K may be the caller's buffer: left as it was
        generic.grad_chunk(s_gen, Xb, Kg, gK[:, sl].clone(), g)
    got = fast.grad_finish(s_fast)
    for g_in, p in zip(got, fast.inputs):
        assert g_in.shape == p.shape and g_in.dtype == p.dtype
    if perturb is not None:
        got = perturb(got)
    pairs = [(t, g) for t, g in zip(fast.inputs, got) if t.requires_grad]
    chained = torch.autograd.grad([t for t, _ in pairs], generic.inputs, [g for _, g in pairs],
                                  allow_unused=True)
    ref = generic.grad_finish(s_gen)
    return ([torch.zeros_like(p) if c is None else c for c, p in zip(chained, generic.inputs)],
            ref)


def check_against_generic(feature, kernel, X, fast_type, gkdiag=True, seed=0):
    got, ref = fast_and_generic_gradients(feature, kernel, X, fast_type, gkdiag, seed)
    for g, r in zip(got, ref):
        scale = float(r.abs().max())
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10 * scale)


def sgpr_loss_and_gradient(X, y, kernel, Z, generic, monkeypatch):
    """The SGPR training loss and its gradient with respect to every parameter."""
    with monkeypatch.context() as m:
        if generic:
            m.setattr(chunked, "lookup_chunked", lambda feature, kernel: None)
        model = sg.SGPR(X, y, kernel=kernel, inducing_points=Z, chunk_size=64)
        loss = model.training_loss()
        params = [p for p in model.parameters() if p.requires_grad]
        return loss.detach(), [g.detach() for g in torch.autograd.grad(loss, params)]


def check_sgpr_matches_generic(X, y, make_kernel, Z, monkeypatch):
    loss, grads = sgpr_loss_and_gradient(X, y, make_kernel(), Z, False, monkeypatch)
    loss_g, grads_g = sgpr_loss_and_gradient(X, y, make_kernel(), Z, True, monkeypatch)
    torch.testing.assert_close(loss, loss_g, rtol=1e-11, atol=0)
    for g, r in zip(grads, grads_g):  # rounding of the order of ε times the loss's terms
        torch.testing.assert_close(g, r, rtol=1e-8, atol=1e-11 * float(loss.abs()))


def check_float32(feature, kernel, X, fast_type, rtol=1e-4):
    """In a float32 objective: values and summed gradients in float32, returned in the
    parameters' dtype, near the float64 ones."""
    fast = covariances.cross_covariance(feature, kernel, torch.float32)
    ref = covariances.cross_covariance(feature, kernel)
    assert type(fast) is fast_type
    gK = torch.as_tensor(np.random.default_rng(5).normal(size=(fast.num_inducing, X.shape[0])))
    gkd = torch.ones(X.shape[0], dtype=torch.float64)
    s32, s64 = fast.grad_zeros(), ref.grad_zeros()
    with torch.no_grad():  # as in the objectives' forward and backward passes
        for sl in CHUNKS:
            K = fast.value(X[sl])
            assert K.dtype == torch.float32 and fast.kdiag(X[sl]).dtype == torch.float32
            K64 = ref.value(X[sl])
            torch.testing.assert_close(K, K64.float(), rtol=rtol,
                                       atol=rtol * float(K64.abs().max()))
            fast.grad_chunk(s32, X[sl], K, gK[:, sl].float(), gkd[sl].float())
            ref.grad_chunk(s64, X[sl], K64, gK[:, sl].clone(), gkd[sl])
        got, want = fast.grad_finish(s32), ref.grad_finish(s64)
    for g, r, p in zip(got, want, fast.inputs):
        assert g.dtype == p.dtype
        torch.testing.assert_close(g, r, rtol=10 * rtol, atol=10 * rtol * float(r.abs().max()))


def check_a_wrong_gradient_is_caught(feature, kernel, X, fast_type, which, entry=-1):
    """The comparison of `fast_and_generic_gradients` catches a relative error of 1e-7 in one
    entry (`entry`) of the fast class's `which`-th gradient."""

    def perturb(grads):
        grads = [g.clone() for g in grads]
        grads[which].reshape(-1)[entry] *= 1.0 + 1e-7
        return grads

    got, ref = fast_and_generic_gradients(feature, kernel, X, fast_type, perturb=perturb)
    assert any(not torch.allclose(g, r, rtol=1e-10, atol=1e-10 * float(r.abs().max()))
               for g, r in zip(got, ref))
