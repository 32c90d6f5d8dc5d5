"""A model's spec: everything besides its parts and its tensors that its constructor's options
and its data fixed, as one typed, frozen value.

Every model is built from a spec and its parts by one constructor (`model.Model._construct`),
whether it comes from its `__init__`, from `load`, from a streaming `update` or from
`condition_on_observations`. A spec is saved as a plain dict (`config()`, the model file's
"config" beside the parts' own configs) and read back by `from_config`, which takes the
files of earlier versions (an entry they lack takes its field's default).

Each family declares its spec as a frozen dataclass built on `ModelSpec` (`sgpr.SGPRSpec`,
...): adding an option is one field. A field whose type is itself a spec value (`NoiseSpec`,
`BlocksSpec`, `StreamSpec`) is saved as its own dict.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import ClassVar, TypeAlias, TypeVar

S = TypeVar("S", bound="ModelSpec")

#: What a saved config holds: plain values, lists and dicts of them.
Plain: TypeAlias = "str | int | float | bool | None | list[Plain] | dict[str, Plain]"


def plain(value: object) -> Plain:
    """A spec's value as a model file stores it: tuples as lists, spec values as dicts."""
    if isinstance(value, SpecValue):
        return value.config()
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a spec holds plain values; got {type(value).__name__}")


def frozen_value(value: object) -> object:
    """A config's value as a spec holds it: lists as tuples (hashable, immutable)."""
    if isinstance(value, list):
        return tuple(frozen_value(v) for v in value)
    return value


def _number(value: Plain) -> float:
    """A saved number (a config holds it as an int or a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a number was expected in the model's config; got {value!r}")
    return float(value)


class SpecValue(ABC):
    """A nested entry of a spec, saved as a dict of its own (`config`, `from_config`)."""

    @abstractmethod
    def config(self) -> dict[str, Plain]:
        """The entry as plain values."""

    @classmethod
    @abstractmethod
    def from_config(cls, config: dict[str, Plain] | None) -> SpecValue | None:
        """The entry from `config()`'s values (None where the spec had none)."""


@dataclass(frozen=True)
class NoiseSpec(SpecValue):
    """The structure of Gaussian noise: one σ² (neither field), one per group of points
    (`groups`, their labels) or one known value per point (`points`, how many)."""

    groups: tuple[Plain, ...] | None = None
    points: int | None = None

    def config(self) -> dict[str, Plain]:
        if self.groups is not None:
            return {"groups": list(self.groups)}
        return {} if self.points is None else {"points": self.points}

    @classmethod
    def from_config(cls, config: dict[str, Plain] | None) -> NoiseSpec:
        config = config or {}
        groups = config.get("groups")
        points = config.get("points")
        return cls(None if groups is None else tuple(groups) if isinstance(groups, list)
                   else None, points if isinstance(points, int) else None)

    @property
    def count(self) -> int:
        """The noise variances: one per group or point, 0 for one σ² (a scalar)."""
        if self.groups is not None:
            return len(self.groups)
        return self.points or 0


@dataclass(frozen=True)
class BlocksSpec(SpecValue):
    """Block Power EP's blocks: the distinct labels and one power per block."""

    labels: tuple[Plain, ...]
    alpha: tuple[float, ...]

    def config(self) -> dict[str, Plain]:
        return {"labels": list(self.labels), "alpha": list(self.alpha)}

    @classmethod
    def from_config(cls, config: dict[str, Plain] | None) -> BlocksSpec | None:
        if not config:
            return None
        labels, alpha = config["labels"], config["alpha"]
        assert isinstance(labels, list) and isinstance(alpha, list)
        return cls(tuple(labels), tuple(_number(a) for a in alpha))


@dataclass(frozen=True)
class StreamSpec(SpecValue):
    """A streamed model's history: the rows every batch of its chain of updates held
    (`seen`), the updates made (`updates`), and the sizes of what it keeps of the data before
    its batch (`old_inducing` inputs; `rank` of a summary of pseudo-observations, 0 where it
    keeps the old posterior itself)."""

    seen: int
    updates: int
    old_inducing: int
    rank: int = 0

    def config(self) -> dict[str, Plain]:
        out: dict[str, Plain] = {"old_inducing": self.old_inducing}
        if self.rank:
            out["rank"] = self.rank
        out.update(seen=self.seen, updates=self.updates)
        return out

    @classmethod
    def from_config(cls, config: dict[str, Plain] | None) -> StreamSpec | None:
        if not config:
            return None
        count = {key: int(_number(config.get(key, 0)))
                 for key in ("seen", "updates", "old_inducing", "rank")}
        return cls(count["seen"], count["updates"], count["old_inducing"], count["rank"])


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """What every model's spec holds: the dtype of its work and outputs ("float32" or
    "float64"), the relative jitter, the rows of its data (of all shards) and the width of
    the inputs it predicts at, the names of those inputs (a DataFrame's columns, or None),
    and whether its data are this process's shard of data sharded over torch.distributed
    ranks (decided once, at construction; not saved: a loaded model is one process's)."""

    #: config entries that earlier versions wrote under another name, by their spec name
    renamed: ClassVar[dict[str, str]] = {}

    dtype: str
    jitter: float
    num_data: int
    input_dim: int
    feature_names: tuple[str, ...] | None = None
    sharded: bool = dataclasses.field(default=False, compare=False)

    def config(self) -> dict[str, Plain]:
        """The spec as a model file stores it (plain values; `from_config` reads it back)."""
        return {self.renamed.get(f.name, f.name): plain(getattr(self, f.name))
                for f in fields(self) if f.name != "sharded"}

    @classmethod
    def from_config(cls: type[S], config: dict[str, Plain]) -> S:
        """The spec a saved config describes (entries a file of an earlier version lacks take
        their fields' defaults; parts' configs and unknown entries are not the spec's)."""
        given: dict[str, object] = {}
        for f in fields(cls):
            key = cls.renamed.get(f.name, f.name)
            if f.name == "sharded" or key not in config:
                continue
            value = config[key]
            kind = _spec_value_type(cls, f.name)
            given[f.name] = (kind.from_config(value) if kind is not None  # type: ignore[arg-type]
                             else frozen_value(value))
        return cls(**given)  # type: ignore[arg-type]

    def but(self: S, **changes: object) -> S:
        """This spec with some fields changed (`dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _spec_value_type(cls: type, name: str) -> type[SpecValue] | None:
    """The `SpecValue` class of the field `name` of the spec class `cls`, or None."""
    hints = _hints(cls)
    hint = hints.get(name, "")
    for kind in (NoiseSpec, BlocksSpec, StreamSpec):
        if kind.__name__ in hint:
            return kind
    return None


def _hints(cls: type) -> dict[str, str]:
    """The annotations (strings, `from __future__ import annotations`) of `cls` and its
    bases."""
    out: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        out.update({k: str(v) for k, v in getattr(base, "__annotations__", {}).items()})
    return out
