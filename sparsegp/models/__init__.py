"""Models: thin nn.Modules that own parameters, call an objective and build a posterior."""

from .base import Model
from .regression import GPModel
from .gpr import GPR
from .persistence import load
from .sgpr import SGPR

__all__ = ["Model", "GPModel", "GPR", "SGPR", "load"]
