"""docs/python.md's snippets run as written, one after the other in one directory as a
reader runs them -- each as a plain script file, with no ``if __name__ == "__main__":``:
raw batches, a retry answered as a duplicate, and a raw transactional batch through the
coordinator's requests (no hand-written marker: the broker takes none); then the
in-process consume-transform-produce loop, which prints what the page shows; then a
compacted topic the background cleaner compacts (its worker process never runs the
script again, as multiprocessing's ``spawn`` did, failing every round)."""

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
    """``code`` as a script file in ``cwd``, run by a fresh interpreter as ``.venv/bin/python
    script.py`` runs it; its stdout."""
    script = cwd / "snippet.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True,
                          timeout=90, env={**os.environ, "PYTHONPATH": str(REPO)})
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


def test_the_compacted_topic_example_is_compacted_by_the_background_cleaner(tmp_path: Path) -> None:
    section_ = section(PAGE, "A compacted topic")
    (code,), (expected,) = blocks(section_, "python"), blocks(section_, "text")
    assert "__main__" not in code
    assert run(code, tmp_path) == expected
