"""Every relative link of README.md and docs/*.md leads somewhere: the file exists, and
an anchor names a heading of the page it points into (as GitHub spells anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs import FENCE, REPO, anchors, pages

pytestmark = pytest.mark.timeout(30)

LINK = re.compile(r"\]\(([^)\s]+)\)")


def links(page: Path) -> list[str]:
    """The link targets of a page outside fenced blocks and code spans."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text()))
    return LINK.findall(text)


def broken(page: Path, target: str) -> str | None:
    """Why ``target``, linked from ``page``, leads nowhere; None when it resolves."""
    path, _, fragment = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    if not file.exists():
        return f"{target}: no such file"
    if fragment and file.suffix == ".md" and fragment not in anchors(file.read_text()):
        return f"{target}: {file.name} has no heading #{fragment}"
    return None


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_local_link_resolves(page: Path) -> None:
    local = [t for t in links(page) if not re.match(r"[a-z]+:", t)]
    problems = [why for t in local if (why := broken(page, t))]
    assert not problems, problems


def test_the_readme_links_every_page_of_the_docs() -> None:
    readme = (REPO / "README.md").read_text()
    documented = {(REPO / t).resolve() for t in LINK.findall(readme) if t.startswith("docs/")}
    assert set((REPO / "docs").glob("*.md")) <= documented
