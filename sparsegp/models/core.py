"""The model core: what every model shares, whatever its data — the posterior cache, the
training loss, persistence, fitting (`Fitting`) and predictions (`Predicting`).

`Model` (observed inputs X) and `LatentInputModel` (random inputs) build on it; a model
declares its data handling, its objective (`_objective`), its posterior (`_build_posterior`,
`_restore_posterior`) and its training plan (`training_plan`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..features.base import InducingFeature
from ..kernels.base import Kernel
from ..likelihoods.base import Likelihood
from ..means import Mean
from ..parameters import Parameterised
from ..posteriors import Posterior
from ..registry import Registered, Registry
from .classes import MODELS
from .dtypes import DtypeModule
from .fitting import FitOptions, Fitting, TrainingPlan
from .persistence import save_model
from .predictions import Predicting
from .state import StateKey, state_key

#: The modules a model may own, each rebuilt from its own entry of the config on `load`.
PARTS: dict[str, Registry] = {"kernel": Kernel.registry, "feature": InducingFeature.registry,
                              "likelihood": Likelihood.registry, "mean": Mean.registry}


class ModelCore(Fitting, Predicting, Registered, DtypeModule, ABC):
    """The base of every model (see the module docstring)."""

    registry = MODELS
    saves_data_by_default = False
    _config: dict[str, Any]
    _cache: tuple[Posterior, StateKey] | None

    @abstractmethod
    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        """Declare the structure from a config and its modules (construction and `load`)."""

    @abstractmethod
    def _require_data(self) -> None:
        """Raise, saying what is missing, when the model holds no training data."""

    @abstractmethod
    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """The plan `fit()` runs for these options (its documentation says what each option
        means for this model, and its defaults): `model.training_plan(FitOptions(
        batch_size=64)).name` names it without training."""

    # -- objective ------------------------------------------------------------------------
    @abstractmethod
    def _objective(self) -> Tensor:
        """The objective being maximised, on the internal (standardised) data."""

    def _objective_offset(self) -> float:
        """A constant added to `_objective` to report it in the user's units (0 here)."""
        return 0.0

    def training_loss(self) -> Tensor:
        """Minus (objective + log prior): the differentiable scalar that `fit()` minimises."""
        self._require_data()
        return -(self._objective() + self._objective_offset() + self.log_prior())

    # -- posterior ------------------------------------------------------------------------
    @abstractmethod
    def _build_posterior(self) -> Posterior:
        """The frozen posterior at the current state (see `posterior`)."""

    def posterior(self) -> Any:
        """The frozen posterior at the current state, cached under the whole state (every
        parameter's and buffer's values: `state.StateKey`), so any change builds it anew."""
        key = state_key(self)
        if self._cache is not None and self._cache[1] == key:
            return self._cache[0]
        if self.posterior_needs_data:
            self._require_data()
        with torch.no_grad():
            post = self._build_posterior()
        self._cache = (post, key)
        return post

    def _adopt_posterior(self, post: Posterior) -> None:
        """Use `post` (restored by `load`) as the posterior of the current state."""
        self._cache = (post, state_key(self))

    # -- persistence ----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Everything besides tensors that `load` needs to rebuild this model."""
        parts = {name: getattr(self, name).config() for name in PARTS if hasattr(self, name)}
        return {**self._config, **parts}

    def data_extras(self) -> dict[str, Tensor]:
        """Data-sized state saved along with the data (`save(include_data=True)`)."""
        return {}

    def save(self, path: str | Path, include_data: bool | None = None) -> None:
        """Save the fitted model (format-versioned; with its training data where
        `include_data`, by default for the random-input models only); see `sparsegp.load`."""
        save_model(self, path, include_data)

    @abstractmethod
    def _restore_posterior(self, saved: dict[str, Any]) -> Posterior:
        """The posterior from the tensors `Posterior.state()` saved."""

    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> ModelCore:
        """An empty model with the saved structure, ready for `load_state_dict(state)`."""
        model = cls.__new__(cls)
        Parameterised.__init__(model)
        model._build(config, {name: PARTS[name].build(config[name]) for name in PARTS
                              if name in config})
        return model
