"""Likelihoods p(y | f): log densities, Gaussian expectations, Power-EP tilted moments.

Single-latent: `Gaussian`, `Bernoulli` (probit/logit), `Poisson` (log link),
`NegativeBinomial` (over-dispersed counts, log link), `StudentT` (robust regression), `Gamma`
(positive data, log link), `Beta` (proportions in (0, 1), logit/probit link), `Ordinal` (K
ordered classes, cumulative probit/logit with learned cut points); several latent functions:
`MultiClass` (softmax/robust-max), `HeteroscedasticGaussian` (mean and log noise).
`likelihood_from_config(lik.config())` rebuilds any of them (then `load_state_dict` for the parameter values).

Shapes: f, mean, var [..., N] (or [..., N, C] for C latent functions), y [N] -> log densities
and expectations [..., N]. Pass one to `SVGP` (any of them) or `SGPC` (one latent function).

Example:

    >>> import numpy as np, sparsegp as sg
    >>> X = np.linspace(0, 1, 30)[:, None]
    >>> counts = np.round(3 * X[:, 0] ** 2 + 1)
    >>> m = sg.SVGP(X, counts, likelihood=sg.likelihoods.Poisson(), inducing_points=5)
    >>> mean, var = m.predict_y(X[:4])
    >>> mean.shape, bool((mean > 0).all())
    ((4,), True)
"""

from .base import Likelihood, likelihood_from_config
from .bernoulli import Bernoulli
from .beta import Beta
from .gamma import Gamma
from .gaussian import Gaussian
from .heteroscedastic import HeteroscedasticGaussian
from .multiclass import MultiClass
from .negative_binomial import NegativeBinomial
from .ordinal import Ordinal
from .poisson import Poisson
from .student_t import StudentT

__all__ = ["Likelihood", "Gaussian", "Bernoulli", "Poisson", "MultiClass", "HeteroscedasticGaussian",
           "StudentT", "NegativeBinomial", "Gamma", "Beta", "Ordinal", "likelihood_from_config"]
