"""The noise the data support (`diagnostics.noise`) and the quadratic-form upper bound
(`diagnostics.bounds`), against the exact evidence computed directly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.diagnostics.bounds import quadratic_upper_bound
from sparsegp.diagnostics.noise import log_evidence_of_noise, noise_support
from sparsegp.objectives.exact import exact_log_marginal_likelihood

from ..conftest import make_problem

pytestmark = pytest.mark.numerics  # rounding-sensitive: rerun in CI under another code path

F64 = torch.float64


def _kernel_and_data(seed, N, noise):
    X, y = make_problem(seed, N=N, D=2, noise=noise)
    k = sg.kernels.SquaredExponential(lengthscale=1.0, variance=2.0)
    X, y = torch.as_tensor(X, dtype=F64), torch.as_tensor(y - y.mean(), dtype=F64)
    with torch.no_grad():
        return k, X, y, k.K(X)


@pytest.mark.parametrize("seed", range(3))
def test_the_profile_is_the_exact_evidence_at_every_noise(seed):
    _, _, y, K = _kernel_and_data(seed, 40, 0.05)
    lam, V = torch.linalg.eigh(K)
    noise = torch.tensor([1e-4, 0.01, 0.3, 2.0], dtype=F64)
    profile = log_evidence_of_noise(lam.clamp_min(0), V.mT @ y, noise)
    direct = [float(exact_log_marginal_likelihood(K, y, s)) for s in noise]
    np.testing.assert_allclose(profile.numpy(), direct, rtol=1e-9)


@pytest.mark.parametrize("true_noise", [1e-4, 0.01, 0.2])
def test_the_supported_noise_is_the_evidence_maximiser(true_noise):
    _, _, y, K = _kernel_and_data(1, 300, true_noise)
    s = noise_support(K, y, 1e-6)
    assert s.supported == pytest.approx(true_noise, rel=0.35)
    assert s.gain > 3.0 and s.unsupported(0.5) and s.at_floor
    at = noise_support(K, y, s.supported)  # at the maximiser: nothing to gain
    assert abs(at.gain) < 0.01 and not at.unsupported(0.5)
    # a brute-force search of the evidence agrees to the grid's 4 % step
    grid = np.geomspace(s.supported / 1.2, s.supported * 1.2, 41)
    values = [float(exact_log_marginal_likelihood(K, y, torch.tensor(v, dtype=F64)))
              for v in grid]
    best = grid[int(np.argmax(values))]
    assert s.supported == pytest.approx(best, rel=0.05)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("noise", [1e-4, 1e-2, 0.3])
def test_the_quadratic_form_bound_lies_above_the_exact_evidence(seed, noise):
    X, y = make_problem(seed, N=80, D=2)
    k = sg.kernels.SquaredExponential(lengthscale=0.8, variance=1.5)
    m = sg.SGPR(X, y, kernel=k, inducing_points=int(5 + 5 * seed), noise_variance=noise,
                standardize_y=False, seed=seed)
    with torch.no_grad():
        p = m.collapsed_problem()
        U = float(quadratic_upper_bound(p))
        exact = float(exact_log_marginal_likelihood(k.K(m.X), m.y, p.noise))
        titsias = float(sg.objectives.collapsed.titsias_upper_bound(p))
    assert exact <= U + 1e-8 * (1 + abs(exact))
    assert U <= titsias + 1e-8 * (1 + abs(titsias))  # never looser than Titsias's
    if noise <= 1e-4:  # where t ≫ σ² it is much tighter
        assert U < titsias - 1.0


def test_the_quadratic_form_bound_is_tight_when_qff_is_close_to_kff():
    X, y = make_problem(2, N=60, D=1, noise=1e-4)
    k = sg.kernels.SquaredExponential(lengthscale=1.0)
    m = sg.SGPR(X, y, kernel=k, inducing_points=30, noise_variance=1e-4, standardize_y=False)
    with torch.no_grad():
        p = m.collapsed_problem()
        exact = float(exact_log_marginal_likelihood(k.K(m.X), m.y, p.noise))
        U = float(quadratic_upper_bound(p))
    assert exact <= U < exact + 1.0


def test_the_quadratic_form_bound_refuses_several_outputs():
    X, y = make_problem(0, N=20)
    m = sg.SGPR(X, np.c_[y, y], inducing_points=4)
    with pytest.raises(ValueError, match="one output"):
        quadratic_upper_bound(m.collapsed_problem())
