"""Models: thin nn.Modules that own parameters, call an objective and build a posterior."""

from .base import Model
from .gplvm import BayesianGPLVM
from .gpr import GPR
from .gpssm import GPSSM
from .kissgp import KISSGP
from .persistence import load
from .regression import GPModel
from .sgpc import SGPC
from .sgpr import SGPR
from .spectral import RFF, SSGP
from .streaming import StreamingSGPR
from .streaming_sgpc import StreamingSGPC
from .streaming_svgp import StreamingSVGP
from .svgp import SVGP

__all__ = ["Model", "BayesianGPLVM", "GPSSM", "KISSGP", "GPModel", "GPR", "SGPR", "SGPC", "SVGP",
           "RFF", "SSGP", "StreamingSGPR", "StreamingSGPC", "StreamingSVGP", "load"]
