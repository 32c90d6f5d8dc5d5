"""BoTorch models: fitted sparsegp regression models drive Bayesian optimisation with
BoTorch's acquisition functions and optimisers (`as_botorch(model)`).

An optional extra (`pip install ".[botorch]"` in a clone of sparsegp, or
`pip install "botorch>=0.18"`): `import sparsegp` never imports BoTorch, this package does.
`SparseGPModel` wraps a sparsegp model with a Gaussian likelihood (GPR, SGPR, SVGP; one
output or several independent ones) as a `botorch.models.model.Model`:

* `posterior(X)` for X [batch, q, d] (or [q, d]) is a `GPyTorchPosterior` whose mean and
  covariance over each q-batch are the model's joint predictive of f*
  (`predict_f(..., full_cov=True)`), or of y* with `observation_noise=True` (`predict_y`: the
  noise variance added), its covariance a dense linear operator (factorised when sampled,
  with jitter where it is singular in floating point, as over a large candidate set); its
  `rsample` is reparameterised, so Monte-Carlo acquisition values are differentiable with
  respect to X. The posterior is read from the model's cached one: the results carry
  gradients to X, not to the hyperparameters (refit the model, then wrap or keep using it,
  between BO steps). A model of P outputs (y [N, P]: independent outputs sharing a kernel,
  or `kernels.Separate`) gives a `MultitaskMultivariateNormal` over [q, P], independent
  across outputs; `output_indices` and `subset_output` select outputs. A model whose
  outputs are correlated (the LMC's `mixing`) is refused: its joint over q points and P
  outputs is not what `predict_f` returns.
* Input and outcome transforms, as BoTorch's models take them (`Normalize`, `Standardize`,
  ...): `SparseGPModel.from_data(train_X, train_Y, sg.SGPR, input_transform=...,
  outcome_transform=...)` transforms the training data as `SingleTaskGP` does (the
  transforms learn their statistics from them) and builds the sparsegp model on the
  transformed data; `posterior(X)` then takes X in the original units, transforms it, and
  untransforms the posterior. `as_botorch(model, input_transform=..., outcome_transform=...)`
  wraps a model already built on transformed data, with the transforms (in eval mode) that
  made them.
* `condition_on_observations(X, Y)` (GPR, SGPR) delegates to sparsegp's
  `condition_on_observations` at fixed hyperparameters (X and Y in the original units,
  transformed as the training data were; a `noise` is in the transformed units, as BoTorch
  takes it); Y [F, k, 1] are F fantasies, and a batch of X [b, k, d] gives one conditioned
  model per batch element. `fantasize` samples Y from the posterior at X and conditions on
  them: what `qKnowledgeGradient` needs.
* In a `ModelListGP`: every wrapper has a `likelihood` (a record of the model's noise
  variance, which `ModelListGP` requires; the predictions use the model's own) and
  `get_fantasy_model`, through which `ModelListGP.condition_on_observations` conditions
  each member.

`set_botorch_priors(model)` gives an unfitted model the lengthscale prior of BoTorch's
`SingleTaskGP` (log-normal, scaled with the input dimension) and starts the lengthscales at
its mode, so that `fit()` finds the same MAP lengthscales SingleTaskGP's fit does rather than
the marginal-likelihood maximum, which on a few tens of points in several dimensions is often
a poor one.

The wrapped model's batch shape is [] for a fitted model, and [F, *b] for fantasies over a
batch b of inputs (BoTorch's layout): a posterior over X [..., F, *b, q, d] (broadcast) takes
the f-th fantasy's prediction for X[..., f, ...].
"""

from __future__ import annotations

try:
    import botorch  # noqa: F401
except ImportError as err:
    raise ImportError('sparsegp.botorch needs BoTorch; install it with '
                      'pip install "botorch>=0.18" (in a clone of sparsegp: '
                      'pip install ".[botorch]")') from err

from .model import SparseGPModel, as_botorch
from .priors import set_botorch_priors

__all__ = ["SparseGPModel", "as_botorch", "set_botorch_priors"]
