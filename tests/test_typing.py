"""The package type-checks: `python -m mypy` (configured in pyproject.toml: the `sparsegp`
package, checked as Python 3.11) reports no error. This is how CI runs mypy."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # `-m "not slow"` leaves these out

ROOT = Path(__file__).resolve().parents[1]
#: The torch whose type stubs the package is checked against (CI installs exactly this one):
#: other torch releases change their stubs, and errors there say nothing about this code.
CHECKED_TORCH = "2.13."


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is not installed (the test extra installs it: pip install '.[test]')")
@pytest.mark.skipif(not torch.__version__.startswith(CHECKED_TORCH),
                    reason=f"the package is type-checked against torch {CHECKED_TORCH}x (CI's); "
                    f"this is torch {torch.__version__}, whose stubs differ")
def test_mypy_reports_no_errors():
    # --python-executable: third-party packages (torch, numpy, ...) are those of this interpreter,
    # whichever Python version pyproject.toml has mypy check the code as
    result = subprocess.run([sys.executable, "-m", "mypy", "--python-executable", sys.executable],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"mypy reports errors:\n{result.stdout}{result.stderr}"
