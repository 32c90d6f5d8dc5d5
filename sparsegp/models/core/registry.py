"""The model classes by name (every `Model` subclass registers itself), for `load`."""

from ...registry import Registry

MODELS = Registry("model")
