"""The README's "Using it from Python" example runs as written: raw batches, a retry
answered as a duplicate, and a raw transactional batch through the coordinator's
requests (no hand-written marker: the broker takes none)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
pytestmark = pytest.mark.timeout(120)


def example() -> str:
    text = README.read_text()
    start = text.index("## Using it from Python")
    section = text[start:text.index("\n## ", start + 1)]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_python_example_runs_as_written(tmp_path: Path) -> None:
    code = example()
    assert "write_txn_marker" not in code
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=100, env={**os.environ, "PYTHONPATH": str(README.parent)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "data").is_dir()
