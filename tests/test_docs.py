"""The documentation site's sources: every page in the navigation exists or is generated,
every section a page includes exists, every Python example on a page runs exactly as written,
every gallery script has a page, and the gallery's cell parser reads percent-format scripts.
(CI builds the site itself with `mkdocs build --strict`, running the gallery.)"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # `-m "not slow"` leaves these out

ROOT = Path(__file__).resolve().parents[1]


def load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nav_pages() -> list[str]:
    return re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)


def test_every_page_in_the_navigation_exists_or_is_generated():
    gallery = {f"generated/gallery/{p.stem}.md" for p in (ROOT / "examples" / "gallery").glob("*.py")}
    pages = nav_pages()
    assert len(pages) > 10
    missing = [p for p in pages if not (ROOT / "docs" / p).exists()
               and p not in gallery and p != "generated/cli.md"]
    assert missing == []
    assert gallery <= set(pages), "every gallery script needs an entry in mkdocs.yml's nav"


def test_every_section_a_page_includes_exists():
    included = set()
    for page in (ROOT / "docs").rglob("*.md"):
        included |= set(re.findall(r'--8<-- "([\w/.-]+\.md):([\w-]+)"', page.read_text()))
    assert ("README.md", "quickstart") in included
    for path, name in included:
        text = (ROOT / path).read_text()
        assert f"[start:{name}]" in text and f"[end:{name}]" in text, (path, name)


# The user guide's examples: fenced Python blocks at the start of a line on the hand-written
# pages (the generated pages are the gallery's, run by the build). A block that is also in the
# README runs in tests/test_readme.py; the rest run here, each as written.
README_BLOCKS = set(re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S))
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "generated" not in p.parts)
EXAMPLES = [(page.relative_to(ROOT).as_posix(), i, block)
            for page in PAGES
            for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", page.read_text(),
                                                 flags=re.S | re.M))
            if block not in README_BLOCKS]


def test_the_pages_have_examples():
    assert len(EXAMPLES) >= 10
    assert {"docs/diagnostics.md", "docs/predictions.md", "docs/scale.md"} <= {p for p, _, _ in EXAMPLES}


@pytest.mark.parametrize("page, index, block", EXAMPLES, ids=[f"{p}[{i}]" for p, i, _ in EXAMPLES])
def test_page_example_runs(page, index, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples may write files
    exec(compile(block, f"{page}[python block {index}]", "exec"), {"__name__": "__main__"})


def test_gallery_cells_are_read_from_percent_format():
    hooks = load_hooks()
    source = '"""doc"""\n\n# %% [markdown]\n# # Title\n#\n# text\n\n# %%\nx = 1\n\n# %%\nprint(x)\n'
    assert hooks.cells(source) == [("markdown", "# Title\n\ntext"), ("code", "x = 1"),
                                   ("code", "print(x)")]


def test_the_cli_reference_covers_every_command():
    hooks = load_hooks()
    paths = hooks.command_paths()
    assert ["fit"] in paths and ["bench", "compare"] in paths
    assert ["experiment", "bui2017"] in paths
    assert "usage: sparsegp fit" in hooks.help_text(["fit"])


def test_the_gallery_says_when_its_output_is_quick_modes(tmp_path, monkeypatch):
    hooks = load_hooks()
    script = tmp_path / "plot_tiny.py"
    script.write_text('"""A tiny script."""\n\n# %%\nprint("a number: 1.0")\n')
    monkeypatch.delenv("SPARSEGP_DOCS_FULL", raising=False)
    hooks.render_script(script, tmp_path)
    page = (tmp_path / "plot_tiny.md").read_text()
    assert "What it prints in quick mode (`SPARSEGP_QUICK=1`" in page and "a number: 1.0" in page
    assert hooks.printed_heading(False) == "What it prints:"


def test_the_family_gallery_prints_no_nan_for_the_exact_gps_bound(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "SPARSEGP_QUICK": "1", "MPLBACKEND": "Agg",
           "SPARSEGP_GALLERY_OUT": str(tmp_path)}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "gallery" / "plot_family.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    [exact] = [line.split() for line in done.stdout.splitlines() if line.startswith("exact")]
    assert exact[-1] == "—" and "nan" not in done.stdout
