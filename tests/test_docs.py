"""The documentation site's sources: every page in the navigation exists or is generated,
every gallery script has a page, and the gallery's cell parser reads percent-format scripts.
(CI builds the site itself with `mkdocs build --strict`, running the gallery.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

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


def test_every_readme_section_a_page_includes_exists():
    readme = (ROOT / "README.md").read_text()
    included = set()
    for page in (ROOT / "docs").rglob("*.md"):
        included |= set(re.findall(r'--8<-- "README.md:([\w-]+)"', page.read_text()))
    assert included
    for name in included:
        assert f"[start:{name}]" in readme and f"[end:{name}]" in readme, name


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
