"""Properties of the collapsed family that need no dense reference: chunking, gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.objectives.collapsed.members import family

from ..conftest import make_problem

MEMBERS = [("vfe", None), ("fitc", None), ("dtc", None), ("pep", 0.5), ("pep", 0.05)]


def model(approx, alpha, chunk_size=None, N=40, M=7, seed=0):
    X, y = make_problem(seed, N=N)
    Z = X[np.random.default_rng(seed + 1).choice(N, M, replace=False)] + 0.1
    return sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[0.9, 1.4], variance=1.2),
                   inducing_points=Z, approximation=approx, alpha=alpha, noise_variance=0.1,
                   chunk_size=chunk_size)


def value_and_grad(m):
    loss = m.training_loss()
    grads = torch.autograd.grad(loss, list(m.parameters()))
    return loss.item(), torch.cat([g.reshape(-1) for g in grads])


@pytest.mark.parametrize("approx,alpha", MEMBERS)
def test_any_chunk_size_gives_the_same_value_and_gradient(approx, alpha):
    ref_v, ref_g = value_and_grad(model(approx, alpha, chunk_size=None))
    for size in (1, 3, 7, 39, 40, 1000):
        v, g = value_and_grad(model(approx, alpha, chunk_size=size))
        assert v == pytest.approx(ref_v, rel=1e-12)
        torch.testing.assert_close(g, ref_g, rtol=1e-10, atol=1e-12)
    m = model(approx, alpha, chunk_size=5)
    ub = m.upper_bound()
    assert ub == pytest.approx(model(approx, alpha).upper_bound(), rel=1e-12)


@pytest.mark.parametrize("approx,alpha", MEMBERS)
def test_gradcheck_on_the_collapsed_objective(approx, alpha):
    # w.r.t. the inducing inputs Z, the kernel's lengthscales and variance, and the noise
    m = model(approx, alpha, N=15, M=5, chunk_size=4)
    params = tuple(m.parameters())
    assert {n for n, _ in m.named_parameters()} == {
        "raw_noise_variance", "kernel.raw_lengthscale", "kernel.raw_variance", "feature.Z"}
    assert torch.autograd.gradcheck(lambda *p: m.training_loss(), params, eps=1e-6, atol=1e-6)


def test_gradcheck_on_the_upper_bound_and_exact_objective():
    m = model("vfe", None, N=15, M=5, chunk_size=4)
    from sparsegp.objectives.collapsed.members import titsias_upper_bound

    def ub(*p):
        return titsias_upper_bound(m.collapsed_problem()._replace(chunk_size=4))

    assert torch.autograd.gradcheck(ub, tuple(m.parameters()), eps=1e-6, atol=1e-6)
    X, y = make_problem(5, N=12)
    g = sg.GPR(X, y, kernel=sg.kernels.Matern52(lengthscale=[0.9, 1.4]))
    assert torch.autograd.gradcheck(lambda *p: g.training_loss(), tuple(g.parameters()))


def test_fitc_is_pep_with_alpha_one_and_small_alpha_tends_to_vfe():
    fitc = model("fitc", None).log_marginal_likelihood()
    assert model("pep", 1.0).log_marginal_likelihood() == pytest.approx(fitc, rel=1e-14)
    vfe = model("vfe", None).log_marginal_likelihood()
    gaps = [abs(model("pep", a).log_marginal_likelihood() - vfe) for a in (1e-2, 1e-3, 1e-4)]
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[1] / gaps[2] == pytest.approx(10.0, rel=0.05)  # linear in α


def test_family_names_and_powers_are_validated():
    assert family("FITC").alpha == 1.0 and family("pep", 0.3).mode == "pep"
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            family("pep", bad)
    with pytest.raises(ValueError, match="alpha is required"):
        family("pep")
    with pytest.raises(TypeError, match="alpha"):
        family("pep", "0.5")
    with pytest.raises(ValueError, match="one of vfe, fitc, dtc, pep"):
        family("sor")
    with pytest.raises(ValueError, match="alpha applies only"):
        family("vfe", 0.5)
