"""SVGP for any likelihood (`model.py`: the model; `targets.py`: its data; `training.py`: its
training plans) and its streaming variant (`streaming.py`)."""

from .model import SVGP, OnOneLatent, SVGPSpec
from .streaming import StreamingSVGP, StreamingSVGPSpec
from .targets import SVGPOptions

__all__ = ["SVGP", "SVGPSpec", "SVGPOptions", "OnOneLatent", "StreamingSVGP",
           "StreamingSVGPSpec"]
