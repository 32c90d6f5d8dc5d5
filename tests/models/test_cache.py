"""The cached posterior is keyed on all the state it depends on: every path that changes a
parameter, a buffer (EP sites), the data or the inducing variables rebuilds it; nothing else
does. One test per path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg

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
    m = sg.SGPR(X, y, inducing_points=6)
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
