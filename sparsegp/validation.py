"""Checks on user input: clear `ValueError`/`TypeError`s that name the argument, never a NaN."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from .config import DEFAULT_DTYPE


def _describe(x: Any) -> str:
    return f"shape {tuple(x.shape)}" if hasattr(x, "shape") else type(x).__name__


def as_tensor(
    x: Any, name: str, *, dtype: torch.dtype | None = None, device: torch.device | None = None
) -> Tensor:
    """A floating tensor from an array-like; a torch tensor must already match dtype/device."""
    if isinstance(x, Tensor):
        if x.is_complex() or not (x.is_floating_point() or x.dtype in _INT_TYPES):
            raise TypeError(f"{name} must hold real numbers; got a {x.dtype} tensor")
        if dtype is not None and x.is_floating_point() and x.dtype != dtype:
            raise TypeError(
                f"{name} is a {x.dtype} tensor but {dtype} is expected; convert it "
                f"(e.g. {name}.to({dtype})) or build the model in {x.dtype}"
            )
        if device is not None and x.device != torch.device(device):
            raise ValueError(f"{name} is on {x.device} but the model is on {device}; move it with .to()")
        t = x.detach().contiguous()  # one memory layout: results do not depend on strides
        return t if t.is_floating_point() else t.to(dtype or DEFAULT_DTYPE)
    try:
        arr = np.asarray(x)
    except Exception as err:  # ragged lists and the like
        raise TypeError(f"{name} must be an array of numbers: {err}") from None
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{name} must hold real numbers; got an array of dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)  # one memory layout, as above
    return torch.as_tensor(arr, dtype=dtype or DEFAULT_DTYPE, device=device)


_INT_TYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def check_finite(t: Tensor, name: str) -> Tensor:
    """Raise if t holds NaN or inf, saying where."""
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        kind = "NaN" if bool(torch.isnan(t).any()) else "inf"
        raise ValueError(f"{name} contains {kind} (first at index {idx}); remove or impute it")
    return t


def as_inputs(
    X: Any, name: str = "X", *, num_features: int | None = None,
    dtype: torch.dtype | None = None, device: torch.device | None = None,
) -> Tensor:
    """A finite 2-D input matrix [N, D] (N ≥ 1)."""
    t = as_tensor(X, name, dtype=dtype, device=device)
    if t.dim() != 2:
        hint = f" (use {name}.reshape(-1, 1) for a single input dimension)" if t.dim() == 1 else ""
        raise ValueError(f"{name} must be 2-D [N, D]; got {_describe(t)}{hint}")
    if t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {tuple(t.shape)}")
    if num_features is not None and t.shape[1] != num_features:
        raise ValueError(f"{name} has {t.shape[1]} columns but the model expects {num_features}")
    return check_finite(t, name)


def as_targets(y: Any, n: int, name: str = "y", *, dtype: torch.dtype | None = None,
               device: torch.device | None = None) -> Tensor:
    """A finite target vector [N] (a column [N, 1] is accepted)."""
    t = as_tensor(y, name, dtype=dtype, device=device)
    if t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D [N] or a column [N, 1]; got {_describe(t)}")
    if t.shape[0] != n:
        raise ValueError(f"{name} has {t.shape[0]} entries but X has {n} rows")
    return check_finite(t, name)


def model_dtype(X: Any, y: Any, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype a model uses: `dtype=` if given, else that of floating tensors, else float64."""
    if dtype is not None:
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64; got {dtype}")
        return dtype
    floats = [t for t in (X, y) if isinstance(t, Tensor) and t.is_floating_point()]
    if len(floats) == 2 and floats[0].dtype != floats[1].dtype:
        raise TypeError(
            f"X is {floats[0].dtype} but y is {floats[1].dtype}; pass both in one dtype"
        )
    return floats[0].dtype if floats else DEFAULT_DTYPE


def model_device(X: Any, y: Any) -> torch.device:
    """The device of tensor data (CPU for arrays); X and y must agree."""
    devices = {t.device for t in (X, y) if isinstance(t, Tensor)}
    if len(devices) > 1:
        raise ValueError(f"X and y are on different devices: {sorted(map(str, devices))}")
    return devices.pop() if devices else torch.device("cpu")


class ScaleWarning(UserWarning):
    """The data are on a scale the model fits badly without standardisation."""


#: Spreads (standard deviations) outside this range make the optimiser's steps badly scaled.
GOOD_SPREAD = (1e-2, 1e2)
#: |mean| / std above which targets are "centred far from zero" for a zero-mean GP.
TARGET_OFFSET_RATIO = 10.0
#: |mean| / std above which an input column has lost most of its digits to the offset.
INPUT_OFFSET_RATIO = 1e6


def input_scale_problems(X: Tensor) -> list[str]:
    """Plain-language descriptions (each with its fix) of badly scaled inputs X [N, D]: a
    column spread outside `GOOD_SPREAD`, or an offset of more than `INPUT_OFFSET_RATIO`
    spreads (digits lost)."""
    if X.shape[0] < 2:
        return []
    lo, hi = GOOD_SPREAD
    std, mean = X.std(0), X.mean(0)
    bad = [d for d in range(X.shape[1]) if std[d] > 0 and not lo <= float(std[d]) <= hi]
    far = [d for d in range(X.shape[1])
           if std[d] > 0 and abs(float(mean[d])) > INPUT_OFFSET_RATIO * float(std[d])]
    problems = []
    if bad:
        spreads = ", ".join(f"{float(std[d]):.3g}" for d in bad[:3])
        problems.append(f"input column(s) {bad[:5]}{'…' if len(bad) > 5 else ''} have spread(s) "
                        f"{spreads}{' …' if len(bad) > 3 else ''}, far from 1: pass "
                        "standardize_X=True (or rescale X)")
    if far:
        problems.append(f"input column(s) {far[:5]} are offset by more than "
                        f"{INPUT_OFFSET_RATIO:.0e} spreads from 0: pass standardize_X=True (or "
                        "centre X)")
    return problems


def target_scale_problems(y: Tensor, zero_mean: bool = True) -> list[str]:
    """The same for regression targets y [N]: a spread outside `GOOD_SPREAD`, or (for a
    zero-mean GP) a mean more than `TARGET_OFFSET_RATIO` spreads from 0 (the GP then spends
    its kernel on the offset and fits the rest badly)."""
    if y.shape[0] < 2:
        return []
    lo, hi = GOOD_SPREAD
    std, mean = float(y.std()), float(y.mean())
    problems = []
    if std > 0 and not lo <= std <= hi:
        problems.append(f"y has spread {std:.3g}, far from 1: pass standardize_y=True (or "
                        "rescale y)")
    if zero_mean and std > 0 and abs(mean) > TARGET_OFFSET_RATIO * std:
        problems.append(f"y has mean {mean:.4g}, {abs(mean) / std:.3g} spreads from 0: a "
                        "zero-mean GP explains the offset with its kernel and fits the rest "
                        "badly; pass standardize_y=True or mean='constant' (or subtract the "
                        "mean)")
    return problems
