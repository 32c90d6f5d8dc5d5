"""The collapsed pseudo-point family for Gaussian likelihoods: DTC, FITC, VFE and Power EP.

One function evaluates every member (Bui, Yan & Turner 2017; docs/math.md §2):

  F_α = −(N/2) log 2π − ½ log|Qff + Λ| − ½ yᵀ(Qff + Λ)⁻¹y − (1−α)/(2α) Σ_n log(1 + α d_n/σ²)

with λ_n = α d_n + σ², d_n = [Kff − Qff]_nn. α = 1 is FITC (Snelson & Ghahramani 2006),
α → 0 is VFE (Titsias 2009; its own closed form with the trace term −Σ d_n/(2σ²)), and DTC
(Seeger et al. 2003) has Λ = σ²I and no trace term. Everything is assembled from sums of
per-point statistics summed over chunks of the data (`sums.py`, `../chunked.py`);
block (PITC-like) Power EP replaces the per-point sums by per-block ones (`blocks.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, cast

import torch
from torch import Tensor

from ... import covariances as cov
from ... import distributed
from ...conditionals import WhitenedGaussian, from_precision
from ...covariances import cross_covariance
from ...distributed import count_rows
from ...features.base import InducingFeature
from ...kernels.base import Kernel
from ...kernels.separate import Separate
from ...linalg import LOG_2PI, jittered_cholesky, log_det_from_cholesky, solve_lower, solve_lower_t
from ...means import Mean
from ...runtime.chunking import auto_chunk_size
from ..chunked import ChunkedSums, chunked_sum
from .blocks import Blocking, BlockPowerEPSums
from .heteroscedastic import PointNoiseSums
from .sums import PowerEPSums, WhitenedSums, unwhitened_is_safe

APPROXIMATIONS = ("vfe", "fitc", "dtc", "pep")


@dataclass(frozen=True)
class Family:
    """A member of the collapsed family: `mode` is 'vfe', 'dtc' or 'pep' (power `alpha`)."""

    name: str
    mode: str
    alpha: float | None


def family(approximation: str, alpha: float | None = None) -> Family:
    """Validate an approximation name and power; 'fitc' is 'pep' with α = 1."""
    if not isinstance(approximation, str) or approximation.lower() not in APPROXIMATIONS:
        raise ValueError(
            f"approximation must be one of {', '.join(APPROXIMATIONS)}; got {approximation!r}"
        )
    name = approximation.lower()
    if name == "pep":
        if alpha is None:
            raise ValueError("alpha is required for approximation='pep': a power in (0, 1]")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise TypeError(f"alpha must be a number in (0, 1]; got {type(alpha).__name__}")
        if not (0.0 < float(alpha) <= 1.0) or math.isnan(alpha):
            raise ValueError(f"alpha must lie in (0, 1] (α → 0 is VFE); got {alpha}")
        return Family("pep", "pep", float(alpha))
    if alpha is not None and not (name == "fitc" and float(alpha) == 1.0):
        raise ValueError(f"alpha applies only to approximation='pep'; got alpha={alpha} with {name!r}")
    if name == "fitc":
        return Family("fitc", "pep", 1.0)
    return Family(name, name, None)


VFE = family("vfe")


class Statistics(NamedTuple):
    """Per-point sums of docs/math.md §2 with a_n = L⁻¹k_n, β_n = 1/λ_n (additive over chunks)."""

    A: Tensor  # [M, M]  Σ β_n a_n a_nᵀ
    c: Tensor  # [M]     Σ β_n y_n a_n ([M, P] for P outputs sharing the statistics)
    s_y: Tensor  # []    Σ β_n y_n² (summed over the outputs)
    s_loglam: Tensor  # Σ log λ_n
    s_d: Tensor  # []    Σ d_n
    s_pen: Tensor  # []  (1−α)/α Σ log(1 + α d_n/σ²); blocks: Σ_b (1−α_b)/α_b log|I + α_b D_b/σ²|
    n: int


class Solved(NamedTuple):
    """B = I + A = L_B L_Bᵀ, e = L_B⁻¹c and the two Gaussian terms they give."""

    L_B: Tensor  # [M, M]
    e: Tensor  # [M]
    log_det: Tensor  # log|Qff + Λ|
    quad: Tensor  # yᵀ(Qff + Λ)⁻¹y


def _chunk_size(chunk_size: int | None, M: int, dtype: torch.dtype,
                device: torch.device | None = None) -> int:
    if chunk_size is not None:
        return chunk_size
    return auto_chunk_size(M, torch.finfo(dtype).bits // 8, device=device)


class CollapsedProblem(NamedTuple):
    """A collapsed objective as a value (internal units): the kernel, the inducing feature, the
    data X [N, D] and y [N], the noise variance σ² [], the family member, the relative jitter
    on Kuu, and how the N·M² work is done (`chunk_size` rows at a time, default from a memory
    budget; `compute_dtype`, e.g. float32 on a GPU, the M×M factorisations staying float64).
    `blocks` (Power EP only) partitions the data for block / PITC Power EP (`blocks.py`;
    evaluated in float64, whatever `compute_dtype` says). With a prior `mean`, the
    statistics are those of the residual y − m(X) (`targets`). `sharded`: X and y are this
    rank's shard of data sharded over a torch.distributed process group, so the statistics
    (and the gradients of what reaches them through the rows) are summed over the ranks."""

    kernel: Kernel
    feature: InducingFeature
    X: Tensor
    y: Tensor
    noise: Tensor
    fam: Family
    jitter: float
    chunk_size: int | None = None
    compute_dtype: torch.dtype | None = None
    blocks: Blocking | None = None
    mean: Mean | None = None
    sharded: bool = False


def targets(p: CollapsedProblem) -> Tensor:
    """y − m(X) [N] (or [N, P]: the mean of every output), differentiable in the mean's
    parameters (y itself without a mean)."""
    return residual(p.X, p.y, p.mean, p.sharded)


def residual(X: Tensor, y: Tensor, mean: Mean | None, sharded: bool) -> Tensor:
    """y − m(X) (`targets`); with `sharded` rows the mean's gradient is summed over ranks."""
    if mean is None:
        return y
    if sharded and distributed.is_distributed():
        params = {n: distributed.summed_gradient(t) for n, t in mean.named_parameters()}
        m = torch.func.functional_call(mean, params, (X,))
    else:
        m = mean(X)
    return y - (m[:, None] if y.dim() == 2 else m)


def output_parts(p: CollapsedProblem) -> list[tuple[list[int] | None, CollapsedProblem]]:
    """The problem as independent parts whose outputs share the statistics: [(None, p)] for
    one output or P outputs observed at every point; with missing outputs (NaN in y [N, P]),
    one part per set of outputs observed at the same points, holding those rows and columns
    (the objective is the sum of the parts': the independent outputs' joint density with
    each output's missing entries marginalised out). With a `kernels.Separate` kernel, one
    part per output with its own kernel and inducing feature."""
    pairs = cov.separate_pairs(p.feature, p.kernel)
    parts: list[tuple[list[int] | None, CollapsedProblem]] = []
    if pairs is not None:  # independent outputs with a kernel and inducing variables each
        if p.y.dim() != 2 or p.y.shape[1] != len(pairs):
            raise ValueError(f"kernels.Separate has {len(pairs)} kernels: y needs one column "
                             f"per kernel; got shape {tuple(p.y.shape)}")
        for j, (f, k) in enumerate(pairs):
            rows = ~torch.isnan(p.y[:, j])
            parts.append(([j], p._replace(kernel=k, feature=f, X=p.X[rows], y=p.y[rows, j])))
        return parts
    if p.y.dim() == 1:
        return [(None, p)]
    observed = ~torch.isnan(p.y)
    if bool(observed.all()):
        return [(None, p)]
    patterns, inverse = torch.unique(observed.mT, dim=0, return_inverse=True)
    for g in range(patterns.shape[0]):
        cols = torch.nonzero(inverse == g).flatten().tolist()
        rows = torch.nonzero(patterns[g]).flatten()
        parts.append((cols, p._replace(X=p.X[rows], y=p.y[rows][:, cols])))
    return parts


def statistics(p: CollapsedProblem, L: Tensor, unwhitened: bool = False) -> Statistics:
    """The sums of docs/math.md §2 for the problem's family member (L = chol(Kuu)), summed over
    chunks of the data and, when the data are sharded, over processes (see `chunked`).
    `unwhitened`: VFE's and DTC's sums may be whitened once instead of chunk by chunk, and
    FITC's and Power EP's gradient computed without a triangular solve per chunk, where
    `statistics.unwhitened_is_safe` says that is accurate (the objective's path; the upper
    bound, steep in Σ k_nn − tr Q, and the posterior keep the per-chunk whitening)."""
    kuf = cross_covariance(p.feature, p.kernel, p.compute_dtype)
    size = _chunk_size(p.chunk_size, kuf.width, kuf.dtype, p.X.device)
    n = count_rows(p.X, p.sharded)
    y = targets(p)
    per_point = p.noise.dim() == 1  # σ²_n: known heteroscedastic noise or one per group
    columns = 0 if y.dim() == 1 else y.shape[1]  # P outputs sharing a_n and λ_n
    if columns and (per_point or p.blocks is not None):
        raise ValueError("several output columns share one noise variance and the point-wise "
                         "family; blocks and per-point noise take one output")
    if p.blocks is not None:
        b = p.blocks
        # one σ² is an input (its gradient reduced over ranks), per-point σ² a column
        noise = p.noise[b.order] if per_point else torch.ones_like(p.X[:, 0])
        sums: ChunkedSums = BlockPowerEPSums(p.feature, p.kernel, L,
                                             None if per_point else p.noise)
        totals = chunked_sum(sums, p.X[b.order], y[b.order], b.runs(size), b.ids,
                             b.alpha.to(L.device)[b.ids], noise, over_ranks=p.sharded)
        return Statistics._make((*totals, n))
    if per_point:
        sums = PointNoiseSums(p.feature, p.kernel, L, p.fam)
        return Statistics._make((*chunked_sum(sums, p.X, y, size, p.noise,
                                              over_ranks=p.sharded), n))
    if p.fam.mode == "pep":
        assert p.fam.alpha is not None  # Power EP's members have their power
        # only the backward pass differs: no condition estimate when none follows
        whiten = not (unwhitened and torch.is_grad_enabled()
                      and unwhitened_is_safe(L, kuf, p.X, p.noise, n))
        sums = PowerEPSums(kuf, L, p.noise, p.fam.alpha, L.dtype, columns, whiten)
        return Statistics._make((*chunked_sum(sums, p.X, y, size, over_ranks=p.sharded), n))
    # VFE and DTC: all weights are 1/σ², so the sums of the whitened a_n = L⁻¹k_n suffice,
    # whitened once instead of chunk by chunk where that is accurate (`unwhitened_is_safe`)
    whiten = not (unwhitened and unwhitened_is_safe(L, kuf, p.X, p.noise, n))
    Q, r, yy, kd = chunked_sum(WhitenedSums(kuf, L, L.dtype, columns, whiten), p.X, y, size,
                               over_ranks=p.sharded)
    s_d = kd - torch.diagonal(Q).sum()
    return Statistics(
        A=Q / p.noise,
        c=r / p.noise,
        s_y=yy / p.noise,
        s_loglam=n * torch.log(p.noise),
        s_d=s_d,
        s_pen=s_d / p.noise if p.fam.mode == "vfe" else torch.zeros_like(s_d),  # trace term
        n=n,
    )


def solve(stats: Statistics) -> Solved:
    """log|Qff + Λ| = Σ log λ_n + log|I + A| and yᵀ(Qff + Λ)⁻¹y = s_y − ‖L_B⁻¹c‖² (summed
    over the columns of c [M] or [M, D]: several outputs sharing the statistics)."""
    M = stats.A.shape[0]
    B = torch.eye(M, dtype=stats.A.dtype, device=stats.A.device) + stats.A
    L_B, _ = jittered_cholesky(B, 0.0, name="I + A")
    e = solve_lower(L_B, stats.c)
    return Solved(L_B, e, stats.s_loglam + log_det_from_cholesky(L_B), stats.s_y - (e * e).sum())


def num_outputs(stats: Statistics) -> int:
    """P: the output columns sharing the statistics (the columns of c; 1 for c [M])."""
    return 1 if stats.c.dim() == 1 else stats.c.shape[1]


def family_terms(stats: Statistics, solved: Solved) -> tuple[Tensor, Tensor, Tensor]:
    """F_α of docs/math.md §2 in three terms (Bauer et al. 2016): data fit −½ yᵀΣ⁻¹y, complexity
    −½ (N log 2π + log|Σ|), and the member's penalty −½ s_pen (VFE's trace term Σ d_n/σ²_n,
    PEP's (1−α)/α Σ log(1 + α d_n/σ²_n), 0 for DTC: the statistics carry it). With P
    outputs sharing the statistics each term is the total over the outputs (the complexity
    and the penalty counted P times)."""
    P = num_outputs(stats)
    data_fit = -0.5 * solved.quad
    complexity = -0.5 * P * (stats.n * LOG_2PI + solved.log_det)
    return data_fit, complexity, -0.5 * P * stats.s_pen


def family_objective(stats: Statistics, solved: Solved) -> Tensor:
    """F_α of docs/math.md §2 from the statistics: the sum of `family_terms`."""
    data_fit, complexity, penalty = family_terms(stats, solved)
    return data_fit + complexity + penalty


def factor_and_statistics(p: CollapsedProblem) -> tuple[Tensor, float, Statistics]:
    """The jittered Cholesky L of Kuu, the relative jitter it used, and the statistics."""
    L, used = cov.Kuu_cholesky(p.feature, p.kernel, p.jitter)
    return L, used, statistics(p, L)


def collapsed_objective(p: CollapsedProblem) -> Tensor:
    """F_α of the problem's family member (docs/math.md §2), summed over the outputs (y [N, P],
    NaN where an output is missing: see `output_parts`). Shape: []."""
    total = None
    for _, part, L in _factored_parts(p):
        stats = statistics(part, L, unwhitened=True)
        value = family_objective(stats, solve(stats))
        total = value if total is None else total + value
    assert total is not None
    return total


def _factored_parts(p: CollapsedProblem) -> list[tuple[list[int] | None, CollapsedProblem, Tensor]]:
    """`output_parts` with the Cholesky factor of each part's Kuu (one factorisation when the
    parts share the kernel and the inducing feature)."""
    parts = output_parts(p)
    if not isinstance(p.kernel, Separate):
        L, _ = cov.Kuu_cholesky(p.feature, p.kernel, p.jitter)
        return [(cols, part, L) for cols, part in parts]
    return [(cols, part, cov.Kuu_cholesky(part.feature, part.kernel, p.jitter)[0])
            for cols, part in parts]


def posterior_q(p: CollapsedProblem) -> tuple[Tensor, WhitenedGaussian, float]:
    """The optimal q(u) of every member (docs/math.md §2, 'Posterior over u'): L = chol(Kuu),
    whitened q(v) = N(L_B⁻ᵀe, B⁻¹), and the relative jitter used. With P outputs the mean is
    [M, P]; B is shared ([M, M]) unless outputs are missing at different points ([P, M, M])."""
    L, used = cov.Kuu_cholesky(p.feature, p.kernel, p.jitter)
    parts = output_parts(p)
    if parts[0][0] is None:
        return L, q_from_statistics(statistics(p, L)), used
    M, P = L.shape[0], p.y.shape[1]
    mean, root = L.new_empty(M, P), L.new_empty(P, M, M)
    for cols, part in parts:
        s = solve(statistics(part, L))
        mean[:, cols] = solve_lower_t(s.L_B, s.e)
        root[cols] = s.L_B
    return L, WhitenedGaussian(mean, root, precision=True), used


def q_from_statistics(stats: Statistics) -> WhitenedGaussian:
    """q(v) = N(L_B⁻ᵀe, B⁻¹) from any statistics A = Σ β a aᵀ, c = Σ β y a (also the
    Power-EP classification posterior, with pseudo-noise 1/τ and pseudo-targets ν/τ)."""
    s = solve(stats)
    return from_precision(s.L_B, s.e)


def titsias_upper_bound(p: CollapsedProblem) -> Tensor:
    """Upper bound on log p(y) (Titsias 2014; docs/math.md §3), t = Σ_n d_n ≥ λ_max(Kff − Qff):

    U = −(N/2) log 2π − ½ log|Qff + σ²I| − ½ yᵀ(Qff + (t + σ²)I)⁻¹y (any family member's
    problem: the bound uses the VFE statistics; with a per-point noise Λσ replaces σ²I,
    since Kff + Λσ ≼ Qff + Λσ + tI all the same).
    """
    vp = p._replace(fam=VFE, blocks=None)
    return cast(Tensor, sum(upper_bound_from_statistics(statistics(part, L), part, L)
                            for _, part, L in _factored_parts(vp)))


def vfe_bounds(p: CollapsedProblem) -> tuple[Tensor, Tensor]:
    """The VFE lower bound (Titsias 2009) and the upper bound of `titsias_upper_bound`
    (Titsias 2014) at the problem's kernel, inducing feature and noise, from one pass over
    the data (any family member's problem: both use the VFE statistics). Shapes: [], []."""
    vp = p._replace(fam=VFE, blocks=None)
    lower: Tensor | float = 0.0
    upper: Tensor | float = 0.0
    for _, part, L in _factored_parts(vp):
        stats = statistics(part, L)
        lower = lower + family_objective(stats, solve(stats))
        upper = upper + upper_bound_from_statistics(stats, part, L)
    return cast(Tensor, lower), cast(Tensor, upper)


def upper_bound_from_statistics(vfe: Statistics, p: CollapsedProblem, L: Tensor,
                                t: Tensor | None = None) -> Tensor:
    """The Titsias (2014) bound of `titsias_upper_bound` from the VFE statistics of `p`; `t`
    bounds the largest eigenvalue of Kff − Qff (default: its trace, Σ d_n)."""
    t = vfe.s_d.clamp_min(0.0) if t is None else t
    if p.noise.dim() == 0:  # the same projections, weights 1/(t + σ²) for the quadratic term
        shrink = p.noise / (t + p.noise)
        widened = vfe._replace(A=vfe.A * shrink, c=vfe.c * shrink, s_y=vfe.s_y * shrink)
    else:  # weights 1/(t + σ²_n): one more pass over the data
        widened = statistics(p._replace(fam=family("dtc"), noise=p.noise + t, blocks=None), L)
    return -0.5 * (num_outputs(vfe) * (vfe.n * LOG_2PI + solve(vfe).log_det)
                   + solve(widened).quad)
