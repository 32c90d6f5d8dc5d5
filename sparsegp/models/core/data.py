"""A model's training data: where they live (`Placement`: one process, or this rank's shard
of data sharded over torch.distributed ranks), the inputs a constructor takes in
(`prepare_inputs`), and what a model holds of its data (`Data`).

Whether the data are sharded is decided once, when a model is built (`placement_for`): a
model class that shards its data (`Model.shards_data`) built while a process group is
initialised holds one rank's rows, and every moment, count and choice taken from them is then
that of all ranks (`Shards`); any other model is one process's (`OneProcess`), whose methods
are the plain local computations — it never calls a collective operation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from ... import distributed
from ...runtime.config import PARAMETER_DTYPE
from ...validation import (
    ArrayLike,
    as_inputs,
    check_columns,
    check_feature_names,
    check_same_rows,
    column_names,
    model_device,
    model_dtype,
)


class Data(NamedTuple):
    """What a model holds of its data: the inputs X [N, D] in its internal units (float64;
    None for the random-input models, whose inputs are latent), the targets as its objective
    takes them (internal units, or labels), and the data-sized state that goes with them (the
    noise group or block of every row, EP sites: `extras`, buffers by name)."""

    X: Tensor | None
    y: Tensor
    extras: dict[str, Tensor] = {}


class HoldsData(Protocol):
    """A model's data, as `pooled_data` swaps them."""

    X: Tensor | None
    y: Tensor | None


class Placement(Protocol):
    """Where a model's data are: `OneProcess` or `Shards`."""

    sharded: bool

    def moments(self, T: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and standard deviation (n − 1) of the rows of T [N, ...]."""

    def count(self, T: Tensor) -> int:
        """The rows of T (of all ranks)."""

    def pooled(self, tensors: Sequence[Tensor], cap: int, seed: int, what: str
               ) -> list[Tensor]:
        """Row-aligned tensors with the rows of all ranks (at most about `cap`)."""

    def agree(self, value: object, what: str) -> None:
        """A ValueError on every rank where the ranks' `value`s differ."""

    def synchronise(self, module: nn.Module) -> None:
        """Every rank's parameters set to rank 0's."""


class OneProcess:
    """The data are all here (whatever torch.distributed says): local computations."""

    sharded = False

    def moments(self, T: Tensor) -> tuple[Tensor, Tensor]:
        std = T.std(0) if T.shape[0] > 1 else torch.zeros_like(T[0])
        return T.mean(0), std

    def count(self, T: Tensor) -> int:
        return int(T.shape[0])

    def pooled(self, tensors: Sequence[Tensor], cap: int, seed: int, what: str
               ) -> list[Tensor]:
        return list(tensors)

    def agree(self, value: object, what: str) -> None:
        return None

    def synchronise(self, module: nn.Module) -> None:
        return None


class Shards:
    """This process holds one rank's shard of the data: moments, counts and data-based
    choices are those of all ranks' rows (collective operations; every rank calls them)."""

    sharded = True

    def moments(self, T: Tensor) -> tuple[Tensor, Tensor]:
        return distributed.column_mean_std(T)

    def count(self, T: Tensor) -> int:
        return distributed.count_rows(T, True)

    def pooled(self, tensors: Sequence[Tensor], cap: int, seed: int, what: str
               ) -> list[Tensor]:
        return distributed.pooled_rows(tensors, cap, seed, what)

    def agree(self, value: object, what: str) -> None:
        distributed.check_same_on_all_ranks(value, what)

    def synchronise(self, module: nn.Module) -> None:
        self.agree(", ".join(f"{name} {list(p.shape)}" for name, p in module.named_parameters()),
                   "the parameters' shapes")
        distributed.broadcast_([p.data for p in module.parameters()], "the initial parameters")


def placement_for(sharded: bool) -> Placement:
    """`Shards` for a model whose data are this rank's shard, else `OneProcess`."""
    return Shards() if sharded else OneProcess()


def shards_here(shards_data: bool) -> bool:
    """Whether a model of a class that shards its data (`shards_data`) built now holds one
    rank's shard: a torch.distributed process group is initialised."""
    return shards_data and distributed.is_distributed()


class Inputs(NamedTuple):
    """A constructor's inputs, checked: X [N, D] in the model's internal units (float64),
    their units (`shift`, `scale` [D]), the dtype of the work and outputs, the device, the
    column names (a DataFrame's, or None) and N (of all shards)."""

    X: Tensor
    shift: Tensor
    scale: Tensor
    dtype: torch.dtype
    device: torch.device
    names: list[str] | None
    num_data: int


def nonzero(s: Tensor) -> Tensor:
    """Scales with zeros (constant columns) replaced by 1."""
    return torch.where(s > 0, s, torch.ones_like(s))


def prepare_inputs(X: ArrayLike, y: ArrayLike, dtype: torch.dtype | None, standardize: bool,
                   placement: Placement, inducing_points: object = None) -> Inputs:
    """X (and y, for their rows, dtype and device) as a model takes them: checked, float64,
    standardised column by column with `standardize` (moments of all shards). Inducing
    inputs given as a DataFrame must have X's columns."""
    dtype = model_dtype(X, y, dtype)
    device = model_device(X, y)
    check_same_rows(X, y)
    names = column_names(X)
    check_columns(inducing_points, names, "inducing_points")
    T = as_inputs(X, "X", dtype=dtype, device=device).to(PARAMETER_DTYPE)
    # before the first collective operation, which would hang on mismatched shapes
    placement.agree(f"X [N, {T.shape[1]}], y {_trailing_shape(y)}, dtype "
                    f"{str(dtype).replace('torch.', '')}", "the data's shape and dtype")
    mean, std = placement.moments(T)
    shift = mean if standardize else torch.zeros_like(mean)
    scale = nonzero(std) if standardize else torch.ones_like(std)
    T = (T - shift) / scale
    return Inputs(T, shift, scale, dtype, device, check_feature_names(
        names, T.shape[1], "the columns of X"), placement.count(T))


def _trailing_shape(y: ArrayLike) -> str:
    """y's shape after the rows, as '[N]' or '[N, P]'."""
    shape = tuple(np.shape(y))
    return "[" + ", ".join(["N", *(str(n) for n in shape[1:])]) + "]"


@contextmanager
def pooled_data(model: HoldsData, placement: Placement, cap: int) -> Iterator[None]:
    """With data sharded over ranks, the model's X and y are the rows of all ranks (at most
    `cap`) inside the block, so that data-based starting values are those of all the data."""
    if not placement.sharded:
        yield
        return
    X, y = model.X, model.y
    assert X is not None and y is not None
    model.X, model.y = placement.pooled([X, y], cap, 0, "the rows starting values are taken "
                                        "from")
    try:
        yield
    finally:
        model.X, model.y = X, y


def observed_targets(y: Tensor | None, num_data: int, num_outputs: int) -> int:
    """The observed target values: N, or N·P less the missing (NaN) ones for several outputs
    (which needs the data)."""
    if num_outputs == 1:
        return num_data
    if y is None:
        raise RuntimeError("the number of observed targets needs the training data")
    return int((~torch.isnan(y)).sum())
