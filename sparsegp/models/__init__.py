"""Models: one module (or small package) per family, on one core.

Families: `gpr` (the exact GP), `sgpr` (the collapsed pseudo-point family and its streaming
variant), `svgp` (any likelihood, and its streaming variant), `sgpc` (Power-EP classification,
and its streaming variant), `kissgp`, `spectral` (RFF, SSGP), `gplvm`, `gpssm`. The
infrastructure they are built on is `core/`: the one base (`core.model.Model`: one
constructor, the posterior cache, `fit`, predictions written once, saving), the spec, the data
and their units, the training plans and their rules, conditioning and the streaming update.
`docs/architecture.md` draws the parts.

Modules that moved keep importing under their former names, with a `DeprecationWarning`
(`sparsegp.moved`).
"""

from __future__ import annotations

from ..moved import former
from .core.model import Model
from .core.persistence import load
from .gplvm import BayesianGPLVM
from .gpr import GPR
from .gpssm import GPSSM
from .kissgp import KISSGP
from .sgpc import SGPC, StreamingSGPC
from .sgpr import SGPR, StreamingSGPR
from .spectral import RFF, SSGP
from .svgp import SVGP, StreamingSVGP

__all__ = ["Model", "BayesianGPLVM", "GPSSM", "KISSGP", "GPR", "SGPR", "SGPC", "SVGP", "RFF",
           "SSGP", "StreamingSGPR", "StreamingSGPC", "StreamingSVGP", "load"]


def __getattr__(name: str) -> object:
    """Former names of this package and its former modules as attributes
    (`sparsegp.models.pathwise`), with a `DeprecationWarning` (`sparsegp.moved`)."""
    return former(__name__, name)
