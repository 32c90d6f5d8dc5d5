"""Conditioning a fitted posterior on k new observations at fixed hyperparameters, without
refactorising what the old data gave (the algebra behind `models.core.conditioning`).

Exact GP: with L Lᵀ = K + σ²I on the N old points and a = L⁻¹r (r = y − m(X)), the factor of
the N + k points is the old one extended by one block row,

    L' = [[L, 0], [C, L_c]],   C = (L⁻¹K_on)ᵀ [k, N],   L_c L_cᵀ = K_nn + σ²I − C Cᵀ [k, k],
    a' = [a; L_c⁻¹(r_new − C a)],

O(N²k) (one triangular solve with k right-hand sides) instead of O((N + k)³). The factor is
kept in blocks (`BlockFactor`): the old L is shared, never copied, and conditioning again
extends the added rows.

Collapsed family (VFE, DTC, FITC, Power EP): the optimal q(v) depends on the data only through
A = Σ β_n a_n a_nᵀ and c = Σ β_n r_n a_n (a_n = L⁻¹k_u(x_n), β_n = 1/σ² for VFE and DTC,
1/(α d_n + σ²) for Power EP), sums over the points: k new points add their k terms,
O(k·M²), and B = I + A is factorised again (O(M³), independent of N).

Targets may carry F columns (F fantasies of the k new targets at the same inputs): r_new
[k, F] with the old a [N] (or c [M]) shared, or already [N, F] ([M, F]).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ... import covariances as cov
from ...conditionals import WhitenedGaussian, from_precision
from ...features.base import InducingFeature
from ...kernels.base import Kernel
from ...linalg import add_to_diagonal, jittered_cholesky, solve_lower, solve_lower_t
from ..collapsed.members import Family


class BlockFactor(NamedTuple):
    """A lower Cholesky factor kept in blocks, [[L0, 0], [B, T]]: the N0 × N0 factor L0 of
    the points a posterior was built on (shared, never copied) and the K rows that
    conditioning added, B [K, N0] and T [K, K] (lower-triangular). Memory O(N0·K + K²) on top
    of L0; `dense` assembles the whole matrix (for saving)."""

    L0: Tensor  # [N0, N0]
    B: Tensor  # [K, N0]
    T: Tensor  # [K, K]

    @classmethod
    def of(cls, L: Tensor) -> BlockFactor:
        """A dense factor as blocks (no rows added yet)."""
        return cls(L, L.new_zeros(0, L.shape[0]), L.new_zeros(0, 0))

    def solve(self, R: Tensor) -> Tensor:
        """L⁻¹R. Shapes: R [N0 + K, C] or [N0 + K] -> the same."""
        n = self.L0.shape[0]
        top = solve_lower(self.L0, R[:n])
        if self.T.shape[0] == 0:
            return top
        return torch.cat([top, solve_lower(self.T, R[n:] - self.B @ top)], 0)

    def solve_t(self, R: Tensor) -> Tensor:
        """L⁻ᵀR. Shapes: R [N0 + K, C] or [N0 + K] -> the same."""
        n = self.L0.shape[0]
        if self.T.shape[0] == 0:
            return solve_lower_t(self.L0, R)
        bottom = solve_lower_t(self.T, R[n:])
        return torch.cat([solve_lower_t(self.L0, R[:n] - self.B.mT @ bottom), bottom], 0)

    def dense(self) -> Tensor:
        """The whole factor [N0 + K, N0 + K] (O((N0 + K)²) memory)."""
        n, K = self.L0.shape[0], self.T.shape[0]
        out = self.L0.new_zeros(n + K, n + K)
        out[:n, :n] = self.L0
        out[n:, :n] = self.B
        out[n:, n:] = self.T
        return out


def extend_factor(f: BlockFactor, K_on: Tensor, K_nn: Tensor
                  ) -> tuple[BlockFactor, Tensor, Tensor]:
    """The factor of [[L Lᵀ, K_on], [K_onᵀ, K_nn]] from L's (`f`): L' = [[L, 0], [C, L_c]],
    C = (L⁻¹K_on)ᵀ and L_c = chol(K_nn − C Cᵀ), O(N²k); returns (L' as blocks, C, L_c).
    Shapes: K_on [N, k], K_nn [k, k], C [k, N], L_c [k, k] (N the rows of `f`).
    Raises `CholeskyError` (after jitter escalation with a `JitterWarning`) where the new
    block is not positive definite given the old one."""
    n, K, k = f.L0.shape[0], f.T.shape[0], K_nn.shape[0]
    C = f.solve(K_on).mT
    schur = K_nn - C @ C.mT
    L_c, _ = jittered_cholesky(0.5 * (schur + schur.mT), 0.0,
                               name="the new points' block given the old points")
    T = torch.cat([torch.cat([f.T, f.T.new_zeros(K, k)], 1), torch.cat([C[:, n:], L_c], 1)], 0)
    return BlockFactor(f.L0, torch.cat([f.B, C[:, :n]], 0), T), C, L_c


def extend_whitened(a: Tensor, C: Tensor, L_c: Tensor, r_new: Tensor) -> Tensor:
    """a' = [a; L_c⁻¹(r_new − C a)]: the whitened targets L'⁻¹r' of `extend_factor`'s
    factor. Shapes: a [N] or [N, F], r_new [k] or [k, F] -> [N + k] or [N + k, F]."""
    if r_new.dim() == 2 and a.dim() == 1:
        a = a[:, None].expand(-1, r_new.shape[1])
    elif a.dim() == 2 and r_new.dim() == 1:
        r_new = r_new[:, None].expand(-1, a.shape[1])
    return torch.cat([a, solve_lower(L_c, r_new - C @ a)], 0)


def condition_exact(kernel: Kernel, X: Tensor, f: BlockFactor, a: Tensor, X_new: Tensor,
                    r_new: Tensor, noise: Tensor, added: float | Tensor = 0.0
                    ) -> tuple[BlockFactor, Tensor]:
    """The exact GP of (X, with factor `f` and whitened targets a) conditioned on the
    residual targets r_new at X_new: the factor and whitened targets of all N + k points
    (module docstring). `noise` is σ² (or σ²_n of the new points [k]); `added` the absolute
    jitter the old factor carried on its diagonal, given to the new points too.
    Shapes: X [N, D], a [N] or [N, F], X_new [k, D], r_new [k] or [k, F]."""
    dtype = f.L0.dtype
    K_on = kernel.K(X, X_new).to(dtype)
    K_nn = add_to_diagonal(kernel.K(X_new).to(dtype), noise + added)
    ext, C, L_c = extend_factor(f, K_on, K_nn)
    return ext, extend_whitened(a, C, L_c, r_new)


def new_point_terms(kernel: Kernel, feature: InducingFeature, L: Tensor, X_new: Tensor,
                    noise: Tensor, fam: Family) -> tuple[Tensor, Tensor]:
    """The new points' whitened projections a = L⁻¹Kuf [M, k] and weights β [k] of the
    collapsed family member `fam` (1/σ² for VFE and DTC; 1/(α d + σ²) for Power EP, with
    d = k(x, x) − ‖a‖² clipped at 0, as the statistics take them)."""
    a = solve_lower(L, cov.Kuf(feature, kernel, X_new).to(L.dtype))
    if fam.mode == "pep":
        assert fam.alpha is not None  # Power EP's members have their power
        d = (kernel.K_diag(X_new).to(L.dtype) - (a * a).sum(0)).clamp_min(0.0)
        return a, 1.0 / (fam.alpha * d + noise)
    return a, (1.0 / noise).expand(X_new.shape[0]).to(L.dtype)


def condition_collapsed(L_B: Tensor, e: Tensor, a: Tensor, beta: Tensor, r_new: Tensor
                        ) -> WhitenedGaussian:
    """The collapsed family's optimal q(v) after k new points: B' = B + Σ β a aᵀ and
    c' = c + Σ β r a (B = L_B L_Bᵀ, c = L_B e), factorised again.
    Shapes: L_B [M, M], e [M] or [M, F], a [M, k], beta [k], r_new [k] or [k, F];
    the result's mean is [M, 1] or [M, F], its root B'^½ (precision) [M, M]."""
    V = a * beta.sqrt()
    B = L_B @ L_B.mT + V @ V.mT
    L_B2, _ = jittered_cholesky(0.5 * (B + B.mT), 0.0, name="I + A")
    c = L_B @ e
    if r_new.dim() == 2 and c.dim() == 1:
        c = c[:, None]
    elif c.dim() == 2 and r_new.dim() == 1:
        r_new = r_new[:, None]
    c = c + (a * beta) @ r_new
    return from_precision(L_B2, solve_lower(L_B2, c))
