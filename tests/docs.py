"""The documentation as tests read it: README.md and docs/*.md, a section by its heading,
the fenced blocks of a section. One place, so a page or a section that moves is one edit
here, never a slice of README.md by hand in each test."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$", re.M)
FENCE = re.compile(r"^```[^\n]*\n.*?^```", re.M | re.S)


def pages() -> list[Path]:
    """Every page of the documentation: the README, then docs/ in name order."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def page(name: str) -> str:
    """The text of one page, by its path from the repository root (``docs/spark.md``)."""
    return (REPO / name).read_text()


def all_text() -> str:
    """Every page's text, for facts that must be documented somewhere."""
    return "\n".join(p.read_text() for p in pages())


def headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, offset) of each heading outside fenced blocks."""
    fenced = [m.span() for m in FENCE.finditer(text)]
    return [(len(m.group(1)), m.group(2), m.start()) for m in HEADING.finditer(text)
            if not any(a <= m.start() < b for a, b in fenced)]


def section(name: str, title: str) -> str:
    """The section of page ``name`` under the heading ``title``, up to the next heading of
    its level or above (its subsections included)."""
    text = page(name)
    found = headings(text)
    matches = [(level, offset) for level, t, offset in found if t == title]
    assert len(matches) == 1, f"{name} has {len(matches)} sections titled {title!r}"
    level, start = matches[0]
    ends = [offset for lvl, _, offset in found if offset > start and lvl <= level]
    return text[start:ends[0] if ends else len(text)]


def blocks(text: str, language: str) -> list[str]:
    """The contents of the fenced blocks of ``text`` opened with ```` ```language ````."""
    return re.findall(rf"^```{re.escape(language)}\n(.*?)^```", text, re.M | re.S)


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings, repeated titles numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = set()
    for _, title, _ in headings(text):
        slug = anchor(title)
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out
