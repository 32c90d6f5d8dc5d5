"""What every streamed model (`StreamingSGPR`, `StreamingSVGP`) shares: how much data it has
seen, and the refusal of the checks that speak of one batch of data only."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

import torch
from torch import Tensor

from ..parameters import Parameterised
from ..validation import check_bool


class Streamed:
    """Mixin of a model made by `update`: its `_config["streaming"]` holds the rows seen and
    the updates made. The batch upper bound and diagnostics look at one batch of data, while a
    streamed posterior also holds the data before it: they are refused here, not silently
    wrong, unless the model gives its own, of the new batch and its summary together
    (`StreamingSGPR`, `StreamingSVGP`)."""

    _config: dict[str, Any]

    @property
    def num_data_seen(self) -> int:
        """The rows of every batch this model has been updated with, this one too."""
        return int(self._config["streaming"]["seen"])

    @property
    def num_updates(self) -> int:
        """How many updates led to this model (1 for the first update of a batch model)."""
        return int(self._config["streaming"]["updates"])

    def _before(self) -> str:
        return (f"a {type(self).__name__}'s posterior also holds the data before its batch "
                f"(fit a batch model to all the data to diagnose the approximation)")

    def upper_bound(self) -> float:
        raise TypeError("upper_bound() bounds the evidence of one batch of data; "
                        + self._before())

    def diagnostics(self, **kwargs: Any) -> Any:
        raise TypeError("diagnostics() look at one batch of data; " + self._before())

    def diagnostic_view(self) -> Any:
        raise TypeError(f"a {type(self).__name__} has no diagnostic view: " + self._before())


def check_fit_arguments(fit: Any, fit_options: dict[str, Any]) -> None:
    """`update`'s `fit` and its fit options: options only with fit=True."""
    check_bool(fit, "fit")
    if fit_options and not fit:
        raise TypeError(f"fit options ({', '.join(sorted(fit_options))}) need fit=True")


S = TypeVar("S")


def assemble(cls: type[S], model: Any, X: Tensor, y: Tensor, parts: dict[str, Any],
             streaming: dict[str, Any]) -> S:
    """A `cls` (a streamed model) with `model`'s configuration, kernel, mean, units and own
    priors, the new batch (X, y) in those units, `parts` (its feature, ...) and
    `_config["streaming"]` = `streaming` plus the rows seen and the updates made, counting
    this one. The caller copies what is its own (the summary of the old data, q(u), ...)."""
    config = copy.deepcopy(model.config())
    seen = model.num_data_seen if isinstance(model, Streamed) else model.num_data
    updates = model.num_updates if isinstance(model, Streamed) else 0
    config.update(num_data=X.shape[0], streaming={
        **streaming, "seen": seen + X.shape[0], "updates": updates + 1})
    new: Any = cls.__new__(cls)
    Parameterised.__init__(new)
    new._build(config, {"kernel": copy.deepcopy(model.kernel),
                        "mean": copy.deepcopy(model.mean), **parts})
    new.to(model.device)
    with torch.no_grad():
        for name in ("x_shift", "x_scale", "y_shift", "y_scale"):
            if hasattr(model, name):  # (a classifier has no units of y)
                getattr(new, name).copy_(getattr(model, name))
    for name, prior in model.named_priors():
        if "." not in name:  # the model's own (the kernel's came with it)
            new.set_prior(name, prior)
    new.X, new.y = X, y
    new.metadata = copy.deepcopy(model.metadata)
    return new
