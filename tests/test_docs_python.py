"""docs/python.md's snippets run as written, one after the other in one directory as a
reader runs them: raw batches, a retry answered as a duplicate, and a raw transactional
batch through the coordinator's requests (no hand-written marker: the broker takes none);
then the in-process consume-transform-produce loop, which prints what the page shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import REPO, blocks, section

PAGE = "docs/python.md"
pytestmark = pytest.mark.timeout(120)


def run(code: str, cwd: Path) -> str:
    """``code`` in a fresh interpreter in ``cwd``, as ``.venv/bin/python`` runs it; its stdout."""
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=50, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_python_examples_run_as_written(tmp_path: Path) -> None:
    (raw,) = blocks(section(PAGE, "Using it from Python"), "python")
    assert "write_txn_marker" not in raw
    run(raw, tmp_path)
    assert (tmp_path / "scratch").is_dir()
    loop = section(PAGE, "Transactions: exactly once, in-process")
    (code,), (expected,) = blocks(loop, "python"), blocks(loop, "text")
    assert run(code, tmp_path) == expected
