"""sg.KISSGP against a dense evaluation of the same interpolated model, the exact GP on
Snelson, unbiased gradients, LOVE variances, save/load and bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.objectives.exact import exact_log_marginal_likelihood
from sparsegp.structured.grid import interpolate, kuu_matmul


def _model(**kw):
    # y as given: the dense references below work on the raw targets
    X, y = sg.datasets.snelson()
    kernel = sg.kernels.SquaredExponential(lengthscale=0.6, variance=0.8)
    return sg.KISSGP(X, y, kernel=kernel, grid_size=kw.pop("grid_size", 80),
                     noise_variance=0.08, standardize_y=False, **kw)


def _dense(m, Xs=None):
    """K̃ = W K_UU Wᵀ of the model and, for test inputs, W* K_UU Wᵀ and diag(W* K_UU W*ᵀ)."""
    g = m.grid()
    kuu = kuu_matmul(m.kernel, m.grid_spacing, m.sizes)
    W = g.W.to_dense()
    K = W @ kuu(W.mT)
    if Xs is None:
        return K
    Ws = interpolate(torch.as_tensor(Xs), m.grid_start, m.grid_spacing, m.sizes).W.to_dense()
    return K, Ws @ kuu(W.mT), torch.diagonal(Ws @ kuu(Ws.mT))


def test_a_full_rank_preconditioner_gives_the_dense_evidence_exactly():
    m = _model(preconditioner_rank=200)
    with torch.no_grad():
        dense = exact_log_marginal_likelihood(_dense(m), m.y, m.value("noise_variance"))
    assert m.log_marginal_likelihood() == pytest.approx(float(dense), abs=1e-6)


def test_the_default_estimate_is_close_to_the_dense_evidence():
    m = _model()
    with torch.no_grad():
        dense = float(exact_log_marginal_likelihood(_dense(m), m.y, m.value("noise_variance")))
    assert abs(m.log_marginal_likelihood() - dense) < 0.1  # measured: 0.01 nats


def test_gradient_estimates_are_unbiased():
    # the mean over 60 independent probe sets within 4 standard errors of the dense gradient
    m = _model(num_probes=5)
    params = [p for p in m.parameters() if p.requires_grad]
    dense = torch.autograd.grad(-exact_log_marginal_likelihood(
        _dense(m), m.y, m.value("noise_variance")), params)
    draws = torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(
        m.training_loss(step), params)]) for step in range(60)])
    mean, se = draws.mean(0), draws.std(0) / np.sqrt(60)
    ref = torch.cat([g.reshape(-1) for g in dense])
    assert torch.all((mean - ref).abs() < 4 * se + 1e-6)


def test_predictions_equal_the_dense_interpolated_model_and_love_is_conservative():
    m = _model(lanczos_rank=200, cg_tolerance=1e-10)
    Xs = np.linspace(-0.3, 6.3, 25)[:, None]
    with torch.no_grad():
        K, Ksx, kss = _dense(m, Xs)
        A = K + m.value("noise_variance") * torch.eye(200, dtype=torch.float64)
        mean = Ksx @ torch.linalg.solve(A, m.y)
        var = kss - (Ksx * torch.linalg.solve(A, Ksx.mT).mT).sum(1)
    got_mean, got_var = m.predict(Xs)
    np.testing.assert_allclose(got_mean, mean.numpy(), atol=1e-7)
    np.testing.assert_allclose(got_var, var.numpy(), atol=1e-7)
    low = _model(lanczos_rank=15)
    _, low_var = low.predict(Xs)
    assert np.all(low_var >= var.numpy() - 1e-9)  # a Krylov subspace never over-reduces


def test_fitted_kissgp_matches_the_exact_gp_on_snelson():
    X, y = sg.datasets.snelson()
    m = sg.KISSGP(X, y, grid_size=100)
    result = m.fit(maxiter=200, progress=False)
    assert result.success and len(result.history) == 200
    exact = sg.GPR(X, y)
    exact.fit()
    # measured: −55.94 against −55.90 for the fitted exact GP
    assert abs(m.log_marginal_likelihood() - exact.log_marginal_likelihood()) < 1.0
    Xs = np.linspace(0.2, 5.8, 30)[:, None]
    np.testing.assert_allclose(m.predict(Xs)[0], exact.predict(Xs)[0], atol=0.05)
    report = m.diagnostics()
    assert report.exact is not None and "stochastic estimate" in str(report)


def test_two_and_three_inputs():
    rng = np.random.default_rng(0)
    for D in (2, 3):
        X = rng.uniform(-2, 2, (150, D))
        y = np.sin(X).sum(1) + 0.1 * rng.standard_normal(150)
        m = sg.KISSGP(X, y, grid_size=16, kernel=sg.kernels.SquaredExponential(
            lengthscale=np.ones(D)), noise_variance=0.01, preconditioner_rank=150,
            standardize_y=False)
        with torch.no_grad():
            dense = exact_log_marginal_likelihood(_dense(m), m.y, m.value("noise_variance"))
        assert m.log_marginal_likelihood() == pytest.approx(float(dense), abs=1e-5)


def test_save_and_load_round_trip(tmp_path):
    m = _model()
    Xs = np.linspace(0.0, 6.0, 9)[:, None]
    before = m.predict(Xs)
    m.save(tmp_path / "ski.pt")
    loaded = sg.load(tmp_path / "ski.pt")
    for a, b in zip(before, loaded.predict(Xs)):
        np.testing.assert_array_equal(a, b)


def test_bad_input_is_named():
    X, y = sg.datasets.snelson()
    with pytest.raises(ValueError, match="at most 3"):
        sg.KISSGP(np.random.default_rng(0).uniform(size=(20, 4)), np.zeros(20))
    with pytest.raises(TypeError, match="stationary radial kernel"):
        sg.KISSGP(X, y, kernel=sg.kernels.Linear())
    with pytest.raises(ValueError, match="grid_size must be an integer"):
        sg.KISSGP(X, y, grid_size=4)
    m = _model()
    with pytest.raises(ValueError, match="beyond the interpolation grid"):
        m.predict(np.array([[20.0]]))


def test_command_line_fit_and_predict(tmp_path, capsys):
    from sparsegp.cli import main

    X, y = sg.datasets.snelson()
    path = tmp_path / "d.csv"
    np.savetxt(path, np.c_[X, y], delimiter=",", header="x,y", comments="")
    out = tmp_path / "m.pt"
    assert main(["fit", str(path), "--target", "y", "--approximation", "ski", "-M", "50",
                 "--maxiter", "20", "--out", str(out)]) == 0
    assert "stochastic estimate" in capsys.readouterr().out
    model = sg.load(out)
    assert type(model).__name__ == "KISSGP" and model.sizes == [50]
    assert main(["predict", str(out), str(path), "--out", str(tmp_path / "p.csv")]) == 0
    pred = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(pred[:, 0], model.predict(X)[0], rtol=1e-10)


def test_a_fitted_kissgp_deep_copies_and_pickles():
    import copy
    import pickle

    X, y = sg.datasets.snelson()
    model = sg.KISSGP(X, y)
    model.fit(maxiter=3)  # builds the grid cache (sparse CSR: copy.deepcopy failed on it)
    mean = model.predict(X[:4])[0]
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        np.testing.assert_array_equal(other.predict(X[:4])[0], mean)
        assert other.fit(maxiter=2).iterations == 2


def _wavy(N=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 5, (N, 1))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(N)


def test_a_grid_too_coarse_for_the_lengthscale_is_named_with_the_size_that_would_do():
    X, y = _wavy()
    kernel = lambda: sg.kernels.SquaredExponential(lengthscale=0.7, variance=1.2)  # noqa: E731
    exact = sg.GPR(X, y, kernel=kernel(), noise_variance=0.01).log_marginal_likelihood()
    with pytest.warns(sg.ApproximationWarning, match=r"1\.7 lengthscales.*grid_size ≥ 32"):
        coarse = sg.KISSGP(X, y, kernel=kernel(), grid_size=10, noise_variance=0.01)
    rep = coarse.diagnostics()
    assert rep.objective < exact - 100  # what the warning is about: −491 nats measured
    assert any("grid_size ≥ 32" in w for w in rep.warnings)
    assert any("beyond the estimate's noise" in w for w in rep.warnings)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ApproximationWarning)
        fine = sg.KISSGP(X, y, kernel=kernel(), grid_size=32, noise_variance=0.01)
    rep = fine.diagnostics()
    assert abs(rep.objective - exact) < 2 and len(rep.warnings) == 1  # "not a bound" only


def test_a_fit_that_shortens_the_lengthscale_below_the_grid_warns():
    X, y = _wavy()
    m = sg.KISSGP(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=1.0), grid_size=32)

    def shorten(i, objective):  # as a fit that found short-scale structure would
        if i == 2:
            m.kernel.lengthscale = 0.1

    with pytest.warns(sg.ApproximationWarning, match="grid spacing in input 0"):
        m.fit(maxiter=3, callback=shorten, progress=False)


def test_matern12_interpolation_error_is_flagged_against_the_exact_evidence():
    X, y = _wavy()
    m = sg.KISSGP(X, y, kernel=sg.kernels.Matern12(lengthscale=0.7, variance=1.2), grid_size=64,
                  noise_variance=0.01)
    rep = m.diagnostics()
    assert not m.grid_problems()  # a fine grid, yet the kink is interpolated badly (+70 nats)
    assert any("Matérn-1/2's kink" in w for w in rep.warnings)
