"""The package version (a module of its own so that any layer can read it)."""

__version__ = "0.4.0"
