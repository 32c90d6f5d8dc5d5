"""The streaming update (Bui, Nguyen & Turner 2017), written once for SGPR, SVGP and SGPC:
a fitted model and a new batch of data make a streamed model that has seen both, without the
old data.

`update` runs the same steps for every family: what the old model keeps of its data (its
`_stream_summary`: checks, then the summary of its posterior q_old(a) over its inducing
inputs a — pseudo-observations for SGPR and SGPC (`objectives.online.Summary`), q_old and
p_old themselves for SVGP), the new batch in the old model's units (`_stream_batch`), the
new inducing inputs b (`new_feature`), the streamed model built by the one constructor from
the old model's spec and copies of its parts, with the summary in its buffers
(`_stream_state`), and the fit on the new batch and the summary (or, without it, the
family's start: `_stream_start`). Before it fits, the new batch is checked
(`stream_checks`: a batch that has moved, too few rows for the hyperparameters); after, the
family's checks after fitting run as after a batch fit. What the streamed model remembers
of its chain of updates is its spec's `streaming` entry (`spec.StreamSpec`: rows seen,
updates made, the summary's sizes).
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, NamedTuple, Protocol, cast

import torch
from torch import Tensor

from ...features.base import InducingLike
from ...features.inducing_points import InducingPoints
from ...features.initialisation import initial_inducing_inputs
from ...objectives.online.regression import Summary, summarise
from ...posteriors import Posterior, SparsePosterior
from ...runtime.config import PARAMETER_DTYPE
from ...validation import ArrayLike, check_bool
from .data import Data
from .inducing import resolve_feature
from .model import Model, Parts
from .spec import StreamSpec
from .stream_checks import warn_about_batch


class Batch(NamedTuple):
    """A new batch in the old model's internal units: X [N, D] and targets [N] as the
    objective takes them."""

    X: Tensor
    y: Tensor


class Streamable(Protocol):
    """What `update` needs of a model (SGPR, SVGP and SGPC give it)."""

    def _stream_summary(self) -> Summary | Any: ...

    def _stream_batch(self, X_new: ArrayLike, y_new: ArrayLike) -> Batch: ...

    def _stream_extras(self, batch: Batch) -> dict[str, Tensor]: ...

    def _stream_state(self, old: Any, feature: InducingPoints) -> dict[str, Tensor]: ...


class Streamed(Protocol):
    """What `update` does with the streamed model it makes."""

    def fit(self, **options: Any) -> Any: ...

    def _stream_start(self) -> None: ...


def update(model: Model, X_new: ArrayLike, y_new: ArrayLike, inducing_points: InducingLike, fit: bool,
           fit_options: dict[str, Any]) -> Any:
    """The streamed model (of the class the model's family streams to,
    `Model.streamed_class`) that has seen the data of `model`, through what its posterior
    keeps of them, and the batch (X_new, y_new); fitted unless `fit` is False (the family's
    start instead). See the module docstring."""
    family = cast(Streamable, model)
    streamed = type(model).streamed_class
    assert streamed is not None, f"{type(model).__name__} has no streamed variant"
    old = family._stream_summary()
    check_fit_arguments(fit, fit_options)
    batch = family._stream_batch(X_new, y_new)
    warn_about_batch(model, X_new, batch.y, fit, stacklevel=4)
    feature = new_feature(model, inducing_points, batch.X, old.Z)
    spec = streamed_spec(model, streamed, batch.X.shape[0], old)
    parts = cast(Parts, {name: copy.deepcopy(part) for name in ("kernel", "mean", "likelihood")
                         if isinstance(part := getattr(model, name, None), torch.nn.Module)})
    parts["feature"] = feature
    units = {k: v for k, v in model.units._asdict().items() if hasattr(model, k)}
    new = cast(Streamed, streamed._assemble(
        spec, parts, data=Data(batch.X, batch.y, family._stream_extras(batch)),
        state={**units, **family._stream_state(old, feature)},
        frozen=[name for name, p in model.named_parameters() if not p.requires_grad],
        priors={name: prior for name, prior in model.named_priors() if "." not in name},
        metadata=copy.deepcopy(model.metadata)))
    if fit:
        new.fit(**fit_options)
    else:
        new._stream_start()
    return new


def streamed_spec(model: Model, streamed: type[Model], rows: int, old: Any) -> Any:
    """The streamed model's spec: the old model's, for `rows` new rows, with the history of
    updates this one continues (`spec.StreamSpec`)."""
    stream = getattr(model.spec, "streaming", None)
    seen = stream.seen if isinstance(stream, StreamSpec) else model.num_data
    updates = stream.updates if isinstance(stream, StreamSpec) else 0
    rank = int(old.T.shape[1]) if isinstance(old, Summary) else 0
    given = {f.name: getattr(model.spec, f.name) for f in fields(model.spec)}
    wanted = {f.name for f in fields(streamed.spec_type)}
    return streamed.spec_type(**{**{k: v for k, v in given.items() if k in wanted},
                                 "num_data": rows,
                                 "streaming": StreamSpec(seen + rows, updates + 1,
                                                         int(old.Z.shape[0]), rank)})


def check_fit_arguments(fit: object, fit_options: dict[str, Any]) -> None:
    """`update`'s `fit` and its fit options: options only with fit=True."""
    check_bool(fit, "fit")
    if fit_options and not fit:
        raise TypeError(f"fit options ({', '.join(sorted(fit_options))}) need fit=True")


def check_streamable(model: Model) -> None:
    """What every streaming update needs of the old model (after its own checks), or a clear
    error: inducing points, a zero prior mean, one process, one posterior."""
    feature = getattr(model, "feature", None)
    if not isinstance(feature, InducingPoints):
        raise TypeError("streaming updates take a model with inducing points; this one has "
                        f"{type(feature).__name__} features")
    if model.prior_mean() is not None:
        raise ValueError("streaming updates take a model with a zero prior mean (the old "
                         "posterior holds f, not f minus a mean that the new batch would refit)")
    if model.placement.sharded:
        raise RuntimeError("streaming updates run in one process: this model holds one "
                           "shard of data sharded over torch.distributed ranks")
    if getattr(model.spec, "fantasies", None) is not None:
        raise ValueError("streaming updates take a model of one set of targets; this one "
                         "holds fantasies (update the model they were conditioned from)")


def summary_of(model: Model, kind: str, posterior: Posterior | None = None) -> Summary:
    """The summary (`objectives.online.summarise`) of the posterior q(a) of `model` (after the
    model's own checks; `posterior`: the model's collapsed one, where it predicts from
    another), or a clear error: `check_streamable`, and a current posterior in
    precision form of one latent function (`kind` names it: "the collapsed posterior of one
    output")."""
    check_streamable(model)
    try:
        post = model.posterior() if posterior is None else posterior
    except RuntimeError as err:
        raise ValueError("update needs the model's posterior q(u), which summarises its data: "
                         f"{err}") from None
    if not isinstance(post, SparsePosterior) or not post.q.precision or post.num_latent != 1:
        raise ValueError(f"update needs {kind}")
    feature = getattr(model, "feature")  # noqa: B009 - InducingPoints, checked above
    return summarise(feature.locations(), post.L, post.q.root, post.q.mean)


def new_feature(model: Model, inducing_points: InducingLike, X: Tensor, Z_old: Tensor
                ) -> InducingPoints:
    """The new inducing inputs b (internal units) of a streaming update of `model`: None or
    an int M chooses M inputs by seeded k-means++ from the old inducing inputs Z_old and the
    new batch X together (as many as the model has, for None); anything else means what it
    means at construction. Frozen old inducing inputs stay frozen."""
    old: InducingPoints = getattr(model, "feature")  # noqa: B009 - checked by the update
    spec = old.num_inducing if inducing_points is None else inducing_points
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
        pool = torch.cat([Z_old.to(X), X], 0)
        feature: Any = InducingPoints(initial_inducing_inputs(pool, int(spec), "kmeans++", 0,
                                                              rows="old inducing inputs and "
                                                              "new data points"))
    else:
        feature = resolve_feature(spec, model.kernel, X, model.x_shift, model.x_scale,
                                  "kmeans++", 0)
    if not isinstance(feature, InducingPoints):
        raise TypeError("streaming updates take inducing points (an int, an array [M, D] or "
                        f"InducingPoints); got {type(feature).__name__}")
    if not old.Z.requires_grad:
        feature.Z.requires_grad_(False)
    return feature


# -- what a streamed model keeps of the data before its batch ------------------------------
#: The buffers of a summary of pseudo-observations (`objectives.online.Summary`)
SUMMARY = ("Z", "T", "h", "offset")


def summary_buffers(stream: StreamSpec, input_dim: int) -> dict[str, Tensor]:
    """The buffers `summary_Z` [M_a, D], `summary_T` [M_a, r], `summary_h` [r] and
    `summary_offset` [] a streamed model declares for its summary (StreamingSGPR,
    StreamingSGPC), zero until its values come."""
    M, r = stream.old_inducing, stream.rank
    shapes = {"Z": (M, input_dim), "T": (M, r), "h": (r,), "offset": ()}
    return {"summary_" + name: torch.zeros(shapes[name], dtype=PARAMETER_DTYPE)
            for name in SUMMARY}


def summary_state(summary: Summary) -> dict[str, Tensor]:
    """The summary's values, by buffer name."""
    return {"summary_" + name: getattr(summary, name).detach() for name in SUMMARY}


def take_summary_shapes(model: Any, state_dict: Mapping[str, object], prefix: str) -> None:
    """Before a state is loaded into a streamed model: a summary's sizes depend on the data
    (its rank, and the old inducing inputs), so where the state's summary is of other sizes
    than the model's, the model's summary buffers and its spec take them (the state of any
    model of this kind then loads into a fresh one). A state of inconsistent sizes is left to
    `load_state_dict`, which names the mismatch."""
    saved = [state_dict.get(prefix + "summary_" + name) for name in SUMMARY]
    if not all(isinstance(t, Tensor) for t in saved):
        return
    Z, T, h, offset = cast("list[Tensor]", saved)
    if (Z.dim() != 2 or T.dim() != 2 or T.shape[0] != Z.shape[0] or h.shape != T.shape[1:]
            or offset.dim() != 0 or Z.shape[1] != model.summary_Z.shape[1]
            or (Z.shape == model.summary_Z.shape and T.shape == model.summary_T.shape)):
        return
    for name, value in zip(SUMMARY, (Z, T, h, offset)):
        held = getattr(model, "summary_" + name)
        model.register_buffer("summary_" + name,
                              torch.zeros(value.shape, dtype=held.dtype, device=held.device))
    stream = model.spec.streaming
    model.spec = model.spec.but(streaming=StreamSpec(stream.seen, stream.updates,
                                                     int(Z.shape[0]), int(T.shape[1])))


def held_summary(model: Model) -> Summary:
    """The summary a streamed model holds in its buffers (internal units)."""
    return Summary(*(getattr(model, "summary_" + name) for name in SUMMARY))


class FromStream:
    """A streamed model's count from its spec's `streaming` entry (a descriptor):
    `num_data_seen` (the rows of every batch of its chain of updates, this one's too) or
    `num_updates` (the updates that led to it: 1 for the first update of a batch model)."""

    def __init__(self, field: str, doc: str) -> None:
        self.field, self.__doc__ = field, doc

    def __get__(self, model: Any, owner: type | None = None) -> Any:
        if model is None:
            return self
        return int(getattr(model.spec.streaming, self.field))


NUM_DATA_SEEN_DOC = "The rows of every batch this model has been updated with, this one too."
NUM_UPDATES_DOC = "How many updates led to this model (1 for the first update of a batch model)."
