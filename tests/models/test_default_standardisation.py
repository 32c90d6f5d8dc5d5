"""Every regression model standardises y by default: real, unscaled data fit as well as clean
data, with no advice about the scale of y; `standardize_y=False` is the model of y as given;
everything a user reads is in the units of y (an affine change of units a·y + b changes the
predictions, the noise and the log-likelihood exactly as it should); save/load keeps the
units — SVGP's included (Gaussian likelihood)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg

from ..conftest import make_problem

REGRESSION = [sg.GPR, sg.SGPR, sg.KISSGP, sg.RFF, sg.SSGP]


def rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def fitted(cls, X, y, **kw):
    """The model fitted with its defaults, and the warnings its construction and fit gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = cls(X, y, **kw)
        m.fit()
    return m, caught


def scale_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, sg.ScaleWarning)]


def snelson_split():
    X, y = sg.datasets.snelson()
    order = np.random.default_rng(0).permutation(len(y))
    return X[order[:150]], y[order[:150]], X[order[150:]], y[order[150:]]


# -- real, unscaled data with the defaults ---------------------------------------------------
def test_sgpr_defaults_on_diabetes_are_as_good_as_the_exact_gp():
    # measured: 63.5 when y was modelled as given (zero-mean GP on targets of mean 152), worse
    # than linear regression's 56.4; standardised (GPR and SGPR alike) 56.8
    datasets = pytest.importorskip("sklearn.datasets")
    model_selection = pytest.importorskip("sklearn.model_selection")
    X, y = datasets.load_diabetes(return_X_y=True)
    Xtr, Xte, ytr, yte = model_selection.train_test_split(X, y, test_size=0.25, random_state=0)
    m, caught = fitted(sg.SGPR, Xtr, ytr)
    assert rmse(m.predict(Xte)[0], yte) <= 57.5
    assert scale_warnings(caught) == []
    assert m.noise_variance > 1000.0  # in the units of y² (var(y) ≈ 6000), not standardised


def test_snelson_far_from_zero_or_with_large_inputs_fits_like_the_clean_data():
    # measured (SGPR, M = 100): clean 0.276; y + 1e6 0.276 (was 680); X·1e6 0.310 (the
    # lengthscale starts at the inputs' spread; the softplus-parameterised optimiser then
    # barely moves it — standardize_X=True gives 0.276)
    Xtr, ytr, Xte, yte = snelson_split()
    clean, caught = fitted(sg.SGPR, Xtr, ytr)
    assert scale_warnings(caught) == []
    base = rmse(clean.predict(Xte)[0], yte)
    assert base < 0.3

    shifted, caught = fitted(sg.SGPR, Xtr, ytr + 1e6)
    assert scale_warnings(caught) == []  # standardised by default: nothing to advise
    assert rmse(shifted.predict(Xte)[0] - 1e6, yte) <= 1.5 * base
    assert shifted.log_marginal_likelihood() == pytest.approx(clean.log_marginal_likelihood(),
                                                              abs=1e-3)

    wide, caught = fitted(sg.SGPR, Xtr * 1e6, ytr)
    assert rmse(wide.predict(Xte * 1e6)[0], yte) <= 1.5 * base
    # X is taken as given by default (lengthscales in its units): the advice names the switch
    assert [w for w in scale_warnings(caught) if "standardize_X=True" in w]
    assert not [w for w in scale_warnings(caught) if "standardize_y" in w]


@pytest.mark.parametrize("cls", [sg.GPR, sg.KISSGP, sg.RFF])
def test_other_models_fit_targets_far_from_zero_like_the_clean_data(cls):
    Xtr, ytr, Xte, yte = snelson_split()
    kw = {"grid_size": 64} if cls is sg.KISSGP else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sg.ApproximationWarning)
        warnings.simplefilter("error", sg.ScaleWarning)
        clean, shifted = cls(Xtr, ytr, **kw), cls(Xtr, ytr + 1e6, **kw)
        for m in (clean, shifted):
            m.fit(maxiter=100) if cls is not sg.KISSGP else m.fit(maxiter=30, progress=False)
    base = rmse(clean.predict(Xte)[0], yte)
    assert rmse(shifted.predict(Xte)[0] - 1e6, yte) <= 1.5 * base


@pytest.mark.parametrize("cls", REGRESSION)
def test_the_defaults_give_no_scale_warning_for_y_and_standardize_y_false_names_it(cls):
    X, y = make_problem(0, N=60, D=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ScaleWarning)
        warnings.simplefilter("ignore", sg.ApproximationWarning)
        m = cls(X, 1e6 + 1e3 * y)
    assert float(m.y_shift) == pytest.approx(1e6 + 1e3 * y.mean(), rel=1e-12)
    assert float(m.y_scale) == pytest.approx(1e3 * y.std(ddof=1), rel=1e-12)
    with pytest.warns(sg.ScaleWarning, match="standardize_y=True"):
        raw = cls(X, 1e6 + 1e3 * y, standardize_y=False)
    assert float(raw.y_shift) == 0.0 and float(raw.y_scale) == 1.0


# -- standardize_y=False: the model of y as given --------------------------------------------
def test_standardize_y_false_is_the_model_of_y_as_given():
    X, y = make_problem(1, N=30)
    y = y + 5.0
    kernel = lambda: sg.kernels.SquaredExponential(lengthscale=[0.9, 1.3], variance=1.7)  # noqa: E731
    m = sg.GPR(X, y, kernel=kernel(), noise_variance=0.2, standardize_y=False)
    d2 = (((X[:, None, :] - X[None]) / np.array([0.9, 1.3])) ** 2).sum(-1)
    C = 1.7 * np.exp(-0.5 * d2) + 0.2 * np.eye(len(y))
    ref = -0.5 * (y @ np.linalg.solve(C, y) + np.linalg.slogdet(C)[1] + len(y) * np.log(2 * np.pi))
    assert m.log_marginal_likelihood() == pytest.approx(ref, rel=1e-12)
    assert m.noise_variance == pytest.approx(0.2, rel=1e-12)
    assert float(m.kernel.variance) == pytest.approx(1.7, rel=1e-12)
    # the default reads the same kernel in the units of the standardised y: another model
    std = sg.GPR(X, y, kernel=kernel(), noise_variance=0.2)
    assert std.noise_variance == pytest.approx(0.2, rel=1e-12)  # the noise is given in y's units
    assert abs(std.log_marginal_likelihood() - ref) > 1.0
    assert "internal units: y standardised" in std.summary()
    assert "internal units" not in m.summary()


# -- the units of y: an affine change a·y + b ------------------------------------------------
CASES = {
    "gpr": lambda X, y: sg.GPR(X, y),
    "vfe": lambda X, y: sg.SGPR(X, y, inducing_points=X[::6].copy()),
    "fitc-groups": lambda X, y: sg.SGPR(X, y, inducing_points=X[::6].copy(), approximation="fitc",
                                        noise_groups=(X[:, 0] > 0).astype(int)),
    "kissgp": lambda X, y: sg.KISSGP(X[:, :1], y, grid_size=32),
    "rff": lambda X, y: sg.RFF(X, y, num_features=12, seed=1),
}


@pytest.mark.parametrize("a,b", [(3.7, 1e4), (-0.02, -50.0)], ids=["scaled-shifted", "flipped"])
@pytest.mark.parametrize("name", CASES)
def test_an_affine_change_of_units_changes_what_users_read_accordingly(name, a, b):
    X, y = make_problem(2, N=48)
    Xs = np.random.default_rng(3).uniform(-2.5, 2.5, (7, 2))
    if name == "kissgp":
        Xs = Xs[:, :1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sg.ApproximationWarning)
        m, t = CASES[name](X, y), CASES[name](X, a * y + b)
    N = len(y)
    # the same model inside: its data-based start does not depend on the units of y
    assert t.log_marginal_likelihood() == pytest.approx(
        m.log_marginal_likelihood() - N * np.log(abs(a)), rel=1e-10)
    np.testing.assert_allclose(t.noise_variance, a**2 * np.asarray(m.noise_variance), rtol=1e-12)
    for full_cov in (False, True):
        for noise in (False, True):
            kw = {"noise_groups": (Xs[:, 0] > 0).astype(int)} if noise and name == "fitc-groups" else {}
            mean_m, var_m = m.predict(Xs, full_cov=full_cov, include_noise=noise, **kw)
            mean_t, var_t = t.predict(Xs, full_cov=full_cov, include_noise=noise, **kw)
            np.testing.assert_allclose(mean_t, a * mean_m + b, rtol=1e-9, atol=1e-9 * abs(b))
            np.testing.assert_allclose(var_t, a**2 * var_m, rtol=1e-8, atol=1e-12 * a**2)
    if name == "vfe":
        assert t.upper_bound() == pytest.approx(m.upper_bound() - N * np.log(abs(a)), rel=1e-10)
        rm, rt = m.diagnostics(), t.diagnostics()
        assert rt.exact == pytest.approx(rm.exact - N * np.log(abs(a)), rel=1e-10)
        assert rt.lower_bound == pytest.approx(rm.lower_bound - N * np.log(abs(a)), rel=1e-10)
        assert rt.noise_variance == pytest.approx(a**2 * rm.noise_variance, rel=1e-10)


def test_a_fit_is_the_same_fit_in_other_units():
    X, y = make_problem(4, N=80)
    a, b = 250.0, -3e3
    m = sg.SGPR(X, y, inducing_points=10)
    t = sg.SGPR(X, a * y + b, inducing_points=10)
    rm, rt = m.fit(maxiter=200, diagnose=False), t.fit(maxiter=200, diagnose=False)
    N = len(y)
    assert rt.objective == pytest.approx(rm.objective - N * np.log(a), rel=1e-6)
    assert t.log_marginal_likelihood() == pytest.approx(rt.objective, rel=1e-12)
    assert t.noise_variance == pytest.approx(a**2 * m.noise_variance, rel=1e-4)
    np.testing.assert_allclose(t.predict_y(X[:5])[0], a * m.predict_y(X[:5])[0] + b,
                               rtol=1e-5, atol=1e-5 * abs(b))


# -- save and load -----------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [sg.GPR, sg.SGPR])
def test_save_and_load_keep_the_units_of_y(cls, tmp_path):
    X, y = make_problem(5, N=50)
    m = cls(X, 40.0 * y + 700.0, **({"inducing_points": 8} if cls is sg.SGPR else {}))
    m.fit(maxiter=30, diagnose=False)
    Xs = np.random.default_rng(6).uniform(-3, 3, (6, 2))
    for include_data in (False, True):
        path = tmp_path / f"m{include_data}.pt"
        m.save(path, include_data=include_data)
        back = sg.load(path)
        assert float(back.y_shift) == float(m.y_shift) and float(back.y_scale) == float(m.y_scale)
        assert back.noise_variance == m.noise_variance
        for got, want in zip(back.predict(Xs, include_noise=True), m.predict(Xs, include_noise=True)):
            np.testing.assert_allclose(got, want, rtol=1e-12)
        if back.y is not None:
            assert back.log_marginal_likelihood() == pytest.approx(m.log_marginal_likelihood(),
                                                                   rel=1e-12)


# -- SVGP --------------------------------------------------------------------------------------
def test_other_likelihoods_refuse_standardize_y_and_take_y_as_given():
    X, y = make_problem(6, N=40)
    labels = (y > y.mean()).astype(float)
    with pytest.raises(ValueError, match="standardize_y=True applies to the Gaussian likelihood"):
        sg.SVGP(X, labels, likelihood=sg.likelihoods.Bernoulli(), inducing_points=5,
                standardize_y=True)
    for standardize_y in (None, False):
        clf = sg.SVGP(X, labels, likelihood=sg.likelihoods.Bernoulli(), inducing_points=5,
                      standardize_y=standardize_y)
        assert float(clf.y_shift) == 0.0 and float(clf.y_scale) == 1.0


def test_a_standardised_gaussian_svgp_has_the_sgpr_objective_noise_and_diagnostics():
    X, y = make_problem(7, N=60)
    y = 30.0 * y - 400.0
    sv = sg.SVGP(X, y, inducing_points=X[::6].copy())  # the default: standardised
    reg = sg.SGPR(X, y, inducing_points=X[::6].copy())
    assert float(sv.y_shift) == float(reg.y_shift) and float(sv.y_scale) == float(reg.y_scale)
    for (name, p), (_, q) in zip(sv.kernel.named_parameters(), reg.kernel.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=0, msg=name)  # the same start
    assert sv.noise_variance == pytest.approx(reg.noise_variance, rel=1e-12)
    sv.natural_gradient_step(1.0)  # the optimal q(u): the ELBO is SGPR's bound
    assert sv.log_marginal_likelihood() == pytest.approx(reg.log_marginal_likelihood(), rel=1e-10)
    assert sv.upper_bound() == pytest.approx(reg.upper_bound(), rel=1e-10)
    rs, rr = sv.diagnostics(), reg.diagnostics()
    assert rs.lower_bound == pytest.approx(rr.lower_bound, rel=1e-10)
    assert rs.exact == pytest.approx(rr.exact, rel=1e-10)
    assert rs.noise_variance == pytest.approx(rr.noise_variance, rel=1e-10)
    # a full-batch fit reports the objective in the units of y
    res = sv.fit(maxiter=20, diagnose=False)
    assert res.objective == pytest.approx(sv.log_marginal_likelihood(), rel=1e-10)
    # a given likelihood variance is in the units of y, as SGPR's noise_variance
    given = sg.SVGP(X, y, inducing_points=5, likelihood=sg.likelihoods.Gaussian(variance=90.0))
    assert given.noise_variance == pytest.approx(90.0, rel=1e-12)
    assert given.likelihood.variance == pytest.approx(90.0 / float(given.y_scale) ** 2)


def test_a_standardised_svgp_trains_on_batches_in_the_units_of_y_and_saves_its_units(tmp_path):
    X, y = make_problem(8, N=64)
    y = 1e3 + 20.0 * y
    m = sg.SVGP(X, y, inducing_points=6)
    Xb, yb = m.internal_batch(X[:10], y[:10])
    torch.testing.assert_close(yb, m.y[:10], rtol=1e-12, atol=1e-12)
    seen = []
    res = m.fit(batch_size=16, epochs=3, callback=lambda epoch, value: seen.append(value))
    offset = -len(y) * np.log(float(m.y_scale))
    assert res.history == pytest.approx(seen, rel=1e-12)  # the callback sees what is reported
    assert res.objective == pytest.approx(res.history[-1], rel=1e-12)
    assert abs(res.objective - m.log_marginal_likelihood()) < 0.2 * abs(offset)
    m.save(tmp_path / "m.pt")
    back = sg.load(tmp_path / "m.pt")
    assert float(back.y_shift) == float(m.y_shift) and float(back.y_scale) == float(m.y_scale)


def test_an_svgp_file_without_the_units_of_y_loads_as_y_as_given(tmp_path):
    X, y = make_problem(9, N=30)
    m = sg.SVGP(X, y, inducing_points=4, standardize_y=False)  # what older files hold
    path = tmp_path / "old.pt"
    m.save(path)
    payload = torch.load(path, weights_only=True)
    for name in ("y_shift", "y_scale"):  # as written before SVGP had them
        del payload["state_dict"][name]
    payload.pop("digest")  # files of that time had no digest either
    torch.save(payload, path)
    back = sg.load(path)
    assert float(back.y_shift) == 0.0 and float(back.y_scale) == 1.0
    np.testing.assert_allclose(back.predict_f(X[:4])[0], m.predict_f(X[:4])[0], rtol=1e-12)


def test_standardised_svgp_predictions_are_in_the_units_of_y():
    X, y = make_problem(10, N=60)
    a, b = 12.0, 300.0
    m, t = sg.SVGP(X, y, inducing_points=8), sg.SVGP(X, a * y + b, inducing_points=8)
    for model in (m, t):
        model.natural_gradient_step(1.0)
    Xs = X[:5]
    for full_cov in (False, True):
        mean_m, var_m = m.predict_y(Xs, full_cov=full_cov)
        mean_t, var_t = t.predict_y(Xs, full_cov=full_cov)
        np.testing.assert_allclose(mean_t, a * mean_m + b, rtol=1e-9)
        np.testing.assert_allclose(var_t, a**2 * var_m, rtol=1e-9)
    np.testing.assert_allclose(t.predict_log_density(Xs, a * y[:5] + b),
                               m.predict_log_density(Xs, y[:5]) - np.log(a), rtol=1e-9)
