"""Sparse GP regression with the collapsed pseudo-point family: VFE, FITC, DTC, Power EP and
their block versions (`SGPR`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn

from ... import covariances as cov
from ...diagnostics import Diagnostics, diagnose
from ...diagnostics.report import (
    EXACT_MAX_DATA,
    FAR_LENGTHSCALES,
    GAP_PER_POINT,
    MERGE_FRACTION,
    NOISE_FRACTION,
    QUADRATIC_MAX_DATA,
)
from ...diagnostics.view import RegressionView
from ...distributed import all_gather_objects
from ...features.base import InducingFeature, InducingLike
from ...features.inducing_points import InducingPoints
from ...kernels.base import Kernel
from ...kernels.separate import separate_parts
from ...means import MeanLike
from ...objectives.collapsed.blocks import Blocking, block_alpha, label_codes, make_blocking
from ...objectives.collapsed.coregional import lmc_objective, lmc_posterior_q, lmc_upper_bound
from ...objectives.collapsed.members import (
    CollapsedProblem,
    Family,
    collapsed_objective,
    family,
    output_parts,
    posterior_q,
    titsias_upper_bound,
)
from ...objectives.online.regression import Summary
from ...posteriors import (
    CoregionalPosterior,
    ExactPosterior,
    FantasySparsePosterior,
    Posterior,
    SeparatePosterior,
    SparsePosterior,
    restore_exact,
)
from ...runtime.chunking import check_chunk_size
from ...runtime.config import DEFAULT_JITTER, PARAMETER_DTYPE
from ...validation import ArrayLike, as_inputs, as_targets, check_columns, check_same_rows
from ..core import streaming
from ..core.conditioning import condition_on_observations
from ..core.data import Inputs, Placement
from ..core.inducing import InducingInputs, extended_feature, resolve_shared_feature
from ..core.mixing import MixingView, mixing_matrix, mixing_parameter, start_mixing
from ..core.model import Parts, Targets
from ..core.options import InducingOptions, RegressionOptions
from ..core.regression import Regression, RegressionSpec
from ..core.spec import BlocksSpec, ModelSpec

_COMPUTE_DTYPES = {None: None, "float32": torch.float32, "float64": torch.float64}
STREAMING_APPROXIMATIONS = ("vfe", "fitc", "pep")


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


@dataclass(frozen=True, kw_only=True)
class SGPRSpec(RegressionSpec):
    """`SGPR`'s spec: the family member, its blocks, the rows per chunk, the dtype of the
    N·M² work, the LMC's mixing matrix's shape [P, L]."""

    approximation: str = "vfe"
    alpha: float | None = None
    blocks: BlocksSpec | None = None
    chunk_size: int | None = None
    compute_dtype: str | None = None
    mixing: tuple[int, int] | None = None


class SGPR(Regression[SGPROptions]):
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

    spec: SGPRSpec
    spec_type: ClassVar[type[ModelSpec]] = SGPRSpec
    probes_predictions: ClassVar[bool] = True  # the settling rule (`fitting.settle_rule`)
    shards_data: ClassVar[bool] = True
    separate_kernels: ClassVar[bool] = True
    multi_output: ClassVar[bool] = True

    feature: InducingFeature
    mixing_matrix: nn.Parameter | None  # W [P, L] of the LMC, or None
    block_codes: Tensor | None  # buffer [N]: the block of every point (block Power EP), or None
    inducing_points = InducingInputs()
    mixing = MixingView()

    def __init__(
        self, X: ArrayLike, y: ArrayLike, kernel: Kernel | None = None,
        inducing_points: InducingLike = None, approximation: str = "vfe", alpha: Any = None,
        noise_variance: ArrayLike | None = None, *, blocks: ArrayLike | None = None,
        noise_groups: ArrayLike | None = None, mean: MeanLike = None, mixing: ArrayLike | None = None,
        jitter: float = DEFAULT_JITTER, chunk_size: int | None = None,
        compute_dtype: torch.dtype | None = None, inducing_init: str = "kmeans++", seed: int = 0,
        standardize_X: bool = False, standardize_y: bool = True, dtype: torch.dtype | None = None,
    ) -> None:
        self._build_from_data(X, y, SGPROptions(
            kernel=kernel, inducing_points=inducing_points, approximation=approximation,
            alpha=alpha, noise_variance=noise_variance, noise_groups=noise_groups, blocks=blocks,
            mean=mean, mixing=mixing, jitter=jitter, chunk_size=chunk_size,
            compute_dtype=compute_dtype, inducing_init=inducing_init, seed=seed,
            standardize_X=standardize_X, standardize_y=standardize_y, dtype=dtype))

    # -- construction ---------------------------------------------------------------------
    def _configure(self, inputs: Inputs, options: SGPROptions, placement: Placement
                   ) -> tuple[dict[str, object], Parts]:
        o = options
        if o.mixing is not None and (o.blocks is not None or str(o.approximation).lower()
                                     not in ("vfe", "dtc")):
            raise ValueError("mixing (the linear model of coregionalisation) has a collapsed "
                             "bound for approximation='vfe' or 'dtc' without blocks; got "
                             f"approximation={o.approximation!r}" + (" with blocks" if o.blocks
                                                                     is not None else ""))
        if o.blocks is not None:
            fam, blocks = _block_family(o.approximation, o.alpha, o.blocks, inputs.X.shape[0],
                                        placement)
        else:
            fam, blocks = family(o.approximation, o.alpha), None
        fields, parts = super()._configure(inputs, options, placement)
        parts["feature"] = resolve_shared_feature(o.inducing_points, parts["kernel"], inputs.X,
                                                  inputs.shift, inputs.scale, o.inducing_init,
                                                  o.seed, placement)
        fields.update(blocks=blocks, approximation=fam.name,
                      alpha=fam.alpha if fam.name == "pep" else None, chunk_size=o.chunk_size,
                      compute_dtype=None if o.compute_dtype is None
                      else str(o.compute_dtype).replace("torch.", ""))
        return fields, parts

    def _prepare_targets(self, y: ArrayLike, inputs: Inputs, parts: Parts,
                         options: SGPROptions, placement: Placement) -> Targets:
        o = options
        targets = super()._prepare_targets(y, inputs, parts, options, placement)
        t, mixing = targets.y, o.mixing
        kernels = separate_parts(parts["kernel"])
        if kernels is not None and (t.dim() != 2 or t.shape[1] != len(kernels)
                                    or mixing is not None):
            raise ValueError(f"kernels.Separate with {len(kernels)} kernel"
                             f"{'s' if len(kernels) > 1 else ''} needs y with one "
                             f"column per kernel ([N, {len(kernels)}]) and no mixing; got y of "
                             f"shape {tuple(t.shape)}"
                             + (" and a mixing matrix" if mixing is not None else ""))
        fields = dict(targets.fields)
        if mixing is not None:
            if t.dim() != 2:
                raise ValueError("mixing takes targets of several outputs, y [N, P]")
            fields["mixing"] = tuple(mixing_matrix(mixing, t.shape[1]).shape)
        extras = dict(targets.extras)
        if o.blocks is not None:
            _, codes = label_codes(o.blocks, inputs.X.shape[0])
            extras["block_codes"] = torch.as_tensor(codes, dtype=torch.long)
        return targets._replace(extras=extras, fields=fields)

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        super()._declare(spec, parts)
        assert isinstance(spec, SGPRSpec)
        self.mixing_matrix = mixing_parameter(spec.mixing)
        if spec.blocks is None:
            self._family, self._block_alpha = family(spec.approximation, spec.alpha), None
        else:
            self._block_alpha = block_alpha(list(spec.blocks.alpha), len(spec.blocks.labels))
            self._family = _block_member(spec.approximation, self._block_alpha)
        self.register_buffer("block_codes", None, persistent=False)
        self._blocking: tuple[Tensor, Blocking] | None = None
        self.feature = parts["feature"]

    def _initialise(self, options: SGPROptions) -> None:
        super()._initialise(options)
        start_mixing(self.mixing_matrix, options.mixing)
        if self._covers_data(fixed=False):
            self.freeze("inducing_points")  # the exact GP (`is_exact`): nothing to train

    # -- what users read ------------------------------------------------------------------
    @property
    def compute_dtype(self) -> torch.dtype | None:
        """The dtype of the N·M² work: `compute_dtype=` if given, else float32 for float32
        models (None: the model's dtype)."""
        return (_COMPUTE_DTYPES[self.spec.compute_dtype]
                or (torch.float32 if self.dtype == torch.float32 else None))

    @property
    def approximation(self) -> str:
        return self._family.name

    @property
    def alpha(self) -> float | None:
        """The power α (None for VFE and DTC, and for block Power EP with one α per block)."""
        return self._family.alpha

    @property
    def blocks(self) -> dict[str, list[Any]] | None:
        """Block Power EP: {"labels": the distinct block labels, "alpha": one power per
        block}; None for the point-wise family."""
        b = self.spec.blocks
        return None if b is None else {"labels": list(b.labels), "alpha": list(b.alpha)}

    @property
    def chunk_size(self) -> int | None:
        """The rows of data processed at a time (None: from a memory budget)."""
        return self.spec.chunk_size

    @chunk_size.setter
    def chunk_size(self, value: int | None) -> None:
        self.spec = self.spec.but(chunk_size=check_chunk_size(value))

    def add_inducing_points(self, Znew: ArrayLike) -> None:
        """Append inducing points f(Znew) for Znew [K, D] (units of X) to the inducing
        variables; M grows by K and frozen parameters stay frozen. Nothing is refitted; the
        next prediction rebuilds the cached posterior from the data (a model loaded without
        its data refuses)."""
        self._require_data()
        self.feature = extended_feature(self.feature, self._internal_inputs(
            Znew, "inducing_points"), self.device)

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

    # -- the exact limit -------------------------------------------------------------------
    @property
    def is_exact(self) -> bool:
        """Whether this model is the exact GP: fixed inducing points that include every
        training input, one output, no mixing, data on one process, float64 work. Then
        Qff = Kff and every member of the family (VFE, FITC, DTC, Power EP, blocks) is the
        exact GP: the objective, both bounds and the predictions are the exact GP's, computed
        as `GPR` computes them (no jitter on Kuu, whose effect would otherwise be of the
        order jitter·N/σ² nats on near-noiseless data). A model whose inducing inputs include
        every input at construction — the default when X has no more distinct rows than M,
        e.g. N ≤ 100 — holds them fixed (`freeze("inducing_points")`): they are already
        where every member's objective is the evidence, and there is nothing to train
        (`unfreeze("inducing_points")` trains them, and the model is then the sparse one
        at its jitter, as any other). Conditioning keeps it exact (the new inputs join the
        inducing inputs); a streaming update starts from its collapsed posterior."""
        return self._covers_data()

    def _covers_data(self, fixed: bool = True) -> bool:
        """`is_exact` (with `fixed=False`: whether it would be, were the inducing inputs
        held fixed)."""
        feature = getattr(self, "feature", None)
        if (self.X is None or self.y is None or self.y.dim() != 1 or type(feature) is not
                InducingPoints or (fixed and feature.Z.requires_grad)
                or self.mixing_matrix is not None or self.placement.sharded
                or self.compute_dtype is not None):
            return False
        return feature.covers(self.X)

    def diagnostic_view(self) -> RegressionView:
        """As `Regression.diagnostic_view`; in the exact limit, the exact GP's (no bounds to
        check)."""
        view = super().diagnostic_view()
        return replace(view, problem=None) if self.is_exact else view

    # -- objectives -----------------------------------------------------------------------
    def collapsed_problem(self) -> CollapsedProblem:
        """The model's objective as a pure value (internal units): kernel, feature, data,
        noise, family member and evaluation options — what diagnostics work on."""
        self._require_data()
        assert self.X is not None and self.y is not None
        return CollapsedProblem(self.kernel, self.feature, self.X, self.y,
                                self.noise_rows(), self._family, self.jitter,
                                self.chunk_size, self.compute_dtype, self._block_partition(),
                                self.prior_mean(), sharded=self.placement.sharded)

    def _objective(self) -> Tensor:
        if self.is_exact:  # no jitter: the factor is of K + σ²I, not of Kuu
            return self._exact_objective(0.0)
        if self.mixing_matrix is not None:
            return lmc_objective(self.collapsed_problem(), self.mixing_matrix)
        return collapsed_objective(self.collapsed_problem())

    def upper_bound(self) -> float:
        """Titsias (2014) upper bound on the exact log evidence at the current parameters."""
        with torch.no_grad():
            if self.is_exact:
                U = self._objective()
            elif self.mixing_matrix is not None:
                U = lmc_upper_bound(self.collapsed_problem(), self.mixing_matrix)
            else:
                U = titsias_upper_bound(self.collapsed_problem())
        return float(U) + self._objective_offset()

    def _build_posterior(self) -> Posterior:
        if self.is_exact:
            return self._exact_posterior(0.0)
        return self._sparse_posterior()

    def _sparse_posterior(self) -> Posterior:
        """The posterior from the collapsed statistics (q(u) at the inducing variables)."""
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
        if "a" in saved:  # the exact limit's (conditioned or not)
            return restore_exact(self.kernel, saved, self.prior_mean())
        pairs = cov.separate_pairs(self.feature, self.kernel)
        if pairs is not None:
            return SeparatePosterior.from_state(pairs, saved)
        if "mixing" in saved:
            return CoregionalPosterior.from_state(self.kernel, self.feature, saved)
        cls = SparsePosterior if self.spec.fantasies is None else FantasySparsePosterior
        return cls.from_state(self.kernel, self.feature, saved, self.prior_mean())

    # -- conditioning and streaming -------------------------------------------------------
    def condition_on_observations(self, X: ArrayLike, y: ArrayLike,
                                  noise: ArrayLike | None = None) -> SGPR:
        """A new model conditioned on the observations y at X, at the current hyperparameters,
        without refitting; this model is unchanged (VFE, DTC, FITC, point-wise Power EP).

        As `GPR.condition_on_observations` (fantasies y [F, k] included), at O(k·M² + M³):
        the new points' terms are added to the M×M statistics, which are factorised again.
        See `sparsegp.models.core.conditioning`."""
        return condition_on_observations(self, X, y, noise)

    def _conditioning_member(self) -> Family | None:
        """The collapsed family's member conditioning updates (this model's), or None in the
        exact limit (`is_exact`): the exact GP's update, and the new inputs join the inducing
        inputs, so that the new model is the exact GP too."""
        return None if isinstance(self.posterior(), ExactPosterior) else self._family

    @property
    def num_fantasies(self) -> int | None:
        """F for a model conditioned on F fantasies (y [F, k]), else None."""
        return self.spec.fantasies

    def update(self, X_new: ArrayLike, y_new: ArrayLike, inducing_points: InducingLike = None,
               fit: bool = True, **fit_options: Any) -> SGPR:
        """Streaming update (Bui, Nguyen & Turner 2017): a `StreamingSGPR` that has seen this
        model's data, through its posterior alone, and the new batch X_new [N, D], y_new [N]
        (units of X and y).

        This model: approximation "vfe", "fitc" or "pep", one output, one noise variance,
        inducing points and a zero prior mean; one loaded without its data will do, as long
        as its saved posterior is current. The new model starts from the old hyperparameters
        and keeps the old units (standardisation) and approximation. `inducing_points` means
        what it means at construction, except that an int M (and the default, None: as many
        as this model has) chooses M inputs by seeded k-means++ from the old inducing inputs
        and X_new together, so that they cover both the old data's summary and the new
        batch; an array [M, D] (units of X) or an `InducingPoints` is taken as given
        (`inducing_points=model.inducing_points` keeps the old ones). With `fit` (default)
        the hyperparameters and inducing inputs are then fitted to the new batch and the
        summary (`fit_options`: those of `fit`, e.g. maxiter); `fit=False` returns the model
        at the old hyperparameters. Cost O(N·M² + M³); the old data are never needed.

        Kept inducing inputs and hyperparameters (b = a, `fit=False`) give the batch posterior
        and bound of all the data seen (`log_marginal_likelihood()`s add up to the batch one),
        exactly with jitter=0; the relative jitter on Kuu perturbs this at its own order (the
        new model sees f(Z_a), the old one f(Z_a) plus the jitter). See
        `sparsegp.models.core.streaming`."""
        return streaming.update(self, X_new, y_new, inducing_points, fit, fit_options)

    def _stream_summary(self) -> Summary:
        """The summary of the posterior q(a) an update carries, or a clear error."""
        if self.approximation not in STREAMING_APPROXIMATIONS or self.blocks is not None:
            raise ValueError("streaming updates take approximation 'vfe', 'fitc' or 'pep' "
                             f"without blocks; this model has {self.approximation!r}"
                             + (" with blocks" if self.blocks is not None else ""))
        if self.num_outputs != 1 or self.mixing_matrix is not None:
            raise ValueError("streaming updates take a model of one output, y [N]")
        if self.heteroscedastic:
            raise ValueError("streaming updates take a model with one noise variance")
        return streaming.summary_of(self, "the collapsed posterior of one output (an SGPR's)",
                                    self._sparse_posterior() if self.is_exact else None)

    def _stream_batch(self, X_new: ArrayLike, y_new: ArrayLike) -> streaming.Batch:
        """X_new and y_new in this model's internal units (float64)."""
        check_same_rows(X_new, y_new)
        check_columns(X_new, self.feature_names, "X_new")
        X = as_inputs(X_new, "X_new", num_features=self.input_dim, device=self.device)
        y = as_targets(y_new, X.shape[0], "y_new", device=self.device)
        units = self.units
        return streaming.Batch(units.inputs(X.to(PARAMETER_DTYPE)),
                               units.targets(y.to(PARAMETER_DTYPE)))

    def _stream_extras(self, batch: streaming.Batch) -> dict[str, Tensor]:
        return {}

    def _stream_state(self, old: Summary, feature: InducingFeature) -> dict[str, Tensor]:
        """The streamed model's values besides its parts: the noise and the summary."""
        return {"raw_noise_variance": self._raw("noise_variance").detach(),
                **streaming.summary_state(old)}

    # -- diagnostics ----------------------------------------------------------------------
    def diagnostics(self, *, merge_fraction: float = MERGE_FRACTION,
                    far_lengthscales: float = FAR_LENGTHSCALES,
                    noise_fraction: float = NOISE_FRACTION,
                    gap_per_point: float = GAP_PER_POINT, exact_max_data: int = EXACT_MAX_DATA,
                    extra_inducing: int | None = None, overestimate_nats: float | None = None,
                    quadratic_max_data: int = QUADRATIC_MAX_DATA) -> Diagnostics:
        """Is the approximation good? Bounds, their gap, noise and inducing-input checks
        (a streamed model's: of its new batch and its summary together); see
        `sparsegp.diagnostics.diagnose` for the checks and their thresholds."""
        return diagnose(self, merge_fraction=merge_fraction, far_lengthscales=far_lengthscales,
                        noise_fraction=noise_fraction, gap_per_point=gap_per_point,
                        exact_max_data=exact_max_data, extra_inducing=extra_inducing,
                        overestimate_nats=overestimate_nats,
                        quadratic_max_data=quadratic_max_data)


def _block_family(approximation: Any, alpha: Any, blocks: Any, n: int, placement: Placement
                  ) -> tuple[Family, BlocksSpec]:
    """Block Power EP's family member and its spec entry (the labels, one power per block)."""
    name = approximation.lower() if isinstance(approximation, str) else approximation
    if name not in ("fitc", "pep"):
        raise ValueError("blocks apply to approximation='fitc' (PITC) or 'pep' (block Power "
                         f"EP); got approximation={approximation!r}")
    labels, _ = label_codes(blocks, n)
    if placement.sharded:
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
    return (_block_member(name, powers),
            BlocksSpec(tuple(labels.tolist()), tuple(float(a) for a in powers.tolist())))


def _check_blocks_lie_on_one_rank(labels: Any) -> None:
    """With data sharded over ranks, each block must be on one rank (its Kff block is
    factorised where its rows are): every rank raises the same error otherwise."""
    held = all_gather_objects(set(labels.tolist()), "the block labels")
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
