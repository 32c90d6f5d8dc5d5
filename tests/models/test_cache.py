"""The cached posterior is keyed on all the state it depends on: every path that changes a
parameter, a buffer (EP sites), the data or the inducing variables rebuilds it; nothing else
does. One test per path."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.models.core import state as base

from ..conftest import make_problem


def classification(seed=0, N=60):
    X, y = make_problem(seed, N=N)
    return X, (np.sin(2 * X[:, 0]) > 0).astype(float)


def test_unchanged_state_reuses_the_posterior():
    X, y = make_problem(0)
    m = sg.SGPR(X, y, inducing_points=6)
    post = m.posterior()
    m.predict(X[:3])
    m.log_marginal_likelihood()
    m.freeze("kernel.lengthscale")  # trainability is not state of the posterior
    assert m.posterior() is post


def test_ep_site_updates_rebuild_the_posterior():
    X, y = classification()
    clf = sg.SGPC(X, y, inducing_points=6)
    before = clf.predict_proba(X[:4])
    np.testing.assert_allclose(before, 0.5)  # no site has been fitted yet
    clf.update_sites()
    after = clf.predict_proba(X[:4])
    assert np.abs(after - 0.5).max() > 0.1  # used to stay at 0.5: the cache ignored the sites
    clf2 = sg.SGPC(X, y, inducing_points=6)
    clf2.update_sites()
    np.testing.assert_allclose(after, clf2.predict_proba(X[:4]), rtol=1e-12)


def test_a_fit_with_everything_frozen_still_updates_the_sites_and_the_predictions():
    X, y = classification(1)
    clf = sg.SGPC(X, y, inducing_points=6)
    before = clf.predict_proba(X[:4])
    clf.freeze()
    clf.fit(maxiter=2, progress=False)
    assert np.abs(clf.predict_proba(X[:4]) - before).max() > 0.1


def test_save_after_site_updates_writes_the_current_posterior(tmp_path):
    X, y = classification(2)
    clf = sg.SGPC(X, y, inducing_points=6)
    clf.predict_proba(X[:4])  # caches the posterior of the empty sites
    clf.update_sites()
    clf.save(tmp_path / "c.pt")
    np.testing.assert_array_equal(sg.load(tmp_path / "c.pt").predict_proba(X[:4]),
                                  clf.predict_proba(X[:4]))


@pytest.mark.parametrize("change", ["setter", "set_value", "load_state_dict", "optimiser",
                                    "in-place"])
def test_every_way_of_changing_a_parameter_rebuilds_the_posterior(change):
    X, y = make_problem(3)
    m = sg.SGPR(X, y, inducing_points=6)
    post = m.posterior()
    if change == "setter":
        m.noise_variance = 0.37
    elif change == "set_value":
        m.set_value("kernel.variance", 2.5)
    elif change == "load_state_dict":
        state = {k: v.clone() for k, v in m.state_dict().items()}
        state["feature.Z"] += 0.1
        m.load_state_dict(state)
    elif change == "optimiser":
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)
        m.training_loss().backward()
        opt.step()
    else:
        with torch.no_grad():
            m.feature.Z[0, 0] += 0.5
    assert m.posterior() is not post
    fresh = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(
        lengthscale=m.kernel.lengthscale, variance=m.kernel.variance),
        inducing_points=m.inducing_points, noise_variance=m.noise_variance)
    np.testing.assert_allclose(m.predict(X[:5])[0], fresh.predict(X[:5])[0], rtol=1e-10)


@pytest.mark.parametrize("change", ["replace X", "edit y in place"])
def test_changing_the_data_rebuilds_the_posterior(change):
    X, y = make_problem(4)
    m = sg.SGPR(X, y, inducing_points=6, standardize_y=False)  # y·(−1) gives −predictions
    before = m.predict(X[:5])[0]
    if change == "replace X":
        m.X = m.X + 0.3
    else:
        m.y.mul_(-1.0)
    after = m.predict(X[:5])[0]
    assert np.abs(after - before).max() > 1e-3
    if change == "edit y in place":
        np.testing.assert_allclose(after, -before, rtol=1e-10)


def test_growing_the_inducing_variables_rebuilds_the_posterior():
    X, y = make_problem(5)
    m = sg.SGPR(X, y, inducing_points=3)
    post = m.posterior()
    m.add_inducing_points(X[:2])
    assert m.posterior() is not post and m.posterior().q.mean.shape == (5, 1)


def test_a_natural_gradient_step_rebuilds_the_svgp_posterior():
    X, y = classification(6)
    sv = sg.SVGP(X, y, likelihood=sg.likelihoods.Bernoulli(), inducing_points=6)
    before = sv.predict_proba(X[:4])
    sv.natural_gradient_step(1.0)
    assert np.abs(sv.predict_proba(X[:4]) - before).max() > 1e-2


def test_a_model_loaded_without_data_predicts_from_its_saved_posterior(tmp_path):
    X, y = make_problem(7)
    m = sg.SGPR(X, y, inducing_points=6)
    m.save(tmp_path / "m.pt")
    back = sg.load(tmp_path / "m.pt")
    np.testing.assert_array_equal(back.predict(X[:3])[0], m.predict(X[:3])[0])
    back.noise_variance = 0.5  # a change it cannot rebuild from: a clear error, not stale numbers
    with pytest.raises(RuntimeError, match="loaded without its training data"):
        back.predict(X[:3])


# -- a key that sees every way of changing a value ------------------------------------------
# For each model kind, each way torch offers of changing a parameter's or buffer's value: the
# next prediction must be that of a copy whose posterior is built anew (and must differ from
# the one before, or the check says nothing); with no change, no rebuild.

def _gplvm_data(N=30):
    rng = np.random.default_rng(8)
    return np.tanh(rng.standard_normal((N, 2)) @ rng.standard_normal((2, 4))) \
        + 0.05 * rng.standard_normal((N, 4))


def _svgp(X, y):
    sv = sg.SVGP(X, y, inducing_points=6)
    with torch.no_grad():  # a q(u) away from the prior
        sv.q_mu.copy_(torch.randn(sv.q_mu.shape, dtype=torch.float64,
                                  generator=torch.Generator().manual_seed(0)))
    return sv


def _sgpc(X, y):
    clf = sg.SGPC(X, y, inducing_points=6)
    clf.update_sites()
    return clf


_BUILDERS = {
    "GPR": lambda: sg.GPR(*make_problem(9, N=30)),
    "SGPR": lambda: sg.SGPR(*make_problem(9, N=30), inducing_points=6),
    "SVGP": lambda: _svgp(*make_problem(9, N=30)),
    "SGPC": lambda: _sgpc(*classification(9, N=30)),
    "BayesianGPLVM": lambda: sg.BayesianGPLVM(_gplvm_data(), latent_dim=2, inducing_points=6),
}
_BUILT: dict = {}


def _model(kind):
    """A copy of a model of this kind built once per test run (with its posterior cached)."""
    if kind not in _BUILT:
        _BUILT[kind] = _BUILDERS[kind]()
    m = copy.deepcopy(_BUILT[kind])
    m._cache = None
    return m


def _inputs(m):
    width = m.latent_dim if isinstance(m, sg.BayesianGPLVM) else m.input_dim
    return np.linspace(-1.5, 1.5, 4 * width).reshape(4, width)


def _prediction(m, Xs):
    mean, var = m.predict(Xs) if isinstance(m, sg.BayesianGPLVM) else m.predict_f(Xs)
    return np.concatenate([np.ravel(mean), np.ravel(var)])


def _fresh_prediction(m, Xs):
    """The prediction of a copy of m with its posterior built from its current state."""
    fresh = copy.deepcopy(m)
    fresh._cache = None
    return _prediction(fresh, Xs)


def _edit_data(t, fn):  # through .data: no version bump
    fn(t.data)


def _change(m, how):
    p = m.kernel.raw_lengthscale
    if how == "in-place op":
        with torch.no_grad():
            p.mul_(1.3)
    elif how == "no_grad index assignment":
        with torch.no_grad():
            p[0] = p[0] + 0.4
    elif how == ".data copy_":
        p.data.copy_(p.data * 1.3)
    elif how == ".data index":
        p.data[0] += 0.5
    elif how == ".data fill_":
        p.data.fill_(0.3)
    elif how == "numpy view":
        p.detach().numpy()[0] += 0.5
    elif how == "load_state_dict":
        state = {k: v.clone() for k, v in m.state_dict().items()}
        state["kernel.raw_lengthscale"] += 0.4
        m.load_state_dict(state)
    elif how == "set_value":
        m.set_value("kernel.lengthscale", 0.7)
    elif how == "setter":
        m.kernel.lengthscale = 0.7
    elif how == "replaced parameter":
        m.kernel.raw_lengthscale = torch.nn.Parameter(p.detach() + 0.4)
    elif how == ".to() round trip":  # through float32: the values are rounded
        m.kernel.to(torch.float32).to(torch.float64)
    elif how == "optimiser step":
        opt = torch.optim.SGD([p], lr=0.3)
        p.grad = torch.ones_like(p)
        opt.step()
    elif how == "vector_to_parameters":
        vec = torch.nn.utils.parameters_to_vector(m.parameters())
        torch.nn.utils.vector_to_parameters(vec * 1.01 + 0.01, m.parameters())
    elif how == "buffer .data":  # the inputs' (or the outputs') shift
        shift = m.y_shift if isinstance(m, sg.BayesianGPLVM) else m.x_shift
        shift.data += 0.3
    elif how == "buffer numpy view":
        shift = m.y_shift if isinstance(m, sg.BayesianGPLVM) else m.x_shift
        shift.numpy()[0] -= 0.3
    else:
        raise AssertionError(how)


_WAYS = ["in-place op", "no_grad index assignment", ".data copy_", ".data index", ".data fill_",
         "numpy view", "load_state_dict", "set_value", "setter", "replaced parameter",
         ".to() round trip", "optimiser step", "vector_to_parameters", "buffer .data",
         "buffer numpy view"]


@pytest.mark.parametrize("how", _WAYS)
@pytest.mark.parametrize("kind", list(_BUILDERS))
def test_every_way_of_changing_a_value_is_seen_by_the_cache(kind, how):
    m = _model(kind)
    Xs = _inputs(m)
    before = _prediction(m, Xs)
    _change(m, how)
    expected = _fresh_prediction(m, Xs)
    assert not np.array_equal(expected, before)  # the change matters to the predictions
    np.testing.assert_allclose(_prediction(m, Xs), expected, rtol=1e-12, atol=1e-15)


def _count_builds(monkeypatch, m):
    """A list that gets one entry per `_build_posterior` call of m's class."""
    calls = []
    build = type(m)._build_posterior

    def counted(self):
        calls.append(1)
        return build(self)

    monkeypatch.setattr(type(m), "_build_posterior", counted)
    return calls


@pytest.mark.parametrize("kind", list(_BUILDERS))
def test_no_change_no_rebuild(kind, monkeypatch):
    m = _model(kind)
    calls = _count_builds(monkeypatch, m)
    Xs = _inputs(m)
    first = _prediction(m, Xs)
    post = m.posterior()
    m.freeze()  # trainability, reads of values and of state_dict() are no change
    m.state_dict()
    m.summary()
    m.unfreeze()
    np.testing.assert_array_equal(_prediction(m, Xs), first)
    assert m.posterior() is post and len(calls) == 1
    m.kernel.raw_lengthscale.data[0] += 0.25  # and then a change: one rebuild
    _prediction(m, Xs)
    _prediction(m, Xs)
    assert len(calls) == 2


@pytest.mark.parametrize("kind", list(_BUILDERS))
def test_a_loaded_posterior_is_reused(kind, tmp_path, monkeypatch):
    m = _model(kind)
    Xs = _inputs(m)
    m.save(tmp_path / "m.pt", include_data=True)
    back = sg.load(tmp_path / "m.pt")
    calls = _count_builds(monkeypatch, back)
    np.testing.assert_allclose(_prediction(back, Xs), _prediction(m, Xs), rtol=1e-12)
    _prediction(back, Xs)
    assert calls == []  # the saved posterior serves
    back.kernel.raw_lengthscale.data[0] += 0.25  # which a change still replaces
    np.testing.assert_allclose(_prediction(back, Xs), _fresh_prediction(back, Xs), rtol=1e-12)
    assert len(calls) == 2  # the change, and the fresh copy


@pytest.mark.parametrize("how", ["tau .data", "nu numpy view", "sites replaced"])
def test_edits_to_the_ep_sites_are_seen(how):
    clf = _model("SGPC")
    Xs = _inputs(clf)
    before = _prediction(clf, Xs)
    if how == "tau .data":
        clf.tau.data.mul_(2.0)
    elif how == "nu numpy view":
        clf.nu.numpy()[:5] += 0.5
    else:
        clf.tau, clf.nu = clf.tau * 0.5, clf.nu * 0.5
    expected = _fresh_prediction(clf, Xs)
    assert not np.array_equal(expected, before)
    np.testing.assert_allclose(_prediction(clf, Xs), expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("how", ["X .data", "X numpy view", "X rows swapped", "y .data",
                                 "y swapped"])
@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "checksum"])
def test_edits_to_the_training_data_are_seen(how, snapshot, monkeypatch):
    # small data are keyed by a copy; data-sized buffers by a checksum (forced here)
    if not snapshot:
        monkeypatch.setattr(base, "SNAPSHOT_ELEMENTS", 0)
    m = _model("SGPR")
    Xs = _inputs(m)
    before = _prediction(m, Xs)
    if how == "X .data":
        m.X.data[3, 1] += 1e-3
    elif how == "X numpy view":
        m.X.numpy()[0, 0] = 2.5
    elif how == "X rows swapped":
        X = m.X.numpy()
        X[[2, 7]] = X[[7, 2]]
    elif how == "y .data":
        m.y.data[0] += 0.5
    else:
        y = m.y.numpy()
        y[[1, 11]] = y[[11, 1]]
    expected = _fresh_prediction(m, Xs)
    assert not np.array_equal(expected, before)
    np.testing.assert_allclose(_prediction(m, Xs), expected, rtol=1e-12, atol=1e-15)


def test_the_checksum_changes_with_any_single_value_and_any_swap():
    rng = np.random.default_rng(10)
    X = torch.from_numpy(rng.standard_normal((50, 3)))
    X[:, 2] = torch.where(X[:, 2] > 0, 1.0, -1.0)  # ±1 labels: bit patterns 2⁶³ apart
    X[7, 1] = float("nan")
    ref = base.checksum(X)
    assert torch.equal(base.checksum(X.clone()), ref)  # deterministic
    for i, j in [(0, 0), (7, 1), (49, 2), (20, 1)]:
        for new in (torch.nextafter(X[i, j], torch.tensor(np.inf, dtype=X.dtype)),
                    -X[i, j], X[i, j] + 1e6, torch.tensor(float("nan"))):
            Y = X.clone()
            Y[i, j] = new
            if not torch.equal(base.value_bits(Y), base.value_bits(X)):
                assert not torch.equal(base.checksum(Y), ref), (i, j, new)
    labels = X[:, 2]
    plus, minus = int((labels > 0).nonzero()[0]), int((labels < 0).nonzero()[0])
    for (i, a), (j, b) in [((plus, 2), (minus, 2)), ((0, 0), (0, 1)), ((3, 0), (40, 1)),
                           ((5, 0), (6, 0))]:
        Y = X.clone()
        Y[i, a], Y[j, b] = X[j, b], X[i, a]
        assert not torch.equal(base.checksum(Y), ref), ((i, a), (j, b))
    y = X[:, 0].clone()  # a vector: one column
    z = y.clone()
    z[[4, 30]] = z[[30, 4]]
    assert not torch.equal(base.checksum(z), base.checksum(y))


def test_the_key_of_large_data_is_a_checksum_not_a_copy():
    # the key of data-sized buffers holds 1 + D numbers, not the N·D values (its cost, ≈ 8 ms
    # for 10⁶ × 10 against ≈ 40 ms for a copy, is measured in `state.checksum`'s docstring;
    # no timing here)
    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("X", torch.randn(200_000, 10, dtype=torch.float64))

    h = Holder()
    key = base.state_key(h)
    assert [v.numel() for v in key._values] == [1 + 10]
    assert base.state_key(h) == key


@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "checksum"])
def test_missing_targets_do_not_defeat_the_cache(snapshot, monkeypatch):
    # NaN (a missing output) compares unequal to itself; the key compares bit patterns
    if not snapshot:
        monkeypatch.setattr(base, "SNAPSHOT_ELEMENTS", 0)
    X, y = make_problem(11, N=30)
    Y = np.c_[y, np.cos(X[:, 0])]
    Y[::4, 1] = np.nan
    m = sg.SGPR(X, Y, inducing_points=6)
    calls = _count_builds(monkeypatch, m)
    first = m.predict_f(X[:3])[0]
    np.testing.assert_array_equal(m.predict_f(X[:3])[0], first)
    assert len(calls) == 1
    m.y.numpy()[1, 1] += 0.5  # an observed value edited: seen
    m.predict_f(X[:3])
    assert len(calls) == 2
