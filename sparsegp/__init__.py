"""sparsegp: Gaussian processes with pseudo-point (inducing-point) approximations.

DTC, FITC, VFE and Power EP as one family (Bui, Yan & Turner 2017), with the exact GP as
reference and bounds that tell how good an approximation is.
"""

__version__ = "0.1.0"

from . import datasets, diagnostics, distributed, kernels, likelihoods  # noqa: E402
from .diagnostics import ApproximationWarning, Diagnostics, select_inducing  # noqa: E402
from .distributed import DistributedError  # noqa: E402
from .features import InducingPoints  # noqa: E402
from .linalg import CholeskyError, JitterWarning  # noqa: E402
from .models import GPR, SGPC, SGPR, SVGP, load  # noqa: E402
from .training import FitResult  # noqa: E402

__all__ = [
    "GPR", "SGPR", "SGPC", "SVGP", "load", "kernels", "likelihoods", "datasets", "InducingPoints",
    "FitResult", "diagnostics", "select_inducing", "Diagnostics", "ApproximationWarning",
    "CholeskyError", "JitterWarning", "DistributedError", "distributed", "__version__",
]
