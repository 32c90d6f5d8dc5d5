"""KISS-GP's evidence + gradient against GPyTorch's KISS-GP (where installed) and a dense one.

    python benchmarks/kissgp.py [--quick] [--out FILE]

The same as `sparsegp bench kissgp`; the code is sparsegp/benchmarking/kissgp.py.
"""

import sys

from sparsegp.benchmarking.kissgp import main

if __name__ == "__main__":
    sys.exit(main())
