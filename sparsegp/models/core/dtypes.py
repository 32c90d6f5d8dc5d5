"""`model.to(dtype)`, `.float()` and `.double()`: the dtype of a model's work and outputs.

A model's parameters, stored data and factorisations are float64 whatever its dtype
(`config.PARAMETER_DTYPE`), so converting a model does not convert its tensors as
`nn.Module.to` would (float32 parameters break the float64 factorisations): it sets the dtype
of the heavy work and of the outputs, as `dtype=` does at construction. Devices move as usual.
The arguments are those of `nn.Module.to`, read here (`parse_to`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

#: The dtypes a model works in, by the name its spec stores.
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def dtype_name(dtype: torch.dtype) -> str:
    """"float32" or "float64" (the spec's name for a model dtype)."""
    return str(dtype).replace("torch.", "")


def checked(dtype: torch.dtype, model: object) -> torch.dtype:
    """A dtype a model works in, or a TypeError naming those it does."""
    if dtype not in DTYPES.values():
        raise TypeError(f"a {type(model).__name__} works in torch.float32 or torch.float64 "
                        f"(its parameters stay float64); got {dtype}")
    return dtype


def parse_to(args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> tuple[torch.device | None, torch.dtype | None, bool]:
    """(device, dtype, non_blocking) of the arguments `nn.Module.to` takes: `to(device,
    dtype)`, `to(dtype)`, `to(tensor)` (its device and dtype), keywords `device=`, `dtype=`,
    `non_blocking=` (and `memory_format=`, which concerns no model tensor)."""
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "memory_format"}
    if unknown or len(args) > 3:
        raise TypeError(f"to() takes a device, a dtype, a tensor, non_blocking; got "
                        f"{len(args)} arguments and {sorted(unknown)}")
    device = kwargs.get("device")
    dtype = kwargs.get("dtype")
    non_blocking = bool(kwargs.get("non_blocking", False))
    rest = list(args)
    if rest and isinstance(rest[0], Tensor):
        t = rest.pop(0)
        device, dtype = t.device, t.dtype
    elif rest and not isinstance(rest[0], torch.dtype):
        device = rest.pop(0)
    if rest and isinstance(rest[0], torch.dtype):
        dtype = rest.pop(0)
    if rest:
        non_blocking = bool(rest.pop(0))
    if rest or (dtype is not None and not isinstance(dtype, torch.dtype)):
        raise TypeError("to() takes a device, a dtype, a tensor, non_blocking")
    return (None if device is None else torch.device(device)), dtype, non_blocking
