"""The key a cached posterior is stored under: every parameter's and buffer's identity,
version, storage, shape, dtype, device — and values, so that no change goes unseen."""

from __future__ import annotations

import functools
from itertools import chain

import torch
from torch import Tensor

#: A parameter or buffer of at most this many elements is keyed by a copy of its values
#: (`StateKey`); a larger one (the training data, EP sites of large N) by `checksum`.
SNAPSHOT_ELEMENTS = 1 << 16

#: An integer dtype of each element size: the bit patterns of a tensor's values.
_BIT_DTYPES = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def value_bits(t: Tensor) -> Tensor:
    """The bit patterns of t's values, flat (a view where t is contiguous): equal exactly when
    the values are, NaN included (NaN == NaN here, −0.0 != +0.0)."""
    flat = t.detach().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    return flat.view(_BIT_DTYPES[flat.element_size()])


@functools.lru_cache(maxsize=4)
def _row_weights(rows: int, device: torch.device) -> Tensor:
    """1 + frac(i/φ), i = 0 … rows − 1 [rows]: distinct weights in [1, 2), neighbours far apart
    (cached: `checksum` reads them for every prediction)."""
    return torch.arange(rows, dtype=torch.float64, device=device).mul_(0.6180339887498949
                                                                       ).frac_().add_(1.0)


def checksum(t: Tensor) -> Tensor:
    """A fingerprint of a large tensor's values in two passes over it [1 + C]: the sum of its
    values' bit patterns (int64, wrapping) and, viewed as rows [R, C] (the last dimension as
    columns; a vector as one column), the float64 column sums weighted by `_row_weights`.

    The first sum changes with any single value, however small the change (NaN included: a
    bit pattern changes by a nonzero amount below 2⁶⁴); the weighted sums change when values
    swap places, within a row (other columns) or between rows (other weights), unless the two
    values are so close that (a − b)·(w_i − w_j) is lost in the rounding of the sum (~1e-16 of
    Σ|x|), or the column holds a NaN. Deterministic for a given tensor (integer sums; one
    matrix–vector product). Cost, measured on one core of a busy 2-core machine (best of 30):
    ≈ 7 ms for X [10⁶, 10] in float64 as the models store it and 1.3 ms for y [10⁶], against
    ≈ 38 ms for a copy of X (and the memory a copy holds per model).
    """
    total = value_bits(t).sum(dtype=torch.int64).reshape(1)
    v = t.detach()
    if v.is_complex():
        v = torch.view_as_real(v)
    rows = v.reshape(-1, 1) if v.dim() < 2 else v.reshape(-1, v.shape[-1])
    weighted = _row_weights(rows.shape[0], rows.device) @ rows.to(torch.float64)
    return torch.cat([total, weighted.view(torch.int64)])


def _fingerprint(t: Tensor) -> Tensor:
    return value_bits(t).clone() if t.numel() <= SNAPSHOT_ELEMENTS else checksum(t)


class StateKey:
    """What a cached posterior was built from: of every parameter and buffer of a module
    (by name), its identity, version, storage, shape, dtype and device, and its values.

    The values matter because not every change shows in the rest: edits through `.data`
    (`p.data.copy_(…)`, `p.data[0] += 1`) and through numpy views (`p.detach().numpy()[…] = …`)
    bump no version and keep identity and storage. A tensor of at most `SNAPSHOT_ELEMENTS`
    elements (every parameter of the usual sizes, the data's units, small data) is kept as an
    exact copy of its values' bits and compared with `torch.equal`; a larger one (the training
    data X, y and other data-sized buffers, ~10⁶ × 10) as its `checksum`, which every
    single-value edit and every swap of two values changes (but for the blind spots named
    there: swaps of nearly equal values, swaps in a column holding a NaN) at ≈ 7 ms per 10⁷
    values instead of a copy of the data held per model. Keys are equal when nothing changed;
    any change by in-place ops, `.data`, `torch.no_grad()`, `load_state_dict`, setters, a
    replaced parameter, `.to()`, optimiser steps, `nn.utils.vector_to_parameters`, buffer or
    numpy-view edits gives a new key.
    """

    __slots__ = ("_meta", "_values")

    def __init__(self, module: torch.nn.Module) -> None:
        named = list(chain(module.named_parameters(), module.named_buffers()))
        self._meta = tuple((name, id(t), t._version, t.data_ptr(), tuple(t.shape), t.dtype,
                            t.device) for name, t in named)
        self._values = tuple(_fingerprint(t) for _, t in named)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StateKey):
            return NotImplemented
        return self._meta == other._meta and all(
            torch.equal(a, b) for a, b in zip(self._values, other._values))

    __hash__ = None  # type: ignore[assignment]


def state_key(module: torch.nn.Module) -> StateKey:
    """The key a posterior of `module` is cached under (`StateKey`): equal to an earlier key
    exactly when no parameter or buffer changed in any way since."""
    return StateKey(module)
