"""Block (PITC-like) Power EP: the collapsed family with per-block D_b and powers α_b (docs/math.md §2).

With blocks b of the data (a label per point), D_b = Kff_bb − Qff_bb, the b-th diagonal block
of Kff − Qff, and Λ_b = α_b D_b + σ²I replace d_n and λ_n:

  F = −(N/2) log 2π − ½ log|Qff + Λ| − ½ yᵀ(Qff + Λ)⁻¹y − Σ_b (1−α_b)/(2α_b) log|I + α_b D_b/σ²|

Blocks of one point are the point-wise family; α_b = 1 is PITC (Quiñonero-Candela & Rasmussen
2005); one block of all the data with α = 1 is the exact GP; α_b → 0 is VFE for any blocking.
The sums are those of the point-wise family with β_n a_n a_nᵀ replaced by a_b Λ_b⁻¹ a_bᵀ, so
`collapsed.solve` and `collapsed.family_terms` serve both. With a_b = L⁻¹Kuf_b, C_b = chol(Λ_b)
and V_b = C_b⁻¹[a_bᵀ, y_b] ([|b|, M + 1]):

  [A c; cᵀ s_y] = Σ_b V_bᵀV_b,  s_loglam = Σ_b log|Λ_b|,  s_d = Σ_b tr D_b,
  s_pen = Σ_b (1−α_b)/α_b · 2 Σ_i log([C_b]_ii / σ_i)

(the last as a log of ratios near 1, so small α_b lose nothing to cancellation). σ² may
differ per point (Λ_b = α_b D_b + diag σ²_b): then it is a column of the sums. Cost
O(N·M² + Σ_b |b|³), memory O(chunk·M + M² + max_b |b|²): the data are sorted by block once
and summed in runs of whole blocks; blocks of similar size are padded to one size and
factorised as one batch (`Kernel.K_blocks` gives their Kff blocks at once). The backward
pass applies the chain rule by hand (`BlockPowerEPSums`); it recomputes each run's
factors, unless the forward pass could keep them all within KEEP_BYTES (then memory is
O(N·(M + max_b |b|)) for one evaluation, and the backward pass does a third less work).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import numpy as np
import torch
from torch import Tensor

from ...covariances import cross_covariance
from ...features.base import InducingFeature
from ...kernels.base import Kernel
from ...kernels.stationary import RadialKernel, radial_gram_gradients, scaled_squared_distance
from ...validation import ArrayLike
from ..chunked import ChunkedSums


class Blocking(NamedTuple):
    """A partition of the data rows into blocks, sorted: rows `order` are the data grouped by
    block (blocks in order of size, so that a run holds few distinct sizes), `ids` [N] the
    block of each grouped row (each block contiguous), `alpha` [B] each block's power and
    `starts` the B + 1 block boundaries in the grouped order."""

    order: Tensor
    ids: Tensor
    alpha: Tensor
    starts: tuple[int, ...]

    @property
    def num_blocks(self) -> int:
        return len(self.starts) - 1

    def runs(self, rows: int) -> list[slice]:
        """Runs of whole blocks (grouped order) of at most `rows` rows, or one larger block."""
        out, start = [], 0
        for i in range(1, len(self.starts)):
            end = self.starts[i]
            nxt = self.starts[i + 1] if i + 1 < len(self.starts) else None
            if nxt is None or nxt - start > rows:
                out.append(slice(start, end))
                start = end
        return out


def label_codes(labels: ArrayLike, n: int, name: str = "blocks") -> tuple[np.ndarray, np.ndarray]:
    """(the distinct labels, sorted; the code 0..B−1 of every point) of a label per point."""
    try:
        arr = np.asarray(labels.detach().cpu() if isinstance(labels, Tensor) else labels)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be one label per data point; got {type(labels).__name__}"
                        ) from None
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must have one label per data point, shape ({n},); "
                         f"got shape {arr.shape}")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite labels")
    if arr.dtype.kind not in "iubfUSO":
        raise TypeError(f"{name} must hold integer (or string) labels; got dtype {arr.dtype}")
    if arr.dtype.kind == "O":
        missing = [i for i, v in enumerate(arr) if v is None or (isinstance(v, float) and v != v)]
        if missing:
            raise ValueError(f"{name} has no label for data point(s) {missing[:5]} (None or NaN): "
                             "give every point a label")
    try:
        unique, codes = np.unique(arr, return_inverse=True)
    except TypeError:  # labels that do not sort together, e.g. numbers and strings
        kinds = sorted({type(v).__name__ for v in arr})
        raise TypeError(f"{name} mixes labels of types {kinds}: use one type") from None
    return unique, codes.reshape(-1)


def make_blocking(codes: Tensor, alpha: Tensor) -> Blocking:
    """The grouped partition of block codes [N] (0..B−1) with the blocks' powers `alpha` [B]:
    blocks in order of size (then code), rows in their original order within a block."""
    B = alpha.shape[0]
    counts = torch.bincount(codes, minlength=B)
    rank = torch.empty_like(counts)
    rank[torch.argsort(counts * B + torch.arange(B, device=codes.device))] = torch.arange(
        B, device=codes.device)
    order = torch.argsort(rank[codes], stable=True)
    starts = (0, *torch.cumsum(torch.sort(counts).values, 0).tolist())
    return Blocking(order, codes[order], alpha, tuple(int(s) for s in starts))


#: A batch pads its blocks to the largest, S, at a cost of ~S²(S + M) each: a smaller block
#: joins it if padding adds at most a factor 1/PAD_FRACTION³ ≈ 1.4 to its own work, or if
#: the batch's padding stays below PAD_WORK in all (less than one more batch's fixed cost of
#: ~40 small torch calls). Measured (benchmarks/block_pep.py, N = 927 and 7373, M = 5–200).
PAD_FRACTION = 0.9
PAD_WORK = 2e6


def _batches(sizes: list[int], M: int) -> list[tuple[list[int], list[int], int]]:
    """Blocks of a run (contiguous, of these sizes) as batches of similar size for M inducing
    variables: (first rows, sizes, the padded size S), from the largest blocks down."""
    starts = [0]
    for s in sizes[:-1]:
        starts.append(starts[-1] + s)
    order = sorted(range(len(sizes)), key=sizes.__getitem__)  # ascending already, as grouped
    out, j = [], len(order)
    while j > 0:
        S, i = sizes[order[j - 1]], j - 1
        top, waste = S * S * (S + M), 0.0
        while i > 0:
            own = sizes[order[i - 1]] ** 2 * (sizes[order[i - 1]] + M)
            if top - own > own * (PAD_FRACTION**-3 - 1.0) and waste + top - own > PAD_WORK:
                break
            waste, i = waste + top - own, i - 1
        batch = order[i:j]
        out.append(([starts[k] for k in batch], [sizes[k] for k in batch], S))
        j = i
    return out


#: The forward pass keeps each run's factors (Kuf, a, and per batch a_b, D_b, C_b, C_b⁻¹P_b:
#: ~4·R·M + 2·R·S values for R rows) for the backward pass while all of them stay within
#: this many bytes; beyond it the backward pass recomputes them run by run. 256 MB holds the
#: bui2017 experiment's largest (N ≈ 10⁴, M = 200: ~100 MB): 1.3× faster there.
KEEP_BYTES = 2**28


class _Group(NamedTuple):
    """A batch of blocks in a run, padded to size S and factorised: `rows` [nb, S] (run
    positions; R for padding), `a` [nb, S, M] their a_n, `D` [nb, S, S], `alpha` [nb, 1, 1],
    `noise` [nb, S] and C = chol(αD + diag σ²) [nb, S, S]."""

    rows: Tensor
    a: Tensor
    D: Tensor
    alpha: Tensor
    noise: Tensor
    C: Tensor


def _padded(a: Tensor, yb: Tensor) -> Tensor:
    """[a; yᵀ] with one more, zero, column for the padding: [M + 1, R + 1]."""
    AY = a.new_zeros(a.shape[0] + 1, a.shape[1] + 1)
    AY[:-1, :-1], AY[-1, :-1] = a, yb
    return AY


class BlockPowerEPSums(ChunkedSums):
    """Σ over runs of whole blocks of ([A c; cᵀ s_y], s_loglam, s_d, s_pen) (module docstring);
    columns (X, y, block ids, α per row, σ² per row); outputs laid out as `PowerEPSums`'s.

    Backward, per block (P = [a_bᵀ, y_b], W = Λ⁻¹P, G the gradient of [A c; cᵀ s_y] with
    Gₛ = (G + Gᵀ)/2, w = (1−α)/α): ∂P = 2WGₛ, ∂Λ = −WGₛWᵀ + (g_sl + w g_sp)Λ⁻¹,
    ∂σ²_i = ∂Λ_ii − w g_sp/σ²_i, ∂D = α∂Λ + g_sd I = ∂Kff_bb, ∂a_b = ∂P[:, :M]ᵀ − 2a_b∂D,
    ∂y_b = ∂P[:, M]; then ∂Kuf = L⁻ᵀ∂a and ∂L = −L⁻ᵀ Σ ∂a aᵀ as for the point-wise family.
    The kernel's gradient from the within-block Kff is one vector-Jacobian product per run
    (its kernel parameters are inputs of the sums too). Where rounding made D indefinite
    beyond −σ²/α, the forward pass uses its PSD part and the gradient treats it as D.
    """

    def __init__(self, feature: InducingFeature, kernel: Kernel, L: Tensor,
                 noise: Tensor | None = None
                 ) -> None:
        """`noise`: one σ² for every point, an input of the sums (its gradient summed over
        all rows, and over ranks when the data are sharded); then the σ² column holds 1 per
        row. Otherwise the column holds each point's σ² (its gradient stays with the rows)."""
        self.kernel, self.M = kernel, feature.num_inducing
        self.kuf = cross_covariance(feature, kernel, L.dtype)
        # the within-block Kff's inputs: a radial kernel's ℓ and σ² values (its gradient by
        # hand, `radial_gram_gradients`), else the kernel's parameters (by autograd)
        self.radial = (isinstance(kernel, RadialKernel)
                       and kernel.profile_derivative(L.new_zeros(1)) is not None)
        if self.radial:
            self.ell, self.var = kernel.value("lengthscale"), kernel.value("variance")
            self.kff_params = tuple(t for t in (self.ell, self.var) if t.requires_grad)
        else:
            self.kff_params = tuple(p for p in kernel.parameters() if p.requires_grad)
        self.noise = None if noise is None else noise.detach().to(L.dtype)
        self.inputs = (*self.kuf.inputs, L, *self.kff_params, *(() if noise is None else (noise,)))
        self.L = L.detach()
        # run (its first row's address, rows) -> (Kuf, a, batches, C⁻¹P per batch), and bytes
        self._kept: dict[tuple[int, int], tuple[Tensor, Tensor, list[_Group], list[Tensor]]] = {}
        self._kept_bytes = 0

    def _groups(self, Xb: Tensor, ids: Tensor, alpha: Tensor, noise: Tensor
                ) -> tuple[Tensor, Tensor, list[_Group]]:
        """Kuf of the run, a = L⁻¹Kuf, and its blocks factorised in batches of similar size.

        A batch pads its blocks to its largest size S with rows that index one extra column
        (position R of the run's R rows): zero there in a and y, masked out of Kff and given
        σ² = 1, so Λ = diag(Λ_b, I) and the padding adds nothing to any sum; its gradients
        land on position R and are dropped."""
        L, R = self.L, Xb.shape[0]
        K = self.kuf.value(Xb)
        a = torch.linalg.solve_triangular(L, K, upper=False)
        sizes = torch.unique_consecutive(ids, return_counts=True)[1].tolist()
        kdiag = self.kuf.kdiag(Xb)
        a_pad = torch.cat([a, a.new_zeros(a.shape[0], 1)], 1)
        noise = noise.to(L.dtype) if self.noise is None else noise.to(L.dtype) * self.noise
        noise_pad = torch.cat([noise, noise.new_ones(1)])
        groups = []
        for first, count, S in _batches(sizes, self.M):
            f = torch.tensor(first, device=Xb.device)[:, None]
            i = torch.arange(S, device=Xb.device)
            rows = torch.where(i < torch.tensor(count, device=Xb.device)[:, None], f + i, R)
            if S == 1:
                Kbb = kdiag[rows[:, 0]][:, None, None]
            else:
                with torch.no_grad():
                    Kbb = self._kernel_blocks(Xb, rows)
            ab = a_pad[:, rows].permute(1, 2, 0)  # [nb, S, M]
            D = Kbb - ab @ ab.mT
            D = 0.5 * (D + D.mT)
            al = alpha[f[:, 0]].to(L.dtype)[:, None, None]
            sig = noise_pad[rows]
            S_ = torch.diag_embed(sig)  # [nb, S, S]: σ² of each point on the diagonal
            C, info = torch.linalg.cholesky_ex(al * D + S_)
            if bool((info > 0).any()):  # D indefinite beyond −σ²/α by rounding: its PSD part
                bad = torch.nonzero(info > 0)[:, 0]
                w, U = torch.linalg.eigh(D[bad])
                D = D.index_put((bad,), (U * w.clamp_min(0.0)[:, None, :]) @ U.mT)
                C = torch.linalg.cholesky(al * D + S_)
            groups.append(_Group(rows, ab, D, al, sig, C))
        return K, a, groups

    def _kernel_blocks(self, Xb: Tensor, rows: Tensor) -> Tensor:
        """Kff of the padded blocks `rows` [nb, S] of the run Xb (zero where padded)."""
        R = Xb.shape[0]
        real = (rows < R).to(self.L.dtype)
        K = self.kernel.K_blocks(Xb[rows.clamp_max(R - 1)]).to(self.L.dtype)
        return K * (real[:, :, None] * real[:, None, :])

    def zeros(self) -> list[Tensor]:
        z = self.L.new_zeros
        return [z(self.M + 1, self.M + 1), z(()), z(()), z(())]

    def add(self, acc: list[Tensor], Xb: Tensor, yb: Tensor, *extra: Tensor) -> None:
        ids, alpha, noise = extra  # the block ids, powers and noise of every row
        K, a, groups = self._groups(Xb, ids, alpha, noise)
        AY = _padded(a, yb)
        Vs = []
        for g in groups:
            V = torch.linalg.solve_triangular(g.C, AY[:, g.rows].permute(1, 2, 0), upper=False)
            Vs.append(V)
            Vf = V.reshape(-1, self.M + 1)
            acc[0].add_(Vf.mT @ Vf)
            # log|Λ_b| − log|S_b| = log|I + α S^{-1/2} D S^{-1/2}|, as logs of ratios near 1
            per_block = 2.0 * torch.log(torch.diagonal(g.C, dim1=-2, dim2=-1)
                                        / torch.sqrt(g.noise)).sum(-1)
            acc[1].add_(per_block.sum() + torch.log(g.noise).sum())
            acc[2].add_(torch.diagonal(g.D, dim1=-2, dim2=-1).sum())
            al = g.alpha[:, 0, 0]
            acc[3].add_(((1.0 - al) / al * per_block).sum())
        if self.backward_follows:
            self._keep((Xb.data_ptr(), Xb.shape[0]), (K, a, groups, Vs))

    def _keep(self, key: tuple[int, int],
              state: tuple[Tensor, Tensor, list[_Group], list[Tensor]]) -> None:
        """Keep a run's factors for the backward pass if they fit in KEEP_BYTES with the rest."""
        K, a, groups, Vs = state
        tensors = [K, a, *Vs, *(t for g in groups for t in (g.a, g.D, g.C))]
        size = sum(t.numel() * t.element_size() for t in tensors)
        if self._kept_bytes + size <= KEEP_BYTES:
            self._kept[key] = state
            self._kept_bytes += size

    def finish(self, acc: list[Tensor]) -> tuple[Tensor, ...]:
        AA, M = acc[0], self.M
        return AA[:M, :M].clone(), AA[M, :M].clone(), AA[M, M].clone(), acc[1], acc[2], acc[3]

    def grad_zeros(self, grads: Sequence[Tensor]) -> list:
        gA, gc, gsy, gsl, gsd, gsp = (g.to(self.L.dtype) for g in grads)
        G = torch.zeros(self.M + 1, self.M + 1, dtype=self.L.dtype, device=self.L.device)
        G[: self.M, : self.M], G[self.M, : self.M], G[self.M, self.M] = gA, gc, gsy
        self._Gs = 0.5 * (G + G.mT)
        self._gsl, self._gsd, self._gsp = gsl, gsd, gsp
        self._SL = torch.zeros_like(self.L)  # Σ ∂a aᵀ
        self._gkff = [torch.zeros_like(p) for p in self.kff_params]
        self._gnoise = self.L.new_zeros(())  # of the one σ², when it is an input
        return self.kuf.grad_zeros()

    def grad_chunk(self, gacc: list, Xb: Tensor, yb: Tensor, *rest: Any
                   ) -> tuple[Tensor | None, ...]:
        ids, alpha, noise, _ = rest
        M = self.M
        kept = self._kept.pop((Xb.data_ptr(), Xb.shape[0]), None)
        K, a, groups, Vs = kept if kept is not None else (*self._groups(Xb, ids, alpha, noise),
                                                          None)
        R = Xb.shape[0]
        AY = _padded(a, yb)
        gAY = torch.zeros_like(AY)  # [∂a; ∂yᵀ] and the padding's column
        gnoise = a.new_zeros(R + 1)
        gkdiag = a.new_zeros(R + 1)
        block_grads = []  # (rows, ∂Kff_bb) of the batches of blocks larger than one point
        for j, g in enumerate(groups):
            if Vs is None:
                W = torch.cholesky_solve(AY[:, g.rows].permute(1, 2, 0), g.C)  # Λ⁻¹P
            else:  # Λ⁻¹P = C⁻ᵀ(C⁻¹P), C⁻¹P kept from the forward pass
                W = torch.linalg.solve_triangular(g.C.mT, Vs[j], upper=True)
            WG = W @ self._Gs
            eye = torch.eye(g.C.shape[-1], dtype=a.dtype, device=a.device).expand_as(g.C)
            weight = (1.0 - g.alpha) / g.alpha
            g_lam = (-(WG @ W.mT)
                     + (self._gsl + weight * self._gsp) * torch.cholesky_inverse(g.C))
            gnoise[g.rows] = (torch.diagonal(g_lam, dim1=-2, dim2=-1)
                              - weight[:, :, 0] * self._gsp / g.noise)
            gD = g.alpha * g_lam + self._gsd * eye
            gD = 0.5 * (gD + gD.mT)
            gP = 2.0 * WG
            gP[..., :M] -= 2.0 * gD @ g.a
            gAY[:, g.rows] = gP.permute(2, 0, 1)
            if g.rows.shape[1] == 1:
                gkdiag[g.rows[:, 0]] = gD[:, 0, 0]
            else:
                block_grads.append((g.rows, gD))
        ga = gAY[:M, :R]
        self._SL.addmm_(ga, a.mT)
        gK = torch.linalg.solve_triangular(self.L.mT, ga, upper=True)
        self.kuf.grad_chunk(gacc, Xb, K, gK, gkdiag[:R])
        if block_grads and self.kff_params and self.radial:
            self._radial_gradients(Xb, block_grads)
        elif block_grads and self.kff_params:
            with torch.enable_grad():
                outs = [self._kernel_blocks(Xb, rows) for rows, _ in block_grads]
                found = torch.autograd.grad(outs, self.kff_params,
                                            [gD for _, gD in block_grads], allow_unused=True)
            for total, part in zip(self._gkff, found):
                if part is not None:
                    total.add_(part)
        want = self.want_columns or (False,) * 4
        gy = gAY[M, :R].to(yb.dtype) if want[0] else None
        if self.noise is not None:  # one σ²: ∂σ² = Σ_rows ∂σ²_n (the column holds ones)
            self._gnoise += gnoise[:R].sum()
            return gy, None, None, None
        return gy, None, None, gnoise[:R].to(noise.dtype) if want[3] else None

    def _radial_gradients(self, Xb: Tensor, block_grads: list[tuple[Tensor, Tensor]]) -> None:
        """Add ⟨∂Kff_bb, Kff_bb⟩'s gradient in ℓ and σ² of a radial kernel, batch by batch
        (padding rows masked out of ∂Kff; each block centred on its mean)."""
        R, dtype = Xb.shape[0], self.L.dtype
        ell = self.ell.detach().to(dtype).expand(Xb.shape[1])
        var = self.var.detach().to(dtype)
        g_ell, g_var = torch.zeros_like(ell), var.new_zeros(())
        for rows, gD in block_grads:
            real = (rows < R).to(dtype)
            Xg = Xb[rows.clamp_max(R - 1)].to(dtype)
            Xg = Xg - Xg.mean(-2, keepdim=True)
            G = gD * (real[:, :, None] * real[:, None, :])
            parts = radial_gram_gradients(cast(RadialKernel, self.kernel),
                                          scaled_squared_distance(Xg, None, ell),
                                          G, Xg, Xg, ell, var)
            g_ell += parts[0]
            g_var += parts[1]
        found = {id(self.ell): g_ell.sum() if self.ell.dim() == 0 else g_ell, id(self.var): g_var}
        for total, t in zip(self._gkff, self.kff_params):
            total.add_(found[id(t)].to(total.dtype))

    def grad_finish(self, gacc: list, grads: Sequence[Tensor]) -> list:
        gL = -torch.linalg.solve_triangular(self.L.mT, self._SL, upper=True).tril()
        L = self.inputs[len(self.kuf.inputs)]
        noise = [] if self.noise is None else [self._gnoise.to(self.inputs[-1].dtype)]
        return [*self.kuf.grad_finish(gacc), gL.to(L.dtype), *self._gkff, *noise]


def block_alpha(alpha: float | Sequence[float] | Tensor, num_blocks: int) -> Tensor:
    """The powers of `num_blocks` blocks from one α or one per block, each in (0, 1]."""
    values = torch.as_tensor(alpha, dtype=torch.float64).reshape(-1)
    if values.numel() == 1:
        values = values.expand(num_blocks).clone()
    if values.numel() != num_blocks:
        raise ValueError(f"alpha must be one power or one per block ({num_blocks} blocks); "
                         f"got {values.numel()} values")
    if not bool(((values > 0) & (values <= 1)).all()) or any(math.isnan(v) for v in values):
        raise ValueError("alpha must lie in (0, 1] for every block (α → 0 is VFE)")
    return values
