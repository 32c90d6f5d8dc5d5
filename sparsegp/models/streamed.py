"""What the streamed models (`StreamingSGPR`, `StreamingSVGP`, `StreamingSGPC`) share: how much
data they have seen, the refusal of the batch checks a model does not redefine for its new batch
and summary, the summary of the old data in buffers (`Summarised`), the posterior an update
summarises, and the assembly of the new model."""

from __future__ import annotations

import copy
from typing import Any, TypeVar, cast

import torch
from torch import Tensor

from ..distributed import is_distributed
from ..features.inducing_points import InducingPoints
from ..objectives.online import Summary, summarise
from ..parameters import Parameterised
from ..posteriors import SparsePosterior
from ..runtime.config import PARAMETER_DTYPE
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


class Summarised:
    """Mixin of a streamed model that holds the data before its batch as the summary of the
    old posterior (`objectives.online.Summary`: pseudo-observations h = Tᵀa + ε at the old
    inducing inputs), in buffers that are saved with the model (`StreamingSGPR`,
    `StreamingSGPC`). Its `_config["streaming"]` holds the summary's sizes (`summary_sizes`)."""

    summary_Z: Tensor
    summary_T: Tensor
    summary_h: Tensor
    summary_offset: Tensor

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        super()._build(config, parts)  # type: ignore[misc]
        info = config["streaming"]
        M, r, D = int(info["old_inducing"]), int(info["rank"]), int(config["input_dim"])
        module = cast(Any, self)
        module.register_buffer("summary_Z", torch.zeros(M, D, dtype=PARAMETER_DTYPE))
        module.register_buffer("summary_T", torch.zeros(M, r, dtype=PARAMETER_DTYPE))
        module.register_buffer("summary_h", torch.zeros(r, dtype=PARAMETER_DTYPE))
        module.register_buffer("summary_offset", torch.zeros((), dtype=PARAMETER_DTYPE))

    def old_summary(self) -> Summary:
        """The summary of the data before this batch (internal units)."""
        return Summary(self.summary_Z, self.summary_T, self.summary_h, self.summary_offset)

    def keep_summary(self, summary: Summary) -> None:
        """Copy `summary` (of the sizes this model was built for) into the buffers."""
        with torch.no_grad():
            for name in ("Z", "T", "h", "offset"):
                getattr(self, "summary_" + name).copy_(getattr(summary, name))


def summary_sizes(summary: Summary) -> dict[str, int]:
    """The `_config["streaming"]` entries a `Summarised` model is built from."""
    return {"old_inducing": int(summary.T.shape[0]), "rank": int(summary.T.shape[1])}


def check_streamable(model: Any) -> None:
    """What every streaming update needs of the old model (after its own checks), or a clear
    error: inducing points, a zero prior mean, one process."""
    if not isinstance(model.feature, InducingPoints):
        raise TypeError("streaming updates take a model with inducing points; this one has "
                        f"{type(model.feature).__name__} features")
    if model.prior_mean() is not None:
        raise ValueError("streaming updates take a model with a zero prior mean (the old "
                         "posterior holds f, not f minus a mean that the new batch would refit)")
    if is_distributed():
        raise RuntimeError("streaming updates run in one process: torch.distributed is "
                           "initialised")


def summary_of(model: Any, kind: str) -> Summary:
    """The summary (`objectives.online.summarise`) of the posterior q(a) of `model` (after the
    model's own checks), or a clear error: `check_streamable`, and a current posterior in
    precision form of one latent function (`kind` names it: "the collapsed posterior of one
    output")."""
    check_streamable(model)
    try:
        post = model.posterior()
    except RuntimeError as err:
        raise ValueError("update needs the model's posterior q(u), which summarises its data: "
                         f"{err}") from None
    if not isinstance(post, SparsePosterior) or not post.q.precision or post.num_latent != 1:
        raise ValueError(f"update needs {kind}")
    return summarise(model.feature.locations(), post.L, post.q.root, post.q.mean)


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
