"""SVGP's data: its options (`SVGPOptions`), the checks of its targets against the likelihood
(several outputs: NaN marks a missing one; labels as codes), whether y is standardised, and
the batches of new data the objective and the predictions take."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ...likelihoods import Bernoulli, Gaussian, HeteroscedasticGaussian
from ...likelihoods.base import Likelihood
from ...means import MeanLike, Zero, as_mean
from ...runtime.config import PARAMETER_DTYPE
from ...validation import (
    ArrayLike,
    as_output_targets,
    as_tensor,
    check_bool,
    check_finite,
    positive_int,
    target_scale_problems,
)
from ..core.labels import binary_classes
from ..core.mixing import mixing_matrix
from ..core.options import InducingOptions


@dataclass(frozen=True, kw_only=True)
class SVGPOptions(InducingOptions):
    """`SVGP`'s options: the likelihood (None: Gaussian), whitening, the number of latent
    functions, standardising y (None: for a Gaussian likelihood), q(u) factorised over
    inducing sets, the LMC's mixing matrix."""

    likelihood: Any
    whiten: bool
    num_latent: int | None
    standardize_y: bool | None
    mean_field: bool
    mixing: Any

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("whiten", check_bool(self.whiten, "whiten"))
        self._set("mean_field", check_bool(self.mean_field, "mean_field"))
        if self.num_latent is not None:
            self._set("num_latent", positive_int(self.num_latent, "num_latent"))
        likelihood = Gaussian() if self.likelihood is None else self.likelihood
        if not isinstance(likelihood, Likelihood):
            raise TypeError(f"likelihood must be a sparsegp likelihood; got "
                            f"{type(likelihood).__name__}")
        self._set("likelihood", likelihood)


def standardizes_y(likelihood: Likelihood, standardize_y: bool | None) -> bool:
    """Whether an SVGP with `likelihood` standardises y: `standardize_y`, whose default (None)
    is True for the Gaussian likelihood. Other likelihoods take y as given and refuse True."""
    if standardize_y is not None and not isinstance(standardize_y, bool):
        raise TypeError(f"standardize_y must be True, False or None; got {standardize_y!r}")
    if not isinstance(likelihood, Gaussian):
        if standardize_y:
            raise ValueError(f"standardize_y=True applies to the Gaussian likelihood; "
                             f"{type(likelihood).__name__} takes y as it is (labels, counts, or "
                             "a noise model of its own units): leave standardize_y unset, or "
                             "rescale y yourself")
        return False
    return True if standardize_y is None else standardize_y


def checked_outputs(t: Tensor, n: int, P: int, name: str) -> Tensor:
    """Targets [n, P] of P outputs with NaN marking a missing one (±inf refused)."""
    if t.dim() != 2 or tuple(t.shape) != (n, P):
        raise ValueError(f"{name} must have shape [{n}, {P}] (one column per output); got "
                         f"{tuple(t.shape)}")
    if bool(torch.isinf(t).any()):
        raise ValueError(f"{name} contains ±inf (NaN marks a missing output)")
    return t.to(PARAMETER_DTYPE)


def output_targets(t: Tensor, n: int, likelihood: Likelihood, W: Tensor | None,
                   num_latent: int | None, mean: MeanLike) -> tuple[Tensor, dict[str, Any]]:
    """Targets of P outputs (Gaussian likelihood; NaN: missing) and the spec's fields they
    fix: P latent functions, or the L of the mixing matrix W [P, L]."""
    if not isinstance(likelihood, Gaussian):
        raise ValueError("several output columns (or a mixing matrix) need the Gaussian "
                         f"likelihood; got {type(likelihood).__name__}")
    if not isinstance(as_mean(mean), Zero):
        raise ValueError("a prior mean takes one output: with several output columns or a "
                         "mixing matrix leave mean=None (centre each column of y instead)")
    y = as_output_targets(t, n, "y")
    P = 1 if y.dim() == 1 else y.shape[1]
    y = checked_outputs(y.reshape(n, P), n, P, "y")
    noise = likelihood.value("variance")
    if noise.dim() > 1 or (noise.dim() == 1 and noise.shape[0] != P):
        raise ValueError(f"the Gaussian likelihood's variance must be one number or one per "
                         f"output ({P}); got shape {tuple(noise.shape)}")
    C = P if W is None else mixing_matrix(W, P).shape[1]
    if num_latent is not None and int(num_latent) != C:
        raise ValueError(f"num_latent must be {C} here (" + ("the columns of mixing" if W is not None
                         else "one latent function per output") + f"); got {num_latent}")
    fields: dict[str, Any] = {"num_outputs": P, "num_latent": C,
                              "mixing": None if W is None else tuple(W.shape)}
    return y, fields


def checked_targets(y: ArrayLike, n: int, device: torch.device, likelihood: Likelihood,
                    mixing: Any, num_latent: int | None, mean: MeanLike
                    ) -> tuple[Tensor, dict[str, Any]]:
    """The targets as given, checked for the likelihood (labels as codes), and the spec's
    fields they fix (several outputs; the classes of binary labels)."""
    t = as_tensor(y, "y", device=device)
    W = None if mixing is None else mixing_matrix(mixing)
    if (t.dim() == 2 and t.shape[1] > 1) or W is not None:
        return output_targets(t, n, likelihood, W, num_latent, mean)
    if t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.dim() != 1 or t.shape[0] != n:
        raise ValueError(f"y must have one entry per row of X ({n}); got shape {tuple(t.shape)}")
    if num_latent is not None and int(num_latent) != likelihood.num_latent:
        raise ValueError(f"num_latent must be {likelihood.num_latent} for one output and "
                         f"{type(likelihood).__name__} (the others would go unused); got "
                         f"{num_latent}: several outputs take y [N, P], or a mixing matrix")
    if isinstance(likelihood, Gaussian) and likelihood.value("variance").numel() > 1:
        raise ValueError(f"the Gaussian likelihood has {likelihood.value('variance').numel()} "
                         "variances (one per output) but y has one output: give one number")
    labels = likelihood.check_training_targets(check_finite(t, "y").to(PARAMETER_DTYPE))
    if isinstance(likelihood, Bernoulli):
        return labels, {"classes": tuple(binary_classes(y, t))}
    return labels, {}


def batch_targets(yb: ArrayLike, likelihood: Likelihood, num_outputs: int | None,
                  dtype: torch.dtype, device: torch.device, name: str = "a batch of y",
                  rows: int | None = None) -> Tensor:
    """Targets checked like y (for `rows` inputs, when given): finite for one output, NaN
    marking missing entries of `num_outputs` (None: y [N]), labels as the likelihood takes
    them."""
    t = as_tensor(yb, name, dtype=dtype, device=device)
    if num_outputs:
        n = t.shape[0] if rows is None else rows
        return checked_outputs(t.reshape(t.shape[0], -1) if t.dim() else t, n, num_outputs,
                               name)
    t = t.reshape(-1)
    if rows is not None and t.shape[0] != rows:
        raise ValueError(f"{name} must have one entry per row of Xnew ({rows}); got "
                         f"{t.shape[0]}")
    return likelihood.check_targets(check_finite(t, name).to(PARAMETER_DTYPE))


def target_problems(y: Tensor, likelihood: Likelihood, mean: MeanLike, standardize_y: bool | None
                    ) -> list[str]:
    """Badly scaled real-valued targets (Gaussian likelihoods, homo- or heteroscedastic;
    labels and counts are what they are; standardised targets are well scaled)."""
    if (not isinstance(likelihood, (Gaussian, HeteroscedasticGaussian)) or y.dim() != 1
            or standardizes_y(likelihood, standardize_y)):
        return []
    return target_scale_problems(y, isinstance(as_mean(mean), Zero),
                                 standardize=isinstance(likelihood, Gaussian))
