"""Dense linear algebra shared by every objective: a jittered Cholesky and triangular solves.

No explicit inverses anywhere in the library: every A⁻¹b is a pair of triangular solves.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from .runtime.config import DEFAULT_JITTER, JITTER_ESCALATIONS, MIN_ESCALATION_JITTER

LOG_2PI = math.log(2.0 * math.pi)


class CholeskyError(RuntimeError):
    """A matrix could not be factorised even after jitter escalation.

    Shapes: none (a `RuntimeError` subclass, raised by `jittered_cholesky` for A [M, M] and so
    by any model whose Kuu or K + σ²I cannot be factorised); the message names likely causes.

    Example:

        >>> import torch, sparsegp as sg
        >>> from sparsegp.linalg import jittered_cholesky
        >>> issubclass(sg.CholeskyError, RuntimeError)
        True
        >>> try:
        ...     jittered_cholesky(-torch.eye(2, dtype=torch.float64))  # not positive definite
        ... except sg.CholeskyError as err:
        ...     print("not positive definite" in str(err))
        True
    """


class JitterWarning(UserWarning):
    """A Cholesky succeeded only after adding more jitter than asked for.

    Shapes: none (a `UserWarning` subclass; the message gives the jitter added to A [M, M]).
    Usually a sign of nearly coincident inducing inputs or a very long lengthscale.

    Example:

        >>> import warnings, torch, sparsegp as sg
        >>> from sparsegp.linalg import jittered_cholesky
        >>> A = torch.ones(3, 3, dtype=torch.float64)  # singular
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always", sg.JitterWarning)
        ...     L, used = jittered_cholesky(A, jitter=0.0)
        >>> [w.category.__name__ for w in caught], used > 0.0
        (['JitterWarning'], True)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", sg.JitterWarning)  # silence it instead
        ...     L, used = jittered_cholesky(A, jitter=0.0)
    """


def jittered_cholesky(
    A: Tensor,
    jitter: float = DEFAULT_JITTER,
    *,
    name: str = "Kuu",
    escalations: int = JITTER_ESCALATIONS,
    advice: str | None = None,
) -> tuple[Tensor, float]:
    """Lower Cholesky factor of A + j·mean(diag A)·I, escalating j ×10 on failure.

    Shapes: A [M, M] -> L [M, M]. Returns (L, j): the relative jitter j actually used,
    which starts at `jitter` and, if the factorisation fails, is raised by factors of 10 up
    to `escalations` times (with a `JitterWarning` stating the amount added). The jitter is
    relative to the mean diagonal (docs/math.md §7), so it is invariant to the kernel's scale.
    The factorisation reads the lower triangle of A. Raises `CholeskyError` naming likely
    causes and remedies when every attempt fails (`advice`, or by default those of the
    matrix `name` in `ADVICE`: K + σ²I an exact GP's, Kuu and the others a model with
    inducing variables', `INDUCING_ADVICE`), or saying so when A holds NaN or inf anywhere.
    """
    scale = torch.diagonal(A).mean()
    # one sum over A (no N×N temporary) is finite unless A holds NaN or inf (or overflows, when
    # the scan below finds nothing); it is only scanned then, or when a factorisation fails
    finite = math.isfinite(float(scale.detach())) and math.isfinite(float(A.detach().sum()))
    tries = [jitter] + [max(jitter, MIN_ESCALATION_JITTER) * 10.0**k for k in range(1, escalations + 1)]
    for i, j in enumerate(tries):
        Aj = add_to_diagonal(A, j * scale) if j > 0 else A
        L, info = torch.linalg.cholesky_ex(Aj)
        ok = int(info) == 0
        if (not ok or not finite) and not bool(torch.isfinite(A).all()):
            raise CholeskyError(
                f"{name} contains NaN or inf: the inputs or the hyperparameters are not finite "
                "(a lengthscale or variance overflowed, or the data hold NaN/inf)"
            )
        if ok:
            if i > 0:
                warnings.warn(
                    f"Cholesky of {name} ({A.shape[-1]}×{A.shape[-1]}) needed jitter {j:.1e} × "
                    f"mean diagonal = {j * float(scale.detach()):.3e} added to the diagonal "
                    f"(asked for {jitter:.1e}); the matrix is close to singular",
                    JitterWarning,
                    stacklevel=2,
                )
            return L, j
    raise CholeskyError(
        f"Cholesky of {name} ({A.shape[-1]}×{A.shape[-1]}) failed even with jitter "
        f"{tries[-1]:.1e} × mean diagonal: the matrix is not positive definite. "
        + (ADVICE.get(name, INDUCING_ADVICE) if advice is None else advice)
    )


#: What a failed factorisation of a matrix built on inducing variables (Kuu, its blocks,
#: I + A and the streamed models' matrices) says: the default.
INDUCING_ADVICE = (
    "Likely causes: duplicate or nearly coincident inducing inputs, a lengthscale far longer "
    "than the spread of the inputs, a kernel variance near zero, or float32 precision. "
    "Remedies: re-initialise the inducing inputs (or use fewer), pass a larger `jitter=`, or "
    "use float64.")

#: ... of K + σ²I, an exact GP's (GPR) matrix, which has no inducing inputs: duplicate
#: inputs make K singular, so σ² alone keeps it positive definite, and inputs on a raw
#: scale (large offsets, spreads far from 1) lose their squared distances to rounding at
#: short lengthscales.
EXACT_ADVICE = (
    "Likely causes: duplicate or nearly coincident inputs with a noise variance near zero, "
    "inputs on a raw scale (large offsets or spreads far from 1) with a short lengthscale, a "
    "lengthscale far longer than the spread of the inputs, or float32 precision. Remedies: "
    "standardise the inputs (`standardize_X=True`), merge or average duplicate rows, set a "
    "floor on the noise (`model.set_bounds(\"noise_variance\", lower, upper)`, in the "
    "model's internal units), pass a larger `jitter=`, or use float64.")

#: The advice of a failed factorisation by the matrix's `name` (`jittered_cholesky`);
#: `INDUCING_ADVICE` for the others.
ADVICE = {
    "K + σ²I": EXACT_ADVICE,
    "the predictive covariance": (
        "Likely causes: duplicate or nearly coincident prediction inputs, or float32 "
        "precision. Remedies: drop duplicate rows of the prediction inputs, predict "
        "the marginals (full_cov=False), or use float64."),
    "S": (
        "Likely causes: q(u)'s covariance collapsed in a natural-gradient step that was too "
        "long, or float32 precision. Remedies: a smaller step (`gamma=`), or use float64."),
}


def add_to_diagonal(A: Tensor, d: Tensor | float) -> Tensor:
    """A + diag(d) (d a scalar or [N]) as a new matrix, without an N×N identity or diagonal
    matrix alongside (differentiable in A and d)."""
    out = A.clone()
    out.diagonal(dim1=-2, dim2=-1).add_(d)
    return out


def solve_lower(L: Tensor, B: Tensor) -> Tensor:
    """L⁻¹B for lower-triangular L. Shapes: L [M, M], B [M, K] or [M]."""
    if B.dim() == 1:
        return torch.linalg.solve_triangular(L, B.unsqueeze(-1), upper=False).squeeze(-1)
    return torch.linalg.solve_triangular(L, B, upper=False)


def solve_lower_t(L: Tensor, B: Tensor) -> Tensor:
    """L⁻ᵀB for lower-triangular L. Shapes: L [M, M], B [M, K] or [M]."""
    if B.dim() == 1:
        return torch.linalg.solve_triangular(L.mT, B.unsqueeze(-1), upper=True).squeeze(-1)
    return torch.linalg.solve_triangular(L.mT, B, upper=True)


def log_det_from_cholesky(L: Tensor) -> Tensor:
    """log|A| from its Cholesky factor L (A = L Lᵀ)."""
    return 2.0 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
