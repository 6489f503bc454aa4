"""Streaming reads through the ``exactly`` source: micro-batches that never pass the
LSO, pick up a transaction's records once it commits, read the same records when
replayed, continue from a checkpoint, respect maxOffsetsPerTrigger and stop under
availableNow."""

from __future__ import annotations

import json
import pickle
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from pyspark.sql.streaming.datasource import ReadAllAvailable

from exactly.app.spark.datasource import KAFKA_SOURCE_SCHEMA_NO_HEADERS
from exactly.app.spark.source import TopicStreamReader
from tests.kafka_support import KafkaBroker
from tests.waiting import eventually
from tests.spark.source_workload import Workload, Written, interleaved

#: seconds a query may take to reach what a test waits for
DEADLINE = 90


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as kb:
        yield kb


class Collected:
    """A foreachBatch function that keeps every micro-batch's rows in the test process."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list]] = []
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.collect()
        with self._lock:
            self.batches.append((batch_id, rows))

    def rows(self) -> list:
        with self._lock:
            return [row for _, rows in self.batches for row in rows]

    def by_partition(self) -> dict[int, list[tuple[int, bytes]]]:
        result: dict[int, list[tuple[int, bytes]]] = {}
        for row in self.rows():
            result.setdefault(row.partition, []).append((row.offset, row.value))
        return result


def expected(visible: dict[int, list[Written]]) -> dict[int, list[tuple[int, bytes]]]:
    return {p: [(w.offset, w.value) for w in ws] for p, ws in visible.items() if ws}


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.readStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def run_available_now(df: Any, checkpoint: Path) -> Collected:
    """One availableNow run of ``df`` into a Collected; it must stop by itself."""
    collected = Collected()
    query = (df.writeStream.foreachBatch(collected).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(DEADLINE), "an availableNow query did not stop"
    finally:
        query.stop()
    assert query.exception() is None
    return collected


def last_stable_offsets(bootstrap: str, topic: str, partitions: int) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                                 isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30)
    return {str(tp.partition): f.result().offset for tp, f in futures.items()}


def end_offsets(query: Any, topic: str) -> list[dict[str, int]]:
    """The stream's position in ``topic`` after each reported trigger."""
    return [json.loads(progress["sources"][0]["endOffset"])[topic] for progress in query.recentProgress
            if progress["sources"] and progress["sources"][0]["endOffset"]]


def test_a_stream_stops_at_the_lso_and_reads_the_rest_once_the_transaction_commits(
        spark, kafka: KafkaBroker, tmp_path: Path) -> None:
    kafka.broker.create_topic("live", partitions=3)
    workload = interleaved(kafka.bootstrap, "live")
    collected = Collected()
    query = (stream(spark, kafka.bootstrap, subscribe="live", startingOffsets="earliest")
             .writeStream.foreachBatch(collected).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="300 milliseconds").start())
    try:
        want = expected(workload.visible())
        eventually(lambda: collected.by_partition() == want, DEADLINE, "the committed records")
        lso = last_stable_offsets(kafka.bootstrap, "live", 3)
        eventually(lambda: end_offsets(query, "live")[-1:] == [lso], DEADLINE, "the stream's position at the LSO")
        assert all(end[p] <= lso[p] for end in end_offsets(query, "live") for p in end)

        workload.produce_plain("plain-e", [1, 2])  # behind the open transaction: not yet readable
        workload.commit_open()
        want = expected(workload.visible())
        eventually(lambda: collected.by_partition() == want, DEADLINE, "the records after the commit")
    finally:
        query.stop()
    assert query.exception() is None
    assert collected.by_partition() == want  # nothing twice, each partition in offset order


def read_between(reader: TopicStreamReader, start: dict, end: dict) -> dict[int, list[tuple[int, bytes]]]:
    """What Spark's tasks read for the micro-batch ``start`` to ``end``: each planned
    partition pickled to a "task" and read there."""
    result: dict[int, list[tuple[int, bytes]]] = {}
    for partition in reader.partitions(start, end):
        task_reader, task_partition = pickle.loads(pickle.dumps((reader, partition)))
        for batch in task_reader.read(task_partition):
            for row in batch.to_pylist():
                result.setdefault(row["partition"], []).append((row["offset"], row["value"]))
    return result


def test_a_replayed_micro_batch_reads_the_same_records_after_the_transaction_ends(
        spark, kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("replay", partitions=3)
    workload = interleaved(kafka.bootstrap, "replay")
    schema = spark.createDataFrame([], KAFKA_SOURCE_SCHEMA_NO_HEADERS).schema
    reader = TopicStreamReader({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": "replay",
                                "startingOffsets": "earliest"}, schema)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        first = read_between(reader, start, end)
        assert first == expected(workload.visible())
        workload.commit_open()
        workload.produce_plain("plain-e", [0, 1, 2])
        assert read_between(reader, start, end) == first
        assert reader.latestOffset(end, ReadAllAvailable()) != end  # the rest is for the next batch
    finally:
        reader.stop()


def test_a_restart_from_the_checkpoint_continues_where_the_last_run_stopped(
        spark, kafka: KafkaBroker, tmp_path: Path) -> None:
    kafka.broker.create_topic("restart", partitions=3)
    workload = interleaved(kafka.bootstrap, "restart")
    first = run_available_now(stream(spark, kafka.bootstrap, subscribe="restart", startingOffsets="earliest"),
                              tmp_path / "ck")
    assert first.by_partition() == expected(workload.visible())  # availableNow stopped at the LSO

    before = workload.visible()
    workload.commit_open()
    workload.produce_plain("plain-e", [0, 2])
    second = run_available_now(stream(spark, kafka.bootstrap, subscribe="restart"), tmp_path / "ck")
    new = {p: [w for w in ws if w not in before[p]] for p, ws in workload.visible().items()}
    assert second.by_partition() == expected(new)


def test_max_offsets_per_trigger_bounds_each_micro_batch(spark, kafka: KafkaBroker, tmp_path: Path) -> None:
    kafka.broker.create_topic("limited", partitions=2)
    workload = Workload(kafka.bootstrap, "limited", partitions=2)
    workload.produce_plain("plain", [0, 1], count=12)
    collected = run_available_now(
        stream(spark, kafka.bootstrap, subscribe="limited", startingOffsets="earliest", maxOffsetsPerTrigger="5"),
        tmp_path / "ck")
    sizes = [len(rows) for _, rows in collected.batches if rows]
    assert max(sizes) <= 5 and len(sizes) >= 24 / 5
    assert collected.by_partition() == expected(workload.visible())


def test_a_pattern_subscription_picks_up_a_new_topic_from_its_earliest_offset(
        spark, kafka: KafkaBroker, tmp_path: Path) -> None:
    kafka.broker.create_topic("grow-1", partitions=1)
    first = Workload(kafka.bootstrap, "grow-1", partitions=1)
    first.produce_plain("first", [0], count=2)
    collected = Collected()
    query = (stream(spark, kafka.bootstrap, subscribePattern="grow-.*").writeStream.foreachBatch(collected)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="300 milliseconds")
             .start())
    try:
        eventually(lambda: query.lastProgress, DEADLINE, "a first micro-batch")
        first.produce_plain("later", [0])
        kafka.broker.create_topic("grow-2", partitions=1)
        second = Workload(kafka.bootstrap, "grow-2", partitions=1)
        second.produce_plain("new-topic", [0], count=3)
        want = {b"later-p0-0", b"new-topic-p0-0", b"new-topic-p0-1", b"new-topic-p0-2"}
        eventually(lambda: {r.value for r in collected.rows()} == want, DEADLINE, "the new topic's records")
    finally:
        query.stop()
    # startingOffsets defaults to latest for a stream: grow-1's first records are not read


def test_a_stream_refuses_batch_only_options(spark, kafka: KafkaBroker, tmp_path: Path) -> None:
    df = stream(spark, kafka.bootstrap, subscribe="t", endingOffsets="latest")
    with pytest.raises(Exception, match="Option 'endingOffsets' is not valid in streaming queries"):
        run_available_now(df, tmp_path / "ck")
