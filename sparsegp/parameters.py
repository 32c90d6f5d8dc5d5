"""Parameters: positive values stored raw behind a softplus, freezing and priors.

A positive parameter ``name`` is stored as the unconstrained ``nn.Parameter`` ``raw_<name>``
with value ``floor + softplus(raw)``; an unconstrained one (inducing inputs) is stored as
``name`` itself. Optimisers, `state_dict()` and `fit()` all see the raw tensors; users read
and write plain values through properties. Every parameter can be frozen and can carry a
prior log-density, which the models then add to their training objective. A positive parameter
may be given bounds (`set_bounds`): its value is then ``lower + (upper − lower) σ(raw)``, with
the bounds kept in the buffer ``bounds_<name>`` so that `state_dict()` carries them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, cast

import numpy as np
import torch
from torch import Tensor, nn

from .runtime.config import DEFAULT_DTYPE
from .validation import ArrayLike

Prior = Callable[[Tensor], Tensor] | torch.distributions.Distribution
ParameterisedT = TypeVar("ParameterisedT", bound="Parameterised")


def softplus_floor(raw: Tensor, floor: float) -> Tensor:
    """floor + log(1 + exp(raw)), elementwise."""
    return floor + nn.functional.softplus(raw)


def inverse_softplus_floor(value: Tensor, floor: float) -> Tensor:
    """Inverse of `softplus_floor`: raw such that floor + softplus(raw) = value (> floor)."""
    x = value - floor
    # log(exp(x) - 1) = x + log(1 - exp(-x)), stable for large x.
    return x + torch.log(-torch.expm1(-x))


def bounded(raw: Tensor, lower: float, upper: float) -> Tensor:
    """lower + (upper − lower) σ(raw), elementwise: a value in [lower, upper] for every raw."""
    return lower + (upper - lower) * torch.sigmoid(raw)


def inverse_bounded(value: Tensor, lower: float, upper: float) -> Tensor:
    """Inverse of `bounded`: raw = logit((value − lower)/(upper − lower)) (value inside)."""
    p = (value - lower) / (upper - lower)
    return torch.log(p) - torch.log1p(-p)


#: A bounded positive parameter `name` keeps its bounds [lower, upper] in this buffer + name.
BOUNDS_PREFIX = "bounds_"


def at_least_above(t: Tensor, floor: float) -> Tensor:
    """t with values at (or below) `floor` raised to the next float above it: the least value
    a positive parameter with that floor takes (the constructors and setters refuse the floor
    itself, where the softplus's inverse is −∞)."""
    above = torch.nextafter(torch.full_like(t, floor), torch.full_like(t, float("inf")))
    return torch.maximum(t, above)


def as_user_value(t: Tensor) -> float | np.ndarray:
    """A detached copy for users: a float for scalars, a numpy array otherwise."""
    t = t.detach().cpu()
    return float(t) if t.dim() == 0 else t.numpy().copy()


class UserValue:
    """A declared parameter as a plain-number property of its module (`shape = UserValue()`
    for the parameter "shape"): reading gives `as_user_value(module.value(name))`, assigning
    goes through `module._assign(name, value)` (in place: `set_value`; a kernel also marks
    the parameter as given). One descriptor instead of a getter and a setter per parameter."""

    def __init__(self, doc: str | None = None) -> None:
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, module: Parameterised | None, owner: type | None = None) -> Any:
        return self if module is None else as_user_value(module.value(self.name))

    def __set__(self, module: Parameterised, value: ArrayLike) -> None:
        module._assign(self.name, value)


def as_user_array(t: Tensor) -> np.ndarray:
    """`as_user_value` of a tensor of one dimension or more: always a numpy array."""
    return cast(np.ndarray, as_user_value(t))


class Parameterised(nn.Module):
    """Base of every kernel, feature, likelihood and model: named values, freezing, priors."""

    def __init__(self) -> None:
        super().__init__()
        self._floors: dict[str, float] = {}
        self._max_dims: dict[str, int] = {}  # of the positive parameters: 0 scalar, 1 vector, …
        self._priors: dict[str, Prior] = {}
        self._bounds: dict[str, tuple[float, float]] = {}  # of bounded positive parameters

    # -- declaring parameters -------------------------------------------------------------
    def _add_positive(self, name: str, value: ArrayLike, floor: float, max_dim: int = 1) -> None:
        t = self._checked_positive(name, value, floor, max_dim)
        self._floors[name] = floor
        self._max_dims[name] = max_dim
        self.register_parameter("raw_" + name, nn.Parameter(inverse_softplus_floor(t, floor)))

    def _add_free(self, name: str, value: Tensor) -> None:
        self.register_parameter(name, nn.Parameter(value))

    def _checked_positive(self, name: str, value: ArrayLike, floor: float, max_dim: int = 1
                          ) -> Tensor:
        ref = next(iter(self.parameters()), None)
        dtype = ref.dtype if ref is not None else DEFAULT_DTYPE
        device = ref.device if ref is not None else None
        if isinstance(value, (str, bytes)):
            raise TypeError(f"{name} must be a number or an array of numbers; got {value!r}")
        try:
            t = torch.as_tensor(value, dtype=dtype, device=device).detach().clone()
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{name} must be a number or an array of numbers; got "
                            f"{type(value).__name__}") from err
        if t.dim() > max_dim:
            what = {0: "a scalar", 1: "a scalar or a 1-D array"}.get(max_dim, f"at most {max_dim}-D")
            raise ValueError(f"{name} must be {what}; got shape {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"{name} must not be empty")
        bad = ~torch.isfinite(t) | (t <= floor)
        if bool(bad.any()):
            first = t[bad].flatten()[:3].tolist()
            raise ValueError(
                f"{name} must be finite and greater than its floor {floor:g}; got "
                f"{', '.join(f'{v:.4g}' for v in first)}{' …' if int(bad.sum()) > 3 else ''}"
                f"{'' if t.dim() == 0 else f' ({int(bad.sum())} of {t.numel()} values)'}"
            )
        return t

    # -- reading and writing values -------------------------------------------------------
    def positive_arguments(self) -> dict[str, Any]:
        """The positive parameters' current values as plain constructor arguments (a config's
        "args"). A value that sits at its floor (the softplus underflowed) is given as the
        next float above it, which the constructors accept; `load_state_dict` then restores
        the exact value."""
        args = {}
        for name, floor in self._floors.items():
            plain = as_user_value(at_least_above(self.value(name).detach(), floor))
            args[name] = plain.tolist() if isinstance(plain, np.ndarray) else plain
        return args

    def value(self, name: str) -> Tensor:
        """The constrained value of a parameter of this module, differentiable."""
        if name in self._floors:
            bounds = self._bounds.get(name)
            if bounds is not None:
                return bounded(getattr(self, "raw_" + name), *bounds)
            return softplus_floor(getattr(self, "raw_" + name), self._floors[name])
        return getattr(self, name)

    def _assign(self, name: str, value: ArrayLike, reshape: bool = False) -> None:
        """What assigning a `UserValue` property does: `set_value` (kernels extend it)."""
        self.set_value(name, value, reshape=reshape)

    def set_value(self, name: str, value: ArrayLike, *, reshape: bool = False) -> None:
        """Assign a value to the parameter `name` (dotted from this module, as
        'kernel.lengthscale'; a positive parameter's constrained value, not its raw one).

        The value is written into the existing `nn.Parameter`, which keeps its identity, shape
        and `requires_grad`: optimisers built before go on training it, and `state_dict()`
        still loads into a model built the same way. A positive parameter takes any value
        that broadcasts to its shape (a scalar — or one number in an array — sets every ARD
        lengthscale); a value of another shape raises a ValueError that names the call below.
        Unconstrained parameters (inducing inputs, q(u), a mean's weights) take values of
        exactly their shape, which the model's structure fixes.

        `reshape=True` is the explicit call for changing the shape of a positive parameter
        (scalar <-> one value per input, `set_value("kernel.lengthscale", [1.0, 2.0],
        reshape=True)`): the parameter takes the value's shape — in place if it has that shape
        already, else as a new `nn.Parameter` (same `requires_grad`) that replaces the old one,
        so optimisers built before no longer hold it (build them anew) and a model built with
        the old shape no longer loads its `state_dict`.
        """
        module, leaf = self._resolve(name)
        raw = module._raw(leaf)
        if leaf not in module._floors:
            new = torch.as_tensor(value, dtype=raw.dtype, device=raw.device)
            if new.shape != raw.shape:
                raise ValueError(f"{name} must have shape {tuple(raw.shape)}; got "
                                 f"{tuple(new.shape)} (the model's structure fixes the shape "
                                 "of an unconstrained parameter)")
            if not bool(torch.isfinite(new).all()):
                raise ValueError(f"{name} must be finite")
            with torch.no_grad():
                raw.copy_(new)
            return
        floor = module._floors[leaf]
        max_dim = module._max_dims.get(leaf, max(1, raw.dim()))
        t = module._checked_positive(name, value, floor, max_dim).to(raw.dtype)
        bounds = module._bounds.get(leaf)
        if bounds is not None:
            _check_within(name, t, bounds)
            new_raw = inverse_bounded(t, *bounds).to(raw.device)
        else:
            new_raw = inverse_softplus_floor(t, floor).to(raw.device)
        if reshape and new_raw.shape != raw.shape:
            p = nn.Parameter(new_raw, requires_grad=raw.requires_grad)
            module.register_parameter("raw_" + leaf, p)
            return
        if new_raw.numel() == 1:  # one number, as a scalar or as [x]: every element
            new_raw = new_raw.reshape(())
        elif not _broadcasts(new_raw.shape, raw.shape):
            raise ValueError(
                f"{name} has shape {tuple(raw.shape)}; a value of shape {tuple(t.shape)} does "
                f"not broadcast to it. To change the parameter's shape (scalar <-> one value "
                f"per input), call set_value({name!r}, value, reshape=True)")
        with torch.no_grad():
            raw.copy_(new_raw)

    def _raw(self, leaf: str) -> nn.Parameter:
        key = "raw_" + leaf if leaf in self._floors else leaf
        p = self._parameters.get(key)
        if p is None:
            raise KeyError(leaf)
        return p

    def _resolve(self, name: str) -> tuple[Parameterised, str]:
        """Map a dotted user name ('kernel.lengthscale') to (owning module, leaf name)."""
        name = getattr(self, "_aliases", {}).get(name, name)
        *path, leaf = name.split(".")
        module: nn.Module = self
        try:
            for part in path:
                module = getattr(module, part)
            if not isinstance(module, Parameterised):
                raise KeyError(name)
            module._raw(leaf)
        except (AttributeError, KeyError):
            raise KeyError(
                f"no parameter named {name!r}; known: {', '.join(self.parameter_names())}"
            ) from None
        return module, leaf

    def parameter_names(self) -> list[str]:
        """User-level dotted names of every parameter (as `freeze`/`set_prior` take them)."""
        names = []
        for raw_name, _ in self.named_parameters():
            *path, leaf = raw_name.split(".")
            if leaf.startswith("raw_"):
                leaf = leaf[4:]
            names.append(".".join([*path, leaf]))
        return names

    # -- bounds ---------------------------------------------------------------------------
    def set_bounds(self, name: str, lower: float | None, upper: float | None = None) -> None:
        """Keep the positive parameter `name` (dotted, as 'kernel.lengthscale') within
        [lower, upper] during `fit()` and every later assignment; `set_bounds(name, None)`
        removes them (back to its floor and softplus).

        The value is kept: it is re-expressed as lower + (upper − lower) σ(raw), so it must
        lie strictly inside the bounds already (else a ValueError: assign one inside with
        `set_value` first). The bounds are finite numbers with floor ≤ lower < upper, shared
        by every element of an ARD parameter, and in the units the parameter is stored in
        (a model's internal units, as `set_value`). Assigning a value outside them is refused
        with a ValueError; `state_dict()` carries them (buffer ``bounds_<name>``), so saved
        models and `load_state_dict` restore them. The optimiser sees the raw tensor, whose
        gradient vanishes as the value approaches a bound.

        Example:

            >>> import sparsegp as sg
            >>> k = sg.kernels.SquaredExponential(lengthscale=[1.0, 2.0])
            >>> k.set_bounds("lengthscale", 0.1, 10.0)
            >>> k.bounds("lengthscale"), k.lengthscale.round(6).tolist()
            ((0.1, 10.0), [1.0, 2.0])
            >>> _ = k.raw_lengthscale.data.fill_(1e3)  # any raw value: inside the bounds
            >>> k.lengthscale.round(6).tolist()
            [10.0, 10.0]
        """
        module, leaf = self._resolve(name)
        if leaf not in module._floors:
            raise TypeError(f"{name} is not a positive parameter: bounds apply to positive "
                            "parameters (lengthscales, variances, ...) only")
        raw = module._raw(leaf)
        current = module.value(leaf).detach()
        floor = module._floors[leaf]
        if lower is None:
            if upper is not None:
                raise ValueError(f"give both bounds of {name}, or None alone to remove them")
            module._drop_bounds(leaf)
            new_raw = inverse_softplus_floor(at_least_above(current, floor), floor)
        else:
            bounds = _checked_bounds(name, lower, upper, floor)
            _check_within(name, current, bounds, "its current value ")
            new_raw = inverse_bounded(current, *bounds)
            module._install_bounds(leaf, bounds)
        with torch.no_grad():
            raw.copy_(new_raw)

    def bounds(self, name: str) -> tuple[float, float] | None:
        """The (lower, upper) bounds of the parameter `name`, or None where it has none."""
        module, leaf = self._resolve(name)
        return module._bounds.get(leaf)

    def _install_bounds(self, leaf: str, bounds: tuple[float, float]) -> None:
        raw = self._raw(leaf)
        self._bounds[leaf] = bounds
        self.register_buffer(BOUNDS_PREFIX + leaf,
                             torch.tensor(bounds, dtype=raw.dtype, device=raw.device))

    def _drop_bounds(self, leaf: str) -> None:
        self._bounds.pop(leaf, None)
        self._buffers.pop(BOUNDS_PREFIX + leaf, None)

    def _load_from_state_dict(self, state_dict: Mapping[str, object], prefix: str,
                              *args: Any, **kwargs: Any) -> None:
        # the bounds come with the raw values they give meaning to: install (or drop) them
        # before the values are read (a state without the raw value leaves both alone)
        for leaf in self._floors:
            saved = state_dict.get(prefix + BOUNDS_PREFIX + leaf)
            if saved is None:
                if prefix + "raw_" + leaf in state_dict:
                    self._drop_bounds(leaf)
                continue
            if not isinstance(saved, Tensor) or saved.numel() != 2:
                raise ValueError(f"{prefix}{BOUNDS_PREFIX}{leaf} must hold two numbers "
                                 "(lower, upper)")
            lower, upper = (float(v) for v in saved.reshape(-1))
            self._install_bounds(leaf, _checked_bounds(prefix + leaf, lower, upper,
                                                       self._floors[leaf]))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # -- freezing and priors --------------------------------------------------------------
    def freeze(self: ParameterisedT, *names: str) -> ParameterisedT:
        """Hold the named parameters fixed during `fit()` (all parameters if none named)."""
        return self._set_trainable(names, False)

    def unfreeze(self: ParameterisedT, *names: str) -> ParameterisedT:
        """Let the named parameters (all if none named) be trained again."""
        return self._set_trainable(names, True)

    def _set_trainable(self: ParameterisedT, names: tuple[str, ...], flag: bool) -> ParameterisedT:
        if not names:
            for p in self.parameters():
                p.requires_grad_(flag)
        for name in names:
            module, leaf = self._resolve(name)
            module._raw(leaf).requires_grad_(flag)
        return self

    def set_prior(self, name: str, prior: Prior | None) -> None:
        """Attach a prior log-density (a callable or a torch Distribution) to a parameter.

        The prior is evaluated on the constrained value and summed over its elements; the
        models maximise objective + log prior (MAP in the constrained parameterisation).
        `None` removes the prior.
        """
        module, leaf = self._resolve(name)
        if prior is None:
            module._priors.pop(leaf, None)
            return
        if not (callable(prior) or isinstance(prior, torch.distributions.Distribution)):
            raise TypeError(f"prior for {name} must be callable or a torch Distribution")
        module._priors[leaf] = prior

    def log_prior(self) -> Tensor:
        """Sum of the log prior densities of every parameter that has one (0 if none)."""
        total = None
        for module in self.modules():
            if not isinstance(module, Parameterised):
                continue
            for leaf, prior in module._priors.items():
                v = module.value(leaf)
                lp = prior.log_prob(v) if isinstance(prior, torch.distributions.Distribution) else prior(v)
                lp = torch.as_tensor(lp).sum()
                total = lp if total is None else total + lp
        if total is None:
            ref = next(iter(self.parameters()), None)
            return torch.zeros((), dtype=ref.dtype if ref is not None else DEFAULT_DTYPE)
        return total

    def named_priors(self) -> Iterator[tuple[str, Prior]]:
        """(dotted name, prior) for every parameter that has a prior."""
        for name in self.parameter_names():
            module, leaf = self._resolve(name)
            if leaf in module._priors:
                yield name, module._priors[leaf]

    def named_values(self) -> Iterator[tuple[str, Tensor, bool, bool]]:
        """(dotted name, constrained value, trainable, has prior) for every parameter."""
        for name in self.parameter_names():
            module, leaf = self._resolve(name)
            yield name, module.value(leaf), module._raw(leaf).requires_grad, leaf in module._priors

    def summary(self, labels: dict[str, list[str]] | None = None) -> str:
        """A plain-text table of every parameter's value, trainability and prior.

        `labels` names the entries of 1-D parameters (e.g. input columns for ARD lengthscales):
        such a parameter is followed by one indented row per entry, `  · name  value`.
        """
        labels = labels or {}
        rows = [("parameter", "value", "trainable", "prior")]
        for name, v, trainable, has_prior in self.named_values():
            val = as_user_value(v)
            text = _format_value(val)
            rows.append((name, text, "yes" if trainable else "frozen", "yes" if has_prior else ""))
            names = labels.get(name)
            if names is not None and isinstance(val, np.ndarray) and val.shape == (len(names),):
                rows += _labelled_rows(names, val)
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _broadcasts(shape: torch.Size, target: torch.Size) -> bool:
    """True when a tensor of `shape` broadcasts to `target` (without growing it)."""
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False


def _checked_bounds(name: str, lower: Any, upper: Any, floor: float) -> tuple[float, float]:
    """(lower, upper) as floats: finite, floor ≤ lower < upper, else a ValueError."""
    try:
        lo, hi = float(lower), float(upper)
    except (TypeError, ValueError):
        raise ValueError(f"the bounds of {name} must be two numbers (lower, upper); got "
                         f"{lower!r}, {upper!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and floor <= lo < hi):
        raise ValueError(f"the bounds of {name} must be finite with {floor:g} (its floor) ≤ "
                         f"lower < upper; got ({lo:g}, {hi:g})")
    return lo, hi


def _check_within(name: str, t: Tensor, bounds: tuple[float, float], what: str = "") -> None:
    """A ValueError unless every element of t lies strictly inside the bounds."""
    lower, upper = bounds
    outside = (t <= lower) | (t >= upper)
    if bool(outside.any()):
        first = ", ".join(f"{v:.4g}" for v in t[outside].flatten()[:3].tolist())
        raise ValueError(f"{name} must lie strictly inside its bounds ({lower:g}, {upper:g}); "
                         f"{what}{first} does not (assign a value inside them, or change them "
                         f"with set_bounds)")


#: At most this many labelled entries are listed under a parameter; a last row counts the rest.
MAX_LABELLED = 20


def _labelled_rows(names: list[str], val: np.ndarray) -> list[tuple[str, str, str, str]]:
    rows = [(f"  · {n}", f"{float(x):.6g}", "", "") for n, x in zip(names[:MAX_LABELLED], val)]
    if len(names) > MAX_LABELLED:
        rows.append((f"  · … {len(names) - MAX_LABELLED} more", "", "", ""))
    return rows


def _format_value(val: float | np.ndarray) -> str:
    if isinstance(val, float):
        return f"{val:.6g}"
    flat = ", ".join(f"{x:.4g}" for x in val.reshape(-1)[:4])
    more = ", …" if val.size > 4 else ""
    return f"[{flat}{more}]" if val.ndim == 1 else f"{val.shape} [{flat}{more}]"
