"""Second derivatives are right or refused, never silently wrong (`sparsegp.autograd`).

For every model with a `training_loss`: the Hessian-vector products of the loss with respect
to the trainable parameters equal central differences of the gradient, or differentiating the
gradient raises `SecondDerivativeError` (the first derivative staying right in both cases).
Each custom `torch.autograd.Function` passes gradcheck, and gradgradcheck where it claims a
second derivative; `torch.func.grad` gives the ordinary gradient (GPR) or a clear error (the
chunked objectives).
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.autograd import SecondDerivativeError, first_order_only

REFUSED = r"second derivatives of .+ are not supported: "

RNG = np.random.default_rng(0)
X = RNG.random((30, 2)) * 3
Y = np.sin(X.sum(1)) + 0.1 * RNG.standard_normal(30)
LABELS = (Y > np.median(Y)).astype(float)
Z = X[:5].copy()  # on data points, as k-means++ places inducing inputs
GROUPS = np.arange(30) % 3
IMAGES = RNG.random((20, 16))
IMAGE_Y = IMAGES.mean(1) + 0.05 * RNG.standard_normal(20)


def _sgpc():
    m = sg.SGPC(X, LABELS, inducing_points=Z)
    g = torch.Generator().manual_seed(3)  # sites away from 0, where the energy is flat
    m.tau = 0.5 + torch.rand(30, generator=g, dtype=torch.float64)
    m.nu = torch.randn(30, generator=g, dtype=torch.float64)
    return m


def _convolutional():
    return sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(4, 4),
                                    patch_shape=(2, 2), weighted=True)


# name -> (model builder, whether its second derivatives are right rather than refused)
MODELS = {
    "GPR": (lambda: sg.GPR(X, Y), True),
    "GPR-matern-groups-mean": (lambda: sg.GPR(X, Y, kernel=sg.kernels.Matern52(),
                                              noise_groups=GROUPS, mean=sg.means.Linear()),
                               True),
    "GPR-periodic": (lambda: sg.GPR(X, Y, kernel=sg.kernels.Periodic()), True),
    "SGPR-vfe": (lambda: sg.SGPR(X, Y, inducing_points=Z), False),
    "SGPR-dtc": (lambda: sg.SGPR(X, Y, inducing_points=Z, approximation="dtc"), False),
    "SGPR-fitc": (lambda: sg.SGPR(X, Y, inducing_points=Z, approximation="fitc"), False),
    "SGPR-pep": (lambda: sg.SGPR(X, Y, inducing_points=Z, approximation="pep", alpha=0.5),
                 False),
    "SGPR-block-pep": (lambda: sg.SGPR(X, Y, inducing_points=Z, approximation="pep",
                                       alpha=0.5, blocks=GROUPS), False),
    "SGPR-groups": (lambda: sg.SGPR(X, Y, inducing_points=Z, noise_groups=GROUPS), False),
    "SVGP": (lambda: sg.SVGP(X, Y, inducing_points=Z), True),
    "SVGP-bernoulli": (lambda: sg.SVGP(X, LABELS, likelihood=sg.likelihoods.Bernoulli(),
                                       inducing_points=Z), True),
    "SVGP-patches": (lambda: sg.SVGP(IMAGES, IMAGE_Y, kernel=_convolutional(),
                                     inducing_points=sg.features.InducingPatches(
                                         RNG.random((4, 4)))), True),
    "SGPC": (_sgpc, True),
    "KISSGP": (lambda: sg.KISSGP(X, Y, grid_size=10), False),
    "RFF": (lambda: sg.RFF(X, Y, num_features=8), False),
    "SSGP": (lambda: sg.SSGP(X, Y, num_features=8), False),
    "BayesianGPLVM": (lambda: sg.BayesianGPLVM(np.c_[X, Y], latent_dim=1, inducing_points=5),
                      False),
    "GPSSM": (lambda: sg.GPSSM(np.c_[X, Y], state_dim=1, inducing_points=5), False),
}


# the gradient is an estimator (stochastic trace estimates), not the estimate's derivative
ESTIMATED_GRADIENT = {"KISSGP"}


def build(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MODELS[name][0]()


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def gradient_at(model, params, direction, step):
    """∇ training_loss (first order, the hand-written path) at params + step·direction."""
    with torch.no_grad():
        for p, v in zip(params, direction):
            p.add_(step * v)
    try:
        loss = model.training_loss()
        return loss.detach(), torch.autograd.grad(loss, params, allow_unused=True)
    finally:
        with torch.no_grad():
            for p, v in zip(params, direction):
                p.sub_(step * v)


def flat(tensors, like):
    return torch.cat([(torch.zeros_like(p) if t is None else t).reshape(-1)
                      for t, p in zip(tensors, like)])


@pytest.mark.parametrize("name", list(MODELS))
def test_second_derivative_of_the_training_loss_is_right_or_refused(name):
    model = build(name)
    params = trainable(model)
    g = torch.Generator().manual_seed(1)
    direction = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]
    eps = 1e-5
    # first order, whichever way: the directional derivative against central differences
    (f_plus, g_plus), (f_minus, g_minus) = (gradient_at(model, params, direction, s * eps)
                                            for s in (1.0, -1.0))
    _, grad = gradient_at(model, params, direction, 0.0)
    slope = float(flat(grad, params) @ flat(direction, params))
    if name not in ESTIMATED_GRADIENT:
        assert slope == pytest.approx(float(f_plus - f_minus) / (2 * eps), rel=1e-6, abs=1e-8)

    loss = model.training_loss()
    with_graph = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    # the gradient taken with a graph has the same values
    torch.testing.assert_close(flat(with_graph, params).detach(), flat(grad, params),
                               rtol=1e-10, atol=1e-10)
    gv = sum((t * v).sum() for t, v in zip(with_graph, direction) if t is not None)
    if not MODELS[name][1]:
        with pytest.raises(SecondDerivativeError, match=REFUSED):
            torch.autograd.grad(gv, params, allow_unused=True)
        return
    Hv = flat(torch.autograd.grad(gv, params, allow_unused=True), params)
    fd = (flat(g_plus, params) - flat(g_minus, params)) / (2 * eps)
    torch.testing.assert_close(Hv, fd, rtol=1e-6, atol=1e-6 * float(fd.abs().max()))


def _as_function_of_theta(model):
    """(θ, loss(θ)): the trainable parameters flattened, and training_loss as their function."""
    params = _named_trainable(model)
    keys, shapes = list(params), [v.shape for v in params.values()]
    sizes = [v.numel() for v in params.values()]
    wrapped = _Wrapped(model)

    def loss(t):
        parts = dict(zip(keys, (c.reshape(s) for c, s in zip(t.split(sizes), shapes))))
        return torch.func.functional_call(wrapped, parts, ())

    return torch.cat([v.reshape(-1) for v in params.values()]), loss


def test_the_reported_hessians_gpr_right_and_sgpr_refused():
    """The bug report: GPR's Hessian diagonal was off by up to 3.66 and SGPR's had the wrong
    sign (the hand-written part dropped silently by `once_differentiable`)."""
    model = build("GPR")
    theta, loss = _as_function_of_theta(model)
    H = torch.autograd.functional.hessian(loss, theta)
    eps = 1e-5
    rows = []
    for i in range(theta.numel()):
        e = torch.zeros_like(theta)
        e[i] = eps
        grads = [torch.func.grad(loss)(theta + s * e) for s in (1.0, -1.0)]
        rows.append((grads[0] - grads[1]) / (2 * eps))
    torch.testing.assert_close(H, torch.stack(rows), rtol=1e-6, atol=1e-6)

    sgpr = build("SGPR-vfe")
    params = trainable(sgpr)
    grads = torch.autograd.grad(sgpr.training_loss(), params, create_graph=True)
    with pytest.raises(SecondDerivativeError, match=REFUSED + ".*hand-written"):
        torch.autograd.functional.hessian(
            lambda v: torch.func.functional_call(_Wrapped(sgpr), {"m.kernel.raw_variance": v}, ()),
            sgpr.kernel.raw_variance.detach())
    with pytest.raises(SecondDerivativeError, match=REFUSED):
        torch.autograd.grad(grads[1].sum(), params[1])  # the lengthscales: through the chunked sums
    # σ² reaches VFE's objective outside the chunked sums: its own second derivative is
    # autograd's, right (the bug report's one correct entry)
    (h,) = torch.autograd.grad(grads[0], params[0])
    _, (gp, *_) = gradient_at(sgpr, params[:1], [torch.tensor(1e-5)], 1.0)
    _, (gm, *_) = gradient_at(sgpr, params[:1], [torch.tensor(1e-5)], -1.0)
    assert float(h) == pytest.approx(float(gp - gm) / 2e-5, rel=1e-6)


class _Wrapped(torch.nn.Module):
    """training_loss as a module's forward, for torch.func.functional_call."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self):
        return self.m.training_loss()


def _named_trainable(model):
    return {"m." + n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("name", ["GPR", "GPR-matern-groups-mean", "GPR-periodic"])
def test_func_grad_gives_the_ordinary_gradient_and_nests(name):
    model = build(name)
    wrapped = _Wrapped(model)
    params = _named_trainable(model)

    def loss(p):
        return torch.func.functional_call(wrapped, p, ())

    g = torch.func.grad(loss)(params)
    wrapped.zero_grad()
    model.training_loss().backward()
    for n, p in wrapped.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(g[n], p.grad, rtol=0, atol=1e-10)
    # nested: the Hessian's row sums, against autograd's Hessian
    nested = torch.func.grad(lambda p: sum(v.sum() for v in torch.func.grad(loss)(p).values()))
    row_sums = torch.cat([v.reshape(-1) for v in nested(params).values()])
    theta, of_theta = _as_function_of_theta(model)
    H = torch.autograd.functional.hessian(of_theta, theta)
    torch.testing.assert_close(row_sums, H.sum(1), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("name", ["SGPR-vfe", "SGPR-fitc", "RFF", "BayesianGPLVM"])
def test_func_grad_of_chunked_objectives_is_a_clear_error(name):
    model = build(name)
    with pytest.raises(RuntimeError, match="torch.func transforms .* not supported"):
        torch.func.grad(lambda p: torch.func.functional_call(_Wrapped(model), p, ()))(
            _named_trainable(model))


def test_vmap_over_the_exact_evidence_is_a_clear_error():
    model = build("GPR")
    wrapped = _Wrapped(model)
    params = _named_trainable(model)
    batched = {k: torch.stack([v, v]) for k, v in params.items()}
    with pytest.raises(RuntimeError, match="vmap"):
        torch.func.vmap(torch.func.grad(lambda p: torch.func.functional_call(wrapped, p, ())))(
            batched)


# -- the Functions themselves ------------------------------------------------------------

def _dd(*shape, seed=0, positive=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(shape, generator=g, dtype=torch.float64)
    return (0.5 + t if positive else t - 0.5).requires_grad_(True)


def test_exact_evidence_gradcheck_and_gradgradcheck():
    from sparsegp.objectives.exact import exact_log_marginal_likelihood

    B, y = _dd(6, 6, seed=1), _dd(6, seed=2)
    for noise in (_dd(seed=3, positive=True), _dd(6, seed=4, positive=True)):
        def f(B, y, noise):
            return exact_log_marginal_likelihood(B @ B.mT, y, noise)

        assert torch.autograd.gradcheck(f, (B, y, noise))
        assert torch.autograd.gradgradcheck(f, (B, y, noise))


@pytest.mark.parametrize("name", ["SquaredExponential", "Matern52"])
def test_radial_evidence_gradcheck_and_gradgradcheck(name, monkeypatch):
    from sparsegp.objectives import exact

    monkeypatch.setattr(exact, "_row_blocks",  # several blocks of rows, one of them short
                        lambda X: list(exact.chunk_slices(X.shape[0], 3)))
    kernel = getattr(sg.kernels, name)()
    X = torch.rand(7, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 2
    for ell in (_dd(2, seed=6, positive=True), _dd(seed=6, positive=True)):
        def f(y, noise, ell, var):
            return exact._RadialEvidence.apply(y, noise, ell, var, X, kernel, 0.0)[0]

        inputs = (_dd(7, seed=7), _dd(seed=8, positive=True), ell, _dd(seed=9, positive=True))
        assert torch.autograd.gradcheck(f, inputs)
        assert torch.autograd.gradgradcheck(f, inputs)


def test_blocked_gradcheck_and_gradgradcheck():
    from sparsegp.runtime.checkpointing import blocked

    W, v = _dd(5, 3, seed=10), _dd(3, seed=11)

    def f(W, v):
        return blocked(lambda s: torch.sin(W[s:s + 2] @ v) * (W * W).sum(), range(0, 5, 2), 0,
                       (W, v))

    assert torch.autograd.gradcheck(f, (W, v))
    assert torch.autograd.gradgradcheck(f, (W, v))


@pytest.mark.parametrize("weighted", [True, False])
def test_convolutional_functions_gradcheck_and_gradgradcheck(weighted):
    from sparsegp.covariances.patches import _SquaredExponentialPatches
    from sparsegp.kernels.convolutional import _SquaredExponentialDiagonal

    kernel = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(3, 3),
                                      patch_shape=(2, 2), weighted=weighted)
    X = torch.rand(5, 9, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    Z, ell, var = _dd(3, 4, seed=13), _dd(4, seed=14, positive=True), _dd(seed=15, positive=True)
    w = _dd(1, 4, seed=16, positive=True) if weighted else None
    inputs = (Z, ell, var) + ((w,) if weighted else ())

    def kuf(Z, ell, var, *w):  # rows=2: three blocks of images
        return _SquaredExponentialPatches.apply(kernel, X, 2, Z, ell, var, *(w or (None,)))

    def kdiag(ell, var, *w):
        return _SquaredExponentialDiagonal.apply(kernel, X, 2, ell, var, *(w or (None,)))

    assert torch.autograd.gradcheck(kuf, inputs)
    assert torch.autograd.gradgradcheck(kuf, inputs)
    assert torch.autograd.gradcheck(kdiag, inputs[1:])
    assert torch.autograd.gradgradcheck(kdiag, inputs[1:])


def test_summed_gradient_is_twice_differentiable(monkeypatch):
    """With a stand-in for two ranks holding the same values (the all-reduce doubles), the
    all-reduce of the gradient is a linear map 2I: `_AllReduced` passes gradgradcheck, and
    `_SummedGradient`'s gradient taken with a graph is differentiable."""
    from sparsegp import distributed

    def doubled(tensors, what, op="sum"):
        for t in tensors:
            t.mul_(2.0)

    monkeypatch.setattr(distributed, "all_reduce_", doubled)
    t = _dd(4, seed=17)
    assert torch.autograd.gradcheck(distributed._AllReduced.apply, (t,))
    assert torch.autograd.gradgradcheck(distributed._AllReduced.apply, (t,))
    (gt,) = torch.autograd.grad((distributed._SummedGradient.apply(t) ** 3).sum(), t,
                                create_graph=True)
    torch.testing.assert_close(gt, 2.0 * 3.0 * t.detach() ** 2)
    (h,) = torch.autograd.grad(gt.sum(), t)
    assert torch.isfinite(h).all() and bool((h != 0).any())


def test_chunked_sum_refuses_through_any_route():
    """`.backward()` of the gradient, autograd.grad with respect to one parameter, a
    Hessian: each raises, whether or not the incoming gradient requires grad."""
    model = build("SGPR-fitc")
    params = trainable(model)
    for scale in (lambda F: -F, lambda F: F * F):  # constant and differentiable ∂/∂F
        grads = torch.autograd.grad(scale(model.training_loss()), params, create_graph=True)
        with pytest.raises(SecondDerivativeError, match=REFUSED):
            torch.autograd.grad(grads[1].sum(), params[1])
        grads = torch.autograd.grad(scale(model.training_loss()), params, create_graph=True)
        with pytest.raises(SecondDerivativeError, match=REFUSED):
            sum(g.sum() for g in grads).backward()


def test_first_order_only_refuses_at_once_without_anything_to_link_to():
    g = torch.ones(3)
    with torch.enable_grad():
        with pytest.raises(SecondDerivativeError, match="second derivatives of x are not"):
            first_order_only((g,), (torch.ones(1),), "x", "y")
    with torch.no_grad():
        assert first_order_only((g,), (), "x", "y")[0] is g


def test_every_autograd_function_of_the_package_has_setup_context():
    import importlib
    import pkgutil

    import sparsegp

    found = []
    for info in pkgutil.walk_packages(sparsegp.__path__, "sparsegp."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, torch.autograd.Function) and cls.__module__ == info.name
                    and cls is not torch.autograd.Function):
                found.append(cls)
                assert "setup_context" in vars(cls), cls
                assert "ctx" not in inspect.signature(cls.forward).parameters, cls
                src = inspect.getsource(cls)
                assert "once_differentiable" not in src, cls
    assert len(found) >= 7
