"""Extended-precision (numpy longdouble: a 64-bit mantissa on x86) dense linear algebra for
the reference implementations of the tests: np.linalg has no longdouble support, so these are
small hand-written routines, checked against np.linalg in test_dense_reference.py.

d_n = k_nn − k_nᵀKuu⁻¹k_n is a cancellation, and in float64 a reference computed with Kuu of
condition number 1e6 is itself only good to ~1e-8; in extended precision it is ~1000× better,
so a remaining difference is the library's.
"""

from __future__ import annotations

import numpy as np

LD = np.longdouble


def chol(A):
    A = np.asarray(A, dtype=LD)
    n = A.shape[0]
    L = np.zeros_like(A)
    for j in range(n):
        s = A[j, j] - L[j, :j] @ L[j, :j]
        assert s > 0, "matrix not positive definite"
        L[j, j] = np.sqrt(s)
        L[j + 1 :, j] = (A[j + 1 :, j] - L[j + 1 :, :j] @ L[j, :j]) / L[j, j]
    return L


def solve_lower(L, B):
    B = np.asarray(B, dtype=LD)
    X = np.zeros_like(B)
    for i in range(L.shape[0]):
        X[i] = (B[i] - L[i, :i] @ X[:i]) / L[i, i]
    return X


def solve_upper(U, B):
    B = np.asarray(B, dtype=LD)
    X = np.zeros_like(B)
    for i in range(U.shape[0] - 1, -1, -1):
        X[i] = (B[i] - U[i, i + 1 :] @ X[i + 1 :]) / U[i, i]
    return X


def spd_solve(A, B):
    L = chol(A)
    return solve_upper(L.T, solve_lower(L, B))


def spd_logdet(A):
    return 2.0 * np.sum(np.log(np.diag(chol(A))))


def se_kernel(A, B, lengthscale, variance):
    """k(x, x') = variance * exp(-1/2 sum_d ((x_d - x'_d) / l_d)^2), in extended precision."""
    ls = np.asarray(lengthscale, dtype=LD)
    A = np.atleast_2d(np.asarray(A, dtype=LD)) / ls
    B = np.atleast_2d(np.asarray(B, dtype=LD)) / ls
    diff = A[:, None, :] - B[None, :, :]
    return LD(variance) * np.exp(-0.5 * np.sum(diff**2, axis=-1))


