"""Kernels against explicit elementwise formulas; composition; parameters; initialisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.kernels import kernel_from_config

rng = np.random.default_rng(1)
X = rng.normal(size=(7, 3))
X2 = rng.normal(size=(5, 3))
ELL = np.array([0.5, 1.3, 2.0])


def pairwise(fn, A, B):
    return np.array([[fn(a, b) for b in B] for a in A])


def r_of(a, b, ell):
    return np.sqrt(np.sum(((a - b) / ell) ** 2))


REFERENCES = {
    sg.kernels.SquaredExponential: lambda a, b, l, v: v * np.exp(-0.5 * r_of(a, b, l) ** 2),
    sg.kernels.Matern12: lambda a, b, l, v: v * np.exp(-r_of(a, b, l)),
    sg.kernels.Matern32: lambda a, b, l, v: v * (1 + np.sqrt(3) * r_of(a, b, l))
    * np.exp(-np.sqrt(3) * r_of(a, b, l)),
    sg.kernels.Matern52: lambda a, b, l, v: v * (1 + np.sqrt(5) * r_of(a, b, l)
                                                 + 5 / 3 * r_of(a, b, l) ** 2)
    * np.exp(-np.sqrt(5) * r_of(a, b, l)),
}


def t(a):
    return torch.as_tensor(a, dtype=torch.float64)


@pytest.mark.parametrize("cls", list(REFERENCES))
@pytest.mark.parametrize("ell", [0.8, ELL])
def test_stationary_kernels_match_elementwise_formula(cls, ell):
    k = cls(lengthscale=ell, variance=1.7)
    ref = pairwise(lambda a, b: REFERENCES[cls](a, b, ell, 1.7), X, X2)
    np.testing.assert_allclose(k.K(t(X), t(X2)).detach().numpy(), ref, rtol=1e-12, atol=1e-13)
    ref_sym = pairwise(lambda a, b: REFERENCES[cls](a, b, ell, 1.7), X, X)
    K = k.K(t(X)).detach().numpy()
    np.testing.assert_allclose(K, ref_sym, rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(np.diag(K), k.K_diag(t(X)).detach().numpy())
    assert k.ard == (np.ndim(ell) == 1)


def test_distances_are_accurate_far_from_the_origin():
    # Cancellation in ‖x‖² + ‖x'‖² − 2xᵀx' is limited by centring the inputs.
    k = sg.kernels.Matern12(lengthscale=0.1, variance=1.0)
    A = 1e4 + np.array([[0.0], [1e-3]])
    K = k.K(t(A)).detach().numpy()
    np.testing.assert_allclose(K[0, 1], np.exp(-1e-2), rtol=1e-9)


def test_linear_constant_periodic():
    v = np.array([0.3, 2.0, 1.1])
    lin = sg.kernels.Linear(variance=v)
    np.testing.assert_allclose(lin.K(t(X), t(X2)).detach().numpy(), (X * v) @ X2.T, rtol=1e-13)
    np.testing.assert_allclose(lin.K_diag(t(X)).detach().numpy(), np.sum(X * X * v, 1), rtol=1e-13)
    const = sg.kernels.Constant(variance=0.4)
    np.testing.assert_allclose(const.K(t(X), t(X2)).detach().numpy(), np.full((7, 5), 0.4))
    per = sg.kernels.Periodic(lengthscale=ELL, variance=0.9, period=[1.5, 2.5, 0.7])
    ref = pairwise(lambda a, b: 0.9 * np.exp(-2 * np.sum(
        np.sin(np.pi * (a - b) / np.array([1.5, 2.5, 0.7])) ** 2 / ELL**2)), X, X2)
    np.testing.assert_allclose(per.K(t(X), t(X2)).detach().numpy(), ref, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(per.K_diag(t(X)).detach().numpy(), np.diag(per.K(t(X)).detach().numpy()))
    # Exactly periodic: shifting an input by one period in its dimension changes nothing.
    Xs = X.copy()
    Xs[:, 0] += 1.5
    np.testing.assert_allclose(per.K(t(Xs), t(X2)).detach().numpy(), ref, rtol=1e-9, atol=1e-12)


def test_sum_and_product_and_flattening():
    k1 = sg.kernels.SquaredExponential(lengthscale=0.7, variance=1.2)
    k2 = sg.kernels.Matern32(lengthscale=1.4, variance=0.5)
    k3 = sg.kernels.Linear(variance=0.2)
    s = k1 + k2 + k3
    p = k1 * k2 * k3
    assert len(s.kernels) == 3 and len(p.kernels) == 3
    A, B = t(X), t(X2)
    with torch.no_grad():
        np.testing.assert_allclose(s.K(A, B), k1.K(A, B) + k2.K(A, B) + k3.K(A, B), rtol=1e-14)
        np.testing.assert_allclose(p.K(A, B), k1.K(A, B) * k2.K(A, B) * k3.K(A, B), rtol=1e-14)
        np.testing.assert_allclose(s.K_diag(A), torch.diagonal(s.K(A)), rtol=1e-14)
        np.testing.assert_allclose(p.K_diag(A), torch.diagonal(p.K(A)), rtol=1e-14)
    # Parameters are shared with the parts and reachable by dotted names.
    assert "kernels.0.lengthscale" in s.parameter_names()


@pytest.mark.parametrize("kernel", [
    sg.kernels.SquaredExponential(lengthscale=ELL, variance=1.3),
    sg.kernels.Matern52(lengthscale=0.9),
    sg.kernels.Matern32(lengthscale=ELL),
    sg.kernels.Periodic(lengthscale=1.2, period=2.0),
    sg.kernels.SquaredExponential(lengthscale=0.8) * sg.kernels.Linear(variance=0.5)
    + sg.kernels.Constant(variance=0.3),
], ids=repr)
def test_kernel_matrices_are_positive_semidefinite(kernel):
    A = t(np.random.default_rng(2).normal(size=(30, 3)))
    K = kernel.K(A)
    assert torch.allclose(K, K.mT)
    assert float(torch.linalg.eigvalsh(K.detach()).min()) > -1e-10 * float(K.detach().diagonal().max())


def test_gradients_through_kernel_match_finite_differences():
    k = sg.kernels.Matern52(lengthscale=ELL, variance=1.1) + sg.kernels.Periodic(period=1.7)
    A = t(X).requires_grad_(True)
    B = t(X2).requires_grad_(True)
    params = list(k.parameters())
    assert torch.autograd.gradcheck(lambda a, b, *p: k.K(a, b), (A, B, *params))


def test_parameters_are_positive_through_softplus_with_a_floor():
    k = sg.kernels.SquaredExponential(lengthscale=0.5, variance=2.0)
    assert k.lengthscale == pytest.approx(0.5, rel=1e-14)
    with torch.no_grad():
        k.raw_variance.fill_(-1e4)  # any raw value maps to a valid variance
    assert k.variance >= 1e-6
    with pytest.raises(ValueError, match=r"reshape=True"):
        k.lengthscale = [0.1, 0.2]  # a scalar lengthscale keeps its shape on assignment
    k.set_value("lengthscale", [0.1, 0.2], reshape=True)  # becomes ARD: explicitly
    assert k.lengthscale.shape == (2,)
    for bad in (-1.0, 0.0, float("nan"), float("inf"), [[1.0]]):
        with pytest.raises(ValueError, match="lengthscale"):
            k.lengthscale = bad
    with pytest.raises(ValueError, match="variance"):
        sg.kernels.Matern12(variance=-2.0)


def test_input_dimension_mismatch_is_an_error():
    k = sg.kernels.SquaredExponential(lengthscale=[1.0, 2.0])
    with pytest.raises(ValueError, match="3 columns"):
        k.K(t(X))
    with pytest.raises(ValueError, match="2-D"):
        sg.kernels.Matern32().K(t(X[:, 0]))


def test_unset_parameters_start_from_the_data_and_given_ones_stay():
    A = t(np.random.default_rng(3).normal(size=(50, 2)) * np.array([1.0, 10.0]))
    k = sg.kernels.SquaredExponential(ard=True)
    k.initialise_from_data(A, 3.0)
    assert k.variance == pytest.approx(3.0)
    assert k.lengthscale[1] / k.lengthscale[0] == pytest.approx(float(A[:, 1].std() / A[:, 0].std()))
    k2 = sg.kernels.SquaredExponential(lengthscale=0.3)
    k2.initialise_from_data(A, 3.0)
    assert k2.lengthscale == pytest.approx(0.3) and k2.variance == pytest.approx(3.0)
    s = sg.kernels.Matern12() + sg.kernels.Matern52(variance=5.0)
    s.initialise_from_data(A, 4.0)
    assert s.kernels[0].variance == pytest.approx(2.0) and s.kernels[1].variance == pytest.approx(5.0)
    p = sg.kernels.Periodic(ard=True)  # gave one scalar lengthscale
    p.initialise_from_data(A, 3.0)
    np.testing.assert_array_equal(p.lengthscale, [1.0, 1.0])
    assert p.period == 1.0
    assert np.isfinite(sg.GPR(A.numpy(), A[:, 0].numpy(), kernel=p).log_marginal_likelihood())


def test_config_rebuilds_the_structure():
    k = sg.kernels.SquaredExponential(lengthscale=ELL) * sg.kernels.Periodic(period=2.0) \
        + sg.kernels.Linear()
    k2 = kernel_from_config(k.config())
    k2.load_state_dict(k.state_dict())
    np.testing.assert_array_equal(k.K(t(X), t(X2)).detach(), k2.K(t(X), t(X2)).detach())
    with pytest.raises(ValueError, match="unknown kernel"):
        kernel_from_config({"type": "NoSuchKernel", "args": {}})


@pytest.mark.parametrize("make", [
    lambda: sg.kernels.SquaredExponential(lengthscale=[0.5, 2.0]),
    lambda: sg.kernels.Matern52(lengthscale=0.7, variance=1.5),
    lambda: sg.kernels.Linear(variance=0.4),
    lambda: sg.kernels.Periodic(),
    lambda: sg.kernels.Matern12() * sg.kernels.Linear() + sg.kernels.SquaredExponential(),
])
def test_k_blocks_equals_k_of_each_block(make, monkeypatch):
    from sparsegp.kernels import base
    monkeypatch.setattr(base, "BLOCK_ROWS", 10)  # the default splits batches of blocks
    k = make()
    X = torch.randn(7, 4, 2, dtype=torch.float64)
    blocks = k.K_blocks(X)
    assert blocks.shape == (7, 4, 4)
    for b in range(7):
        torch.testing.assert_close(blocks[b], k.K(X[b]), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kernel", [
    sg.kernels.SquaredExponential(), sg.kernels.Matern12(), sg.kernels.Periodic(),
    sg.kernels.Linear(), sg.kernels.Constant(), sg.kernels.Linear() + sg.kernels.Constant(),
    sg.kernels.Matern32() * sg.kernels.Linear()], ids=lambda k: type(k).__name__)
def test_inputs_of_different_columns_are_named(kernel):
    A, B = t(np.ones((3, 2))), t(np.ones((4, 3)))
    with pytest.raises(ValueError, match="X has 2 columns but X2 has 3"):
        kernel.K(A, B)  # Linear: torch's "cannot be multiplied"; Constant: a (3, 4) matrix
    assert tuple(kernel.K(A, t(np.ones((4, 2)))).shape) == (3, 4)
