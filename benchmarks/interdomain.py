"""What M inducing variables of C deltas cost against M·C inducing points and a naive version.

    python benchmarks/interdomain.py [--quick] [--out FILE]

The same as `sparsegp bench interdomain`; the code is sparsegp/benchmarking/interdomain.py.
"""

import sys

from sparsegp.benchmarking.interdomain import main

if __name__ == "__main__":
    sys.exit(main())
