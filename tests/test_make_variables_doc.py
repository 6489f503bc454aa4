"""docs/operations.md's table of ``make`` variables says what the Makefile does: every
variable it lists is one the Makefile lets a user set (``?=``), with the default it gives."""

from __future__ import annotations

import re

import pytest

from tests.docs import REPO, page

pytestmark = pytest.mark.timeout(30)

#: defaults the docs put in words, for Makefile values that are shell expressions
IN_WORDS = {"TEST_WORKERS": ("two per core", "2 * $$(nproc")}


def makefile_defaults() -> dict[str, str]:
    text = (REPO / "Makefile").read_text()
    return {name: value.strip() for name, value in re.findall(r"^([A-Z_]+)\s*\?=[ \t]*(.*)$", text, re.MULTILINE)}


def documented() -> dict[str, str]:
    rows = re.findall(r"^\| `([A-Z_]+)` \| ([^|]*) \|", page("docs/operations.md"), re.MULTILINE)
    return {name: default.strip().strip("`") for name, default in rows}


def test_every_documented_make_variable_has_the_makefiles_default():
    defaults, docs = makefile_defaults(), documented()
    assert docs and set(docs) <= set(defaults), set(docs) - set(defaults)
    for name, default in docs.items():
        words, shell = IN_WORDS.get(name, (None, None))
        if words is not None:
            assert default == words and shell in defaults[name], (name, default, defaults[name])
        else:
            assert default == defaults[name], (name, default, defaults[name])
