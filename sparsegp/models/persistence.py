"""Saving and loading fitted models: one versioned file, read without executing code.

The file is a `torch.save` of plain containers and tensors only (read back with
`weights_only=True`): a format tag and version, the model class and its configuration, the
parameters (`state_dict`), the frozen posterior's tensors and, optionally, the training data.
A model saved without its data predicts exactly as before from the saved posterior.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..config import FORMAT_VERSION
from .base import MODEL_CLASSES, Model

FORMAT_TAG = "sparsegp-model"


def _cpu(v: Any) -> Any:
    return v.detach().cpu() if isinstance(v, torch.Tensor) else v


def save_model(model: Model, path: str | Path, include_data: bool | None = None) -> None:
    """Write `model` to `path`. Data are stored if `include_data`; by default only for the
    exact GP, whose posterior holds X anyway (a sparse model predicts without them)."""
    if include_data is None:
        include_data = model.saves_data_by_default
    post = model.posterior()
    payload = {
        "format": FORMAT_TAG,
        "version": FORMAT_VERSION,
        "sparsegp_version": __version__,
        "class": type(model).__name__,
        "config": model.config(),
        "state_dict": {k: _cpu(v) for k, v in model.state_dict().items()},
        "posterior": {k: _cpu(v) for k, v in post.state().items()},
        "data": ({"X": _cpu(model.X), "y": _cpu(model.y),
                  **{k: _cpu(v) for k, v in model.data_extras().items()}}
                 if include_data else None),
        "metadata": dict(model.metadata),
    }
    torch.save(payload, Path(path))


def load(path: str | Path, map_location: str | torch.device = "cpu") -> Model:
    """Read a model written by `model.save(path)`; predictions are identical to the saved model's."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such model file: {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # the weights-only unpickler runs no code: any failure = bad file
        raise ValueError(f"{path} is not a readable sparsegp model file "
                         f"(corrupt, truncated or foreign: {type(err).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_TAG:
        raise ValueError(f"{path} is not a sparsegp model file (no '{FORMAT_TAG}' format tag)")
    version = payload.get("version")
    if version != FORMAT_VERSION:
        raise ValueError(f"{path} has format version {version!r}; this sparsegp "
                         f"({__version__}) reads version {FORMAT_VERSION}")
    try:
        cls = MODEL_CLASSES[payload["class"]]
        model = cls._restore(payload["config"], payload["state_dict"])
        model.load_state_dict(payload["state_dict"])
        if payload["data"] is not None:
            for name, value in payload["data"].items():
                setattr(model, name, value)
        model.metadata = dict(payload.get("metadata") or {})
        post = model._restore_posterior(payload["posterior"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{path} is a damaged sparsegp model file: {err}") from None
    model._cache = (post, [p.detach().clone() for p in model.parameters()])
    return model
