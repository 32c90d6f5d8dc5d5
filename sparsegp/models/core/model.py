"""The base of every model: one constructor, a posterior cached under the whole state, the
training loss, one `fit()`, predictions written once, saving, and the dtype of the work.

A model is its parts — the kernel, the prior mean, and where the family has them the
inducing feature and the likelihood (`nn.Module`s it holds) —, the units of its data
(`units.Units`, over its buffers), where its data live (`data.Placement`), a typed spec
(`spec.ModelSpec`: what its options and its data fixed), a pure objective (`objectives/`), a
posterior builder and a training plan (`fitting`). However a model comes about — its
`__init__`, `load`, a streaming `update`, `condition_on_observations` — it is built by one
constructor, `_construct(spec, parts, ...)`, which calls the family's `_declare` (the only
place a model's structure — parameters, buffers, modules — is declared) and then puts in
what that way of building gives: data, values, frozen flags, priors, a posterior.

The posterior is cached under a key of *all* the state it depends on (every parameter and
buffer: their values — exact copies, checksums of the data-sized ones —, version counters,
identity, shape, dtype, device; the training data and, e.g., EP sites included:
`state.StateKey`), so any change — by `fit`, a torch optimiser, a setter, `.data` or a numpy
view, a site update or new data — makes the next prediction build it anew. Parameters,
stored data and factorisations are float64 whatever the data's dtype
(`config.PARAMETER_DTYPE`); `model.dtype` is the dtype of the heavy work and of the outputs.
"""

from __future__ import annotations

import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypedDict, TypeVar, cast

import numpy as np
import torch
from torch import Tensor, nn
from torch.distributions import Distribution

from ...distributed import POOLED_ROWS
from ...features.base import InducingFeature
from ...kernels.active import columns_seen
from ...kernels.base import Kernel
from ...kernels.separate import Separate
from ...kernels.stationary import SquaredExponential
from ...likelihoods.base import Likelihood
from ...means import Mean, Zero, as_mean
from ...parameters import Parameterised, Prior
from ...posteriors import Posterior
from ...registry import Registry
from ...runtime.transforms import outside_transforms
from ...training import FitResult
from ...validation import (
    ArrayLike,
    ScaleWarning,
    check_columns,
    check_feature_names,
    check_not_meta,
    input_scale_problems,
)
from . import dtypes, fitting, pathwise, predictions
from .data import (
    Data,
    Inputs,
    Placement,
    placement_for,
    pooled_data,
    prepare_inputs,
    shards_here,
)
from .inducing import location_alias
from .labels import classifies, predicted_labels
from .noise import Noise
from .options import ModelOptions
from .persistence import save_model
from .registry import MODELS
from .spec import ModelSpec
from .state import StateKey, state_key
from .units import Units, identity_units


class Parts(TypedDict, total=False):
    """The modules a model is built from: its kernel, its prior mean, and where the family has
    them its inducing feature, its likelihood and its basis of features (RFF, SSGP)."""

    kernel: Kernel
    mean: Mean
    feature: InducingFeature
    likelihood: Likelihood
    basis: nn.Module


#: The options type of a model class (`options.ModelOptions` or a subclass).
O = TypeVar("O", bound=ModelOptions)


class Targets(NamedTuple):
    """A constructor's targets, checked (`BuiltFromData._prepare_targets`): as the objective takes
    them (internal units, labels as codes), the values of the buffers `_declare` makes for
    them (the units of y), the data-sized buffers that go with them (noise codes, ...), the
    spec's fields they fix, and what is badly scaled about them (a `ScaleWarning`)."""

    y: Tensor
    buffers: dict[str, Tensor]
    extras: dict[str, Tensor]
    fields: dict[str, object]
    problems: list[str]


class BuiltFromData(Protocol):
    """What `Model._build_from_data` needs of a model built from (X, y) beyond `Model`: its
    targets checked against the data and the parts (see `Targets`). Models without
    observed inputs (the latent-input ones) have no such step."""

    def _prepare_targets(self, y: ArrayLike, inputs: Inputs, parts: Parts, options: Any,
                         placement: Placement) -> Targets: ...


#: The modules a model may hold as parts, each saved as its own config and rebuilt by its
#: registry on `load`.
PARTS: dict[str, Registry] = {"kernel": Kernel.registry, "feature": InducingFeature.registry,
                              "likelihood": Likelihood.registry, "mean": Mean.registry}


class Model(Parameterised, Generic[O], metaclass=ABCMeta):
    """The base of every model (see the module docstring).

    A family declares what it is (class attributes), its spec type, its structure
    (`_declare`), its objective (`_objective`), its posterior (`_build_posterior`,
    `_restore_posterior`) and its training plan (`training_plan`)."""

    registry: ClassVar[Registry] = MODELS
    #: the spec type of the family
    spec_type: ClassVar[type[ModelSpec]] = ModelSpec
    #: True: under an initialised torch.distributed process group X and y are this rank's
    #: shard of data sharded over the ranks (SGPR, RFF/SSGP)
    shards_data: ClassVar[bool] = False
    #: False: the posterior is the model's own parameters (SVGP's q(u)): no data needed
    posterior_needs_data: ClassVar[bool] = True
    #: False: the posterior cannot be built with the graph to the parameters (KISS-GP's
    #: Lanczos run updates in place), so tensor predictions differentiate the inputs only
    tracks_parameters: ClassVar[bool] = True
    #: `save()` keeps the training data by default (the exact GP, the random-input models)
    saves_data_by_default: ClassVar[bool] = False
    #: the options this model's `fit` takes (those of all its plans); any other is refused
    fit_options: ClassVar[frozenset[str]] = frozenset({"maxiter", "tol", "progress",
                                                       "callback"})

    spec: ModelSpec
    kernel: Kernel
    mean: Mean
    X: Tensor | None  # buffers (not saved with the parameters): the data, internal units
    y: Tensor | None
    x_shift: Tensor  # buffers [D]: X is stored as (X − x_shift)/x_scale
    x_scale: Tensor
    metadata: dict[str, Any]

    #: the class a streaming `update` of this model makes: the streamed variant of its
    #: family, which names the family it streams when it is defined (`streams=`)
    streamed_class: ClassVar[type[Model] | None] = None

    def __init_subclass__(cls, streams: type[Model] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.registry.add(cls)
        if streams is not None:  # `class StreamingSGPR(SGPR, streams=SGPR)`
            streams.streamed_class = cls

    # -- the one constructor ----------------------------------------------------------------
    def _construct(self, spec: ModelSpec, parts: Parts, *,
                   data: Data | None = None, state: Mapping[str, Tensor] | None = None,
                   strict: bool = False, frozen: Iterable[str] | None = None,
                   priors: Mapping[str, Prior] | None = None,
                   posterior: Posterior | None = None,
                   metadata: Mapping[str, Any] | None = None) -> None:
        """Build this (empty) model: the structure from `spec` and `parts` (`_declare`), then
        the values of `state` (all of them with `strict`, as a file holds them; else those it
        has: the units at construction, what an update carries over), the `data`, the parameters named in
        `frozen` frozen (None: as declared), `priors`, `metadata`, and `posterior` as the
        posterior of the state it ends with."""
        Parameterised.__init__(self)
        self.spec = spec
        self._cache: tuple[Posterior, StateKey] | None = None
        self.metadata = dict(metadata or {})
        self._declare(spec, parts)
        self.register_buffer("X", None, persistent=False)
        self.register_buffer("y", None, persistent=False)
        device = _device_of(parts, state, data)
        self.to(device)
        if data is not None:
            self.X = None if data.X is None else data.X.to(device)
            self.y = data.y.to(device)
            for name, value in data.extras.items():
                setattr(self, name, value.to(device))
        if state:
            # a partial state (the units at construction, what an update carries over) sets
            # what it holds; the rest stays as declared (the parts' values and bounds)
            unexpected = self.load_state_dict(dict(state), strict=strict).unexpected_keys
            if unexpected:
                raise KeyError(f"{type(self).__name__} has no {', '.join(unexpected)}")
        if frozen is not None:
            names = set(frozen)
            for name, p in self.named_parameters():
                p.requires_grad_(name not in names)
        for name, prior in (priors or {}).items():
            self.set_prior(name, prior)
        if posterior is not None:
            self._cache = (posterior, state_key(self))

    @classmethod
    def _assemble(cls, spec: ModelSpec, parts: Parts, **given: Any
                  ) -> Model:
        """A new model of this class built by `_construct` (load, updates, conditioning)."""
        model = cls.__new__(cls)
        model._construct(spec, parts, **given)
        return model

    def _build_from_data(self, X: ArrayLike, y: ArrayLike, options: O) -> None:
        """What the constructor of a model with observed inputs does: check and standardise X
        (`data.prepare_inputs`), check the options against them (`_configure`: the spec's
        fields and the parts), the targets (`_prepare_targets`), warn about badly scaled
        data, build the model (`_construct`), and give the parameters the user did not give
        their data-based starting values (`_initialise`; with sharded data from the rows of
        all ranks, then rank 0's everywhere)."""
        placement = placement_for(shards_here(self.shards_data))
        inputs = prepare_inputs(X, y, options.dtype, options.standardize_X, placement,
                                getattr(options, "inducing_points", None))
        fields, parts = self._configure(inputs, options, placement)
        # per-column scale advice does not apply where the kernel fixes what each column
        # means (image pixels shared by every patch position refuse standardize_X)
        fixed = getattr(parts.get("kernel"), "input_dim", None) is not None
        problems = ([] if options.standardize_X or fixed
                    else input_scale_problems(inputs.X, inputs.names))
        targets = cast(BuiltFromData, self)._prepare_targets(y, inputs, parts, options,
                                                             placement)
        spec = self.spec_type(
            dtype=dtypes.dtype_name(inputs.dtype), jitter=options.jitter,
            num_data=inputs.num_data, input_dim=inputs.X.shape[1],
            feature_names=None if inputs.names is None else tuple(inputs.names),
            sharded=placement.sharded, **{**fields, **targets.fields})
        warn_scale(type(self).__name__, problems + targets.problems, stacklevel=4)
        self._construct(spec, parts, data=Data(inputs.X, targets.y, targets.extras),
                        state={"x_shift": inputs.shift, "x_scale": inputs.scale,
                               **targets.buffers})
        try:
            with pooled_data(self, placement, POOLED_ROWS):
                self._initialise(options)
        except ValueError as err:
            if "floor" not in str(err):
                raise
            raise ValueError(f"{err}: the starting value taken from the data is below the "
                             "parameter's floor, so the data are on a scale the defaults "
                             "cannot represent; pass standardize_X=True and/or "
                             "standardize_y=True (or rescale the data, or give the value "
                             "yourself)") from None
        placement.synchronise(self)

    def _configure(self, inputs: Inputs, options: O, placement: Placement
                   ) -> tuple[dict[str, object], Parts]:
        """The options checked against the inputs: the spec's fields they fix and the parts
        (here the kernel — by default a squared exponential with ARD lengthscales — and the
        prior mean; families add theirs)."""
        kernel = SquaredExponential(ard=True) if options.kernel is None else options.kernel
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a sparsegp kernel; got {type(kernel).__name__}")
        if isinstance(kernel, Separate) and not getattr(self, "separate_kernels", False):
            raise TypeError(f"{type(self).__name__} takes one kernel: kernels.Separate (one "
                            "kernel per output) is for SGPR and SVGP with y [N, P]")
        # on the data's device from here on: inducing inputs given as tensors there are
        # checked against the kernel before the model moves as a whole
        return {}, {"kernel": kernel.to(inputs.device),
                    "mean": as_mean(options.mean).to(inputs.device)}

    def _initialise(self, options: O) -> None:
        """Data-based starting values of the parameters the user did not give."""

    @classmethod
    def _from_file(cls, config: dict[str, Any], state: dict[str, Tensor]
                   ) -> tuple[ModelSpec, Parts, dict[str, Tensor]]:
        """The spec, the parts and the state a saved model is rebuilt from (`load`): the
        spec from the config, every part by its registry from its own config (a family
        completes what files of earlier versions lack)."""
        parts = cast(Parts, {name: registry.build(config[name])
                             for name, registry in PARTS.items() if name in config})
        return cls.spec_type.from_config(config), parts, state

    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> Model:
        """An empty model of the saved structure (the values are `load_state_dict(state)`'s to
        give), built as `load` builds it."""
        spec, parts, _ = cls._from_file(config, dict(state))
        return cls._assemble(spec, parts)

    def _adopt_posterior(self, post: Posterior) -> None:
        """Use `post` (restored by `load`) as the posterior of the current state."""
        self._cache = (post, state_key(self))

    @abstractmethod
    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        """Declare the structure (parameters, buffers, modules) from the spec and the parts:
        the one place it is written, whatever way the model is built."""

    def _declare_units(self, input_dim: int, num_outputs: int | None = None,
                       targets: bool = True) -> None:
        """The buffers of the data's units: of the inputs [D] and, with `targets`, of y
        (`y_shift` [] or [P], `y_scale` [])."""
        for name, value in identity_units(input_dim, num_outputs).items():
            if targets or name.startswith("x_"):
                self.register_buffer(name, value)

    # -- what every model reads -----------------------------------------------------------
    @property
    def num_inducing(self) -> int:
        """M, the inducing variables of the model's inducing feature."""
        feature = self._modules.get("feature")
        if not isinstance(feature, InducingFeature):
            raise AttributeError(f"{type(self).__name__} has no inducing variables")
        return feature.num_inducing

    @property
    def _aliases(self) -> dict[str, str]:
        """'inducing_points' names the location parameter of the inducing feature (Z, or TFIF
        centres), where the model has one."""
        feature = self._modules.get("feature")
        return location_alias(feature) if isinstance(feature, InducingFeature) else {}

    @property
    def placement(self) -> Placement:
        """Where the data live: one process, or this rank's shard (`data.Placement`)."""
        return placement_for(self.spec.sharded)

    @property
    def jitter(self) -> float:
        return self.spec.jitter

    @property
    def num_data(self) -> int:
        """N: the number of training points (of all shards, when the data are sharded)."""
        return self.spec.num_data

    @property
    def input_dim(self) -> int:
        return self.spec.input_dim

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the heavy work and of the outputs (parameters are float64)."""
        return dtypes.DTYPES[self.spec.dtype]

    @property
    def device(self) -> torch.device:
        return self.x_shift.device

    @property
    def feature_names(self) -> list[str] | None:
        """The names of the D input columns: those of a DataFrame X (or set here), else None.

        Saved with the model; a DataFrame passed for prediction must have exactly these
        columns in this order (a numpy array is taken by position)."""
        names = self.spec.feature_names
        return None if names is None else list(names)

    @feature_names.setter
    def feature_names(self, names: list[str] | None) -> None:
        checked = check_feature_names(names, self.input_dim)
        self.spec = self.spec.but(feature_names=None if checked is None else tuple(checked))

    @property
    def units(self) -> Units:
        """The units of the data (`units.Units`): 0 and 1 where the model has none."""
        one = torch.ones((), dtype=self.x_shift.dtype, device=self.x_shift.device)
        y_shift = getattr(self, "y_shift", None)
        y_scale = getattr(self, "y_scale", None)
        return Units(self.x_shift, self.x_scale, one * 0 if y_shift is None else y_shift,
                     one if y_scale is None else y_scale)

    def _data(self) -> tuple[Tensor, Tensor]:
        """(X, y): the training data in the internal units, or the error of
        `_require_data` where the model holds none."""
        self._require_data()
        assert self.X is not None and self.y is not None
        return self.X, self.y

    def _require_data(self) -> None:
        if self.y is None:
            raise RuntimeError(
                f"this {type(self).__name__} {self._why_no_data()}: it can predict with its "
                "posterior but not evaluate or fit an objective, nor change what the "
                f"posterior is built from{self._how_to_get_data()}")

    def _why_no_data(self) -> str:
        """Why the model holds no training data (where `y` is None), for the errors."""
        return "was loaded without its training data"

    def _how_to_get_data(self) -> str:
        return " (save with include_data=True for that)"

    def prior_mean(self) -> Mean | None:
        """The prior mean as the objectives take it: None when it is zero."""
        mean = getattr(self, "mean", None)
        return None if mean is None or isinstance(mean, Zero) else mean

    def zero_mean_targets(self) -> Tensor:
        """y − m(X), internal units: the targets of the zero-mean GP the diagnostics see."""
        self._require_data()
        assert self.X is not None and self.y is not None
        with torch.no_grad():
            return self.y - self.mean(self.X)

    # -- objective and training -----------------------------------------------------------
    @abstractmethod
    def _objective(self) -> Tensor:
        """The objective being maximised, on the internal (standardised) data."""

    def _observed_targets(self) -> int:
        """The observed target values (what the units' offset counts)."""
        return self.num_data

    def _objective_offset(self) -> float:
        """A constant added to `_objective` to report it in the units of y:
        −(observed targets)·log s_y (0 for a model without units of y)."""
        if getattr(self, "y_scale", None) is None:
            return 0.0
        return self.units.offset(self._observed_targets())

    def training_loss(self) -> Tensor:
        """Minus (objective + log prior): the differentiable scalar that `fit()` minimises."""
        self._require_data()
        return -(self._objective() + self._objective_offset() + self.log_prior())

    def log_marginal_likelihood(self) -> float:
        """The objective being maximised (exact log evidence, a bound, an energy), as a
        float in the units of y."""
        self._require_data()
        with torch.no_grad():
            return float(self._objective()) + self._objective_offset()

    @abstractmethod
    def training_plan(self, options: fitting.FitOptions) -> fitting.TrainingPlan:
        """The plan `fit()` runs for these options (its documentation says what each option
        means for this model, and its defaults): `model.training_plan(FitOptions(
        batch_size=64)).name` names it without training."""

    def fit(self, maxiter: int | None = None, tol: float | None = None,
            progress: bool | None = None,
            callback: Callable[[int, float], None] | None = None, *,
            diagnose: bool | None = None, batch_size: int | None = None,
            epochs: int | None = None, lr: float | None = None, natgrad: bool | None = None,
            gamma: float | None = None, seed: int | None = None,
            data: Iterable[tuple[Tensor, Tensor]] | None = None,
            schedule: str | None = None, inner_maxiter: int | None = None,
            max_sweeps: int | None = None, sweeps_per_batch: int | None = None,
            refresh_every: int | None = None) -> FitResult:
        """Train the model by its training plan and return the `FitResult` (Ctrl-C stops at
        the last accepted state; the result says it was interrupted).

        Which options a model takes (`fit_options`), their defaults and the plan they choose
        are the model's: see its `training_plan`. SIGTERM (`kill`, `timeout`, schedulers,
        `docker stop`) stops training as Ctrl-C does, and then ends the program: `fit()`
        raises `sparsegp.FitTerminated` (a SystemExit, status 143, carrying the interrupted
        result; the model holds its last accepted state, for a `finally:` to save);
        `training.interrupts_end_run` changes what either interrupt does. An option the
        model never takes is a TypeError; one that the chosen plan does not read gives a
        warning naming it. A fit that stopped at its iteration or round limit before
        converging, or ran out of its epoch budget while the objective still rose, gives a
        `ConvergenceWarning` naming the option that raises the limit (not with
        `diagnose=False`, which skips every check after fitting)."""
        options = fitting.FitOptions(maxiter, tol, progress, callback, diagnose, batch_size,
                                     epochs, lr, natgrad, gamma, seed, data, schedule,
                                     inner_maxiter, max_sweeps, sweeps_per_batch, refresh_every)
        return fitting.run(self, options)

    def _prediction_probe(self) -> Callable[[], tuple[Tensor, Tensor]] | None:
        """What the settling rule of a fit follows (`training.settle.Probe`): None here (the
        objective's stall rule alone decides)."""
        return None

    def evaluation_work(self) -> float:
        """Flops of one objective evaluation, roughly (N·M² + M³ with M inducing variables,
        N³ without): small problems train on one thread (`threads.threads_for`)."""
        N = float(self.num_data)
        M = float(getattr(self, "num_inducing", N))
        return (N * M * M + M**3) * getattr(self.kernel, "evaluation_cost", 1)

    # -- posterior ------------------------------------------------------------------------
    @abstractmethod
    def _build_posterior(self) -> Posterior:
        """The frozen posterior at the current state (see `posterior`)."""

    @abstractmethod
    def _restore_posterior(self, saved: dict[str, Any]) -> Posterior:
        """The posterior from the tensors `Posterior.state()` saved."""

    def posterior(self) -> Posterior:
        """The frozen posterior at the current state, cached under the whole state (every
        parameter's and buffer's values: `state.StateKey`), so any change builds it anew."""
        # outside any torch.func transform around the call: the key's snapshots of the
        # values and the posterior are plain tensors, valid after the transform returns
        with outside_transforms(self):
            key = state_key(self)
            if self._cache is not None and self._cache[1] == key:
                return self._cache[0]
            if self.posterior_needs_data:
                self._require_data()
            with torch.no_grad():
                post = self._build_posterior()
            self._cache = (post, key)
            return post

    def _holds_its_posterior(self) -> bool:
        """Whether the cached posterior is that of the current state (a model of fantasies
        holds nothing else to predict from)."""
        return self._cache is not None and self._cache[1] == state_key(self)

    def _prediction_posterior(self, tracks: bool) -> Posterior:
        """The posterior with the graph to the parameters (`tracks`; built anew) or the cached
        one. A model loaded without its data has only its saved posterior."""
        if tracks and self.tracks_parameters and (self.y is not None
                                                  or not self.posterior_needs_data):
            return predictions.built_posterior(self._build_posterior)
        return self.posterior()

    # -- predictions (core/predictions.py: posterior → mixing → units → observations) ------
    def _internal_inputs(self, Xnew: ArrayLike, name: str = "Xnew") -> Tensor:
        """Xnew in the model's internal (standardised) units, float64; a tensor keeps its
        graph (see `predictions`)."""
        check_columns(Xnew, self.feature_names, name)
        X = predictions.prediction_inputs(Xnew, name, self.input_dim, self.dtype, self.device)
        return self.units.inputs(X)

    def _output_mixing(self) -> Tensor | None:
        """The mixing matrix W [P, L] applied after the posterior (SVGP's LMC), or None."""
        return None

    def _keeps_columns(self) -> bool:
        """Whether predictions of one column stay [N*, 1] (the random-input models' outputs,
        fantasies) instead of [N*]."""
        return False

    @abstractmethod
    def _observations(self, rows: int, noise_variance: ArrayLike | None,
                      noise_groups: ArrayLike | None) -> predictions.Observations:
        """What y* at `rows` new points is observed through: Gaussian `Noise` (given the new
        points' noise, where the model's differs per point) or the likelihood."""

    @abstractmethod
    def _new_targets(self, ynew: ArrayLike, rows: int) -> Tensor:
        """Observed targets at `rows` new points, checked, as the observations score them
        (internal units; labels as the likelihood takes them)."""

    def _no_new_noise(self, noise_variance: ArrayLike | None,
                      noise_groups: ArrayLike | None) -> None:
        """Refuse the new points' noise where the likelihood fixes it."""
        if noise_variance is not None or noise_groups is not None:
            raise TypeError(f"noise_variance and noise_groups of new points are for "
                            f"regression models with a noise variance per point or group; "
                            f"this {type(self).__name__}'s noise is its likelihood's")

    @property
    def classifies(self) -> bool:
        """True under a classification likelihood (Bernoulli, MultiClass, Ordinal): `predict`
        gives labels and `predict_proba` probabilities."""
        likelihood = getattr(self, "likelihood", None)
        return likelihood is not None and classifies(likelihood)

    def predict_f(self, Xnew: ArrayLike, full_cov: bool = False, full_output_cov: bool = False
                  ) -> tuple[Any, Any]:
        """Mean and variance of the latent f* ([N*], or [N*, P] for P outputs or latent
        functions); `full_cov` gives covariances over the points ([N*, N*], or [P, N*, N*]),
        `full_output_cov` over the outputs at each point [N*, P, P]. In the units of y:
        numpy in, numpy out; a tensor in, differentiable tensors out (see
        `sparsegp.models.core.predictions`)."""
        return predictions.predict_f(self, Xnew, full_cov, full_output_cov)  # type: ignore[return-value]

    def predict_y(self, Xnew: ArrayLike, full_cov: bool = False, full_output_cov: bool = False,
                  *, noise_variance: ArrayLike | None = None,
                  noise_groups: ArrayLike | None = None) -> tuple[Any, Any]:
        """Mean and variance of y* under the likelihood (the Gaussian noise of regression
        models), shaped as `predict_f`'s; with Gaussian observations also the covariance of
        y* over the points (`full_cov`) or over the outputs (`full_output_cov`). A model
        whose noise differs per point needs the noise of the new points: their known
        `noise_variance` (a number or [N*], units of y) or their `noise_groups`."""
        return predictions.predict_y(self, Xnew, full_cov, full_output_cov,  # type: ignore[return-value]
                                     noise_variance, noise_groups)

    def predict(self, Xnew: ArrayLike, full_cov: bool = False, include_noise: bool = False, *,
                noise_variance: ArrayLike | None = None, noise_groups: ArrayLike | None = None,
                full_output_cov: bool = False) -> Any:
        """Under a classification likelihood the predicted labels [N*], in the training
        labels' convention (`predict_proba` gives the probabilities). Otherwise the moments
        of the latent f* (`predict_f`), or with `include_noise=True` of noisy y*
        (`predict_y`, which takes the new points' noise)."""
        if self.classifies:
            if full_cov or include_noise or full_output_cov:
                raise ValueError("predict gives labels under a classification likelihood and "
                                 "takes no full_cov, include_noise or full_output_cov (use "
                                 "predict_f / predict_y for moments)")
            return predicted_labels(self.predict_proba(Xnew), getattr(self, "classes", None))
        if include_noise:
            return self.predict_y(Xnew, full_cov, full_output_cov,
                                  noise_variance=noise_variance, noise_groups=noise_groups)
        return self.predict_f(Xnew, full_cov, full_output_cov)

    def predict_proba(self, Xnew: ArrayLike) -> Any:
        """Class probabilities: P(y* = 1) [N*] for Bernoulli, [N*, C] for several classes
        (classification likelihoods only)."""
        if not self.classifies:
            likelihood = getattr(self, "likelihood", None)
            raise TypeError(f"predict_proba needs a classification likelihood (Bernoulli, "
                            f"MultiClass, Ordinal); this {type(self).__name__}'s is "
                            f"{type(likelihood).__name__ if likelihood is not None else 'Gaussian noise'}:"
                            " use predict_y")
        return self.predict_y(Xnew)[0]

    def predict_log_density(self, Xnew: ArrayLike, ynew: ArrayLike, *,
                            noise_variance: ArrayLike | None = None,
                            noise_groups: ArrayLike | None = None) -> Any:
        """log p(y* | data) at each test point [N*] (one per output [N*, P] for several; NaN
        where y* is missing), in the units of y: the predictive density of y* at its observed
        value (e.g. for the test NLPD). The new points' noise as in `predict_y`."""
        return predictions.predict_log_density(self, Xnew, ynew, noise_variance, noise_groups)

    def predictive(self, Xnew: ArrayLike, full_cov: bool = False, observed: bool = False
                   ) -> Distribution:
        """The predictive distribution at Xnew as a `torch.distributions` object.

        Of the latent f* by default; of the observations y* with `observed=True` (Gaussian
        likelihoods: `Normal` / `MultivariateNormal` with the noise added; Bernoulli:
        `Bernoulli`; several classes: `Categorical`). For f* (and Gaussian y*) a `Normal` of
        the marginals (batch shape [N*], or [N*, P] for P outputs) by default, and with
        `full_cov` a `MultivariateNormal` over the points (event shape [N*]; batch shape [P]
        for several outputs). Tensors, differentiable as `predict_f`'s (with `rsample`);
        numpy inputs give detached tensors in the model's dtype."""
        if not observed:
            mean, var = (predictions.tensor_of(t) for t in self.predict_f(Xnew, full_cov))
            return predictions.gaussian(mean, var, full_cov, self.jitter_for_sampling())
        if self.classifies:
            if full_cov:
                raise ValueError("the labels' predictive has no covariance over the points")
            return predictions.label_distribution(predictions.tensor_of(self.predict_proba(Xnew)))
        if not isinstance(self._observations(1, None, None), Noise):
            raise ValueError(
                f"the predictive distribution of y* under this {type(self).__name__}'s "
                f"{type(getattr(self, 'likelihood', None)).__name__} likelihood is not "
                "available as a torch distribution: use predict_y for its moments, "
                "predict_log_density for its density")
        mean, var = (predictions.tensor_of(t) for t in self.predict_y(Xnew, full_cov))
        return predictions.gaussian(mean, var, full_cov, self.jitter_for_sampling())

    def jitter_for_sampling(self) -> float:
        """The relative jitter on joint covariances (`predictions.SAMPLE_JITTER`)."""
        return predictions.SAMPLE_JITTER

    def predict_f_samples(self, Xnew: ArrayLike, num_samples: int = 1, full_cov: bool = True,
                          seed: int | torch.Generator | None = None) -> Any:
        """Samples of f* from the posterior, [S, N*] (or [S, N*, P] for P outputs): joint over
        the points of Xnew with `full_cov` (default), independent marginals without.

        Reparameterised (mean + L ε), so a tensor Xnew gives samples differentiable as
        `predict_f`; numpy in, numpy out. `seed` (an int or a `torch.Generator`) makes them
        reproducible."""
        S = predictions.check_count(num_samples, "num_samples")
        mean, var = (predictions.tensor_of(t) for t in self.predict_f(Xnew, full_cov=full_cov))
        drawn = predictions.samples(mean, var, S, full_cov,
                                    predictions.generator_of(seed, mean.device))
        return drawn if isinstance(Xnew, Tensor) else drawn.detach().cpu().numpy()

    def pathwise_samples(self, num_samples: int = 1,
                         num_features: int = pathwise.DEFAULT_FEATURES,
                         seed: int | torch.Generator | None = None) -> pathwise.PathwiseSamples:
        """S posterior samples as functions (Wilson et al. 2020): `paths = model.
        pathwise_samples(S)`, then `paths(Xnew)` -> [S, N*] at any inputs, any number of
        times, the same functions each time, at O(R + M) per point (R = `num_features`
        random Fourier feature pairs of the prior; M inducing points, or N data points for
        the exact GP). For stationary kernels with a known spectral density and posteriors
        over inducing points of one latent function, or the exact GP; see
        `sparsegp.models.core.pathwise`."""
        S = predictions.check_count(num_samples, "num_samples")
        R = predictions.check_count(num_features, "num_features")
        fantasies = getattr(self, "num_fantasies", None)
        if fantasies is not None:
            raise ValueError(f"pathwise samples take one posterior; this model holds {fantasies} "
                             "fantasies (condition on one set of targets per model, or use "
                             "predict_f_samples, whose samples carry the fantasies)")
        generator = predictions.generator_of(0 if seed is None else seed, torch.device("cpu"))
        if generator is None or generator.device.type != "cpu":
            raise ValueError("pathwise_samples takes an int seed or a CPU torch.Generator")
        with torch.no_grad():
            return pathwise.PathwiseSamples(self, self.posterior(), S, R, generator)

    # -- persistence ----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Everything besides tensors that `load` needs to rebuild this model: the spec and
        the parts' configs."""
        parts = {name: module.config() for name in PARTS
                 if isinstance(module := getattr(self, name, None),
                               (Kernel, InducingFeature, Likelihood, Mean))}
        return {**self.spec.config(), **parts}

    def data_extras(self) -> dict[str, Tensor]:
        """Data-sized state saved along with the data (`save(include_data=True)`)."""
        return {}

    def save(self, path: str | Path, include_data: bool | None = None) -> None:
        """Save the fitted model (format-versioned; with its training data where
        `include_data`, by default for the exact GP and the random-input models); see
        `sparsegp.load`."""
        save_model(self, path, include_data)

    # -- dtype ----------------------------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> Model:
        """Move the model to a device (as `nn.Module.to`); a dtype sets the dtype of the heavy
        work and of the outputs instead of converting the parameters, which stay float64
        (float32 parameters would break the float64 factorisations)."""
        device, dtype, non_blocking = dtypes.parse_to(args, kwargs)
        if dtype is not None:
            self.spec = self.spec.but(dtype=dtypes.dtype_name(dtypes.checked(dtype, self)))
        if device is not None:
            check_not_meta(device)
            super().to(device, non_blocking=non_blocking)
        return self

    def float(self) -> Model:
        return self.to(torch.float32)

    def double(self) -> Model:
        return self.to(torch.float64)

    def half(self) -> Model:
        return self.to(torch.float16)

    def bfloat16(self) -> Model:
        return self.to(torch.bfloat16)

    def type(self, dst_type: object) -> Model:
        if not isinstance(dst_type, torch.dtype):
            raise TypeError(f"{type(self).__name__}.type takes a torch.dtype; got {dst_type!r}")
        return self.to(dst_type)

    # -- what users read ------------------------------------------------------------------
    def summary(self, labels: dict[str, list[str]] | None = None) -> str:
        """The table of `Parameterised.summary`; with `feature_names`, per-input parameters
        of the kernel and the mean (ARD lengthscales, linear weights: one value per column)
        are listed by column name."""
        names = self.feature_names
        if labels is None and names is not None:
            labels = self._column_labels(names)
        table = super().summary(labels)
        standardised = [what for what, scale in (("X", self.x_scale),
                                                 ("y", getattr(self, "y_scale", None)))
                        if scale is not None and not bool((scale == 1).all())]
        if standardised:  # the parameters then live in the standardised units
            table += (f"\n(values in the model's internal units: {' and '.join(standardised)} "
                      "standardised; model.noise_variance and model.inducing_points give "
                      "them in your units)")
        return table

    def _column_labels(self, names: list[str]) -> dict[str, list[str]]:
        """The per-input parameters of the kernel and the mean (`per_input`) with one value
        per column they see (a kernel inside `kernels.Active` sees its `dims`), by name."""
        everything = list(range(len(names)))
        seen = columns_seen(self.kernel, everything)
        labels = {}
        for prefix, root in (("kernel", self.kernel), ("mean", self.mean)):
            for path, part in root.named_modules():
                columns = seen.get(id(part), everything)
                for leaf in getattr(part, "per_input", ()):
                    value = part.value(leaf)
                    if value.dim() == 1 and value.shape[0] == len(columns):
                        labels[".".join(p for p in (prefix, path, leaf) if p)] = [
                            names[c] for c in columns]
        return labels

    def __repr__(self) -> str:
        return f"{type(self).__name__}(N={self.num_data}, D={self.input_dim})\n{self.summary()}"


def _device_of(parts: Parts, state: Mapping[str, Tensor] | None,
               data: Data | None) -> torch.device:
    """Where a model built from these goes: its data's device, else its state's, else its
    parts'."""
    if data is not None:
        return data.y.device
    for t in (state or {}).values():
        return t.device
    for part in parts.values():
        for p in cast(nn.Module, part).parameters():
            return p.device
    return torch.device("cpu")


def refuse_options(model: Model, options: Mapping[str, object]) -> None:
    """The TypeError of a `diagnostics()` that takes no thresholds, naming those given."""
    if options:
        raise TypeError(f"{type(model).__name__}.diagnostics() takes no options; got "
                        f"{', '.join(sorted(options))}")


def warn_scale(model: str, problems: list[str], stacklevel: int) -> None:
    """One ScaleWarning listing badly scaled data."""
    if problems:
        warnings.warn(f"{model}: badly scaled data: {'; '.join(problems)}", ScaleWarning,
                      stacklevel=stacklevel)


def as_numpy(t: Tensor) -> np.ndarray:
    """A detached copy of t as a numpy array."""
    return t.detach().cpu().numpy().copy()
