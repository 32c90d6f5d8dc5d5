"""sparsegp: Gaussian processes with pseudo-point (inducing-point) approximations.

DTC, FITC, VFE and Power EP as one family (Bui, Yan & Turner 2017), with the exact GP as
reference and bounds that tell how good an approximation is.
"""

from . import datasets, diagnostics, distributed, features, kernels, likelihoods, means  # noqa: E402
from .diagnostics import ApproximationWarning, Diagnostics  # noqa: E402
from .distributed import DistributedError  # noqa: E402
from .features import InducingPoints  # noqa: E402
from .linalg import CholeskyError, JitterWarning  # noqa: E402
from .models import GPR, GPSSM, KISSGP, RFF, SGPC, SGPR, SSGP, SVGP, BayesianGPLVM, load  # noqa: E402
from .models.fitting import FitOptions  # noqa: E402
from .partition import cluster_blocks  # noqa: E402
from .training import FitResult  # noqa: E402
from .validation import ScaleWarning  # noqa: E402
from .version import __version__  # noqa: E402
from .workflows import select_inducing  # noqa: E402

__all__ = [
    "GPR", "SGPR", "SGPC", "SVGP", "RFF", "SSGP", "BayesianGPLVM", "GPSSM", "KISSGP", "load",
    "kernels",
    "likelihoods", "means",
    "datasets", "features",
    "InducingPoints",
    "FitResult", "FitOptions", "diagnostics", "select_inducing", "cluster_blocks", "Diagnostics",
    "ApproximationWarning",
    "CholeskyError", "JitterWarning", "ScaleWarning", "DistributedError", "distributed", "__version__",
]
