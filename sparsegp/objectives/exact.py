"""Exact GP regression (Rasmussen & Williams 2006, §2.2, eq. 2.30)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from ..autograd import Context
from ..kernels.base import Kernel
from ..kernels.stationary import RadialKernel, radial_gram_gradients, scaled_squared_distance
from ..linalg import (
    LOG_2PI,
    add_to_diagonal,
    jittered_cholesky,
    log_det_from_cholesky,
    solve_lower,
    solve_lower_t,
)
from ..runtime.chunking import auto_chunk_size, chunk_slices


class ExactFactors(NamedTuple):
    """L Lᵀ = K + σ²I and a = L⁻¹y."""

    L: Tensor  # [N, N]
    a: Tensor  # [N]
    jitter: float


def exact_factors(K: Tensor, y: Tensor, noise_variance: Tensor, jitter: float = 0.0) -> ExactFactors:
    """Factorise K + σ²I (or K + diag σ²_n for a noise per point [N]). Shapes: K [N, N], y [N]."""
    L, used = jittered_cholesky(add_to_diagonal(K, noise_variance), jitter, name="K + σ²I")
    return ExactFactors(L, solve_lower(L, y), used)


def exact_log_marginal_likelihood(
    K: Tensor, y: Tensor, noise_variance: Tensor, jitter: float = 0.0
) -> Tensor:
    """log N(y | 0, K + σ²I) = −½ yᵀ(K+σ²I)⁻¹y − ½ log|K+σ²I| − (N/2) log 2π.

    Shapes: K [N, N], y [N], noise_variance [] or [N] -> []. The gradient is hand-derived
    (`_ExactEvidence`): with C = K + σ²I and α = C⁻¹y, ∂F/∂C = ½(ααᵀ − C⁻¹), formed from the
    Cholesky factor by one `cholesky_inverse` — several times faster than differentiating
    through the factorisation (N = 5000: 20 s → a few s), and with fewer N×N temporaries.
    A jitter added on a failed factorisation is treated as a constant.
    """
    if torch.is_grad_enabled() and any(t.requires_grad for t in (K, y, noise_variance)):
        return _ExactEvidence.apply(K, y, noise_variance, jitter)[0]
    L, a, _ = exact_factors(K, y, noise_variance, jitter)
    return _value(L, a)


def _value(L: Tensor, a: Tensor) -> Tensor:
    return -0.5 * (a @ a) - 0.5 * log_det_from_cholesky(L) - 0.5 * a.shape[0] * LOG_2PI


class _EvidenceContext(Context, Protocol):
    noise_shape: torch.Size


class _ExactEvidence(torch.autograd.Function):
    """The evidence from K, y, σ² with ∂F/∂C by hand; under `create_graph` (a second
    derivative to follow, `torch.func.grad`) the gradient is taken by autograd through the
    factorisation instead (`_differentiable_gradients`), so that it is itself
    differentiable. K is kept for that until the backward pass (no copy; the forward pass
    holds it and two more N×N matrices at its peak anyway). The factor L, α = C⁻¹y and the
    jitter added are extra outputs, not differentiable, for the backward pass."""

    @staticmethod
    def forward(K: Tensor, y: Tensor, noise: Tensor, jitter: float
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        C = add_to_diagonal(K, noise)
        L, used = jittered_cholesky(C, jitter, name="K + σ²I")
        added = used * torch.diagonal(C).mean()
        del C
        a = solve_lower(L, y)
        return _value(L, a), L, solve_lower_t(L, a), added

    @staticmethod
    def setup_context(ctx: _EvidenceContext, inputs: tuple[Any, ...],
                      output: tuple[Tensor, ...]) -> None:
        K, y, noise, _ = inputs
        _, L, alpha, added = output
        ctx.mark_non_differentiable(L, alpha, added)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(L, alpha, added, K, y, noise)
        ctx.noise_shape = noise.shape

    @staticmethod
    def backward(ctx: _EvidenceContext, g: Tensor | None, *_: Tensor | None
                 ) -> tuple[Tensor | None, ...]:
        L, alpha, added, K, y, noise = ctx.saved_tensors
        need = ctx.needs_input_grad[:3]
        if g is None:
            return None, None, None, None
        if torch.is_grad_enabled():  # a graph of the gradient is wanted: autograd
            return (*_differentiable_gradients(
                lambda K, y, noise: (add_to_diagonal(K, noise), y), (K, y, noise), need,
                added, g), None)
        G, gnoise = _covariance_gradient(L, alpha, g, ctx.noise_shape)
        gK = G if need[0] else None
        gy = -g * alpha if need[1] else None
        return gK, gy, gnoise if need[2] else None, None


def _differentiable_gradients(build: Callable[..., tuple[Tensor, Tensor]],
                              inputs: tuple[Tensor, ...], need: Sequence[bool], added: Tensor,
                              g: Tensor) -> tuple[Tensor | None, ...]:
    """g·∂F/∂inputs (None where not `need`ed) by autograd through the Cholesky factor of C,
    with a graph: `build(*inputs)` -> (C = K + σ²I, y) differentiably; `added` is the
    jitter the forward pass added to C's diagonal, a constant (as in the hand-written
    gradient)."""
    wrt = [t for t, n in zip(inputs, need) if n]
    if not wrt:
        return tuple(None for _ in inputs)
    with torch.enable_grad():
        C, y = build(*inputs)
        L = torch.linalg.cholesky(add_to_diagonal(C, added))
        found = iter(torch.autograd.grad(_value(L, solve_lower(L, y)), wrt, g,
                                         create_graph=True, allow_unused=True))
    out = []
    for t, n in zip(inputs, need):
        d = next(found) if n else None
        out.append(torch.zeros_like(t) if n and d is None else d)
    return tuple(out)


def _covariance_gradient(L: Tensor, alpha: Tensor, g: Tensor, noise_shape: torch.Size
                         ) -> tuple[Tensor, Tensor]:
    """g·∂F/∂C = (g/2)(ααᵀ − C⁻¹) [N, N] from the factor L of C = K + σ²I and α = C⁻¹y (by one
    `cholesky_inverse`, then in place), and the noise's gradient: its trace for one σ², its
    diagonal for a σ²_n per point."""
    G = torch.cholesky_inverse(L)
    # one pass: G ← −(g/2) G + (g/2) ααᵀ (a 0-dim tensor is a Scalar to torch; the stubs say
    # numbers only)
    G.addr_(alpha, alpha, beta=-0.5 * g, alpha=0.5 * g)  # type: ignore[arg-type]
    diag = torch.diagonal(G)
    return G, diag.sum() if len(noise_shape) == 0 else diag.clone()


def exact_objective(kernel: Kernel, X: Tensor, y: Tensor, noise_variance: Tensor,
                    jitter: float = 0.0) -> Tensor:
    """log N(y | 0, K(X, X) + σ²I) with the least memory the kernel allows: for a radial kernel
    that gives its profile's derivative (the squared exponential and the Matérn kernels), two
    N×N matrices at most in the value and the gradient (`_RadialEvidence`); otherwise K is
    formed under autograd (`exact_log_marginal_likelihood`).
    Shapes: X [N, D], y [N], noise_variance [] or [N] -> []."""
    if (isinstance(kernel, RadialKernel) and not X.requires_grad and torch.is_grad_enabled()
            and kernel.profile_derivative(X.new_zeros(1)) is not None):
        return _RadialEvidence.apply(y, noise_variance, kernel.value("lengthscale"),
                                     kernel.value("variance"), X, kernel, jitter)[0]
    return exact_log_marginal_likelihood(kernel.K(X), y, noise_variance, jitter)


def _row_blocks(X: Tensor) -> list[slice]:
    """Blocks of rows whose [rows, N] temporaries fit the chunk budget."""
    return list(chunk_slices(X.shape[0], auto_chunk_size(X.shape[0], X.element_size(),
                                                         device=X.device)))


def _block_distances(X: Tensor, ell: Tensor, sl: slice) -> Tensor:
    """r² between the rows `sl` and all rows [rows, N], exactly 0 between a row and itself."""
    r2 = scaled_squared_distance(X[sl], X, ell)
    rows = torch.arange(r2.shape[0], device=X.device)
    r2[rows, rows + sl.start] = 0.0
    return r2


class _RadialEvidenceContext(_EvidenceContext, Protocol):
    kernel: RadialKernel


class _RadialEvidence(torch.autograd.Function):
    """The evidence of a radial kernel k = σ² ρ(r²), r² = Σ_d (x_d − x'_d)²/ℓ_d², by hand, with
    every N×N quantity but C = K + σ²I, its factor and G formed a block of rows at a time.

    Forward: C, written block by block, and its Cholesky factor (C is then freed). Backward,
    with G = ∂F/∂C = ½(ααᵀ − C⁻¹) from the factor (both kept), ∂F/∂σ² and ∂F/∂ℓ from each
    block of rows of G (`kernels.stationary.radial_gram_gradients`): matrix-vector products
    per block, never a per-dimension N×N matrix. Under `create_graph` (a second derivative
    to follow, `torch.func.grad`) the gradient is taken by autograd through K(ℓ, σ²) and the
    factorisation instead (`_differentiable_gradients`, N×N temporaries per parameter).
    """

    @staticmethod
    def forward(y: Tensor, noise: Tensor, ell: Tensor, variance: Tensor, X: Tensor,
                kernel: RadialKernel, jitter: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        L, added = _radial_factor(noise, ell, variance, X, kernel, jitter)
        a = solve_lower(L, y)
        return _value(L, a), L, solve_lower_t(L, a), added

    @staticmethod
    def setup_context(ctx: _RadialEvidenceContext, inputs: tuple[Any, ...],
                      output: tuple[Tensor, ...]) -> None:
        y, noise, ell, variance, X, kernel, _ = inputs
        _, L, alpha, added = output
        ctx.mark_non_differentiable(L, alpha, added)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(L, alpha, added, y, noise, ell, variance, X)
        ctx.kernel, ctx.noise_shape = kernel, noise.shape

    @staticmethod
    def backward(ctx: _RadialEvidenceContext, g: Tensor | None, *_: Tensor | None
                 ) -> tuple[Tensor | None, ...]:
        L, alpha, added, y, noise, ell, variance, X = ctx.saved_tensors
        kernel = ctx.kernel
        if g is None:
            return (None,) * 7
        if torch.is_grad_enabled():  # a graph of the gradient is wanted: autograd
            def build(y: Tensor, noise: Tensor, ell: Tensor, variance: Tensor
                      ) -> tuple[Tensor, Tensor]:
                K = variance * kernel.profile(_block_distances(X, ell, slice(0, X.shape[0])))
                return add_to_diagonal(K, noise), y

            return (*_differentiable_gradients(build, (y, noise, ell, variance),
                                               ctx.needs_input_grad[:4], added, g),
                    None, None, None)
        G, gnoise = _covariance_gradient(L, alpha, g, ctx.noise_shape)
        Xc = X - X.mean(0)  # distances are translation invariant; centring limits cancellation
        gvariance = X.new_zeros(())
        gell = X.new_zeros(X.shape[1])
        for sl in _row_blocks(X):
            parts = radial_gram_gradients(kernel, _block_distances(X, ell, sl), G[sl], Xc[sl],
                                          Xc, ell, variance)
            gell += parts[0]
            gvariance += parts[1]
        return (-g * alpha, gnoise, gell.sum() if ell.dim() == 0 else gell, gvariance,
                None, None, None)


def _radial_factor(noise: Tensor, ell: Tensor, variance: Tensor, X: Tensor,
                   kernel: RadialKernel, jitter: float) -> tuple[Tensor, Tensor]:
    """The Cholesky factor of C = σ² ρ(r²) + σ²_n I, C written a block of rows at a time
    (then freed), and the jitter added to C's diagonal (0-dim)."""
    N = X.shape[0]
    C = X.new_empty(N, N)
    for sl in _row_blocks(X):
        C[sl] = kernel.profile(_block_distances(X, ell, sl))
    C.mul_(variance)
    C.diagonal().add_(noise)
    L, used = jittered_cholesky(C, jitter, name="K + σ²I")
    return L, used * torch.diagonal(C).mean()
