"""The commands of the docs run from a shell where nothing is activated: each names the
project's environment (``.venv/bin/python``, ``.venv/bin/exactly``, ...), never a bare
``python`` or ``exactly`` that only an activated virtualenv would find."""

from __future__ import annotations

import re

import pytest

from tests.docs import FENCE, REPO, page, pages

pytestmark = pytest.mark.timeout(30)

#: every page of the documentation
PAGES = [str(p.relative_to(REPO)) for p in pages()]
#: what a virtualenv puts on PATH when activated
ENVIRONMENT_COMMANDS = {"python", "python3", "pip", "pip3", "exactly", "pytest", "pyspark", "spark-submit"}
COMMAND_START = re.compile(r"(?:^|[|;&]|\$\()\s*(?:[A-Z_]+=\S*\s+)*([\w./$-]+)")


def shell_lines(text: str) -> list[str]:
    """The command lines of a page's shell blocks (```sh, or unlabelled), comments and
    continuation lines left out."""
    lines = []
    for block in FENCE.finditer(text):
        opening, *body = block.group(0).splitlines()[:-1]
        if opening.strip("`") not in ("sh", "bash", ""):
            continue
        continued = False
        for line in body:
            if not continued and line.strip() and not line.lstrip().startswith("#"):
                lines.append(line.split(" #", 1)[0])
            continued = line.rstrip().endswith("\\")
    return lines


@pytest.mark.parametrize("name", PAGES)
def test_every_command_names_the_environment(name: str) -> None:
    bare = [line for line in shell_lines(page(name))
            if any(word in ENVIRONMENT_COMMANDS for word in COMMAND_START.findall(line))]
    assert not bare, f"{name}: run these from .venv/bin/: {bare}"


def test_the_pages_exist() -> None:
    assert all((REPO / name).exists() for name in PAGES)
