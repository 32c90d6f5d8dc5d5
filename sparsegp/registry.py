"""Classes by name, so that a saved `config()` rebuilds the object: one mechanism for kernels,
inducing features, likelihoods and models.

A base class owns a `Registry`; every subclass registers itself when it is defined
(`__init_subclass__`), and `registry.build(cfg)` looks the class up by `cfg["type"]` and
calls its `from_config(cfg)`.
"""

from __future__ import annotations

from typing import Any, ClassVar


class Registry:
    """Subclasses of one base, by class name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._classes: dict[str, type] = {}

    def add(self, cls: type) -> None:
        """Register `cls` by its name. A class of sparsegp's own is never replaced by another
        of the same name (saved models would then rebuild the wrong class); a class defined
        again (the same module and qualified name, e.g. a re-run notebook cell) replaces its
        earlier definition."""
        old = self._classes.get(cls.__name__)
        if (old is not None and old.__module__.startswith("sparsegp.")
                and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__)):
            raise TypeError(f"a {self.kind} called {cls.__name__!r} exists already "
                            f"({old.__module__}.{old.__qualname__}); saved models find classes "
                            "by name, so give yours another name")
        self._classes[cls.__name__] = cls

    def names(self) -> list[str]:
        return sorted(self._classes)

    def get(self, name: object) -> type[Any]:
        cls = self._classes.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ValueError(f"unknown {self.kind} type {name!r} (a class of your own must be "
                             f"defined or imported before loading); known types: "
                             f"{', '.join(self.names())}")
        return cls

    def build(self, cfg: object) -> Any:
        """The object that `obj.config()` == `cfg` describes (parameter values come from
        `load_state_dict` afterwards)."""
        if not isinstance(cfg, dict) or not isinstance(cfg.get("args", {}), dict):
            raise ValueError(f"a {self.kind} config is a dict {{'type': ..., 'args': {{...}}}}; "
                             f"got {cfg!r}")
        cls = self.get(cfg.get("type"))
        try:
            return cls.from_config(cfg)
        except TypeError as err:
            raise ValueError(f"bad arguments for {self.kind} {cfg.get('type')}: {err}") from None


class Registered:
    """Mixin: subclasses of a class with a `registry` attribute register themselves."""

    registry: ClassVar[Registry]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.registry.add(cls)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Any:
        """Rebuild from `config()`: by default the class called with `cfg["args"]`."""
        return cls(**cfg.get("args", {}))
