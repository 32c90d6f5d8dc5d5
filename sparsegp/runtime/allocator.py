"""The process's memory: requests larger than the device's memory refused before anything is
allocated, and freed memory kept for reuse (glibc) in long runs of same-sized steps.

A request is checked against the device's whole memory (`device_memory`: a GPU's, or the
machine's RAM, or a container's limit when lower): a request above it cannot succeed, and
torch's allocator would say only "can't allocate memory: you tried to allocate N bytes" of
one array, after the work before it; `check_request` says what asked for how much, and what
to do instead (a smaller chunk_size, a sparse model).

glibc's malloc serves blocks above a threshold (at most 32 MB) with fresh `mmap` pages and
returns them to the system on `free`: a training step that allocates and frees, say,
[10, 750, 750] float64 temporaries (45 MB) page-faults its way through them again at every
step. Measured (one thread, 2-core machine): a 10-class SVGP step at M = 750 spent 27% of its
time in the kernel (86,000 minor page faults a step); with mmap off and trimming deferred it
ran 25% faster (0.99 → 0.74 s), a convolutional step 11% (4.56 → 4.08 s). The price is that
memory freed by one step stays with the process (reused by the next), so the resident set
stays at its peak. This is a process-wide setting: the command line's long experiments make
it; the library never does on import.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Ask glibc to serve large blocks from the heap and not to give freed memory back to the
    system, so that repeated steps reuse it. Returns whether it applied (False where the C
    library is not glibc, e.g. macOS or Windows: nothing is changed there)."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; the trim threshold's largest value is INT_MAX
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


class MemoryRequestError(MemoryError):
    """A computation would need more memory than the device has: refused before allocating."""


def format_bytes(n: float) -> str:
    """A byte count in words: '512 B', '3.2 GB', '8.0 TB' (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"  # not reached


#: Files that hold a container's memory limit (cgroup v2, v1): "max" or a huge number when none.
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"),
                 Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


#: `device_memory` by device: a device's total does not change while the process runs, and
#: the checks that read it sit on hot paths (every joint prediction, every chunk).
_TOTALS: dict[str, int | None] = {}


def device_memory(device: torch.device | str | None = None) -> int | None:
    """The bytes of memory a request on `device` can at most get: a CUDA device's total memory;
    on the CPU the machine's RAM, or the container's limit where lower. None where the system
    does not say (then nothing is refused). Read once per device (files, a GPU query)."""
    key = "cpu" if device is None or not str(device).startswith("cuda") else str(device)
    if key not in _TOTALS:
        _TOTALS[key] = _read_total(device)
    return _TOTALS[key]


def _read_total(device: torch.device | str | None) -> int | None:
    if device is not None and str(device).startswith("cuda"):
        import torch  # here only: the command line reads this module before torch is needed

        return int(torch.cuda.mem_get_info(torch.device(device))[1])
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows)
        return None
    if total <= 0:
        return None
    for limit in CGROUP_LIMITS:
        try:
            text = limit.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def check_request(nbytes: float, what: str, advice: str, device: torch.device | str | None = None
                  ) -> None:
    """Refuse, before anything is allocated, a computation that needs more than the device's
    memory (`device_memory`): a `MemoryRequestError` saying `what` asks for about how many
    bytes, how much the device has, and the `advice` (what to do instead)."""
    total = device_memory(device)
    if total is not None and nbytes > total:
        where = "this GPU has" if device is not None and str(device).startswith("cuda") else \
            "this machine (or its container) has"
        raise MemoryRequestError(f"{what} needs about {format_bytes(nbytes)} of memory; "
                                 f"{where} {format_bytes(total)}: {advice}")


#: torch's allocators' messages when an allocation fails (CPU, CUDA), with the bytes asked.
_TORCH_FAILURES = (re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes"),
                   re.compile(r"out of memory\. Tried to allocate ([\d.]+) ([KMGT]i?B)"))
_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
          "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}


def allocation_failure(err: BaseException) -> str | None:
    """torch's error of a failed allocation in words (the bytes one array asked for, and what to
    do); None for any other error."""
    text = str(err)
    for pattern in _TORCH_FAILURES:
        found = pattern.search(text)
        if found:
            size = float(found.group(1)) * (_UNITS[found.group(2)] if found.lastindex == 2 else 1)
            return (f"out of memory: one array of {format_bytes(size)} could not be allocated; "
                    "use a smaller chunk_size, fewer inducing points or a sparse model (the exact "
                    "GP needs N×N matrices)")
    return None
