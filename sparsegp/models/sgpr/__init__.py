"""SGPR, the collapsed pseudo-point family (`model.py`), and its streaming variant
(`streaming.py`)."""

from .model import SGPR, SGPROptions, SGPRSpec
from .streaming import StreamingSGPR, StreamingSGPRSpec

__all__ = ["SGPR", "SGPROptions", "SGPRSpec", "StreamingSGPR", "StreamingSGPRSpec"]
