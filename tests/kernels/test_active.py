"""Kernels on some input columns: slicing, additive models against a dense formula and against
models of the sliced data, the sparse models with inducing points of every column, configs,
gradients and refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.kernels import kernel_from_config

from ..conformance.helpers import gradcheck_through

K_ = sg.kernels
rng = np.random.default_rng(11)
X = rng.normal(size=(8, 4))
X2 = rng.normal(size=(5, 4))


def t(a):
    return torch.as_tensor(a, dtype=torch.float64)


def se_dense(A, B, ell, variance):
    d2 = (((A[:, None, :] - B[None, :, :]) / ell) ** 2).sum(-1)
    return variance * np.exp(-0.5 * d2)


def additive():
    return (K_.Active(K_.SquaredExponential(lengthscale=0.7, variance=1.3), [0])
            + K_.Active(K_.SquaredExponential(lengthscale=[0.9, 1.6], variance=0.6), [3, 1]))


def additive_dense(A, B):
    return (se_dense(A[:, [0]], B[:, [0]], 0.7, 1.3)
            + se_dense(A[:, [3, 1]], B[:, [3, 1]], np.array([0.9, 1.6]), 0.6))


def test_is_the_inner_kernel_of_the_sliced_inputs():
    inner = K_.Matern52(lengthscale=[0.8, 1.4], variance=0.9)
    k = K_.Active(inner, [2, 0])
    for got, expected in ((k.K(t(X), t(X2)), inner.K(t(X[:, [2, 0]]), t(X2[:, [2, 0]]))),
                          (k.K(t(X)), inner.K(t(X[:, [2, 0]]))),
                          (k.K_diag(t(X)), inner.K_diag(t(X[:, [2, 0]])))):
        torch.testing.assert_close(got, expected, rtol=1e-14, atol=1e-15)
    blocks = t(X).reshape(2, 4, 4)
    torch.testing.assert_close(k.K_blocks(blocks), inner.K_blocks(blocks[..., [2, 0]]),
                               rtol=1e-14, atol=1e-15)


def test_an_additive_kernel_matches_the_dense_formula():
    k = additive()
    assert isinstance(k, K_.Sum) and k.input_dim is None
    np.testing.assert_allclose(k.K(t(X), t(X2)).detach().numpy(), additive_dense(X, X2),
                               rtol=1e-12, atol=1e-14)
    K = k.K(t(X)).detach()
    np.testing.assert_allclose(K.numpy(), additive_dense(X, X), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(k.K_diag(t(X)), K.diagonal(), rtol=1e-14, atol=0)
    assert float(torch.linalg.eigvalsh(K).min()) >= -1e-12


def test_gradients_match_finite_differences():
    k = additive() * K_.Active(K_.Linear(variance=0.4), [2])
    A, B = t(X[:5]).requires_grad_(), t(X2[:3]).requires_grad_()
    assert gradcheck_through([k], k.K, [A, B], atol=1e-7, rtol=1e-6)
    assert gradcheck_through([k], k.K, [A], atol=1e-7, rtol=1e-6)
    assert gradcheck_through([k], k.K_diag, [A], atol=1e-7, rtol=1e-6)


def _regression(n=40, seed=0):
    r = np.random.default_rng(seed)
    A = r.uniform(-2.0, 2.0, (n, 3))
    y = np.sin(2.0 * A[:, 0]) + 0.5 * A[:, 2] ** 2 + 0.05 * r.standard_normal(n)
    return A, y


def test_gpr_evidence_of_an_additive_model_is_the_dense_one():
    A, y = _regression()
    k = (K_.Active(K_.SquaredExponential(lengthscale=0.7, variance=1.3), [0])
         + K_.Active(K_.SquaredExponential(lengthscale=0.9, variance=0.6), [2]))
    m = sg.GPR(A, y, kernel=k, noise_variance=0.05, standardize_y=False)
    C = se_dense(A[:, [0]], A[:, [0]], 0.7, 1.3) + se_dense(A[:, [2]], A[:, [2]], 0.9, 0.6)
    C += 0.05 * np.eye(len(A))
    _, logdet = np.linalg.slogdet(C)
    lml = -0.5 * (y @ np.linalg.solve(C, y) + logdet + len(A) * np.log(2 * np.pi))
    assert m.log_marginal_likelihood() == pytest.approx(lml, rel=1e-10)


@pytest.mark.parametrize("model", ["GPR", "SGPR"])
def test_a_fit_on_some_columns_is_the_fit_on_the_sliced_data(model):
    # the same objective from the same data-based start: the same optimum, to rounding
    A, y = _regression()
    options = {"inducing_points": A[::4].copy()} if model == "SGPR" else {}
    sliced = {"inducing_points": A[::4][:, [2, 0]].copy()} if model == "SGPR" else {}
    full = getattr(sg, model)(A, y, kernel=K_.Active(K_.SquaredExponential(ard=True), [2, 0]),
                              **options)
    part = getattr(sg, model)(A[:, [2, 0]], y, kernel=K_.SquaredExponential(ard=True), **sliced)
    assert full.log_marginal_likelihood() == pytest.approx(part.log_marginal_likelihood(),
                                                           rel=1e-12)
    if model == "SGPR":  # the same inducing points in both: hold them
        full.freeze("feature.Z")
        part.freeze("feature.Z")
    assert full.fit(maxiter=200).success and part.fit(maxiter=200).success
    assert full.log_marginal_likelihood() == pytest.approx(part.log_marginal_likelihood(),
                                                           rel=1e-8)
    np.testing.assert_allclose(full.kernel.kernel.lengthscale, part.kernel.lengthscale, rtol=1e-5)


def test_sgpr_with_inducing_points_at_the_data_is_the_exact_gp():
    A, y = _regression(30)
    make = lambda: (K_.Active(K_.Matern32(lengthscale=0.8, variance=1.0), [0])  # noqa: E731
                    + K_.Active(K_.SquaredExponential(lengthscale=[1.1, 0.9], variance=0.7), [1, 2]))
    exact = sg.GPR(A, y, kernel=make(), noise_variance=0.05, standardize_y=False)
    sparse = sg.SGPR(A, y, kernel=make(), inducing_points=A.copy(), noise_variance=0.05,
                     jitter=0.0, standardize_y=False)
    assert sparse.inducing_points.shape == (30, 3)
    assert sparse.log_marginal_likelihood() == pytest.approx(exact.log_marginal_likelihood(),
                                                             rel=1e-10)


@pytest.mark.parametrize("model", ["SGPR", "SVGP"])
def test_sparse_models_fit_an_additive_model_and_save(model, tmp_path):
    r = np.random.default_rng(1)
    A = r.uniform(-2.0, 2.0, (60, 3))
    y = np.sin(2.0 * A[:, 0]) + np.cos(1.5 * A[:, 1]) + 0.5 * A[:, 2] ** 2
    y += 0.05 * r.standard_normal(60)
    kernel = (K_.Active(K_.SquaredExponential(), [0]) + K_.Active(K_.SquaredExponential(), [1])
              + K_.Active(K_.SquaredExponential(), [2]))
    m = getattr(sg, model)(A, y, kernel=kernel, inducing_points=12)
    assert m.inducing_points.shape == (12, 3)
    start = m.log_marginal_likelihood() if model == "SGPR" else m.elbo()
    assert m.fit(maxiter=1000).success
    end = m.log_marginal_likelihood() if model == "SGPR" else m.elbo()
    assert end > start + 1.0
    mean, _ = m.predict(A)
    assert np.sqrt(np.mean((mean - y) ** 2)) < 0.2 * np.std(y)
    m.save(tmp_path / "model.pt", include_data=True)
    loaded = sg.load(tmp_path / "model.pt")
    assert [part.dims for part in loaded.kernel.kernels] == [[0], [1], [2]]
    for a, b in zip(loaded.predict(A[:5]), m.predict(A[:5])):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_unset_values_start_from_the_sliced_columns():
    data = t(rng.normal(size=(50, 3)) * [1.0, 5.0, 0.2])
    k = K_.Active(K_.SquaredExponential(ard=True), [1, 2])
    k.initialise_from_data(data, 2.0)
    ref = K_.SquaredExponential(ard=True)
    ref.initialise_from_data(data[:, [1, 2]], 2.0)
    np.testing.assert_allclose(k.kernel.lengthscale, ref.lengthscale, rtol=0)
    assert k.kernel.variance == pytest.approx(2.0)


def test_config_round_trip():
    k = additive() * K_.Active(K_.Periodic(lengthscale=0.9, variance=1.0, period=1.3), 2)
    cfg = k.config()
    assert cfg["kernels"][1] == {"type": "Active", "dims": [2], "kernel": cfg["kernels"][1]["kernel"]}
    back = kernel_from_config(cfg)
    back.load_state_dict(k.state_dict())
    assert back.config() == cfg and repr(back) == repr(k)
    torch.testing.assert_close(back.K(t(X), t(X2)), k.K(t(X), t(X2)), rtol=0, atol=0)


def test_inter_domain_features_refuse_it_clearly():
    A, y = _regression(20)
    kernel = K_.Active(K_.SquaredExponential(lengthscale=0.8), [0, 1, 2])
    feature = sg.features.Multiscale(A[:5].copy(), scales=0.3)
    with pytest.raises(TypeError, match="feature Multiscale with the kernel Active"):
        sg.SGPR(A, y, kernel=kernel, inducing_points=feature)


def test_refusals():
    for dims in ([], [-1], [0, 0], [0.5], "0", True, None):
        with pytest.raises(ValueError, match="dims must"):
            K_.Active(K_.SquaredExponential(), dims)
    with pytest.raises(TypeError, match="Active takes a kernel"):
        K_.Active("rbf", [0])
    with pytest.raises(ValueError, match="acts on input columns \\[0, 4\\], but the inputs have 4"):
        K_.Active(K_.SquaredExponential(), [0, 4]).K(t(X))
    conv = K_.Convolutional(K_.SquaredExponential(), image_shape=(3, 3), patch_shape=(2, 2))
    with pytest.raises(ValueError, match="requires inputs of 9 columns but Active gives it 2"):
        K_.Active(conv, [0, 1])
    with pytest.raises(ValueError, match="lengthscale has shape"):
        K_.Active(K_.SquaredExponential(lengthscale=[1.0, 2.0, 3.0]), [0, 1]).K(t(X))


def test_the_diagnostics_of_a_model_with_a_kernel_on_some_columns():
    # the inducing checks compare correlations (a lengthscale of two columns is no distance
    # in all of them), and a far lengthscale names the input column it belongs to
    from sparsegp.diagnostics.starts import far_lengthscales
    A, y = _regression(30)
    m = sg.SGPR(A, y, kernel=K_.Active(K_.SquaredExponential(ard=True), [2, 0]),
                inducing_points=8)
    report = m.diagnostics()
    assert report.effective_num_inducing is not None  # the placement checks ran
    k = K_.Active(K_.SquaredExponential(lengthscale=[1e6, 0.1]), [2, 0])
    found = far_lengthscales(k, torch.as_tensor(A))
    assert found is not None and "input column 2" in found and "column 0" not in found


def test_a_models_summary_names_the_columns_each_part_sees():
    # per-input parameters are labelled by role and by the columns their part sees: a part
    # on columns [2, 0] lists c, a; a parameter that only happens to have D entries is not
    import pandas as pd
    A, y = _regression(30)
    frame = pd.DataFrame(A, columns=["a", "b", "c"])
    kernel = (K_.Active(K_.SquaredExponential(lengthscale=[0.5, 2.0]), [2, 0])
              + K_.ChangePoints([K_.Linear(), K_.Linear(), K_.Linear(), K_.Linear()],
                                locations=[-1.0, 0.0, 1.0], steepness=[1.0, 2.0, 3.0]))
    m = sg.SGPR(frame, y, kernel=kernel, inducing_points=5)
    labels = m._column_labels(["a", "b", "c"])
    lengthscale = [name for name in labels if name.endswith("lengthscale")]
    assert len(lengthscale) == 1 and labels[lengthscale[0]] == ["c", "a"]
    assert not any("locations" in name or "steepness" in name for name in labels)
    table = m.summary()
    row = table.splitlines().index(next(line for line in table.splitlines()
                                        if "lengthscale" in line))
    assert "· c" in table.splitlines()[row + 1] and "· a" in table.splitlines()[row + 2]


def test_every_kernel_class_takes_active_dims():
    # `active_dims=` on any kernel class builds `Active(kernel, active_dims)`: the same K as
    # the kernel on the sliced columns, through sums and products, config round trips
    X = torch.as_tensor(np.random.default_rng(7).standard_normal((6, 3)))
    for cls in (K_.SquaredExponential, K_.Matern12, K_.Matern52, K_.RationalQuadratic,
                K_.Linear, K_.Polynomial, K_.ArcCosine):
        k = cls(active_dims=[2, 0])
        assert isinstance(k, K_.Active) and isinstance(k.kernel, cls) and k.dims == [2, 0]
        torch.testing.assert_close(k.K(X), cls().K(X[:, [2, 0]]), rtol=1e-14, atol=0.0)
        again = kernel_from_config(k.config())
        torch.testing.assert_close(again.K(X), k.K(X), rtol=1e-14, atol=0.0)
    additive = K_.RBF(lengthscale=0.7, active_dims=[0]) * K_.Linear(active_dims=[1])
    torch.testing.assert_close(additive.K(X), K_.RBF(lengthscale=0.7).K(X[:, :1])
                               * K_.Linear().K(X[:, 1:2]), rtol=1e-14, atol=0.0)
    assert type(K_.RBF()) is K_.SquaredExponential  # without it, the kernel itself
    with pytest.raises((ValueError, TypeError)):
        K_.RBF(active_dims=[-1])
