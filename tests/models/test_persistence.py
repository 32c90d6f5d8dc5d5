"""Saving and loading: exact round trips, no data needed for SGPR, clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import sparsegp as sg

from ..conftest import make_problem


@pytest.mark.parametrize("approx,alpha", [("vfe", None), ("fitc", None), ("dtc", None), ("pep", 0.3)])
def test_sgpr_round_trip_predicts_identically_without_the_data(tmp_path, approx, alpha):
    X, y = make_problem(0, N=60)
    kernel = sg.kernels.Matern52(ard=True) * sg.kernels.Periodic(period=3.0) + sg.kernels.Linear()
    m = sg.SGPR(X, y, kernel=kernel, inducing_points=8, approximation=approx, alpha=alpha,
                standardize_y=True, standardize_X=True)
    m.fit(maxiter=30)
    m.metadata["note"] = "hello"
    Xs = np.random.default_rng(1).normal(size=(20, 2))
    m.save(tmp_path / "m.pt")
    back = sg.load(tmp_path / "m.pt")
    assert type(back) is sg.SGPR and back.approximation == approx and back.alpha == m.alpha
    for full_cov in (False, True):
        for noise in (False, True):
            a, b = m.predict(Xs, full_cov, noise), back.predict(Xs, full_cov, noise)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(back.inducing_points, m.inducing_points)
    assert back.noise_variance == m.noise_variance and back.metadata == {"note": "hello"}
    assert back.X is None
    with pytest.raises(RuntimeError, match="loaded without its training data"):
        back.fit()
    back.kernel.kernels[0].kernels[1].period = 2.0  # a changed model cannot rebuild without data
    with pytest.raises(RuntimeError, match="loaded without its training data"):
        back.predict(Xs)


def test_round_trip_with_data_can_continue_training(tmp_path):
    X, y = make_problem(1, N=50)
    m = sg.SGPR(X, y, inducing_points=6, approximation="fitc")
    m.fit(maxiter=5)
    m.save(tmp_path / "m.pt", include_data=True)
    back = sg.load(tmp_path / "m.pt")
    assert back.log_marginal_likelihood() == m.log_marginal_likelihood()
    assert back.upper_bound() == m.upper_bound()
    r1, r2 = m.fit(maxiter=20), back.fit(maxiter=20)
    assert r1.objective == pytest.approx(r2.objective, rel=1e-10)


def test_gpr_round_trip(tmp_path):
    X, y = make_problem(2, N=30)
    m = sg.GPR(X, y, kernel=sg.kernels.Matern12(ard=True))
    m.fit(maxiter=20)
    m.save(tmp_path / "g.pt")
    back = sg.load(tmp_path / "g.pt")
    Xs = X + 0.1
    np.testing.assert_array_equal(m.predict(Xs)[0], back.predict(Xs)[0])
    np.testing.assert_array_equal(m.predict(Xs)[1], back.predict(Xs)[1])
    assert back.log_marginal_likelihood() == m.log_marginal_likelihood()


def test_corrupt_foreign_and_future_files_are_clear_errors(tmp_path):
    X, y = make_problem(3, N=20)
    m = sg.SGPR(X, y, inducing_points=4)
    good = tmp_path / "good.pt"
    m.save(good)
    raw = good.read_bytes()
    (tmp_path / "trunc.pt").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "noise.pt").write_bytes(np.random.default_rng(0).bytes(1000))
    (tmp_path / "text.pt").write_text("hello")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "foreign.pt")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    for name in ("trunc.pt", "noise.pt", "text.pt"):
        with pytest.raises(ValueError, match="not a readable sparsegp model file"):
            sg.load(tmp_path / name)
    for name in ("foreign.pt", "list.pt"):
        with pytest.raises(ValueError, match="not a sparsegp model file"):
            sg.load(tmp_path / name)
    payload = torch.load(good, weights_only=True)
    payload["version"] = 999
    torch.save(payload, tmp_path / "future.pt")
    with pytest.raises(ValueError, match="format version 999"):
        sg.load(tmp_path / "future.pt")
    payload["version"] = 1
    del payload["state_dict"]["feature.Z"]
    torch.save(payload, tmp_path / "damaged.pt")
    with pytest.raises(ValueError, match="damaged"):
        sg.load(tmp_path / "damaged.pt")
    with pytest.raises(FileNotFoundError):
        sg.load(tmp_path / "missing.pt")


def test_classification_and_variational_models_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, (80, 2))
    y = (np.sin(2 * X[:, 0]) > 0).astype(float)
    clf = sg.SGPC(X, 2 * y - 1, inducing_points=8, alpha=0.5)
    clf.fit(maxiter=2)
    sv = sg.SVGP(X, y, likelihood=sg.likelihoods.Bernoulli(link="logit"), inducing_points=8,
                 whiten=False)
    sv.fit(batch_size=40, epochs=3)
    Xs = rng.uniform(-2, 2, (15, 2))
    for model in (clf, sv):
        model.save(tmp_path / "m.pt")
        back = sg.load(tmp_path / "m.pt")
        assert type(back) is type(model)
        np.testing.assert_array_equal(back.predict_proba(Xs), model.predict_proba(Xs))
        for a, b in zip(back.predict_f(Xs), model.predict_f(Xs)):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(sg.load(tmp_path / "m.pt").predict_y(Xs)[1], sv.predict_y(Xs)[1])
    clf.save(tmp_path / "c.pt", include_data=True)
    back = sg.load(tmp_path / "c.pt")
    assert back.log_marginal_likelihood() == clf.log_marginal_likelihood()  # sites came along
    np.testing.assert_array_equal(back.predict(Xs), clf.predict(Xs))
    assert set(np.unique(back.predict(Xs))) <= {-1, 1}


def test_parameters_at_their_floor_save_and_load(tmp_path):
    # a softplus that underflows puts a positive parameter exactly at its floor; the file's
    # constructor arguments then failed to load ("greater than its floor 1e-06; got 1e-06")
    X = np.random.default_rng(0).uniform(-3, 3, (60, 2))
    model = sg.SVGP(X, np.sin(X[:, 0]), inducing_points=5)
    with torch.no_grad():
        model.likelihood.raw_variance.fill_(-60.0)
        model.kernel.raw_variance.fill_(-60.0)
    assert model.likelihood.variance == 1e-6 and model.kernel.variance == 1e-6
    model.save(tmp_path / "floor.pt")
    loaded = sg.load(tmp_path / "floor.pt")
    assert loaded.likelihood.variance == 1e-6 and loaded.kernel.variance == 1e-6
    np.testing.assert_array_equal(loaded.predict_y(X[:4])[0], model.predict_y(X[:4])[0])


def test_frozen_parameters_stay_frozen_and_lost_priors_are_named(tmp_path):
    X, y = make_problem(5, N=50)
    model = sg.SGPR(X, y, inducing_points=6)
    model.freeze("inducing_points", "kernel.lengthscale")
    model.set_prior("kernel.variance", lambda v: -v)  # a callable: the file cannot hold it
    model.save(tmp_path / "m.pt", include_data=True)
    with pytest.warns(UserWarning, match="had priors on kernel.variance, which are not saved .* "
                                         "set them again"):
        loaded = sg.load(tmp_path / "m.pt")
    frozen = {name for name, _, trainable, _ in loaded.named_values() if not trainable}
    assert frozen == {name for name, _, trainable, _ in model.named_values() if not trainable}
    assert len(frozen) == 2  # used to come back trainable: fit() moved them
    Z, lengthscale = loaded.inducing_points.copy(), loaded.kernel.lengthscale.copy()
    loaded.fit(maxiter=10)
    np.testing.assert_array_equal(loaded.inducing_points, Z)
    np.testing.assert_array_equal(loaded.kernel.lengthscale, lengthscale)


def test_sgpc_state_dict_carries_the_sites():
    X, y = make_problem(6, N=60)
    labels = y > np.median(y)
    old = sg.SGPC(X, labels, inducing_points=6)
    old.fit(maxiter=3)
    new = sg.SGPC(X, labels, inducing_points=6)
    new.load_state_dict(old.state_dict())  # used to predict the prior's 0.5 everywhere
    np.testing.assert_array_equal(new.predict_proba(X[:5]), old.predict_proba(X[:5]))
    with pytest.raises(RuntimeError, match="tau: \\(60,\\) sites for the model's 30 data points"):
        sg.SGPC(X[:30], labels[:30], inducing_points=6).load_state_dict(old.state_dict())


class _PowerCosine(sg.kernels.Kernel):
    """σ² cos(ω (x − x'))^(2p): `power` is a constructor argument, not a parameter."""

    def __init__(self, variance=None, frequency=1.0, power=1):
        super().__init__()
        self.power = power
        self._declare("variance", variance, 1.0, 1e-6)
        self._declare("frequency", frequency, 1.0, 1e-6)

    def K(self, X, X2=None):
        X2 = X if X2 is None else X2
        return self.value("variance") * torch.cos(self.value("frequency") * (X - X2.T)) ** (
            2 * self.power)

    def K_diag(self, X):
        return self.value("variance").expand(X.shape[0])


class _RecordedPowerCosine(_PowerCosine):
    def config(self):
        cfg = super().config()
        cfg["args"]["power"] = self.power
        return cfg


def test_a_kernel_argument_its_config_does_not_record_is_refused_at_save(tmp_path):
    X, y = make_problem(7, N=30, D=1)
    model = sg.GPR(X, y, kernel=_PowerCosine(power=3))
    # was saved, then loaded with power=1: other predictions, in silence
    with pytest.raises(TypeError, match=r"_PowerCosine\(power=\.\.\.\) would be rebuilt with "
                                        "the default"):
        model.save(tmp_path / "m.pt")
    recorded = sg.GPR(X, y, kernel=_RecordedPowerCosine(power=3))
    recorded.save(tmp_path / "r.pt")
    loaded = sg.load(tmp_path / "r.pt")
    assert loaded.kernel.power == 3
    np.testing.assert_array_equal(loaded.predict(X[:3])[0], recorded.predict(X[:3])[0])


@pytest.mark.parametrize("metadata, name", [
    ({"lr": np.float64(0.1)}, r"metadata\['lr'\] is a float64"),
    ({"runs": [1, {"x": np.zeros(2)}]}, r"metadata\['runs'\]\[1\]\['x'\] is a ndarray"),
    ({"path": Path("data.csv")}, r"metadata\['path'\] is a \w*Path"),
])
def test_metadata_load_could_not_read_is_refused_at_save(metadata, name, tmp_path):
    X, y = make_problem(8, N=30)
    model = sg.SGPR(X, y, inducing_points=5)
    model.metadata = metadata  # was saved, then "not a readable sparsegp model file" at load
    with pytest.raises(TypeError, match=f"cannot save: {name}"):
        model.save(tmp_path / "m.pt")
    model.metadata = {"lr": 0.1, "runs": [1, {"x": [0.0, 0.0]}], "path": "data.csv", 3: None}
    model.save(tmp_path / "m.pt")
    assert sg.load(tmp_path / "m.pt").metadata == model.metadata


def test_saving_data_a_model_does_not_have_and_loading_onto_a_missing_device(tmp_path):
    X, y = make_problem(9, N=30)
    sg.SGPR(X, y, inducing_points=5).save(tmp_path / "m.pt")
    loaded = sg.load(tmp_path / "m.pt")
    with pytest.raises(ValueError, match="include_data=True, but this model has no data"):
        loaded.save(tmp_path / "n.pt", include_data=True)  # wrote a file without data
    with pytest.raises(IsADirectoryError, match="is a folder, not a model file"):
        sg.load(tmp_path)
    if not torch.cuda.is_available():  # blamed the file: "corrupt, truncated or foreign"
        with pytest.raises(RuntimeError, match="no CUDA device is available here"):
            sg.load(tmp_path / "m.pt", map_location="cuda")


def test_distribution_priors_are_saved_and_set_again_by_load(tmp_path):
    D = torch.distributions
    X, y = make_problem(6, N=40)
    model = sg.SGPR(X, y, inducing_points=5)
    model.set_prior("kernel.variance", D.Gamma(2.0, 3.0))
    model.set_prior("kernel.lengthscale", D.LogNormal(0.5, 0.7))
    model.set_prior("noise_variance", D.MultivariateNormal(torch.zeros(1), torch.eye(1)))
    model.save(tmp_path / "m.pt", include_data=True)
    with pytest.warns(UserWarning, match="priors on noise_variance, which are not saved"):
        loaded = sg.load(tmp_path / "m.pt")  # MultivariateNormal's arguments are ambiguous
    priors = dict(loaded.named_priors())
    assert set(priors) == {"kernel.variance", "kernel.lengthscale"}
    assert isinstance(priors["kernel.variance"], D.Gamma)
    assert float(priors["kernel.variance"].rate) == 3.0
    assert float(priors["kernel.lengthscale"].scale) == pytest.approx(0.7)
    model.set_prior("noise_variance", None)
    assert float(loaded.log_prior()) == float(model.log_prior()) != 0.0
    assert float(loaded.training_loss()) == float(model.training_loss())
