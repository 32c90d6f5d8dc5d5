"""The per-point sums of the collapsed family (docs/math.md §2) as chunked sums with hand-derived gradients.

* `WhitenedSums` (VFE, DTC, upper bound): with a = L⁻¹Kuf, Q = Σ a aᵀ, r = Σ y a, Σ y²,
  Σ kdiag (targets y [N], or Y [N, P] for P outputs sharing a: r [M, P], Σ y² over all).
  One triangular solve and one augmented Gram product [a; Yᵀ][a; Yᵀ]ᵀ per chunk, lower
  triangle only.
* `PowerEPSums` (FITC, PEP): with a = L⁻¹Kuf, d = kdiag − ‖a_n‖², λ = αd + σ², β = 1/λ:
  A = Σ β a aᵀ, c = Σ β y a, Σ β y², Σ log λ, Σ d, (1−α)/α Σ log(1 + αd/σ²) — one triangular
  solve and one augmented Gram product of [a√β; (y√β)ᵀ] per chunk; the backward pass either
  recomputes a (a solve) and applies L⁻ᵀ per chunk (another), or, where `unwhitened_is_safe`,
  multiplies Kuf by [L⁻ᵀGL⁻¹; Kuu⁻¹] formed once (one product, no solve per chunk).

The backward passes recompute each chunk and apply the chain rule by hand (derivations in the
method docstrings); the tests check them against autograd.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ...covariances import CrossCovariance
from ..chunked import ChunkedSums

# Lower-triangle Gram products in row panels of this height (measured best on a 2-core
# AVX2 machine for M = 500 and 1000: 1.6× faster than the full product).
GRAM_PANEL_ROWS = 84


def no_extra_columns(extra: tuple[Tensor, ...]) -> None:
    """The `add` of chunked sums takes exactly the columns its objective has: these take
    none."""
    if extra:
        raise TypeError(f"these sums take (X, y) chunks only; got {len(extra)} extra columns")


def add_products_lower_(out: Tensor, K: Tensor, K2: Tensor) -> None:
    """out += K K2ᵀ on (at least) the lower triangle, for a symmetric K K2ᵀ. Shapes: [m, B].

    torch has no symmetric rank-k update; p row panels against the rows above them do
    (1 + 1/p)/2 of the general product's work.
    """
    if out.dtype != K.dtype:  # low-precision chunk, full-precision accumulator
        tmp = K.new_zeros(out.shape)
        add_products_lower_(tmp, K, K2)
        out.add_(tmp.to(out.dtype))
        return
    m = K.shape[0]
    for i in range(0, m, GRAM_PANEL_ROWS):
        j = min(m, i + GRAM_PANEL_ROWS)
        out[i:j, :j].addmm_(K[i:j], K2[:j].mT)


def add_gram_lower_(out: Tensor, K: Tensor) -> None:
    """out += K Kᵀ on (at least) the lower triangle. Shapes: out [m, m], K [m, B]."""
    add_products_lower_(out, K, K)


def target_rows(columns: int) -> int:
    """Rows the targets take in the [a; Yᵀ] buffer of chunked sums: 1 for y [N] (`columns` 0), P for
    Y [N, P] (several outputs sharing the statistics)."""
    return max(1, int(columns))


def target_sums(YA: Tensor, columns: int) -> Tensor:
    """Σ y_n a_n from the [P, M] block of the augmented Gram matrix: [M] for y [N] (`columns`
    0), [M, P] for Y [N, P]."""
    return YA[0].clone() if columns == 0 else YA.mT.clone()


def as_matrix(g: Tensor) -> Tensor:
    """A gradient of Σ y a as [M, P] ([M] -> [M, 1])."""
    return g[:, None] if g.dim() == 1 else g


def second_side(T: Tensor, left: Tensor, upper: bool) -> Tensor:
    """T⁻¹ S T⁻ᵀ for a symmetric S, from left = T⁻¹S [M, M] and triangular T (`upper`): the
    second solve, symmetrised. T = L whitens sums (L⁻¹SL⁻ᵀ); T = Lᵀ gives L⁻ᵀSL⁻¹."""
    Q = torch.linalg.solve_triangular(T, left.mT, upper=upper)
    return 0.5 * (Q + Q.mT)


def symmetric_from_lower(A: Tensor) -> Tensor:
    lower = A.tril()
    return lower + lower.tril(-1).mT


# The unwhitened VFE/DTC sums are used where ε·cond(Kuu)·mean(k_nn)/σ² — about the relative
# error they add to the objective (measured 0.4× at N = 10⁵, M = 500) — is at most this, and
# the N·M² work is at least UNWHITENED_MIN_WORK multiply-adds (below it the per-chunk
# whitening costs little).
UNWHITENED_ERROR_BOUND = 1e-9
UNWHITENED_MIN_WORK = 10**8
_POWER_STEPS = 16


def _largest_eigenvalue(apply, M: int, like: Tensor) -> float:
    """The largest eigenvalue of a symmetric positive definite operator by block power
    iteration (4 fixed pseudo-random starts, `_POWER_STEPS` steps): a lower bound, close."""
    g = torch.Generator(device="cpu").manual_seed(0)
    V = torch.randn(M, 4, generator=g, dtype=like.dtype).to(like.device)
    estimate = torch.zeros((), dtype=like.dtype, device=like.device)
    for _ in range(_POWER_STEPS):
        V = V / torch.linalg.vector_norm(V, dim=0)
        W = apply(V)
        estimate = (V * W).sum(0).max()
        V = W
    return float(estimate)


def condition_of_factored(L: Tensor) -> float:
    """cond(L Lᵀ) for a lower-triangular factor L [M, M], by power iteration on L Lᵀ and on
    its inverse (triangular solves with 4 vectors: O(M²) a step, no M³ work)."""
    Ld = L.detach()
    M = Ld.shape[0]
    big = _largest_eigenvalue(lambda V: Ld @ (Ld.mT @ V), M, Ld)
    inv = _largest_eigenvalue(lambda V: torch.linalg.solve_triangular(
        Ld.mT, torch.linalg.solve_triangular(Ld, V, upper=False), upper=True), M, Ld)
    return big * inv


def unwhitened_is_safe(L: Tensor, kuf: CrossCovariance, X: Tensor, noise: Tensor, n: int) -> bool:
    """Whether the sums of Kuf Kfu whitened once (`WhitenedSums` with `whiten=False`) are
    accurate for the objective of the rows X [N, D] (`n` rows over all ranks), noise σ² []:
    rounding δS in S = Σ k kᵀ becomes L⁻¹δSL⁻ᵀ, about ε·cond(Kuu)·‖Q‖ against σ², and the
    gradient's L⁻ᵀGL⁻¹ squares cond(L) the same way (the power iteration's estimate of
    cond(Kuu) is doubled for its underestimate). False where the work is small
    (`UNWHITENED_MIN_WORK`): there whitening chunk by chunk is cheap."""
    M = L.shape[-1]
    if n * M * M < UNWHITENED_MIN_WORK or noise.dim() != 0 or float(noise.detach()) <= 0.0:
        return False
    with torch.no_grad():
        signal = float(kuf.kdiag(X).sum()) / max(1, X.shape[0])  # mean k_nn
    ratio = max(1.0, signal / float(noise.detach()))
    bound = torch.finfo(kuf.dtype).eps * 2.0 * condition_of_factored(L.detach()) * ratio
    return math.isfinite(bound) and bound <= UNWHITENED_ERROR_BOUND


class WhitenedSums(ChunkedSums):
    """Σ over chunks of (Q = Σ a_n a_nᵀ [M, M], r = Σ y_n a_n [M], Σ y², Σ kdiag) with a = L⁻¹Kuf.

    With `whiten` (the default) each chunk is whitened before accumulating: Q is then a Gram
    matrix of computed vectors, hence positive semi-definite to rounding (ε‖Q‖) however
    ill-conditioned Kuu is. Without, the chunks' Kuf Kfu (and Kuf y) are summed and whitened
    once in `finish` — half the flops (no triangular solve per chunk), but with an error
    ε·cond(Kuu)·‖Kuf Kfu‖ that makes I + Q/σ² indefinite on smooth low-noise data (small
    noise, long lengthscales, N = 10⁴): `unwhitened_is_safe` says when it is not.
    Forward: (one triangular solve and) one lower-triangle Gram product of [a; yᵀ] per chunk.

    Backward: F depends on a_n only through ⟨G, Q⟩/2 + ⟨g_r, r⟩ with G = g_Q + g_Qᵀ, so
    ∂K = L⁻ᵀ(G a + g_r yᵀ) = [L⁻ᵀG, L⁻ᵀg_r][a; yᵀ] — the chunk's a recomputed (one solve) and
    one product with an M×(M+1) matrix formed once; unwhitened, [L⁻ᵀGL⁻¹, L⁻ᵀg_r][K; yᵀ]
    with no solve per chunk — and ∂L = −L⁻ᵀ Σ ∂a aᵀ = −L⁻ᵀ(G Q + g_r rᵀ) from the sums
    themselves (lower triangle).
    """

    def __init__(self, kuf: CrossCovariance, L: Tensor, acc_dtype: torch.dtype,
                 columns: int = 0, whiten: bool = True) -> None:
        self.kuf, self.acc_dtype = kuf, acc_dtype
        self.inputs = (*kuf.inputs, L)
        self.M = kuf.num_inducing
        self.columns, self.P = int(columns), target_rows(columns)
        self.whiten = bool(whiten)
        self.L = L.detach().to(kuf.dtype)
        self._L_acc = L.detach().to(acc_dtype)

    def _chunk(self, Xb: Tensor, yb: Tensor, whiten: bool) -> tuple[Tensor, Tensor]:
        """Kuf_b and [a; Yᵀ] (whiten) or [Kuf_b; Yᵀ] in one [M + P, B] buffer."""
        B = Xb.shape[0]
        KY = self.buffer("KY", (self.M + self.P, B), self.L)
        K = self.kuf.value(Xb, self.buffer("K", (self.M, B), self.L) if whiten else KY[: self.M])
        if whiten:
            torch.linalg.solve_triangular(self.L, K, upper=False, out=KY[: self.M])
        KY[self.M:] = yb.mT if yb.dim() == 2 else yb
        return K, KY

    def zeros(self) -> list[Tensor]:
        z = self._L_acc.new_zeros
        return [z(self.M + self.P, self.M + self.P), z(())]

    def add(self, acc: list[Tensor], Xb: Tensor, yb: Tensor, *extra: Tensor) -> None:
        no_extra_columns(extra)
        _, AY = self._chunk(Xb, yb, whiten=self.whiten)
        add_gram_lower_(acc[0], AY)
        acc[1].add_(self.kuf.kdiag(Xb).sum().to(self.acc_dtype))

    def finish(self, acc: list[Tensor]) -> tuple[Tensor, ...]:
        QA, M = symmetric_from_lower(acc[0]), self.M
        if not self.whiten:  # [L⁻¹ 0; 0 I] [S_KK S_Ky; S_yK S_yy] [L⁻ᵀ 0; 0 I]
            L = self._L_acc
            left = torch.linalg.solve_triangular(L, QA[:M], upper=False)  # [M, M + P]
            QA[:M, :M] = second_side(L, left[:, :M], upper=False)
            QA[:M, M:] = left[:, M:]
            QA[M:, :M] = left[:, M:].mT
        self._QA = QA  # this shard's sums, for the backward pass (the outputs get reduced)
        return (QA[:M, :M].clone(), target_sums(QA[M:, :M], self.columns),
                torch.diagonal(QA[M:, M:]).sum(), acc[1])

    def grad_zeros(self, grads: Sequence[Tensor]) -> list:
        gQ, gr = grads[0].to(self.acc_dtype), grads[1].to(self.acc_dtype)
        self._G, self._gr = gQ + gQ.mT, gr
        # ∂K = L⁻ᵀ(G a + g_r yᵀ) = [L⁻ᵀG, L⁻ᵀg_r][a; yᵀ]: one solve with L here, the chunk's
        # own a per chunk (forming L⁻ᵀGL⁻¹ to multiply Kuf instead squares cond(L) and loses
        # the gradient's accuracy on ill-conditioned Kuu — measured: 20% errors at cond 1e8 —
        # hence only where `unwhitened_is_safe`)
        H = torch.linalg.solve_triangular(self._L_acc.mT, torch.cat([self._G, as_matrix(gr)], 1),
                                          upper=True)
        if not self.whiten:  # L⁻ᵀGL⁻¹ = (L⁻ᵀ(L⁻ᵀG)ᵀ)ᵀ
            H[:, : self.M] = second_side(self._L_acc.mT, H[:, : self.M], upper=True)
        self._H = H.to(self.kuf.dtype)  # [M, M + P]
        self._gyy = grads[2].to(self.kuf.dtype)
        self._gkd = grads[3].to(self.kuf.dtype)
        return self.kuf.grad_zeros()

    def grad_chunk(self, gacc: list, Xb: Tensor, yb: Tensor, grads: Sequence[Tensor]
                   ) -> Tensor | None:
        K, AY = self._chunk(Xb, yb, whiten=self.whiten)
        gK = torch.mm(self._H, AY, out=self.buffer("gK", (self.M, AY.shape[1]), AY))
        self.kuf.grad_chunk(gacc, Xb, K, gK, self._gkd.expand(Xb.shape[0]))
        if not self.want_y:
            return None
        # ∂y_n = g_rᵀa_n + 2 g_yy y_n (unwhitened: g_rᵀa_n = (L⁻ᵀg_r)ᵀk_n)
        a, y = AY[: self.M], AY[self.M:]
        gr = (as_matrix(self._gr).to(a.dtype) if self.whiten else self._H[:, self.M:])
        gy = gr.mT @ a + 2.0 * self._gyy * y
        return (gy.mT if yb.dim() == 2 else gy[0]).to(yb.dtype)

    def grad_finish(self, gacc: list, grads: Sequence[Tensor]) -> list:
        M, QA = self.M, self._QA
        ga_a = self._G @ QA[:M, :M] + as_matrix(self._gr) @ QA[M:, :M]  # Σ ∂a aᵀ
        gL = -torch.linalg.solve_triangular(self._L_acc.mT, ga_a, upper=True).tril()
        L = self.inputs[-1]
        return [*self.kuf.grad_finish(gacc), gL.to(L.dtype)]


class PowerEPSums(ChunkedSums):
    """Σ over chunks of (A, c, s_y, s_loglam, s_d, s_pen) with λ_n = α d_n + σ² and
    s_pen = (1−α)/α Σ log(1 + α d_n/σ²) (the penalty's weight folded in)."""

    def __init__(self, kuf: CrossCovariance, L: Tensor, noise: Tensor, alpha: float,
                 acc_dtype: torch.dtype, columns: int = 0, whiten: bool = True) -> None:
        self.kuf, self.alpha, self.acc_dtype = kuf, alpha, acc_dtype
        self.whiten = bool(whiten)  # False: the backward pass of `grad_chunk_unwhitened`
        self.weight = (1.0 - alpha) / alpha  # of the penalty
        self.inputs = (*kuf.inputs, L, noise)
        self.M = kuf.num_inducing
        self.columns, self.P = int(columns), target_rows(columns)
        self.L = L.detach().to(kuf.dtype)
        self.noise = noise.detach().to(kuf.dtype)

    def _chunk(self, Xb: Tensor, yb: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """K = Kuf, [a; Yᵀ] with a = L⁻¹K (one buffer), raw d, clipped d and λ = αd + σ²."""
        B = Xb.shape[0]
        K = self.kuf.value(Xb, self.buffer("K", (self.M, B), self.L))
        AY = self.buffer("AY", (self.M + self.P, B), K)
        a = torch.linalg.solve_triangular(self.L, K, upper=False, out=AY[: self.M])
        AY[self.M:] = yb.mT if yb.dim() == 2 else yb
        raw = self.kuf.kdiag(Xb) - (a * a).sum(0)
        d = raw.clamp_min(0.0)
        return K, AY, raw, d, self.alpha * d + self.noise

    def zeros(self) -> list[Tensor]:
        z = self.L.new_zeros
        return [z(self.M + self.P, self.M + self.P, dtype=self.acc_dtype)] + [
            z((), dtype=self.acc_dtype) for _ in range(3)]

    def add(self, acc: list[Tensor], Xb: Tensor, yb: Tensor, *extra: Tensor) -> None:
        no_extra_columns(extra)
        _, AY, _, d, lam = self._chunk(Xb, yb)
        # [a√β; (y√β)ᵀ][…]ᵀ holds A, c and Σ β y² at once
        add_gram_lower_(acc[0], AY.mul_(torch.rsqrt(lam)))
        acc[1].add_(torch.log(lam).sum().to(self.acc_dtype))
        acc[2].add_(d.sum().to(self.acc_dtype))
        if self.weight:
            acc[3].add_(self.weight * torch.log1p(self.alpha * d / self.noise).sum()
                        .to(self.acc_dtype))

    def finish(self, acc: list[Tensor]) -> tuple[Tensor, ...]:
        AA, M = symmetric_from_lower(acc[0]), self.M
        self._AA = AA.clone()  # this shard's A and c, for the backward pass (outputs get reduced)
        return (AA[:M, :M], target_sums(AA[M:, :M], self.columns), torch.diagonal(AA[M:, M:]).sum(),
                acc[1], acc[2], acc[3])

    def grad_zeros(self, grads: Sequence[Tensor]) -> list:
        gA, gc, gsy, gsl, gsd, gsp = (g.to(self.kuf.dtype) for g in grads)
        gc = as_matrix(gc)  # [M, P]
        self._G = torch.cat([gA + gA.mT, gc], 1)  # [M, M + P]
        self._gc, self._gsy, self._gsl, self._gsd = gc, gsy, gsl, gsd
        self._gsp = self.weight * gsp  # ∂/∂ Σ log(1 + αd/σ²)
        self._Sd = torch.zeros_like(self.L)  # Σ ∂d_n a_n a_nᵀ (lower triangle; unwhitened: k_n)
        self._gnoise = torch.zeros_like(self.noise)
        if not self.whiten:
            # [L⁻ᵀGL⁻¹; Kuu⁻¹] [2M, M] and L⁻ᵀgc [M, P], formed once from L⁻ᵀ[G, gc]
            HG = torch.linalg.solve_triangular(self.L.mT, self._G, upper=True)
            self._HW = torch.cat([second_side(self.L.mT, HG[:, : self.M], upper=True),
                                  torch.cholesky_inverse(self.L)], 0)
            self._hc = HG[:, self.M:]
        return self.kuf.grad_zeros()

    def grad_chunk(self, gacc: list, Xb: Tensor, yb: Tensor, grads: Sequence[Tensor]
                   ) -> Tensor | None:
        """Chain rule for one chunk (and ∂y_n = β_n (g_cᵀa_n + 2 g_sy y_n) when asked).

        With T = (gA + gAᵀ) a + gc yᵀ: ∂a_n = β_n T_n − 2 ∂d_n a_n, and
        ∂β_n = ½ a_nᵀ(gA + gAᵀ)a_n + y_n gcᵀa_n + gsy y_n² = ½(a_nᵀT_n + y_n gcᵀa_n) + gsy y_n²;
        ∂λ = −β² ∂β + gsl β; ∂d = α ∂λ + gsd + gsp α/(σ² + αd) (0 where d was clipped);
        ∂σ² = Σ ∂λ − gsp Σ αd/(σ²(σ² + αd)); ∂kdiag = ∂d; ∂K = L⁻ᵀ∂a; ∂L = −L⁻ᵀ Σ ∂a aᵀ,
        where Σ ∂a aᵀ = (gA + gAᵀ)A + gc cᵀ − 2 Σ ∂d_n a_n a_nᵀ needs only the last, symmetric,
        sum per chunk (lower triangle).
        """
        if not self.whiten:
            return self.grad_chunk_unwhitened(gacc, Xb, yb)
        K, AY, raw, d, lam = self._chunk(Xb, yb)
        a, y = AY[: self.M], AY[self.M:]  # y [P, B]
        beta = 1.0 / lam
        T = torch.mm(self._G, AY, out=self.buffer("T", (self.M, AY.shape[1]), AY))  # [M, B]
        ga_dot = (a * T).sum(0)
        ca = self._gc.mT @ a  # [P, B]
        g_d = self._through_d(0.5 * (ga_dot + (y * ca).sum(0)), y, raw, d, beta)
        ga = T.mul_(beta).addcmul_(a, g_d, value=-2.0)  # T is scratch from here on
        add_products_lower_(self._Sd, a * g_d, a)
        gK = torch.linalg.solve_triangular(self.L.mT, ga, upper=True)
        self.kuf.grad_chunk(gacc, Xb, K, gK, g_d)
        return self._targets_gradient(beta, ca, y, yb)

    def grad_chunk_unwhitened(self, gacc: list, Xb: Tensor, yb: Tensor) -> Tensor | None:
        """`grad_chunk` without a solve per chunk: with H = L⁻ᵀGL⁻¹ and W = Kuu⁻¹ (G = gA + gAᵀ),
        aᵀGa = kᵀHk, ‖a‖² = kᵀWk, gcᵀa = (L⁻ᵀgc)ᵀk and ∂K = L⁻ᵀ∂a = β(HK + L⁻ᵀgc yᵀ) − 2WK∂d;
        Σ ∂d a aᵀ = L⁻¹(Σ ∂d k kᵀ)L⁻ᵀ, whitened in `grad_finish`. Rounding grows with
        cond(Kuu)² in H and W: used where `unwhitened_is_safe`."""
        B = Xb.shape[0]
        K = self.kuf.value(Xb, self.buffer("K", (self.M, B), self.L))
        y = (yb.mT if yb.dim() == 2 else yb[None]).to(K.dtype)  # [P, B], the compute dtype
        HK, WK = torch.mm(self._HW, K, out=self.buffer("HWK", (2 * self.M, B), K)).split(self.M)
        raw = self.kuf.kdiag(Xb) - (K * WK).sum(0)
        d = raw.clamp_min(0.0)
        beta = 1.0 / (self.alpha * d + self.noise)
        ca = self._hc.mT @ K  # [P, B]
        g_d = self._through_d(0.5 * (K * HK).sum(0) + (y * ca).sum(0), y, raw, d, beta)
        add_products_lower_(self._Sd, K * g_d, K)
        gK = HK.addmm_(self._hc, y).mul_(beta).addcmul_(WK, g_d, value=-2.0)
        self.kuf.grad_chunk(gacc, Xb, K, gK, g_d)
        return self._targets_gradient(beta, ca, y, yb)

    def _through_d(self, g_beta_a: Tensor, y: Tensor, raw: Tensor, d: Tensor, beta: Tensor
                   ) -> Tensor:
        """∂d [B] of a chunk from the part of ∂β that comes through a (½aᵀGa + y gcᵀa; the
        targets' own gsy y² is added here): ∂λ = −β²∂β + gsl β, ∂d = α∂λ + gsd + gsp α/(σ² + αd),
        0 where d was clipped; adds the chunk's ∂σ² = Σ ∂λ − gsp Σ αd/(σ²(σ² + αd))."""
        g_beta = g_beta_a + self._gsy * (y * y).sum(0)
        g_lam = -beta * beta * g_beta + self._gsl * beta
        shifted = self.noise + self.alpha * d
        g_d = (self.alpha * g_lam + self._gsd + self._gsp * self.alpha / shifted) * (raw >= 0)
        self._gnoise.add_(g_lam.sum() - self._gsp * (self.alpha * d / (self.noise * shifted)).sum())
        return g_d

    def _targets_gradient(self, beta: Tensor, ca: Tensor, y: Tensor, yb: Tensor
                          ) -> Tensor | None:
        """∂y_n = β_n (gcᵀa_n + 2 gsy y_n) in yb's shape and dtype, when asked (`want_y`)."""
        if not self.want_y:
            return None
        gy = beta * (ca + 2.0 * self._gsy * y)
        return (gy.mT if yb.dim() == 2 else gy[0]).to(yb.dtype)

    def grad_finish(self, gacc: list, grads: Sequence[Tensor]) -> list:
        M = self.M
        AA = self._AA.to(self.kuf.dtype)
        ga_a = self._G[:, :M] @ AA[:M, :M] + self._gc @ AA[M:, :M]
        Sd = symmetric_from_lower(self._Sd)
        if not self.whiten:  # L⁻¹ (Σ ∂d k kᵀ) L⁻ᵀ
            Sd = second_side(self.L, torch.linalg.solve_triangular(self.L, Sd, upper=False),
                             upper=False)
        ga_a -= 2.0 * Sd
        gL = -torch.linalg.solve_triangular(self.L.mT, ga_a, upper=True).tril()
        L, noise = self.inputs[-2], self.inputs[-1]
        return [*self.kuf.grad_finish(gacc), gL.to(L.dtype), self._gnoise.to(noise.dtype)]
