"""Kafka's ``IsolationLevel``, declared once: its wire value (Fetch and ListOffsets
``isolation_level``: 0, 1) and its name (``read_uncommitted``, ``read_committed``: the
consumer's ``isolation.level``, the HTTP API's and Spark's option). In storage because
reading stops at the last stable offset and drops aborted records by it
(``exactly/storage/read_committed.py``); every face parses what it is given with :meth:`parse`."""

from __future__ import annotations

import enum

from exactly.storage.errors import InvalidRequestError


class IsolationLevel(enum.IntEnum):
    """What a read sees: every record up to the high watermark, or committed ones up to the LSO."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @property
    def label(self) -> str:
        """Kafka's name for it (``IsolationLevel.toString``): ``read_committed``."""
        return self.name.lower()

    @classmethod
    def parse(cls, value: "str | int | IsolationLevel") -> "IsolationLevel":
        """A wire value or a name; anything else is INVALID_REQUEST."""
        for level in cls:
            if value == level.label or (not isinstance(value, str) and value == level.value):
                return level
        raise InvalidRequestError(f"isolation_level must be read_committed or read_uncommitted, got {value!r}")


#: the names, in wire order: ``("read_uncommitted", "read_committed")``
LABELS: tuple[str, ...] = tuple(level.label for level in IsolationLevel)
