"""Numerical breakdown of the structured solvers, judged relative to the matrix's scale:
Lanczos past an exhausted Krylov space, CG along a direction of no curvature, pivoted Cholesky
on rounding noise, and KISS-GP's predictive cache (LOVE) on smooth low-noise data, whose
interpolated kernel has a spectrum that falls below the rounding level."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.cli import main
from sparsegp.structured.grid import interpolate, interpolated_diag, kuu_matmul
from sparsegp.structured.iterative import pcg, pivoted_cholesky
from sparsegp.structured.lanczos import LanczosResult, inverse_root, lanczos

# the fits are short on purpose (the reported 60 Adam steps): the budget advice is expected
pytestmark = [pytest.mark.usefixtures("quiet_model_warnings"),
              pytest.mark.filterwarnings("ignore:KISSGP.fit ran its budget")]

F64 = torch.float64
SCALES = [1e-6, 1.0, 1e6]


def _low_rank_plus_identity(scale, N=300, seed=0):
    """s·(V diag(d) Vᵀ + I), formed densely (products round like ε‖A‖, as KISS-GP's do):
    five distinct eigenvalues s·(d + 1) and s, so the Krylov space of any b has dimension 5."""
    g = torch.Generator().manual_seed(seed)
    V, _ = torch.linalg.qr(torch.randn(N, 4, generator=g, dtype=F64))
    d = torch.tensor([1e6, 1e4, 1e2, 3.0], dtype=F64)
    A = scale * ((V * d) @ V.mT + torch.eye(N, dtype=F64))
    eigenvalues = torch.sort(scale * torch.cat([d + 1.0, torch.ones(1, dtype=F64)])).values
    return A, eigenvalues, torch.randn(N, generator=g, dtype=F64)


def _orthogonality(Q):
    return float((Q.mT @ Q - torch.eye(Q.shape[1], dtype=Q.dtype)).abs().max())


@pytest.mark.parametrize("scale", SCALES)
def test_lanczos_stops_where_the_krylov_space_is_exhausted_at_every_scale(scale):
    A, eigenvalues, b = _low_rank_plus_identity(scale)
    run = lanczos(lambda V: A @ V, b, 50)
    # used to run on to 50 steps (β at rounding noise, ~1e-10 s, passed β ≤ 1e-12|α|): Q lost
    # orthogonality (‖QᵀQ − I‖ = 1) and T had eigenvalues of −12 s and below
    assert run.breakdown and run.Q.shape[1] == 5
    assert _orthogonality(run.Q) < 1e-13
    torch.testing.assert_close(torch.linalg.eigvalsh(run.T), eigenvalues, rtol=1e-9, atol=0.0)
    assert float(torch.linalg.matrix_norm(A, 2)) / math.sqrt(3) <= run.norm <= float(
        torch.linalg.matrix_norm(A, 2)) * (1 + 1e-12)


@pytest.mark.parametrize("scale", SCALES)
def test_reorthogonalisation_alone_keeps_t_inside_the_matrix_bounds(scale):
    # with the stop disabled, the run goes on through rounding-noise directions: the second
    # Gram–Schmidt pass keeps Q orthonormal, so T = QᵀAQ keeps A's eigenvalue bounds
    A, eigenvalues, b = _low_rank_plus_identity(scale)
    run = lanczos(lambda V: A @ V, b, 50, tolerance=0.0)
    assert run.Q.shape[1] >= 5 and _orthogonality(run.Q) < 1e-13
    lam = torch.linalg.eigvalsh(run.T)
    assert float(lam.min()) >= float(eigenvalues[0]) * (1 - 1e-9)
    assert float(lam.max()) <= float(eigenvalues[-1]) * (1 + 1e-9)
    R = inverse_root(run, eigenvalues[0])
    torch.testing.assert_close(R @ R.mT @ run.T, torch.eye(run.T.shape[0], dtype=F64),
                               rtol=0.0, atol=1e-6)


def test_an_unbuildable_predictive_cache_is_a_clear_error():
    Q = torch.eye(3, dtype=F64)
    for T in (torch.diag(torch.tensor([-12.6, 1.0, 1e6], dtype=F64)),  # below σ² = 1
              torch.diag(torch.tensor([1.0, 2.0, 1e39], dtype=F64)),  # far beyond ‖A‖
              torch.full((3, 3), math.nan, dtype=F64)):
        with pytest.raises(ValueError, match="lanczos_rank.*noise variance"):
            inverse_root(LanczosResult(Q, T, 1e6, False), 1.0)
    T = torch.tensor([[2.0, 0.5, 0.0], [0.5, 3.0, 0.25], [0.0, 0.25, 1.5]], dtype=F64)
    R = inverse_root(LanczosResult(Q, T, 3.5, False), 1.0)
    torch.testing.assert_close(R @ R.mT, torch.linalg.inv(T), rtol=1e-13, atol=0.0)


def test_non_finite_products_are_clear_errors_or_flagged_never_nan():
    b = torch.ones(10, dtype=F64)
    with pytest.raises(ValueError, match="start vector"):
        lanczos(lambda V: V, torch.zeros(10, dtype=F64), 5)
    with pytest.raises(ValueError, match="not finite"):
        lanczos(lambda V: V * math.nan, b, 5)
    with pytest.raises(ValueError, match="not finite"):
        pivoted_cholesky(lambda V: V, torch.full((10,), math.inf, dtype=F64), 3,
                         torch.tensor(0.1, dtype=F64))
    with pytest.raises(ValueError, match="not finite"):
        pivoted_cholesky(lambda V: V * math.nan, torch.ones(10, dtype=F64), 3,
                         torch.tensor(0.1, dtype=F64))
    res = pcg(lambda V: V * math.nan, b[:, None], None)
    assert bool(res.breakdown.all()) and bool(torch.isfinite(res.X).all())


@pytest.mark.parametrize("scale", SCALES)
def test_cg_stops_at_a_direction_without_curvature(scale):
    # a singular A (rank 4) and b outside its range: CG used to take steps of size 1/rounding
    # for all 100 iterations (‖X‖ up to 1e21/s, nothing flagged)
    g = torch.Generator().manual_seed(1)
    V, _ = torch.linalg.qr(torch.randn(60, 4, generator=g, dtype=F64))
    A = scale * (V * torch.tensor([1e3, 1e2, 10.0, 1.0], dtype=F64)) @ V.mT
    res = pcg(lambda X: A @ X, torch.randn(60, 2, generator=g, dtype=F64), None, tol=1e-10,
              max_iterations=100)
    assert bool(res.breakdown.all()) and res.iterations <= 5 and bool((res.steps <= 5).all())
    assert bool(torch.isfinite(res.X).all())
    for i in range(2):  # the tridiagonal of the steps taken: positive, within ‖A‖
        lam = torch.linalg.eigvalsh(res.T[i, : int(res.steps[i]), : int(res.steps[i])])
        assert float(lam.min()) > 0.0 and float(lam.max()) <= 1e3 * scale * (1 + 1e-9)


def test_cg_reports_no_breakdown_on_a_definite_matrix():
    g = torch.Generator().manual_seed(2)
    M = torch.randn(40, 40, generator=g, dtype=F64)
    A = M @ M.mT + 0.1 * torch.eye(40, dtype=F64)
    B = torch.randn(40, 3, generator=g, dtype=F64)
    res = pcg(lambda X: A @ X, B, None, tol=1e-12, max_iterations=400)
    assert not bool(res.breakdown.any())
    torch.testing.assert_close(res.X, torch.linalg.solve(A, B), rtol=0.0, atol=1e-8)


@pytest.mark.parametrize("scale", SCALES)
def test_float32_pivoted_cholesky_stops_at_the_numerical_rank(scale):
    # rank 3 in float32: the pivots after the third are rounding noise (~1e-7 of the largest),
    # which a fixed 1e-12 threshold took for columns (7–8 of them)
    g = torch.Generator().manual_seed(0)
    V, _ = torch.linalg.qr(torch.randn(100, 3, generator=g, dtype=F64))
    K = (scale * (V * torch.tensor([10.0, 3.0, 1.0], dtype=F64)) @ V.mT).float()
    P = pivoted_cholesky(lambda X: K @ X, torch.diagonal(K), 20,
                         torch.tensor(1e-2 * scale, dtype=torch.float32))
    assert P.L.shape[1] == 3
    assert float((P.L @ P.L.mT - K).abs().max()) <= 3e-7 * float(K.abs().max())


# -- KISS-GP on smooth, low-noise data ----------------------------------------------------------

def _data(case):
    if case == "2-D, N = 300":
        rng = np.random.default_rng(0)
        X = rng.uniform(-3, 3, (300, 2))
        return X, np.sin(0.2 * X[:, 0]) + 1e-3 * rng.standard_normal(300), 30, 60
    if case == "1-D smooth":
        rng = np.random.default_rng(1)
        X = rng.uniform(-3, 3, (300, 1))
        return X, np.sin(X[:, 0]) + 1e-3 * rng.standard_normal(300), 64, 60
    if case == "linear trend":
        rng = np.random.default_rng(4)
        X = rng.uniform(-3, 3, (300, 1))
        return X, 0.5 * X[:, 0] + 1e-2 * rng.standard_normal(300), 64, 60
    rng = np.random.default_rng(3)  # 2-D, N = 2000
    X = rng.uniform(-3, 3, (2000, 2))
    return X, np.sin(X[:, 0]) * np.cos(0.5 * X[:, 1]) + 1e-3 * rng.standard_normal(2000), 30, 30


def _dense_prediction(m, Xs):
    """Mean and latent variance of the GP with the interpolated kernel K̃ = W K_UU Wᵀ, by a
    dense solve with A = K̃ + σ²I, in the units of y."""
    with torch.no_grad():
        g = m.grid()
        kuu = kuu_matmul(m.kernel, m.grid_spacing, m.sizes)
        W = g.W.to_dense()
        K = W @ kuu(W.mT)
        Xs_t = torch.as_tensor(Xs, dtype=F64)
        gs = interpolate(Xs_t, m.grid_start, m.grid_spacing, m.sizes)
        Ksx = gs.W.to_dense() @ kuu(W.mT)
        kss = interpolated_diag(m.kernel, gs.idx, gs.weights, m.grid_spacing, m.sizes)
        A = K + m.value("noise_variance") * torch.eye(K.shape[0], dtype=F64)
        L = torch.linalg.cholesky(A)
        mean = m.mean(Xs_t) + Ksx @ torch.cholesky_solve((m.y - m.mean(m.X))[:, None], L)[:, 0]
        var = kss - (Ksx * torch.cholesky_solve(Ksx.mT, L).mT).sum(1)
        s = float(m.y_scale)
        return (mean * s + m.y_shift).numpy(), (var * s**2).numpy()


@pytest.mark.parametrize("case", ["2-D, N = 300", "1-D smooth", "linear trend", "2-D, N = 2000"])
def test_kissgp_predicts_and_saves_after_fitting_smooth_low_noise_data(case, tmp_path):
    X, y, grid, maxiter = _data(case)
    m = sg.KISSGP(X, y, grid_size=grid)
    m.fit(maxiter=maxiter, progress=False)
    Xs = np.r_[X[:20], np.random.default_rng(9).uniform(-2.5, 2.5, (20, X.shape[1]))]
    # used to raise torch's _LinAlgError (a Cholesky of the Lanczos T, eigenvalues ±1e39)
    mean, var = m.predict(Xs)
    dense_mean, dense_var = _dense_prediction(m, Xs)
    scale = float(np.std(y))
    np.testing.assert_allclose(mean, dense_mean, rtol=0.0, atol=1e-6 * scale)
    # the Krylov space is exhausted: LOVE is exact to rounding (measured within 1e-8), and
    # never below the exact variance
    np.testing.assert_allclose(var, dense_var, rtol=1e-6, atol=1e-12 * scale**2)
    assert np.all(var >= dense_var * (1 - 1e-9))
    assert m.posterior().C.shape[1] < 200  # stopped at the breakdown, not run to lanczos_rank
    m.save(tmp_path / "m.pt")
    loaded_mean, loaded_var = sg.load(tmp_path / "m.pt").predict(Xs)
    np.testing.assert_array_equal(loaded_mean, mean)
    np.testing.assert_array_equal(loaded_var, var)


def test_cli_fit_with_ski_writes_a_model_on_smooth_low_noise_data(tmp_path, capsys):
    X, y, _, _ = _data("2-D, N = 300")
    np.savetxt(tmp_path / "train.csv", np.c_[X, y], delimiter=",", header="a,b,y", comments="")
    model = tmp_path / "m.pt"
    # used to exit 2 after the fit (the predictive cache failed in save): no model written
    assert main(["fit", str(tmp_path / "train.csv"), "--target", "y", "--approximation", "ski",
                 "-M", "30", "--maxiter", "60", "--out", str(model)]) == 0
    assert f"model written to {model}" in capsys.readouterr().out
    assert main(["predict", str(model), str(tmp_path / "train.csv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "mean,variance" and len(lines) == 301
    printed = np.array([[float(v) for v in line.split(",")] for line in lines[1:]])
    loaded = sg.load(model)
    mean, var = loaded.predict(X, include_noise=True)
    np.testing.assert_allclose(printed, np.c_[mean, var], rtol=1e-12)
    np.testing.assert_allclose(mean, y, atol=0.01)  # the fit follows the data
