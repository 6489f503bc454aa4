"""One task's read of an offset range, without Spark: it ends at the range's end even
when aborted records or a marker fill it, never hangs, and follows failOnDataLoss when
retention deleted the range's start."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaException, Producer
from pyspark.sql.types import (
    BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType)

from exactly.app.spark.partition_reader import OffsetRange, arrow_schema, consumer_config, read_range
from exactly.storage.clock import FakeClock
from tests.kafka_support import KafkaBroker
from tests.spark.source_workload import Workload

SCHEMA = arrow_schema(StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
    StructField("partition", IntegerType()), StructField("offset", LongType()),
    StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType())]))

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as kb:
        yield kb


def offsets(rng: OffsetRange, bootstrap: str, poll_timeout_ms: int = 60_000, fail_on_data_loss: bool = True,
            ) -> list[int]:
    config = consumer_config({"bootstrap.servers": bootstrap}, True, fail_on_data_loss)
    return [o for batch in read_range(rng, config, SCHEMA, poll_timeout_ms) for o in batch["offset"].to_pylist()]


def test_a_range_that_ends_in_aborted_records_and_their_marker_ends_there(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("t", partitions=1)
    w = Workload(kafka.bootstrap, "t", partitions=1)
    w.produce_plain("plain", [0], count=3)
    w.begin("aborted", [0]).abort_transaction(30)  # offsets 3, 4 and the marker at 5
    # no record at or past the end will ever come: the position (partition EOF) ends it,
    # well before the poll timeout (the test's timeout is shorter)
    assert offsets(OffsetRange("t", 0, 0, 6), kafka.bootstrap, poll_timeout_ms=120_000) == [0, 1, 2]
    assert offsets(OffsetRange("t", 0, 3, 6), kafka.bootstrap, poll_timeout_ms=120_000) == []
    w.produce_plain("later", [0])
    assert offsets(OffsetRange("t", 0, 1, 6), kafka.bootstrap) == [1, 2]  # offset 6 is not the range's


def test_a_range_past_the_lso_fails_after_the_poll_timeout_naming_it(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("t", partitions=1)
    w = Workload(kafka.bootstrap, "t", partitions=1)
    w.produce_plain("plain", [0], count=2)
    w.open = w.begin("open", [0])
    with pytest.raises(TimeoutError, match=r"Reading t-0 \[0, 4\) got nothing for 1000 ms at offset 2"):
        offsets(OffsetRange("t", 0, 0, 4), kafka.bootstrap, poll_timeout_ms=1000)
    w.commit_open()


def test_a_range_deleted_by_retention_fails_or_is_skipped_by_fail_on_data_loss(tmp_path: Path) -> None:
    clock = FakeClock()
    with KafkaBroker(tmp_path / "data", clock=clock) as kafka:
        kafka.broker.create_topic("t", 1, {"segment.bytes": 200, "retention.ms": 1000})
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
        for i in range(10):
            producer.produce("t", value=b"v%d" % i, partition=0, timestamp=1_000)  # long past
            producer.flush(30)  # a batch, so a segment, per record
        clock.advance(10_000)
        kafka.engine.call(kafka.engine.jobs.apply_retention)
        start = kafka.engine.partitions.log("t", 0).log_start_offset
        assert 0 < start < 10
        with pytest.raises(KafkaException, match="out of range|OFFSET_OUT_OF_RANGE|reset"):
            offsets(OffsetRange("t", 0, 0, 10), kafka.bootstrap)
        assert offsets(OffsetRange("t", 0, 0, 10), kafka.bootstrap, fail_on_data_loss=False) == list(range(start, 10))
