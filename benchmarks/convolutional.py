"""Images per second of a convolutional SVGP's training step against a naive per-patch loop.

    python benchmarks/convolutional.py [--quick] [--out FILE]

The same as `sparsegp bench conv`; the code is sparsegp/benchmarking/convolutional.py.
"""

import sys

from sparsegp.benchmarking.convolutional import main

if __name__ == "__main__":
    sys.exit(main())
