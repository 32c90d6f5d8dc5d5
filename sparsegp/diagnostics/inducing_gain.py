"""What adding one inducing input would do to each term of the objective, without refitting.

The collapsed objective splits into three terms (Bauer, van der Wilk & Rasmussen 2016):

  F = −½ yᵀ(Qff + Λ)⁻¹y  (data fit)  − ½ log|Qff + Λ| − (N/2) log 2π  (complexity)  + penalty

where the penalty ("trace term") is −Σ d_n/(2σ²) for VFE, −(1−α)/(2α) Σ log(1 + α d_n/σ²)
for Power EP and 0 for FITC and DTC. Adding an inducing input z changes Qff by a rank-one
matrix bbᵀ (docs/math.md §3; van der Wilk 2018, App. B):

  c = k(z,z) − k_zuᵀKuu⁻¹k_zu,  b = (Kfu Kuu⁻¹ k_uz − k_fz)/√c,  Qff⁺ = Qff + bbᵀ,

so that for VFE, with G = Qff + σ²I,

  ΔF_fit = ½ (yᵀG⁻¹b)²/(1 + bᵀG⁻¹b),  ΔF_complexity = −½ log(1 + bᵀG⁻¹b),  ΔF_trace = ½ bᵀb/σ²,

and ΔF ≥ 0 (G ⪰ σ²I gives bᵀG⁻¹b ≤ bᵀb/σ² and log(1 + x) ≤ x). DTC has the same data fit and
complexity changes and no trace term. G⁻¹ is applied through Woodbury with the M×M factors
of the objective (G⁻¹ = σ⁻²I − σ⁻⁴ Vᵀ B⁻¹ V, V = L⁻¹Kuf, B = I + VVᵀ/σ² = L_B L_Bᵀ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from .. import covariances as cov
from ..features.base import InducingFeature
from ..features.inducing_points import InducingPoints
from ..linalg import solve_lower
from ..objectives.collapsed.members import factor_and_statistics, family_terms, solve
from ..runtime.chunking import chunk_slices
from ..validation import ArrayLike
from .view import RegressionView, view_of

#: Elements of one [data chunk × candidate chunk] temporary (8 MB in float64).
_BLOCK_ELEMENTS = 2**20


class ObjectiveTerms(NamedTuple):
    """The objective split into data fit, complexity (with the log 2π constant) and trace."""

    data_fit: float
    complexity: float
    trace: float

    @property
    def total(self) -> float:
        return self.data_fit + self.complexity + self.trace


@dataclass(frozen=True)
class InducingGain:
    """Change of each objective term from adding one inducing point at each candidate.

    Shapes: candidates [C, D] (units of X), every other array [C]. `method` is 'rank-one'
    (vectorised closed form: VFE, DTC) or 'brute-force' (objective recomputed with M + 1
    inducing inputs: FITC, Power EP). Positive values improve the objective.
    """

    candidates: np.ndarray
    data_fit: np.ndarray
    complexity: np.ndarray
    trace: np.ndarray
    method: str

    @property
    def total(self) -> np.ndarray:
        return self.data_fit + self.complexity + self.trace

    @property
    def best(self) -> int:
        """Index of the candidate whose addition improves the objective most."""
        return int(np.argmax(self.total))


def _view(model: object) -> RegressionView:
    view = view_of(model)
    if view.problem is None:
        raise TypeError("inducing-variable gains need a sparse model (SGPR); got "
                        f"{type(model).__name__}")
    if view.summary is not None:
        raise TypeError(f"inducing-variable gains of a {type(model).__name__} are not "
                        "computed: they are written for one batch of data, and its objective "
                        "also holds the summary of the data before the batch")
    return view


def objective_terms(model: object, feature: InducingFeature | None = None) -> ObjectiveTerms:
    """The model's objective split into its three terms, in the units of y.

    `feature` (an inducing feature, or inducing inputs [M', D], in the model's internal units)
    replaces the model's inducing variables. The terms sum to `model.log_marginal_likelihood()`
    for the same inducing variables.
    """
    view = _view(model)
    assert view.problem is not None  # `_view` checked: a sparse model
    return _terms(view, view.problem.feature if feature is None else feature)


def _terms(view: RegressionView, feature: InducingFeature) -> ObjectiveTerms:
    if isinstance(feature, Tensor):
        feature = InducingPoints(feature.detach())
    assert view.problem is not None  # `_view` checked: a sparse model
    p = view.problem._replace(feature=feature, compute_dtype=None)
    with torch.no_grad():
        _, _, stats = factor_and_statistics(p)
        fit, complexity, trace = family_terms(stats, solve(stats))
    return ObjectiveTerms(float(fit), float(complexity) + view.offset, float(trace))


def inducing_gain(model: object, candidates: ArrayLike) -> InducingGain:
    """ΔF of each objective term from adding one inducing point at each candidate location.

    Shapes: candidates [C, D] in the units of X. Nothing is refitted: the hyperparameters and
    the other inducing variables stay as they are; the model's inducing variables may be any
    feature (the added one is a function value f(z), whose covariances with them are
    `Kuf(feature, z)`). For VFE and DTC with one noise variance the vectorised rank-one
    formula (module docstring; Bauer et al. 2016, van der Wilk 2018 App. B) costs O(C·N·M + N·M²) time and
    O(B·C + C·M + M²) memory, streamed over chunks of the data. FITC and Power EP change the
    per-point effective noise λ_n as well (not a rank-one update), so they are evaluated by
    brute force: the objective recomputed with M + 1 inducing variables for every candidate,
    O(C·N·M²). Not for data sharded over processes.
    """
    view = _view(model)
    assert view.problem is not None  # `_view` checked: a sparse model
    if view.sharded:  # each rank would see its own shard's gain
        raise RuntimeError("inducing_gain() needs all the data in one process; it does not "
                           "support data sharded over torch.distributed ranks")
    Zc = view.internal(candidates)
    if view.problem.fam.mode in ("vfe", "dtc") and view.problem.noise.dim() == 0:
        fit, complexity, trace = _rank_one_gain(view, Zc)
        method = "rank-one"
    else:
        fit, complexity, trace = _brute_force_gain(view, Zc)
        method = "brute-force"
    return InducingGain(view.user(Zc).cpu().numpy(), fit, complexity, trace, method)


def _brute_force_gain(view: RegressionView, Zc: Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    assert view.problem is not None  # `_view` checked: a sparse model
    feature = view.problem.feature
    base = _terms(view, feature)
    out = np.zeros((3, Zc.shape[0]))
    for i in range(Zc.shape[0]):
        t = _terms(view, feature.extended(Zc[i:i + 1]))
        out[:, i] = (t.data_fit - base.data_fit, t.complexity - base.complexity,
                     t.trace - base.trace)
    return out[0], out[1], out[2]


def _rank_one_gain(view: RegressionView, Zc: Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rank-one formula for VFE (and DTC, without its trace change), vectorised over Zc."""
    assert view.problem is not None  # `_view` checked: a sparse model
    p = view.problem._replace(compute_dtype=None)
    kernel, feature, X, y, noise = p.kernel, p.feature, p.X, p.y, p.noise
    with torch.no_grad():
        L, used, stats = factor_and_statistics(p)
        # the jitter the (M+1)-variable Kuu gets
        eps = used * float(torch.diagonal(cov.Kuu(feature, kernel)).mean())
        s = solve(stats)  # B = I + VVᵀ/σ² = L_B L_Bᵀ, e = L_B⁻¹ V y/σ²
        M, N, C = feature.num_inducing, X.shape[0], Zc.shape[0]
        c_size = min(C, 1024)
        d_size = max(1, min(N, _BLOCK_ELEMENTS // max(c_size, M)))
        parts = []
        for cs in chunk_slices(C, c_size):
            Zb = Zc[cs]
            a = solve_lower(L, cov.Kuf(feature, kernel, Zb))  # [M, Cb]  L⁻¹k_uz
            c = kernel.K_diag(Zb) + eps - (a * a).sum(0)  # [Cb]  Schur complement
            rr = torch.zeros(a.shape[1], dtype=a.dtype, device=a.device)
            yr = torch.zeros_like(rr)
            Vr = torch.zeros_like(a)
            for ds in chunk_slices(N, d_size):
                V = solve_lower(L, cov.Kuf(feature, kernel, X[ds]))  # [M, B]  L⁻¹Kuf
                r = V.mT @ a - kernel.K(X[ds], Zb)  # [B, Cb]  √c·b
                rr += (r * r).sum(0)
                yr += y[ds] @ r
                Vr += V @ r
            P = solve_lower(s.L_B, Vr)  # [M, Cb]
            S = rr / noise - (P * P).sum(0) / noise**2  # c·bᵀG⁻¹b
            T = (yr - s.e @ P) / noise  # √c·yᵀG⁻¹b
            valid = c > 32.0 * torch.finfo(c.dtype).eps * kernel.K_diag(Zb).abs()
            c_safe = torch.where(valid, c, torch.ones_like(c))
            S = S.clamp_min(0.0)
            fit = 0.5 * T * T / (c_safe + S)
            complexity = -0.5 * torch.log1p(S / c_safe)
            trace = 0.5 * rr / (c_safe * noise) if p.fam.mode == "vfe" else torch.zeros_like(c)
            zero = torch.zeros_like(c)
            parts.append(torch.stack([torch.where(valid, t, zero) for t in (fit, complexity, trace)]))
        out = torch.cat(parts, 1).cpu().numpy()
    return out[0], out[1], out[2]
