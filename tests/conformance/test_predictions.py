"""The prediction protocol (`sparsegp.models.core.predictions`; docs/predictions.md, "Tensors in,
tensors out") on every registered model class, through its recipes in `recipes.MODELS_` (built
as there, at the recipe's `new_inputs`, with its `new_targets` and its declared `observed`
predictive): numpy in, numpy out and tensors in the input's dtype; gradients of tensor
predictions with respect to the inputs (gradcheck) and every trainable parameter (central
differences), or the inputs alone where the class says `tracks_parameters = False`;
`predictive` carrying `predict_f` / `predict_y`; `predict_f_samples` within Monte Carlo error
and reproducible; finite `predict_log_density` of the right shape (the Gaussian of `predict_y`
or the labels' distribution); `pathwise_samples` working or refusing with TypeError /
ValueError.

The checks run at a generic state (`generic`: the parameters perturbed, the recipe's `settle`
applied), the parameter gradients also at the model as built. A recipe's known bug in one of
these checks: `bugs={"<check>": reason}` with the check names of the `cases(...)` calls below
("predict-types", "predict-input-gradient", "predict-parameter-gradient",
"predict-parameter-gradient-as-built", "predictive", "samples", "log-density", "pathwise").
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributions import Bernoulli, Categorical, MultivariateNormal, Normal

from .helpers import perturb
from .recipes import built, cases

pytestmark = pytest.mark.usefixtures("quiet_models")


def build(name, case):
    return built("model", name, case, case.make())


def generic(name, case):
    """The recipe's model at a generic state: every parameter moved a little (seeded) and what
    they do not hold settled (`case.settle`). As built, a variational or EP posterior is its
    prior, under which the predictions need not depend on the inputs or on most parameters."""
    model = build(name, case)
    if case.conditioned != "fantasies":  # its posterior is all it has (test_models.py)
        perturb(model, seed=3, scale=0.05)
    if case.settle is not None:
        case.settle(model)
    return model


def numpy_of(t):
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def scalar(model, X):
    """A scalar of predict_f that weighs every mean and every standard deviation."""
    mean, var = model.predict_f(X)
    weights = torch.linspace(1.0, 2.0, mean.numel(), dtype=mean.dtype).reshape(mean.shape)
    return (weights * mean).sum() + var.sqrt().sum()


def trainable(model):
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


# -- 1. types -----------------------------------------------------------------------------------
def _calls(model):
    """(what, fn(X, y)) for the predictions of every model."""
    return [("predict_f", lambda X, y: model.predict_f(X)),
            ("predict_f(full_cov)", lambda X, y: model.predict_f(X, full_cov=True)),
            ("predict_y", lambda X, y: model.predict_y(X)),
            ("predict_log_density", lambda X, y: (model.predict_log_density(X, y),))]


@pytest.mark.parametrize("name,case", cases("model", "predict-types"))
def test_numpy_in_numpy_out_and_tensors_in_the_inputs_dtype(name, case):
    model = generic(name, case)
    X, y = case.Xnew(), case.ynew()
    for what, call in _calls(model):
        arrays = call(X, y)
        assert all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays), \
            (what, [type(a) for a in arrays])
        tensors = call(torch.as_tensor(X), torch.as_tensor(y))
        assert all(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in tensors), \
            (what, [getattr(t, "dtype", type(t)) for t in tensors])
        for a, t in zip(arrays, tensors):
            np.testing.assert_allclose(numpy_of(t), a, rtol=1e-10, atol=1e-12, err_msg=what)
        singles = call(torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32))
        assert all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in singles), \
            (what, [getattr(t, "dtype", type(t)) for t in singles])
        for a, t in zip(arrays, singles):  # the inputs rounded to float32, then float64 inside
            np.testing.assert_allclose(numpy_of(t), a, rtol=1e-4, atol=1e-5, err_msg=what)


# -- 2, 3. gradients ------------------------------------------------------------------------------
@pytest.mark.parametrize("name,case", cases("model", "predict-input-gradient"))
def test_gradients_with_respect_to_the_inputs_match_finite_differences(name, case):
    model = generic(name, case)
    X = torch.as_tensor(case.Xnew()[:3]).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: scalar(model, x), (X,), eps=1e-6, atol=1e-6)
    (grad,) = torch.autograd.grad(scalar(model, X), X)
    assert float(grad.abs().max()) > 1e-3, "predictions that do not move with the inputs: vacuous"


def _finite_difference(model, X, p, i, step=1e-6):
    values = []
    for h in (step, -step):
        with torch.no_grad():
            p.view(-1)[i] += h
            values.append(float(scalar(model, X)))
            p.view(-1)[i] -= h
    return (values[0] - values[1]) / (2 * step)


def _check_parameter_gradients(model, case):
    X = torch.as_tensor(case.Xnew()[:3])
    params = trainable(model)
    assert params, "a model with nothing to train"
    if not type(model).tracks_parameters:
        # the inputs only (KISS-GP): the parameters get no gradient, not a wrong one
        x = X.clone().requires_grad_(True)
        scalar(model, x).backward()
        assert x.grad is not None and bool(torch.isfinite(x.grad).all())
        assert bool(x.grad.abs().sum() > 0), "no gradient reaches the inputs"
        assert [n for n, p in params if p.grad is not None] == []
        return
    grads = torch.autograd.grad(scalar(model, X), [p for _, p in params], allow_unused=True)
    checked = []
    for (pname, p), g in zip(params, grads):
        g = torch.zeros_like(p) if g is None else g
        for i in range(min(p.numel(), 2)):  # the first two entries of every parameter
            fd = _finite_difference(model, X, p, i)
            analytic = float(g.reshape(-1)[i])
            assert abs(analytic - fd) <= 1e-5 * (1 + abs(fd)), (pname, i, analytic, fd)
            checked.append(fd)
    assert max(abs(v) for v in checked) > 1e-3, "no parameter moves the predictions: a vacuous check"


def trains(case):
    return not case.conditioned  # conditioned models: frozen parameters, no gradients to them


@pytest.mark.parametrize("name,case", cases("model", "predict-parameter-gradient", trains))
def test_gradients_reach_every_parameter_or_the_class_says_they_do_not(name, case):
    _check_parameter_gradients(generic(name, case), case)


@pytest.mark.parametrize("name,case", cases("model", "predict-parameter-gradient-as-built",
                                            trains))
def test_gradients_reach_every_parameter_of_the_model_as_built(name, case):
    # unfitted: a variational or EP posterior still its prior (a special state, and where
    # gradient-based search over inputs or parameters starts)
    _check_parameter_gradients(build(name, case), case)


# -- 4. predictive distributions -------------------------------------------------------------------
def _batched(cov):
    """Covariances [N, N] or [P, N, N] as [P, N, N]."""
    return cov if cov.ndim == 3 else cov[None]


def _assert_joint(joint, mean, cov, what):
    assert isinstance(joint, MultivariateNormal), (what, type(joint))
    means = mean if mean.ndim == 1 else mean.T  # outputs as the batch
    np.testing.assert_allclose(joint.mean.numpy(), means, rtol=1e-12, atol=1e-14, err_msg=what)
    cov = _batched(cov)
    # the factor carries a relative jitter of 1e-10 (predictions.SAMPLE_JITTER)
    np.testing.assert_allclose(_batched(joint.covariance_matrix.numpy()), cov,
                               rtol=0, atol=1e-8 * np.abs(cov).max(), err_msg=what)


@pytest.mark.parametrize("name,case", cases("model", "predictive"))
def test_predictive_distributions_carry_the_predicted_moments(name, case):
    model = generic(name, case)
    X = case.Xnew()
    mean, var = model.predict_f(X)
    d = model.predictive(X)
    assert isinstance(d, Normal), type(d)
    np.testing.assert_allclose(d.mean.numpy(), mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(d.variance.numpy(), var, rtol=1e-10, atol=1e-14)
    joint_mean, cov = model.predict_f(X, full_cov=True)
    # the full covariance's diagonal is the marginal variance (outputs: cov [P, N*, N*])
    np.testing.assert_allclose(joint_mean, mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.diagonal(_batched(cov), axis1=-2, axis2=-1),
                               var.T if var.ndim == 2 else var[None], rtol=1e-8, atol=1e-12)
    _assert_joint(model.predictive(X, full_cov=True), joint_mean, cov, "f*")

    # tensors in: a distribution differentiable in the inputs through rsample
    x = torch.as_tensor(X).requires_grad_(True)
    model.predictive(x, full_cov=True).rsample((3,)).sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())

    assert (case.observed == "labels") == bool(getattr(model, "classifies", False)), (
        f"the recipe declares observed={case.observed!r}, the model's classifies is "
        f"{getattr(model, 'classifies', None)}")
    if case.observed == "gaussian":
        ymean, yvar = model.predict_y(X)
        observed = model.predictive(X, observed=True)
        assert isinstance(observed, Normal), type(observed)
        np.testing.assert_allclose(observed.mean.numpy(), ymean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(observed.variance.numpy(), yvar, rtol=1e-10, atol=1e-14)
        _assert_joint(model.predictive(X, full_cov=True, observed=True),
                      *model.predict_y(X, full_cov=True), "y*")
    elif case.observed == "labels":
        p = model.predict_proba(X)
        observed = model.predictive(X, observed=True)
        assert isinstance(observed, Bernoulli if p.ndim == 1 else Categorical), type(observed)
        np.testing.assert_allclose(observed.probs.numpy(), p, rtol=1e-12, atol=1e-14)
        with pytest.raises(ValueError, match="covariance"):
            model.predictive(X, full_cov=True, observed=True)
    else:
        assert case.observed == "moments", case.observed
        for full_cov in (False, True):
            with pytest.raises(ValueError, match="predict_y"):
                model.predictive(X, full_cov=full_cov, observed=True)


# -- 5. samples -----------------------------------------------------------------------------------
SAMPLES = 20000


@pytest.mark.parametrize("name,case", cases("model", "samples"))
def test_sample_moments_match_the_predicted_ones_within_monte_carlo_error(name, case):
    model = generic(name, case)
    X = case.Xnew()
    S = SAMPLES
    samples = model.predict_f_samples(X, S, seed=1)
    mean, cov = model.predict_f(X, full_cov=True)
    assert isinstance(samples, np.ndarray) and samples.shape == (S, *mean.shape)
    if samples.ndim == 2:
        samples, mean = samples[..., None], mean[:, None]
    cov = _batched(cov)
    for p in range(samples.shape[2]):
        sd = np.sqrt(np.diag(cov[p]))
        z = (samples[:, :, p].mean(0) - mean[:, p]) / (sd / np.sqrt(S))
        assert np.all(np.abs(z) < 5), ("means", p, z)
        # the sampling error of a covariance entry is at most about sd_i sd_j √(2/S)
        error = np.abs(np.cov(samples[:, :, p].T) - cov[p]) / (np.outer(sd, sd) * np.sqrt(2 / S))
        assert np.all(error < 6), ("covariances", p, error.max())
    # marginal samples: the marginal variances
    marginal = model.predict_f_samples(X, S, full_cov=False, seed=2)
    _, var = model.predict_f(X)
    var, marginal = (var, marginal) if var.ndim == 2 else (var[:, None], marginal[..., None])
    ratio = marginal.var(0) / var
    assert np.all(np.abs(ratio - 1) < 6 * np.sqrt(2 / S)), ratio


@pytest.mark.parametrize("name,case", cases("model", "samples"))
def test_samples_are_reproducible_with_a_seed_and_tensors_in_give_tensors(name, case):
    model = generic(name, case)
    X = case.Xnew()
    a = model.predict_f_samples(X, 3, seed=7)
    np.testing.assert_array_equal(model.predict_f_samples(X, 3, seed=7), a)
    np.testing.assert_array_equal(
        model.predict_f_samples(X, 3, seed=torch.Generator().manual_seed(7)), a)
    assert not np.array_equal(model.predict_f_samples(X, 3, seed=8), a)
    x = torch.as_tensor(X).requires_grad_(True)
    s = model.predict_f_samples(x, 3, seed=7)
    assert isinstance(s, torch.Tensor) and s.dtype == torch.float64
    np.testing.assert_allclose(numpy_of(s), a, rtol=1e-10, atol=1e-12)
    s.sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())


# -- 6. log predictive densities ----------------------------------------------------------------------
@pytest.mark.parametrize("name,case", cases("model", "log-density"))
def test_log_predictive_densities_are_finite_and_those_of_the_predictive(name, case):
    model = generic(name, case)
    X, y = case.Xnew(), case.ynew()
    lp = model.predict_log_density(X, y)
    assert isinstance(lp, np.ndarray) and lp.shape == np.shape(y), (type(lp), np.shape(lp))
    assert np.all(np.isfinite(lp)), lp
    if case.observed == "gaussian":
        mean, var = model.predict_y(X)
        dense = -0.5 * np.log(2 * np.pi * var) - 0.5 * (y - mean) ** 2 / var
        np.testing.assert_allclose(lp, dense, rtol=1e-9, atol=1e-12)
    elif case.observed == "labels":
        labels = model.predictive(X, observed=True)
        values = torch.as_tensor(y, dtype=torch.long if isinstance(labels, Categorical)
                                 else torch.float64)
        np.testing.assert_allclose(lp, labels.log_prob(values).numpy(), rtol=1e-9, atol=1e-12)
    else:  # moments only (no torch distribution to compare with): finite, shaped, as above
        assert case.observed == "moments", case.observed


# -- 7. pathwise samples ------------------------------------------------------------------------
@pytest.mark.parametrize("name,case", cases("model", "pathwise"))
def test_pathwise_samples_work_or_refuse_with_a_type_or_value_error(name, case):
    model = generic(name, case)
    X = case.Xnew()
    S = 4000
    try:
        paths = model.pathwise_samples(S, num_features=1024, seed=0)
    except (TypeError, ValueError) as refusal:
        assert len(str(refusal)) > 20, f"an unclear refusal: {refusal!r}"
        return
    a = paths(X)
    assert isinstance(a, np.ndarray) and a.shape == (S, X.shape[0]), np.shape(a)
    assert np.all(np.isfinite(a))
    np.testing.assert_array_equal(paths(X), a)  # the same functions at every call
    np.testing.assert_allclose(paths(X[2:3])[:, 0], a[:, 2], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(model.pathwise_samples(S, num_features=1024, seed=0)(X), a)
    # the mean is the (exact) update's: within Monte Carlo error of predict_f's (the random
    # features' variance is approximate, Matérn's most: 1.5 × the standard error)
    mean, var = (v.reshape(-1) for v in model.predict_f(X))
    z = (a.mean(0) - mean) / np.sqrt(1.5 * var / S)
    assert np.all(np.abs(z) < 5), z
