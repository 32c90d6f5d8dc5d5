"""Fourier inducing features: Gaussian windows times sinusoids (Lázaro-Gredilla &
Figueiras-Vidal 2009). Data only; the closed forms are in `covariances/fourier.py`.

Time–frequency features (TFIF): v(x; m) = N(x; μ_m, diag c_m²) cos(φ_m + ω_mᵀ(x − μ_m)),
each with its own centre μ_m, widths c_m, frequency ω_m and phase φ_m. Frequency features
(FIF): the same with every window at one fixed centre (the origin of the inputs), so that
the features differ only in frequency and phase — a spectral rather than spatial summary.

Limits (checked in the tests): TFIF with ω = 0, φ = 0 are multi-scale features with δ = c;
as c → 0 with φ = 0 they are inducing points f(μ) for any ω.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..parameters import as_user_value
from ..validation import ArrayLike, seeded_generator
from .base import InducingFeature, checked_array
from .initialisation import cluster_spreads, initial_inducing_inputs

#: Lower bound on the window widths c: only c² enters the maths and c = 0 is allowed.
WIDTH_FLOOR = 0.0


class Fourier(InducingFeature):
    """M Fourier inducing features.

    Shapes: frequencies ω [M, D], widths c [M, D] (positive; a scalar or [D] is broadcast),
    phases φ [M] (default 0), all trainable; `centres` μ [M, D] makes time–frequency features
    with trainable centres, None (the default) frequency features whose windows sit at the
    origin (a fixed buffer, moved only by `standardize_X`). With a squared-exponential kernel:
    Kuu [M, M], Kuf [M, N] for X [N, D].

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> from sparsegp import covariances
        >>> fif = sg.features.Fourier(frequencies=np.arange(5.0)[:, None], widths=2.0)
        >>> fif.time_frequency, fif.num_inducing, fif.locations() is None
        (False, 5, True)
        >>> X, y = sg.datasets.snelson()
        >>> tfif = sg.features.Fourier.from_data(X, 6)  # time–frequency: centres from X
        >>> tfif.time_frequency, tuple(tfif.locations().shape)
        (True, (6, 1))
        >>> k = sg.kernels.SquaredExponential(lengthscale=1.0)
        >>> tuple(covariances.Kuu(tfif, k).shape)
        (6, 6)
    """

    frequencies: Tensor
    phases: Tensor
    centres: Tensor  # a parameter for time–frequency features, a buffer otherwise

    def __init__(self, frequencies: ArrayLike, widths: ArrayLike, centres: ArrayLike | None = None,
                 phases: ArrayLike | None = None) -> None:
        super().__init__()
        omega = checked_array(frequencies, "frequencies", 2)
        M, D = omega.shape
        c = torch.as_tensor(widths, dtype=omega.dtype)
        if c.dim() > 2 or (c.dim() == 2 and c.shape != omega.shape) or (
                c.dim() == 1 and c.shape[0] != D):
            raise ValueError(f"widths must be a scalar, [D] = [{D}] or [M, D] = [{M}, {D}]; got "
                             f"shape {tuple(c.shape)}")
        phi = torch.zeros(M, dtype=omega.dtype) if phases is None else torch.as_tensor(
            phases, dtype=omega.dtype)
        if phi.shape != (M,) or not bool(torch.isfinite(phi).all()):
            raise ValueError(f"phases must be M = {M} finite numbers; got shape {tuple(phi.shape)}")
        self._add_free("frequencies", omega)
        self._add_positive("widths", c.expand(M, D).clone(), WIDTH_FLOOR, max_dim=2)
        self._add_free("phases", phi.detach().clone())
        if centres is None:
            self.register_buffer("centres", torch.zeros(M, D, dtype=omega.dtype))
        else:
            mu = checked_array(centres, "centres", 2)
            if mu.shape != omega.shape:
                raise ValueError(f"centres must have shape [M, D] = [{M}, {D}]; got "
                                 f"{list(mu.shape)}")
            self._add_free("centres", mu)

    @property
    def time_frequency(self) -> bool:
        """True for time–frequency features (trainable centres)."""
        return "centres" in self._parameters

    @property
    def widths(self) -> Any:
        return as_user_value(self.value("widths"))

    @property
    def num_inducing(self) -> int:
        return self.frequencies.shape[0]

    @property
    def input_dim(self) -> int:
        return self.frequencies.shape[1]

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__,
                "args": {"shape": list(self.frequencies.shape),
                         "time_frequency": self.time_frequency}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Fourier:
        M, D = cfg["args"]["shape"]
        zeros = torch.zeros(M, D, dtype=torch.float64)
        return cls(zeros, 1.0, zeros if cfg["args"]["time_frequency"] else None)

    def transformed(self, shift: Tensor, scale: Tensor) -> Fourier:
        # x = scale·x' + shift: the window moves and shrinks like a multi-scale window, and
        # ωᵀ(x − μ) = (scale·ω)ᵀ(x' − μ')
        centres = (self.centres.detach() - shift) / scale
        new = type(self)(self.frequencies.detach() * scale, self.value("widths").detach() / scale,
                         centres if self.time_frequency else None, self.phases.detach())
        if not self.time_frequency:  # the windows stay fixed, at the moved origin
            new.centres.copy_(centres)
        return new

    def locations(self) -> Tensor | None:
        return self.centres if self.time_frequency else None

    def set_locations(self, Z: Tensor) -> None:
        if not self.time_frequency:
            super().set_locations(Z)
        self.set_value("centres", Z)

    def extended(self, Z: Tensor) -> InducingFeature:
        """Time–frequency features only: windows at Z with ω = 0, φ = 0 and widths 1e-6 of the
        current mean width, inducing points up to O(1e-12) in the covariances."""
        if not self.time_frequency:
            return super().extended(Z)
        widths = self.value("widths").detach()
        Z = Z.to(self.centres)
        zeros = torch.zeros_like(Z)
        return type(self)(torch.cat([self.frequencies.detach(), zeros]),
                          torch.cat([widths, torch.full_like(Z, 1e-6 * float(widths.mean()))]),
                          torch.cat([self.centres.detach(), Z]),
                          torch.cat([self.phases.detach(), zeros[:, 0]]))

    @classmethod
    def from_data(cls, X: ArrayLike, num_inducing: int, *, seed: int = 0, method: str = "kmeans++",
                  time_frequency: bool = True, width: float = 0.5) -> Fourier:
        """Time–frequency features: centres chosen from X by `method` (seeded k-means++),
        widths `width` times the spread of each centre's cluster. Frequency features: windows
        at the origin as wide as the data. Frequencies drawn (seeded) from N(0, 1/spread²)
        per dimension and phases uniformly in [0, 2π)."""
        Z = initial_inducing_inputs(X, num_inducing, method, seed)
        X = torch.as_tensor(X, dtype=Z.dtype)
        spread = X.std(0) if X.shape[0] > 1 else torch.ones_like(Z[0])
        spread = torch.where(spread > 0, spread, torch.ones_like(spread))
        g = seeded_generator(seed)
        omega = torch.randn(Z.shape, generator=g, dtype=Z.dtype) / spread
        phases = 2 * math.pi * torch.rand(Z.shape[0], generator=g, dtype=Z.dtype)
        if time_frequency:
            return cls(omega, width * cluster_spreads(X, Z), Z, phases)
        return cls(omega, spread.expand_as(Z).clone(), None, phases)
