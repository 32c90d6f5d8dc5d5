"""Block (PITC-like) Power EP: the collapsed family with per-block D_b and powers α_b (MATH.md §2).

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
differ per point (Λ_b = α_b D_b + diag σ²_b): the noise is a column of the stream. Cost
O(N·M² + Σ_b |b|³), memory O(chunk·M + M² + max_b |b|²): the data are sorted by block once
and streamed in short runs of whole blocks; each run's Kff is formed once (its diagonal
blocks gathered from it) and blocks of equal size are factorised as one batch. The
backward pass recomputes each run under autograd (no N×M tensor is kept).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import numpy as np
import torch
from torch import Tensor

from ..covariances import Kuf
from .recomputed import RecomputedStream

#: A run of blocks holds at most max(RUN_ROWS, RUN_BLOCKS × the largest block) rows: it forms
#: its Kff whole (O(run²) kernel values, of which only Σ_b |b|² are used) and pays a fixed
#: Python overhead (measured best on 2 cores for blocks of 5 to 200 points).
RUN_ROWS = 256
RUN_BLOCKS = 4


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

    @property
    def max_size(self) -> int:
        return max(b - a for a, b in zip(self.starts[:-1], self.starts[1:]))

    def runs(self, rows: int) -> list[slice]:
        """Runs of whole blocks (grouped order) of at most `rows` rows (and at most
        max(RUN_ROWS, RUN_BLOCKS × the largest block): a run's Kff is formed whole), or one
        larger block."""
        rows = min(rows, max(RUN_ROWS, RUN_BLOCKS * self.max_size))
        out, start = [], 0
        for i in range(1, len(self.starts)):
            end = self.starts[i]
            nxt = self.starts[i + 1] if i + 1 < len(self.starts) else None
            if nxt is None or nxt - start > rows:
                out.append(slice(start, end))
                start = end
        return out


def label_codes(labels: Any, n: int, name: str = "blocks") -> tuple[np.ndarray, np.ndarray]:
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
    unique, codes = np.unique(arr, return_inverse=True)
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


class BlockPowerEPStream(RecomputedStream):
    """Σ over runs of whole blocks of ([A c; cᵀ s_y], s_loglam, s_d, s_pen) (module docstring);
    columns (X, y, block ids, α per row, σ² per row); outputs laid out as `PowerEPStream`'s."""

    # its extra columns: the block ids, α and σ² of every point
    def sums(self, L: Tensor, Xb: Tensor, yb: Tensor, ids: Tensor, alpha: Tensor,  # type: ignore[override]
             noise: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One run's sums as a differentiable function of the kernel, feature, L, y and σ²."""
        M = self.M
        a = torch.linalg.solve_triangular(L, Kuf(self.feature, self.kernel, Xb).to(L.dtype),
                                          upper=False)
        AY = torch.cat([a, yb.to(L.dtype)[None]], 0)  # [M + 1, B]
        noise = noise.to(L.dtype)
        sizes = torch.unique_consecutive(ids, return_counts=True)[1]
        starts = torch.cumsum(sizes, 0) - sizes
        AA = L.new_zeros(M + 1, M + 1)
        log_det = d_sum = pen = L.new_zeros(())
        # the run's Kff once (runs are short: `RUN_ROWS`), its diagonal blocks gathered
        Kff = self.kernel.K(Xb).to(L.dtype) if int(sizes.max()) > 1 else None
        for s in torch.unique(sizes).tolist():
            first = starts[sizes == s]
            rows = first[:, None] + torch.arange(s, device=first.device)  # [nb, s]
            Kbb = (self.kernel.K_diag(Xb[rows[:, 0]]).to(L.dtype)[:, None, None] if s == 1
                   else cast(Tensor, Kff)[rows[:, :, None], rows[:, None, :]])  # a run with s > 1
            ab = a[:, rows].permute(1, 2, 0)  # [nb, s, M]
            D = Kbb - ab @ ab.mT
            D = 0.5 * (D + D.mT)
            al = alpha[first].to(L.dtype)[:, None, None]
            S = torch.diag_embed(noise[rows])  # [nb, s, s]: σ² of each point on the diagonal
            C, info = torch.linalg.cholesky_ex(al * D + S)
            if bool((info > 0).any()):  # D indefinite beyond −σ²/α by rounding: its PSD part
                bad = torch.nonzero(info > 0)[:, 0]
                w, U = torch.linalg.eigh(D[bad])
                D = D.index_put((bad,), (U * w.clamp_min(0.0)[:, None, :]) @ U.mT)
                C = torch.linalg.cholesky(al * D + S)
            V = torch.linalg.solve_triangular(C, AY[:, rows].permute(1, 2, 0), upper=False)
            Vf = V.reshape(-1, M + 1)
            AA = AA + Vf.mT @ Vf
            # log|Λ_b| − log|S_b| = log|I + α S^{-1/2} D S^{-1/2}|, as logs of ratios near 1
            per_block = 2.0 * torch.log(torch.diagonal(C, dim1=-2, dim2=-1)
                                        / torch.sqrt(noise[rows])).sum(-1)
            log_det = log_det + per_block.sum() + torch.log(noise[rows]).sum()
            d_sum = d_sum + torch.diagonal(D, dim1=-2, dim2=-1).sum()
            pen = pen + ((1.0 - al[:, 0, 0]) / al[:, 0, 0] * per_block).sum()
        return AA, log_det, d_sum, pen


def block_alpha(alpha: float | Sequence[float] | Tensor, num_blocks: int) -> Tensor:
    """The powers of `num_blocks` blocks from one α or one per block, each in (0, 1]."""
    values = torch.as_tensor(alpha, dtype=torch.float64).reshape(-1)
    if values.numel() == 1:
        values = values.expand(num_blocks).clone()
    if values.numel() != num_blocks:
        raise ValueError(f"alpha must be one power or one per block ({num_blocks} blocks); "
                         f"got {values.numel()} values")
    if not bool(((values > 0) & (values <= 1)).all()) or any(math.isnan(v) for v in values):
        raise ValueError("alpha must lie in (0, 1] for every block (α → 0 is 'vfe')")
    return values
