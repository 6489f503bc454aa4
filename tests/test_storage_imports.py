"""Which storage modules may import which: the log's parts (Kafka's split) point one way.

``partition_log`` (the log) uses ``log_validator``, ``log_loader``, ``segment_swap``
and ``log_cleaner``; none of them imports the log, and the cleaner sees it through
its ``CleanableLog`` Protocol only. ``storage/`` imports nothing from
``coordinator/`` or ``app/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

STORAGE = Path(__file__).resolve().parent.parent / "storage"

#: module -> storage modules it must not import
FORBIDDEN = {
    "log_cleaner": {"storage.partition_log"},
    "log_loader": {"storage.partition_log", "storage.log_cleaner"},
    "log_validator": {"storage.partition_log", "storage.log_cleaner", "storage.log_loader"},
    "segment_swap": {"storage.partition_log", "storage.log_cleaner", "storage.log_loader"},
    "aborted_transactions": {"storage.partition_log", "storage.log_cleaner", "storage.visible_records",
                             "storage.read_committed"},
}


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, TYPE_CHECKING imports included."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_the_parts_of_the_log_do_not_import_the_log(module: str) -> None:
    assert not imported_modules(STORAGE / f"{module}.py") & FORBIDDEN[module]


@pytest.mark.parametrize("path", sorted(STORAGE.glob("*.py")), ids=lambda p: p.name)
def test_storage_imports_nothing_from_coordinator_or_app(path: Path) -> None:
    assert not {m for m in imported_modules(path) if m.split(".")[0] in ("coordinator", "app")}
