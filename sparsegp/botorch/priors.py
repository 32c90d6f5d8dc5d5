"""BoTorch's `SingleTaskGP` lengthscale prior on a sparsegp model (`set_botorch_priors`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

import torch
from torch import nn

if TYPE_CHECKING:
    from ..models import Model as SparseModel

#: A sparsegp model given to `set_botorch_priors`, which returns it.
M = TypeVar("M", bound="SparseModel")


def set_botorch_priors(model: M) -> M:
    """Give `model` (GPR, SGPR, SVGP: a stationary kernel with lengthscales, inputs in the
    unit cube) BoTorch's `SingleTaskGP` lengthscale prior and start its lengthscales at the
    prior's mode; returns the model, to be fitted (MAP: `fit()` adds the log prior).

    The prior is log-normal with log-mean √2 + ½ log d and log-standard deviation √3 on each
    lengthscale, d the input dimension (BoTorch's `get_covar_module_with_dim_scaled_prior`):
    lengthscales grow with d as the distances between points in the unit cube do. Its mode,
    exp(√2 + ½ log d − 3), is 0.29 for d = 2, 0.50 for d = 6 and 0.65 for d = 10. The prior
    is for inputs scaled to the unit cube (BoTorch's normalised inputs): data outside
    [0, 1]^d are refused. A model that standardises its inputs (`standardize_X=True`) has its
    lengthscales in each column's standard deviation s_j, ℓ_j / s_j of the unit cube's: its
    prior is the same one carried over, log-normal with log-mean √2 + ½ log d − log s_j (the
    same MAP lengthscales in the units of X; an isotropic kernel needs equal s_j). The
    noise variance is left as it is: for a noiseless objective hold it small
    (`model.noise_variance = 1e-6 * float(y.var())`, `model.freeze("noise_variance")`).

    Example:

        >>> import torch, sparsegp as sg
        >>> from sparsegp.botorch import set_botorch_priors
        >>> X = torch.rand(12, 6, dtype=torch.float64)
        >>> model = set_botorch_priors(sg.GPR(X, X.sum(1)))
        >>> [name for name, _ in model.named_priors()], model.kernel.lengthscale.round(3)[0]
        (['kernel.lengthscale'], np.float64(0.502))
    """
    name = type(model).__name__
    if not (isinstance(model, nn.Module) and hasattr(model, "set_prior")
            and hasattr(model, "x_scale") and getattr(model, "kernel", None) is not None):
        raise TypeError(f"set_botorch_priors takes a sparsegp model with data and a kernel "
                        f"(GPR, SGPR, SVGP); got {name}")
    kernel = model.kernel
    if "lengthscale" not in kernel.parameter_names():
        raise TypeError(f"set_botorch_priors needs a kernel with lengthscales (a stationary "
                        f"kernel such as SquaredExponential or Matern52); this {name}'s "
                        f"kernel is {type(kernel).__name__}")
    X = getattr(model, "X", None)
    x_scale = model.x_scale.detach().reshape(-1)
    if X is not None and X.numel():
        X = X.detach() * model.x_scale + model.x_shift  # in the units of X
        if float(X.min()) < 0.0 or float(X.max()) > 1.0:
            raise ValueError(f"set_botorch_priors: BoTorch's lengthscale prior is for inputs "
                             f"in the unit cube; this model's X spans [{float(X.min()):.3g}, "
                             f"{float(X.max()):.3g}] (scale X to [0, 1]^d first)")
    d = int(model.input_dim)
    current = kernel.value("lengthscale")
    if current.numel() != d and bool((x_scale != x_scale[0]).any()):
        raise ValueError("set_botorch_priors: this model standardises its inputs, each column "
                         "by its own standard deviation, and its kernel has one lengthscale: "
                         "give the kernel one lengthscale per input (ARD) or build the model "
                         "with standardize_X=False")
    per_input = x_scale.to(current.dtype).expand(d) if current.numel() == d else x_scale[:1]
    loc = (math.sqrt(2.0) + 0.5 * math.log(d) - per_input.log()).reshape(current.shape)
    spread = torch.full(current.shape, math.sqrt(3.0), dtype=current.dtype)
    prior = torch.distributions.LogNormal(loc, spread)
    kernel.lengthscale = (loc - 3.0).exp()  # the mode, exp(μ − σ²)
    model.set_prior("kernel.lengthscale", prior)
    return model
