"""Speed and memory of the collapsed objectives against the GEMM rate and a naive baseline.

    python benchmarks/speed.py [--quick] [--out benchmarks/RESULTS.md]

The same as `sparsegp bench speed`; the code is sparsegp/benchmarking/speed.py.
"""

import sys

from sparsegp.benchmarking.speed import main

if __name__ == "__main__":
    sys.exit(main())
