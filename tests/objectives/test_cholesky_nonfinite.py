"""`jittered_cholesky` scans its matrix for NaN and inf only when the factorisation fails or
the mean diagonal is not finite: every non-finite entry of the lower triangle (the part read)
still gives the clear error, never a factor holding NaN."""

from __future__ import annotations

import pytest
import torch

from sparsegp.linalg import CholeskyError, jittered_cholesky


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", [(0, 0), (3, 1), (4, 4), (4, 0), (2, 2)])
def test_a_non_finite_entry_is_named(bad, where):
    A = 2.0 * torch.eye(5, dtype=torch.float64) + 0.1
    A[where] = bad
    A[where[::-1]] = bad
    with pytest.raises(CholeskyError, match="NaN or inf"):
        jittered_cholesky(A)


def test_a_finite_matrix_factorises_without_the_scan():
    A = 2.0 * torch.eye(5, dtype=torch.float64) + 0.1
    L, used = jittered_cholesky(A)
    eye = torch.eye(5, dtype=torch.float64)
    torch.testing.assert_close(L @ L.mT, A + used * torch.diagonal(A).mean() * eye)
