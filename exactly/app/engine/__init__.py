"""The engine: the one owner of broker state (partitions, producer state, both
coordinators) on one asyncio loop, its lifecycle (scheduled jobs and the SQLite
mirror, the same embedded or served), group commit and the maintenance threads, the
adapters the coordinators and the mirror use, and the read models the faces show."""

from exactly.app.engine.engine import (
    EARLIEST_TIMESTAMP,
    INTERNAL_TOPICS,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Engine,
    OffsetAndTimestamp,
    isolation_is_committed,
)

__all__ = ["EARLIEST_TIMESTAMP", "INTERNAL_TOPICS", "LATEST_TIMESTAMP", "READ_COMMITTED",
           "READ_UNCOMMITTED", "Engine", "OffsetAndTimestamp", "isolation_is_committed"]
