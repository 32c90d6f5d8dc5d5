"""Class labels: the convention of the training labels, and labels from probabilities.

One rule for every classifier (SGPC, SVGP under Bernoulli or MultiClass): `predict` gives
labels in the training labels' convention, `predict_proba` the probabilities they come from.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...likelihoods import Bernoulli, MultiClass, Ordinal
from ...likelihoods.base import Likelihood
from ...validation import ArrayLike


def classifies(likelihood: Likelihood) -> bool:
    """True for the classification likelihoods (Bernoulli, MultiClass, Ordinal): their models'
    `predict` gives labels and `predict_proba` probabilities."""
    return isinstance(likelihood, (Bernoulli, MultiClass, Ordinal))


def binary_classes(y: ArrayLike, t: Tensor) -> list:
    """The two label values of binary targets y (`t`: y as a tensor): bool labels predict as
    bools, labels with a negative value as −1/+1, anything else as 0/1."""
    boolean = (y.dtype == torch.bool if isinstance(y, Tensor)
               else np.asarray(y).dtype == np.bool_)
    return [False, True] if boolean else [-1, 1] if bool((t < 0).any()) else [0, 1]


def predicted_labels(probabilities: Any, classes: list | None) -> Any:
    """Labels from P(y* = 1) [N*] (the more probable of `classes`, ties to the first) or from
    class probabilities [N*, C] (the index of the most probable); numpy or torch as given."""
    if isinstance(probabilities, Tensor):
        if probabilities.dim() == 2:
            return probabilities.argmax(-1)
        lo, hi = classes or [0, 1]
        dtype = torch.bool if isinstance(lo, bool) else torch.long
        return torch.where(probabilities > 0.5, torch.tensor(hi, dtype=dtype),
                           torch.tensor(lo, dtype=dtype))
    if probabilities.ndim == 2:
        return probabilities.argmax(-1)
    lo, hi = classes or [0, 1]
    return np.where(probabilities > 0.5, hi, lo)
