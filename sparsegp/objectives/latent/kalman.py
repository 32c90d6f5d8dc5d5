"""The Kalman filter's log-likelihood of a linear-Gaussian state-space model.

x_0 ~ N(m0, P0), x_{t+1} = A x_t + b + N(0, Qn), y_t = C x_t + d + N(0, R) (t = 0 … T−1):
log p(y_{0:T−1}) = Σ_t log N(y_t; C m_t + d, C P_t Cᵀ + R) with (m_t, P_t) the one-step
predictions (Kalman 1960). The exact reference for the GPSSM with a linear transition, and the
baseline that the GPSSM experiment compares k-step predictions with. Differentiable in every
argument (a torch function of tensors).
Shapes: Y [T, P], A [Q, Q], b [Q], Qn [Q, Q], C [P, Q], d [P], R [P, P], m0 [Q], P0 [Q, Q].
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ...linalg import LOG_2PI


class LinearSSM(NamedTuple):
    """The parameters of a linear-Gaussian state-space model (module docstring)."""

    A: Tensor
    b: Tensor
    Qn: Tensor
    C: Tensor
    d: Tensor
    R: Tensor
    m0: Tensor
    P0: Tensor


def kalman_filter(Y: Tensor, ssm: LinearSSM) -> tuple[Tensor, Tensor, Tensor]:
    """(log p(Y), filtered means [T, Q], filtered covariances [T, Q, Q])."""
    m, P = ssm.m0, ssm.P0
    total = Y.new_zeros(())
    means, covs = [], []
    for t in range(Y.shape[0]):
        if t > 0:  # predict
            m = ssm.A @ m + ssm.b
            P = ssm.A @ P @ ssm.A.mT + ssm.Qn
        Sy = ssm.C @ P @ ssm.C.mT + ssm.R  # innovation covariance
        r = Y[t] - (ssm.C @ m + ssm.d)
        if r.shape[0] == 1:  # one output: divisions (a factorisation per step costs ~10×)
            quad, log_det = r[0] * r[0] / Sy[0, 0], torch.log(Sy[0, 0])
            G = P @ ssm.C.mT / Sy[0, 0]
        else:
            L = torch.linalg.cholesky(0.5 * (Sy + Sy.mT))
            a = torch.linalg.solve_triangular(L, r[:, None], upper=False)[:, 0]
            quad, log_det = a @ a, 2.0 * torch.log(torch.diagonal(L)).sum()
            G = torch.cholesky_solve(ssm.C @ P, L).mT  # gain P Cᵀ Sy⁻¹
        total = total - 0.5 * (quad + log_det + r.shape[0] * LOG_2PI)
        m = m + G @ r
        P = P - G @ ssm.C @ P
        P = 0.5 * (P + P.mT)
        means.append(m)
        covs.append(P)
    return total, torch.stack(means), torch.stack(covs)


def kalman_forecast(ssm: LinearSSM, m: Tensor, P: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """Means [k, P] and variances [k, P] of y_{T−1+j}, j = 1 … k, from the filtered x_{T−1}."""
    means, variances = [], []
    for _ in range(steps):
        m = ssm.A @ m + ssm.b
        P = ssm.A @ P @ ssm.A.mT + ssm.Qn
        means.append(ssm.C @ m + ssm.d)
        variances.append(torch.diagonal(ssm.C @ P @ ssm.C.mT + ssm.R))
    return torch.stack(means), torch.stack(variances)
