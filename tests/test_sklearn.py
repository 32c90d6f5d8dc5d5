"""The scikit-learn estimators: scikit-learn's own estimator checks, model selection, and
equality with the sparsegp models they wrap."""

import importlib
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="scikit-learn is an optional extra: pip install '.[sklearn]'")

from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import sparsegp as sg  # noqa: E402
from sparsegp.sklearn import SparseGPClassifier, SparseGPRegressor  # noqa: E402

from .conftest import import_error_without  # noqa: E402


def _binary(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    return X, (np.sin(X[:, 0]) + 0.3 * rng.normal(size=n) > 0).astype(int)


def _three_classes(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    return X, np.digitize(X[:, 0] + 0.3 * rng.normal(size=n), [-1.0, 1.0])


def _checks():
    """sklearn's estimator checks, less its array-API input check: that one tests support for
    array-API namespaces (which these estimators do not claim) and skips itself unless
    SCIPY_ARRAY_API is set."""
    decorator = parametrize_with_checks([
        SparseGPRegressor(num_inducing=10, maxiter=20),
        SparseGPRegressor(num_inducing=10, maxiter=0),  # fixed hyperparameters
        SparseGPClassifier(num_inducing=10, maxiter=1),
        SparseGPClassifier(approximation="svgp", num_inducing=10, maxiter=5),
    ])
    names, values = decorator.args[0], decorator.args[1]
    ids = decorator.kwargs.get("ids")
    keep = [i for i, (_, check) in enumerate(values)
            if "check_array_api_input" not in str(getattr(check, "func", check))]
    return pytest.mark.parametrize(names, [values[i] for i in keep],
                                   ids=None if ids is None else (
                                       [ids[i] for i in keep] if not callable(ids) else ids))


# Small M and few iterations keep the ~50 checks per estimator fast; the Power-EP classifier
# runs one round of site sweeps and L-BFGS-B. No check is skipped or expected to fail.
@_checks()
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# -- the same numbers as the wrapped models ---------------------------------------------------
@pytest.mark.parametrize("approximation, alpha", [("vfe", None), ("fitc", None), ("pep", 0.5)])
def test_regressor_equals_sgpr(approximation, alpha):
    X, y = sg.datasets.snelson()
    X, y = X[::4], y[::4]
    est = SparseGPRegressor(approximation=approximation, alpha=alpha, num_inducing=8, maxiter=100,
                            random_state=0).fit(X, y)
    model = sg.SGPR(X, y, inducing_points=8, approximation=approximation, alpha=alpha, seed=0,
                    standardize_X=True, standardize_y=True)
    model.fit(maxiter=100, diagnose=False)
    Xnew = np.linspace(-1, 7, 30)[:, None]
    mean, var_y = model.predict(Xnew, include_noise=True)
    _, var_f = model.predict(Xnew)
    np.testing.assert_allclose(est.predict(Xnew), mean, rtol=1e-10, atol=1e-12)
    # return_std is that of noisy y* (as scikit-learn's GPR with a WhiteKernel); the latent on request
    np.testing.assert_allclose(est.predict(Xnew, return_std=True)[1], np.sqrt(var_y), rtol=1e-10)
    np.testing.assert_allclose(est.predict(Xnew, return_std=True, include_noise=False)[1],
                               np.sqrt(var_f), rtol=1e-10)
    _, cov = est.predict(Xnew, return_cov=True)
    np.testing.assert_allclose(np.diag(cov), var_y, rtol=1e-8)
    assert est.log_marginal_likelihood_value_ == pytest.approx(model.log_marginal_likelihood(),
                                                               rel=1e-10)
    assert isinstance(est.model_, sg.SGPR) and est.model_.approximation == approximation
    assert est.score(X, y) > 0.8


def test_regressor_exact_is_gpr_and_never_touches_the_users_kernel():
    X, y = sg.datasets.snelson()
    X, y = X[::4], y[::4]
    kernel = sg.kernels.SquaredExponential(lengthscale=0.7, variance=1.3)
    mean = sg.means.Constant()
    est = SparseGPRegressor(approximation="exact", kernel=kernel, mean=mean, maxiter=100).fit(X, y)
    model = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.7, variance=1.3),
                   mean=sg.means.Constant(), standardize_X=True, standardize_y=True)
    model.fit(maxiter=100, diagnose=False)
    np.testing.assert_allclose(est.predict(X), model.predict(X)[0], rtol=1e-10, atol=1e-12)
    assert isinstance(est.model_, sg.GPR)
    assert est.kernel is kernel and est.model_.kernel is not kernel
    assert float(kernel.lengthscale) == 0.7 and float(kernel.variance) == 1.3  # not fitted
    assert est.model_.kernel.lengthscale != pytest.approx(0.7)
    assert est.mean is mean and est.model_.mean is not mean


def test_binary_classifier_equals_sgpc_and_handles_label_values():
    X, y01 = _binary()
    model = sg.SGPC(X, y01, inducing_points=8, alpha=0.5, seed=0, standardize_X=True)
    model.fit(maxiter=1)
    p1 = model.predict_proba(X)
    for labels in (y01, 2 * y01 - 1, np.array(["no", "yes"])[y01]):
        est = SparseGPClassifier(num_inducing=8, maxiter=1, random_state=0).fit(X, labels)
        assert isinstance(est.model_, sg.SGPC)
        np.testing.assert_array_equal(est.classes_, np.unique(labels))
        np.testing.assert_allclose(est.predict_proba(X), np.column_stack([1 - p1, p1]), rtol=1e-10)
        np.testing.assert_array_equal(est.predict(X), est.classes_[(p1 > 0.5).astype(int)])
        assert est.score(X, labels) > 0.8


def test_multiclass_classifier_is_an_svgp_with_one_latent_per_class():
    X, y = _three_classes()
    labels = np.array(["a", "b", "c"])[y]
    est = SparseGPClassifier(num_inducing=10, maxiter=100, random_state=0).fit(X, labels)
    assert isinstance(est.model_, sg.SVGP) and est.model_.num_latent == 3
    np.testing.assert_array_equal(est.classes_, ["a", "b", "c"])
    p = est.predict_proba(X)
    assert p.shape == (60, 3) and np.allclose(p.sum(1), 1.0)
    raw = est.model_.predict_proba(X)  # robust-max by quadrature: sums within ~1e-4 of 1
    np.testing.assert_allclose(p, raw / raw.sum(1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(p, raw, atol=1e-3)
    assert est.score(X, labels) > 0.8
    with pytest.raises(ValueError, match="approximation='svgp'"):
        SparseGPClassifier(approximation="pep", num_inducing=10).fit(X, labels)
    with pytest.raises(ValueError, match="at least 2 classes"):
        SparseGPClassifier(num_inducing=5).fit(X, np.zeros(60))


# -- scikit-learn's model selection ------------------------------------------------------------
def test_pipeline_grid_search_and_cross_validation():
    X, y = sg.datasets.snelson()
    X, y = X[::2], y[::2]
    pipe = make_pipeline(StandardScaler(), SparseGPRegressor(standardize=False, maxiter=50,
                                                             random_state=0))
    grid = GridSearchCV(pipe, {"sparsegpregressor__num_inducing": [2, 10],
                               "sparsegpregressor__approximation": ["vfe", "pep"],
                               "sparsegpregressor__alpha": [0.5]}, cv=3)
    grid.fit(X, y)
    assert grid.best_params_["sparsegpregressor__num_inducing"] == 10  # 2 cannot fit the sine
    assert grid.best_estimator_[-1].model_.num_inducing == 10
    scores = cross_val_score(SparseGPRegressor(num_inducing=10, maxiter=50, random_state=0), X, y, cv=3)
    assert scores.shape == (3,) and scores.min() > 0.5


def test_dataframe_feature_names():
    pd = pytest.importorskip("pandas")
    X, y = _binary()
    frame = pd.DataFrame(X, columns=["height", "weight"])
    est = SparseGPClassifier(approximation="svgp", num_inducing=5, maxiter=5).fit(frame, y)
    np.testing.assert_array_equal(est.feature_names_in_, ["height", "weight"])
    assert est.n_features_in_ == 2
    assert est.model_.feature_names == ["height", "weight"]  # summary() lists them (was None)
    reg = SparseGPRegressor(num_inducing=5, maxiter=5).fit(frame, y)
    assert reg.model_.feature_names == ["height", "weight"] and "height" in reg.model_.summary()


@pytest.mark.parametrize("make", [
    lambda: (SparseGPRegressor(num_inducing=8, maxiter=30, random_state=1), *sg.datasets.snelson()),
    lambda: (SparseGPClassifier(num_inducing=8, maxiter=1, random_state=1), *_binary()),
    lambda: (SparseGPClassifier(num_inducing=8, maxiter=20, random_state=1), *_three_classes()),
])
def test_pickle_round_trip_predicts_identically(make):
    est, X, y = make()
    est.fit(X, y)
    before = est.predict_proba(X) if hasattr(est, "classes_") else est.predict(X, return_std=True)
    again = pickle.loads(pickle.dumps(est))
    after = again.predict_proba(X) if hasattr(est, "classes_") else again.predict(X, return_std=True)
    np.testing.assert_array_equal(np.asarray(after), np.asarray(before))
    assert again.get_params() == {**est.get_params()}


def test_library_warnings_are_collected_not_raised():
    X, y = sg.datasets.snelson()
    est = SparseGPRegressor(approximation="fitc", num_inducing=8, random_state=0, maxiter=300)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X[::2], y[::2])  # docs/models/sklearn.md: FITC with 8 inducing inputs trips the diagnostics
    assert not [w for w in caught if issubclass(w.category, (sg.ApproximationWarning, sg.ScaleWarning))]
    assert any("FITC" in message or "upper bound" in message for message in est.fit_warnings_)


def test_random_state_seeds_the_inducing_inputs():
    X, y = sg.datasets.snelson()
    Z = [SparseGPRegressor(num_inducing=5, maxiter=1, random_state=s).fit(X, y).model_.inducing_points
         for s in (0, 0, np.random.RandomState(3), 7)]
    np.testing.assert_array_equal(Z[0], Z[1])
    assert not np.array_equal(Z[0], Z[3])


# -- scikit-learn stays optional ------------------------------------------------------------------
def test_importing_sparsegp_does_not_import_sklearn():
    code = "import sys, sparsegp; assert 'sklearn' not in sys.modules, 'sklearn imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_sklearn_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it now fails
    monkeypatch.delitem(sys.modules, "sparsegp.sklearn")
    with pytest.raises(ImportError, match=r'pip install "scikit-learn>=1.3"'):
        importlib.import_module("sparsegp.sklearn")


def test_num_inducing_is_capped_at_the_distinct_inputs():
    rng = np.random.default_rng(0)
    X = np.repeat([[0.0], [1.0], [2.0], [4.0]], 10, axis=0)  # repeated measurements
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)
    reg = SparseGPRegressor(num_inducing=20, maxiter=5).fit(X, y)
    clf = SparseGPClassifier(num_inducing=20, maxiter=1).fit(X, y > 0.5)
    assert reg.model_.num_inducing == clf.model_.num_inducing == 4


@pytest.mark.parametrize("estimator, message", [
    # fitted, then every predict failed: "predicting noisy y* needs the noise of the new points"
    (SparseGPRegressor(noise_variance=[0.1] * 30), "noise_variance must be one number"),
    (SparseGPRegressor(approximation="foo"), "must be one of vfe, fitc, dtc, pep or exact"),
    (SparseGPClassifier(link="sigmoid"), "link must be None, 'probit', 'logit', 'softmax' "
                                         "or 'robustmax'; got 'sigmoid'"),
])
def test_wrapper_options_that_cannot_work_are_named_at_fit(estimator, message):
    X, y = _binary(30)
    with pytest.raises(ValueError, match=message):
        estimator.fit(X, y if isinstance(estimator, SparseGPClassifier) else X[:, 0])


def test_classifier_link_and_approximation_names_for_several_classes():
    """A link names a family that serves two classes and more (one estimator for both, as
    scikit-learn's checks and model selection use it): logit and softmax, probit and
    robustmax."""
    X, y = _three_classes()
    Xb, yb = _binary()
    for link, two, more in [("logit", "logit", "softmax"), ("softmax", "logit", "softmax"),
                            ("probit", "probit", "robustmax"), (None, "probit", "robustmax"),
                            ("robustmax", "probit", "robustmax")]:
        binary = SparseGPClassifier(link=link, num_inducing=5, maxiter=1).fit(Xb, yb)
        several = SparseGPClassifier(link=link, num_inducing=5, maxiter=2).fit(X, y)
        assert binary.model_.likelihood.link == two and several.model_.likelihood.link == more
        assert several.n_classes_ == 3 and binary.n_classes_ == 2
    est = SparseGPClassifier(approximation="SVGP", num_inducing=5, maxiter=5).fit(X, y)
    assert type(est.model_).__name__ == "SVGP"  # as the regressor takes "VFE"


def test_scale_advice_names_the_wrappers_option():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1e5, (40, 1))
    est = SparseGPRegressor(standardize=False, num_inducing=5, maxiter=3)
    with pytest.warns(sg.ScaleWarning) as caught:  # named standardize_X, which it does not take
        est.fit(X, np.sin(X[:, 0] / 1e4))
    text = " ".join(str(w.message) for w in caught)
    assert "standardize=True" in text and "standardize_X" not in text


def test_sample_y_draws_from_the_predictive_of_predict_with_its_covariance():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (40, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(40)
    reg = SparseGPRegressor(num_inducing=10, random_state=0).fit(X, y)
    Xs = np.array([[-1.0], [0.0], [0.2]])
    S = 20000
    samples = reg.sample_y(Xs, S, random_state=1)
    assert samples.shape == (3, S)
    np.testing.assert_array_equal(samples, reg.sample_y(Xs, S, random_state=1))
    for noise in (True, False):
        mean, cov = reg.predict(Xs, return_cov=True, include_noise=noise)
        draws = reg.sample_y(Xs, S, random_state=2, include_noise=noise)
        sd = np.sqrt(np.diag(cov))
        assert np.all(np.abs(draws.mean(1) - mean) < 5 * sd / np.sqrt(S))
        assert np.all(np.abs(np.cov(draws) - cov) < 6 * np.outer(sd, sd) * np.sqrt(2 / S))
    with pytest.raises(ValueError, match="n_samples"):
        reg.sample_y(Xs, 0)


def test_a_missing_scikit_learn_is_named_in_the_error():
    out = import_error_without("sparsegp.sklearn", "sklearn")
    assert 'pip install "scikit-learn>=1.3"' in out and 'pip install ".[sklearn]"' in out
    assert "sparsegp[" not in out


# -- likelihoods, several outputs, streaming, fixed hyperparameters -----------------------------
def _outliers(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 5, (n, 2))
    f = np.sin(X[:, 0]) + 0.3 * X[:, 1]
    y = f + 0.1 * rng.standard_normal(n)
    y[:10] += 8.0  # ten gross outliers
    return X, y, f


def test_a_student_t_likelihood_is_an_svgp_robust_to_outliers():
    """likelihood="studentt" (a name) or an object: an SVGP of that likelihood, whose mean
    follows f where Gaussian noise is dragged by ten outliers (measured: RMSE to f 0.035
    against 0.51)."""
    X, y, f = _outliers()
    rmse = {}
    for name, likelihood in [("gaussian", None), ("studentt", "studentt"),
                             ("object", sg.likelihoods.StudentT())]:
        reg = SparseGPRegressor(num_inducing=20, likelihood=likelihood, maxiter=100,
                                random_state=0).fit(X, y)
        mean, std = reg.predict(X, return_std=True)
        rmse[name] = float(np.sqrt(np.mean((mean - f) ** 2)))
        assert std.shape == (200,) and np.all(std > 0)
    assert type(reg.model_).__name__ == "SVGP" and type(reg.model_.likelihood).__name__ == "StudentT"
    assert rmse["studentt"] < 0.1 < 0.3 < rmse["gaussian"]
    assert rmse["object"] == pytest.approx(rmse["studentt"], rel=1e-9)
    with pytest.raises(ValueError, match="single-latent sparsegp likelihood"):
        SparseGPRegressor(likelihood="multiclass").fit(X, y)


def test_several_outputs_are_one_sgpr_of_y_n_by_p():
    X, y, _ = _outliers(80)
    Y = np.c_[y, -2.0 * y]
    reg = SparseGPRegressor(num_inducing=10, maxiter=30, random_state=0).fit(X, Y)
    mean, std = reg.predict(X[:5], return_std=True)
    assert mean.shape == std.shape == (5, 2)
    model = sg.SGPR(X, Y, inducing_points=reg.model_.inducing_points, standardize_X=True)
    model.load_state_dict(reg.model_.state_dict())
    np.testing.assert_allclose(mean, model.predict_y(X[:5])[0], rtol=1e-10)
    with pytest.raises(ValueError, match="takes one output"):
        SparseGPRegressor(approximation="exact").fit(X, Y)


def test_partial_fit_is_the_streaming_update():
    """The first batch is a fit; each later one `model_.update(X, y)` (SGPR's streaming
    update): the same model as calling the update on the wrapped model."""
    X, y, f = _outliers(160)
    y[:10] -= 8.0
    reg = SparseGPRegressor(num_inducing=15, maxiter=50, random_state=0)
    reg.partial_fit(X[:40], y[:40])
    first = reg.model_
    reg.partial_fit(X[40:80], y[40:80])
    direct = first.update(X[40:80], y[40:80], maxiter=50, progress=False)
    np.testing.assert_allclose(reg.predict(X), direct.predict_y(X)[0], rtol=1e-9, atol=1e-12)
    for k in (2, 3):
        reg.partial_fit(X[40 * k:40 * (k + 1)], y[40 * k:40 * (k + 1)])
    assert reg.model_.num_data_seen == 160 and reg.X_train_.shape == (40, 2)
    assert float(np.sqrt(np.mean((reg.predict(X) - f) ** 2))) < 0.1
    exact = SparseGPRegressor(approximation="exact").fit(X[:20], y[:20])
    with pytest.raises(ValueError, match="partial_fit updates a sparse model"):
        exact.partial_fit(X[20:40], y[20:40])


def test_maxiter_zero_holds_the_hyperparameters_and_fits_the_approximation():
    """scikit-learn's optimizer=None: the starting hyperparameters kept; the classifier's
    sites (Power EP) or q(u) (SVGP) are still fitted, so its predictions are not the
    prior's."""
    X, y, _ = _outliers(60)
    reg = SparseGPRegressor(num_inducing=10, maxiter=0, random_state=0).fit(X, y)
    start = sg.SGPR(X, y, inducing_points=reg.model_.inducing_points, standardize_X=True)
    assert reg.n_iter_ == 0
    np.testing.assert_array_equal(reg.model_.kernel.lengthscale, start.kernel.lengthscale)
    Xb, yb = _binary()
    X3, y3 = _three_classes()
    starts = {2: lambda X, codes: sg.SGPC(X, codes, inducing_points=8, seed=0,
                                          standardize_X=True),
              3: lambda X, codes: sg.SVGP(X, codes, inducing_points=8, seed=0,
                                          standardize_X=True,
                                          likelihood=sg.likelihoods.MultiClass(3))}
    for Xc, yc in ((Xb, yb), (X3, y3)):
        clf = SparseGPClassifier(num_inducing=8, maxiter=0, random_state=0).fit(Xc, yc)
        codes = np.unique(yc, return_inverse=True)[1].astype(float)
        start = starts[clf.n_classes_](Xc, codes)
        np.testing.assert_array_equal(clf.model_.kernel.lengthscale, start.kernel.lengthscale)
        assert clf.score(Xc, yc) > 0.8  # the approximation fitted: not the prior's 1/C
