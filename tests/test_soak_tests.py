"""bench/soak_tests.py, the flake hunt behind ``make soak-tests N=5``: a test that fails is
reported with the number of runs it failed in and its message, a passing one is not, the
exit status says whether anything failed, and the CPU hogs beside the runs are gone
when the runs are."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "soak_tests.py"


def load_script() -> Any:
    """bench/soak_tests.py as a module (bench/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("bench_soak_tests", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


SOAK = load_script()


def spinning() -> list[int]:
    """The pids of the Python CPU hogs (``python -c <SPIN>``) running now."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:  # gone meanwhile
                continue
            if args[1:3] == [b"-c", SOAK.SPIN.encode()]:
                found.append(int(entry.name))
    return found


def test_a_failing_test_is_reported_with_its_count_and_a_passing_one_is_not(tmp_path: Path) -> None:
    module = tmp_path / "test_sample.py"
    module.write_text('def test_fine():\n    pass\n\n\ndef test_broken():\n    assert 1 == 2, "one | two"\n')
    run = subprocess.run([sys.executable, str(SCRIPT), "--runs", "2", "--load", "none", "--", str(module)],
                         cwd=REPO, capture_output=True, text=True, timeout=100)
    assert run.returncode == 1, run.stdout + run.stderr
    summary = run.stdout[run.stdout.index("### Soak"):]
    assert "| 1 | 1 | 2 | 1 |" in summary and "| 2 | 1 | 2 | 1 |" in summary  # each run: 2 tests, 1 failed
    failed = summary[summary.index("| test |"):].splitlines()[2:]
    assert failed == ["| `test_sample.py::test_broken` | 2/2 | AssertionError: one / two |"], summary


def test_the_python_hogs_load_every_core_and_go_with_the_block() -> None:
    with SOAK.cpu_load("python") as what:
        assert what == f"{os.cpu_count()} spinning Python processes"
        # a hog is known by its command line once it has exec'd: under load that can lag its start
        eventually(lambda: len(spinning()) >= (os.cpu_count() or 1), 10, "a hog per core")
    eventually(lambda: not spinning(), 10, "the hogs to be gone")
