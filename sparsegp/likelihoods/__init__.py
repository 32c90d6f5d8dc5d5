"""Likelihoods p(y | f): log densities, Gaussian expectations, Power-EP tilted moments.

Single-latent: `Gaussian`, `Bernoulli` (probit/logit), `Poisson` (log link); several latent
functions: `MultiClass` (softmax/robust-max), `HeteroscedasticGaussian` (mean and log noise).
`likelihood_from_config(lik.config())` rebuilds
any of them (then `load_state_dict` for the parameter values).
"""

from .base import Likelihood, likelihood_from_config
from .bernoulli import Bernoulli
from .gaussian import Gaussian
from .heteroscedastic import HeteroscedasticGaussian
from .multiclass import MultiClass
from .poisson import Poisson

__all__ = ["Likelihood", "Gaussian", "Bernoulli", "Poisson", "MultiClass", "HeteroscedasticGaussian",
           "likelihood_from_config"]
