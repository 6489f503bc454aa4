"""The type check: mypy over the package, as pyproject.toml's ``[tool.mypy]`` configures it
(strict on ``exactly/storage/`` and ``exactly/coordinator/``, untyped bodies checked
everywhere), so that a type error fails the suite and CI like any other test.

mypy keeps its cache in ``.mypy_cache/`` at the repository's root (git-ignored): a run
after a small change re-checks only what the change touches.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: a cold run (no cache) takes ~15 s of CPU; this leaves room for a loaded 2-core machine
MYPY_TIMEOUT_S = 240

pytestmark = pytest.mark.timeout(MYPY_TIMEOUT_S + 30)


def test_mypy_finds_no_type_errors() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True,
                            timeout=MYPY_TIMEOUT_S, check=False)
    assert result.returncode == 0, f"mypy failed:\n{result.stdout}{result.stderr}"
