"""`condition_on_observations`: a model conditioned on extra observations at fixed
hyperparameters equals the model refitted from scratch on all the data (same parameters, same
units), for the exact GP and the collapsed family; fantasies y [F, k] equal F separate
conditionings; predictions are differentiable with respect to the new inputs and targets;
the original is unchanged; bad input gets a clear error."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.models.core.conditioning import condition_on_observations as condition


def fantasies_of(model):
    return model.num_fantasies


TOL = 1e-8
N, D = 40, 2


def data(n: int = N + 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, D))
    y = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] ** 2 + 3.0 + 0.1 * rng.standard_normal(n)
    return X, y


TEST_X = np.random.default_rng(1).uniform(-2.5, 2.5, (7, D))


def gpr(X: np.ndarray, y: np.ndarray, standardize: bool, **kw) -> sg.GPR:
    m = sg.GPR(X, y, standardize_X=standardize, standardize_y=standardize, **kw)
    m.kernel.set_value("lengthscale", [0.8, 1.3])  # away from the data-based starts
    if kw.get("noise_variance") is None:
        m.noise_variance = 0.05
    return m


def sgpr(X: np.ndarray, y: np.ndarray, standardize: bool, approximation: str = "vfe",
         **kw) -> sg.SGPR:
    alpha = 0.5 if approximation == "pep" else None
    m = sg.SGPR(X, y, inducing_points=X[:12] + 0.05, approximation=approximation, alpha=alpha,
                standardize_X=standardize, standardize_y=standardize, **kw)
    m.kernel.set_value("lengthscale", [0.8, 1.3])
    if kw.get("noise_variance") is None:
        m.noise_variance = 0.05
    return m


def refit(model, X_all: np.ndarray, y_all: np.ndarray, **kw):
    """The same model class and parameters on all the data, in the original's units."""
    standardize = bool((model.x_scale != 1).any() or (model.y_scale != 1))
    if isinstance(model, sg.SGPR):
        ref = sg.SGPR(X_all, y_all, inducing_points=model.inducing_points,
                      approximation=model.approximation, alpha=model.alpha,
                      standardize_X=standardize, standardize_y=standardize, **kw)
    else:
        ref = sg.GPR(X_all, y_all, standardize_X=standardize, standardize_y=standardize, **kw)
    shapes = {k: v.shape for k, v in ref.state_dict().items()}
    # all but a noise variance per point (its shape grows: the caller sets it)
    ref.load_state_dict({k: v for k, v in model.state_dict().items()
                         if v.shape == shapes[k]}, strict=False)
    X = torch.as_tensor(X_all, dtype=torch.float64)
    y = torch.as_tensor(y_all, dtype=torch.float64)
    ref.X = (X - model.x_shift) / model.x_scale
    ref.y = (y - model.y_shift) / model.y_scale
    return ref


def predictions(model, X=TEST_X) -> tuple[np.ndarray, np.ndarray]:
    return model.predict(X, full_cov=True)


def assert_close(a, b, tol: float = TOL) -> None:
    a, b = (np.asarray(t.detach() if isinstance(t, torch.Tensor) else t) for t in (a, b))
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(1.0, float(np.abs(b).max())))


def as_input(values: np.ndarray, kind: str):
    return torch.as_tensor(values) if kind == "torch" else values


@pytest.mark.parametrize("k", [1, 5])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("standardize", [False, True])
def test_gpr_equals_refit_on_all_data(k, kind, standardize):
    X, y = data()
    m = gpr(X[:N], y[:N], standardize)
    c = condition(m, as_input(X[N:N + k], kind), as_input(y[N:N + k], kind))
    ref = refit(m, X[:N + k], y[:N + k])
    for got, want in zip(predictions(c), predictions(ref)):
        assert_close(got, want)
    assert c.num_data == N + k
    assert c.log_marginal_likelihood() == pytest.approx(ref.log_marginal_likelihood(),
                                                        abs=1e-8)


def test_gpr_jitter_is_carried_to_the_new_points():
    X, y = data()
    m = gpr(X[:N], y[:N], True, jitter=1e-3)
    c = condition(m, X[N:N + 5], y[N:N + 5])
    ref = refit(m, X[:N + 5], y[:N + 5], jitter=1e-3)
    for got, want in zip(predictions(c), predictions(ref)):
        assert_close(got, want)


@pytest.mark.parametrize("approximation", ["vfe", "dtc", "fitc", "pep"])
@pytest.mark.parametrize("k", [1, 5])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("standardize", [False, True])
def test_sgpr_equals_refit_on_all_data(approximation, k, kind, standardize):
    X, y = data()
    m = sgpr(X[:N], y[:N], standardize, approximation)
    c = condition(m, as_input(X[N:N + k], kind), as_input(y[N:N + k], kind))
    ref = refit(m, X[:N + k], y[:N + k])
    for got, want in zip(predictions(c), predictions(ref)):
        assert_close(got, want)
    assert c.log_marginal_likelihood() == pytest.approx(ref.log_marginal_likelihood(),
                                                        abs=1e-8)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_sgpr_vfe_torch_and_numpy_inputs_agree(kind):
    X, y = data()
    m = sgpr(X[:N], y[:N], True)
    c = condition(m, as_input(X[N:N + 5], kind), as_input(y[N:N + 5], kind))
    ref = refit(m, X[:N + 5], y[:N + 5])
    for got, want in zip(c.predict(torch.as_tensor(TEST_X), full_cov=True), predictions(ref)):
        assert isinstance(got, torch.Tensor)
        assert_close(got, want)


@pytest.mark.parametrize("build", [gpr, sgpr])
def test_prior_mean_and_chained_conditioning_equal_refit(build):
    X, y = data()
    m = build(X[:N], y[:N], True, mean=sg.means.Linear(weights=[0.3, -0.2], bias=0.5))
    c = condition(condition(m, X[N:N + 3], y[N:N + 3]), X[N + 3:N + 8], y[N + 3:N + 8])
    ref = refit(m, X, y, mean=sg.means.Linear(weights=[0.3, -0.2], bias=0.5))
    for got, want in zip(predictions(c), predictions(ref)):
        assert_close(got, want)


@pytest.mark.parametrize("build", [gpr, sgpr, functools.partial(sgpr, approximation="fitc")])
def test_known_noise_per_point(build):
    X, y = data()
    noise = np.linspace(0.02, 0.2, N + 5)
    m = build(X[:N], y[:N], False, noise_variance=noise[:N])
    c = condition(m, X[N:N + 5], y[N:N + 5], noise=noise[N:])
    ref = refit(m, X[:N + 5], y[:N + 5], noise_variance=noise)
    ref.noise_variance = noise
    for got, want in zip(predictions(c), predictions(ref)):
        assert_close(got, want)
    np.testing.assert_allclose(c.noise_variance, noise, rtol=1e-12)
    with pytest.raises(ValueError, match="noise variance is known per point"):
        condition(m, X[N:N + 5], y[N:N + 5])


@pytest.mark.parametrize("build", [gpr, sgpr])
@pytest.mark.parametrize("k", [1, 5])
def test_fantasies_equal_separate_conditionings(build, k):
    X, y = data()
    m = build(X[:N], y[:N], True)
    Y = y[N:N + k] + np.random.default_rng(2).standard_normal((4, k))
    batch = condition(m, X[N:N + k], Y)
    assert fantasies_of(batch) == 4 and fantasies_of(m) is None
    mean, cov = predictions(batch)
    mean_d, var_d = batch.predict(TEST_X)
    assert mean.shape == (7, 4) and cov.shape == (4, 7, 7) and var_d.shape == (7, 4)
    for f in range(4):
        one_mean, one_cov = predictions(condition(m, X[N:N + k], Y[f]))
        assert_close(mean[:, f], one_mean)
        assert_close(cov[f], one_cov)
        assert_close(var_d[:, f], np.diagonal(one_cov))
    dist = batch.predictive(TEST_X, full_cov=True)
    assert tuple(dist.batch_shape) == (4,) and tuple(dist.event_shape) == (7,)
    # conditioned again: one new set per fantasy, or one for all
    more = condition(batch, X[N + 5:N + 7], y[N + 5:N + 7])
    one = condition(condition(m, X[N:N + k], Y[2]), X[N + 5:N + 7], y[N + 5:N + 7])
    assert_close(predictions(more)[0][:, 2], predictions(one)[0])


@pytest.mark.parametrize("build", [gpr, sgpr])
def test_one_fantasy_keeps_its_dimension(build):
    X, y = data()
    m = build(X[:N], y[:N], False)
    one = condition(m, X[N:N + 2], y[None, N:N + 2])
    mean, var = one.predict(TEST_X)
    assert mean.shape == var.shape == (7, 1)
    assert_close(mean[:, 0], condition(m, X[N:N + 2], y[N:N + 2]).predict(TEST_X)[0])
    assert one.predict(TEST_X, full_cov=True)[1].shape == (1, 7, 7)


def finite_difference(f, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    g = torch.zeros_like(x)
    flat = g.view(-1)
    for i in range(x.numel()):
        step = torch.zeros_like(x).view(-1)
        step[i] = eps
        step = step.view_as(x)
        flat[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return g


@pytest.mark.parametrize("build", [gpr, sgpr])
@pytest.mark.parametrize("fantasies", [False, True])
def test_gradients_reach_the_new_inputs_and_targets(build, fantasies):
    X, y = data()
    m = build(X[:N], y[:N], True)
    Xt = torch.as_tensor(TEST_X)
    y_new = torch.as_tensor(y[N:N + 3])
    if fantasies:
        y_new = y_new + torch.as_tensor(np.random.default_rng(3).standard_normal((2, 3)))

    def value(x_new: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        mean, cov = condition(m, x_new, targets).predict(Xt, full_cov=True)
        return mean.sum() + (cov * cov).sum()

    x0 = torch.as_tensor(X[N:N + 3]).clone().requires_grad_(True)
    t0 = y_new.clone().requires_grad_(True)
    value(x0, t0).backward()
    with torch.no_grad():
        gx = finite_difference(lambda x: value(x, y_new), x0.detach())
        gy = finite_difference(lambda t: value(x0.detach(), t), y_new)
    assert float(gx.abs().max()) > 1e-3
    np.testing.assert_allclose(x0.grad, gx, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t0.grad, gy, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("build", [gpr, sgpr])
def test_the_original_is_unchanged(build):
    X, y = data()
    m = build(X[:N], y[:N], True)
    before = predictions(m)
    state = {k: v.clone() for k, v in m.state_dict().items()}
    X0, y0 = m.X.clone(), m.y.clone()
    trainable = [p.requires_grad for p in m.parameters()]
    c = condition(m, torch.as_tensor(X[N:N + 5]).requires_grad_(True), y[N:N + 5])
    condition(m, X[N:N + 2], np.zeros((3, 2)))
    assert c.kernel is not m.kernel
    for got, want in zip(predictions(m), before):
        np.testing.assert_array_equal(got, want)
    for k, v in m.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert torch.equal(m.X, X0) and torch.equal(m.y, y0) and m.num_data == N
    assert [p.requires_grad for p in m.parameters()] == trainable


@pytest.mark.parametrize("build", [gpr, sgpr])
def test_the_updated_posterior_is_the_cached_one(build, monkeypatch):
    X, y = data()
    m = build(X[:N], y[:N], True)
    m.posterior()
    c = condition(m, X[N:N + 5], y[N:N + 5])
    fantasies = condition(m, X[N:N + 5], np.zeros((3, 5)))

    def rebuild() -> None:
        raise AssertionError("the posterior was rebuilt from scratch")

    for model in (c, fantasies):
        monkeypatch.setattr(model, "_build_posterior", rebuild)
        model.predict(TEST_X)
        model.predict(torch.as_tensor(TEST_X).requires_grad_(True))  # tensor predictions too
        model.predict_y(TEST_X, full_cov=True)
    # a changed parameter rebuilds it from all N + k points (unfrozen to train)
    monkeypatch.undo()
    c.noise_variance = 0.07
    ref = refit(m, X[:N + 5], y[:N + 5])
    ref.noise_variance = 0.07
    for got, want in zip(predictions(c), predictions(ref)):
        assert_close(got, want)


@pytest.mark.parametrize("build", [gpr, sgpr])
def test_a_conditioned_model_saves_and_loads(build, tmp_path):
    X, y = data()
    c = condition(condition(build(X[:N], y[:N], True), X[N:N + 3], y[N:N + 3]),
                  X[N + 3:N + 5], y[N + 3:N + 5])
    c.save(tmp_path / "c.pt")
    loaded = sg.load(tmp_path / "c.pt")
    for got, want in zip(predictions(loaded), predictions(c)):
        assert_close(got, want, 1e-12)
    assert loaded.num_data == N + 5


def test_fantasy_models_hold_no_single_data_set():
    X, y = data()
    batch = condition(gpr(X[:N], y[:N], True), X[N:N + 2], np.zeros((3, 2)))
    with pytest.raises(RuntimeError, match="without its training data"):
        batch.log_marginal_likelihood()
    batch.noise_variance = 0.2
    with pytest.raises(RuntimeError, match="changed since it was conditioned"):
        condition(batch, X[N:N + 2], np.zeros((3, 2)))


@pytest.mark.parametrize("build", [gpr, sgpr])
def test_bad_input_gets_a_clear_error(build):
    X, y = data()
    m = build(X[:N], y[:N], True)
    Xn, yn = X[N:N + 3], y[N:N + 3]
    with pytest.raises(ValueError, match=r"y must be \[k\] or \[F, k\].*k = 3"):
        condition(m, Xn, y[N:N + 4])
    with pytest.raises(ValueError, match=r"y must be \[k\] or \[F, k\]"):
        condition(m, Xn, np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match="columns"):
        condition(m, X[N:N + 3, :1], yn)
    bad = yn.copy()
    bad[1] = np.nan
    with pytest.raises(ValueError, match="y"):
        condition(m, Xn, bad)
    with pytest.raises(ValueError, match="X"):
        condition(m, np.where(np.eye(3, D) > 0, np.inf, Xn), yn)
    with pytest.raises(ValueError, match="one noise variance"):
        condition(m, Xn, yn, noise=0.1)
    batch = condition(m, Xn, np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"holds 4 fantasies"):
        condition(batch, Xn, np.zeros((2, 3)))


def test_a_model_loaded_without_data_says_so(tmp_path):
    X, y = data()
    m = sgpr(X[:N], y[:N], True)
    m.save(tmp_path / "m.pt")  # a sparse model is saved without its data by default
    loaded = sg.load(tmp_path / "m.pt")
    with pytest.raises(RuntimeError, match="without its training data"):
        condition(loaded, X[N:N + 2], y[N:N + 2])


def test_models_without_an_update_are_refused():
    X, y = data()
    Y = np.stack([y, -y], 1)[:N]
    with pytest.raises(ValueError, match="one output"):
        condition(sg.SGPR(X[:N], Y, inducing_points=8), X[N:N + 2], y[N:N + 2])
    blocks = np.arange(N) % 4
    pitc = sg.SGPR(X[:N], y[:N], inducing_points=8, approximation="fitc", blocks=blocks)
    with pytest.raises(ValueError, match="block"):
        condition(pitc, X[N:N + 2], y[N:N + 2])
    grouped = sg.GPR(X[:N], y[:N], noise_groups=np.arange(N) % 2)
    with pytest.raises(ValueError, match="noise_groups"):
        condition(grouped, X[N:N + 2], y[N:N + 2])
    with pytest.raises(TypeError, match="GPR or SGPR"):
        condition(sg.SVGP(X[:N], y[:N], inducing_points=8), X[N:N + 2], y[N:N + 2])


def test_the_models_have_the_method():
    assert hasattr(sg.GPR, "condition_on_observations")
    assert hasattr(sg.SGPR, "condition_on_observations")


@pytest.mark.parametrize("build", [gpr, sgpr])
def test_fantasies_with_known_noise_per_point_predict_noisy_y(build):
    # noise [N*] of the new points is added to every fantasy's column of variances
    X, y = data()
    noise = np.linspace(0.02, 0.2, N + 2)
    m = build(X[:N], y[:N], False, noise_variance=noise[:N])
    Y = y[N:N + 2] + np.random.default_rng(4).standard_normal((3, 2))
    batch = condition(m, X[N:N + 2], Y, noise=noise[N:])
    new_noise = np.full(TEST_X.shape[0], 0.05)
    mean, var = batch.predict(TEST_X, include_noise=True, noise_variance=new_noise)
    latent = batch.predict(TEST_X)[1]
    assert var.shape == (TEST_X.shape[0], 3)
    np.testing.assert_allclose(var - latent, np.broadcast_to(new_noise[:, None], var.shape),
                               rtol=1e-10)


def test_pathwise_samples_of_a_fantasy_model_are_refused_clearly():
    X, y = data()
    m = gpr(X[:N], y[:N], True)
    batch = condition(m, X[N:N + 2], np.zeros((3, 2)))
    with pytest.raises(ValueError, match="fantas"):
        batch.pathwise_samples(2)


@pytest.mark.parametrize("build", [gpr, sgpr])
def test_one_known_noise_variance_serves_every_new_point(build):
    # noise= "a number or [k]": a number is every new point's noise variance
    X, y = data()
    noise = np.full(N + 3, 0.05)
    m = build(X[:N], y[:N], False, noise_variance=noise[:N])
    one = condition(m, X[N:N + 3], y[N:N + 3], noise=0.05)
    each = condition(m, X[N:N + 3], y[N:N + 3], noise=noise[N:])
    for a, b in zip(predictions(one), predictions(each)):
        assert_close(a, b)
    with pytest.raises(ValueError, match="a positive number or 3 of them"):
        condition(m, X[N:N + 3], y[N:N + 3], noise=[0.05, 0.05])
