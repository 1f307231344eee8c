"""The documentation holds together: a short README that links every page under docs/, and
relative links (and their #anchors) in the README and the pages that lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def prose(path: Path) -> str:
    """The page without its fenced code blocks, where brackets are code, not links."""
    return FENCE.sub("", path.read_text())


def anchors(path: Path) -> set:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces
    as hyphens, a repeated heading numbered."""
    seen, found = {}, set()
    for line in prose(path).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_the_readme_is_short_and_links_every_page_under_docs():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    pages = sorted(DOCS.glob("*.md"))
    assert pages
    for page in pages:
        assert f"](docs/{page.name})" in text, page.name


def test_every_relative_link_leads_to_a_file_and_heading_that_exist():
    for page in PAGES:
        for target in LINK.findall(prose(page)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            assert linked.exists(), where
            if anchor and linked.suffix == ".md":
                assert anchor in anchors(linked), where
