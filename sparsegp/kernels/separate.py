"""One kernel per output (or per latent function) of a multi-output model."""

from __future__ import annotations

from torch import Tensor

from .base import Combination, Kernel


class Separate(Combination):
    """Independent outputs with a kernel each: output (latent function) p is a GP with
    `kernels[p]`, and has its own inducing variables (`sparsegp.features.Separate`, built
    from `inducing_points` for every part). Use it in `SGPR` and `SVGP` with y [N, P] (one
    kernel per output; with SVGP's `mixing` W [P, L], one per latent function).

    Shapes: a list of P kernels on inputs [N, D]; it has no covariance of its own (`K` and
    `K_diag` refuse): the models evaluate each part with its own inducing variables.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> X = np.linspace(0, 1, 40)[:, None]
        >>> Y = np.c_[np.sin(12 * X[:, 0]), X[:, 0] ** 2]
        >>> k = sg.kernels.Separate([sg.kernels.SquaredExponential(lengthscale=0.1),
        ...                          sg.kernels.SquaredExponential(lengthscale=1.0)])
        >>> m = sg.SGPR(X, Y, kernel=k, inducing_points=10)
        >>> m.predict(X[:3])[0].shape, len(m.feature.features)
        ((3, 2), 2)
    """

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        raise TypeError("Separate holds one kernel per output: it has no covariance of its own "
                        "(use its parts, kernels[p])")

    def K_diag(self, X: Tensor) -> Tensor:
        raise TypeError("Separate holds one kernel per output: it has no covariance of its own "
                        "(use its parts, kernels[p])")

    def _share(self, signal_variance: float) -> float:
        return signal_variance  # one output each, each of that variance

    def initialise_from_targets(self, X: Tensor, y: Tensor, signal_variance: float) -> None:
        self.initialise_from_data(X, signal_variance)  # y is one output's, not each part's

    def __repr__(self) -> str:
        return "Separate[" + ", ".join(repr(k) for k in self.kernels) + "]"


def separate_parts(kernel: Kernel) -> list[Kernel] | None:
    """The kernels of a `Separate` kernel, else None."""
    return list(kernel.kernels) if isinstance(kernel, Separate) else None
