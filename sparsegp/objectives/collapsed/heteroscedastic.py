"""The collapsed family with a noise variance per data point, σ²_n (docs/math.md §2 with
Λ = diag(α d_n + σ²_n); known heteroscedastic noise, or one trainable noise per group).

Every sum of docs/math.md §2 keeps its form with σ² replaced by σ²_n: λ_n = α d_n + σ²_n for Power
EP (s_pen = (1−α)/α Σ log(1 + α d_n/σ²_n)), λ_n = σ²_n for VFE (s_pen = Σ d_n/σ²_n, Titsias'
trace term) and DTC (no penalty). The noise is a column of the sums, so its gradient comes
back per point (and from there to a per-group parameter through autograd's indexing).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ...conditionals import nystrom_residual
from ...covariances import Kuf
from ...features.base import InducingFeature
from ...kernels.base import Kernel
from .recomputed import RecomputedSums


class PointNoiseSums(RecomputedSums):
    """Σ over chunks of ([A c; cᵀ s_y], s_loglam, s_d, s_pen) with a σ²_n column; `fam` is
    the family member (a `collapsed.Family`: mode 'vfe', 'dtc' or 'pep' with power α)."""

    def __init__(self, feature: InducingFeature, kernel: Kernel, L: Tensor, fam: Any) -> None:
        super().__init__(feature, kernel, L)
        self.mode, self.alpha = fam.mode, fam.alpha

    # its one extra column: the noise σ²_n of every point
    def sums(self, L: Tensor, Xb: Tensor, yb: Tensor, *extra: Tensor
             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        (noise,) = extra
        a = torch.linalg.solve_triangular(L, Kuf(self.feature, self.kernel, Xb).to(L.dtype),
                                          upper=False)
        noise = noise.to(L.dtype)
        d = nystrom_residual(a, self.kernel.K_diag(Xb).to(L.dtype))
        if self.mode == "pep":
            lam = self.alpha * d + noise
            pen = (1.0 - self.alpha) / self.alpha * torch.log1p(self.alpha * d / noise).sum()
        else:
            lam = noise
            pen = (d / noise).sum() if self.mode == "vfe" else d.new_zeros(())
        W = torch.cat([a, yb.to(L.dtype)[None]], 0) * torch.rsqrt(lam)
        return W @ W.mT, torch.log(lam).sum(), d.sum(), pen
