"""Positive parameters, freezing and priors on models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import sparsegp as sg
from sparsegp.parameters import bounded, inverse_bounded, inverse_softplus_floor, softplus_floor

from .conftest import make_problem


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-5, 1e6), st.sampled_from([1e-6, 1e-3, 0.0]))
def test_softplus_floor_round_trip(value, floor):
    assume(value > 2 * floor)
    v = torch.tensor(value, dtype=torch.float64)
    back = softplus_floor(inverse_softplus_floor(v, floor), floor)
    assert float(back) == pytest.approx(value, rel=1e-10)


def test_freeze_by_dotted_name_keeps_the_value_through_fit():
    X, y = make_problem(1)
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=1.0), inducing_points=8)
    Z0 = m.inducing_points.copy()
    m.freeze("kernel.lengthscale", "inducing_points")
    m.fit(maxiter=50)
    assert m.kernel.lengthscale == pytest.approx(1.0, rel=0, abs=0)
    np.testing.assert_array_equal(m.inducing_points, Z0)
    m.unfreeze("inducing_points")
    m.fit(maxiter=20)
    assert not np.array_equal(m.inducing_points, Z0)
    with pytest.raises(KeyError, match="no parameter named 'kernel.nope'.*noise_variance"):
        m.freeze("kernel.nope")


def test_fit_with_everything_frozen_reports_it():
    X, y = make_problem(2)
    m = sg.GPR(X, y)
    m.freeze()
    res = m.fit()
    assert res.success and "frozen" in res.message
    assert res.objective == pytest.approx(m.log_marginal_likelihood())


def test_prior_is_part_of_the_training_objective():
    X, y = make_problem(3)
    m = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=1.0))
    gamma = torch.distributions.Gamma(torch.tensor(2.0, dtype=torch.float64), 4.0)
    m.set_prior("kernel.lengthscale", gamma)
    m.set_prior("noise_variance", lambda v: -10.0 * v)
    expected = m.log_marginal_likelihood() + float(gamma.log_prob(torch.tensor(1.0))) \
        - 10.0 * m.value("noise_variance").item()
    assert -m.training_loss().item() == pytest.approx(expected, rel=1e-12)
    # MAP with a strong prior pulls the lengthscale towards the prior's mode (0.25).
    free = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=1.0))
    free.fit()
    strong = torch.distributions.Normal(torch.tensor(0.25, dtype=torch.float64), 1e-3)
    m.set_prior("kernel.lengthscale", strong)
    res = m.fit()
    assert abs(m.kernel.lengthscale - 0.25) < abs(free.kernel.lengthscale - 0.25)
    assert res.objective == pytest.approx(-m.training_loss().item(), rel=1e-10)
    m.set_prior("kernel.lengthscale", None)
    with pytest.raises(TypeError, match="prior"):
        m.set_prior("kernel.variance", 3.0)


def test_summary_lists_every_parameter():
    X, y = make_problem(4)
    m = sg.SGPR(X, y, inducing_points=5)
    m.freeze("noise_variance")
    text = m.summary()
    for name in ("noise_variance", "kernel.lengthscale", "kernel.variance", "feature.Z"):
        assert name in text
    assert "frozen" in text


# -- assigned values keep the parameter ------------------------------------------------------
def _ard_model(seed=5):
    X, y = make_problem(seed, N=30)
    return X, y, sg.SGPR(X, y, inducing_points=6)  # default kernel: ARD, one ℓ per column


def test_a_scalar_assigned_to_ard_lengthscales_fills_them_in_place():
    _, _, m = _ard_model()
    raw = m.kernel.raw_lengthscale
    m.freeze("kernel.lengthscale")
    m.kernel.lengthscale = 0.5
    assert m.kernel.raw_lengthscale is raw and raw.shape == (2,) and not raw.requires_grad
    np.testing.assert_allclose(m.kernel.lengthscale, [0.5, 0.5], rtol=1e-14)
    m.set_value("kernel.lengthscale", np.array([0.7]))  # one number in an array: the same
    m.set_value("kernel.lengthscale", [0.3, 0.4])  # one per column: as before
    assert m.kernel.raw_lengthscale is raw
    np.testing.assert_allclose(m.kernel.lengthscale, [0.3, 0.4], rtol=1e-14)
    # per-group noise variances take one number for all groups as well
    X, y = make_problem(6, N=20)
    g = sg.SGPR(X, y, inducing_points=4, noise_groups=np.arange(20) % 2)
    noise = g.raw_noise_variance
    g.noise_variance = 0.2
    assert g.raw_noise_variance is noise
    np.testing.assert_allclose(g.noise_variance, [0.2, 0.2], rtol=1e-12)


def test_an_optimiser_built_before_the_assignment_still_trains_the_parameter():
    _, _, m = _ard_model()
    opt = torch.optim.Adam(m.parameters(), lr=0.05)
    m.kernel.lengthscale = 0.5
    opt.zero_grad()
    m.training_loss().backward()
    opt.step()
    assert m.kernel.lengthscale.shape == (2,)
    assert np.all(np.abs(m.kernel.lengthscale - 0.5) > 1e-3)  # one Adam step moved both


def test_the_state_dict_after_an_assignment_loads_into_a_default_built_model():
    X, y, m = _ard_model()
    m.kernel.lengthscale = 0.5
    m.noise_variance = 0.3
    fresh = sg.SGPR(X, y, inducing_points=6)
    fresh.load_state_dict(m.state_dict())
    np.testing.assert_allclose(fresh.predict(X[:4])[0], m.predict(X[:4])[0], rtol=1e-12)


def test_a_value_of_a_shape_that_does_not_broadcast_is_refused_with_the_way_out():
    _, _, m = _ard_model()
    before = m.kernel.lengthscale
    with pytest.raises(ValueError, match=r"kernel\.lengthscale has shape \(2,\); a value of "
                       r"shape \(3,\) does not broadcast to it.*set_value\('kernel\.lengthscale'"
                       r", value, reshape=True\)"):
        m.set_value("kernel.lengthscale", [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(m.kernel.lengthscale, before)  # left as it was
    k = sg.kernels.Matern32(lengthscale=1.0)
    with pytest.raises(ValueError, match=r"lengthscale has shape \(\); .*reshape=True"):
        k.lengthscale = [1.0, 2.0]
    assert k.lengthscale == pytest.approx(1.0)
    with pytest.raises(ValueError, match="variance must be a scalar"):  # as before
        k.variance = [1.0, 2.0]
    # unconstrained parameters: exactly their shape, reshape or not
    for reshape in (False, True):
        with pytest.raises(ValueError, match=r"feature\.Z must have shape \(6, 2\); got \(6,"
                           r" 3\) \(the model's structure fixes"):
            m.set_value("feature.Z", np.zeros((6, 3)), reshape=reshape)


def test_reshape_true_replaces_the_parameter_with_one_of_the_value_shape():
    X, y, m = _ard_model()
    old = m.kernel.raw_lengthscale
    m.freeze("kernel.lengthscale")
    m.set_value("kernel.lengthscale", 0.8, reshape=True)  # ARD -> one lengthscale
    new = m.kernel.raw_lengthscale
    assert new is not old and isinstance(new, torch.nn.Parameter) and new.shape == ()
    assert not new.requires_grad  # frozen stays frozen
    assert m.kernel.lengthscale == pytest.approx(0.8, rel=1e-14)
    assert "kernel.lengthscale" in m.parameter_names() and new in list(m.parameters())
    scalar = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(), inducing_points=6)
    scalar.load_state_dict(m.state_dict())  # loads where the shape is the new one
    np.testing.assert_allclose(scalar.predict(X[:4])[0], m.predict(X[:4])[0], rtol=1e-12)
    m.set_value("kernel.lengthscale", [0.5, 0.6], reshape=True)  # and back to ARD
    assert m.kernel.raw_lengthscale.shape == (2,)
    same = m.kernel.raw_lengthscale
    m.set_value("kernel.lengthscale", [0.7, 0.9], reshape=True)  # same shape: in place
    assert m.kernel.raw_lengthscale is same
    np.testing.assert_allclose(m.kernel.lengthscale, [0.7, 0.9], rtol=1e-14)
    with pytest.raises(ValueError, match="variance must be a scalar"):  # still refused
        m.set_value("kernel.variance", [1.0, 2.0], reshape=True)


def test_noise_of_the_latent_input_models_keeps_its_shape_through_save_and_load(tmp_path):
    # GPSSM's noises are one per dimension (a number fills them: it replaced them with a
    # scalar, which `load` refused); a GP-LVM's noise is one per column of Y when given so
    rng = np.random.default_rng(7)
    Y = np.tanh(rng.standard_normal((30, 2)) @ rng.standard_normal((2, 3)))
    ssm = sg.GPSSM(Y[:, :2], state_dim=2, inducing_points=5, process_noise=0.1,
                   emission_noise=0.01)
    assert ssm.process_noise.shape == (2,)
    ssm.save(tmp_path / "s.pt")
    np.testing.assert_allclose(sg.load(tmp_path / "s.pt").process_noise, [0.1, 0.1])
    for noise in ([0.1, 0.2, 0.3], 0.1):
        lvm = sg.BayesianGPLVM(Y, latent_dim=2, inducing_points=5, noise_variance=noise)
        lvm.save(tmp_path / "g.pt")
        np.testing.assert_allclose(sg.load(tmp_path / "g.pt").noise_variance, noise,
                                   rtol=1e-12)


# -- bounds -------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.floats(-700.0, 700.0), st.floats(1e-6, 10.0), st.floats(1e-3, 1e3))
def test_a_bounded_value_lies_within_its_bounds_for_every_raw_value(raw, lower, width):
    upper = lower + width
    v = bounded(torch.tensor(raw, dtype=torch.float64), lower, upper)
    assert lower <= float(v) <= upper
    inside = torch.tensor(lower + 0.37 * width, dtype=torch.float64)
    back = bounded(inverse_bounded(inside, lower, upper), lower, upper)
    assert float(back) == pytest.approx(float(inside), rel=1e-12)


def test_set_bounds_keeps_the_value_and_holds_it_within_them():
    k = sg.kernels.SquaredExponential(lengthscale=[0.5, 2.0], variance=1.3)
    X = torch.randn(6, 2, dtype=torch.float64)
    K0 = k.K(X).detach()
    raw0 = k.raw_lengthscale
    k.set_bounds("lengthscale", 0.1, 10.0)
    assert k.bounds("lengthscale") == (0.1, 10.0) and k.bounds("variance") is None
    assert k.raw_lengthscale is raw0  # in place: optimisers built before still train it
    np.testing.assert_allclose(k.lengthscale, [0.5, 2.0], rtol=1e-13)
    torch.testing.assert_close(k.K(X).detach(), K0, rtol=1e-12, atol=0)
    with torch.no_grad():
        k.raw_lengthscale.copy_(torch.tensor([-1e4, 1e4]))
    np.testing.assert_allclose(k.lengthscale, [0.1, 10.0], rtol=1e-15)
    k.lengthscale = [0.2, 9.0]  # assignments inside: as before
    np.testing.assert_allclose(k.lengthscale, [0.2, 9.0], rtol=1e-13)
    k.set_bounds("lengthscale", None)  # removed: the value stays, the floor's transform is back
    assert k.bounds("lengthscale") is None and "bounds_lengthscale" not in k.state_dict()
    np.testing.assert_allclose(k.lengthscale, [0.2, 9.0], rtol=1e-13)
    torch.testing.assert_close(k.raw_lengthscale.detach(),
                               inverse_softplus_floor(torch.tensor([0.2, 9.0], dtype=torch.float64),
                                                      k._floors["lengthscale"]))


def test_bounds_refuse_values_outside_and_bad_bounds():
    k = sg.kernels.SquaredExponential(lengthscale=2.0, variance=1.0)
    for lower, upper in ((0.0, 1.0), (3.0, 3.0), (5.0, 1.0), (0.1, float("inf")),
                         (float("nan"), 1.0)):
        with pytest.raises(ValueError, match="bounds of lengthscale must be finite"):
            k.set_bounds("lengthscale", lower, upper)
    with pytest.raises(ValueError, match=r"strictly inside its bounds \(3, 4\); its current "
                       r"value 2 does not"):
        k.set_bounds("lengthscale", 3.0, 4.0)
    assert k.bounds("lengthscale") is None and k.lengthscale == pytest.approx(2.0)
    k.set_bounds("lengthscale", 1.0, 4.0)
    for value in (4.0, 0.5, 7.0):
        with pytest.raises(ValueError, match=r"lengthscale must lie strictly inside its bounds "
                           r"\(1, 4\)"):
            k.lengthscale = value
    assert k.lengthscale == pytest.approx(2.0)
    with pytest.raises(ValueError, match="give both bounds"):
        k.set_bounds("lengthscale", None, 3.0)
    X, y = make_problem(8, N=20)
    m = sg.SGPR(X, y, inducing_points=4)
    with pytest.raises(TypeError, match="feature.Z is not a positive parameter"):
        m.set_bounds("feature.Z", 0.1, 1.0)
    with pytest.raises(KeyError, match="no parameter named 'kernel.nope'"):
        m.set_bounds("kernel.nope", 0.1, 1.0)


def test_fit_stays_within_the_bounds():
    X, y = make_problem(9)
    free = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=1.0))
    free.fit()
    assert free.kernel.lengthscale > 0.8  # the bounds below hold it away from its optimum
    m = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.3))
    m.set_bounds("kernel.lengthscale", 0.1, 0.5)
    assert m.fit().success
    assert 0.45 < m.kernel.lengthscale <= 0.5
    assert m.log_marginal_likelihood() < free.log_marginal_likelihood()


def test_bounds_travel_with_the_state_dict_and_saved_models(tmp_path):
    X, y = make_problem(10, N=20)
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[0.7, 1.2]),
                inducing_points=5)
    m.set_bounds("kernel.lengthscale", 0.5, 1.5)
    m.set_bounds("kernel.variance", 0.01, 100.0)
    m.fit(maxiter=30)
    m.save(tmp_path / "m.pt")
    loaded = sg.load(tmp_path / "m.pt")
    assert loaded.bounds("kernel.lengthscale") == (0.5, 1.5)
    assert loaded.bounds("kernel.variance") == (0.01, 100.0)
    np.testing.assert_allclose(loaded.kernel.lengthscale, m.kernel.lengthscale, rtol=1e-14)
    for a, b in zip(loaded.predict(X[:4]), m.predict(X[:4])):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    # into a model built without bounds, and bounds dropped where the state has none
    fresh = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[1.0, 1.0]),
                    inducing_points=5)
    fresh.load_state_dict(m.state_dict())
    assert fresh.bounds("kernel.lengthscale") == (0.5, 1.5)
    np.testing.assert_allclose(fresh.kernel.lengthscale, m.kernel.lengthscale, rtol=1e-14)
    plain = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[0.9, 0.8]),
                    inducing_points=5)
    fresh.load_state_dict(plain.state_dict())
    assert fresh.bounds("kernel.lengthscale") is None
    np.testing.assert_allclose(fresh.kernel.lengthscale, [0.9, 0.8], rtol=1e-13)
