"""Every Python example in the README runs exactly as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # `-m "not slow"` leaves these out

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples may write files
    exec(compile(BLOCKS[index], f"README.md[python block {index}]", "exec"), {"__name__": "__main__"})


def test_install_commands_name_the_clone_not_an_index():
    # sparsegp is installed from its clone (`pip install .`), not from a package index: a
    # `pip install "sparsegp[sklearn]"` in a fresh environment fails
    root = README.parent
    texts = [README, *(root / "docs").rglob("*.md"), *(root / "sparsegp").rglob("*.py")]
    found = [str(p.relative_to(root)) for p in texts if "generated" not in p.parts
             and re.search(r"pip install ['\"]?sparsegp\[", p.read_text())]
    assert found == []
    text = README.read_text()
    assert 'pip install ".[sklearn]"' in text and 'pip install ".[botorch]"' in text


def test_the_readme_says_how_long_the_suite_takes_and_how_to_run_a_fast_subset():
    text = README.read_text()
    assert 'pip install ".[test]" && python -m pytest -q' in text  # what CI runs
    assert re.search(r"about \d+ minutes", text)
    assert 'python -m pytest -q -m "not slow"' in text
