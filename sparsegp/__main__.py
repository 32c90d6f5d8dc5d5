"""`python -m sparsegp`: the command line."""

import sys

try:
    from .cli import entry
except KeyboardInterrupt:  # Ctrl-C while the command line itself loads: as `entry` says it
    print("sparsegp: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(entry())
