"""Positive parameters, freezing and priors on models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import sparsegp as sg
from sparsegp.parameters import inverse_softplus_floor, softplus_floor

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
