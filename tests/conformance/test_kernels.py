"""Every registered kernel (a recipe each in `recipes.KERNELS`): K symmetric and positive
semi-definite, K_diag = diag K, K(X, X2) the block of K over both sets, K_blocks, config and
state_dict round trips, gradients against finite differences, float32 inputs."""

from __future__ import annotations

import copy

import pytest
import torch

from sparsegp.kernels import Kernel, RadialKernel, kernel_from_config
from sparsegp.kernels.stationary import scaled_squared_distance

from .helpers import assert_plain, assert_psd, gradcheck_through, perturb
from .recipes import built, cases

N, N2 = 7, 4


def covariance_cases(check):
    return cases("kernel", check, lambda case: case.covariance)


def build(name, case):
    return built("kernel", name, case, case.make())


def scale(K):
    return float(K.diagonal().abs().max().clamp_min(1e-300))


@pytest.mark.parametrize("name,case", covariance_cases("psd"))
def test_K_is_symmetric_and_positive_semidefinite(name, case):
    k = build(name, case)
    X = case.X(N, 0)
    X = torch.cat([X, X[:1]])  # a repeated input: K is singular there, still PSD
    assert_psd(k.K(X).detach(), f"{name} K(X, X)")


@pytest.mark.parametrize("name,case", covariance_cases("diag"))
def test_K_diag_is_the_diagonal_of_K(name, case):
    k = build(name, case)
    X = case.X(N, 0)
    K, d = k.K(X).detach(), k.K_diag(X).detach()
    assert d.shape == (N,)
    torch.testing.assert_close(d, K.diagonal(), rtol=1e-12, atol=1e-12 * scale(K))


@pytest.mark.parametrize("name,case", covariance_cases("block"))
def test_K_of_two_sets_is_the_block_of_K_over_both(name, case):
    k = build(name, case)
    X, X2 = case.X(N, 0), case.X(N2, 1)
    K = k.K(torch.cat([X, X2])).detach()
    tol = {"rtol": 1e-12, "atol": 1e-12 * scale(K)}
    cross = k.K(X, X2).detach()
    assert cross.shape == (N, N2)
    torch.testing.assert_close(cross, K[:N, N:], **tol)
    torch.testing.assert_close(k.K(X2, X).detach(), cross.mT, **tol)
    torch.testing.assert_close(k.K(X, X).detach(), K[:N, :N], **tol)


@pytest.mark.parametrize("name,case", covariance_cases("edges"))
def test_no_rows_and_one_row(name, case):
    k = build(name, case)
    X = case.X(N, 0)
    assert k.K(X[:0], X).shape == (0, N) and k.K(X, X[:0]).shape == (N, 0)
    assert k.K(X[:0]).shape == (0, 0) and k.K_diag(X[:0]).shape == (0,)
    one = k.K(X[:1]).detach()
    assert one.shape == (1, 1) and bool(torch.isfinite(one).all())
    torch.testing.assert_close(one[0], k.K_diag(X[:1]).detach(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("name,case", covariance_cases("blocks"))
def test_K_blocks_is_K_of_each_block(name, case):
    k = build(name, case)
    X = case.X(3 * 4, 2).reshape(3, 4, -1)
    blocks = k.K_blocks(X).detach()
    assert blocks.shape == (3, 4, 4)
    for b in range(3):
        Kb = k.K(X[b]).detach()
        torch.testing.assert_close(blocks[b], Kb, rtol=1e-12, atol=1e-12 * scale(Kb))


@pytest.mark.parametrize("name,case", cases("kernel", "config"))
def test_config_rebuilds_the_same_kernel(name, case):
    k = build(name, case)
    perturb(k)
    cfg = k.config()
    assert_plain(cfg)
    assert cfg["type"] == name
    back = Kernel.registry.build(copy.deepcopy(cfg))
    assert type(back) is type(k) and type(kernel_from_config(cfg)) is type(k)
    back.load_state_dict(k.state_dict())
    assert back.config() == cfg
    if case.covariance:
        X, X2 = case.X(N, 0), case.X(N2, 1)
        torch.testing.assert_close(back.K(X, X2), k.K(X, X2), rtol=0, atol=0)
        torch.testing.assert_close(back.K_diag(X), k.K_diag(X), rtol=0, atol=0)


@pytest.mark.parametrize("name,case", cases("kernel", "state"))
def test_state_dict_carries_every_value(name, case):
    k, fresh = build(name, case), build(name, case)
    perturb(k, seed=3)
    fresh.load_state_dict(k.state_dict())
    for (a, pa), (b, pb) in zip(k.named_parameters(), fresh.named_parameters()):
        assert a == b and torch.equal(pa, pb)
    if case.covariance:
        X = case.X(N, 0)
        torch.testing.assert_close(fresh.K(X), k.K(X), rtol=0, atol=0)


@pytest.mark.parametrize("name,case", covariance_cases("gradients"))
def test_gradients_match_finite_differences(name, case):
    # with respect to every (raw) parameter and to the inputs, of every entry of K(X, X2),
    # K(X, X) and K_diag(X); K_diag also with inputs that need no gradient (a kernel may take
    # a hand-written path then)
    k = build(name, case)
    X, X2 = case.X(5, 0).requires_grad_(), case.X(3, 1).requires_grad_()
    assert gradcheck_through([k], k.K, [X, X2])
    assert gradcheck_through([k], k.K, [X])
    assert gradcheck_through([k], k.K_diag, [X])
    assert gradcheck_through([k], k.K_diag, [X.detach()])


@pytest.mark.parametrize("name,case", cases("kernel", "profile",
                                            lambda case: isinstance(case.make(), RadialKernel)))
def test_a_radial_profile_and_its_derivative(name, case):
    # ρ(0) = 1, K = σ² ρ(r²), and the hand-written dρ/d(r²) that the exact GP's gradient uses
    # (None: autograd instead) is the derivative of ρ away from 0, and finite at r² = 0 (where
    # it only ever multiplies a zero distance)
    k = build(name, case)
    r2 = torch.tensor([0.0, 1e-3, 0.03, 0.4, 1.0, 2.5, 9.0], dtype=torch.float64)
    assert float(k.profile(r2[:1])) == 1.0
    X = case.X(N, 0)
    ell = k.value("lengthscale")
    torch.testing.assert_close(k.K(X).detach(), (k.value("variance") * k.profile(
        scaled_squared_distance(X, None, ell))).detach(), rtol=1e-12, atol=1e-14)
    derivative = k.profile_derivative(r2)
    if derivative is None:
        return
    assert bool(torch.isfinite(derivative).all())
    positive = r2[1:].clone().requires_grad_()
    (auto,) = torch.autograd.grad(k.profile(positive).sum(), positive)
    torch.testing.assert_close(derivative[1:], auto, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(k.profile, (positive,))


@pytest.mark.parametrize("name,case", covariance_cases("float32"))
def test_float32_inputs_give_float32_accuracy(name, case):
    # parameters stay float64 (a model's float32 work passes float32 inputs): the values are
    # finite, in float32 or float64, and agree with the float64 evaluation to float32 accuracy
    k = build(name, case)
    X, X2 = case.X(N, 0), case.X(N2, 1)
    ref, ref_diag = k.K(X, X2).detach(), k.K_diag(X).detach()
    K32, d32 = k.K(X.float(), X2.float()).detach(), k.K_diag(X.float()).detach()
    for value, expected in ((K32, ref), (d32, ref_diag)):
        assert value.dtype in (torch.float32, torch.float64)
        assert bool(torch.isfinite(value).all())
        torch.testing.assert_close(value.double(), expected, rtol=1e-5,
                                   atol=1e-5 * scale(k.K(X).detach()))


@pytest.mark.parametrize("name,case", cases("kernel", "refuses", lambda case: not case.covariance))
def test_a_kernel_without_a_covariance_of_its_own_says_so(name, case):
    k = build(name, case)
    X = case.X(N, 0)
    for call in (lambda: k.K(X), lambda: k.K(X, X), lambda: k.K_diag(X)):
        with pytest.raises(TypeError, match="no covariance of its own"):
            call()
