"""scikit-learn estimators: `SparseGPRegressor` (SGPR, or GPR) and `SparseGPClassifier` (SGPC
or SVGP), for pipelines, grid searches and cross-validation.

An optional extra (`pip install ".[sklearn]"` in a clone of sparsegp, or
`pip install "scikit-learn>=1.3"`): `import sparsegp` never imports scikit-learn, this module
does. The estimators follow scikit-learn's conventions: the
constructor stores its arguments unchanged, `fit(X, y)` builds and trains a sparsegp model
(`model_`, a plain sparsegp model that `diagnostics()`, `save()` etc. work on) on copies of
the kernel and mean, and every fitted attribute ends in an underscore. Shapes: X [N, D],
y [N]; predictions [N*] (class probabilities [N*, C]).

The library's `ApproximationWarning` and `ScaleWarning` given during `fit` are not raised
(scikit-learn's model selection fits many candidates, most of them deliberately poor);
their messages are kept in `fit_warnings_`, and `model_.diagnostics()` gives the full report.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, TypeAlias, TypedDict, TypeVar, cast

import numpy as np
import torch

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
    from sklearn.utils import check_random_state
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted
except ImportError as err:
    raise ImportError('sparsegp.sklearn needs scikit-learn; install it with '
                      'pip install "scikit-learn>=1.3" (in a clone of sparsegp: '
                      'pip install ".[sklearn]")') from err

try:
    from sklearn.utils.validation import validate_data
except ImportError:  # pragma: no cover - scikit-learn < 1.6 has the method instead

    def validate_data(estimator: BaseEstimator, X: ArrayLike = "no_validation",
                      y: ArrayLike = "no_validation", reset: bool = True, **kwargs: object
                      ) -> Any:
        return estimator._validate_data(X, y, reset=reset, **kwargs)

from .diagnostics import ApproximationWarning, ConvergenceWarning
from .features.initialisation import distinct_rows
from .kernels.base import Kernel
from .likelihoods import Bernoulli, MultiClass
from .likelihoods.base import Likelihood
from .means import MeanLike
from .models import GPR, SGPC, SGPR, SVGP
from .models.core.predictions import SAMPLE_JITTER, joint_factor
from .objectives.collapsed.members import APPROXIMATIONS
from .training import fit_lbfgsb
from .training.lbfgs import MAXITER
from .validation import ArrayLike, ScaleWarning, check_bool

__all__ = ["SparseGPRegressor", "SparseGPClassifier"]

#: The library's warnings about a fit that `fit` collects in `fit_warnings_` instead.
_COLLECTED = (ApproximationWarning, ScaleWarning, ConvergenceWarning)
#: Where the warnings passed on are remembered, so that "default" filters show each once.
_PASSED_ON: dict = {}

T = TypeVar("T")

#: What scikit-learn's `random_state` takes: an int seed, a `numpy.random.RandomState`, or
#: None (numpy's global one).
RandomState: TypeAlias = int | np.integer | np.random.RandomState | None


class _RegressorOptions(TypedDict):
    """The constructor options the regressor's GPR and SGPR share."""

    kernel: Kernel | None
    mean: MeanLike
    noise_variance: float | None
    standardize_X: bool
    standardize_y: bool


class _ClassifierOptions(TypedDict):
    """The constructor options the classifier's SGPC and SVGP share."""

    kernel: Kernel | None
    mean: MeanLike
    inducing_points: int
    seed: int
    standardize_X: bool


def _collecting(fit: Callable[[], T]) -> tuple[T, list[str]]:
    """Run `fit()`; return its result and the messages of the `_COLLECTED` warnings it gave.
    Every other warning is passed on unchanged."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit()
    kept = [str(w.message) for w in caught if issubclass(w.category, _COLLECTED)]
    _pass_on([w for w in caught if not issubclass(w.category, _COLLECTED)])
    return result, kept


def _iterations(run: Callable[[], Any]) -> tuple[int, list[str]]:
    """`run()` (a fit) collecting its warnings: its iterations and the collected messages."""
    result, caught = _collecting(run)
    return int(result.iterations), caught


#: A classifier's `link`: (the two-class link, the several-class link) of its family.
_LINKS: dict[str | None, tuple[str, str]] = {
    None: ("probit", "robustmax"), "probit": ("probit", "robustmax"),
    "robustmax": ("probit", "robustmax"), "logit": ("logit", "softmax"),
    "softmax": ("logit", "softmax")}


def _likelihood(likelihood: object) -> Likelihood:
    """The regressor's `likelihood=`: a new likelihood of a registered name ("studentt",
    "poisson", ...: its defaults), or a copy of a single-latent sparsegp likelihood."""
    if isinstance(likelihood, str):
        names = {n.lower(): n for n in Likelihood.registry.names()}
        name = names.get(likelihood.lower().replace("_", "").replace("-", ""))
        if name is not None:
            try:
                likelihood = Likelihood.registry.get(name)()
            except TypeError:  # needs arguments (MultiClass: the classes): not for regression
                pass
    if not isinstance(likelihood, Likelihood) or getattr(likelihood, "num_latent", 1) != 1:
        raise ValueError("likelihood must be None (Gaussian noise), the name of a single-latent "
                         "sparsegp likelihood ('studentt', 'poisson', 'negativebinomial', ...) "
                         f"or one (sparsegp.likelihoods.StudentT(df=4), ...); got {likelihood!r}")
    return _copy(likelihood)


def _pass_on(caught: list[warnings.WarningMessage],
             text: Callable[[Warning | str], str] = str) -> None:
    """Give the recorded warnings again (their messages through `text`), under the user's
    filters."""
    for w in caught:
        warnings.warn_explicit(text(w.message), w.category, w.filename, w.lineno,
                               registry=_PASSED_ON, source=w.source)


def _in_wrapper_terms(text: str) -> str:
    """A library message as the wrappers say it: their one option is `standardize=True`."""
    for advice in ("standardize_X=True and/or standardize_y=True", "standardize_X=True",
                   "standardize_y=True"):
        text = text.replace(advice, "standardize=True")
    return text


def _built(make: Callable[[], T]) -> T:
    """`make()`, a model, with its warnings and errors in the wrappers' terms."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = make()
        except ValueError as err:
            raise ValueError(_in_wrapper_terms(str(err))) from None
    _pass_on(caught, lambda message: _in_wrapper_terms(str(message)))
    return model


def _seed(random_state: RandomState) -> int:
    """An int seed for the k-means++ inducing-input choice: the int itself, or one drawn from
    a `numpy.random.RandomState` (None: numpy's global one), as scikit-learn does."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


def _num_inducing(num_inducing: object, X: ArrayLike) -> int:
    """M, capped at the distinct training inputs (a small cross-validation fold has few;
    repeated measurements share an input)."""
    if isinstance(num_inducing, bool) or not isinstance(num_inducing, numbers.Integral) \
            or num_inducing < 1:
        raise ValueError(f"num_inducing must be a positive integer; got {num_inducing!r}")
    return min(int(num_inducing), distinct_rows(torch.tensor(X)))  # a copy: X may be read-only


def _holds_hyperparameters(maxiter: object) -> bool:
    """maxiter=0: the hyperparameters stay at their starting values (scikit-learn's
    `optimizer=None`); the approximate posterior (q(u), the sites) is still computed."""
    return isinstance(maxiter, numbers.Integral) and not isinstance(maxiter, bool) and maxiter == 0


def _hold_hyperparameters(model: torch.nn.Module) -> None:
    """Freeze every parameter but the variational q(u)'s."""
    for name, p in model.named_parameters():
        if not name.startswith("q_"):
            p.requires_grad_(False)


def _copy(part: T) -> T:
    """A fresh copy of a kernel or mean (scikit-learn's `clone` of a non-estimator: a deep
    copy), so that fitting never changes the object the user passed."""
    return part if part is None else clone(part, safe=False)


class SparseGPRegressor(RegressorMixin, BaseEstimator):
    """Sparse GP regression as a scikit-learn regressor: `sparsegp.SGPR` (or `GPR`).

    approximation: "vfe" (default), "fitc", "dtc", "pep" (with `alpha` in (0, 1]) or "exact"
    (the O(N³) `GPR`; `num_inducing` is not used). alpha is used by "pep" only and ignored by
    the others, so that one parameter grid can search every name. num_inducing: M, chosen from
    X by k-means++ seeded from `random_state`, at most N. kernel: a sparsegp kernel (None: a
    squared exponential with ARD lengthscales) and mean: a `sparsegp.means` mean (None: zero);
    both are copied at `fit`, never changed. noise_variance: its starting value (None: from
    the data). likelihood: None (Gaussian noise: SGPR or GPR, as above), or a single-latent
    `sparsegp.likelihoods` likelihood by name ("studentt" for outliers, "poisson" or
    "negativebinomial" for counts, ...: its defaults) or as an object (`StudentT(df=4)`, copied
    at `fit`; a torch object, whose hash changes when copied, so that scikit-learn's
    `check_estimators_overwrite_params` fails on it, as on a kernel or a mean object): an
    `SVGP` of its ELBO by full-batch L-BFGS-B, q(u) included; `predict` then gives the
    predictive mean of y* and `return_std` its standard deviation. maxiter: L-BFGS-B
    iterations; 0 holds the hyperparameters at their starting values (scikit-learn's
    `optimizer=None`; an SVGP's q(u) is still fitted).
    standardize: fit on standardised X and y (the model's `standardize_X`/`standardize_y`;
    X only with a likelihood); predictions are in the units of y either way. y may have
    several columns [N, P] (outputs sharing the kernel and the inducing inputs; Gaussian
    noise, not "exact").
    `partial_fit(X, y)` updates a fitted sparse model with a new batch (a streaming update:
    `SGPR.update` or `SVGP.update`, the old data never needed again), or fits a first one.

    Fitted attributes: `model_` (the sparsegp model), `n_features_in_`,
    `feature_names_in_` (for a DataFrame), `X_train_` and `y_train_` (the last batch fitted),
    `log_marginal_likelihood_value_` (the objective: bound, PEP energy, ELBO or exact log
    evidence), `n_iter_` and `fit_warnings_`.
    Shapes: X [N, D], y [N] (or [N, P]) -> `predict(X* [N*, D])` mean `[N*]` (`[N*, P]`; with
    `return_std` also the standard deviation, with `return_cov` the covariance `[N*, N*]`).

    Example:

        >>> import sparsegp as sg
        >>> from sparsegp.sklearn import SparseGPRegressor
        >>> from sklearn.model_selection import cross_val_score
        >>> X, y = sg.datasets.snelson()
        >>> reg = SparseGPRegressor(num_inducing=10, maxiter=5, random_state=0).fit(X, y)
        >>> mean, std = reg.predict(X[:5], return_std=True)
        >>> mean.shape, std.shape, type(reg.model_).__name__, reg.n_features_in_
        ((5,), (5,), 'SGPR', 1)
        >>> scores = cross_val_score(SparseGPRegressor(num_inducing=10, maxiter=5), X, y, cv=3)
        >>> scores.shape
        (3,)
    """

    def __init__(self, approximation: str = "vfe", alpha: float | None = None,
                 num_inducing: int = 100, kernel: Kernel | None = None, mean: MeanLike = None,
                 noise_variance: float | None = None, maxiter: int = MAXITER,
                 standardize: bool = True, random_state: RandomState = None,
                 likelihood: Likelihood | str | None = None) -> None:
        self.likelihood = likelihood
        self.approximation = approximation
        self.alpha = alpha
        self.num_inducing = num_inducing
        self.kernel = kernel
        self.mean = mean
        self.noise_variance = noise_variance
        self.maxiter = maxiter
        self.standardize = standardize
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: ArrayLike) -> SparseGPRegressor:
        """Build the model on (X [N, D], y [N] or [N, P]) and maximise its objective; returns
        self."""
        Xa: np.ndarray
        ya: np.ndarray
        Xa, ya = validate_data(self, X, y, y_numeric=True, dtype=np.float64,
                               ensure_min_samples=2, multi_output=self.likelihood is None)
        standardize = check_bool(self.standardize, "standardize")
        common: _RegressorOptions = dict(kernel=_copy(self.kernel), mean=_copy(self.mean),
                      noise_variance=self.noise_variance, standardize_X=standardize,
                      standardize_y=standardize)
        name = self.approximation.lower() if isinstance(self.approximation, str) else None
        if name not in (*APPROXIMATIONS, "exact"):
            raise ValueError(f"approximation must be one of {', '.join(APPROXIMATIONS)} or exact; "
                             f"got {self.approximation!r}")
        if self.noise_variance is not None and np.ndim(self.noise_variance) > 0:
            raise ValueError("noise_variance must be one number (the noise's starting value): "
                             "known per-point noise needs the new points' noise at prediction, "
                             "which scikit-learn's predict cannot pass; use sparsegp.SGPR")
        if name == "exact" and ya.ndim == 2:
            raise ValueError("approximation='exact' (GPR) takes one output, y [N]; several "
                             "outputs y [N, P] take a sparse approximation ('vfe', ...)")
        hold = _holds_hyperparameters(self.maxiter)
        model: GPR | SGPR | SVGP
        if self.likelihood is not None:
            model = _built(partial(SVGP, Xa, ya, likelihood=_likelihood(self.likelihood),
                                   kernel=common["kernel"], mean=common["mean"],
                                   inducing_points=_num_inducing(self.num_inducing, Xa),
                                   seed=_seed(self.random_state), standardize_X=standardize))
            if hold:
                _hold_hyperparameters(model)
            run = partial(fit_lbfgsb, model, maxiter=MAXITER if hold else self.maxiter,
                          progress=False)
        else:
            if name == "exact":
                model = _built(partial(GPR, Xa, ya, **common))
            else:
                alpha = self.alpha if name == "pep" else None  # one grid may search all names
                model = _built(partial(SGPR, Xa, ya,
                                       inducing_points=_num_inducing(self.num_inducing, Xa),
                                       approximation=self.approximation, alpha=alpha,
                                       seed=_seed(self.random_state), **common))
            run = partial(model.fit, maxiter=self.maxiter, progress=False)
        self.n_iter_, self.fit_warnings_ = (0, []) if hold and self.likelihood is None else \
            _iterations(run)
        return self._fitted(model, Xa, ya)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = self.likelihood is None  # y [N, P]: Gaussian noise
        return tags

    def _more_tags(self) -> dict[str, bool]:  # scikit-learn < 1.6
        return {"multioutput": self.likelihood is None}

    def partial_fit(self, X: ArrayLike, y: ArrayLike) -> SparseGPRegressor:
        """Fit on a first batch; on later ones, update the fitted model with the new batch
        (X [N, D], y as before): a streaming update (`SGPR.update`, `SVGP.update`: the old
        data enter through the model's posterior, never again as rows), its hyperparameters
        fitted to the batch and the summary (`maxiter`). Returns self."""
        if not hasattr(self, "model_"):
            return self.fit(X, y)
        Xa: np.ndarray
        ya: np.ndarray
        Xa, ya = validate_data(self, X, y, y_numeric=True, dtype=np.float64, reset=False,
                               multi_output=self.likelihood is None)
        if isinstance(self.model_, GPR):
            raise ValueError("partial_fit updates a sparse model (a streaming update); "
                             "approximation='exact' refits: call fit on all the data")
        if _holds_hyperparameters(self.maxiter) and self.likelihood is None:
            update = partial(self.model_.update, Xa, ya, fit=False)
        elif isinstance(self.model_, SVGP):  # its update's own minibatch schedule
            update = partial(self.model_.update, Xa, ya, progress=False)
        else:
            update = partial(self.model_.update, Xa, ya, maxiter=self.maxiter, progress=False)
        model, self.fit_warnings_ = _collecting(update)
        return self._fitted(cast("GPR | SGPR | SVGP", model), Xa, ya)

    def _fitted(self, model: GPR | SGPR | SVGP, X: np.ndarray, y: np.ndarray
                ) -> SparseGPRegressor:
        self.model_ = model
        model.feature_names = getattr(self, "feature_names_in_", None)
        self.X_train_, self.y_train_ = X, y
        self.log_marginal_likelihood_value_ = model.log_marginal_likelihood()
        return self

    def predict(self, X: ArrayLike, return_std: bool = False, return_cov: bool = False,
                include_noise: bool = True) -> Any:
        """Predictive mean [N*], and with `return_std` its standard deviation [N*] (or with
        `return_cov` its covariance [N*, N*]).

        As in scikit-learn's GaussianProcessRegressor with a WhiteKernel (the noise a GP
        learns), the standard deviation and covariance are those of noisy observations y* by
        default; `include_noise=False` gives those of the latent f* (the mean is the same).
        """
        check_is_fitted(self)
        if return_std and return_cov:
            raise RuntimeError("at most one of return_std and return_cov can be requested")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        if isinstance(self.model_, SVGP):  # a likelihood's predictive moments of y*
            if return_cov:
                raise ValueError("return_cov needs Gaussian noise; with a likelihood, predict "
                                 "gives the mean of y* and return_std its standard deviation")
            predict = self.model_.predict_y if include_noise else self.model_.predict_f
            mean, var = predict(X)
        else:
            mean, var = self.model_.predict(X, full_cov=return_cov, include_noise=include_noise)
        if return_cov:
            return mean, var
        if return_std:
            return mean, np.sqrt(np.maximum(var, 0.0))
        return mean

    def sample_y(self, X: ArrayLike, n_samples: int = 1, random_state: RandomState = 0,
                 include_noise: bool = True) -> np.ndarray:
        """Joint samples of the predictive at X: [N*, n_samples] (scikit-learn's layout;
        [N*, P, n_samples] for P outputs). Of noisy y* by default, as `predict`'s
        covariance; `include_noise=False` samples the latent f*. `random_state` as in
        scikit-learn (an int, a RandomState or None)."""
        check_is_fitted(self)
        if isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral) or (
                n_samples < 1):
            raise ValueError(f"n_samples must be a positive integer; got {n_samples!r}")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        mean, cov = self.model_.predict(X, full_cov=True, include_noise=include_noise)
        factor = joint_factor(torch.as_tensor(cov), SAMPLE_JITTER).numpy()  # [(P,) N*, N*]
        z = check_random_state(random_state).standard_normal((*factor.shape[:-1], n_samples))
        if mean.ndim == 1:
            return mean[:, None] + factor @ z
        return mean[:, :, None] + np.moveaxis(factor @ z, 0, 1)  # [N*, P, S]


class SparseGPClassifier(ClassifierMixin, BaseEstimator):
    """Sparse GP classification as a scikit-learn classifier: `sparsegp.SGPC` or `SVGP`.

    approximation: "pep" (Power EP, `SGPC`, two classes only; power `alpha` in (0, 1],
    α = 1 is EP), "svgp" (the variational `SVGP`: a `Bernoulli` likelihood for two classes,
    `MultiClass` with one latent function per class for more; `alpha` is ignored) or "auto"
    (default: "pep" for two classes, "svgp" for more). link: a family that serves any number
    of classes — "logit" and "softmax" (the logistic is the two-class softmax) or "probit" and
    "robustmax" (None, the default: probit for two classes, robustmax for more, both with
    class probabilities from deterministic quadrature rather than Monte Carlo).
    num_inducing: M, chosen from X by k-means++ seeded from `random_state`, at most N.
    kernel (None: squared exponential with ARD) and mean (None: zero) are copied at `fit`.
    maxiter: None for the model's default (Power EP: 20 rounds of site sweeps and
    L-BFGS-B), else passed to its `fit`; the SVGP's ELBO is maximised over all parameters,
    q(u) included, by full-batch L-BFGS-B (`maxiter` iterations, default 2000); 0 holds the
    hyperparameters at their starting values (scikit-learn's `optimizer=None`: the sites or
    q(u) are still fitted).
    standardize: standardise the columns of X inside the model.

    Labels may be any values (strings, {−1, 1}, ...); `classes_` holds them sorted.
    Fitted attributes: `model_`, `classes_`, `n_classes_`, `n_features_in_`,
    `feature_names_in_` (for a DataFrame), `log_marginal_likelihood_value_` (PEP energy or
    ELBO), `n_iter_`, `fit_warnings_`.
    Shapes: X [N, D], y [N] -> `predict_proba(X* [N*, D])` `[N*, C]`, `predict` labels `[N*]`.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> from sparsegp.sklearn import SparseGPClassifier
        >>> X, y = sg.datasets.snelson()
        >>> labels = np.where(y > 0, "high", "low")
        >>> clf = SparseGPClassifier(num_inducing=8, maxiter=1, random_state=0).fit(X[::4], labels[::4])
        >>> clf.classes_.tolist(), type(clf.model_).__name__, clf.predict_proba(X[:5]).shape
        (['high', 'low'], 'SGPC', (5, 2))
        >>> three = np.digitize(X[:, 0], [2.0, 4.0])  # classes 0, 1, 2: an SVGP
        >>> clf = SparseGPClassifier(num_inducing=8, maxiter=5, random_state=0).fit(X[::4], three[::4])
        >>> p = clf.predict_proba(X[:5])
        >>> p.shape, bool(np.allclose(p.sum(axis=1), 1.0)), type(clf.model_).__name__
        ((5, 3), True, 'SVGP')
    """

    def __init__(self, approximation: str = "auto", alpha: float = 0.5, num_inducing: int = 100,
                 kernel: Kernel | None = None, mean: MeanLike = None, link: str | None = None,
                 maxiter: int | None = None, standardize: bool = True,
                 random_state: RandomState = None) -> None:
        self.approximation = approximation
        self.alpha = alpha
        self.num_inducing = num_inducing
        self.kernel = kernel
        self.mean = mean
        self.link = link
        self.maxiter = maxiter
        self.standardize = standardize
        self.random_state = random_state

    def _backend(self, num_classes: int) -> str:
        """'pep' or 'svgp' for `num_classes` classes, with an error naming the fix."""
        name = self.approximation.lower() if isinstance(self.approximation, str) else None
        if name not in ("auto", "pep", "svgp"):
            raise ValueError(f"approximation must be 'auto', 'pep' or 'svgp'; got "
                             f"{self.approximation!r}")
        if not isinstance(self.link, (str, type(None))) or self.link not in _LINKS:
            raise ValueError(f"link must be None, 'probit', 'logit', 'softmax' or 'robustmax'; "
                             f"got {self.link!r}")
        if name == "auto":
            return "pep" if num_classes == 2 else "svgp"
        if name == "pep" and num_classes > 2:
            raise ValueError(f"approximation='pep' (Power EP, SGPC) is for two classes; y has "
                             f"{num_classes}. Use approximation='svgp' (or 'auto') for several")
        return name

    def fit(self, X: ArrayLike, y: ArrayLike) -> SparseGPClassifier:
        """Build the model on (X [N, D], labels y [N]) and train it; returns self."""
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2)
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes; y has "
                             f"only one class: {classes[0]!r}")
        backend = self._backend(len(classes))
        common: _ClassifierOptions = dict(kernel=_copy(self.kernel), mean=_copy(self.mean),
                      inducing_points=_num_inducing(self.num_inducing, X),
                      seed=_seed(self.random_state),
                      standardize_X=check_bool(self.standardize, "standardize"))
        codes = codes.astype(np.float64)
        binary_link, multi_link = _LINKS[self.link]
        model: SGPC | SVGP
        hold = _holds_hyperparameters(self.maxiter)
        if backend == "pep":
            model = _built(partial(SGPC, X, codes, alpha=self.alpha, link=binary_link, **common))
            if hold:
                model.freeze()  # the sites are still fitted
            options: dict[str, Any] = ({} if self.maxiter is None or hold
                                       else {"maxiter": self.maxiter})
            run = partial(model.fit, progress=False, **options)
        else:
            likelihood = (Bernoulli(link=binary_link) if len(classes) == 2 else
                          MultiClass(len(classes), link=multi_link))
            model = _built(partial(SVGP, X, codes, likelihood=likelihood, **common))
            if hold:
                _hold_hyperparameters(model)
            maxiter = MAXITER if self.maxiter is None or hold else self.maxiter
            run = partial(fit_lbfgsb, model, maxiter=maxiter, progress=False)
        self.n_iter_, self.fit_warnings_ = _iterations(run)
        self.model_, self.classes_, self.n_classes_ = model, classes, len(classes)
        model.feature_names = getattr(self, "feature_names_in_", None)
        self.log_marginal_likelihood_value_ = model.log_marginal_likelihood()
        return self

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """Class probabilities [N*, C], columns in the order of `classes_`."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        p = np.asarray(self.model_.predict_proba(X), dtype=np.float64)
        if p.ndim == 1:  # P(y = classes_[1])
            p = np.column_stack([1.0 - p, p])
        return p / p.sum(axis=1, keepdims=True)  # quadrature leaves sums 1 within ~1e-8

    def predict_log_proba(self, X: ArrayLike) -> np.ndarray:
        """Logarithms of the class probabilities [N*, C]."""
        return np.log(self.predict_proba(X))

    def predict(self, X: ArrayLike) -> np.ndarray:
        """The most probable class of each row [N*], as values of `classes_`."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]
