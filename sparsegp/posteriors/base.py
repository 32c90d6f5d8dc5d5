"""What every posterior is: a frozen value (`Posterior`) that predicts in chunks of test points,
built from detached copies of what the model held (`frozen`, `frozen_copy`), or with the graph
to the model's parameters while `tracking`."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from ..conditionals import with_prior_mean
from ..kernels.base import Kernel
from ..runtime.chunking import ChunkBuffers, chunk_slices

ModuleT = TypeVar("ModuleT", bound=nn.Module)


#: True while a posterior is built with the graph to the model's parameters (`tracking`).
_TRACKING: ContextVar[bool] = ContextVar("sparsegp_tracking_posterior", default=False)


@contextmanager
def tracking() -> Iterator[None]:
    """Posteriors built inside keep the autograd graph to the model's live parameters (no
    copies, nothing detached), so that predictions are differentiable with respect to them.
    Such a posterior reflects the parameters as they were when it was built; it is not cached.
    """
    token = _TRACKING.set(True)
    try:
        yield
    finally:
        _TRACKING.reset(token)


def frozen(t: Tensor) -> Tensor:
    """t detached from the graph, except while `tracking`."""
    return t if _TRACKING.get() else t.detach()


def frozen_copy(module: ModuleT) -> ModuleT:
    """A deep copy with every parameter detached from training (the module itself while
    `tracking`)."""
    if _TRACKING.get():
        return module
    twin = copy.deepcopy(module)
    # new frozen parameters rather than `requires_grad_(False)`, which torch.func transforms
    # refuse (should a posterior be built inside one: `runtime.transforms`)
    for sub in twin.modules():
        for name, p in list(sub.named_parameters(recurse=False)):
            if p.requires_grad:
                sub.register_parameter(name, nn.Parameter(p.detach(), requires_grad=False))
    return twin


class Posterior(ABC):
    """q(f*) at new inputs. Subclasses give the mean and variance for one block of inputs."""

    kernel: Kernel
    noise_variance: Tensor
    mean: nn.Module | None = None  # the prior mean m(x), frozen; None for zero
    tracks: bool = False  # built while `tracking`: the graph to the parameters is kept

    def _adopt_mean(self, mean: nn.Module | None) -> None:
        self.tracks = _TRACKING.get()
        self.mean = None if mean is None else frozen_copy(mean)

    def _shifted(self, Xs: Tensor, mean: Tensor) -> Tensor:
        """The predictive mean plus the prior mean at Xs ([B] or [B, C]; a prior mean of
        [B] is shared by the C columns)."""
        if self.mean is None:
            return mean
        return with_prior_mean(mean, self.mean(Xs).to(mean.dtype))

    @abstractmethod
    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        """Mean and variance (or covariance) of f* at one block of inputs Xs; `buffers`: the
        pass's tensors to reuse for the block's large temporaries (None: fresh ones)."""

    @abstractmethod
    def _rows_per_chunk(self) -> int:
        """Test points per block of `predict_f`, from the memory budget."""

    def predict_f(
        self, Xnew: Tensor, full_cov: bool = False, chunk_size: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Mean [N*] and variance [N*] (or covariance [N*, N*]) of the latent f*."""
        if full_cov:
            m, v = self._block(Xnew, True)
            return self._shifted(Xnew, m), v
        size = chunk_size or self._rows_per_chunk()
        mean: Tensor | None = None
        var: Tensor | None = None
        buffers = ChunkBuffers()
        for s in chunk_slices(Xnew.shape[0], size):
            m, v = self._block(Xnew[s], False, buffers)
            m = self._shifted(Xnew[s], m)
            if mean is None or var is None:  # both None until the first chunk
                # Outputs allocated once, then filled: many small chunk results kept alive
                # between the large temporaries fragment the heap (measured: RSS grew by one
                # B×M block per chunk).
                mean = m.new_empty((Xnew.shape[0], *m.shape[1:]))
                var = v.new_empty((Xnew.shape[0], *v.shape[1:]))
            mean[s], var[s] = m, v
        if mean is None or var is None:
            empty = Xnew.new_zeros(0)
            return empty, empty
        return mean, var

    def predict_y(
        self, Xnew: Tensor, full_cov: bool = False, chunk_size: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Predictive mean and variance (or covariance) of noisy observations y*."""
        if self.noise_variance.dim() > 0:
            raise ValueError("the noise of this posterior differs per training point: add the "
                             "noise of the new points to predict_f's variance yourself (the "
                             "models' predict(..., noise_variance=...) does)")
        mean, var = self.predict_f(Xnew, full_cov, chunk_size)
        if full_cov:
            eye = torch.eye(var.shape[0], dtype=var.dtype, device=var.device)
            return mean, var + self.noise_variance * eye
        return mean, var + self.noise_variance

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The tensors that define this posterior (for saving)."""


