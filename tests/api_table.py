"""docs/kafka-clients.md's table of Kafka APIs, read and regenerated.

Each row is ``| Name (key) | versions | Kafka 4.4 | why lower | notes |``: the versions
Exactly serves are the handlers' ``@serves`` declarations (``exactly/app/kafka/api.py``),
written here and never by hand -- after changing a handler's versions, run::

    .venv/bin/python -m tests.api_table

which rewrites that column and nothing else. Kafka 4.4's column is its ApiVersions
answer (``tests/kafka/test_api_versions.py`` asks the real Kafka); "why lower" is written
by hand, and tests/test_kafka_readme.py requires it exactly where Exactly serves less
than Kafka's newest version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from exactly.app.kafka import APIS

DOC = Path(__file__).resolve().parent.parent / "docs" / "kafka-clients.md"
#: an API Kafka serves and Exactly does not
NOT_SERVED = "—"
ROW = re.compile(r"^\| (\w+) \((\d+)\) \| ([^|]*?) \| ([^|]*?) \| ([^|]*?) \| (.*) \|$", re.M)


@dataclass(frozen=True)
class Row:
    name: str
    key: int
    versions: str
    kafka: str
    why_lower: str


def versions(low: int, high: int) -> str:
    """A version range as the table writes it: ``3-9``, or ``0`` for one version."""
    return str(low) if low == high else f"{low}-{high}"


def newest(cell: str) -> int:
    """The highest version of a cell (-1: not served)."""
    return -1 if cell == NOT_SERVED else int(cell.rsplit("-", 1)[-1])


def served(key: int) -> str:
    """The versions the handler of API ``key`` declares."""
    api = APIS.get(key)
    return versions(api.min_version, api.max_version) if api else NOT_SERVED


def rows(text: str) -> list[Row]:
    return [Row(m[1], int(m[2]), m[3], m[4], m[5].strip()) for m in ROW.finditer(text)]


def regenerated(text: str) -> str:
    """``text`` with each row's versions column as the handlers declare it."""
    return ROW.sub(lambda m: f"| {m[1]} ({m[2]}) | {served(int(m[2]))} | {m[4]} | {m[5]} | {m[6]} |", text)


if __name__ == "__main__":
    DOC.write_text(regenerated(DOC.read_text()))
