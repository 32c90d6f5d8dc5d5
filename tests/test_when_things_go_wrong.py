"""One test per row of the README's "When things go wrong" table: what a new user who does
something ordinary, or something wrong, sees — a fitted model, a warning that names the fix,
or a clear error; never a crash from a check, never a NaN."""

from __future__ import annotations

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
        result = m.fit(maxiter=50, progress=False)
    assert result.iterations == 50 and np.isfinite(result.objective)
    assert not any(issubclass(w.category, RuntimeWarning) for w in caught)  # no stop, no jitter
    assert {w.category for w in caught} <= {sg.ApproximationWarning}
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
    mean, var = m32.predict(torch.tensor(X, dtype=torch.float32))
    assert mean.dtype == np.float32 and np.all(np.isfinite(mean)) and np.all(var > 0)
    assert np.sqrt(np.mean((mean - y) ** 2)) < 0.35  # the noise level of the Snelson data


# -- badly scaled data -------------------------------------------------------------------------
def _fit(X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(), inducing_points=15, **kw)
        m.fit(progress=False, diagnose=False)
    return m


@pytest.mark.parametrize("offset", [1e3, 1e9])
def test_targets_far_from_zero_warn_and_standardize_y_gives_the_fit_of_the_plain_data(offset):
    X, y = sg.datasets.snelson()
    with pytest.warns(sg.ScaleWarning, match="standardize_y=True"):
        sg.SGPR(X, y + offset, inducing_points=15)
    plain = _fit(X, y, standardize_y=True)
    shifted = _fit(X, y + offset, standardize_y=True)
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
