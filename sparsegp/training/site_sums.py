"""Running sums of the Power-EP sites for the stochastic schedule (Bui et al. 2017, §3.9).

q(u) is the posterior of all N sites: A = Σ τ_n a_n a_nᵀ, c = Σ ν_n a_n with a_n = L⁻¹k_n
(docs/math.md §5). Recomputing them for every minibatch step costs a pass over all the data, so
that an epoch of N/B steps would cost N/B passes. `RunningSiteSums` keeps them instead:
computed by a refresh at the hyperparameters θ₀ of that moment (one pass), and updated
exactly for the rows whose sites a sweep changes (O(B·M²)). Between refreshes the
hyperparameters move by Adam steps. The sites act on u through h_n = w_nᵀu, w_n = Kuu⁻¹k_n;
`totals(L)` keeps the weights w_n of θ₀ and the current prior, i.e. in the coordinates
whitened by the current Cholesky factor L of Kuu, A = RᵀÂR and c = Rᵀĉ with R = L₀⁻¹L
(≈ I while θ moves little, so nothing is amplified). w_n does not change with the kernel
variance, so that move is exact; lengthscales and inducing inputs leave the w_n stale by
the steps since the refresh. (Keeping the kernel columns k_n of θ₀ instead, A = TÂTᵀ with
T = L⁻¹L₀, fits worse: on 400 points with batches of 20 and one refresh an epoch it ended
6–8 nats lower, against 0.35–1.9 with the weights.)
"""

from __future__ import annotations

import copy
from typing import Protocol

import torch
from torch import Tensor

from .. import covariances as cov
from ..features.base import InducingFeature
from ..kernels.base import Kernel
from ..linalg import solve_lower
from ..objectives import pep_classification as pep


class SiteModel(Protocol):
    """A model with sites, as `RunningSiteSums` reads it: the sites' precisions `tau` and
    natural means `nu` [N] of the inputs `X` [N, D], the kernel, the inducing feature, the
    jitter of Kuu and the rows per chunk of a pass over the data (`_chunk()`)."""

    @property
    def X(self) -> Tensor: ...

    @property
    def tau(self) -> Tensor: ...

    @property
    def nu(self) -> Tensor: ...

    @property
    def kernel(self) -> Kernel: ...

    @property
    def feature(self) -> InducingFeature: ...

    @property
    def jitter(self) -> float: ...

    def _chunk(self) -> int: ...


class RunningSiteSums:
    """Â = Σ τ_n â_n â_nᵀ and ĉ = Σ ν_n â_n, â_n = L₀⁻¹k₀(x_n), of a model with sites (`tau`,
    `nu`, `X`, `kernel`, `feature`, `jitter`, `_chunk()`), at the kernel and inducing
    variables copied by the last `refresh()`."""

    def __init__(self, model: SiteModel) -> None:
        self.model = model
        self.refresh()

    def refresh(self) -> None:
        """Copy the kernel and inducing variables and recompute the sums: O(N·M²)."""
        m = self.model
        with torch.no_grad():
            self.kernel, self.feature = copy.deepcopy(m.kernel), copy.deepcopy(m.feature)
            self.L0, _ = cov.Kuu_cholesky(self.feature, self.kernel, m.jitter)
            s = pep.site_statistics(self.kernel, self.feature, m.X, self.L0, m.tau, m.nu,
                                    m._chunk())
            self.A, self.c = s.A, s.c

    def update(self, idx: Tensor, d_tau: Tensor, d_nu: Tensor) -> None:
        """The sites of the rows `idx` changed by (Δτ, Δν): O(|idx|·M²)."""
        m = self.model
        with torch.no_grad():
            s = pep.site_statistics(self.kernel, self.feature, m.X[idx], self.L0, d_tau, d_nu,
                                    m._chunk())
            self.A, self.c = self.A + s.A, self.c + s.c

    def totals(self, L: Tensor) -> tuple[Tensor, Tensor]:
        """(A, c) in the coordinates whitened by the current factor L, with the sites' weights
        w_n = Kuu⁻¹k_n of θ₀: RᵀÂR and Rᵀĉ with R = L₀⁻¹L."""
        with torch.no_grad():
            R = solve_lower(self.L0, L.detach())
            A = R.mT @ self.A @ R
            return 0.5 * (A + A.mT), R.mT @ self.c
