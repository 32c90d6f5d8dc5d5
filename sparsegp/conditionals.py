"""q(f) from q(u): the one conditional every posterior and every objective uses.

With L = chol(Kuu) and whitened inducing variables v = L⁻¹u, a Gaussian q(v) = N(m, S) gives
at inputs x, with a = L⁻¹k_u(x) (docs/math.md §2, §4, §5; Hensman et al. 2013):

  mean = aᵀm,   var = k(x, x) − ‖a‖² + aᵀSa,   cov(x, x') = k(x, x') − aᵀa' + aᵀSa'.

`projected` gives the part that q(v) determines (h = aᵀv), `conditional` adds the prior
residual. q(v) is a `WhitenedGaussian`: SVGP stores S by a Cholesky factor (S = R Rᵀ,
aᵀSa = ‖Rᵀa‖²); the collapsed family and Power EP have S = B⁻¹ with B = I + A = R Rᵀ, stored
by that factor (`precision=True`, aᵀSa = ‖R⁻¹a‖²), so no inverse is ever formed. Shapes:
mean [M, C] for C latent functions, root [C, M, M] (or [M, M], shared by all C).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .linalg import solve_lower, solve_lower_t
from .runtime.transforms import under_transform


class WhitenedGaussian(NamedTuple):
    """q(v) = N(mean, S) for v = L⁻¹u: S = root rootᵀ, or (root rootᵀ)⁻¹ with `precision`."""

    mean: Tensor  # [M, C]
    root: Tensor  # [C, M, M] or [M, M]: a square root (lower-triangular from a Cholesky)
    precision: bool = False

    def column(self, c: int) -> WhitenedGaussian:
        """q(v_c) of latent function c alone (mean [M, 1], root [1, M, M])."""
        root = self.root if self.root.dim() == 2 else self.root[c:c + 1]
        return WhitenedGaussian(self.mean[:, c:c + 1], root, self.precision)

    def root_t_times(self, A: Tensor) -> Tensor:
        """A matrix R' with R'ᵀR' = AᵀSA: Rᵀ A, or R⁻¹A for a precision root. [C, M, B]."""
        root = self.root if self.root.dim() == 3 else self.root.unsqueeze(0)
        if self.precision:
            return torch.linalg.solve_triangular(root, A.expand(root.shape[0], *A.shape),
                                                 upper=False)
        # bmm of views rather than `root.mT @ A`, which torch folds into one product over a
        # contiguous copy of Rᵀ that autograd keeps per call (C·M² per chunk: 18 GB over 100
        # chunks at C = 10, M = 1500)
        return torch.bmm(root.mT, A.expand(root.shape[0], *A.shape))

    @property
    def covariance(self) -> Tensor:
        """S [C, M, M] (formed: for reporting, never on a hot path)."""
        root = self.root if self.root.dim() == 3 else self.root.unsqueeze(0)
        if self.precision:
            eye = torch.eye(root.shape[-1], dtype=root.dtype, device=root.device)
            inv = torch.linalg.solve_triangular(root, eye.expand_as(root), upper=False)
            return inv.mT @ inv
        return root @ root.mT


def whiten(L: Tensor, Kuf: Tensor) -> Tensor:
    """a = L⁻¹Kuf. Shapes: L [M, M], Kuf [M, B] -> [M, B]."""
    return solve_lower(L, Kuf)


def nystrom_residual(A: Tensor, kdiag: Tensor) -> Tensor:
    """diag(Kff − Qff) = k(x, x) − ‖a‖², clipped at 0 (rounding). Shapes: A [M, B] -> [B]."""
    return (kdiag - (A * A).sum(0)).clamp_min(0.0)


def projected(A: Tensor, q: WhitenedGaussian) -> tuple[Tensor, Tensor]:
    """Mean aᵀm and variance aᵀSa [B, C] of h = aᵀv = k_u(x)ᵀKuu⁻¹u, the part of f(x) that
    the inducing variables determine (Power EP's sites live on it; docs/math.md §5)."""
    SA = q.root_t_times(A)  # [C, M, B]
    return A.mT @ q.mean, (SA * SA).sum(1).mT


def with_prior_mean(mean: Tensor, m: Tensor) -> Tensor:
    """q(f)'s mean [B] or [B, C] plus the prior mean's values m(X) [B] (shared by the C
    columns) or [B, C] (one per column)."""
    return mean + (m[:, None] if mean.dim() == 2 and m.dim() == 1 else m)


def conditional(A: Tensor, kff: Tensor, q: WhitenedGaussian, full_cov: bool = False
                ) -> tuple[Tensor, Tensor]:
    """Mean [B, C] and variance [B, C] (or covariance [C, B, B]) of q(f) at the inputs whose
    whitened cross-covariances are A = L⁻¹Kuf [M, B]; `kff` is diag Kff [B] (or Kff [B, B]
    with `full_cov`): f = h + the Nyström residual, independent of u."""
    if full_cov:
        SA = q.root_t_times(A)
        return A.mT @ q.mean, kff - A.mT @ A + SA.mT @ SA
    mean, var_h = projected(A, q)
    return mean, nystrom_residual(A, kff)[:, None] + var_h


class Folded(NamedTuple):
    """The conditional with L and q(v) folded into fixed operators, for prediction:

    mean = Kusᵀw with w = L⁻ᵀm, and, writing I − S = U diag(λ) Uᵀ and F = diag(√|λ|) Uᵀ L⁻¹,
    var = kff − Σ_i sign(λ_i) (F Kus)_i² — the same numbers as `conditional` with one
    [M, M]·[M, B] product per latent function and block of test points, and no solve
    (S ⪯ I for the collapsed family and Power EP, so every sign is + there; SVGP's S may not be).
    """

    w: Tensor  # [M, C]
    F: Tensor  # [C, M, M]
    sign: Tensor  # [C, M]


def fold(L: Tensor, q: WhitenedGaussian) -> Folded:
    """Fold L = chol(Kuu) and q(v) into the operators of `Folded` (O(M³), once)."""
    S = q.covariance  # [C, M, M]
    eye = torch.eye(S.shape[-1], dtype=S.dtype, device=S.device)
    lam, U = torch.linalg.eigh(eye - S)
    G = U * torch.sqrt(lam.abs())[..., None, :]  # columns √|λ_i| u_i
    F = torch.linalg.solve_triangular(L.mT, G, upper=True).mT  # (L⁻ᵀG)ᵀ = Gᵀ L⁻¹
    return Folded(solve_lower_t(L, q.mean), F, torch.sign(lam))


def folded_conditional(Kus: Tensor, kff: Tensor, f: Folded, full_cov: bool = False,
                       out: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """`conditional` from the cross-covariances Kus [M, B] and the folded operators:
    mean [B, C], variance [B, C] (or covariance [C, B, B]); `out` [C, M, B]: where the
    product F·Kus goes (scratch, overwritten)."""
    mean = Kus.mT @ f.w
    V = f.F @ Kus if out is None else torch.matmul(f.F, Kus, out=out)  # [C, M, B]
    if full_cov:
        return mean, kff - V.mT @ (f.sign[..., None] * V)
    # Σ_m sign_m V_mb², squared in place where nothing differentiates V (no temporaries: at
    # M = 500 the two it took cost 20% on top of the product itself)
    V = V.square_() if not (V.requires_grad or under_transform(V)) else V.square()
    return mean, (kff[:, None] - (f.sign[:, None, :] @ V)[:, 0, :].mT).clamp_min(0.0)


def from_parameters(L: Tensor, q_mu: Tensor, q_sqrt: Tensor, whitened: bool) -> WhitenedGaussian:
    """q(v) from a variational q(u) = N(q_mu, q_sqrt q_sqrtᵀ) (or of v when `whitened`).
    Shapes: q_mu [M, C], q_sqrt [C, M, M] (its lower triangle is used)."""
    q_sqrt = q_sqrt.tril()
    if whitened:
        return WhitenedGaussian(q_mu, q_sqrt)
    return WhitenedGaussian(solve_lower(L, q_mu),
                            torch.linalg.solve_triangular(L, q_sqrt, upper=False))


def from_precision(L_B: Tensor, e: Tensor) -> WhitenedGaussian:
    """The collapsed family's optimal q(v) = N(L_B⁻ᵀe, B⁻¹) with B = I + A = L_B L_Bᵀ (docs/math.md §2);
    e [M] (mean [M, 1]) or [M, P] for P outputs sharing B (mean [M, P])."""
    mean = solve_lower_t(L_B, e)
    return WhitenedGaussian(mean[:, None] if mean.dim() == 1 else mean, L_B, precision=True)


def mix_outputs(mean: Tensor, W: Tensor | None, own: Tensor, shared: Tensor | None = None,
                full_cov: bool = False, full_output_cov: bool = False) -> tuple[Tensor, Tensor]:
    """Moments of the P outputs f = W g of the linear model of coregionalisation from those
    of L latent functions g — the one place outputs are mixed (SVGP's ELBO and predictions,
    SGPR's coregional posterior).

    The latents' covariance is cov(g_l(x), g_l'(x')) = δ_ll' own_l(x, x') + V_l(x)ᵀV_l'(x'):
    `own` their own part — variances [B, L], or covariances over the points [L, B, B] with
    `full_cov` — and `shared` V [L, K, B] the part a joint q(u) couples (None: independent
    latent functions, as SVGP's q(u) per latent function). With U_p = Σ_l W_pl V_l:
    mean Wμ, cov(f_p(x), f_q(x')) = Σ_l W_pl W_ql own_l(x, x') + U_p(x)ᵀU_q(x').
    Shapes: mean [B, L], W [P, L] (None: the latents themselves) -> mean [B, P] and variances
    [B, P], covariances over the points [P, B, B] (`full_cov`) or over the outputs at each
    point [B, P, P] (`full_output_cov`)."""
    if W is None and shared is None and not full_output_cov:
        return mean, own
    W = (torch.eye(mean.shape[1], dtype=mean.dtype, device=mean.device) if W is None
         else W.to(mean.dtype))
    U = None if shared is None else torch.einsum("pl,lkb->pkb", W, shared)
    if full_cov:
        cov = torch.einsum("pl,lnm->pnm", W * W, own)
        return mean @ W.mT, cov if U is None else cov + U.mT @ U
    if full_output_cov:
        cov = torch.einsum("pl,nl,ql->npq", W, own, W)
        return mean @ W.mT, cov if U is None else cov + torch.einsum("pkb,qkb->bpq", U, U)
    var = own @ (W * W).mT
    return mean @ W.mT, var if U is None else var + (U * U).sum(1).mT


def coregional_conditional(q: WhitenedGaussian, W: Tensor, a: Tensor, kff: Tensor,
                full_cov: bool = False, full_output_cov: bool = False) -> tuple[Tensor, Tensor]:
    """q(f) of the P outputs f = W g of the linear model of coregionalisation, from q(v) of the
    L·M whitened inducing variables of L latent functions sharing one kernel (block l of
    q.mean holds g_l's; q.root is the precision root L_B of the collapsed bound,
    `objectives/collapsed/coregional.py`), at inputs whose whitened cross-covariances are a = L⁻¹Kuf
    [M, B]; kff is diag Kff [B] (or Kff [B, B] with `full_cov`). With h_p = W_p ⊗ a and
    U_p = L_B⁻¹h_p: mean h_pᵀm, cov(f_p, f_q) = W_p·W_q (k − aᵀa') + U_pᵀU_q.
    Returns mean [B, P] and variances [B, P], covariances [P, B, B] (`full_cov`) or
    [B, P, P] (`full_output_cov`)."""
    M, B = a.shape
    Lat = W.shape[1]
    m = q.mean[:, 0].reshape(Lat, M)
    H = torch.zeros(Lat, Lat * M, B, dtype=a.dtype, device=a.device)  # e_l ⊗ a
    for l in range(Lat):
        H[l, l * M:(l + 1) * M] = a
    V = torch.linalg.solve_triangular(q.root, H.reshape(Lat, Lat * M, B), upper=False)
    # the prior residual k − aᵀa' is every latent function's own part
    own = (kff - a.mT @ a).expand(Lat, B, B) if full_cov else \
        (kff - (a * a).sum(0)).clamp_min(0.0)[:, None].expand(B, Lat)
    return mix_outputs((m @ a).mT, W, own, V, full_cov, full_output_cov)

