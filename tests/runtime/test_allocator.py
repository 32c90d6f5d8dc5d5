"""`allocator.keep_freed_memory`: on glibc, repeated large allocations reuse the process's
memory instead of faulting in fresh pages each time (in a child process: the setting is
process-wide). The child counts page faults over repeated 48 MB allocations with the C
library's defaults, then again after `keep_freed_memory()`."""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys

import pytest


def _has_mallopt() -> bool:
    try:
        return hasattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "mallopt")
    except OSError:
        return False

CHILD = """
import resource, torch
import sparsegp.models  # the models loaded, as in the processes that fit them
from sparsegp.runtime.allocator import keep_freed_memory
def faults_over_repeats():
    torch.ones(6 * 2**20, dtype=torch.float64)  # 48 MB: above glibc's largest mmap threshold
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(8):
        torch.ones(6 * 2**20, dtype=torch.float64)  # allocated, touched and freed again
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
default = faults_over_repeats()
print(default, faults_over_repeats() if keep_freed_memory() else "unsupported")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _has_mallopt(),
                    reason="glibc's mallopt: Linux with glibc only")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True)
    default, kept = out.stdout.split()
    # 8 × 48 MB of fresh pages by default (≈ 98,000 faults of 4 kB); kept, at most one or two
    # of them are faulted in again (measured: 12,288 faults, one 48 MB block)
    assert int(default) > 40_000 and int(kept) < int(default) / 3, (default, kept)


def test_elsewhere_it_changes_nothing(monkeypatch):
    from sparsegp.runtime import allocator
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator.keep_freed_memory() is False


def test_absurd_joint_predictions_and_inducing_sets_are_refused_before_allocating(monkeypatch):
    """A joint covariance over N* points, and M inducing variables, whose N*×N* or M×M
    matrices exceed the device's memory are a MemoryRequestError naming what asked and what
    to do — not torch's allocator error after the work before it. (The device's memory is
    set to 64 MB here, so the test allocates nothing large.)"""
    import numpy as np

    import sparsegp as sg
    from sparsegp.runtime import allocator
    from sparsegp.runtime.allocator import MemoryRequestError

    monkeypatch.setattr(allocator, "device_memory", lambda device=None: 64 * 2**20)
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(300, 1))
    model = sg.SGPR(X, np.sin(6 * X[:, 0]), inducing_points=10)
    Xs = rng.uniform(size=(3_000, 1))  # two 3000×3000 float64 matrices: 144 MB
    with pytest.raises(MemoryRequestError, match=r"a joint predictive covariance over 3000 "
                                                 r"points .* full_cov=False"):
        model.predict_f(Xs, full_cov=True)
    with pytest.raises(MemoryRequestError, match="joint predictive covariance"):
        model.predict_f_samples(Xs, 2)
    assert model.predict_f(Xs)[1].shape == (3_000,)  # the marginals are fine
    with pytest.raises(MemoryRequestError, match=r"2000 inducing variables .* use fewer"):
        sg.SVGP(X, X[:, 0], inducing_points=rng.uniform(size=(2_000, 1)))
