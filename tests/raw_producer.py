"""A transactional producer over one raw Kafka connection, for tests that need exact
request versions, epochs and sequences (tests/test_transactions_v2.py,
tests/test_kafka_transaction_abortable.py)."""

from __future__ import annotations

from typing import Any

from exactly.app.kafka.wire import ApiKey
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka_support import KafkaBroker, raw_connection


class RawProducer:
    """A transactional producer of one topic and group over one raw connection, at the
    versions it is given (a context manager: its connection closes at the end)."""

    def __init__(self, kafka: KafkaBroker, txn_id: str, topic: str, group: str, produce_version: int = 12,
                 end_version: int = 5) -> None:
        self.conn = raw_connection(kafka.port)
        self.txn_id, self.topic, self.group = txn_id, topic, group
        self.produce_version, self.end_version = produce_version, end_version
        answer = self.conn.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": txn_id,
                                                                "transaction_timeout": 60_000})
        assert answer.error_code == 0
        self.pid, self.epoch = answer.producer_id, answer.producer_epoch
        self.sequences: dict[tuple[str, int], int] = {}

    def batch(self, partition: int, *values: bytes, epoch: int | None = None) -> bytes:
        epoch = self.epoch if epoch is None else epoch
        seq = self.sequences.get((self.topic, partition), 0)
        self.sequences[(self.topic, partition)] = seq + len(values)
        return encode_batch([SimpleRecord(v) for v in values], producer_id=self.pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=True)

    def produce(self, partition: int, batch: bytes) -> int:
        return self.send(partition, batch).error_code

    def send(self, partition: int, batch: bytes, version: int | None = None, conn: Any = None) -> Any:
        """Produce ``batch`` (at the producer's version unless ``version``), on ``conn`` if
        given (the producer's own connection waits for an answer); the partition's answer."""
        answer = (conn or self.conn).request(ApiKey.PRODUCE, version or self.produce_version, {
            "transactional_id": self.txn_id, "acks": -1, "timeout": 10_000,
            "topic_data": [{"name": self.topic, "partition_data": [{"index": partition, "records": batch}]}]})
        return answer.responses[0].partition_responses[0]

    def send_value(self, version: int, partition: int, value: bytes = b"v", conn: Any = None) -> Any:
        """One record at the partition's next sequence, which moves on only when it is
        appended (a refused batch's retry keeps its sequence); the partition's answer."""
        seq = self.sequences.get((self.topic, partition), 0)
        batch = encode_batch([SimpleRecord(value)], producer_id=self.pid, producer_epoch=self.epoch,
                             base_sequence=seq, transactional=True)
        result = self.send(partition, batch, version, conn)
        if result.error_code == 0:
            self.sequences[(self.topic, partition)] = seq + 1
        return result

    def add_partitions(self, *partitions: int) -> None:
        answer = self.conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": self.txn_id, "v3_and_below_producer_id": self.pid,
            "v3_and_below_producer_epoch": self.epoch,
            "v3_and_below_topics": [{"name": self.topic, "partitions": list(partitions)}]})
        codes = {p.partition_index: p.partition_error_code
                 for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}
        assert set(codes.values()) == {0}, codes

    def commit_offsets(self, offset: int, version: int = 5, epoch: int | None = None) -> int:
        answer = self.conn.request(ApiKey.TXN_OFFSET_COMMIT, version, {
            "transactional_id": self.txn_id, "group_id": self.group, "producer_id": self.pid,
            "producer_epoch": self.epoch if epoch is None else epoch,
            "topics": [{"name": self.topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_metadata": ""}]}]})
        return answer.topics[0].partitions[0].error_code

    def add_offsets(self) -> None:
        answer = self.conn.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": self.txn_id, "producer_id": self.pid, "producer_epoch": self.epoch,
            "group_id": self.group})
        assert answer.error_code == 0

    def end(self, commit: bool, epoch: int | None = None) -> Any:
        answer = self.conn.request(ApiKey.END_TXN, self.end_version, {
            "transactional_id": self.txn_id, "producer_id": self.pid,
            "producer_epoch": self.epoch if epoch is None else epoch, "committed": commit})
        if answer.error_code == 0 and self.end_version >= 5:
            self.pid, self.epoch = answer.producer_id, answer.producer_epoch
            self.sequences.clear()  # a new epoch starts every partition at sequence 0
        return answer

    def close(self) -> None:
        self.conn.sock.close()

    def __enter__(self) -> "RawProducer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
