"""Inter-domain inducing features (multi-scale, Fourier FIF/TFIF, sums of deltas) and their
covariances `sparsegp.covariances.Kuu/Kuf`.

Every reference value here comes from the definitions, never from a closed form:

  u_m = ∫ f(x) v(x; m) dx,  Kuf[m, n] = ∫ v(x; m) k(x, x_n) dx,
  Kuu[m, m'] = ∬ v(x; m) k(x, x') v(x'; m') dx dx',

with the windows
  multi-scale  v = N(x; z_m, diag δ_m²),
  Fourier      v = N(x; μ_m, diag c_m²) cos(φ_m + ω_mᵀ(x − μ_m))   (μ = 0 for FIF),
  deltas       v = Σ_c w_mc δ(x − z_mc),
and the squared exponential k(x, x') = σ² exp(−½ Σ_d (x_d − x'_d)²/ℓ_d²) written out in numpy.
The integrals are done by scipy.integrate.quad (Kuf, D = 1) and by trapezoid rules on grids
centred on each window (the other cases): the integrands are smooth and decay like Gaussians,
for which the trapezoid rule converges spectrally; the grids reach ~1e-13 here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate
from torch.autograd import gradcheck
from torch.func import functional_call

import sparsegp as sg
from sparsegp import covariances as cov

pytestmark = pytest.mark.numerics  # rounding-sensitive: rerun in CI under another code path

TAU = 2.0 * math.pi

#: Quadrature comparisons: |K − K_num|[m, n] ≤ RTOL·sd_m·sd_n (see `assert_close_cs`), the sd
#: from the diagonal of the numerical Kuu and σ² for f. The references are good to ~1e-12
#: (measured: ≤ 4e-13 in these cases), so 1e-8 leaves room without hiding a wrong factor.
RTOL = 1e-8


def t(a):
    return torch.as_tensor(np.asarray(a), dtype=torch.float64)


def n(a: torch.Tensor) -> np.ndarray:
    return a.detach().numpy()


def assert_close_cs(actual, reference, sd_rows, sd_cols, rtol=RTOL, what=""):
    """|K − K_num|[m, n] ≤ rtol·sd_rows[m]·sd_cols[n]: errors measured against the standard
    deviations of the two variables (|K[m, n]| ≤ sd_m sd_n by Cauchy–Schwarz), i.e. as errors
    in a correlation, so that features of small variance are checked as tightly as the rest
    and entries near a zero of a cosine do not need a relative accuracy they cannot have."""
    actual, reference = np.asarray(actual), np.asarray(reference)
    assert actual.shape == reference.shape, (actual.shape, reference.shape)
    scale = np.outer(sd_rows, sd_cols)
    assert np.all(scale > 0)
    err = np.max(np.abs(actual - reference) / scale)
    assert err <= rtol, f"{what}: max |K − K_num| / (sd_m sd_n) = {err:.2e} > {rtol:.0e}"


def assert_close_rel(actual, reference, rtol=RTOL, what=""):
    """|K − K_ref| ≤ rtol·|K_ref| + rtol·max|K_ref|, entrywise (comparisons between exact
    expressions: limits, the definition of sums of deltas)."""
    actual, reference = np.asarray(actual), np.asarray(reference)
    assert actual.shape == reference.shape, (actual.shape, reference.shape)
    scale = np.max(np.abs(reference))
    assert scale > 0
    err = np.max(np.abs(actual - reference)) / scale
    np.testing.assert_allclose(actual, reference, rtol=rtol, atol=rtol * scale,
                               err_msg=f"{what}: max error / max |ref| = {err:.2e}")


# --------------------------------------------------------------------------------------------
# Numpy references, from the definitions
# --------------------------------------------------------------------------------------------


def se_np(a, b, ell, var):
    """σ² exp(−½ Σ_d ((a_d − b_d)/ℓ_d)²); a, b broadcast over [..., D]."""
    return var * np.exp(-0.5 * np.sum(((a - b) / ell) ** 2, -1))


def window_np(x, mu, omega, phi, c):
    """N(x; μ, diag c²) cos(φ + ωᵀ(x − μ)) at x [..., D] (multi-scale: ω = 0, φ = 0)."""
    z = (x - mu) / c
    gauss = np.exp(-0.5 * np.sum(z * z, -1)) / np.prod(np.sqrt(TAU) * c)
    return gauss * np.cos(phi + np.sum(omega * (x - mu), -1))


def window_grid(mu, c, num, half_width=10.0):
    """Per-dimension trapezoid nodes over μ ± half_width·c and their spacings."""
    nodes = [np.linspace(mu[d] - half_width * c[d], mu[d] + half_width * c[d], num)
             for d in range(len(mu))]
    return nodes, [g[1] - g[0] for g in nodes]


def tabulated_window(mu, omega, phi, c, num):
    """The window times the trapezoid weights on its grid (the end points carry ~e^{-50}, so
    plain sums are the trapezoid rule). Returns (nodes per dimension, W [num]*D)."""
    nodes, h = window_grid(mu, c, num)
    pts = np.stack(np.meshgrid(*nodes, indexing="ij"), -1)
    return nodes, window_np(pts, mu, omega, phi, c) * np.prod(h)


def _kuf_integrand_1d(x, m0, w0, p0, c0, norm, xn, ell, var):
    """v(x) k(x, x_n) in scalar arithmetic (numpy's per-call overhead would slow quad)."""
    return (norm * math.exp(-0.5 * ((x - m0) / c0) ** 2) * math.cos(p0 + w0 * (x - m0))
            * var * math.exp(-0.5 * ((x - xn) / ell) ** 2))


def quad_kuf_1d(case):
    """Kuf by adaptive quadrature over x (D = 1)."""
    mu, om, ph, c, X = case["mu"], case["omega"], case["phi"], case["c"], case["X"]
    ell, var = float(case["ellv"][0]), case["var"]
    K = np.zeros((mu.shape[0], X.shape[0]))
    for m in range(mu.shape[0]):
        m0, w0, p0, c0 = float(mu[m, 0]), float(om[m, 0]), float(ph[m]), float(c[m, 0])
        norm = 1.0 / (math.sqrt(TAU) * c0)
        for j, xn in enumerate(X[:, 0]):
            K[m, j] = integrate.quad(_kuf_integrand_1d, m0 - 12 * c0, m0 + 12 * c0,
                                     args=(m0, w0, p0, c0, norm, float(xn), ell, var),
                                     limit=400, epsabs=1e-15, epsrel=1e-13)[0]
    return K


def grid_kuf(case, num=401):
    """Kuf by the trapezoid rule on each window's grid (D = 1 or 2)."""
    mu, om, ph, c, X = case["mu"], case["omega"], case["phi"], case["c"], case["X"]
    ell, var = case["ellv"], case["var"]
    D = mu.shape[1]
    K = np.zeros((mu.shape[0], X.shape[0]))
    for m in range(mu.shape[0]):
        nodes, W = tabulated_window(mu[m], om[m], ph[m], c[m], num)
        for j, xn in enumerate(X):
            if D == 1:
                K[m, j] = W @ se_np(nodes[0][:, None], xn, ell, var)
            else:  # k(x, x_n) on the 2-D grid, as an outer product over the two dimensions
                e = [np.exp(-0.5 * ((nodes[d] - xn[d]) / ell[d]) ** 2) for d in range(2)]
                K[m, j] = var * e[0] @ W @ e[1]
    return K


def grid_kuu(case, num):
    """Kuu by the trapezoid rule on the product of the two windows' grids: a 2-D rule for
    D = 1, a 4-D rule for D = 2 (summed as Σ_ijkl W_m[i,j] k1[i,k] k2[j,l] W_m'[k,l] with the
    kernel's per-dimension factors k_d)."""
    mu, om, ph, c = case["mu"], case["omega"], case["phi"], case["c"]
    ell, var = case["ellv"], case["var"]
    M, D = mu.shape
    tabs = [tabulated_window(mu[m], om[m], ph[m], c[m], num) for m in range(M)]
    K = np.zeros((M, M))
    for m in range(M):
        gm, Wm = tabs[m]
        for p in range(m, M):
            gp, Wp = tabs[p]
            k = [np.exp(-0.5 * ((gm[d][:, None] - gp[d][None, :]) / ell[d]) ** 2)
                 for d in range(D)]
            val = Wm @ k[0] @ Wp if D == 1 else np.sum(Wm * (k[0] @ Wp @ k[1].T))
            K[m, p] = K[p, m] = var * val
    return K


# --------------------------------------------------------------------------------------------
# Random cases
# --------------------------------------------------------------------------------------------


def make_case(kind, D, ard, seed, M=3, N=4, hard=False):
    """Random features of `kind` ('multiscale', 'fif', 'tfif') with per-feature widths [M, D],
    an SE kernel with a scalar or per-dimension lengthscale, and N inputs. For the Fourier
    kinds, feature 1 is feature 0 with −ω (same centre and width, its own phase).
    `hard`: wider ranges, c/ℓ ≈ 0.1 … 4 and |ω ℓ| up to 6."""
    rng = np.random.default_rng(seed)
    ell = rng.uniform(0.5, 2.0, D) if ard else float(rng.uniform(0.5, 2.0))
    ellv = np.broadcast_to(np.asarray(ell, dtype=float), (D,)).copy()
    var = float(rng.uniform(0.5, 2.0))
    X = rng.uniform(-3.0, 3.0, (N, D))
    c = rng.uniform(0.1, 4.0, (M, D)) * ellv if hard else rng.uniform(0.3, 1.5, (M, D))
    mu = np.zeros((M, D)) if kind == "fif" else rng.uniform(-2.0, 2.0, (M, D))
    if kind == "multiscale":
        omega, phi = np.zeros((M, D)), np.zeros(M)
    else:
        wmax = 6.0 if hard else 3.0
        omega = rng.uniform(-wmax, wmax, (M, D)) / ellv
        phi = rng.uniform(0.0, TAU, M)
        omega[1], mu[1], c[1] = -omega[0], mu[0], c[0]
    return dict(kind=kind, D=D, ell=ell, ellv=ellv, var=var, X=X, c=c, mu=mu, omega=omega,
                phi=phi)


def build(case):
    kind = case["kind"]
    if kind == "multiscale":
        feature = sg.features.Multiscale(case["mu"], case["c"])
    elif kind == "fif":
        feature = sg.features.Fourier(case["omega"], case["c"], None, case["phi"])
    else:
        feature = sg.features.Fourier(case["omega"], case["c"], case["mu"], case["phi"])
    kernel = sg.kernels.SquaredExponential(lengthscale=case["ell"], variance=case["var"])
    return feature, kernel


def test_reference_kernel_matches_package_kernel():
    """The numpy SE the references integrate is the package's kernel (scalar and ARD)."""
    for ard in (False, True):
        case = make_case("tfif", 2, ard, seed=5)
        _, kernel = build(case)
        X = case["X"]
        ref = se_np(X[:, None, :], X[None, :, :], case["ellv"], case["var"])
        assert_close_rel(n(kernel.K(t(X))), ref, rtol=1e-13, what="SE")


CASES = [(kind, D, ard) for kind in ("multiscale", "fif", "tfif") for D in (1, 2)
         for ard in (False, True)]


@pytest.mark.parametrize("kind,D,ard", CASES,
                         ids=[f"{k}-D{D}-{'ard' if a else 'iso'}" for k, D, a in CASES])
def test_kuf_kuu_match_numerical_integration(kind, D, ard):
    """Kuf and Kuu of multi-scale, FIF and TFIF features (per-feature widths, scalar and ARD
    lengthscales, D = 1 and 2) equal the integrals of their definitions to RTOL = 1e-8.
    D = 1: Kuf by scipy quad and by a grid, Kuu by a 2-D trapezoid grid; D = 2: Kuf by a 2-D
    grid, Kuu by a 4-D grid."""
    seed = 100 * D + 10 * ("multiscale", "fif", "tfif").index(kind) + int(ard)
    case = make_case(kind, D, ard, seed)
    feature, kernel = build(case)
    Kuf = n(cov.Kuf(feature, kernel, t(case["X"])))
    Kuu = n(cov.Kuu(feature, kernel))
    assert Kuf.shape == (3, 4) and Kuu.shape == (3, 3)
    ref_uu = grid_kuu(case, num=801 if D == 1 else 161)
    sd_u, sd_f = np.sqrt(np.diag(ref_uu)), np.full(4, math.sqrt(case["var"]))
    assert_close_cs(Kuu, ref_uu, sd_u, sd_u, what="Kuu vs grid")
    if D == 1:
        assert_close_cs(Kuf, quad_kuf_1d(case), sd_u, sd_f, what="Kuf vs quad")
    assert_close_cs(Kuf, grid_kuf(case), sd_u, sd_f, what="Kuf vs grid")
    assert np.max(np.abs(Kuu - Kuu.T)) <= 1e-14 * np.max(np.abs(Kuu))


@pytest.mark.parametrize("kind", ["multiscale", "fif", "tfif"])
def test_kuf_kuu_match_numerical_integration_wide_ranges(kind):
    """As above (D = 2, ARD) with window widths from 0.1 to 4 lengthscales and |ω ℓ| up to 6,
    where wrong damping or frequency-shrinking factors would show most."""
    case = make_case(kind, 2, True, seed=7 + len(kind), hard=True)
    feature, kernel = build(case)
    ref_uu = grid_kuu(case, num=241)
    sd_u, sd_f = np.sqrt(np.diag(ref_uu)), np.full(4, math.sqrt(case["var"]))
    assert_close_cs(n(cov.Kuu(feature, kernel)), ref_uu, sd_u, sd_u, what="Kuu vs grid")
    assert_close_cs(n(cov.Kuf(feature, kernel, t(case["X"]))), grid_kuf(case, num=401),
                    sd_u, sd_f, what="Kuf vs grid")


# --------------------------------------------------------------------------------------------
# Sums of deltas: any kernel, against the definition
# --------------------------------------------------------------------------------------------


def deltas_kernels():
    return {
        "matern32": sg.kernels.Matern32(lengthscale=[0.7, 1.6], variance=1.3),
        "se_sum": (sg.kernels.SquaredExponential(lengthscale=0.8, variance=0.6)
                   + sg.kernels.SquaredExponential(lengthscale=[2.0, 0.5], variance=1.7)),
    }


@pytest.mark.parametrize("name", ["matern32", "se_sum"])
def test_sum_of_deltas_any_kernel_matches_definition(name):
    """Kuf[m, n] = Σ_c w_mc k(z_mc, x_n) and Kuu[m, m'] = Σ_cc' w_mc w_m'c' k(z_mc, z_m'c'),
    by explicit loops with kernel.K on single points; weights of both signs, a repeated
    delta location, and a feature equal to another one."""
    kernel = deltas_kernels()[name]
    rng = np.random.default_rng(3)
    M, C, D, N = 4, 3, 2, 5
    Z = rng.uniform(-2, 2, (M, C, D))
    w = rng.normal(size=(M, C))
    Z[0, 1] = Z[0, 0]           # two deltas at one place within a feature
    Z[2, 0] = Z[1, 2]           # a location shared by two features
    Z[3], w[3] = Z[1], w[1]     # a duplicated feature
    X = rng.uniform(-2, 2, (N, D))
    X[0] = Z[0, 0]              # an input on a delta
    feature = sg.features.SumOfDeltas(Z, w)

    def k(a, b):
        with torch.no_grad():
            return float(kernel.K(t(a)[None], t(b)[None])[0, 0])

    ref_uf = np.array([[sum(w[m, c] * k(Z[m, c], X[j]) for c in range(C)) for j in range(N)]
                       for m in range(M)])
    ref_uu = np.array([[sum(w[m, c] * w[p, e] * k(Z[m, c], Z[p, e])
                            for c in range(C) for e in range(C)) for p in range(M)]
                       for m in range(M)])
    assert_close_rel(n(cov.Kuf(feature, kernel, t(X))), ref_uf, rtol=1e-12, what="Kuf")
    assert_close_rel(n(cov.Kuu(feature, kernel)), ref_uu, rtol=1e-12, what="Kuu")


# --------------------------------------------------------------------------------------------
# Positive semi-definiteness of the joint covariance of (u, f(X))
# --------------------------------------------------------------------------------------------


def degenerate_feature_set(kind, D, seed, M=30):
    """Random features with every degenerate structure we know of: exact duplicates, equal
    centres with other widths/frequencies, (ω, φ) and (−ω, φ) pairs at one centre, (ω, φ) and
    (−ω, −φ) (the same feature), ω = 0 features, a ω = 0, φ = π/2 feature (u ≡ 0), and
    pairs of phases ±φ."""
    rng = np.random.default_rng(seed)
    ell = rng.uniform(0.3, 3.0, D) if seed % 2 else float(rng.uniform(0.3, 3.0))
    ellv = np.broadcast_to(np.asarray(ell, dtype=float), (D,))
    var = float(rng.uniform(0.5, 2.0))
    mu = np.zeros((M, D)) if kind == "fif" else rng.uniform(-3, 3, (M, D))
    c = rng.uniform(0.05, 3.0, (M, D))
    om = rng.normal(0, 2, (M, D)) / ellv
    ph = rng.uniform(0, TAU, M)
    k = M // 6
    idx = np.arange(k)
    mu[k + idx], c[k + idx], om[k + idx], ph[k + idx] = mu[idx], c[idx], -om[idx], ph[idx]
    mu[2 * k + idx], c[2 * k + idx] = mu[idx], c[idx]
    om[2 * k + idx], ph[2 * k + idx] = -om[idx], -ph[idx]
    mu[3 * k + idx], c[3 * k + idx], om[3 * k + idx], ph[3 * k + idx] = (
        mu[idx], c[idx], om[idx], -ph[idx])
    mu[4 * k:4 * k + 3] = mu[0]                       # equal centres, other widths/frequencies
    om[5 * k:5 * k + 2], ph[5 * k:5 * k + 2] = 0.0, 0.0
    om[5 * k + 2], ph[5 * k + 2] = 0.0, math.pi / 2  # the zero functional
    mu[M - 1], c[M - 1], om[M - 1], ph[M - 1] = mu[0], c[0], om[0], ph[0]  # exact duplicate
    X = rng.uniform(-3, 3, (25, D))
    X[:3] = mu[:3]                                     # inputs at window centres
    kernel = sg.kernels.SquaredExponential(lengthscale=ell, variance=var)
    if kind == "multiscale":
        feature = sg.features.Multiscale(mu, c)
    elif kind == "fif":
        feature = sg.features.Fourier(om, c, None, ph)
    elif kind == "tfif":
        feature = sg.features.Fourier(om, c, mu, ph)
    else:  # sums of deltas: locations around the centres, weights of both signs
        C = 3
        Z = mu[:, None, :] + c[:, None, :] * rng.normal(size=(M, C, D))
        w = rng.normal(size=(M, C))
        Z[k + idx], w[k + idx] = Z[idx], -w[idx]       # negated copies
        Z[M - 1], w[M - 1] = Z[0], w[0]                # exact duplicate
        Z[4 * k, 0] = Z[0, 0]                          # a shared location
        feature = sg.features.SumOfDeltas(Z, w)
    return feature, kernel, t(X)


def eig_ratio(K):
    K = n(K)
    ev = np.linalg.eigvalsh(0.5 * (K + K.T))
    return ev.min() / ev.max()


def joint_covariance(Kuu, Kuf, Kff):
    return torch.cat([torch.cat([Kuu, Kuf], 1), torch.cat([Kuf.mT, Kff], 1)], 0)


@pytest.mark.parametrize("kind", ["multiscale", "fif", "tfif", "deltas"])
def test_joint_covariance_is_psd(kind):
    """[[Kuu, Kuf], [Kfu, Kff]] has min eigenvalue ≥ −1e-10 · max eigenvalue, for random
    degenerate feature sets in D = 1, 2, 3 (Kuu alone too)."""
    worst = []
    for D in (1, 2, 3):
        for seed in range(4):
            feature, kernel, X = degenerate_feature_set(kind, D, 1000 * D + seed)
            with torch.no_grad():
                Kuu, Kuf, Kff = cov.Kuu(feature, kernel), cov.Kuf(feature, kernel, X), kernel.K(X)
            r_uu, r_joint = eig_ratio(Kuu), eig_ratio(joint_covariance(Kuu, Kuf, Kff))
            worst.append((min(r_uu, r_joint), D, seed))
    assert min(worst)[0] >= -1e-10, f"worst min/max eigenvalue ratio (ratio, D, seed): {min(worst)}"


def test_joint_psd_check_detects_mismatched_tfif_kuu():
    """The joint check has teeth where Kuu alone has none: a Kuu with the sign of the TFIF
    centre difference flipped equals Kuu of the features with ω → −ω. That matrix is PSD on its
    own, but paired with the true Kuf the joint covariance is clearly indefinite."""
    feature, kernel, X = degenerate_feature_set("tfif", 2, 2001)
    with torch.no_grad():
        flipped = sg.features.Fourier(-feature.frequencies, feature.value("widths"),
                                      feature.centres, feature.phases)
        Kuu_wrong = cov.Kuu(flipped, kernel)
        joint = joint_covariance(Kuu_wrong, cov.Kuf(feature, kernel, X), kernel.K(X))
    assert eig_ratio(Kuu_wrong) >= -1e-10
    assert eig_ratio(joint) < -1e-3


# --------------------------------------------------------------------------------------------
# Limits
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ard", [False, True])
def test_limits(ard):
    rng = np.random.default_rng(11)
    M, D, N = 5, 2, 6
    Z = rng.uniform(-2, 2, (M, D))
    X = t(rng.uniform(-2, 2, (N, D)))
    widths = rng.uniform(0.3, 1.5, (M, D))
    omega = rng.normal(0, 2, (M, D))
    phases = rng.uniform(0, TAU, M)
    kernel = sg.kernels.SquaredExponential(lengthscale=[0.7, 1.4] if ard else 0.9, variance=1.3)
    points = sg.features.InducingPoints(Z)
    Kuu_p, Kuf_p = n(cov.Kuu(points, kernel)), n(cov.Kuf(points, kernel, X))

    # multi-scale windows of width 1e-8 are inducing points at Z (deviation O(δ²/ℓ²) = 1e-16)
    tiny = sg.features.Multiscale(Z, 1e-8)
    assert_close_rel(n(cov.Kuu(tiny, kernel)), Kuu_p, rtol=1e-12, what="Multiscale δ→0 Kuu")
    assert_close_rel(n(cov.Kuf(tiny, kernel, X)), Kuf_p, rtol=1e-12, what="Multiscale δ→0 Kuf")

    # TFIF with ω = 0, φ = 0 are multi-scale features with δ = c
    ms = sg.features.Multiscale(Z, widths)
    flat = sg.features.Fourier(np.zeros((M, D)), widths, Z, np.zeros(M))
    assert_close_rel(n(cov.Kuu(flat, kernel)), n(cov.Kuu(ms, kernel)), rtol=1e-14,
                     what="TFIF ω=0 Kuu")
    assert_close_rel(n(cov.Kuf(flat, kernel, X)), n(cov.Kuf(ms, kernel, X)), rtol=1e-14,
                     what="TFIF ω=0 Kuf")
    # ... and FIF with ω = 0, φ = 0 are multi-scale features at the origin
    fif_flat = sg.features.Fourier(np.zeros((M, D)), widths, None, np.zeros(M))
    ms0 = sg.features.Multiscale(np.zeros((M, D)), widths)
    assert_close_rel(n(cov.Kuu(fif_flat, kernel)), n(cov.Kuu(ms0, kernel)), rtol=1e-14,
                     what="FIF ω=0 Kuu")
    assert_close_rel(n(cov.Kuf(fif_flat, kernel, X)), n(cov.Kuf(ms0, kernel, X)), rtol=1e-14,
                     what="FIF ω=0 Kuf")

    # TFIF with widths → 0 and φ = 0 are inducing points at the centres for any ω
    # (deviation O(c²ω², c²/ℓ²) ≈ 1e-15); with phases, u_m → cos(φ_m) f(μ_m)
    narrow = sg.features.Fourier(omega, 1e-8, Z, np.zeros(M))
    assert_close_rel(n(cov.Kuu(narrow, kernel)), Kuu_p, rtol=1e-12, what="TFIF c→0 Kuu")
    assert_close_rel(n(cov.Kuf(narrow, kernel, X)), Kuf_p, rtol=1e-12, what="TFIF c→0 Kuf")
    phased = sg.features.Fourier(omega, 1e-8, Z, phases)
    cp = np.cos(phases)
    assert_close_rel(n(cov.Kuu(phased, kernel)), cp[:, None] * Kuu_p * cp[None, :],
                     rtol=1e-12, what="TFIF c→0 Kuu with phases")
    assert_close_rel(n(cov.Kuf(phased, kernel, X)), cp[:, None] * Kuf_p, rtol=1e-12,
                     what="TFIF c→0 Kuf with phases")

    # one delta of weight 1 per feature: inducing points, up to rounding. The two paths form
    # the squared distances differently (‖a‖² + ‖b‖² − 2aᵀb against its own summation order),
    # an absolute error of a few ε·(‖a‖² + ‖b‖²) ≤ 16ε here, which exp(−r²/2ℓ²) turns into a
    # relative error of K of 16ε/(2ℓ²) ≈ 10ε (ℓ ≥ 0.7): 1e-14 leaves a margin on any BLAS
    deltas = sg.features.SumOfDeltas(Z[:, None, :], np.ones((M, 1)))
    assert_close_rel(n(cov.Kuu(deltas, kernel)), Kuu_p, rtol=1e-14, what="one delta Kuu")
    assert_close_rel(n(cov.Kuf(deltas, kernel, X)), Kuf_p, rtol=1e-14, what="one delta Kuf")


# --------------------------------------------------------------------------------------------
# The registry: no maths, no covariance
# --------------------------------------------------------------------------------------------


class MyPoints(sg.features.InducingPoints):
    pass


class MySquaredExponential(sg.kernels.SquaredExponential):
    pass


def test_unregistered_pair_raises_with_a_clear_message():
    Z = np.random.default_rng(0).normal(size=(3, 2))
    X = t(np.zeros((2, 2)))
    feature, kernel = sg.features.Multiscale(Z, 0.5), sg.kernels.Matern32()
    for call in (lambda: cov.Kuu(feature, kernel), lambda: cov.Kuf(feature, kernel, X),
                 lambda: cov.check_pair(feature, kernel)):
        with pytest.raises(TypeError) as err:
            call()
        msg = str(err.value)
        assert "Multiscale" in msg and "Matern32" in msg
        assert "registered pairs" in msg
        for pair in ("(InducingPoints, Kernel+)", "(Multiscale, SquaredExponential)",
                     "(Fourier, SquaredExponential)", "(SumOfDeltas, Kernel+)"):
            assert pair in msg, pair
    with pytest.raises(TypeError, match="Fourier.*Matern52"):
        cov.Kuu(sg.features.Fourier(Z, 1.0, Z), sg.kernels.Matern52())


def test_subclasses_never_silently_inherit_a_pair():
    Z = np.random.default_rng(0).normal(size=(3, 2))
    X = t(np.random.default_rng(1).normal(size=(4, 2)))
    se = sg.kernels.SquaredExponential(lengthscale=0.8, variance=1.2)

    # a feature subclass: not covered by (InducingPoints, Kernel+)
    for call in (lambda: cov.Kuu(MyPoints(Z), se), lambda: cov.Kuf(MyPoints(Z), se, X)):
        with pytest.raises(TypeError, match="MyPoints.*SquaredExponential"):
            call()

    # a kernel subclass: covered for inducing points (registered for kernel subclasses) ...
    my = MySquaredExponential(lengthscale=0.8, variance=1.2)
    points = sg.features.InducingPoints(Z)
    assert torch.equal(cov.Kuu(points, my), cov.Kuu(points, se))
    assert torch.equal(cov.Kuf(points, my, X), cov.Kuf(points, se, X))
    cov.check_pair(points, my)
    # ... but not for the SE-only closed forms
    for feature in (sg.features.Multiscale(Z, 0.5), sg.features.Fourier(Z, 0.5, Z)):
        with pytest.raises(TypeError, match="MySquaredExponential"):
            cov.Kuu(feature, my)
        with pytest.raises(TypeError, match="MySquaredExponential"):
            cov.Kuf(feature, my, X)


def test_sum_kernel_dispatches_to_each_part():
    """f = f1 + f2 (independent): the covariances of a feature add over the parts, and a part
    without maths for the feature is an error."""
    Z = np.random.default_rng(0).normal(size=(3, 2))
    X = t(np.random.default_rng(1).normal(size=(4, 2)))
    k1 = sg.kernels.SquaredExponential(lengthscale=0.8, variance=1.2)
    k2 = sg.kernels.SquaredExponential(lengthscale=[1.5, 0.4], variance=0.3)
    for feature in (sg.features.Multiscale(Z, 0.5), sg.features.Fourier(Z, 0.5, Z, [0.1, 1, 2])):
        assert_close_rel(n(cov.Kuu(feature, k1 + k2)),
                         n(cov.Kuu(feature, k1) + cov.Kuu(feature, k2)), rtol=1e-15)
        assert_close_rel(n(cov.Kuf(feature, k1 + k2, X)),
                         n(cov.Kuf(feature, k1, X) + cov.Kuf(feature, k2, X)), rtol=1e-15)
        with pytest.raises(TypeError, match="Matern32"):
            cov.Kuu(feature, k1 + sg.kernels.Matern32())


# --------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------


class _Pair(torch.nn.Module):
    def __init__(self, feature, kernel):
        super().__init__()
        self.feature, self.kernel = feature, kernel

    def forward(self, X):
        return cov.Kuu(self.feature, self.kernel), cov.Kuf(self.feature, self.kernel, X)


GRAD_CASES = [("multiscale", True), ("tfif", True), ("tfif", False), ("fif", True)]


@pytest.mark.parametrize("kind,ard", GRAD_CASES,
                         ids=[f"{k}-{'ard' if a else 'iso'}" for k, a in GRAD_CASES])
def test_gradients(kind, ard):
    """torch.autograd.gradcheck (float64) of Kuu and Kuf with respect to every raw parameter
    of the feature (feature.named_parameters()) and of the kernel, and to X: M = 3, N = 4, D = 2."""
    case = make_case(kind, 2, ard, seed=77, M=3, N=4)
    feature, kernel = build(case)
    pair = _Pair(feature, kernel)
    names = [f"feature.{k}" for k, _ in feature.named_parameters()] + \
            [f"kernel.{k}" for k, _ in kernel.named_parameters()]
    expected = {"multiscale": {"Z", "raw_scales"},
                "fif": {"frequencies", "raw_widths", "phases"},
                "tfif": {"frequencies", "raw_widths", "phases", "centres"}}[kind]
    assert {k.split(".", 1)[1] for k in names if k.startswith("feature.")} == expected
    params = dict(pair.named_parameters())
    inputs = tuple(params[k].detach().clone().requires_grad_(True) for k in names)
    X = t(case["X"]).requires_grad_(True)

    def fn(*args):
        return functional_call(pair, dict(zip(names, args[:-1])), (args[-1],))

    assert gradcheck(fn, (*inputs, X), eps=1e-6, atol=1e-8, rtol=1e-6)
