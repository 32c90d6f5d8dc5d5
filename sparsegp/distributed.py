"""torch.distributed helpers: data sharded across processes, sums reduced across them.

Nothing here does anything unless a process group is initialised with more than one rank.
A failed collective (a peer process died, the group timed out) becomes a `DistributedError`
that says which rank saw it and what was being reduced, instead of a hang or a bare trace.

Shapes: `all_reduce_` and `broadcast_` take a list of tensors of any shapes (changed in place);
`column_mean_std(T [N, ...])` -> mean, std [...] over all ranks' rows; `all_gather_objects`
gives every rank's Python value; `summed_gradient(t)` is t with its gradient summed over ranks.

Example:

    >>> import torch, sparsegp as sg
    >>> sg.distributed.is_distributed()  # no process group: every helper is local
    False
    >>> t = torch.tensor([1.0, 2.0])
    >>> sg.distributed.all_reduce_([t], "a demo")
    >>> t.tolist(), sg.distributed.global_sum(3.0, t)
    ([1.0, 2.0], 3.0)
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import Tensor

from .autograd import Context


class DistributedError(RuntimeError):
    """A collective operation failed: a peer process stopped, or the group timed out.

    The process group is unusable afterwards: call `torch.distributed.destroy_process_group()`
    before exiting (with gloo, exiting with the group alive can abort the process).
    Shapes: none (a `RuntimeError` subclass); the message names the rank and what was reduced.

    Example:

        >>> import torch, sparsegp as sg
        >>> issubclass(sg.DistributedError, RuntimeError)
        True
        >>> def fit_shard(model, **options):
        ...     try:
        ...         return model.fit(**options)
        ...     except sg.DistributedError:
        ...         torch.distributed.destroy_process_group()
        ...         raise
        >>> X, y = sg.datasets.snelson()
        >>> fit_shard(sg.SGPR(X, y, inducing_points=10), maxiter=5).iterations  # one process
        5
    """


def backend_and_device(local_rank: int, local_world_size: int, gpus: int) -> tuple[str, str]:
    """The process-group backend and this rank's device for `local_world_size` ranks on a
    machine with `gpus` GPUs: NCCL with a GPU of its own per rank when there are enough;
    gloo with the GPUs shared round-robin when there are fewer (NCCL refuses two ranks on one
    GPU; gloo reduces and broadcasts CUDA tensors, which is all sparsegp needs); gloo on the
    CPU without GPUs. Shapes: none (ints in, ('nccl' | 'gloo', 'cuda:i' | 'cpu') out).

    Example:

        >>> import sparsegp as sg
        >>> sg.distributed.backend_and_device(1, 2, gpus=1)  # two ranks, one GPU
        ('gloo', 'cuda:0')
    """
    for name, value in (("local_rank", local_rank), ("local_world_size", local_world_size),
                        ("gpus", gpus)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer; got {value!r}")
    if not 0 <= local_rank < max(local_world_size, 1):
        raise ValueError(f"local_rank must lie in [0, {local_world_size}); got {local_rank}")
    if gpus == 0:
        return "gloo", "cpu"
    if gpus >= local_world_size:
        return "nccl", f"cuda:{local_rank}"
    return "gloo", f"cuda:{local_rank % gpus}"


def init_from_environment(timeout: float = 300.0) -> torch.device:
    """Initialise the process group of a `torchrun` launch (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE in the environment) with `backend_and_device`'s choice for this machine's
    GPUs, make the chosen GPU current, and return this rank's device. Any number of ranks
    on any number of GPUs, none included."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend, device = backend_and_device(local_rank, local_world, gpus)
    if device != "cpu":
        torch.cuda.set_device(torch.device(device))
    torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    return torch.device(device)


def is_distributed() -> bool:
    """True when a process group with more than one rank is initialised."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _fail(what: str, err: Exception) -> DistributedError:
    dist = torch.distributed
    return DistributedError(
        f"rank {dist.get_rank()} of {dist.get_world_size()}: collective operation on {what} "
        f"failed — a peer process probably stopped or the process group timed out "
        f"({type(err).__name__}: {err})"
    )


def all_reduce_(tensors: Sequence[Tensor], what: str, op: str = "sum") -> None:
    """Sum the tensors over all ranks (`op` "min" or "max": their elementwise minimum or
    maximum), in place, with one collective call."""
    if not is_distributed() or not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    reduce_op = {"sum": torch.distributed.ReduceOp.SUM, "min": torch.distributed.ReduceOp.MIN,
                 "max": torch.distributed.ReduceOp.MAX}[op]
    try:
        torch.distributed.all_reduce(flat, op=reduce_op)
    except Exception as err:  # gloo/NCCL raise RuntimeError subclasses of several kinds
        raise _fail(what, err) from err
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view_as(t))
        offset += n


def broadcast_(tensors: Sequence[Tensor], what: str, src: int = 0) -> None:
    """Overwrite the tensors on every rank with rank `src`'s values, in place."""
    if not is_distributed() or not tensors:
        return
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    try:
        torch.distributed.broadcast(flat, src)
    except Exception as err:
        raise _fail(what, err) from err
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n


def all_gather_objects(value: object, what: str) -> list[object]:
    """Every rank's `value` (picklable), in rank order; [value] when not distributed."""
    if not is_distributed():
        return [value]
    out: list[object] = [None] * torch.distributed.get_world_size()
    try:
        torch.distributed.all_gather_object(out, value)
    except Exception as err:
        raise _fail(what, err) from err
    return out


def any_rank(flag: bool, what: str, device: torch.device | str = "cpu") -> bool:
    """True on every rank when `flag` is True on some rank; `flag` when not distributed.
    `device`: where the backend's collectives run (a GPU for NCCL)."""
    if not is_distributed():
        return bool(flag)
    t = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64, device=device)
    all_reduce_([t], what)
    return bool(t.item() > 0)


#: Data-based choices on sharded data (inducing inputs, starting values) see at most this
#: many of all the ranks' rows (all of them when there are fewer: one process's choice).
POOLED_ROWS = 20_000


def pooled_rows(tensors: Sequence[Tensor], cap: int, seed: int, what: str) -> list[Tensor]:
    """The rows of every rank's `tensors` (row-aligned: [N, ...] each), in rank order, on
    every rank: all of them when the ranks hold at most `cap` rows together, otherwise a
    seeded random subset of each rank's rows in proportion to its share (about `cap` in
    all). Not distributed: the tensors themselves."""
    if not is_distributed():
        return list(tensors)
    n = tensors[0].shape[0]
    counts = cast(list[int], all_gather_objects(n, what))
    total = sum(counts)
    local = list(tensors)
    if total > cap:
        keep = round(cap * n / total)
        g = torch.Generator().manual_seed(seed + 7919 * torch.distributed.get_rank())
        idx = torch.randperm(n, generator=g)[:keep].sort().values
        local = [t[idx.to(t.device)] for t in tensors]
    parts = cast(list[list[Tensor]], all_gather_objects([t.detach().cpu() for t in local], what))
    return [torch.cat([part[i] for part in parts]).to(t.device) for i, t in enumerate(tensors)]


def gathered_rows(X: Tensor, y: Tensor, noise: Tensor, what: str
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """Every rank's rows of X, y and of the noise σ²_n [N] (a scalar σ² as it is), on every
    rank: all of the sharded data, for what needs them in one place (the exact GP of few
    rows). Not distributed: the tensors themselves."""
    per_row = [noise] if noise.dim() == 1 else []
    X, y, *rest = pooled_rows([X, y, *per_row], sys.maxsize, 0, what)
    return X, y, rest[0] if rest else noise


def check_same_on_all_ranks(value: object, what: str) -> None:
    """A ValueError on every rank, at once, when ranks' `value` (picklable) differ: shapes
    that must agree before a collective operation, which would otherwise wait out the
    process group's timeout (or sum mismatched tensors)."""
    values = all_gather_objects(value, what)
    if any(v != values[0] for v in values[1:]):
        listed = "; ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise ValueError(f"{what} must be the same on every rank of the process group; got "
                         f"{listed}")


class _SummedGradient(torch.autograd.Function):
    """t itself; its gradient summed over the ranks (`summed_gradient`)."""

    @staticmethod
    def forward(t: Tensor) -> Tensor:
        return t.view_as(t)

    @staticmethod
    def setup_context(ctx: Context, inputs: tuple[Any, ...], output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Context, g: Tensor) -> Tensor:
        if torch.is_grad_enabled():  # a graph of the gradient is wanted
            return _AllReduced.apply(g)
        g = g.clone()
        all_reduce_([g], "the gradient of a per-row term")
        return g


class _AllReduced(torch.autograd.Function):
    """The sum of a tensor over the ranks, differentiable: the vector-Jacobian product of
    g ↦ Σ_ranks g is the same sum (so `_SummedGradient` is twice differentiable)."""

    @staticmethod
    def forward(g: Tensor) -> Tensor:
        g = g.clone()
        all_reduce_([g], "the gradient of a per-row term")
        return g

    @staticmethod
    def setup_context(ctx: Context, inputs: tuple[Any, ...], output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Context, v: Tensor) -> Tensor:
        if torch.is_grad_enabled():
            return _AllReduced.apply(v)
        v = v.clone()
        all_reduce_([v], "a second derivative of a per-row term")
        return v


def summed_gradient(t: Tensor) -> Tensor:
    """t itself, whose gradient is summed over the ranks in the backward pass: for a tensor
    that reaches the objective only through this rank's rows (a mean function's parameters
    through y − m(X), per-group noise variances), whose gradient is otherwise this rank's
    share only. Not distributed: t unchanged."""
    if not is_distributed() or not t.requires_grad:
        return t
    return _SummedGradient.apply(t)


def global_sum(value: float, like: Tensor) -> float:
    """A Python number summed over all ranks."""
    t = torch.tensor([float(value)], dtype=torch.float64, device=like.device)
    all_reduce_([t], "a count")
    return float(t)


def count_rows(T: Tensor, sharded: bool) -> int:
    """The rows of T [N, ...]: of all ranks when T is this rank's shard of sharded data."""
    return int(global_sum(T.shape[0], T)) if sharded else T.shape[0]


def column_mean_std(T: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and standard deviation (n − 1) of the rows of T [N, ...] over all ranks' rows."""
    n = torch.tensor(float(T.shape[0]), dtype=T.dtype, device=T.device)
    total = T.sum(0)
    all_reduce_([n, total], "data moments")
    mean = total / n
    sq = ((T - mean) ** 2).sum(0)
    all_reduce_([sq], "data moments")
    return mean, torch.sqrt(sq / (n - 1).clamp_min(1.0))
