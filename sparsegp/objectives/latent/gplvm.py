"""The Bayesian GP-LVM's collapsed bound (Titsias & Lawrence 2010; van der Wilk 2018, §6.2).

Outputs Y [N, D] share one GP f: R^Q → R over latent inputs with q(X) = Π_n N(μ_n, diag S_n)
and prior p(X) = N(0, I). Seen as an approximating process (van der Wilk 2018, ch. 6), q(f, X)
= p(f | u) q(u) q(X) and the bound is VFE with kernel matrices replaced by their expectations
under q(X) (`psi.py`): with L = chol(Kuu), A = L⁻¹Ψ2L⁻ᵀ/σ², B = I + A, c = L⁻¹Ψ1ᵀY/σ²,

  F = −½ Σ‖Y‖²/σ² + ½‖L_B⁻¹c‖² − (D/2)(N log 2πσ² + log|B|) − (D/2)(ψ0 − tr L⁻¹Ψ2L⁻ᵀ)/σ²
      − KL(q(X) ‖ p(X)),

the family's VFE terms (`collapsed.family_objective`) with D outputs. At S → 0 it is SGPR-VFE at
X = μ summed over the D outputs (minus the KL). The optimal q(u) is VFE's, Ψ's in place of
K's. The Ψ sums are summed over chunks of points (O(B·M² + M²) memory, also in the
gradient: each chunk is recomputed under autograd in the backward pass).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor

from ...conditionals import WhitenedGaussian
from ...kernels.base import Kernel
from ...linalg import solve_lower, solve_lower_t
from ..chunked import ChunkedSums, chunked_sum
from ..collapsed.members import Statistics, family_objective, solve
from .psi import cross_moment, has_closed_form, psi_chunk, sample_rule

#: Elements of the largest per-chunk temporary ([B, M²] for Ψ2) in the automatic chunk size.
CHUNK_ELEMENTS = 2**21


class PsiSums(NamedTuple):
    """Σ_n ψ0_n [], Ψ1ᵀY [M, D], Σ_n ψ2_n [M, M], Σ_n y_nd² [D] and the number of points."""

    psi0: Tensor
    psi1_y: Tensor
    psi2: Tensor
    yy: Tensor
    n: int


def summed(a: PsiSums, b: PsiSums) -> PsiSums:
    """The Ψ sums of two sets of points together (a NamedTuple's `+` would concatenate)."""
    return PsiSums(a.psi0 + b.psi0, a.psi1_y + b.psi1_y, a.psi2 + b.psi2, a.yy + b.yy, a.n + b.n)


class PsiChunkedSums(ChunkedSums):
    """Chunks of (μ [B, Q], S [B, Q], Y [B, D][, c [B, Q]]) add to (ψ0, Ψ1ᵀY, Ψ2); with the
    coefficients c (outputs correlated with their inputs, D = Q) Ψ1ᵀY gains `cross_moment`.
    The backward pass recomputes each chunk under autograd (gradients for the kernel, Z, μ,
    S, Y and c — Y is a parameter where the outputs are themselves latent, e.g. the next
    states of a GPSSM)."""

    def __init__(self, kernel: Kernel, Z: Tensor, D: int, rule: tuple[Tensor, Tensor] | None
                 ) -> None:
        self.kernel, self.Z, self.D, self.rule = kernel, Z, D, rule
        self.inputs = (*(p for p in kernel.parameters() if p.requires_grad),
                       *((Z,) if Z.requires_grad else ()))

    def _sums(self, Z: Tensor, mu: Tensor, S: Tensor, Yb: Tensor, coef: Tensor | None = None
              ) -> tuple[Tensor, Tensor, Tensor]:
        psi0, psi1, psi2 = psi_chunk(self.kernel, Z, mu, S, self.rule)
        psi1_y = psi1.mT @ Yb
        if coef is not None:
            psi1_y = psi1_y + cross_moment(self.kernel, Z, mu, S, coef, psi1, self.rule)
        return psi0, psi1_y, psi2

    def zeros(self) -> list[Tensor]:
        z = self.Z.new_zeros
        return [z(()), z(self.Z.shape[0], self.D), z(self.Z.shape[0], self.Z.shape[0])]

    # the columns these sums are given: (X unused, μ, S, Y[, c])
    def add(self, acc: list[Tensor], _: Tensor, *columns: Tensor) -> None:
        for total, part in zip(acc, self._sums(self.Z.detach(), *columns)):
            total.add_(part)

    def grad_chunk(self, gacc: list, _: Tensor, *rest: Any) -> tuple[Tensor | None, ...]:
        *columns, grads = rest
        want = self.want_columns or (False,) * len(columns)
        with torch.enable_grad():
            Z = self.Z.detach().requires_grad_(self.Z.requires_grad)
            cols = [c.detach().requires_grad_(w) for c, w in zip(columns, want)]
            parts = self._sums(Z, *cols)
            total = cast(Tensor, sum((p * g).sum() for p, g in zip(parts, grads)))
            params = [p for p in self.kernel.parameters() if p.requires_grad]
            leaves = [*params, *((Z,) if Z.requires_grad else ()), *cols]
            wrt = [t for t in leaves if t.requires_grad]
            found = dict(zip(map(id, wrt), torch.autograd.grad(total, wrt, allow_unused=True)))
        for i, t in enumerate(leaves[: len(self.inputs)]):
            g = found.get(id(t))
            if g is not None and gacc[i] is not None:
                gacc[i].add_(g)
        return tuple(found.get(id(c)) for c in cols)


def chunk_rows(M: int, nodes: int = 1, chunk_size: int | None = None) -> int:
    """Points per chunk: the [B, M²] (closed forms) or [B·J, M] (J quadrature nodes)
    temporaries within CHUNK_ELEMENTS elements."""
    if chunk_size is not None:
        return chunk_size
    return max(1, CHUNK_ELEMENTS // max(M * M, nodes * M))


def psi_sums(kernel: Kernel, Z: Tensor, Y: Tensor, mu: Tensor, S: Tensor, *,
             rule: tuple[Tensor, Tensor] | None = None, chunk_size: int | None = None,
             coef: Tensor | None = None) -> PsiSums:
    """The Ψ sums over all points, chunked (`PsiChunkedSums`); differentiable in the kernel's
    parameters, Z, mu, S, Y and `coef`. Shapes: Y [N, D], mu, S [N, Q], Z [M, Q]; `yy` [D]
    holds Σ_n y_nd² per output (of Y: an output's own variance is the caller's to add).
    `coef` [N, Q] (D = Q): output q of point n is Y_nq + c_nq (x_nq − μ_nq) in distribution,
    so Ψ1ᵀY gains Σ_n c_nq E[k_u(x_n)(x_nq − μ_nq)] (`psi.cross_moment`)."""
    if rule is None and not has_closed_form(kernel):
        rule = sample_rule(Z.shape[1], Z)
    sums = PsiChunkedSums(kernel, Z, Y.shape[1], rule)
    size = chunk_rows(Z.shape[0], 1 if rule is None else rule[0].shape[0], chunk_size)
    rows = mu.new_empty(mu.shape[0], 0)  # the sums' columns are all in the extras
    if coef is not None and tuple(coef.shape) != tuple(mu.shape):
        raise ValueError(f"coef must have the shape of mu {tuple(mu.shape)}; got "
                         f"{tuple(coef.shape)}")
    extra = (S, Y) if coef is None else (S, Y, coef)
    psi0, psi1_y, psi2 = chunked_sum(sums, rows, mu, size, *extra)
    return PsiSums(psi0, psi1_y, psi2, (Y * Y).sum(0), Y.shape[0])


def gplvm_statistics(sums: PsiSums, L: Tensor, noise: Tensor) -> Statistics:
    """The VFE statistics of `collapsed.Statistics` from the Ψ sums (c has D columns)."""
    T = solve_lower(L, solve_lower(L, sums.psi2).mT)  # L⁻¹Ψ2L⁻ᵀ
    T = 0.5 * (T + T.mT)
    s_d = sums.psi0 - torch.diagonal(T).sum()
    return Statistics(A=T / noise, c=solve_lower(L, sums.psi1_y) / noise, s_y=sums.yy.sum() / noise,
                      s_loglam=sums.n * torch.log(noise), s_d=s_d, s_pen=s_d / noise, n=sums.n)


def _per_output(sums: PsiSums, noise: Tensor) -> list[tuple[PsiSums, Tensor]]:
    """One (sums, noise) per output column when the noise differs per output, else one."""
    if noise.dim() == 0:
        return [(sums, noise)]
    return [(sums._replace(psi1_y=sums.psi1_y[:, d:d + 1], yy=sums.yy[d:d + 1]), noise[d])
            for d in range(noise.shape[0])]


def data_bound(sums: PsiSums, L: Tensor, noise: Tensor) -> Tensor:
    """E_q(X)[log p(Y | X)] lower bound (F without the KL term): the VFE terms with the
    complexity and trace terms counted once per output column (noise [] or one per output
    [D]: the outputs then have their own B = I + L⁻¹Ψ2L⁻ᵀ/σ_d²)."""
    total = L.new_zeros(())
    for part, sigma2 in _per_output(sums, noise):
        stats = gplvm_statistics(part, L, sigma2)
        total = total + family_objective(stats, solve(stats))
    return total


def kl_standard_normal(mu: Tensor, S: Tensor) -> Tensor:
    """KL(Π_n N(μ_n, diag S_n) ‖ N(0, I)) = ½ Σ (μ² + S − log S − 1)."""
    return 0.5 * (mu * mu + S - torch.log(S) - 1.0).sum()


def optimal_q(sums: PsiSums, L: Tensor, noise: Tensor) -> WhitenedGaussian:
    """The bound's optimal q(v), v = L⁻¹u: N(B⁻¹c, B⁻¹), one mean column per output [M, D]
    (with one noise per output, one precision root per output: root [D, M, M])."""
    parts = [solve(gplvm_statistics(part, L, sigma2)) for part, sigma2 in _per_output(sums, noise)]
    if len(parts) == 1:
        return WhitenedGaussian(solve_lower_t(parts[0].L_B, parts[0].e), parts[0].L_B,
                                precision=True)
    return WhitenedGaussian(torch.cat([solve_lower_t(p.L_B, p.e) for p in parts], 1),
                            torch.stack([p.L_B for p in parts]), precision=True)


def uncollapsed_data_term(sums: PsiSums, L: Tensor, noise: Tensor, q: WhitenedGaussian
                          ) -> Tensor:
    """Σ_n Σ_d E_q(x_n) E_q(f_d) log N(y_nd; f_d(x_n), σ_d²) for an explicit q(v_d) = N(m_d, S_d)
    (v = L⁻¹u; SVGP-style, for minibatches): with T = L⁻¹Ψ2L⁻ᵀ and P = L⁻¹Ψ1ᵀY,
    Σ_n E(y_nd − f_d)² = Σ_n y_nd² − 2 m_dᵀP_d + tr((m_d m_dᵀ + S_d − I) T) + ψ0.
    With the optimal q(v) (`optimal_q`), one noise and all points it equals `data_bound`.
    Shapes: q.mean [M, D], q.root [D, M, M] (lower triangular, covariances S_d = R_d R_dᵀ),
    noise [] or one per output [D]."""
    T = solve_lower(L, solve_lower(L, sums.psi2).mT)
    P = solve_lower(L, sums.psi1_y)
    m, R = q.mean, q.root.tril()
    quadratic = (m * (T @ m)).sum(0) + ((T @ R) * R).sum((-2, -1))  # m_dᵀTm_d + tr(S_d T)
    sq = sums.yy - 2.0 * (m * P).sum(0) + quadratic + (sums.psi0 - torch.diagonal(T).sum())
    noise = noise.expand(sq.shape)
    return (-0.5 * sums.n * torch.log(2.0 * math.pi * noise) - 0.5 * sq / noise).sum()
