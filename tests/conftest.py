"""Shared fixtures: small random regression problems in float64, and where the data-driven
tests find the experiments' data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

#: The developers' data folder, beside the repository (a user's clone has none). The tests
#: name it; the package never does (its default is $SPARSEGP_DATA_DIR, else the user cache folder).
DEVELOPERS_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"


def find_test_data_dir(environ=os.environ, developers: Path = DEVELOPERS_DATA_DIR) -> Path:
    """The data folder of the data-driven tests: where the experiments look by default —
    $SPARSEGP_DATA_DIR when set, else sparsegp/data in the user cache folder — and, when that
    default is no folder, the developers' folder beside the repository if there is one."""
    from sparsegp.experiments.shared.datafolder import DATA_DIR_VARIABLE, user_cache_folder

    if environ.get(DATA_DIR_VARIABLE):
        return Path(environ[DATA_DIR_VARIABLE]).expanduser().absolute()
    default = (user_cache_folder(environ=environ) / "sparsegp" / "data").absolute()
    return developers if not default.is_dir() and developers.is_dir() else default


#: The data folder of the data-driven tests (`find_test_data_dir`). Tests that need files missing
#: from it skip with the reason.
TEST_DATA_DIR = find_test_data_dir()


def no_data_reason(files: str) -> str:
    """The skip reason of a test whose data `files` are not in TEST_DATA_DIR."""
    return (f"needs {files} in {TEST_DATA_DIR} (set SPARSEGP_DATA_DIR to a folder holding "
            "the experiments' data; docs/data.md says where to get them)")


@pytest.fixture(autouse=True, scope="session")
def experiments_data_dir():
    """The experiments' default data folder during the tests: TEST_DATA_DIR (through
    SPARSEGP_DATA_DIR), so that runs without --data-dir read the developers' data."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARSEGP_DATA_DIR", str(TEST_DATA_DIR))
        yield TEST_DATA_DIR


def import_error_without(module: str, dependency: str) -> str:
    """What importing sparsegp's `module` says, in a fresh interpreter, when the optional
    `dependency` cannot be imported."""
    code = (f"import sys; sys.modules[{dependency!r}] = None\n"
            f"try:\n    import {module}\nexcept ImportError as e:\n    print(e)\n")
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True).stdout


def make_problem(seed: int, N: int = 40, D: int = 2, noise: float = 0.05):
    """X [N, D] uniform in [-3, 3]^D and y = smooth function + Gaussian noise."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(N, D))
    f = np.sin(X).sum(1) + 0.3 * (X**2).sum(1) / D
    y = f + np.sqrt(noise) * rng.standard_normal(N)
    return X, y


@pytest.fixture
def problem():
    return make_problem(0)


@pytest.fixture
def quiet_model_warnings():
    """Silence the library's advice (ScaleWarning, ApproximationWarning) in tests that build
    models on purpose-made data (`pytestmark = pytest.mark.usefixtures(...)`)."""
    import warnings

    import sparsegp as sg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sg.ScaleWarning)
        warnings.simplefilter("ignore", sg.ApproximationWarning)
        yield
