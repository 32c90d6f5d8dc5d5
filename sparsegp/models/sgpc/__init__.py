"""SGPC, sparse GP classification by Power EP (`model.py`), and its streaming variant
(`streaming.py`)."""

from .model import SGPC, SGPCOptions, SGPCSpec
from .streaming import StreamingSGPC, StreamingSGPCSpec

__all__ = ["SGPC", "SGPCOptions", "SGPCSpec", "StreamingSGPC", "StreamingSGPCSpec"]
