"""The BoTorch adapter: posteriors equal to sparsegp's joint predictive, reparameterised
samples, differentiable acquisition values, conditioning and fantasies, and a BO loop."""

from __future__ import annotations

import doctest
import subprocess
import sys

import numpy as np
import pytest
import torch
from botorch.acquisition import (
    qExpectedImprovement,
    qKnowledgeGradient,
    qLogExpectedImprovement,
)
from botorch.generation.sampling import MaxPosteriorSampling
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.distributions import MultivariateNormal

import sparsegp as sg
from sparsegp.botorch import SparseGPModel, as_botorch, set_botorch_priors

from .conftest import import_error_without

D = 2
DT = torch.float64


def data(n: int = 24, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, D, generator=g, dtype=DT)
    y = torch.sin(4.0 * X[:, 0]) + (X[:, 1] - 0.3) ** 2 + 0.05 * torch.randn(n, generator=g,
                                                                            dtype=DT)
    return X, y


def gpr(X: torch.Tensor, y: torch.Tensor) -> sg.GPR:
    m = sg.GPR(X, y, standardize_y=False)
    m.kernel.set_value("lengthscale", [0.3, 0.5])
    m.noise_variance = 0.01
    return m


def sgpr(X: torch.Tensor, y: torch.Tensor) -> sg.SGPR:
    m = sg.SGPR(X, y, inducing_points=X[:10] + 0.01, standardize_y=False)
    m.kernel.set_value("lengthscale", [0.3, 0.5])
    m.noise_variance = 0.01
    return m


def svgp(X: torch.Tensor, y: torch.Tensor) -> sg.SVGP:
    return sg.SVGP(X, y, inducing_points=X[:10] + 0.01)


def refit(model, X_all: torch.Tensor, y_all: torch.Tensor):
    """The same model class and parameters on all the data (no standardisation)."""
    if isinstance(model, sg.SGPR):
        ref = sg.SGPR(X_all, y_all, inducing_points=model.inducing_points, standardize_y=False)
    else:
        ref = sg.GPR(X_all, y_all, standardize_y=False)
    ref.load_state_dict(model.state_dict(), strict=False)
    return ref


BUILDS = [gpr, sgpr]


@pytest.mark.parametrize("build", [gpr, sgpr, svgp])
@pytest.mark.parametrize("noise", [False, True])
def test_posterior_equals_the_joint_predictive(build, noise):
    model = build(*data())
    w = as_botorch(model)
    Xt = torch.rand(3, 2, 4, D, generator=torch.Generator().manual_seed(1), dtype=DT)
    post = w.posterior(Xt, observation_noise=noise)
    assert w.num_outputs == 1 and w.batch_shape == torch.Size()
    assert post.mean.shape == (3, 2, 4, 1) and post.variance.shape == (3, 2, 4, 1)
    cov = post.distribution.covariance_matrix
    predict = model.predict_y if noise else model.predict_f
    for i in range(3):
        for j in range(2):
            mean, c = predict(Xt[i, j], full_cov=True)
            torch.testing.assert_close(post.mean[i, j, :, 0], mean, rtol=0, atol=1e-10)
            torch.testing.assert_close(cov[i, j], c, rtol=0, atol=1e-10)
            torch.testing.assert_close(post.variance[i, j, :, 0], c.diagonal(), rtol=0,
                                       atol=1e-10)
    one = w.posterior(Xt[1, 0])  # q × d: no batch
    assert one.mean.shape == (4, 1)
    mean, c = model.predict_f(Xt[1, 0], full_cov=True)
    torch.testing.assert_close(one.mean[:, 0], mean, rtol=0, atol=1e-10)


def test_a_given_noise_variance_is_added():
    model = gpr(*data())
    w = as_botorch(model)
    Xt = torch.rand(2, 3, D, generator=torch.Generator().manual_seed(2), dtype=DT)
    noise = torch.full((2, 3, 1), 0.25, dtype=DT)
    diff = (w.posterior(Xt, observation_noise=noise).distribution.covariance_matrix
            - w.posterior(Xt).distribution.covariance_matrix)
    torch.testing.assert_close(diff, 0.25 * torch.eye(3, dtype=DT).expand(2, 3, 3))


def test_large_batches_are_chunked_without_changing_the_moments(monkeypatch):
    model = sgpr(*data())
    Xt = torch.rand(9, 3, D, generator=torch.Generator().manual_seed(3), dtype=DT)
    whole = as_botorch(model).posterior(Xt).distribution
    monkeypatch.setattr("sparsegp.botorch.moments.POINTS_PER_CALL", 4)  # one q-batch per call
    chunked = as_botorch(model).posterior(Xt).distribution
    torch.testing.assert_close(chunked.mean, whole.mean, rtol=0, atol=1e-12)
    torch.testing.assert_close(chunked.covariance_matrix, whole.covariance_matrix, rtol=0,
                               atol=1e-12)


def test_rsample_moments_match_the_predictive():
    model = sgpr(*data())
    Xt = torch.rand(2, 3, D, generator=torch.Generator().manual_seed(4), dtype=DT)
    post = as_botorch(model).posterior(Xt)
    S = 20000
    torch.manual_seed(0)
    s = post.rsample(torch.Size([S]))[..., 0]  # [S, 2, 3]
    mean, cov = post.mean[..., 0], post.distribution.covariance_matrix
    se = (post.variance[..., 0] / S).sqrt()
    assert bool(((s.mean(0) - mean).abs() < 4.5 * se).all())
    centred = s - s.mean(0)
    emp = torch.einsum("sbi,sbj->bij", centred, centred) / (S - 1)
    scale = (cov.diagonal(dim1=-2, dim2=-1)[..., :, None]
             * cov.diagonal(dim1=-2, dim2=-1)[..., None, :]).sqrt()
    # the standard error of a sample covariance is at most sqrt(2 σᵢ²σⱼ² / S)
    assert bool(((emp - cov).abs() < 4.5 * scale * (2.0 / S) ** 0.5).all())


def test_rsample_is_differentiable_with_respect_to_X():
    model = gpr(*data())
    Xt = torch.rand(2, 3, D, generator=torch.Generator().manual_seed(5), dtype=DT,
                    requires_grad=True)
    s = as_botorch(model).posterior(Xt).rsample(torch.Size([4]))
    s.sum().backward()
    assert Xt.grad is not None and bool(torch.isfinite(Xt.grad).all())
    assert float(Xt.grad.abs().sum()) > 0
    # the model's parameters are left as they were: trainable, and without a gradient
    assert all(p.requires_grad and p.grad is None for p in model.parameters())


def finite_difference(f, X: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    grad = torch.zeros_like(X)
    flat = grad.view(-1)
    for i in range(X.numel()):
        e = torch.zeros_like(X).view(-1)
        e[i] = h
        e = e.view_as(X)
        flat[i] = (f(X + e).sum() - f(X - e).sum()) / (2 * h)
    return grad


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.filterwarnings("ignore:qExpectedImprovement has known numerical issues")
@pytest.mark.parametrize("acquisition", [qExpectedImprovement, qLogExpectedImprovement])
def test_acquisition_gradients_match_finite_differences(build, acquisition):
    X, y = data()
    w = as_botorch(build(X, y))
    sampler = SobolQMCNormalSampler(torch.Size([64]), seed=0)  # fixed base samples
    acq = acquisition(w, best_f=y.median(), sampler=sampler)  # improvement in most samples
    Xt = torch.rand(3, 2, D, generator=torch.Generator().manual_seed(6), dtype=DT)
    Xg = Xt.clone().requires_grad_(True)
    acq(Xg).sum().backward()
    with torch.no_grad():
        fd = finite_difference(acq, Xt)
    assert float(Xg.grad.abs().max()) > 1e-3
    torch.testing.assert_close(Xg.grad, fd, rtol=1e-5, atol=1e-7)


def forrester(x: torch.Tensor) -> torch.Tensor:
    """Forrester et al.'s function on [0, 1]: minimum −6.0207 at x = 0.7572."""
    return (6.0 * x - 2.0) ** 2 * torch.sin(12.0 * x - 4.0)


@pytest.mark.parametrize("build", ["gpr", "sgpr"])
def test_a_bo_loop_finds_the_minimum_of_the_forrester_function(build):
    torch.manual_seed(0)
    X = torch.linspace(0.0, 1.0, 4, dtype=DT)[:, None]
    y = -forrester(X[:, 0])  # BoTorch maximises
    start = float(y.max())
    bounds = torch.tensor([[0.0], [1.0]], dtype=DT)
    for _ in range(5):
        if build == "gpr":
            model = sg.GPR(X, y)
        else:
            model = sg.SGPR(X, y, inducing_points=X.clone())
        model.fit(maxiter=100, progress=False)
        acq = qLogExpectedImprovement(as_botorch(model), best_f=y.max(),
                                      sampler=SobolQMCNormalSampler(torch.Size([128]), seed=0))
        x, _ = optimize_acqf(acq, bounds=bounds, q=1, num_restarts=4, raw_samples=64)
        X = torch.cat([X, x])
        y = torch.cat([y, -forrester(x[:, 0])])
    best = float(y.max())
    assert start < 3.1 and best > 6.0  # from f = −3.03 at best to within 0.021 of −6.0207


@pytest.mark.parametrize("build", BUILDS)
def test_conditioning_equals_refitting_at_fixed_hyperparameters(build):
    X, y = data(30)
    model = build(X[:24], y[:24])
    w = as_botorch(model)
    cond = w.condition_on_observations(X[24:], y[24:, None])
    assert isinstance(cond, SparseGPModel) and cond.batch_shape == torch.Size()
    ref = refit(model, X, y)
    Xt = torch.rand(2, 3, D, generator=torch.Generator().manual_seed(7), dtype=DT)
    got = cond.posterior(Xt).distribution
    want = as_botorch(ref).posterior(Xt).distribution
    torch.testing.assert_close(got.mean, want.mean, rtol=0, atol=1e-10)
    torch.testing.assert_close(got.covariance_matrix, want.covariance_matrix, rtol=0,
                               atol=1e-10)
    assert w.model.num_data == 24  # the original is unchanged


@pytest.mark.parametrize("build", BUILDS)
def test_batched_conditioning_conditions_each_batch_element(build):
    X, y = data(24)
    model = build(X, y)
    Xn = torch.rand(3, 2, D, generator=torch.Generator().manual_seed(8), dtype=DT)
    Yn = torch.randn(3, 2, 1, generator=torch.Generator().manual_seed(9), dtype=DT)
    cond = as_botorch(model).condition_on_observations(Xn, Yn)
    assert cond.batch_shape == torch.Size([3])
    Xt = torch.rand(3, 4, D, generator=torch.Generator().manual_seed(10), dtype=DT)
    post = cond.posterior(Xt)
    for j in range(3):
        ref = refit(model, torch.cat([X, Xn[j]]), torch.cat([y, Yn[j, :, 0]]))
        mean, cov = ref.predict_f(Xt[j], full_cov=True)
        torch.testing.assert_close(post.mean[j, :, 0], mean, rtol=0, atol=1e-10)
        torch.testing.assert_close(post.distribution.covariance_matrix[j], cov, rtol=0,
                                   atol=1e-10)


@pytest.mark.parametrize("build", BUILDS)
def test_fantasies_equal_conditioning_on_each_sample(build):
    X, y = data(24)
    model = build(X, y)
    w = as_botorch(model)
    Xf = torch.rand(2, 1, D, generator=torch.Generator().manual_seed(11), dtype=DT)
    sampler = SobolQMCNormalSampler(torch.Size([5]), seed=0)
    fm = w.fantasize(Xf, sampler)
    assert fm.batch_shape == torch.Size([5, 2])
    Y = sampler(w.posterior(Xf, observation_noise=True))  # the same base samples: the same Y
    assert Y.shape == (5, 2, 1, 1)
    Xt = torch.rand(5, 2, 3, D, generator=torch.Generator().manual_seed(12), dtype=DT)
    post = fm.posterior(Xt)
    assert post.mean.shape == (5, 2, 3, 1)
    for f in range(5):
        for j in range(2):
            ref = refit(model, torch.cat([X, Xf[j]]), torch.cat([y, Y[f, j, :, 0].detach()]))
            mean, cov = ref.predict_f(Xt[f, j], full_cov=True)
            torch.testing.assert_close(post.mean[f, j, :, 0], mean, rtol=0, atol=1e-9)
            torch.testing.assert_close(post.distribution.covariance_matrix[f, j], cov, rtol=0,
                                       atol=1e-9)
    # test points without the fantasy dimension broadcast over it
    flat = fm.posterior(Xt[0])
    torch.testing.assert_close(flat.mean[0], post.mean[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("build", BUILDS)
def test_inputs_shared_by_the_fantasies_give_each_fantasys_posterior(build):
    # X without the fantasy dimension (BoTorch broadcasts it): one joint prediction serves
    # every fantasy; each is the model refitted on its own sample, covariances included
    X, y = data(24)
    model = build(X, y)
    w = as_botorch(model)
    Xf = torch.rand(1, D, generator=torch.Generator().manual_seed(13), dtype=DT)
    sampler = SobolQMCNormalSampler(torch.Size([4]), seed=1)
    fm = w.fantasize(Xf, sampler)
    Y = sampler(w.posterior(Xf, observation_noise=True))
    Xt = torch.rand(3, 1, 2, D, generator=torch.Generator().manual_seed(14), dtype=DT)
    post = fm.posterior(Xt)  # [3, 1, 2, D] → batch [3, 4]
    assert post.mean.shape == (3, 4, 2, 1)
    for f in range(4):
        ref = refit(model, torch.cat([X, Xf]), torch.cat([y, Y[f, :, 0].detach()]))
        for r in range(3):
            mean, cov = ref.predict_f(Xt[r, 0], full_cov=True)
            torch.testing.assert_close(post.mean[r, f, :, 0], mean, rtol=0, atol=1e-9)
            torch.testing.assert_close(post.distribution.covariance_matrix[r, f], cov, rtol=0,
                                       atol=1e-9)


@pytest.mark.parametrize("build", BUILDS)
def test_256_fantasies_over_441_points_take_two_joint_predictions(build, monkeypatch):
    # the posterior over a 21 × 21 grid of 256 fantasies: two calls of at most
    # POINTS_PER_CALL = 256 points, each covariance [F, P, P] (O(F·P²) memory); taking each
    # fantasy's inputs apart predicted at F·441 points in 441 calls (about a minute)
    from sparsegp import botorch as adapter

    X, y = data(24)
    w = as_botorch(build(X, y))
    fm = w.fantasize(torch.rand(1, D, generator=torch.Generator().manual_seed(15), dtype=DT),
                     SobolQMCNormalSampler(torch.Size([256]), seed=2))
    member = fm.model
    calls = []
    predict = member.predict_f

    def counted(Xs, full_cov=False):
        mean, cov = predict(Xs, full_cov=full_cov)
        calls.append(tuple(cov.shape))
        return mean, cov

    monkeypatch.setattr(member, "predict_f", counted)
    g = torch.linspace(0.0, 1.0, 21, dtype=DT)
    grid = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(441, 1, 1, 2)
    grid = torch.cat([grid, torch.full((441, 1, 1, D - 2), 0.5, dtype=DT)], -1)
    post = fm.posterior(grid)
    assert post.mean.shape == (441, 256, 1, 1)
    assert calls == [(256, 256, 256), (256, 185, 185)]
    assert adapter.moments.POINTS_PER_CALL == 256
    # the last grid point's posterior under fantasy 7, from a prediction there alone
    mean, var = predict(grid[-1, 0])
    torch.testing.assert_close(post.mean[-1, 7, 0, 0], mean[0, 7], rtol=0, atol=1e-10)
    torch.testing.assert_close(post.variance[-1, 7, 0, 0], var[0, 7], rtol=0, atol=1e-10)


def test_fantasies_with_known_noise_per_point():
    X, y = data(16)
    model = sg.GPR(X, y, noise_variance=np.full(16, 0.01), standardize_y=False)
    w = as_botorch(model)
    Xf = torch.rand(3, 2, D, generator=torch.Generator().manual_seed(14), dtype=DT)
    noise = torch.full((3, 2, 1), 0.02, dtype=DT)
    sampler = SobolQMCNormalSampler(torch.Size([4]), seed=0)
    fm = w.fantasize(Xf, sampler, observation_noise=noise)
    assert fm.batch_shape == torch.Size([4, 3])
    Y = sampler(w.posterior(Xf, observation_noise=noise))
    # the fantasies' spread is that of y*: f*'s variance plus the given noise
    f_var = w.posterior(Xf).variance
    torch.testing.assert_close(w.posterior(Xf, observation_noise=noise).variance,
                               f_var + 0.02)
    Xt = torch.rand(3, 2, D, generator=torch.Generator().manual_seed(15), dtype=DT)
    post = fm.posterior(Xt)
    for f in range(4):
        for j in range(3):
            ref = model.condition_on_observations(Xf[j], Y[f, j, :, 0].detach(),
                                                  noise=noise[j, :, 0])
            mean, cov = ref.predict_f(Xt[j], full_cov=True)
            torch.testing.assert_close(post.mean[f, j, :, 0], mean, rtol=0, atol=1e-9)
            torch.testing.assert_close(post.distribution.covariance_matrix[f, j], cov, rtol=0,
                                       atol=1e-9)


def test_knowledge_gradient_is_differentiable_and_optimises():
    X, y = data(16)
    w = as_botorch(gpr(X, y))
    kg = qKnowledgeGradient(w, num_fantasies=4)
    Xt = torch.rand(2, 1 + 4, D, generator=torch.Generator().manual_seed(13), dtype=DT)
    Xg = Xt.clone().requires_grad_(True)
    kg(Xg).sum().backward()
    with torch.no_grad():
        fd = finite_difference(kg, Xt)
    assert float(Xg.grad.abs().max()) > 1e-3
    torch.testing.assert_close(Xg.grad, fd, rtol=1e-5, atol=1e-7)
    torch.manual_seed(0)
    bounds = torch.tensor([[0.0] * D, [1.0] * D], dtype=DT)
    x, value = optimize_acqf(kg, bounds=bounds, q=1, num_restarts=2, raw_samples=16,
                             options={"maxiter": 30})
    assert x.shape == (1, D) and bool(((x >= 0) & (x <= 1)).all())
    assert float(value) >= float(kg(Xt).max()) - 1e-9  # at least as good as a random start


def test_conditioning_a_fantasy_model_again():
    X, y = data(20)
    model = gpr(X, y)
    fant = as_botorch(model).condition_on_observations(X[:2] + 0.1,
                                                       torch.randn(3, 2, 1, dtype=DT))
    assert fant.batch_shape == torch.Size([3])
    again = fant.condition_on_observations(X[:1] + 0.2, torch.zeros(1, 1, dtype=DT))
    assert again.batch_shape == torch.Size([3])
    assert again.posterior(torch.rand(4, D, dtype=DT)).mean.shape == (3, 4, 1)


def test_bad_input_gets_a_clear_error():
    X, y = data()
    w = as_botorch(gpr(X, y))
    with pytest.raises(ValueError, match="2 features"):
        w.posterior(torch.rand(3, 1, dtype=DT))
    with pytest.raises(ValueError, match="NaN"):
        w.posterior(torch.full((3, D), float("nan"), dtype=DT))
    with pytest.raises(ValueError, match="this model has 1 output; output_indices"):
        w.posterior(torch.rand(3, D, dtype=DT), output_indices=[1])
    with pytest.raises(ValueError, match="Y must be"):
        w.condition_on_observations(torch.rand(2, 3, D, dtype=DT), torch.rand(4, 3, 1,
                                                                              dtype=DT))
    with pytest.raises(ValueError, match="Gaussian likelihood"):
        as_botorch(sg.SVGP(X, (y > 0).to(DT), likelihood=sg.likelihoods.Bernoulli(),
                           inducing_points=5))
    with pytest.raises(ValueError, match="correlated through its mixing matrix"):
        as_botorch(sg.SGPR(X, torch.stack([y, -y], 1), mixing=torch.eye(2, dtype=DT)))
    with pytest.raises(ValueError, match="takes a model of one output"):
        as_botorch(sg.SGPR(X, torch.stack([y, -y], 1))).condition_on_observations(
            X[:1], y[:1, None])
    with pytest.raises(TypeError, match="GPR or SGPR"):
        as_botorch(svgp(X, y)).condition_on_observations(X[:1], y[:1, None])
    with pytest.raises(TypeError, match="regression model"):
        as_botorch(torch.nn.Linear(2, 1))


def test_the_posterior_is_a_gpytorch_multivariate_normal():
    w = as_botorch(gpr(*data()))
    assert isinstance(w.posterior(torch.rand(2, 3, D, dtype=DT)).distribution,
                      MultivariateNormal)


@pytest.mark.parametrize("obj", [SparseGPModel, SparseGPModel.from_data, as_botorch,
                                 set_botorch_priors])
def test_the_docstring_examples_run(obj):
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    (test,) = finder.find(obj)
    assert test.examples
    result = runner.run(test)
    assert result.failed == 0


def test_import_sparsegp_does_not_import_botorch():
    code = ("import sys, sparsegp; sparsegp.SGPR; import sparsegp.models; "
            "assert 'botorch' not in sys.modules, 'botorch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_botorch_is_named_in_the_error():
    out = import_error_without("sparsegp.botorch", "botorch")
    # sparsegp is installed from its clone, not from an index: "sparsegp[botorch]" fails
    assert 'pip install "botorch>=0.18"' in out and 'pip install ".[botorch]"' in out
    assert "sparsegp[" not in out



@pytest.mark.parametrize("build", BUILDS)
def test_a_posterior_over_a_large_candidate_set_can_be_sampled(build):
    """Thompson sampling draws joint samples over many candidates, where the predictive
    covariance is singular in floating point: sampling adds jitter instead of failing."""
    w = as_botorch(build(*data()))
    cand = torch.rand(200, D, generator=torch.Generator().manual_seed(16), dtype=DT)
    post = w.posterior(cand)
    torch.manual_seed(0)
    s = post.rsample(torch.Size([3]))
    assert s.shape == (3, 200, 1) and bool(torch.isfinite(s).all())
    # the samples follow the predictive: its mean and variance are unchanged
    mean, var = w.model.predict_f(cand)
    torch.testing.assert_close(post.mean[:, 0], mean, rtol=0, atol=1e-10)
    torch.testing.assert_close(post.variance[:, 0], var, rtol=0, atol=1e-10)
    assert float(((s[..., 0] - mean) / var.sqrt()).abs().max()) < 6.0
    picked = MaxPosteriorSampling(w, replacement=False)(cand, num_samples=5)
    assert picked.shape == (5, D)
    assert all(any(torch.equal(p, c) for c in cand) for p in picked)  # candidates, distinct
    assert torch.unique(picked, dim=0).shape[0] == 5


@pytest.mark.parametrize("d", [2, 6, 10])
@pytest.mark.parametrize("kind", ["gpr", "sgpr", "svgp"])
def test_botorch_priors_are_singletaskgps_lengthscale_prior(d, kind):
    """The prior and the starting lengthscales are those of SingleTaskGP's kernel
    (BoTorch's dimension-scaled log-normal), for data in the unit cube."""
    from botorch.models import SingleTaskGP

    g = torch.Generator().manual_seed(d)
    X = torch.rand(20, d, generator=g, dtype=DT)
    y = torch.sin(4.0 * X[:, 0])
    build = {"gpr": lambda: sg.GPR(X, y),
             "sgpr": lambda: sg.SGPR(X, y, inducing_points=8),
             "svgp": lambda: sg.SVGP(X, y, inducing_points=8)}[kind]
    model = set_botorch_priors(build())
    reference = SingleTaskGP(X, y[:, None]).covar_module
    assert [name for name, _ in model.named_priors()] == ["kernel.lengthscale"]
    start = torch.as_tensor(model.kernel.lengthscale, dtype=DT)
    torch.testing.assert_close(start, reference.lengthscale.detach()[0].to(DT), rtol=1e-6,
                               atol=0)
    at = torch.rand(d, generator=g, dtype=DT) * 3 + 0.05  # anywhere, not only at the start
    model.kernel.lengthscale = at.numpy()
    expected = reference.lengthscale_prior.log_prob(at.float()).sum().to(DT)
    torch.testing.assert_close(model.log_prior(), expected, rtol=1e-6, atol=0)


def test_the_prior_keeps_irrelevant_lengthscales_finite():
    """A MAP fit (the log prior added to the objective): the lengthscales of inputs the
    function ignores, which a maximum-likelihood fit sends towards infinity, stay two orders
    of magnitude shorter; the relevant one stays short."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(30, 6, generator=g, dtype=DT)
    y = torch.sin(6.0 * X[:, 0])
    fitted = []
    for prior in (False, True):
        model = sg.GPR(X, y)
        if prior:
            set_botorch_priors(model)
        model.noise_variance = 1e-4
        model.fit(progress=False)
        fitted.append(np.asarray(model.kernel.lengthscale))
    ml, map_ = fitted
    assert ml[0] < 1.0 and map_[0] < 1.0
    assert ml[1:].min() > 3000.0 and map_[1:].max() < 1000.0, (ml, map_)


@pytest.mark.parametrize("kind", ["gpr", "sgpr"])
def test_with_standardised_inputs_the_prior_is_carried_over_and_the_map_fit_is_the_same(kind):
    """standardize_X=True: lengthscales in each column's standard deviation s_j, the prior
    on ℓ_j / s_j: its log density is the unit cube's less log s_j (the Jacobian), its mode
    the unit cube's mode over s_j, and a MAP fit ends at the same lengthscales in the units
    of X as the model without standardisation."""
    g = torch.Generator().manual_seed(3)
    X = torch.rand(25, 3, generator=g, dtype=DT) * torch.tensor([1.0, 0.3, 0.6], dtype=DT)
    y = torch.sin(5.0 * X[:, 0]) + X[:, 1]
    build = {"gpr": sg.GPR, "sgpr": sg.SGPR}[kind]
    plain = set_botorch_priors(build(X, y))
    scaled = set_botorch_priors(build(X, y, standardize_X=True))
    s = scaled.x_scale
    torch.testing.assert_close(torch.as_tensor(scaled.kernel.lengthscale) * s,
                               torch.as_tensor(plain.kernel.lengthscale))
    at = torch.tensor([0.2, 0.7, 1.9], dtype=DT)
    plain.kernel.lengthscale, scaled.kernel.lengthscale = at.numpy(), (at / s).numpy()
    torch.testing.assert_close(scaled.log_prior(), plain.log_prior() + s.log().sum())
    fitted = []
    for model in (plain, scaled):
        model.noise_variance = 1e-3
        model.fit(tol=1e-12, progress=False)
        fitted.append(torch.as_tensor(model.kernel.lengthscale) * model.x_scale)
    torch.testing.assert_close(fitted[1], fitted[0], rtol=1e-4, atol=0)


def test_botorch_priors_refuse_what_they_do_not_fit():
    X, y = data()
    with pytest.raises(ValueError, match="each column by its own standard deviation"):
        set_botorch_priors(sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.3),
                                  standardize_X=True))
    with pytest.raises(ValueError, match=r"unit cube; this model's X spans \[-5, "):
        set_botorch_priors(sg.GPR(torch.cat([X, torch.full((1, D), -5.0, dtype=DT)]),
                                  torch.cat([y, y[:1]])))
    with pytest.raises(TypeError, match="kernel with lengthscales"):
        set_botorch_priors(sg.GPR(X, y, kernel=sg.kernels.Linear()))
    with pytest.raises(TypeError, match="sparsegp model with data"):
        set_botorch_priors(torch.nn.Linear(2, 1))
