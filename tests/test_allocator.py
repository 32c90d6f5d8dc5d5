"""`allocator.keep_freed_memory`: on glibc, repeated large allocations reuse the process's
memory instead of faulting in fresh pages each time (run in a child process: the setting is
process-wide)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = """
import resource, sys, torch
from sparsegp.allocator import keep_freed_memory
if sys.argv[1] == "keep" and not keep_freed_memory():
    print("unsupported"); raise SystemExit
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.ones(2**23, dtype=torch.float64)  # 64 MB, once
before = faults()
for _ in range(10):
    torch.ones(2**23, dtype=torch.float64)  # allocated, touched and freed again
print(faults() - before)
"""


def faults(mode: str) -> str:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    kept = faults("keep")
    if kept == "unsupported":
        pytest.skip("the C library is not glibc (no mallopt)")
    default = int(faults("default"))
    # 10 × 64 MB of fresh pages by default (≈ 160,000 faults of 4 kB); reused when kept
    assert default > 40_000 and int(kept) < default / 10, (default, kept)


def test_elsewhere_it_changes_nothing(monkeypatch):
    from sparsegp import allocator
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator.keep_freed_memory() is False
