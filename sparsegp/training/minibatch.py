"""Minibatch training of a variational model: natural gradients on q(u), Adam on the rest.

Each step takes a natural-gradient step of size γ on q(u) with the minibatch's unbiased ELBO
estimate (Salimbeni et al. 2018), then an Adam step on the hyperparameters (or Adam on
everything without `natgrad`). Under torch.distributed the model is wrapped in
DistributedDataParallel and the data split by a DistributedSampler. The model offers
`q_mu`, `q_sqrt`, `elbo(X, y, q_mu=, q_sqrt=)`, `forward(X, y)` (minus the minibatch ELBO and
log priors), `internal_batch(Xb, yb)` for batches in the user's units, and `X`, `y`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm

from ..distributed import all_reduce_, is_distributed
from ..linalg import CholeskyError
from ..validation import positive_float, positive_int, seeded_generator
from .guard import accepted
from .interrupts import agreed_interrupts, warn_interrupted
from .natural_gradients import averaged_over_ranks, expectation_parameters, natural_update
from .options import DEFAULT_LR
from .progress import progress_bar
from .result import INTERRUPTED, FitResult, Snapshot, model_name, warn_stopped


class _Minibatched(Protocol):
    """What `fit_minibatch` trains (the module docstring): the bound on minibatches, in
    internal units, with an explicit q(u)."""

    X: Tensor
    y: Tensor
    q_mu: nn.Parameter
    q_sqrt: nn.Parameter

    def __call__(self, Xb: Tensor, yb: Tensor) -> Tensor: ...

    def elbo(self, X: Tensor, y: Tensor, q_mu: Tensor | None = None,
             q_sqrt: Tensor | None = None) -> Tensor: ...

    def log_prior(self) -> Tensor: ...

    def internal_batch(self, Xb: Tensor, yb: Tensor) -> tuple[Tensor, Tensor]: ...


class _Loader(Protocol):
    """Minibatches (Xb, yb), and how many there are (a DataLoader, `_Batches`)."""

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]: ...

    def __len__(self) -> int: ...


def _loader(model: _Minibatched, batch_size: int, data: _Loader | None, seed: int
            ) -> tuple[_Loader, DistributedSampler[int] | None]:
    if data is not None:
        return data, None
    dataset = torch.utils.data.TensorDataset(model.X, model.y)
    g = seeded_generator(seed)
    if is_distributed():
        sampler: DistributedSampler[int] = DistributedSampler(dataset, shuffle=True, seed=seed)
        return torch.utils.data.DataLoader(dataset, batch_size, sampler=sampler), sampler
    return _Batches(model.X, model.y, batch_size, g), None


class _Batches:
    """Shuffled minibatches (X[idx], y[idx]) of tensors already in memory, a new permutation
    per epoch: one gather per batch, where a DataLoader over a TensorDataset indexes and
    collates row by row (measured: a fifth of an SVGP step's time at B = 1024, M = 200)."""

    def __init__(self, X: Tensor, y: Tensor, batch_size: int, generator: torch.Generator) -> None:
        self.X, self.y, self.batch_size, self.generator = X, y, batch_size, generator

    def __len__(self) -> int:
        return math.ceil(self.X.shape[0] / self.batch_size)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        order = torch.randperm(self.X.shape[0], generator=self.generator).to(self.X.device)
        for start in range(0, order.shape[0], self.batch_size):
            idx = order[start:start + self.batch_size]
            yield self.X[idx], self.y[idx]


def _mean_over_ranks(total: Tensor | float, count: int, device: torch.device) -> float:
    """total / count summed over ranks first (one collective per epoch)."""
    t = torch.stack([torch.as_tensor(total, dtype=torch.float64, device=device),
                     torch.tensor(float(count), dtype=torch.float64, device=device)])
    all_reduce_([t], "the epoch's objective")
    return float(t[0]) / max(1.0, float(t[1]))


def fit_minibatch(model: Any, batch_size: int | None, epochs: int | None, lr: float | None,
                  natgrad: bool, gamma: float | None, data: Any, progress: bool | None,
                  seed: int | None, callback: Callable[[int, float], None] | None) -> FitResult:
    """Minibatches of `batch_size` (default min(N, 256)) from the model's data or from `data`
    (a DataLoader of (X, y) batches in the units of X) for `epochs` (default: about 2,000
    steps), drawn with `seed` (default 0); Adam steps (`lr`, default `DEFAULT_LR`), and
    natural-gradient steps of size `gamma` (default 0.1) on q(u) when `natgrad`. The result
    counts steps (one per minibatch) as its `iterations` and `evaluations`, its `history` is
    the mean objective of each epoch, and `info` holds {"epochs": ..., "steps": ...}."""
    start = time.perf_counter()
    history: list[float] = []
    steps, epoch = 0, 0
    success, message, interrupted = True, "", False
    name = model_name(model)
    bar: tqdm | None = None
    try:  # from the first instant: Ctrl-C in the setup leaves the starting values
        N = model.num_data
        B = min(N, 256) if batch_size is None else positive_int(batch_size, "batch_size")
        epochs = (max(1, math.ceil(2000 * B / N)) if epochs is None
                  else positive_int(epochs, "epochs"))
        gamma = 0.1 if gamma is None else positive_float(gamma, "gamma")
        lr = DEFAULT_LR if lr is None else positive_float(lr, "lr")
        seed = 0 if seed is None else seed
        loader, sampler = _loader(model, B, data, seed)
        # natural-gradient steps move all of q(u): with q_mu or q_sqrt frozen, Adam moves the
        # rest
        natgrad = natgrad and model.q_mu.requires_grad and model.q_sqrt.requires_grad
        q = {id(model.q_mu), id(model.q_sqrt)}
        hyper = [p for p in model.parameters()
                 if p.requires_grad and (not natgrad or id(p) not in q)]
        if not (hyper or natgrad):
            return accepted(_frozen(model, loader, data, start))
        opt = torch.optim.Adam(hyper, lr=lr) if hyper else None
        # DDP all-reduces the gradients of Adam-only steps; the natural-gradient step averages
        # its own
        module: nn.Module = (nn.parallel.DistributedDataParallel(model)
                             if is_distributed() and not natgrad else model)
        bar = progress_bar(progress, epochs, f"fit {name}")
        device = next(model.parameters()).device
        with agreed_interrupts(is_distributed(), device) as interrupts:
            for epoch in range(epochs):
                if sampler is not None:
                    sampler.set_epoch(epoch)
                total: Tensor | float = 0.0
                for Xb, yb in loader:
                    if data is not None:
                        Xb, yb = model.internal_batch(Xb, yb)
                    snapshot = Snapshot(model)
                    try:
                        if natgrad:  # one evaluation: q(u)'s natural gradient and Adam's gradient
                            loss = _natural_step(model, Xb, yb, hyper, opt, gamma)
                        else:
                            assert opt is not None  # without natural steps, something is trained
                            opt.zero_grad()
                            loss = module(Xb, yb)
                            loss.backward()
                            opt.step()
                    except (KeyboardInterrupt, CholeskyError):
                        snapshot.restore()
                        raise
                    total = total + loss.detach()  # one host sync per epoch, not per step
                    steps += 1
                # the epoch's mean over every rank's batches (each rank has its own)
                history.append(-_mean_over_ranks(total, len(loader), device))
                bar.update(1)
                bar.set_postfix(elbo=f"{history[-1]:.6g}")
                interrupts.call(callback, epoch, history[-1])
                if not math.isfinite(history[-1]):
                    success, message = False, f"the ELBO became {history[-1]} in epoch {epoch}"
                    break
            else:
                message = f"{epochs} epochs of {steps // epochs} steps"
    except KeyboardInterrupt:
        success, interrupted = False, True
        message = f"{INTERRUPTED} in epoch {epoch} after {steps} steps"
        warn_interrupted(f"{name}.fit", f"in epoch {epoch}", stacklevel=4)
    except CholeskyError as err:  # a step that cannot be taken ends training, not the program
        success = False
        message = warn_stopped(f"{name}.fit", err, stacklevel=4)
    finally:
        if bar is not None:
            bar.close()
    objective = history[-1] if history else float("nan")
    # iterations are the optimiser's steps (one per minibatch), as for every other fit;
    # history holds each epoch's mean objective, and info the epochs and steps
    return accepted(FitResult(success, message, steps, steps, objective, history,
                              time.perf_counter() - start,
                              info={"epochs": len(history), "steps": steps},
                              interrupted=interrupted, fixed_budget=True))


def _natural_step(model: _Minibatched, Xb: Tensor, yb: Tensor, hyper: list[nn.Parameter],
                  opt: torch.optim.Optimizer | None, gamma: float) -> Tensor:
    """One step from one evaluation of the minibatch bound: its gradient in q(u)'s expectation
    parameters gives the natural-gradient step (size γ), its gradient in the hyperparameters
    the Adam step, both taken at the current q(u) (as GPyTorch's and GPflow's loops do). Under
    torch.distributed every rank's (unbiased) gradients are averaged. Returns the loss,
    −(bound + log prior)."""
    eta = expectation_parameters(model.q_mu, model.q_sqrt)
    loss = -(model.elbo(Xb, yb, q_mu=eta.mean, q_sqrt=eta.root) + model.log_prior())
    found = torch.autograd.grad(loss, [eta.eta1, eta.eta2, *hyper], allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g
             for p, g in zip([eta.eta1, eta.eta2, *hyper], found)]
    grads = averaged_over_ranks(grads, "the minibatch gradients")
    for p, g in zip(hyper, grads[2:]):
        p.grad = g
    if getattr(model, "natural_steps_can_overshoot", False):
        _damped_update(model, Xb, yb, -grads[0], -grads[1], gamma, loss.detach())
    else:
        natural_update(model.q_mu, model.q_sqrt, -grads[0], -grads[1], gamma)
    if opt is not None:  # None: every hyperparameter is frozen
        opt.step()
    return loss


#: Halvings of a natural-gradient step that lowered its minibatch's bound, before q(u) stays put
DAMPING_HALVINGS = 20


def _damped_update(model: _Minibatched, Xb: Tensor, yb: Tensor, g1: Tensor, g2: Tensor,
                   gamma: float, loss: Tensor) -> float:
    """The natural-gradient step, halved until the minibatch's bound does not fall (a
    non-conjugate likelihood's step can overshoot: from the prior, counts of ~100 under a
    Poisson likelihood jumped the log rate to ~11 and the bound from −9e3 to −1e7). Costs one
    more evaluation of the minibatch bound per try. Returns the step taken (0: none)."""
    # the bound at the current q(u) (the loss less the log prior, which q(u) does not change),
    # averaged over ranks as every rank must decide alike
    before = -float(averaged_over_ranks([loss.reshape(1)], "the minibatch bound")[0]) \
        - float(model.log_prior())
    start = model.q_mu.detach().clone(), model.q_sqrt.detach().clone()
    step = gamma
    for _ in range(DAMPING_HALVINGS):
        step = natural_update(model.q_mu, model.q_sqrt, g1, g2, step)
        with torch.no_grad():
            bound = averaged_over_ranks([model.elbo(Xb, yb).reshape(1)], "the minibatch bound")[0]
        after = float(bound)
        if math.isfinite(after) and after >= before - 1e-9 * abs(before):
            return step
        with torch.no_grad():
            model.q_mu.copy_(start[0])
            model.q_sqrt.copy_(start[1])
        step /= 2.0
    return 0.0


def _frozen(model: _Minibatched, loader: _Loader, data: _Loader | None, start: float
            ) -> FitResult:
    """The result of a fit with nothing to train: the bound over one pass of the batches."""
    total, count = 0.0, 0
    with torch.no_grad():
        for Xb, yb in loader:
            if data is not None:
                Xb, yb = model.internal_batch(Xb, yb)
            total, count = total + float(model(Xb, yb)), count + 1
    objective = -total / max(1, count)
    return FitResult(True, "no trainable parameters (all frozen)", 0, 0, objective, [objective],
                     time.perf_counter() - start)
