"""The engine: the one owner of broker state (partitions, producer state, both
coordinators) on one asyncio loop, the services Kafka's request handlers call
(partitions, topics, transactions, groups, access, jobs), the loop bridge other threads
hand them work through, its lifecycle (scheduled jobs and the SQLite mirror, the same
embedded or served), group commit and the maintenance threads, the adapters the
coordinators and the mirror use, and the read models the faces show."""

from exactly.app.engine.engine import Engine
from exactly.app.engine.partitions import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    OffsetAndTimestamp,
    isolation_is_committed,
)
from exactly.coordinator.internal_topics import INTERNAL_TOPICS

__all__ = ["EARLIEST_TIMESTAMP", "INTERNAL_TOPICS", "LATEST_TIMESTAMP", "READ_COMMITTED",
           "READ_UNCOMMITTED", "Engine", "OffsetAndTimestamp", "isolation_is_committed"]
