"""sparsegp: Gaussian processes with pseudo-point (inducing-point) approximations.

DTC, FITC, VFE and Power EP as one family (Bui, Yan & Turner 2017), with the exact GP as
reference and bounds that tell how good an approximation is.
"""

# The public names are imported on first use (PEP 562): `import sparsegp` reads only the
# version, so that the command line answers `--version` and `--help` without importing torch,
# and Ctrl-C during its imports is the program's to report. `sparsegp.SGPR`,
# `from sparsegp import SGPR` and every submodule (`sparsegp.models`, ...) work as before.

from __future__ import annotations

from . import moved as _moved
from .version import __version__

_moved.install()  # former module paths keep importing, with a DeprecationWarning

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the type checker: True)
if TYPE_CHECKING:
    from typing import Any

    from . import datasets, diagnostics, distributed, features, kernels, likelihoods, means
    from .diagnostics import ApproximationWarning, ConvergenceWarning, Diagnostics
    from .distributed import DistributedError
    from .features import InducingPoints
    from .linalg import CholeskyError, JitterWarning
    from .models import GPR, GPSSM, KISSGP, RFF, SGPC, SGPR, SSGP, SVGP, BayesianGPLVM, load
    from .models.core.fitting import FitOptions
    from .partition import cluster_blocks
    from .training import FitResult, FitTerminated
    from .validation import ScaleWarning
    from .workflows import select_inducing

#: The submodule each public class or function is taken from.
_HOMES = {
    "ApproximationWarning": "diagnostics", "ConvergenceWarning": "diagnostics",
    "Diagnostics": "diagnostics",
    "DistributedError": "distributed", "InducingPoints": "features",
    "CholeskyError": "linalg", "JitterWarning": "linalg",
    **{name: "models" for name in ("GPR", "GPSSM", "KISSGP", "RFF", "SGPC", "SGPR", "SSGP",
                                   "SVGP", "BayesianGPLVM", "load")},
    "FitOptions": "models.core.fitting", "cluster_blocks": "partition", "FitResult": "training",
    "FitTerminated": "training",
    "ScaleWarning": "validation", "select_inducing": "workflows",
}

__all__ = [
    "GPR", "SGPR", "SGPC", "SVGP", "RFF", "SSGP", "BayesianGPLVM", "GPSSM", "KISSGP", "load",
    "kernels",
    "likelihoods", "means",
    "datasets", "features",
    "InducingPoints",
    "FitResult", "FitTerminated", "FitOptions", "diagnostics", "select_inducing",
    "cluster_blocks", "Diagnostics",
    "ApproximationWarning", "ConvergenceWarning",
    "CholeskyError", "JitterWarning", "ScaleWarning", "DistributedError", "distributed", "__version__",
]

if not TYPE_CHECKING:  # the type checker sees the imports above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        """A public name or a submodule, imported on first use (then an ordinary attribute)."""
        import importlib
        import importlib.util

        if name in _HOMES:
            value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
        elif (name.isidentifier() and not name.startswith("__")
              and importlib.util.find_spec(f"{__name__}.{name}")):
            value = importlib.import_module(f"{__name__}.{name}")
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
