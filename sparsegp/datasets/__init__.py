"""Data sets shipped with the package.

Shapes: `snelson()` -> X [200, 1], y [200]; `snelson_test_inputs()` -> `X*` [301, 1] (float64).

Example:

    >>> import sparsegp as sg
    >>> X, y = sg.datasets.snelson()
    >>> X.shape, y.shape, X.dtype
    ((200, 1), (200,), dtype('float64'))
    >>> sg.datasets.snelson_test_inputs().shape
    (301, 1)
"""

from .snelson import snelson, snelson_test_inputs

__all__ = ["snelson", "snelson_test_inputs"]
