"""The worked example (``examples/``) is what the docs show, and ``make test`` runs it.

``examples`` is among pytest's ``testpaths`` (pyproject.toml), so the suite collects
the example beside ``tests/`` -- on the same xdist workers, with no second pytest
process to start -- and ``python -m pytest examples/`` runs it alone, as a user would
(the fixture comes from the package's ``pytest11`` entry point, no conftest.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "test_exactly_once_app.py"

pytestmark = pytest.mark.timeout(10)


def test_docs_testing_quotes_the_example_whole() -> None:
    assert f"```python\n{EXAMPLE.read_text()}```" in (REPO / "docs" / "testing.md").read_text()


def test_the_suite_collects_the_examples() -> None:
    testpaths = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    assert "examples" in testpaths and not (REPO / "examples" / "conftest.py").exists()
