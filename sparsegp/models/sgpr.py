"""Sparse GP regression with the collapsed pseudo-point family: VFE, FITC, DTC, Power EP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor

from .. import covariances as cov
from .. import distributed
from ..kernels.base import Kernel
from ..kernels.separate import separate_parts
from ..objectives.blocks import Blocking, block_alpha, label_codes, make_blocking
from ..objectives.collapsed import (
    CollapsedProblem,
    Family,
    collapsed_objective,
    family,
    output_parts,
    posterior_q,
    titsias_upper_bound,
)
from ..objectives.coregional import lmc_objective, lmc_posterior_q, lmc_upper_bound
from ..posteriors import CoregionalPosterior, Posterior, SeparatePosterior, SparsePosterior
from ..runtime.config import DEFAULT_JITTER
from .classes import MODELS
from .conditioning import Conditioning
from .coregional import CoregionalMixin, mixing_matrix
from .inducing import InducingMixin, resolve_shared_feature
from .options import InducingOptions, RegressionOptions
from .regression import Bounded, GPModel

_COMPUTE_DTYPES = {None: None, "float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True, kw_only=True)
class SGPROptions(RegressionOptions, InducingOptions):
    """`SGPR`'s options: the family member (`approximation`, `alpha`), block labels, the LMC's
    mixing matrix, the dtype of the N·M² work."""

    approximation: str
    alpha: Any
    blocks: Any
    mixing: Any
    compute_dtype: torch.dtype | None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compute_dtype not in (None, torch.float32, torch.float64):
            raise TypeError(f"compute_dtype must be torch.float32, torch.float64 or None; "
                            f"got {self.compute_dtype!r}")


class SGPR(Conditioning, Bounded, InducingMixin, CoregionalMixin, GPModel[SGPROptions]):
    """Sparse GP regression with M inducing variables, O(N M²) (Bui, Yan & Turner 2017).

    approximation: "vfe" (Titsias 2009, a lower bound on log p(y)), "fitc" (Snelson &
    Ghahramani 2006), "dtc" (Seeger et al. 2003) or "pep" (Power EP with `alpha` in (0, 1];
    α = 1 is FITC, α → 0 is VFE). `inducing_points` is an int M (chosen
    from X by seeded k-means++, or `inducing_init="random"`), an array [M, D], or any
    registered inducing feature (`sparsegp.features`: inter-domain features such as
    `Multiscale` or `SumOfDeltas`); default min(N, 100) inducing points.
    `blocks` (with "fitc" or "pep"): a label per data point for block Power EP, which keeps
    Kff − Qff within each block (docs/math.md §2; "fitc" with blocks is PITC); `alpha` may then
    also be one power per block, in the order of the sorted labels. `sparsegp.cluster_blocks`
    makes labels from the inputs. Cost O(N·M² + Σ_b |b|³), evaluated in float64.
    Shapes: X [N, D], y [N], or y [N, P] for P independent outputs that share the kernel, the
    inducing variables and the noise variance (NaN marks a missing output: the objective is
    then the sum over outputs of each one's on the points where it is observed; `predict`
    returns [N*, P]; `standardize_y` removes each column's mean and divides all by one pooled
    standard deviation; `diagnostics()` takes one output). `mixing=W` [P, L] (trainable) makes
    the outputs f = W g of L latent functions sharing the kernel and the inducing inputs (the
    linear model of coregionalisation, with the collapsed bound: "vfe" or "dtc";
    `predict(..., full_output_cov=True)` gives the [P, P] covariance at each point). When a
    torch.distributed process group is initialised, X and y are this rank's shard: the
    objective, its gradient and the posterior are those of all shards, every rank starts from
    rank 0's initial parameters, and `fit` runs in lock-step (with `blocks`, shard the data
    by block: each block's points on one rank, and a list of powers is per this rank's
    blocks). `chunk_size` rows of data are
    processed at a time (memory O(chunk·M + M²), in the gradient too; default from a memory
    budget). `jitter` is relative
    to mean diag Kuu. `compute_dtype=torch.float32` (the default for float32 data) evaluates
    the N·M² work (kernel matrices, products, triangular solves) in float32, e.g. on a GPU,
    while the parameters and the M×M factorisations stay in float64; expect ~1e-6 relative
    accuracy, and worse for FITC/PEP when Kuu is ill-conditioned.
    By default y is standardised inside (`standardize_y=True`): predictions, `noise_variance`
    and the objectives are in the units of y, the kernel's variance is relative to var(y);
    `standardize_y=False` models y as given. X is taken as given (`standardize_X=True`
    standardises its columns, and the lengthscales are then in their standard deviations).
    Shapes: `predict(Xnew [N*, D])` -> mean, var `[N*]` (numpy); `inducing_points` [M, D].

    Example:

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> m = sg.SGPR(X, y, inducing_points=10)  # VFE
        >>> result = m.fit(maxiter=5)
        >>> mean, var = m.predict_y(sg.datasets.snelson_test_inputs())
        >>> mean.shape, m.inducing_points.shape
        ((301,), (10, 1))
        >>> m.log_marginal_likelihood() <= m.upper_bound()  # the VFE bound sandwiches log p(y)
        True
        >>> pep = sg.SGPR(X, y, inducing_points=10, approximation="pep", alpha=0.5)
        >>> pep.approximation, pep.alpha
        ('pep', 0.5)
    """

    probes_predictions = True  # the settling rule (`fitting.settle_rule`)

    shards_data = True
    separate_kernels = True
    multi_output = True

    block_codes: Tensor | None  # buffer [N]: the block of every point (block Power EP), or None

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None = None, inducing_points: Any = None,
        approximation: str = "vfe", alpha: Any = None, noise_variance: Any = None, *,
        blocks: Any = None, noise_groups: Any = None, mean: Any = None, mixing: Any = None,
        jitter: float = DEFAULT_JITTER, chunk_size: int | None = None,
        compute_dtype: torch.dtype | None = None, inducing_init: str = "kmeans++", seed: int = 0,
        standardize_X: bool = False, standardize_y: bool = True, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(X, y, SGPROptions(
            kernel=kernel, inducing_points=inducing_points, approximation=approximation,
            alpha=alpha, noise_variance=noise_variance, noise_groups=noise_groups, blocks=blocks,
            mean=mean, mixing=mixing, jitter=jitter, chunk_size=chunk_size,
            compute_dtype=compute_dtype, inducing_init=inducing_init, seed=seed,
            standardize_X=standardize_X, standardize_y=standardize_y, dtype=dtype))

    def _configure(self, X: Tensor, options: SGPROptions, x_shift: Tensor, x_scale: Tensor
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
        approximation, alpha, blocks = options.approximation, options.alpha, options.blocks
        if options.mixing is not None and (blocks is not None or str(approximation).lower()
                                           not in ("vfe", "dtc")):
            raise ValueError("mixing (the linear model of coregionalisation) has a collapsed "
                             "bound for approximation='vfe' or 'dtc' without blocks; got "
                             f"approximation={approximation!r}" + (" with blocks" if blocks
                                                                   is not None else ""))
        fam, block_config, codes = (_block_family(approximation, alpha, blocks, X.shape[0])
                                    if blocks is not None
                                    else (family(approximation, alpha), None, None))
        config, parts = super()._configure(X, options, x_shift, x_scale)
        parts["block_codes"] = codes
        parts["feature"] = resolve_shared_feature(options.inducing_points, parts["kernel"], X,
                                                  x_shift, x_scale, options.inducing_init,
                                                  options.seed)
        compute_dtype = options.compute_dtype
        config.update(blocks=block_config, approximation=fam.name,
                      alpha=fam.alpha if fam.name == "pep" else None,
                      chunk_size=options.chunk_size,
                      compute_dtype=None if compute_dtype is None
                      else str(compute_dtype).replace("torch.", ""))
        return config, parts

    def _prepare_targets(self, y: Any, n: int, device: torch.device, parts: dict[str, Any],
                         options: SGPROptions
                         ) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        targets, buffers, config = super()._prepare_targets(y, n, device, parts, options)
        mixing = options.mixing
        kernels = separate_parts(parts["kernel"])
        if kernels is not None and (targets.dim() != 2 or targets.shape[1] != len(kernels)
                                    or mixing is not None):
            raise ValueError(f"kernels.Separate with {len(kernels)} kernel"
                             f"{'s' if len(kernels) > 1 else ''} needs y with one "
                             f"column per kernel ([N, {len(kernels)}]) and no mixing; got y of "
                             f"shape {tuple(targets.shape)}"
                             + (" and a mixing matrix" if mixing is not None else ""))
        if mixing is not None:
            if targets.dim() != 2:
                raise ValueError("mixing takes targets of several outputs, y [N, P]")
            config["mixing"] = list(mixing_matrix(mixing, targets.shape[1]).shape)
        return targets, buffers, config

    def _initialise(self, options: SGPROptions) -> None:
        super()._initialise(options)
        self._initialise_mixing(options.mixing)

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        super()._build(config, parts)
        self._declare_mixing(config.get("mixing"))
        blocks = config.get("blocks")
        if blocks is None:
            self._family, self._block_alpha = family(config["approximation"], config["alpha"]), None
        else:
            self._block_alpha = block_alpha(blocks["alpha"], len(blocks["labels"]))
            self._family = _block_member(config["approximation"], self._block_alpha)
        self.register_buffer("block_codes", parts.get("block_codes"), persistent=False)
        self._blocking: tuple[Tensor, Blocking] | None = None
        self.chunk_size = config["chunk_size"]
        self.feature = parts["feature"]

    # -- what users read ------------------------------------------------------------------
    @property
    def compute_dtype(self) -> torch.dtype | None:
        """The dtype of the N·M² work: `compute_dtype=` if given, else float32 for float32
        models (None: the model's dtype)."""
        return (_COMPUTE_DTYPES[self._config["compute_dtype"]]
                or (torch.float32 if self.dtype == torch.float32 else None))

    @property
    def approximation(self) -> str:
        return self._family.name

    @property
    def alpha(self) -> float | None:
        """The power α (None for VFE and DTC, and for block Power EP with one α per block)."""
        return self._family.alpha

    @property
    def blocks(self) -> dict[str, list] | None:
        """Block Power EP: {"labels": the distinct block labels, "alpha": one power per
        block}; None for the point-wise family."""
        b = self._config.get("blocks")
        return None if b is None else {"labels": list(b["labels"]), "alpha": list(b["alpha"])}

    def data_extras(self) -> dict[str, Tensor]:
        """The block code of every point (block Power EP) and the noise codes, saved with the
        data."""
        extras = super().data_extras()
        return extras if self.block_codes is None else {**extras, "block_codes": self.block_codes}

    def _block_partition(self) -> Blocking | None:
        codes = self.block_codes
        if self._block_alpha is None or codes is None:
            return None
        if self._blocking is None or self._blocking[0] is not codes:
            self._blocking = (codes, make_blocking(codes, self._block_alpha.to(codes.device)))
        return self._blocking[1]

    def update(self, X_new: Any, y_new: Any, inducing_points: Any = None, fit: bool = True,
               **fit_options: Any) -> SGPR:
        """Streaming update (Bui, Nguyen & Turner 2017): a `StreamingSGPR` that has seen this
        model's data, through its posterior alone, and the new batch (X_new [N_new, D],
        y_new [N_new]), fitted to them unless `fit=False`; see
        `sparsegp.models.streaming.update`."""
        streaming = cast(Any, MODELS.get("StreamingSGPR"))  # registered by models.streaming
        return streaming.from_update(self, X_new, y_new, inducing_points, fit, **fit_options)

    # -- objectives -----------------------------------------------------------------------
    def collapsed_problem(self) -> CollapsedProblem:
        """The model's objective as a pure value (internal units): kernel, feature, data,
        noise, family member and evaluation options — what diagnostics work on."""
        self._require_data()
        return CollapsedProblem(self.kernel, self.feature, self.X, self.y,
                                self.noise_rows(), self._family, self.jitter,
                                self.chunk_size, self.compute_dtype, self._block_partition(),
                                self.prior_mean(), sharded=self.shards_data)

    def _objective(self) -> Tensor:
        if self.mixing_matrix is not None:
            return lmc_objective(self.collapsed_problem(), self.mixing_matrix)
        return collapsed_objective(self.collapsed_problem())

    def upper_bound(self) -> float:
        """Titsias (2014) upper bound on the exact log evidence at the current parameters."""
        with torch.no_grad():
            if self.mixing_matrix is not None:
                U = lmc_upper_bound(self.collapsed_problem(), self.mixing_matrix)
            else:
                U = titsias_upper_bound(self.collapsed_problem())
        return float(U) + self._objective_offset()

    def _build_posterior(self) -> Posterior:
        if separate_parts(self.kernel) is not None:  # one posterior per output, from its part
            parts = []
            for _, part in output_parts(self.collapsed_problem()):
                L, q, used = posterior_q(part)
                parts.append(SparsePosterior(part.kernel, part.feature, L, q, self.noise_rows(),
                                             used))
            return SeparatePosterior(parts, self.noise_rows())
        if self.mixing_matrix is not None:
            L, q, used = lmc_posterior_q(self.collapsed_problem(), self.mixing_matrix)
            return CoregionalPosterior(self.kernel, self.feature, L, q, self.mixing_matrix,
                                       self.noise_rows(), used)
        L, q, used = posterior_q(self.collapsed_problem())
        return SparsePosterior(self.kernel, self.feature, L, q, self.noise_rows(), used,
                               self.prior_mean())

    def _restore_posterior(self, saved: dict[str, Any]) -> Posterior:
        pairs = cov.separate_pairs(self.feature, self.kernel)
        if pairs is not None:
            return SeparatePosterior.from_state(pairs, saved)
        if "mixing" in saved:
            return CoregionalPosterior.from_state(self.kernel, self.feature, saved)
        return SparsePosterior.from_state(self.kernel, self.feature, saved, self.prior_mean())


def _block_family(approximation: Any, alpha: Any, blocks: Any, n: int
                  ) -> tuple[Family, dict[str, Any], Tensor]:
    """Block Power EP's family member, its config entry and the block code of every point."""
    name = approximation.lower() if isinstance(approximation, str) else approximation
    if name not in ("fitc", "pep"):
        raise ValueError("blocks apply to approximation='fitc' (PITC) or 'pep' (block Power "
                         f"EP); got approximation={approximation!r}")
    labels, codes = label_codes(blocks, n)
    _check_blocks_lie_on_one_rank(labels)
    if name == "fitc":
        family("fitc", alpha)  # validates: FITC takes no α but 1
        alpha = 1.0
    elif alpha is None:
        raise ValueError("alpha is required for approximation='pep': a power in (0, 1], or "
                         "one per block")
    elif isinstance(alpha, bool):
        raise TypeError(f"alpha must be a number in (0, 1] or one per block; got {alpha!r}")
    try:
        powers = block_alpha(alpha, len(labels))
    except (TypeError, RuntimeError):
        raise TypeError(f"alpha must be a number in (0, 1] or one per block; got {alpha!r}"
                        ) from None
    config = {"labels": labels.tolist(), "alpha": powers.tolist()}
    return _block_member(name, powers), config, torch.as_tensor(codes, dtype=torch.long)


def _check_blocks_lie_on_one_rank(labels: Any) -> None:
    """With data sharded over ranks, each block must be on one rank (its Kff block is
    factorised where its rows are): every rank raises the same error otherwise."""
    if not distributed.is_distributed():
        return
    held = distributed.all_gather_objects(set(labels.tolist()), "the block labels")
    for i, a in enumerate(held):
        for j in range(i + 1, len(held)):
            common = sorted(cast(set, a) & cast(set, held[j]), key=str)
            if common:
                raise ValueError(f"blocks: label {common[0]!r} is on ranks {i} and {j}; with "
                                 "data sharded over ranks each block must lie on one rank "
                                 "(shard the data by block)")


def _block_member(name: str, powers: Tensor) -> Family:
    """The family member of block Power EP: α is None when the blocks' powers differ."""
    scalar = bool((powers == powers[0]).all())
    return Family(name, "pep", float(powers[0]) if scalar else None)
