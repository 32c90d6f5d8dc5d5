"""Data sets shipped with the package."""

from .snelson import snelson, snelson_test_inputs

__all__ = ["snelson", "snelson_test_inputs"]
