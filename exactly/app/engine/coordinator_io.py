"""How the coordinators reach the logs: the engine side of CoordinatorIO and GroupIO.

The coordinators (``exactly/coordinator/``) know nothing of the engine; they are handed this
adapter, which appends their records to the internal topics and writes markers
through the same partition logs and group commit as any produce, on the engine's
loop (``Partitions.write_txn_marker`` also reports a marker on ``__consumer_offsets`` to
the group coordinator once it is durable).

A group write the disk refuses (KAFKA_STORAGE_ERROR) is answered NOT_COORDINATOR, as
Kafka's ``GroupMetadataManager`` answers it for OffsetCommit, TxnOffsetCommit and
SyncGroup: clients look the coordinator up again and retry, where KAFKA_STORAGE_ERROR
would fail a Java consumer's commit for good. (The transaction coordinator answers a
refused write of its own log COORDINATOR_NOT_AVAILABLE, also retriable.)

Each write first meets the faults installed for it (``exactly/app/faults/internal_writes.py``:
a marker is a WriteTxnMarkers request, an append a Produce to the internal topic).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from exactly.app.faults import internal_writes
from exactly.app.faults.fault import WRITE_TXN_MARKERS, api_key
from exactly.coordinator import consumer_protocol, offsets_log, transaction_log
from exactly.coordinator.producer_id_manager import ProducerIdBlock
from exactly.coordinator.schema import SchemaError
from exactly.storage.errors import CoordinatorNotAvailableError, KafkaStorageError, NotCoordinatorError
from exactly.storage.record_batch import SimpleRecord, encode_batch

if TYPE_CHECKING:
    from exactly.app.engine import Engine

PRODUCE = api_key("Produce")


class EngineCoordinatorIO:
    """CoordinatorIO and GroupIO over an Engine (used only on the engine's loop)."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine

    async def append_txn_log(self, partition: int, key: bytes, value: bytes | None,
                             headers: transaction_log.Headers = ()) -> int:
        await self.engine.topics.ensure_internal_topic(transaction_log.TOPIC)
        if self.engine.faults.installed:  # the key decoded only for a fault to match
            await internal_writes.meet(self.engine.faults, PRODUCE, transaction_log.TOPIC, partition,
                                       transaction_log.decode(key, None).transactional_id)
        batch = encode_batch([SimpleRecord(value, key=key, headers=headers, timestamp=self.engine.clock.now_ms())])
        result = await self.engine.partitions.append_internal(transaction_log.TOPIC, partition, batch)
        return result.base_offset

    async def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, commit: bool) -> None:
        await internal_writes.meet(self.engine.faults, WRITE_TXN_MARKERS, topic, partition)
        await self.engine.partitions.write_txn_marker(topic, partition, producer_id, producer_epoch,
                                           coordinator_epoch, commit)

    async def write_fencing_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> int:
        return await self.engine.partitions.write_fencing_marker(topic, partition, producer_id, producer_epoch,
                                                      coordinator_epoch, commit)

    def partition_exists(self, topic: str, partition: int) -> bool:
        return self.engine.partitions.has_partition(topic, partition)

    def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           partition: int) -> None:
        """For TxnOffsetCommit: the group's ``__consumer_offsets`` partition must be in
        the producer's Ongoing transaction (AddOffsetsToTxn)."""
        self.engine.transactions.coordinator.verify_transaction(
            producer_id, producer_epoch, offsets_log.TOPIC, partition, transactional_id)

    def subscribed_topics(self, protocol_type: str | None, metadata: bytes) -> set[str] | None:
        """A consumer-protocol member's subscription (the layout every Kafka consumer
        shares, ``exactly/coordinator/consumer_protocol.py``); None for another protocol or
        metadata that does not decode."""
        if protocol_type != consumer_protocol.PROTOCOL_TYPE:
            return None
        try:
            return set(consumer_protocol.decode_subscription(metadata))
        except SchemaError:
            return None

    def topic_id(self, topic: str) -> uuid.UUID | None:
        info = self.engine.topics.topic_info(topic)
        return info.topic_id if info is not None else None

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.engine.topics.names_by_id([topic_id]).get(topic_id)

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        return self.engine.topics.partition_counts(topics)

    def topic_names(self) -> list[str]:
        return [name for name, info in self.engine.topics.items() if not info.internal]

    def offsets_partition(self, group_id: str) -> int:
        return self.engine.groups.coordinator.partition_of(group_id)

    async def persist(self, write: ProducerIdBlock) -> None:
        """Make a producer-id block durable; a full disk is COORDINATOR_NOT_AVAILABLE
        (retriable: InitProducerId is asked again), not a storage error of a partition."""
        try:
            await self.engine.jobs.persist(write)
        except KafkaStorageError as e:
            raise CoordinatorNotAvailableError(f"cannot persist the next block of producer ids: {e}") from e

    async def append_offsets_log(self, partition: int, records: list[tuple[bytes, bytes | None]],
                                 producer_id: int = -1, producer_epoch: int = -1) -> None:
        """Append group records; inside a transaction the batch is the producer's own
        (transactional, its id and epoch, its next sequence on this partition)."""
        await self.engine.topics.ensure_internal_topic(offsets_log.TOPIC)
        now = self.engine.clock.now_ms()
        simple = [SimpleRecord(value, key=key, timestamp=now) for key, value in records]
        if producer_id < 0:
            batch = encode_batch(simple)
        else:
            # checked again here, in the loop step of the append: creating the topic above
            # may have let the transaction end (a timeout abort) since the group coordinator
            # checked it, and a transactional append after its marker would stay pending
            self.engine.transactions.coordinator.verify_transaction(
                producer_id, producer_epoch, offsets_log.TOPIC, partition)
            batch = encode_batch(simple, producer_id=producer_id, producer_epoch=producer_epoch,
                                 base_sequence=self.engine.partitions.next_sequence(offsets_log.TOPIC, partition,
                                                                         producer_id, producer_epoch),
                                 transactional=True)
        try:
            await internal_writes.meet(self.engine.faults, PRODUCE, offsets_log.TOPIC, partition)
            await self.engine.partitions.append_internal(offsets_log.TOPIC, partition, batch)
        except KafkaStorageError as e:
            raise NotCoordinatorError(f"the group's log cannot be written: {e}") from e
