"""The BoTorch adapter with input and outcome transforms, several outputs, `subset_output` and
`ModelListGP`, each against BoTorch's own `SingleTaskGP` at the same hyperparameters: the same
transformed training data, the same posterior in the original units (mean, covariance, with
and without observation noise), the same conditioned model."""

from __future__ import annotations

import pytest
import torch
from botorch.acquisition.multi_objective.logei import qLogExpectedHypervolumeImprovement
from botorch.models import ModelListGP, SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.sampling import SobolQMCNormalSampler
from botorch.utils.multi_objective.box_decompositions import FastNondominatedPartitioning
from gpytorch.distributions import MultitaskMultivariateNormal

import sparsegp as sg
from sparsegp.botorch import SparseGPModel, as_botorch

DT = torch.float64
LENGTHSCALE = (0.3, 0.5)  # in the unit square Normalize maps the inputs to
NOISE = 0.02  # in the standardised units of Y


def data(m: int = 1, n: int = 20):
    g = torch.Generator().manual_seed(m)
    X = 5.0 + 10.0 * torch.rand(n, 2, generator=g, dtype=DT)  # not the unit square
    Y = torch.stack([100.0 + 30.0 * torch.sin(X[:, 0] / 3.0) + X[:, 1],
                     -5.0 + torch.cos(X[:, 1] / 2.0)], -1)[:, :m]
    return X, Y


def botorch_model(X, Y):
    """SingleTaskGP with Normalize and Standardize, at fixed hyperparameters."""
    model = SingleTaskGP(X, Y, input_transform=Normalize(2), outcome_transform=Standardize(Y.shape[-1]))
    model.covar_module.lengthscale = torch.tensor(LENGTHSCALE, dtype=DT)
    model.likelihood.noise = torch.tensor(NOISE, dtype=DT)
    model.mean_module.constant = torch.zeros_like(model.mean_module.constant)
    return model.eval()


def ours(X, Y, cls=sg.SGPR):
    """The same model in sparsegp (an SGPR of several outputs is the sparse model, not the
    exact limit, even with Z = X: a jitter of 1e-10 on Kuu keeps it within 1e-8 of it)."""
    kernel = sg.kernels.SquaredExponential(lengthscale=list(LENGTHSCALE), variance=1.0)
    return SparseGPModel.from_data(X, Y, cls, input_transform=Normalize(2),
                                   outcome_transform=Standardize(Y.shape[-1]), kernel=kernel,
                                   noise_variance=NOISE, standardize_y=False, jitter=1e-10)


def same_posterior(a, b, X, **options):
    pa, pb = a.posterior(X, **options), b.posterior(X, **options)
    assert pa.mean.shape == pb.mean.shape
    torch.testing.assert_close(pa.mean, pb.mean, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(pa.distribution.covariance_matrix,
                               pb.distribution.covariance_matrix, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("cls", [sg.GPR, sg.SGPR])
def test_transforms_give_singletaskgps_posterior_in_the_original_units(cls):
    X, Y = data()
    reference, model = botorch_model(X, Y), ours(X, Y, cls)
    torch.testing.assert_close(model.model.X, reference.input_transform(X))
    Xs = 5.0 + 10.0 * torch.rand(4, 3, 2, dtype=DT, generator=torch.Generator().manual_seed(9))
    same_posterior(model, reference, Xs)
    same_posterior(model, reference, Xs, observation_noise=True)
    # far from the data the variance is the prior's in the units of Y: Standardize's scale²
    far = model.posterior(torch.full((1, 2), 1e3, dtype=DT)).variance
    torch.testing.assert_close(far.reshape(()), Y.std() ** 2 * (1.0 + 0.0), rtol=1e-6, atol=0)


def test_conditioning_with_transforms_is_singletaskgps():
    X, Y = data()
    reference, model = botorch_model(X, Y), ours(X, Y)
    Xs = 5.0 + 10.0 * torch.rand(6, 2, dtype=DT, generator=torch.Generator().manual_seed(2))
    reference.posterior(Xs)  # BoTorch's conditioning needs its caches
    X_new, Y_new = X[:3] + 0.5, Y[:3] + 1.0
    same_posterior(model.condition_on_observations(X_new, Y_new),
                   reference.condition_on_observations(X_new, Y_new), Xs)


def test_several_outputs_are_one_model_with_singletaskgps_joint():
    X, Y = data(m=2)
    reference, model = botorch_model(X, Y), ours(X, Y)
    assert model.num_outputs == 2
    Xs = 5.0 + 10.0 * torch.rand(3, 4, 2, dtype=DT, generator=torch.Generator().manual_seed(4))
    posterior = model.posterior(Xs)
    assert isinstance(posterior.distribution, MultitaskMultivariateNormal)
    assert posterior.mean.shape == (3, 4, 2)
    same_posterior(model, reference, Xs)
    same_posterior(model, reference, Xs, observation_noise=True)
    # one output, by index or by subset: the same marginal, in its own units
    for picked in (model.subset_output([1]), model):
        options = {} if picked is not model else {"output_indices": [1]}
        one = picked.posterior(Xs, **options)
        torch.testing.assert_close(one.mean[..., 0], posterior.mean[..., 1])
        torch.testing.assert_close(one.variance[..., 0], posterior.variance[..., 1])
    assert model.subset_output([1]).num_outputs == 1


def test_a_model_list_of_wrappers_is_a_modellistgp():
    X, Y = data(m=2)
    first, second = (ours(X, Y[:, i:i + 1]) for i in range(2))
    both = ModelListGP(first, second)
    joint = ours(X, Y)  # the two outputs as one model: the same hyperparameters
    Xs = 5.0 + 10.0 * torch.rand(5, 1, 2, dtype=DT, generator=torch.Generator().manual_seed(5))
    same_posterior(both, joint, Xs)
    X_new = [X[:2] + 0.25, X[:2] + 0.25]
    Y_new = Y[:2] + 0.5
    conditioned = both.condition_on_observations(X_new, Y_new)
    for i, member in enumerate(conditioned.models):
        alone = (first, second)[i].condition_on_observations(X_new[i], Y_new[:, i:i + 1])
        same_posterior(member, alone, Xs)
    # a multi-objective acquisition over the list: finite, with a gradient in X
    partitioning = FastNondominatedPartitioning(ref_point=Y.min(0).values, Y=Y)
    acq = qLogExpectedHypervolumeImprovement(
        both, ref_point=Y.min(0).values.tolist(), partitioning=partitioning,
        sampler=SobolQMCNormalSampler(torch.Size([64]), seed=0))
    Xq = Xs.clone().requires_grad_(True)
    value = acq(Xq)
    value.sum().backward()
    assert bool(torch.isfinite(value).all()) and bool(torch.isfinite(Xq.grad).all())


def test_as_botorch_takes_the_transforms_of_a_model_built_on_transformed_data():
    X, Y = data()
    normalize, standardize = Normalize(2), Standardize(1)
    Xt = normalize(X)
    Yt, _ = standardize(Y)
    kernel = sg.kernels.SquaredExponential(lengthscale=list(LENGTHSCALE), variance=1.0)
    model = sg.GPR(Xt.detach(), Yt[:, 0].detach(), kernel, noise_variance=NOISE,
                   standardize_y=False)
    wrapped = as_botorch(model, input_transform=normalize, outcome_transform=standardize)
    same_posterior(wrapped, botorch_model(X, Y), X[:4] + 0.1)


def test_fantasies_with_transforms_are_singletaskgps():
    """The same sampler draws the same fantasies from the same posterior, in the original
    units; conditioned on them (transformed as the training data were), the same models."""
    X, Y = data()
    reference, model = botorch_model(X, Y), ours(X, Y)
    Xs = 5.0 + 10.0 * torch.rand(6, 1, 2, dtype=DT, generator=torch.Generator().manual_seed(6))
    reference.posterior(Xs)
    X_new = 5.0 + 10.0 * torch.rand(2, 2, dtype=DT, generator=torch.Generator().manual_seed(7))
    fantasies = [m.fantasize(X_new, SobolQMCNormalSampler(torch.Size([4]), seed=3))
                 for m in (model, reference)]
    assert fantasies[0].batch_shape == fantasies[1].batch_shape == torch.Size([4])
    same_posterior(*fantasies, Xs[:, None])  # [6, 1, 1, 2]: every fantasy at each point


def test_without_botorch_the_import_error_names_the_extra(monkeypatch):
    import importlib
    import sys

    for name in list(sys.modules):
        if name.split(".")[0] == "botorch" or name.startswith("sparsegp.botorch"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "botorch", None)  # as if not installed
    with pytest.raises(ImportError, match=r'pip install "botorch>=0.18"'):
        importlib.import_module("sparsegp.botorch")
