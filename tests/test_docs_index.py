"""The docs can be found (issue 45): docs/README.md lists every page, every relative link of the
README and the docs resolves, the README points to the architecture in the repository, and an
image sits beside the pages that show it (a user page's in docs/, a research log's in docs/notes/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(page.read_text()) if "://" not in m.group(1)]


def test_the_index_lists_every_page():
    listed = {(DOCS / t).resolve() for t in _links(DOCS / "README.md")}
    pages = {p.resolve() for p in DOCS.rglob("*.md") if p.name != "README.md"}
    assert not sorted(str(p.relative_to(DOCS)) for p in pages - listed)


def test_every_relative_link_resolves():
    broken = [f"{page.relative_to(ROOT)} -> {t}" for page in [ROOT / "README.md", *DOCS.rglob("*.md")]
              for t in _links(page) if not (page.parent / t).exists()]
    assert not broken, broken


def test_the_readme_points_to_the_architecture_in_the_repository():
    text = (ROOT / "README.md").read_text()
    assert "docs/architecture.md" in _links(ROOT / "README.md") and "shared folder" not in text.split(
        "## ")[0]


def test_each_image_sits_beside_a_page_that_shows_it():
    for image in DOCS.rglob("*.png"):
        shown_by = [p for p in image.parent.glob("*.md") if image.name in p.read_text()]
        assert shown_by, f"{image.relative_to(ROOT)}: no page in its folder shows it"
