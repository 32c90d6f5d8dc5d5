"""Saving and loading fitted models: one versioned file, read without executing code.

The file is a `torch.save` of plain containers and tensors only (read back with
`weights_only=True`): a format tag and version, the model class and its configuration, the
parameters (`state_dict`), the frozen posterior's tensors and, optionally, the training data.
A model saved without its data predicts exactly as before from the saved posterior. Frozen
parameters stay frozen. A prior that is a `torch.distributions` distribution is saved as its
class name and arguments and set again by `load`; other priors (Python callables) the file
cannot hold: it names their parameters, and `load` warns that they must be set again.
"""

from __future__ import annotations

import hashlib
import inspect
import warnings
from pathlib import Path
from typing import Any

import torch

from ...runtime.config import FORMAT_VERSION
from ...runtime.files import check_model_path, write_atomically
from ...version import __version__
from .data import Data
from .registry import MODELS

FORMAT_TAG = "sparsegp-model"


def _cpu(v: object) -> object:
    return v.detach().cpu() if isinstance(v, torch.Tensor) else v


def save_model(model: Any, path: str | Path, include_data: bool | None = None) -> None:
    """Write `model` to `path`. Data are stored if `include_data`; by default only for the
    exact GP, whose posterior holds X anyway (a sparse model predicts without them)."""
    path = check_model_path(path)
    check_restorable(model)
    if include_data is None:
        include_data = model.saves_data_by_default and model.y is not None
    elif include_data and model.y is None:
        raise ValueError(f"include_data=True, but this model has no data: this "
                         f"{type(model).__name__} {model._why_no_data()}; save it without "
                         "include_data")
    check_metadata(model.metadata)
    post = model.posterior()
    payload = {
        "format": FORMAT_TAG,
        "version": FORMAT_VERSION,
        "sparsegp_version": __version__,
        "class": type(model).__name__,
        "config": model.config(),
        # data-sized state (SGPC's sites) goes with the data, if at all
        "state_dict": {k: _cpu(v) for k, v in model.state_dict().items()
                       if k not in model.data_extras()},
        "posterior": {k: _cpu(v) for k, v in post.state().items()},
        "data": ({"X": _cpu(model.X), "y": _cpu(model.y),
                  **{k: _cpu(v) for k, v in model.data_extras().items()}}
                 if include_data else None),
        "metadata": dict(model.metadata),
        "frozen": [name for name, p in model.named_parameters() if not p.requires_grad],
        "priors": [name for name, _ in model.named_priors()],
        "prior_distributions": {name: saved for name, prior in model.named_priors()
                                if (saved := _saved_distribution(prior)) is not None},
    }
    payload["digest"] = digest(payload)
    write_atomically(path, lambda f: torch.save(payload, f), what="model file")


#: The payload's entries that `digest` covers: every value a loaded model is built from.
DIGESTED = ("class", "config", "state_dict", "posterior", "data", "frozen",
            "prior_distributions")


def digest(payload: dict[str, Any]) -> str:
    """SHA-256 of the payload's values (`DIGESTED`: tensors by dtype, shape and bytes, the rest
    by repr), written with the file and compared by `load`: a flipped bit anywhere in a stored
    value is a damaged file, not a model that predicts something else."""
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(value.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            h.update(b"{")
            for key in value:
                h.update(repr(key).encode())
                feed(value[key])
            h.update(b"}")
        elif isinstance(value, (list, tuple)):
            h.update(b"[")
            for item in value:
                feed(item)
            h.update(b"]")
        else:
            h.update(repr(value).encode())

    for key in DIGESTED:
        feed(key)
        feed(payload.get(key))
    return h.hexdigest()


def _saved_distribution(prior: Any) -> dict[str, Any] | None:
    """A torch.distributions prior as {"class": its name, "args": its arguments (tensors)};
    None for a callable, or a distribution its arguments do not rebuild (one of several
    parameterisations, a wrapped base distribution, a class outside torch.distributions)."""
    cls = type(prior)
    if (not isinstance(prior, torch.distributions.Distribution)
            or getattr(torch.distributions, cls.__name__, None) is not cls):
        return None
    try:
        args = {k: torch.as_tensor(getattr(prior, k)).detach().cpu().clone()
                for k in prior.arg_constraints}
        rebuilt = cls(**args)
        same = all(torch.equal(torch.as_tensor(getattr(rebuilt, k)).cpu(), v)
                   for k, v in args.items())
    except Exception:  # noqa: BLE001 - any failure: the prior is named, not saved
        return None
    return {"class": cls.__name__, "args": args} if same else None


#: What `metadata` may hold: the types the weights-only reader of `load` accepts.
PLAIN_TYPES = (str, int, float, bool, type(None))


def check_metadata(value: object, where: str = "metadata") -> None:
    """A TypeError naming the first entry of `model.metadata` that `load` could not read back
    (only str, int, float, bool, None and lists, tuples, sets and dicts of them)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) not in PLAIN_TYPES:
                raise TypeError(f"cannot save: {where} has a key of type {type(key).__name__} "
                                "(keys may be str, int, float, bool or None)")
            check_metadata(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple, set)):
        for i, item in enumerate(value):
            check_metadata(item, f"{where}[{i}]")
    elif type(value) not in PLAIN_TYPES:
        raise TypeError(f"cannot save: {where} is a {type(value).__name__}; metadata may hold "
                        "str, int, float, bool, None and lists and dicts of them (convert it, "
                        "e.g. float(x), x.tolist(), str(path))")


def check_restorable(model: Any) -> None:
    """A TypeError naming the constructor arguments of the model's user-defined parts (kernels,
    likelihoods, means, features of the user's own classes) that their `config()` does not
    record: `load` would rebuild those parts with the arguments' defaults, in silence."""
    lost = []
    for part in model.modules():
        if part is model or not hasattr(part, "config") or \
                type(part).__module__.split(".")[0] == "sparsegp":
            continue
        args = part.config().get("args", {})
        signature = inspect.signature(type(part).__init__).parameters.values()
        lost += [f"{type(part).__name__}({p.name}=...)" for p in signature
                 if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                 and p.name not in args]
    if lost:
        raise TypeError(f"cannot save: {', '.join(lost)} would be rebuilt with the default on "
                        "load, as config() does not record it; extend the class's config() to "
                        "put it in 'args' (its positive parameters are recorded already)")


def check_finite_values(path: Path, tensors: dict[str, Any]) -> None:
    """Refuse a file whose parameters or posterior hold NaN or ±inf (no fit writes them; the
    training data may mark missing outputs with NaN and are not checked here)."""
    for name, value in tensors.items():
        if (isinstance(value, torch.Tensor) and value.is_floating_point()
                and not bool(torch.isfinite(value).all())):
            raise ValueError(f"{path} is a damaged sparsegp model file: {name} holds NaN or "
                             "inf, which no fitted model has")


def load(path: str | Path, map_location: str | torch.device = "cpu") -> Any:
    """Read a model written by `model.save(path)`; predictions are identical to the saved model's.

    Shapes: none (a path in, a model out). A sparse model is saved without its training data
    by default (`save(path, include_data=True)` keeps them, for further fitting); the exact GP
    and the latent-input models keep them by default.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> m = sg.SGPR(X, y, inducing_points=10)
        >>> m.save("model.pt")
        >>> loaded = sg.load("model.pt")
        >>> type(loaded).__name__, loaded.X is None
        ('SGPR', True)
        >>> bool(np.allclose(loaded.predict(X[:5])[0], m.predict(X[:5])[0]))
        True
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a model file")
    if not path.is_file():
        raise FileNotFoundError(f"no such model file: {path}")
    try:
        device = torch.device(map_location)
    except (RuntimeError, TypeError):
        raise ValueError(f"map_location must name a device (e.g. 'cpu', 'cuda'); got "
                         f"{map_location!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"cannot load {path} onto {device}: no CUDA device is available "
                           "here (load it with map_location='cpu')")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # the weights-only unpickler runs no code: any failure = bad file
        raise ValueError(f"{path} is not a readable sparsegp model file "
                         f"(corrupt, truncated or foreign: {type(err).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_TAG:
        raise ValueError(f"{path} is not a sparsegp model file (no '{FORMAT_TAG}' format tag)")
    version = payload.get("version")
    if version != FORMAT_VERSION:
        hint = (" (written by an earlier development version: refit and save it again)"
                if isinstance(version, int) and version < FORMAT_VERSION else "")
        raise ValueError(f"{path} has format version {version!r}; this sparsegp "
                         f"({__version__}) reads version {FORMAT_VERSION}{hint}")
    if "digest" in payload and payload["digest"] != digest(payload):  # older files have none
        raise ValueError(f"{path} is a damaged sparsegp model file: its values do not match the "
                         "checksum written with them (a changed or corrupted byte)")
    check_finite_values(path, {**payload.get("state_dict", {}),
                               **{f"posterior.{k}": v for k, v in
                                  (payload.get("posterior") or {}).items()}})
    try:
        cls: Any = MODELS.get(payload["class"])  # a model class: `load` rebuilds it by name
        spec, parts, state = cls._from_file(payload["config"], dict(payload["state_dict"]))
        saved_data = payload["data"]
        data = None if saved_data is None else Data(
            saved_data["X"], saved_data["y"],
            {k: v for k, v in saved_data.items() if k not in ("X", "y")})
        restored = payload.get("prior_distributions") or {}
        model = cls._assemble(
            spec, parts, data=data, state=state, strict=True,
            # parameters by their torch names (files before: as built)
            frozen=payload.get("frozen"),
            priors={name: getattr(torch.distributions, entry["class"])(**entry["args"])
                    for name, entry in restored.items()},
            metadata=payload.get("metadata"))
        model._adopt_posterior(model._restore_posterior(payload["posterior"]))
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
        raise ValueError(f"{path} is a damaged sparsegp model file: {err}") from None
    lost = [name for name in payload.get("priors") or [] if name not in restored]
    if lost:
        warnings.warn(f"{path}: the saved model had priors on {', '.join(lost)}, which are not "
                      "saved (only torch.distributions priors are; these are Python callables "
                      "or other objects): set them again with set_prior before fitting",
                      UserWarning, stacklevel=2)
    return model
