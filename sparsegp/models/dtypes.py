"""`model.to(dtype)`, `.float()` and `.double()`: the dtype of a model's work and outputs.

A model's parameters, stored data and factorisations are float64 whatever its dtype
(`config.PARAMETER_DTYPE`), so converting a model does not convert its tensors as
`nn.Module.to` would (float32 parameters break the float64 factorisations): it sets the dtype
of the heavy work and of the outputs, as `dtype=` does at construction. Devices move as usual.
"""

from __future__ import annotations

from typing import Any

import torch

from ..parameters import Parameterised

#: The dtypes a model works in, by the name its config stores.
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def dtype_name(dtype: torch.dtype) -> str:
    """"float32" or "float64" (the config's name for a model dtype)."""
    return str(dtype).replace("torch.", "")


class DtypeModule(Parameterised):
    """A module whose dtype (`self._config["dtype"]`) is that of its work and outputs: the
    base of every model (`tests/models/test_dtype_conversion.py` shows each converting)."""

    _config: dict[str, Any]

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the heavy work and of the outputs (parameters are float64)."""
        return DTYPES[self._config["dtype"]]

    def to(self, *args: Any, **kwargs: Any) -> DtypeModule:
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None:
            if dtype not in DTYPES.values():
                raise TypeError(f"a {type(self).__name__} works in torch.float32 or "
                                f"torch.float64 (its parameters stay float64); got {dtype}")
            # a cached posterior stays (a model loaded without data cannot rebuild it); one
            # built from now on is built in the new dtype
            self._config["dtype"] = dtype_name(dtype)
        if device is None:
            return self
        return super().to(device, non_blocking=non_blocking)

    def float(self) -> DtypeModule:
        return self.to(torch.float32)

    def double(self) -> DtypeModule:
        return self.to(torch.float64)

    def half(self) -> DtypeModule:
        return self.to(torch.float16)

    def bfloat16(self) -> DtypeModule:
        return self.to(torch.bfloat16)

    def type(self, dst_type: Any) -> DtypeModule:
        if not isinstance(dst_type, torch.dtype):
            raise TypeError(f"{type(self).__name__}.type takes a torch.dtype; got {dst_type!r}")
        return self.to(dst_type)
