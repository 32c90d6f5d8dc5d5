"""Checks on user input: clear `ValueError`/`TypeError`s that name the argument, never a NaN.

`as_tensor` is the one place where user data become tensors: numpy arrays, lists, torch
tensors and pandas DataFrames/Series (numeric columns; missing values become NaN, which the
finiteness checks then refuse). pandas is optional and never imported here: an object can only
be a pandas one if the user's program has loaded pandas. Column names travel separately
(`column_names`, `check_columns`): the models keep those of a DataFrame X as `feature_names`.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol, TypeAlias, TypeGuard, TypeVar

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from .runtime.config import DEFAULT_DTYPE
from .runtime.transforms import under_transform

#: What user data may be: numpy arrays, lists, tensors, pandas DataFrames and Series (any
#: array-like `as_tensor` takes).
ArrayLike: TypeAlias = npt.ArrayLike | Tensor

#: An array-like checked and handed back unchanged (`one_or_per`).
A = TypeVar("A", bound=ArrayLike)


class _Index(Protocol):
    """A pandas index, as far as the checks read it."""

    def equals(self, other: object) -> bool: ...


class _Pandas(Protocol):
    """A pandas DataFrame or Series, as far as the checks read it."""

    @property
    def index(self) -> _Index: ...


class _DataFrame(_Pandas, Protocol):
    """A pandas DataFrame, as far as the checks read it."""

    @property
    def columns(self) -> Iterable[Hashable]: ...


def _describe(x: object) -> str:
    return f"shape {tuple(x.shape)}" if hasattr(x, "shape") else type(x).__name__


def as_tensor(
    x: object, name: str, *, dtype: torch.dtype | None = None, device: torch.device | None = None
) -> Tensor:
    """A floating tensor from an array-like, in memory of its own; a torch tensor must already
    match dtype/device."""
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
        # one memory layout (results do not depend on strides), and never the user's memory:
        # changing their tensor afterwards must not change a model built from it
        t = x.detach().contiguous()
        if not t.is_floating_point():
            return t.to(dtype or DEFAULT_DTYPE)
        if under_transform(x):  # inside torch.func: no memory of the user's to share
            return t
        return t.clone() if t.data_ptr() == x.data_ptr() else t
    if _pandas_kind(x) is not None:
        x = _pandas_values(x, name)
    try:
        arr = np.asarray(x)
    except Exception as err:  # ragged lists and the like
        raise TypeError(f"{name} must be an array of numbers: {err}") from None
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{name} must hold real numbers; got an array of dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)  # one memory layout, as above
    # a copy, as above (which also reads read-only arrays, e.g. memory maps, without torch's
    # "not writable" warning)
    return torch.tensor(arr, dtype=dtype or DEFAULT_DTYPE, device=device)


_INT_TYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def _pandas_kind(x: object) -> str | None:
    """"frame" for a pandas DataFrame, "series" for a Series, else None (without importing
    pandas: if the program has not loaded it, x is not a pandas object)."""
    pd = sys.modules.get("pandas")
    if pd is None:
        return None
    if isinstance(x, getattr(pd, "DataFrame", ())):
        return "frame"
    if isinstance(x, getattr(pd, "Series", ())):
        return "series"
    return None


def is_dataframe(x: object) -> TypeGuard[_DataFrame]:
    return _pandas_kind(x) == "frame"


def _is_pandas(x: object) -> TypeGuard[_Pandas]:
    return _pandas_kind(x) is not None


def _pandas_values(x: Any, name: str) -> np.ndarray:
    """A DataFrame [N, D] or Series [N] as float64, missing values (NaN, None, pd.NA) as NaN.

    Numeric and boolean columns only (nullable `Int64`/`Float64`/`boolean` included); a clear
    ValueError names the others (strings, categories, dates, objects, complex numbers).
    """
    dtypes = list(x.dtypes.items()) if _pandas_kind(x) == "frame" else [(x.name, x.dtype)]
    bad = [(column, dt) for column, dt in dtypes if getattr(dt, "kind", "O") not in "fiub"]
    if bad:
        listed = ", ".join(f"{column!r} ({dt})" for column, dt in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        what = (f"{name} has non-numeric column(s) {listed}{more}" if _pandas_kind(x) == "frame"
                else f"{name} is a pandas Series of non-numeric dtype {bad[0][1]}")
        raise ValueError(f"{what}: convert them to numbers (e.g. pd.to_numeric, or one-hot "
                         "encode categories) or drop them")
    values = x.to_numpy(dtype=np.float64, na_value=np.nan)
    return values if values.flags.writeable else values.copy()  # copy-on-write pandas: read-only


def column_names(X: object) -> list[str] | None:
    """The column names of a DataFrame when all of them are strings (as scikit-learn keeps
    them); None for anything else (arrays, tensors, a DataFrame with integer column labels)."""
    if not is_dataframe(X):
        return None
    names = list(X.columns)
    strings = [c for c in names if isinstance(c, str)]
    return strings if names and len(strings) == len(names) else None


def check_feature_names(names: Sequence[str] | None, num_features: int,
                        name: str = "feature_names") -> list[str] | None:
    """None, or `num_features` distinct strings (one per input column) as a list."""
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(c, str) for c in names):
        raise TypeError(f"{name} must be a list of strings (one per input column) or None; "
                        f"got {names!r}")
    names = list(names)
    if len(names) != num_features:
        raise ValueError(f"{name} has {len(names)} names but there are {num_features} input "
                         "columns")
    duplicates = sorted({c for c in names if names.count(c) > 1})
    if duplicates:
        raise ValueError(f"duplicate names {duplicates} in {name}; rename them")
    return names


def check_columns(X: object, expected: list[str] | None, name: str = "Xnew") -> None:
    """A DataFrame X must have exactly the columns `expected` (the names the model was fitted
    with), in that order, as scikit-learn requires; arrays, tensors and models fitted without
    names are not checked (columns are then taken by position)."""
    if expected is None or not is_dataframe(X):
        return
    got = list(X.columns)
    if got == expected:
        return
    missing = [c for c in expected if c not in got]
    unexpected = [c for c in got if c not in expected]
    if not missing and not unexpected:
        problem = "the same columns in a different order"
    else:
        problem = "; ".join(part for part in (
            f"missing {_short(missing)}" if missing else "",
            f"unexpected {_short(unexpected)}" if unexpected else "",
        ) if part)
    frame = name if name.isidentifier() else "X"
    raise ValueError(f"{name} has columns {_short(got)} but the model was fitted on "
                     f"{_short(expected)} ({problem}); select them with "
                     f"{frame}[model.feature_names], or pass a numpy array to take columns by "
                     "position")


def _short(names: Sequence[object], limit: int = 8) -> str:
    return repr(names) if len(names) <= limit else f"{names[:limit]!r} (+{len(names) - limit})"


def check_same_rows(X: object, y: object) -> None:
    """X and y as pandas objects must share their index: rows are paired by position (as in
    scikit-learn), so two different indexes would pair rows that pandas would not."""
    if not (_is_pandas(X) and _is_pandas(y)) or X.index.equals(y.index):
        return
    raise ValueError("X and y have different pandas indexes; rows are paired by position, not "
                     "by label: align them first (e.g. y = y.loc[X.index]) or pass "
                     "y.to_numpy()")


def positive_int(value: object, name: str) -> int:
    """`value` as an int ≥ 1 (numpy integers too), or a ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return int(value)


def positive_float(value: object, name: str) -> float:
    """`value` as a finite float > 0 (a step size, a learning rate), or a ValueError naming
    `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            np.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{name} must be a positive number; got {value!r}")
    return float(value)


def one_or_per(value: A, n: int, name: str, per: str) -> A:
    """`value` unchanged if it is one number or `n` of them (one per `per`), else a ValueError
    naming `name` (a model must not fit with values it silently ignores)."""
    size = int(np.size(value)) if not isinstance(value, Tensor) else value.numel()
    if size not in (1, n) or np.ndim(value) > 1:
        raise ValueError(f"{name} must be one number or {n} (one per {per}); got "
                         f"{size} value(s)")
    return value


def check_bool(value: object, name: str) -> bool:
    """`value` as a bool (numpy bools too), or a TypeError naming `name`: a string such as
    "False" is true to Python, and would switch the option on."""
    if not isinstance(value, (bool, np.bool_)):
        hint = (f" (the string {value!r} is not a bool: pass {value.strip().capitalize()} "
                "without quotes)" if isinstance(value, str)
                and value.strip().lower() in ("true", "false") else "")
        raise TypeError(f"{name} must be True or False; got {value!r}{hint}")
    return bool(value)


def check_seed(seed: object) -> int:
    """`seed` as an int (numpy integers too), or a TypeError naming `seed`."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an integer; got {seed!r}")
    return int(seed)


def seeded_generator(seed: object, device: torch.device | str | None = None
                     ) -> torch.Generator:
    """A torch generator seeded with `seed` (`check_seed`)."""
    return torch.Generator(device=device or "cpu").manual_seed(check_seed(seed))


def check_finite(t: Tensor, name: str) -> Tensor:
    """Raise if t holds NaN or inf, saying where (not inside a torch.func transform, which
    cannot branch on values)."""
    if under_transform(t):
        return t
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        kind = "NaN" if bool(torch.isnan(t).any()) else "inf"
        raise ValueError(f"{name} contains {kind} (first at index {idx}); remove or impute it")
    return t


def as_inputs(
    X: ArrayLike, name: str = "X", *, num_features: int | None = None,
    dtype: torch.dtype | None = None, device: torch.device | None = None,
) -> Tensor:
    """A finite 2-D input matrix [N, D] (N ≥ 1)."""
    t = as_tensor(X, name, dtype=dtype, device=device)
    if t.dim() != 2:
        fix = "to_frame()" if _pandas_kind(X) == "series" else "reshape(-1, 1)"
        hint = f" (use {name}.{fix} for a single input dimension)" if t.dim() == 1 else ""
        raise ValueError(f"{name} must be 2-D [N, D]; got {_describe(t)}{hint}")
    if t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {tuple(t.shape)}")
    if num_features is not None and t.shape[1] != num_features:
        raise ValueError(f"{name} has {t.shape[1]} columns but the model expects {num_features}")
    return check_finite(t, name)


def as_targets(y: ArrayLike, n: int, name: str = "y", *, dtype: torch.dtype | None = None,
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


def as_output_targets(y: ArrayLike, n: int, name: str = "y", *, dtype: torch.dtype | None = None,
                      device: torch.device | None = None) -> Tensor:
    """Targets of one output [N] (as `as_targets`) or of P ≥ 2 outputs [N, P], where NaN marks
    a missing output (every output needs an observation; ±inf is refused)."""
    t = as_tensor(y, name, dtype=dtype, device=device)
    if t.dim() > 2:
        raise ValueError(f"{name} must be 1-D [N] or [N, P] (one column per output); got "
                         f"{_describe(t)}")
    if t.dim() != 2 or t.shape[1] == 1:
        return as_targets(t, n, name)
    if t.shape[1] == 0:
        raise ValueError(f"{name} has no columns: give one per output; got {_describe(t)}")
    if t.shape[0] != n:
        raise ValueError(f"{name} has {t.shape[0]} rows but X has {n}")
    if bool(torch.isinf(t).any()):
        raise ValueError(f"{name} contains ±inf (NaN marks a missing output)")
    empty = torch.nonzero(torch.isnan(t).all(0)).flatten().tolist()
    if empty:
        raise ValueError(f"{name}: output column(s) {empty[:5]} have no observed value "
                         "(NaN marks a missing output)")
    return t


def model_dtype(X: ArrayLike, y: ArrayLike | None, dtype: torch.dtype | None) -> torch.dtype:
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


def model_device(X: ArrayLike, y: ArrayLike | None) -> torch.device:
    """The device of tensor data (CPU for arrays); X and y must agree."""
    devices = {t.device for t in (X, y) if isinstance(t, Tensor)}
    if len(devices) > 1:
        raise ValueError(f"X and y are on different devices: {sorted(map(str, devices))}")
    device = devices.pop() if devices else torch.device("cpu")
    check_not_meta(device)
    return device


def check_not_meta(device: torch.device) -> None:
    """Refuse the meta device: a model's construction reads the data's values (starting
    values, checks, its posterior), which meta tensors do not hold."""
    if torch.device(device).type == "meta":
        raise ValueError("sparsegp models cannot live on the meta device: building one reads "
                         "the values of X and y (data-based starting values, checks) and "
                         "predicting reads its posterior's, which meta tensors do not hold; "
                         "use 'cpu' or 'cuda'")


class ScaleWarning(UserWarning):
    """The data are on a scale the model fits badly without standardisation.

    Shapes: none (a `UserWarning` subclass, given when a model is built from X [N, D] or
    y [N] whose spread is far from 1 or whose offset is many spreads from 0; the message says
    which). `standardize_X=True` / `standardize_y=True` (or `mean="constant"`) fix it.

    It is given where the data are given: when the model is built (`sg.SGPR(X, y)`), as
    GPflow checks a model's data at construction, and not again by `fit()`. To catch or
    silence it, put `warnings.catch_warnings()` around the construction, not around `fit()`.
    The scikit-learn estimators (`sparsegp.sklearn`) take their data in `fit(X, y)` and build
    the model there, so there it comes from `fit`, as scikit-learn's own warnings do. A
    streaming update (`model.update(X_new, y_new)`), which keeps the old model's units, gives
    it when the new batch sits far from the old model's predictions in those units (a batch
    that has moved; `models.core.stream_checks`).

    Example:

        >>> import warnings, sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always", sg.ScaleWarning)
        ...     m = sg.GPR(X * 1e4, y)
        >>> [w.category.__name__ for w in caught]
        ['ScaleWarning']
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error", sg.ScaleWarning)
        ...     result = m.fit(maxiter=2, progress=False, diagnose=False)  # not given again
        ...     m = sg.GPR(X * 1e4, y, standardize_X=True)  # no warning
    """


#: Spreads (standard deviations) outside this range make the optimiser's steps badly scaled.
GOOD_SPREAD = (1e-2, 1e2)
#: |mean| / std above which targets are "centred far from zero" for a zero-mean GP.
TARGET_OFFSET_RATIO = 10.0
#: |mean| / std above which an input column has lost most of its digits to the offset.
INPUT_OFFSET_RATIO = 1e6


def input_scale_problems(X: Tensor, names: Sequence[str] | None = None) -> list[str]:
    """Plain-language descriptions (each with its fix) of badly scaled inputs X [N, D]: a
    column spread outside `GOOD_SPREAD`, or an offset of more than `INPUT_OFFSET_RATIO`
    spreads (digits lost). Columns are named by `names` (a DataFrame's), else by index."""
    if X.shape[0] < 2:
        return []
    lo, hi = GOOD_SPREAD
    std, mean = X.std(0), X.mean(0)
    bad = [d for d in range(X.shape[1]) if std[d] > 0 and not lo <= float(std[d]) <= hi]
    far = [d for d in range(X.shape[1])
           if std[d] > 0 and abs(float(mean[d])) > INPUT_OFFSET_RATIO * float(std[d])]
    problems = []
    label = (lambda ds: [names[d] for d in ds]) if names is not None else (lambda ds: ds)
    if bad:
        spreads = ", ".join(f"{float(std[d]):.3g}" for d in bad[:3])
        problems.append(f"input column(s) {label(bad[:5])}{'…' if len(bad) > 5 else ''} have "
                        f"spread(s) "
                        f"{spreads}{' …' if len(bad) > 3 else ''}, far from 1: pass "
                        "standardize_X=True (or rescale X)")
    if far:
        problems.append(f"input column(s) {label(far[:5])} are offset by more than "
                        f"{INPUT_OFFSET_RATIO:.0e} spreads from 0: pass standardize_X=True (or "
                        "centre X)")
    return problems


def target_scale_problems(y: Tensor, zero_mean: bool = True, standardize: bool = True
                          ) -> list[str]:
    """The same for regression targets y [N]: a spread outside `GOOD_SPREAD`, or (for a
    zero-mean GP) a mean more than `TARGET_OFFSET_RATIO` spreads from 0 (the GP then spends
    its kernel on the offset and fits the rest badly). `standardize`: whether the model
    takes standardize_y=True (the advice names it)."""
    if y.shape[0] < 2:
        return []
    lo, hi = GOOD_SPREAD
    std, mean = float(y.std()), float(y.mean())
    problems = []
    if std > 0 and not lo <= std <= hi:
        problems.append(f"y has spread {std:.3g}, far from 1: " + (
            "pass standardize_y=True (or rescale y)" if standardize else "rescale y"))
    if zero_mean and std > 0 and abs(mean) > TARGET_OFFSET_RATIO * std:
        problems.append(f"y has mean {mean:.4g}, {abs(mean) / std:.3g} spreads from 0: a "
                        "zero-mean GP explains the offset with its kernel and fits the rest "
                        "badly; pass " + ("standardize_y=True or " if standardize else "")
                        + "mean='constant' (or subtract the mean)")
    return problems
