"""The jittered Cholesky: relative jitter, escalation with a warning, clear errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from sparsegp.linalg import (
    CholeskyError,
    JitterWarning,
    jittered_cholesky,
    log_det_from_cholesky,
    solve_lower,
    solve_lower_t,
)


def spd(n, seed=0, scale=1.0):
    A = torch.as_tensor(np.random.default_rng(seed).normal(size=(n, n)))
    return scale * (A @ A.mT + n * torch.eye(n, dtype=torch.float64))


def test_well_conditioned_matrix_gets_exactly_the_requested_relative_jitter(recwarn):
    A = spd(6, scale=1e3)
    L, used = jittered_cholesky(A, 1e-6)
    assert used == 1e-6 and len(recwarn) == 0
    expected = A + 1e-6 * A.diagonal().mean() * torch.eye(6, dtype=torch.float64)
    torch.testing.assert_close(L @ L.mT, expected, rtol=1e-13, atol=0)
    L0, used0 = jittered_cholesky(A, 0.0)
    torch.testing.assert_close(L0 @ L0.mT, A, rtol=1e-13, atol=0)
    assert used0 == 0.0


def test_singular_matrix_escalates_with_a_warning_stating_the_jitter():
    x = torch.tensor([[0.0], [0.0], [1.0]], dtype=torch.float64)  # a duplicated point
    K = torch.exp(-0.5 * (x - x.mT) ** 2) * 5.0
    with pytest.warns(JitterWarning, match=r"needed jitter 1\.0e-0\d × mean diagonal = "):
        L, used = jittered_cholesky(K, 0.0, name="Kuu")
    assert used > 0
    torch.testing.assert_close(L @ L.mT, K + used * 5.0 * torch.eye(3, dtype=torch.float64))


def test_indefinite_matrix_is_a_clear_error():
    A = torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64))
    with pytest.raises(CholeskyError, match="not positive definite.*inducing inputs"):
        jittered_cholesky(A, 1e-6, name="Kuu")


@pytest.mark.parametrize("name, says, not_says", [
    ("Kuu", "re-initialise the inducing inputs", "standardize_X"),
    ("K + σ²I", "standardise the inputs (`standardize_X=True`)", "inducing"),
    ("the predictive covariance", "predict the marginals (full_cov=False)", "inducing"),
    ("S", "a smaller step (`gamma=`)", "inducing"),
])
def test_the_remedies_are_those_of_the_matrix_that_failed(name, says, not_says):
    A = torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64))
    with pytest.raises(CholeskyError, match=f"Cholesky of {re.escape(name)} ") as err:
        jittered_cholesky(A, 1e-6, name=name)
    assert says in str(err.value) and not_says not in str(err.value)
    with pytest.raises(CholeskyError, match=r"not positive definite\. Try this\.$"):
        jittered_cholesky(A, 1e-6, name=name, advice="Try this.")


def test_non_finite_matrix_is_named():
    A = spd(3)
    A[0, 1] = float("nan")
    with pytest.raises(CholeskyError, match="Kuu contains NaN"):
        jittered_cholesky(A, name="Kuu")


def test_triangular_helpers_and_log_det():
    A = spd(5, seed=3)
    L = torch.linalg.cholesky(A)
    B = torch.as_tensor(np.random.default_rng(4).normal(size=(5, 3)))
    torch.testing.assert_close(L @ solve_lower(L, B), B)
    torch.testing.assert_close(L.mT @ solve_lower_t(L, B), B)
    torch.testing.assert_close(L @ solve_lower(L, B[:, 0]), B[:, 0])
    assert float(log_det_from_cholesky(L)) == pytest.approx(float(torch.logdet(A)), rel=1e-12)
