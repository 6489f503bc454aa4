"""Batch writes through the ``exactly`` sink: Spark's Kafka-sink columns, exactly
once, and a failed write or a failing task attempt leaving nothing visible and no
transaction open."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.spark.kafka_client import KafkaClient
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker, read_to_end

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **TWO_PHASE_COMMIT) as broker:
        broker.broker.create_topic("out", partitions=2)
        yield broker


def committed(served: KafkaBroker, topic: str = "out", partitions: int = 2) -> list[bytes]:
    return read_to_end({"bootstrap.servers": served.bootstrap, "group.id": "check",
                        "isolation.level": "read_committed"}, topic, partitions)


def open_transactions(served: KafkaBroker) -> list[str]:
    with KafkaClient(served.bootstrap) as client:
        return [t.transactional_id for t in client.list_transactions("exactly-spark-.*", ["Ongoing"])]


def test_a_batch_write_commits_every_row_once(spark, served) -> None:
    df = spark.range(200).selectExpr("CAST(id AS STRING) AS key", "CONCAT('v', id) AS value").repartition(3)
    df.write.mode("append").format("exactly").option("kafka.bootstrap.servers", served.bootstrap) \
        .option("topic", "out").save()
    assert sorted(committed(served)) == sorted(f"v{i}".encode() for i in range(200))
    assert open_transactions(served) == []


def test_the_kafka_sink_columns_topic_partition_key_headers(spark, served) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    served.broker.create_topic("other", partitions=1)
    rows = [("k1", b"\x00\x01", "out", 1, [("h", b"hv")]), ("k2", b"two", "other", None, [])]
    df = spark.createDataFrame(rows, "key STRING, value BINARY, topic STRING, partition INT, "
                                     "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
    df.write.mode("append").format("exactly").option("kafka.bootstrap.servers", served.bootstrap).save()
    consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "cols",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("out", 1, OFFSET_BEGINNING), TopicPartition("other", 0, OFFSET_BEGINNING)])
    seen = {}
    while len(seen) < 2:
        message = consumer.poll(10)
        assert message is not None and not message.error(), message and message.error()
        seen[message.key()] = (message.topic(), message.partition(), message.value(), message.headers())
    consumer.close()
    assert seen == {b"k1": ("out", 1, b"\x00\x01", [("h", b"hv")]), b"k2": ("other", 0, b"two", None)}


def test_a_dataframe_without_a_value_column_is_refused_clearly(spark, served) -> None:
    df = spark.range(3).selectExpr("CAST(id AS STRING) AS key")
    with pytest.raises(Exception, match="needs a value column"):
        df.write.mode("append").format("exactly").option("kafka.bootstrap.servers", served.bootstrap) \
        .option("topic", "out").save()


def failing_rows(spark, count: int, size: int, attempt: int):
    """``count`` rows of ``size``-byte values "NNNN-xxx..." in 2 tasks (ids in order).
    In task 1's attempt ``attempt`` the last value is larger than max.message.bytes:
    the sink fails there, after it has flushed the task's earlier rows."""
    from pyspark.sql.functions import udf

    last = count - 1

    def value(id_):  # no hints: Spark would try to infer a pandas UDF from them
        from pyspark import TaskContext
        context = TaskContext.get()
        if id_ == last and (context.partitionId(), context.attemptNumber()) == (1, attempt):
            return "too large " + "x" * 2_000_000
        return f"{id_:04d}-" + "x" * size
    return spark.range(0, count, 1, 2).select(udf(value, "string")("id").alias("value"))


def written_offsets(served: KafkaBroker) -> int:
    """Offsets taken in "out", committed or not (aborted data and markers included)."""
    return sum(served.broker.engine.partitions.log("out", p).high_watermark for p in (0, 1))


def test_a_failed_batch_write_leaves_nothing_visible_and_no_transaction_open(spark, served) -> None:
    with pytest.raises(Exception, match="MESSAGE_TOO_LARGE"):
        failing_rows(spark, 2000, 1000, attempt=0).write.mode("append").format("exactly") \
            .option("kafka.bootstrap.servers", served.bootstrap).option("topic", "out").save()
    assert written_offsets(served) > 0  # the failed task had written: its data was there to abort
    assert committed(served) == []
    assert open_transactions(served) == []


CHILD = """
import sys
from exactly.app.spark.session import spark_session
from tests.spark.test_sink import failing_rows
spark = spark_session("sink-retry", master="local[2,2]")
failing_rows(spark, 2000, 1000, attempt=0).write.mode("append").format("exactly") \\
    .option("kafka.bootstrap.servers", sys.argv[1]).option("topic", "out").save()
spark.stop()
"""


@pytest.mark.slow
def test_a_failing_task_attempt_retried_leaves_no_orphan_data_and_no_transaction_open(served) -> None:
    """Task retries need ``local[2,2]`` (spark.task.maxFailures is static): a driver of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, served.bootstrap], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    values = committed(served)
    assert written_offsets(served) > len(values) + 2  # the failed attempt's data was written, then aborted
    assert sorted(v[:4] for v in values) == [f"{i:04d}".encode() for i in range(2000)]
    assert open_transactions(served) == []


def test_the_docs_example_writes_a_batch_and_a_stream(spark, served, tmp_path: Path) -> None:
    """docs/spark.md's two lines, as written, on a batch and on a stream a reader has."""
    from tests.docs import blocks, section
    from tests.waiting import eventually

    (code,) = blocks(section("docs/spark.md", "Writing topics from Spark, exactly once"), "python")
    df = spark.range(20).selectExpr("CONCAT('batch-', id) AS value")
    stream = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
              .selectExpr("CONCAT('stream-', value) AS value"))
    exec(code.replace("127.0.0.1:9092", served.bootstrap).replace("/tmp/ck", str(tmp_path / "ck")),
         {"df": df, "stream": stream})
    try:
        eventually(lambda: any(v.startswith(b"stream-") for v in committed(served)), 120,
                   "the stream's first committed micro-batch", interval=0.5)
    finally:
        for query in spark.streams.active:
            query.stop()
    values = committed(served)
    assert sorted(v for v in values if v.startswith(b"batch-")) == sorted(b"batch-%d" % i for i in range(20))
    streamed = [v for v in values if v.startswith(b"stream-")]
    assert len(streamed) == len(set(streamed)), "a streamed row committed twice"
