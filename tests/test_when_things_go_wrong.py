"""One test per row of the "When things go wrong" table in docs/diagnostics.md: what a new
user who does something ordinary, or something wrong, sees — a fitted model, a warning that
names the fix, or a clear error; never a crash from a check, never a NaN."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.cli import main
from sparsegp.diagnostics import report
from sparsegp.training import minibatch

from .conftest import make_problem


def ordinary_data(N, D=5, seed=0, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (N, D))
    c = [X[:, j % D] for j in range(4)]
    y = np.sin(c[0]) + 0.5 * np.cos(2 * c[1]) + 0.3 * c[2] * c[3] + noise * rng.normal(size=N)
    return X, y


def write_csv(path, names, columns):
    lines = [",".join(names)] + [",".join(str(v) for v in row) for row in zip(*columns)]
    path.write_text("\n".join(lines) + "\n")


# -- a default fit on ordinary data --------------------------------------------------------
def test_a_default_fit_on_ordinary_smooth_low_noise_data_returns_a_model():
    # the example (N = 2e4, M = 100): Cholesky of I + A used to fail mid-fit and the
    # check after fitting then raised; now the fit runs and the check can only warn
    X, y = ordinary_data(20_000)
    m = sg.SGPR(X, y, inducing_points=100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # tol= runs L-BFGS-B without the stopping rules (the default fit's predictions
        # settle at iteration 20), so that it meets the iteration limit
        result = m.fit(maxiter=50, tol=1e-12, progress=False)
    assert result.iterations == 50 and np.isfinite(result.objective)
    assert not any(issubclass(w.category, RuntimeWarning) for w in caught)  # no stop, no jitter
    assert {w.category for w in caught} <= {sg.ApproximationWarning, sg.ConvergenceWarning}
    # stopped at maxiter=50 while still improving: said, with the option that raises it
    assert any(w.category is sg.ConvergenceWarning and "maxiter=" in str(w.message)
               for w in caught)
    mean, var = m.predict(X[:100])
    assert np.sqrt(np.mean((mean - y[:100]) ** 2)) < 0.2 and np.all(var > 0)


@pytest.mark.parametrize("approximation", ["pep", "dtc"])
def test_cli_fit_with_pep_or_dtc_on_an_ordinary_csv_writes_the_model(tmp_path, capsys, approximation):
    X, y = ordinary_data(2000, D=3, seed=1)
    write_csv(tmp_path / "train.csv", ["a", "b", "c", "target"], [*X.T, y])
    out = tmp_path / "m.pt"
    code = main(["fit", str(tmp_path / "train.csv"), "--target", "target", "--approximation",
                 approximation, "-M", "50", "--maxiter", "100", "--out", str(out)])
    assert code == 0 and out.is_file()
    assert "model written" in capsys.readouterr().out
    if approximation == "pep":
        assert sg.load(out).alpha == 0.5  # the documented default, without --alpha


# -- float32 ---------------------------------------------------------------------------------
def test_float32_snelson_with_ten_inducing_points_fits_and_predicts():
    X, y = sg.datasets.snelson()
    m32 = sg.SGPR(torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32),
                  inducing_points=10)
    m64 = sg.SGPR(X, y, inducing_points=10)
    assert m32.log_marginal_likelihood() == pytest.approx(m64.log_marginal_likelihood(), rel=1e-5)
    m32.fit(progress=False)
    mean, var = m32.predict(X)  # numpy in, numpy out in the model's dtype
    assert mean.dtype == np.float32 and np.all(np.isfinite(mean)) and np.all(var > 0)
    tmean, _ = m32.predict(torch.tensor(X, dtype=torch.float32))  # a tensor in: a tensor out
    assert tmean.dtype == torch.float32
    np.testing.assert_array_equal(tmean.detach().numpy(), mean)
    assert np.sqrt(np.mean((mean - y) ** 2)) < 0.35  # the noise level of the Snelson data


# -- badly scaled data -------------------------------------------------------------------------
def _fit(X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(), inducing_points=15, **kw)
        m.fit(progress=False, diagnose=False)
    return m


@pytest.mark.parametrize("offset", [1e3, 1e9])
def test_targets_far_from_zero_are_standardised_by_default_to_the_fit_of_the_plain_data(offset):
    X, y = sg.datasets.snelson()
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ScaleWarning)  # the default standardises y: no warning
        sg.SGPR(X, y + offset, inducing_points=15)
    with pytest.warns(sg.ScaleWarning, match="standardize_y=True"):  # y as given: the fix named
        sg.SGPR(X, y + offset, inducing_points=15, standardize_y=False)
    plain = _fit(X, y)
    shifted = _fit(X, y + offset)
    Xs = np.linspace(-1, 7, 50)[:, None]
    np.testing.assert_allclose(shifted.predict(Xs)[0] - offset, plain.predict(Xs)[0], atol=1e-3)
    assert shifted.noise_variance == pytest.approx(plain.noise_variance, rel=1e-2)


@pytest.mark.parametrize("scale", [1e8, 1e-8])
def test_inputs_far_from_unit_scale_warn_and_standardize_X_gives_the_fit_of_the_plain_data(scale):
    X, y = sg.datasets.snelson()
    with pytest.warns(sg.ScaleWarning, match="standardize_X=True"):
        try:
            sg.SGPR(X * scale, y, inducing_points=15)
        except ValueError as err:  # 1e-8: the data-based lengthscale is below its floor
            assert "standardize_X=True" in str(err)
    plain = _fit(X, y, standardize_X=True)
    scaled = _fit(X * scale, y, standardize_X=True)
    Xs = np.linspace(-1, 7, 50)[:, None]
    np.testing.assert_allclose(scaled.predict(Xs * scale)[0], plain.predict(Xs)[0], atol=1e-3)


def test_well_scaled_data_give_no_scale_warning():
    X, y = make_problem(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ScaleWarning)
        sg.SGPR(X, y, inducing_points=5)
        sg.GPR(X, 1e3 + 1e3 * y, standardize_y=True)


# -- Ctrl-C ------------------------------------------------------------------------------------
def test_ctrl_c_in_fit_keeps_the_last_accepted_parameters_and_says_so():
    X, y = make_problem(1, N=80)
    m = sg.SGPR(X, y, inducing_points=8)
    seen = []

    def stop_at_five(i, objective):
        seen.append(objective)
        if i == 5:
            raise KeyboardInterrupt

    with pytest.warns(RuntimeWarning, match="interrupted"):
        result = m.fit(callback=stop_at_five, progress=False)
    assert result.interrupted and not result.success and "interrupted" in result.message
    assert result.iterations == 5 and m.log_marginal_likelihood() == pytest.approx(seen[-1])


def test_ctrl_c_during_an_objective_evaluation_goes_back_to_the_last_iterate(monkeypatch):
    X, y = make_problem(2, N=80)
    m = sg.SGPR(X, y, inducing_points=8)
    real, calls = type(m).training_loss, []

    def flaky(self):
        calls.append(1)
        if len(calls) == 12:  # mid line search, at an unaccepted trial point
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(type(m), "training_loss", flaky)
    with pytest.warns(RuntimeWarning, match="interrupted"):
        result = m.fit(progress=False)
    monkeypatch.undo()
    assert result.interrupted
    assert m.log_marginal_likelihood() == pytest.approx(result.history[-1], rel=1e-12)


def test_ctrl_c_during_the_first_evaluation_returns_the_untouched_model(monkeypatch):
    X, y = make_problem(2, N=80)
    m = sg.SGPR(X, y, inducing_points=8)
    before = [p.detach().clone() for p in m.parameters()]
    monkeypatch.setattr(type(m), "training_loss",
                        lambda self: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.warns(RuntimeWarning, match="interrupted"):
        result = m.fit(progress=False)
    monkeypatch.undo()
    assert result.interrupted and not result.success and result.iterations == 0
    assert result.history == [] and np.isnan(result.objective)  # never evaluated
    for p, b in zip(m.parameters(), before):
        torch.testing.assert_close(p.detach(), b, rtol=0, atol=0)


def test_ctrl_c_in_minibatch_training_restores_the_step_it_interrupted(monkeypatch):
    X, y = make_problem(3, N=200)
    labels = (y > np.median(y)).astype(float)
    sv = sg.SVGP(X, labels, likelihood=sg.likelihoods.Bernoulli(), inducing_points=10)
    real, before = minibatch.natural_update, []

    def interrupted_after_the_natural_gradient(*args, **kw):
        before.append(sv.q_mu.detach().clone())
        real(*args, **kw)
        if len(before) == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(minibatch, "natural_update", interrupted_after_the_natural_gradient)
    with pytest.warns(RuntimeWarning, match="interrupted"):
        result = sv.fit(batch_size=50, epochs=3, progress=False)
    assert result.interrupted and result.evaluations == 3
    torch.testing.assert_close(sv.q_mu.detach(), before[-1], rtol=0, atol=0)


def test_a_step_that_cannot_be_taken_stops_minibatch_training_instead_of_raising(monkeypatch):
    from sparsegp.training.natural_gradients import NaturalGradientError

    X, y = make_problem(3, N=200)
    sv = sg.SVGP(X, (y > np.median(y)).astype(float), likelihood=sg.likelihoods.Bernoulli(),
                 inducing_points=10)
    real, before = minibatch.natural_update, []

    def failing_on_the_third(*args, **kw):
        before.append(sv.q_mu.detach().clone())
        if len(before) == 3:
            real(*args, **kw)  # q(u) moves, then the step turns out impossible
            raise NaturalGradientError("simulated: no step keeps S positive definite")
        return real(*args, **kw)

    monkeypatch.setattr(minibatch, "natural_update", failing_on_the_third)
    with pytest.warns(RuntimeWarning, match="stopped: simulated"):
        result = sv.fit(batch_size=50, epochs=3, progress=False)
    assert not result.success and not result.interrupted and result.evaluations == 2
    torch.testing.assert_close(sv.q_mu.detach(), before[-1], rtol=0, atol=0)


def test_ctrl_c_in_power_ep_classification_keeps_a_usable_model(monkeypatch):
    X, y = make_problem(4, N=60)
    clf = sg.SGPC(X, (y > np.median(y)).astype(float), inducing_points=6)
    monkeypatch.setattr(type(clf), "site_marginals",
                        lambda self, idx=None, totals=None: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.warns(RuntimeWarning, match="interrupted"):
        result = clf.fit(progress=False)
    monkeypatch.undo()
    assert result.interrupted and np.all(np.isfinite(clf.predict_proba(X[:5])))


@pytest.mark.parametrize("approximation", ["vfe", "pep", "rff", "ski"])
def test_cli_fit_on_fewer_rows_than_the_default_m_takes_the_model_default(tmp_path,
                                                                          approximation):
    X, y = make_problem(3, N=40, D=1)
    write_csv(tmp_path / "d.csv", ["x", "y"], [X[:, 0], y])
    # -M used to default to 100: every fit of fewer than 100 rows failed without -M
    argv = ["fit", str(tmp_path / "d.csv"), "--target", "y", "--approximation", approximation,
            "--maxiter", "5", "--out", str(tmp_path / "m.pt")]
    assert main(argv) == 0
    assert (tmp_path / "m.pt").is_file()



def test_ctrl_c_in_the_cli_exits_130_and_writes_nothing_unless_asked(tmp_path, capsys, monkeypatch):
    X, y = ordinary_data(300, D=2, seed=5)
    write_csv(tmp_path / "d.csv", ["a", "b", "y"], [*X.T, y])
    real, calls = sg.SGPR.training_loss, []

    def flaky(self):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(sg.SGPR, "training_loss", flaky)
    out = tmp_path / "m.pt"
    assert main(["fit", str(tmp_path / "d.csv"), "--target", "y", "-M", "10", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert not out.exists() and "interrupted" in err and err.count("\n") == 1
    calls.clear()
    assert main(["fit", str(tmp_path / "d.csv"), "--target", "y", "-M", "10", "--out", str(out),
                 "--save-interrupted"]) == 130
    assert out.is_file() and np.all(np.isfinite(sg.load(out).predict(X[:3])[0]))


# -- repeated measurements, awkward arguments ----------------------------------------------------
@pytest.mark.parametrize("model", ["SGPR", "SVGP", "SGPC"])
def test_default_inducing_points_on_repeated_measurements_fit(model):
    rng = np.random.default_rng(0)
    X = np.repeat([[0.0], [1.0], [2.0], [4.0]], 25, axis=0)  # 100 rows, 4 distinct doses
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=100)
    targets = (y > 0.5).astype(float) if model == "SGPC" else y
    m = getattr(sg, model)(X, targets)
    assert m.num_inducing == 4  # min(N, 100) capped at the distinct inputs
    assert sorted(m.inducing_points[:, 0]) == [0.0, 1.0, 2.0, 4.0]
    m.fit(maxiter=5)
    mean = m.predict_y(X[:4])[0] if model != "SGPR" else m.predict(X[:4])[0]
    assert np.all(np.isfinite(mean))
    with pytest.raises(ValueError, match="only 4 of the data points are distinct"):  # explicit M kept
        getattr(sg, model)(X, targets, inducing_points=5)


def binary_rectangles(N=120, seed=0):
    """N 8×8 binary images of rectangle outlines: few distinct 3×3 patches."""
    rng = np.random.default_rng(seed)
    images, labels = np.zeros((N, 8, 8)), rng.integers(0, 2, N)
    for i in range(N):
        a, b = rng.integers(0, 4, 2)
        images[i, a:a + 4, b] = 1.0
        images[i, a, b:b + 3 + labels[i]] = 1.0
    return images.reshape(N, 64), labels


@pytest.mark.parametrize("model", ["SVGP", "SGPC"])
def test_default_inducing_patches_of_binary_images_fit(model):
    X, labels = binary_rectangles()
    k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(8, 8),
                                 patch_shape=(3, 3))
    distinct = len(np.unique(k.patches(torch.as_tensor(X)).reshape(-1, 9).numpy(), axis=0))
    assert distinct < 100  # the default M = min(N, 100) used to fail: "X has only 25 ..."
    extra = {"likelihood": sg.likelihoods.Bernoulli()} if model == "SVGP" else {}
    m = getattr(sg, model)(X, labels, kernel=k, **extra)
    assert m.num_inducing == distinct
    m.fit(maxiter=3) if model == "SGPC" else m.fit(epochs=2)
    assert np.all(np.isfinite(m.predict_proba(X[:5])))
    with pytest.raises(ValueError, match=f"only {distinct} of the patches of the images are "
                                         "distinct"):
        getattr(sg, model)(X, labels, kernel=k, inducing_points=distinct + 1, **extra)


def test_random_input_models_on_repeated_rows_start_with_distinct_inducing_points():
    rng = np.random.default_rng(2)
    Y = np.repeat(rng.normal(size=(4, 3)), 10, axis=0)  # 40 rows, 4 distinct
    lvm = sg.BayesianGPLVM(Y, 1, X_mean=np.repeat(np.arange(4.0), 10)[:, None])
    assert lvm.num_inducing == 4  # min(N, 30) capped at the distinct starting latents
    assert np.isfinite(float(lvm.elbo()))
    with pytest.raises(ValueError, match="only 4 of the starting latent points"):
        sg.BayesianGPLVM(Y, 1, X_mean=np.repeat(np.arange(4.0), 10)[:, None], inducing_points=5)


def test_svgp_standardises_gaussian_targets_and_warns_where_it_cannot():
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 5, (60, 1))
    y = 1e6 + 1e3 * np.sin(X[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ScaleWarning)  # standardised by default: no warning
        sg.SVGP(X, y, inducing_points=5)
    with pytest.warns(sg.ScaleWarning) as caught:  # as given: the advice names standardize_y
        sg.SVGP(X, y, inducing_points=5, standardize_y=False)
    assert "standardize_y=True" in str(caught[0].message)
    with pytest.warns(sg.ScaleWarning, match="rescale y"):  # real-valued targets too
        sg.SVGP(X, y, inducing_points=5, likelihood=sg.likelihoods.HeteroscedasticGaussian())
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ScaleWarning)  # labels and a prior mean: no warning
        sg.SVGP(X, (y > 1e6).astype(float), likelihood=sg.likelihoods.Bernoulli(),
                inducing_points=5)
        sg.SVGP(X, (y - 1e6) / 1e3 + 50.0, inducing_points=5, mean="constant",
                standardize_y=False)


@pytest.mark.parametrize("seed", ["a", None, 1.5, True])
def test_a_seed_that_is_not_an_integer_is_named(seed):
    X, y = make_problem(8, N=40)
    with pytest.raises(TypeError, match="seed must be an integer"):
        sg.SGPR(X, y, inducing_points=5, seed=seed)
    if seed is not None:  # fit(seed=None) is the default seed of the minibatches
        with pytest.raises(TypeError, match="seed must be an integer"):
            sg.SVGP(X, y, inducing_points=5).fit(batch_size=10, epochs=1, seed=seed)


def test_numpy_integer_seeds_are_seeds():
    X, y = make_problem(8, N=40)
    a = sg.SGPR(X, y, inducing_points=5, seed=np.int64(3)).inducing_points
    np.testing.assert_array_equal(a, sg.SGPR(X, y, inducing_points=5, seed=3).inducing_points)


@pytest.mark.parametrize("fit, name", [
    (lambda X, y, b: sg.SVGP(X, y, inducing_points=5).fit(batch_size=10, epochs=0), "epochs"),
    (lambda X, y, b: sg.SVGP(X, b, likelihood=sg.likelihoods.Bernoulli(),
                             inducing_points=5).fit(epochs=0), "epochs"),
    (lambda X, y, b: sg.SVGP(X, y, inducing_points=5).fit(batch_size=0, epochs=1), "batch_size"),
    (lambda X, y, b: sg.SGPC(X, b, inducing_points=5).fit(schedule="stochastic", batch_size=0),
     "batch_size"),
    (lambda X, y, b: sg.SGPC(X, b, inducing_points=5).fit(schedule="stochastic", batch_size=-5),
     "batch_size"),
    (lambda X, y, b: sg.SGPC(X, b, inducing_points=5).fit(schedule="stochastic", epochs=0),
     "epochs"),
    (lambda X, y, b: sg.SGPR(X, y, inducing_points=5).fit(tol="x"), "tol"),
])
def test_zero_epochs_batches_or_a_wrong_tolerance_are_named(fit, name):
    X, y = make_problem(9, N=40)
    with pytest.raises(ValueError, match=f"^{name} must be a positive"):
        fit(X, y, (y > 0).astype(float))


def test_maxiter_of_minibatch_training_is_not_silently_ignored():
    X, y = make_problem(10, N=40)
    m = sg.SVGP(X, (y > 0).astype(float), likelihood=sg.likelihoods.Bernoulli(), inducing_points=5)
    with pytest.warns(UserWarning, match="maxiter applies only to the full-batch .* because of "
                                         "a non-Gaussian likelihood"):
        m.fit(maxiter=5, epochs=1)
    mixing = sg.SVGP(X, np.stack([y, -y], 1), inducing_points=5, mixing=np.ones((2, 1)))
    with pytest.warns(UserWarning, match="because of a mixing matrix"):
        mixing.fit(maxiter=5, epochs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the full-batch fit takes it quietly
        sg.SVGP(X, y, inducing_points=5).fit(maxiter=5, diagnose=False)  # (5 steps: unhealthy)


@pytest.mark.parametrize(("fit", "unused"), [
    # a Gaussian SVGP without batch_size fits by L-BFGS-B: `epochs=2` used to run 1000
    # L-BFGS-B iterations in silence
    (lambda X, y, b: sg.SVGP(X, y, inducing_points=5).fit(epochs=2, lr=0.1, maxiter=3),
     "epochs, lr apply only to minibatch training"),
    (lambda X, y, b: sg.SGPC(X, b, inducing_points=5).fit(epochs=2, batch_size=10, maxiter=1),
     'batch_size, epochs apply only to schedule="stochastic"'),
    (lambda X, y, b: sg.SGPC(X, b, inducing_points=5).fit(schedule="stochastic", epochs=1,
                                                          inner_maxiter=3, tol=1e-3),
     'tol, inner_maxiter apply only to schedule="full"'),
    (lambda X, y, b: sg.BayesianGPLVM(np.c_[X, y], 1).fit(maxiter=2, gamma=0.5),
     "gamma applies only to minibatch training"),
    (lambda X, y, b: sg.GPSSM(np.c_[X, y], 1).fit(batch_size=10, epochs=1, maxiter=3),
     "maxiter applies only to the full-batch"),
])
def test_options_of_the_other_way_of_training_are_named_not_ignored(fit, unused):
    X, y = make_problem(11, N=40)
    with pytest.warns(UserWarning, match=unused):
        result = fit(X, y, (y > 0).astype(float))
    assert np.isfinite(result.objective)


@pytest.mark.parametrize(("fit", "name"), [
    (lambda X, y, b: sg.SVGP(X, y, inducing_points=5).fit(batch_size=10, epochs=1, lr=-1), "lr"),
    (lambda X, y, b: sg.SVGP(X, y, inducing_points=5).fit(batch_size=10, epochs=1,
                                                          gamma=0.0), "gamma"),
    (lambda X, y, b: sg.SVGP(X, y, inducing_points=5).fit(batch_size=10, epochs=1,
                                                          lr=float("nan")), "lr"),
    (lambda X, y, b: sg.SGPC(X, b, inducing_points=5).fit(schedule="stochastic", lr=0), "lr"),
    (lambda X, y, b: sg.KISSGP(X[:, :1], y).fit(lr=-0.1), "lr"),
    (lambda X, y, b: sg.BayesianGPLVM(np.c_[X, y], 1).fit(batch_size=10, lr="fast"), "lr"),
])
def test_a_step_size_that_is_not_positive_is_named(fit, name):
    X, y = make_problem(12, N=40)
    with pytest.raises(ValueError, match=f"^{name} must be a positive number"):
        fit(X, y, (y > 0).astype(float))


def test_log_densities_check_ynew_like_y():
    X, y = make_problem(11, N=40)
    m = sg.SVGP(X, y, inducing_points=5)
    good = m.predict_log_density(X[:3], y[:3])
    assert good.shape == (3,) and np.all(np.isfinite(good))
    for bad, message in [(y[:2], r"ynew must have one entry per row of Xnew \(3\); got 2"),
                         (np.r_[np.nan, y[1:3]], "ynew contains NaN"),
                         (np.r_[np.inf, y[1:3]], "ynew contains inf")]:
        with pytest.raises(ValueError, match=message):
            m.predict_log_density(X[:3], bad)


# -- the command line ------------------------------------------------------------------------------
def write_matrix(path, names, data):
    np.savetxt(path, data, delimiter=",", header=",".join(names), comments="")
def test_predict_takes_models_saved_from_python_svgp_and_sgpc_too(tmp_path, capsys):
    import sparsegp as sg

    X, y = make_problem(0, N=60)
    write_matrix(tmp_path / "new.csv", ["x0", "x1"], X[:4])
    labels = (y > 0).astype(float)
    for name, model in [("svgp", sg.SVGP(X, y, inducing_points=6)),
                        ("bern", sg.SVGP(X, labels, likelihood=sg.likelihoods.Bernoulli(),
                                         inducing_points=6)),
                        ("sgpc", sg.SGPC(X, labels, inducing_points=6))]:
        model.save(tmp_path / f"{name}.pt")
        for flag, expected in [([], model.predict_y(X[:4])), (["--latent"], model.predict_f(X[:4]))]:
            assert main(["predict", str(tmp_path / f"{name}.pt"), str(tmp_path / "new.csv"),
                         "--out", str(tmp_path / "p.csv"), *flag]) == 0, capsys.readouterr().err
            pred = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1)
            np.testing.assert_allclose(pred, np.c_[expected[0].ravel(), expected[1].ravel()],
                                       rtol=1e-12, atol=1e-15)


def test_predict_with_a_model_of_unnamed_inputs_needs_exactly_its_columns(tmp_path, capsys):
    import sparsegp as sg

    X, y = make_problem(1, N=40, D=1)
    sg.SGPR(X, y, inducing_points=5).save(tmp_path / "m.pt")  # an array: no column names
    write_matrix(tmp_path / "yx.csv", ["y", "x"], np.c_[y[:3], X[:3, 0]])  # the target first
    assert main(["predict", str(tmp_path / "m.pt"), str(tmp_path / "yx.csv")]) == 2
    err = capsys.readouterr().err
    assert "must hold exactly its 1 input column(s)" in err and "['y', 'x']" in err
    write_matrix(tmp_path / "x.csv", ["anything"], X[:3])
    assert main(["predict", str(tmp_path / "m.pt"), str(tmp_path / "x.csv")]) == 0
    rows = np.loadtxt(capsys.readouterr().out.splitlines()[1:], delimiter=",")
    np.testing.assert_allclose(rows[:, 0], sg.load(tmp_path / "m.pt").predict(X[:3])[0],
                               rtol=1e-14)


@pytest.mark.parametrize("features, message", [
    ("a,b", "--features includes the target 'b'"),
    ("", "--features must be comma-separated column names; got ''"),
    ("a,a", "--features names a column twice")])
def test_the_target_or_nothing_as_features_is_a_one_line_error(tmp_path, capsys, features, message):
    write_matrix(tmp_path / "d.csv", ["a", "b"], np.random.default_rng(0).normal(size=(10, 2)))
    assert main(["fit", str(tmp_path / "d.csv"), "--target", "b", "--features", features]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_csv_with_a_byte_order_mark_reads_like_one_without(tmp_path, capsys):
    X, y = make_problem(2, N=30, D=1)
    text = "y,x\n" + "".join(f"{float(b)!r},{float(a)!r}\n" for a, b in zip(X[:, 0], y))
    (tmp_path / "plain.csv").write_text(text, encoding="utf-8")
    (tmp_path / "bom.csv").write_text(text, encoding="utf-8-sig")  # Excel's "CSV UTF-8"
    import sparsegp as sg

    for name in ("plain", "bom"):
        assert main(["fit", str(tmp_path / f"{name}.csv"), "--target", "y", "-M", "5",
                     "--maxiter", "5", "--out", str(tmp_path / f"{name}.pt")]) == 0
    plain, bom = (sg.load(tmp_path / f"{n}.pt") for n in ("plain", "bom"))
    assert plain.feature_names == bom.feature_names == ["x"]
    np.testing.assert_array_equal(plain.predict(X[:4])[0], bom.predict(X[:4])[0])


def test_the_program_names_its_own_flag_and_prints_warnings_on_one_line(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1e-6, 40)  # inputs on a scale the defaults cannot represent
    write_matrix(tmp_path / "tiny.csv", ["x", "y"], np.c_[x, np.sin(x * 5e6)])
    run = subprocess.run([sys.executable, "-m", "sparsegp", "fit", str(tmp_path / "tiny.csv"),
                          "--target", "y", "-M", "5", "--maxiter", "5",
                          "--out", str(tmp_path / "m.pt")], capture_output=True, text=True)
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert lines[0].startswith("sparsegp fit: ScaleWarning: ") and "--standardize" in lines[0]
    assert lines[1].startswith("sparsegp fit: error: ") and lines[1].endswith(
        "(on the command line: --standardize)")
    assert len(lines) == 2  # no source lines, no traceback


# -- small things --------------------------------------------------------------------------------
def test_a_fractional_number_of_inducing_points_is_a_clear_error():
    X, y = make_problem(5)
    with pytest.raises(TypeError, match=r"an int M, an array \[M, D\] or an inducing feature"):
        sg.SGPR(X, y, inducing_points=10.5)


@pytest.mark.parametrize("model", ["SGPC", "SVGP"])
def test_a_classifier_with_one_class_is_a_clear_error(model):
    X, _ = make_problem(6)
    kwargs = {"likelihood": sg.likelihoods.Bernoulli()} if model == "SVGP" else {}
    with pytest.raises(ValueError, match="only one class"):
        getattr(sg, model)(X, np.ones(len(X)), inducing_points=5, **kwargs)


def test_float_labels_give_a_short_error():
    X, y = make_problem(7, N=500)
    with pytest.raises(ValueError) as err:
        sg.SGPC(X, y, inducing_points=5)
    assert "binary" in str(err.value) and len(str(err.value)) < 200


def test_saving_to_a_folder_or_a_missing_folder_is_a_clear_error(tmp_path):
    X, y = make_problem(8)
    m = sg.SGPR(X, y, inducing_points=5)
    with pytest.raises(IsADirectoryError, match="is a folder"):
        m.save(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        m.save(tmp_path / "missing" / "m.pt")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        m.save(tmp_path / "file" / "m.pt")


def test_saving_to_an_unwritable_place_names_the_reason(tmp_path, monkeypatch):
    X, y = make_problem(8)
    m = sg.SGPR(X, y, inducing_points=5)

    def refused(obj, path, *args, **kwargs):  # what torch raises on a read-only file system
        raise RuntimeError(f"[enforce fail at inline_container.cc:747] . PermissionError: "
                           f"[Errno 13] Permission denied: '{path}'")

    monkeypatch.setattr(torch, "save", refused)
    with pytest.raises(OSError, match=r"cannot write the model file .*m\.pt \(permission denied\)"):
        m.save(tmp_path / "m.pt")


def test_cli_features_out_and_number_of_inducing_points(tmp_path, capsys, monkeypatch):
    X, y = ordinary_data(50, D=2, seed=9)
    write_csv(tmp_path / "d.csv", ["a", "name", "b", "y"], [X[:, 0], ["row"] * 50, X[:, 1], y])
    out = tmp_path / "m.pt"
    # --features: the other (non-numeric) column is never parsed
    assert main(["fit", str(tmp_path / "d.csv"), "--target", "y", "--features", "a,b", "-M", "5",
                 "--maxiter", "20", "--out", str(out)]) == 0
    assert sg.load(out).feature_names == ["a", "b"]
    capsys.readouterr()
    # an M the data cannot give is refused like the API refuses it
    assert main(["fit", str(tmp_path / "d.csv"), "--target", "y", "--features", "a,b",
                 "-M", "100", "--out", str(out)]) == 2
    assert "exceeds the number of data points" in capsys.readouterr().err
    # a bad --out is reported before any fitting
    monkeypatch.setattr(sg.SGPR, "fit", lambda *a, **k: pytest.fail("fitted before checking --out"))
    assert main(["fit", str(tmp_path / "d.csv"), "--target", "y", "--features", "a,b", "-M", "5",
                 "--out", str(tmp_path / "nowhere" / "m.pt")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_report_names_which_upper_bound_each_gap_uses():
    X, y = sg.datasets.snelson()
    m = sg.SGPR(X[::2], y[::2], kernel=sg.kernels.SquaredExponential(), inducing_points=8,
                approximation="fitc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(progress=False, diagnose=False)
    rep = m.diagnostics()
    text = str(rep)
    assert "gap upper − lower (same M)" in text and "gap best upper − lower" in text
    assert rep.certified_gap == pytest.approx(min(rep.upper_bound, rep.tight_upper_bound)
                                              - rep.lower_bound)
    gap_warning = [w for w in rep.warnings if "apart" in w][0]
    assert f"upper bound with M = {rep.tight_num_inducing}" in gap_warning
    assert f"{rep.certified_gap:.3g} nats" in gap_warning


def test_jitter_warnings_do_not_leak_torch_warnings():
    A = torch.ones(4, 4, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # eigenvalues −1e-4: needs jitter 1e-3, escalated to
        sg.linalg.jittered_cholesky(A - 1e-4 * torch.eye(4, dtype=torch.float64))
    assert [w.category for w in caught] == [sg.JitterWarning]


def test_a_check_that_cannot_be_computed_warns_and_keeps_the_fitted_model(monkeypatch):
    X, y = make_problem(10)
    m = sg.SGPR(X, y, inducing_points=6)

    def broken(*args, **kwargs):
        raise sg.CholeskyError("simulated failure of a check")

    monkeypatch.setattr(report, "diagnose", broken)
    with pytest.warns(sg.ApproximationWarning, match="could not be computed.*model.diagnostics"):
        result = m.fit(maxiter=20, progress=False)
    assert result.iterations > 0 and np.isfinite(m.log_marginal_likelihood())


@pytest.mark.parametrize("model", ["BayesianGPLVM", "GPSSM"])
def test_random_input_models_name_badly_scaled_outputs(model):
    rng = np.random.default_rng(3)
    t = np.cumsum(0.3 * rng.normal(size=60))
    Y = np.c_[np.sin(t), t] + 0.01 * rng.normal(size=(60, 2))
    make = getattr(sg, model)
    with pytest.warns(sg.ScaleWarning, match=rf"{model}: .* rescale Y"):
        make(Y * 1e4, 1)
    with pytest.warns(sg.ScaleWarning, match="spread 0.0"):  # the GPSSM's noise stuck at 100×
        make(Y * 1e-2, 1)
    # was "variance must be finite and greater than its floor 1e-06; got 7.4e-09" (GP-LVM) or
    # a fit whose emission noise stayed 10⁴ times the data's variance (GPSSM)
    with pytest.raises(ValueError, match=r"spread \S+e-05, far from 1: rescale Y"):
        make(Y * 1e-4, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ScaleWarning)
        make(Y, 1)


# -- frozen parameters in the minibatch and stochastic fits ----------------------------------
def test_svgp_with_frozen_hyperparameters_trains_q_only_and_all_frozen_returns():
    X, y = make_problem(13, N=60)
    labels = (y > np.median(y)).astype(float)
    m = sg.SVGP(X, labels, inducing_points=6, likelihood=sg.likelihoods.Bernoulli())
    m.freeze("kernel.lengthscale", "kernel.variance", "feature.Z")
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    result = m.fit(batch_size=20, epochs=3)  # was torch's "optimizer got an empty parameter list"
    assert result.success and result.evaluations == 9  # steps
    for name, p in m.named_parameters():
        changed = not torch.equal(p.detach(), before[name])
        assert changed == name.startswith("q_"), name
    m.freeze()
    frozen = m.fit(batch_size=20, epochs=3)
    assert frozen.message == "no trainable parameters (all frozen)" and frozen.evaluations == 0
    assert np.isfinite(frozen.objective)


@pytest.mark.parametrize("fit", [lambda m: m.fit(maxiter=15),
                                 lambda m: m.fit(batch_size=20, epochs=2)])
def test_svgp_honours_a_frozen_q(fit):
    X, y = make_problem(14, N=60)
    m = sg.SVGP(X, y, inducing_points=6)
    m.freeze("q_mu", "q_sqrt")  # was moved anyway: by the final natural step or by natgrad
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    result = fit(m)
    changed = {n for n, p in m.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed and not changed & {"q_mu", "q_sqrt"}  # the rest is trained
    assert np.isfinite(result.objective)


def test_sgpc_stochastic_schedule_with_every_parameter_frozen_updates_the_sites():
    X, y = make_problem(15, N=60)
    clf = sg.SGPC(X, y > np.median(y), inducing_points=6).freeze()
    result = clf.fit(schedule="stochastic", batch_size=20, epochs=2)  # was an Adam error
    assert result.success and np.isfinite(result.objective)
    assert np.abs(clf.predict_proba(X[:5]) - 0.5).max() > 0.05  # the sites moved q(u)


@pytest.mark.parametrize("options, message", [
    ({"maxiter": -1}, "maxiter must be a positive integer"),  # ran 0 rounds, "after -1 rounds"
    ({"maxiter": True}, "maxiter must be a positive integer"),
    ({"maxiter": 2.5}, "maxiter must be a positive integer"),
    ({"inner_maxiter": 0}, "inner_maxiter must be a positive integer"),
    ({"max_sweeps": 0}, "max_sweeps must be a positive integer"),
    ({"tol": 0.0}, "tol must be a positive number"),
])
def test_sgpc_full_schedule_options_are_checked(options, message):
    X, y = make_problem(16, N=30)
    with pytest.raises(ValueError, match=message):
        sg.SGPC(X, y > 0, inducing_points=5).fit(**options)


def test_default_fit_of_large_counts_recovers_the_rate():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (200, 1))
    y = rng.poisson(100.0, 200).astype(float)
    model = sg.SVGP(X, y, likelihood=sg.likelihoods.Poisson(), inducing_points=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # it stopped on a failed Cholesky, the ELBO at −8.5e26
        model.fit(batch_size=100, epochs=20, progress=False)  # 40 steps
    rate = model.predict_y(X[:20])[0]
    assert np.all(np.abs(rate / y.mean() - 1) < 0.1)  # was 555 and 907 for counts of 20
    assert np.isfinite(model.log_marginal_likelihood())


def test_fit_options_and_messages_name_what_the_user_wrote():
    X, y = make_problem(11, N=40)
    with pytest.raises(TypeError, match="callback must be callable"):
        sg.SGPR(X, y, inducing_points=5).fit(maxiter=5, callback="nope")  # failed after a step
    for bad in ("abc", 5.7, True):  # int() error / truncated to 5 / taken as 1
        with pytest.raises(ValueError, match="max_inducing must be a positive integer"):
            sg.select_inducing(X, y, max_inducing=bad)

    def interrupt(iteration, objective):
        raise KeyboardInterrupt

    with pytest.warns(RuntimeWarning, match=r"^SVGP\.fit interrupted"):  # "_CollapsedBound.fit"
        sg.SVGP(X, y, inducing_points=5).fit(maxiter=20, callback=interrupt, diagnose=False)


def test_a_kissgp_grid_too_coarse_for_the_lengthscale_warns():
    X, y = make_problem(1, N=100, D=1)
    kernel = sg.kernels.SquaredExponential(lengthscale=0.1)
    with pytest.warns(sg.ApproximationWarning, match="grid_size ≥"):
        sg.KISSGP(X, y, kernel=kernel, grid_size=10)


@pytest.mark.parametrize("build", [lambda X, y: sg.GPR(X, y), lambda X, y: sg.SGPR(X, y),
                                   lambda X, y: sg.SVGP(X, y, inducing_points=4)])
def test_the_meta_device_is_refused_with_why(build):
    """A model reads its data's values when built and its posterior's when predicting: meta
    tensors hold none. Building from them, or moving a model there, is a clear ValueError,
    and the model stays where it was."""
    X = torch.rand(12, 2, dtype=torch.float64)
    y = X.sum(1)
    with pytest.raises(ValueError, match="cannot live on the meta device"):
        build(X.to("meta"), y.to("meta"))
    model = build(X, y)
    with pytest.raises(ValueError, match="cannot live on the meta device"):
        model.to("meta")
    assert model.device == torch.device("cpu")
    assert np.all(np.isfinite(model.predict_f(X.numpy())[0]))
