"""Mean functions in every model: a prior mean m(x) is the zero-mean model on y − m(X).

Checks: each model with a fixed Constant(c) equals the zero-mean model on y − c (objective and
predictions); gradients in the mean's parameters against central finite differences and
independent of the chunking; a Linear mean against a dense evaluation of VFE on the residual;
Z = X with a mean equals the exact GP with that mean; persistence, freezing, the CLI and
clear errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.cli import main as cli_main

LOG2PI = np.log(2.0 * np.pi)
C = 2.5


pytestmark = pytest.mark.usefixtures("quiet_model_warnings")


def data(n=70, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 5.0, (n, 2))
    y = 3.0 + np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y, X[::9].copy()


def se():
    k = sg.kernels.SquaredExponential()
    k.lengthscale, k.variance = 1.1, 0.9
    return k


# y as given (standardize_y=False): the fixed means and kernels and the dense references
# are in the units of y
MODELS = {
    "gpr": lambda X, y, Z, **kw: sg.GPR(X, y, kernel=se(), noise_variance=0.05,
                                        standardize_y=False, **kw),
    "vfe": lambda X, y, Z, **kw: sg.SGPR(X, y, kernel=se(), inducing_points=Z,
                                         noise_variance=0.05, standardize_y=False, **kw),
    "dtc": lambda X, y, Z, **kw: sg.SGPR(X, y, kernel=se(), inducing_points=Z,
                                         approximation="dtc", noise_variance=0.05,
                                         standardize_y=False, **kw),
    "fitc": lambda X, y, Z, **kw: sg.SGPR(X, y, kernel=se(), inducing_points=Z,
                                          approximation="fitc", noise_variance=0.05,
                                          standardize_y=False, **kw),
    "pep": lambda X, y, Z, **kw: sg.SGPR(X, y, kernel=se(), inducing_points=Z,
                                         approximation="pep", alpha=0.3, noise_variance=0.05,
                                         standardize_y=False, **kw),
    "block-pep": lambda X, y, Z, **kw: sg.SGPR(X, y, kernel=se(), inducing_points=Z,
                                               approximation="pep", alpha=0.3,
                                               blocks=np.arange(len(y)) % 6,
                                               noise_variance=0.05, standardize_y=False, **kw),
    "svgp": lambda X, y, Z, **kw: sg.SVGP(X, y, kernel=se(), inducing_points=Z,
                                          standardize_y=False, **kw),
}


def latent_mean(m, Xs):
    return m.predict_f(Xs)[0]


@pytest.mark.parametrize("name", MODELS)
def test_a_constant_mean_is_the_zero_mean_model_on_shifted_targets(name):
    X, y, Z = data()
    with_mean = MODELS[name](X, y, Z, mean=sg.means.Constant(C))
    shifted = MODELS[name](X, y - C, Z)
    assert with_mean.log_marginal_likelihood() == pytest.approx(
        shifted.log_marginal_likelihood(), rel=1e-12, abs=1e-10)
    Xs = np.random.default_rng(1).uniform(0, 5, (9, 2))
    np.testing.assert_allclose(latent_mean(with_mean, Xs), latent_mean(shifted, Xs) + C,
                               rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(with_mean.predict_f(Xs)[1], shifted.predict_f(Xs)[1], rtol=1e-11)


def _loss_at(m, param, value):
    with torch.no_grad():
        param.copy_(value)
        return float(m.training_loss())


@pytest.mark.parametrize("name", MODELS)
def test_mean_gradients_equal_finite_differences(name):
    X, y, Z = data()
    kw = {"chunk_size": 13} if name not in ("gpr",) else {}
    m = MODELS[name](X, y, Z, mean=sg.means.Linear(weights=[0.3, -0.2], bias=1.0), **kw)
    m.zero_grad()
    m.training_loss().backward()
    for param in (m.mean.weights, m.mean.bias):
        grad = param.grad.detach().clone().reshape(-1)
        base = param.detach().clone()
        for i in range(base.numel()):
            h = 1e-6
            step = torch.zeros_like(base).reshape(-1)
            step[i] = h
            step = step.reshape(base.shape)
            fd = (_loss_at(m, param, base + step) - _loss_at(m, param, base - step)) / (2 * h)
            _loss_at(m, param, base)
            assert float(grad[i]) == pytest.approx(fd, rel=1e-6, abs=1e-6 * (1 + abs(fd)))


@pytest.mark.parametrize("approximation,alpha", [("vfe", None), ("fitc", None), ("pep", 0.5)])
def test_mean_gradient_does_not_depend_on_the_chunks(approximation, alpha):
    X, y, Z = data(n=90)
    grads = []
    for chunk in (None, 7, 40):
        m = sg.SGPR(X, y, kernel=se(), inducing_points=Z, approximation=approximation,
                    alpha=alpha, noise_variance=0.05, chunk_size=chunk, mean="linear")
        m.zero_grad()
        m.training_loss().backward()
        grads.append(np.r_[m.mean.weights.grad.numpy(), m.mean.bias.grad.numpy().reshape(1)])
    for g in grads[1:]:
        np.testing.assert_allclose(g, grads[0], rtol=1e-10, atol=1e-10)


def test_linear_mean_vfe_equals_a_dense_evaluation_on_the_residual():
    X, y, Z = data()
    w, b = np.array([0.4, 0.25]), 2.0
    m = MODELS["vfe"](X, y, Z, mean=sg.means.Linear(weights=w, bias=b), jitter=0.0)

    def k(A, B):
        r2 = ((A[:, None] - B[None]) ** 2).sum(-1)
        return 0.9 * np.exp(-0.5 * r2 / 1.1**2)

    r = y - X @ w - b
    Qff = k(X, Z) @ np.linalg.solve(k(Z, Z), k(Z, X))
    G = Qff + 0.05 * np.eye(len(y))
    ref = (-0.5 * len(y) * LOG2PI - 0.5 * np.linalg.slogdet(G)[1] - 0.5 * r @ np.linalg.solve(G, r)
           - 0.5 * np.trace(k(X, X) - Qff) / 0.05)
    assert m.log_marginal_likelihood() == pytest.approx(ref, rel=1e-10)


def test_inducing_at_the_data_with_a_mean_is_the_exact_gp_with_that_mean():
    X, y, _ = data(n=40)
    mean = sg.means.Linear(weights=[0.1, 0.5], bias=2.7)
    exact = MODELS["gpr"](X, y, None, mean=mean)
    for name in ("vfe", "fitc", "pep"):
        sparse = MODELS[name](X, y, X.copy(), mean=sg.means.Linear(weights=[0.1, 0.5], bias=2.7),
                              jitter=0.0)
        assert sparse.log_marginal_likelihood() == pytest.approx(
            exact.log_marginal_likelihood(), rel=1e-8)
        np.testing.assert_allclose(sparse.predict(X[:6])[0], exact.predict(X[:6])[0], rtol=1e-7)


def test_sgpc_with_a_mean_shifts_the_latent_function():
    # A Gaussian likelihood makes SGPC's Power EP exact: with sites converged, the prior mean
    # c on y equals no mean on y − c (the tilted moments must see f = c + h).
    X, y, Z = data(n=50)
    lik = sg.likelihoods.Gaussian(variance=0.05)
    a = sg.SGPC(X, y, kernel=se(), inducing_points=Z, likelihood=lik, mean=sg.means.Constant(C))
    b = sg.SGPC(X, y - C, kernel=se(), inducing_points=Z, likelihood=sg.likelihoods.Gaussian(
        variance=0.05))
    a.update_sites(tol=1e-12)
    b.update_sites(tol=1e-12)
    assert a.log_marginal_likelihood() == pytest.approx(b.log_marginal_likelihood(), rel=1e-9)
    np.testing.assert_allclose(a.predict_f(X[:5])[0], b.predict_f(X[:5])[0] + C, rtol=1e-8)


def test_classifiers_start_their_mean_at_zero_and_learn_it():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (150, 1))
    y = (rng.uniform(size=150) < 0.85).astype(float)  # mostly ones: a positive latent mean
    k = sg.kernels.SquaredExponential(lengthscale=0.5, variance=0.05)
    clf = sg.SGPC(X, y, kernel=k, inducing_points=5, mean="constant")
    clf.freeze("kernel.variance", "kernel.lengthscale")  # the mean must carry the level
    assert float(clf.mean.constant.detach()) == 0.0
    clf.fit(maxiter=5)
    # P(y = 1) ≈ 0.85 needs f ≈ Φ⁻¹(0.85) ≈ 1.04 (probit)
    assert 0.6 < float(clf.mean.constant.detach()) < 1.5


def test_a_fitted_constant_mean_finds_the_level_of_the_data():
    X, y, Z = data(n=120)
    y = y + 10.0
    # y as given: the constant mean, not the standardisation, carries the level
    m = sg.SGPR(X, y, inducing_points=10, mean="constant", standardize_y=False)
    assert float(m.mean.constant.detach()) == pytest.approx(y.mean())  # started from the data
    before = m.log_marginal_likelihood()
    m.fit(maxiter=200)
    assert m.log_marginal_likelihood() > before
    assert abs(float(m.mean.constant.detach()) - y.mean()) < 2.0


@pytest.mark.parametrize("name", ["gpr", "vfe", "svgp"])
def test_save_and_load_keep_the_mean(name, tmp_path):
    X, y, Z = data()
    mean = sg.means.Constant(1.0) + sg.means.Linear(weights=[0.2, 0.1], bias=0.5)
    m = MODELS[name](X, y, Z, mean=mean)
    path = tmp_path / "m.pt"
    m.save(path)
    back = sg.load(path)
    assert isinstance(back.mean, sg.means.Sum)
    np.testing.assert_allclose(back.predict_f(X[:7])[0], m.predict_f(X[:7])[0], rtol=1e-13)
    assert back.parameter_names() == m.parameter_names()


def test_freezing_a_mean_keeps_it_fixed():
    X, y, Z = data()
    m = sg.SGPR(X, y, inducing_points=5, mean=sg.means.Constant(1.0))
    m.freeze("mean.constant")
    m.fit(maxiter=20)
    assert float(m.mean.constant.detach()) == 1.0


def test_float32_model_with_a_mean_has_finite_gradients():
    X, y, Z = data()
    m = sg.SGPR(X.astype(np.float32), y.astype(np.float32), inducing_points=Z, mean="linear",
                approximation="fitc")
    m.training_loss().backward()
    assert np.all(np.isfinite(m.mean.weights.grad.numpy()))


@pytest.mark.parametrize("bad,error", [("quadratic", TypeError), (3.0, TypeError)])
def test_bad_mean_arguments_are_named(bad, error):
    X, y, Z = data()
    with pytest.raises(error, match="mean"):
        sg.SGPR(X, y, inducing_points=Z, mean=bad)
    with pytest.raises(ValueError, match="constant must be finite"):
        sg.means.Constant(float("nan"))


def test_cli_fit_with_a_mean_and_blocks(tmp_path, capsys):
    X, y, _ = data(n=80)
    path = tmp_path / "d.csv"
    np.savetxt(path, np.c_[X, y], delimiter=",", header="a,b,y", comments="")
    out = tmp_path / "m.pt"
    assert cli_main(["fit", str(path), "--target", "y", "-M", "8", "--mean", "constant",
                     "--approximation", "fitc", "--blocks", "4", "--maxiter", "20",
                     "--out", str(out)]) == 0
    m = sg.load(out)
    assert isinstance(m.mean, sg.means.Constant) and m.blocks is not None
    assert len(m.blocks["labels"]) == 4


def test_mean_values_are_set_like_kernel_values_and_bad_ones_are_named():
    X, y, _ = data()
    # y as given: the constant 2.0 in the units of y
    m = sg.GPR(X, y, mean="constant", standardize_y=False)
    m.predict(X[:2])  # a cached posterior, which the assignment must invalidate
    m.mean.constant = 2.0  # torch refused: "cannot assign 'float' as parameter 'constant'"
    ref = sg.GPR(X, y, mean=sg.means.Constant(2.0), standardize_y=False)
    # Two models built differently: m's starting kernel and noise variances are var(y − ȳ) (its
    # constant started at the mean), ref's var(y − 2) — equal in exact arithmetic, to ≈ 2Nε
    # (two-pass sums of N = 70 terms, whose order depends on the CPU) in floating point. The
    # evidence and the mean then agree to the rounding of a solve with K + σ²I (κ ≈ 350):
    # N·κ·ε ≈ 5e-12 relative (a stale cache's mean is off by 2e-2 to 1e-1 here).
    tol = 70 * 350 * np.finfo(np.float64).eps
    assert m.log_marginal_likelihood() == pytest.approx(ref.log_marginal_likelihood(), rel=tol)
    np.testing.assert_allclose(m.predict(X[:2])[0], ref.predict(X[:2])[0], rtol=tol, atol=0)
    lin = sg.GPR(X, y, mean="linear")
    lin.mean.weights = [0.4, -0.2]
    np.testing.assert_array_equal(lin.mean.weights.detach().numpy(), [0.4, -0.2])
    with pytest.raises(ValueError, match=r"weights must have shape \(2,\); got \(3,\)"):
        lin.mean.weights = [1.0, 2.0, 3.0]
    with pytest.raises(TypeError, match="constant must be a number; got 'a'"):
        sg.means.Constant("a")  # numpy's "could not convert string to float"
    with pytest.raises(ValueError, match=r"weights have shape \(3,\) but the inputs have 2"):
        sg.SGPR(X, y, mean=sg.means.Linear(weights=[1.0, 2.0, 3.0]), inducing_points=5)
