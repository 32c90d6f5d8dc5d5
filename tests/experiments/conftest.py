"""The tests of the paper reproductions run them (quick mode) or their parts: every test here
is marked `slow`, so that `python -m pytest -q -m "not slow"` leaves them out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)
