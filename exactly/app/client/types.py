"""Values the embedded producer and consumer hand to applications (Kafka's names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from exactly.storage.errors import KafkaError


class IllegalStateError(Exception):
    """An API call out of order (Kafka's IllegalStateException), e.g. send before begin."""


class RecordMetadata(NamedTuple):
    """Where a sent record went."""

    topic: str
    partition: int
    offset: int
    timestamp: int = -1


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True)
class ConsumerGroupMetadata:
    """What a producer needs to commit a consumer's offsets in its transaction so
    that a zombie from an older generation is fenced (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class TransactionAbortedError(KafkaError):
    """A record that was waiting to be sent when its transaction was aborted (Kafka's
    TransactionAbortedException: a client-side outcome with no error code)."""
