"""A transactional producer at the batch level, for tests about the broker.

A Kafka client reaches a transaction through the coordinator's requests and raw
record batches; :class:`RawTxn` does the same against a :class:`~app.Broker`:
InitProducerId gives it a real producer id and epoch, AddPartitionsToTxn comes
before its first batch to a partition in each transaction, its batches carry its
own sequences, and EndTxn ends the transaction (the coordinator writes the
markers). The broker appends a transactional batch only for such a producer
(KIP-890 verification), so this is how a broker test writes one. Tests about the
storage layer write raw producer ids and markers there instead (tests/storage_log.py).
"""

from __future__ import annotations

from typing import Any, Sequence

from exactly.app import Broker
from exactly.storage.record_batch import SimpleRecord, encode_batch

TopicPartition = tuple[str, int]


def coordinator_call(broker: Broker, request: str, *args: Any) -> Any:
    """One transaction-coordinator request, on the engine's loop (as the listener makes it)."""
    return broker.engine.call(getattr(broker.engine.transactions.coordinator, request), *args)


class RawTxn:
    """The producer of ``transactional_id``: one transaction after another."""

    def __init__(self, broker: Broker, transactional_id: str, timeout_ms: int = 60_000) -> None:
        self.broker = broker
        self.transactional_id = transactional_id
        self.pid, self.epoch = coordinator_call(broker, "init_producer_id", transactional_id, timeout_ms)
        self.sequences: dict[TopicPartition, int] = {}
        #: the partitions of the open transaction
        self.partitions: set[TopicPartition] = set()

    def add(self, *partitions: TopicPartition) -> None:
        """AddPartitionsToTxn for those not in the transaction yet."""
        new = set(partitions) - self.partitions
        if new:
            errors = coordinator_call(self.broker, "add_partitions", self.transactional_id, self.pid,
                                      self.epoch, new)
            failed = [e for e in errors.values() if e is not None]
            if failed:
                raise failed[0]
            self.partitions |= new

    def batch(self, topic: str, partition: int, records: Sequence[SimpleRecord], **encode: Any) -> bytes:
        """The next transactional batch of this producer to ``topic-partition``."""
        return encode_batch(records, producer_id=self.pid, producer_epoch=self.epoch,
                            base_sequence=self.sequences.get((topic, partition), 0), transactional=True,
                            **encode)

    def produce(self, topic: str, partition: int, records: Sequence[SimpleRecord], **encode: Any) -> int:
        """Add the partition if needed and append ``records`` as one batch; its base offset."""
        self.add((topic, partition))
        offset = self.broker.produce(topic, partition, self.batch(topic, partition, records, **encode))
        self.sequences[(topic, partition)] = self.sequences.get((topic, partition), 0) + len(records)
        return offset

    def send(self, topic: str, partition: int, *values: bytes, timestamp: int | None = None) -> int:
        """``values`` as one batch, keyed k0, k1, ... (as tests.conftest.data_batch keys them)."""
        return self.produce(topic, partition, [SimpleRecord(v, key=b"k%d" % i, timestamp=timestamp)
                                               for i, v in enumerate(values)])

    def end(self, commit: bool) -> dict[TopicPartition, int]:
        """EndTxn; returns once every marker is durable. The answer is where each
        partition's marker is: its last offset (nothing else writes in a test)."""
        coordinator_call(self.broker, "end_txn", self.transactional_id, self.pid, self.epoch, commit)
        ended, self.partitions = self.partitions, set()
        return {tp: self.broker.list_offsets(tp[0], tp[1], -1) - 1 for tp in ended}

    def commit(self) -> dict[TopicPartition, int]:
        return self.end(commit=True)

    def abort(self) -> dict[TopicPartition, int]:
        return self.end(commit=False)
