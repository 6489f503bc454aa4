"""Reading one planned offset range of one partition, in a Spark task, as pyarrow
RecordBatches in the Kafka source's columns.

A confluent-kafka consumer is assigned the range's start; librdkafka filters aborted
transactional data and control records in C (read_committed). Those filtered offsets
never reach the application, so a range that ends in aborted records or a commit
marker is finished when the consumer's position reaches its end: the partition-EOF
event carries that position, and a record at or past the end proves it too. A range
is planned at or below the LSO, so its records are decided and every read of it
(a retried task, a replayed micro-batch) returns the same rows. A read that makes no
progress for ``poll_timeout_ms`` fails with an error naming the range: it never hangs.
"""

from __future__ import annotations

import bisect
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

#: records per consume() call and per RecordBatch handed to Spark
CONSUME_BATCH = 10_000


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[start, end)`` of ``topic``-``partition``: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


def consumer_config(client_config: dict[str, Any], read_committed: bool, fail_on_data_loss: bool = True,
                    ) -> dict[str, Any]:
    """A consumer that is only ever assigned: no group membership, no commits. A range
    that starts below the log start offset (retention deleted it) fails the read, or
    with ``fail_on_data_loss`` false starts at the log start (Spark's failOnDataLoss)."""
    return {
        "group.id": f"spark-exactly-source-{uuid.uuid4()}",
        # the partition-EOF event that ends a range comes with a fetch response: an
        # empty one long-polls for this long at the broker (librdkafka's default 500)
        "fetch.wait.max.ms": 10,
        **client_config,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if fail_on_data_loss else "earliest",
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
    }


def read_range(rng: OffsetRange, config: dict[str, Any], schema: pa.Schema,
               poll_timeout_ms: int) -> Iterator[pa.RecordBatch]:
    """The records of ``rng`` (committed ones only under read_committed) in offset
    order, as RecordBatches of ``schema`` (Spark's Arrow form of the source's columns)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        position = rng.start
        progress_at = time.monotonic()
        while position < rng.end:
            # consume() waits for as many messages as asked or the timeout: ask for no
            # more than the range can still hold
            messages = consumer.consume(min(CONSUME_BATCH, rng.end - position), 0.1)
            records, offsets, position = _in_range(messages, rng, position)
            if records:
                yield _record_batch(records, offsets, rng, schema)
            if messages:
                progress_at = time.monotonic()
            elif time.monotonic() - progress_at > poll_timeout_ms / 1000:
                raise TimeoutError(
                    f"Reading {rng} got nothing for {poll_timeout_ms} ms at offset {position} "
                    "(kafkaConsumer.pollTimeoutMs): is the broker up, and the range below its "
                    "last stable offset?")
    finally:
        consumer.close()


def _in_range(messages: list, rng: OffsetRange, position: int) -> tuple[list, list[int], int]:
    """The data records of ``messages`` below the range's end, their offsets, and the
    consumer's position after them (an EOF event moves it past filtered offsets)."""
    records = [m for m in messages if m.error() is None]
    if len(records) < len(messages):
        position = _position_after_events(messages, position)
    offsets = [m.offset() for m in records]
    if offsets and offsets[-1] >= rng.end:
        cut = bisect.bisect_left(offsets, rng.end)
        return records[:cut], offsets[:cut], rng.end
    if offsets:
        position = max(position, offsets[-1] + 1)
    return records, offsets, position


def _position_after_events(messages: list, position: int) -> int:
    """The position partition-EOF events in ``messages`` report; any other error raises."""
    from confluent_kafka import KafkaError, KafkaException

    for message in messages:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
            position = max(position, message.offset())
    return position


def _record_batch(records: list, offsets: list[int], rng: OffsetRange, schema: pa.Schema) -> pa.RecordBatch:
    """The Kafka source's columns of ``records``, in ``schema``'s order and types."""
    n = len(records)
    kinds, stamps = zip(*[m.timestamp() for m in records])
    columns: dict[str, pa.Array] = {
        "key": pa.array([m.key() for m in records], pa.binary()),
        "value": pa.array([m.value() for m in records], pa.binary()),
        "topic": pa.repeat(pa.scalar(rng.topic, pa.string()), n),
        "partition": pa.repeat(pa.scalar(rng.partition, pa.int32()), n),
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pc.multiply(pa.array(stamps, pa.int64()), 1000).cast(schema.field("timestamp").type),
        # librdkafka's timestamp types 0, 1, 2 are Kafka's -1 (none), 0 (create), 1 (log append)
        "timestampType": pc.subtract(pa.array(kinds, pa.int32()), pa.scalar(1, pa.int32())),
    }
    if "headers" in schema.names:
        columns["headers"] = pa.array([m.headers() for m in records], schema.field("headers").type)
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def arrow_schema(spark_schema: Any) -> pa.Schema:
    """The Arrow schema Spark checks a data source's RecordBatches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")
