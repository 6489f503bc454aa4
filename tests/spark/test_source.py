"""Batch reads through the ``exactly`` source over the Kafka protocol: exactly the
committed (and plain) records, in offset order per partition, planned up to the LSO,
in Spark's Kafka-source columns."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Iterator

import pytest

from tests.docs import blocks, section
from tests.kafka_support import KafkaBroker
from tests.spark.source_workload import PLAIN_TIMESTAMP_MS, Workload, Written, interleaved


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("source") / "data") as kb:
        yield kb


@pytest.fixture(scope="module")
def workload(kafka: KafkaBroker) -> Workload:
    """Read-only for the tests that share it: the open transaction stays open."""
    kafka.broker.create_topic("interleaved", partitions=3)
    return interleaved(kafka.bootstrap, "interleaved")


def read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("exactly").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def by_partition(rows: list) -> dict[int, list]:
    result: dict[int, list] = {}
    for row in rows:
        result.setdefault(row.partition, []).append(row)
    return result


def assert_rows_are(rows: list, expected: dict[int, list[Written]]) -> None:
    """``rows`` hold exactly ``expected``, each partition's in offset order."""
    got = {p: [(r.offset, r.value, r.key) for r in rs] for p, rs in by_partition(rows).items()}
    want = {p: [(w.offset, w.value, w.key) for w in ws] for p, ws in expected.items() if ws}
    assert got == want


def test_a_batch_read_returns_exactly_the_committed_records_in_offset_order(spark, workload: Workload) -> None:
    df = read(spark, workload.bootstrap, subscribe=workload.topic)
    rows = df.collect()  # Spark keeps each task's rows in order: partition by partition
    assert_rows_are(rows, workload.visible())
    assert not any(b"aborted" in r.value or b"open" in r.value for r in rows)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert dict(df.dtypes) == {"key": "binary", "value": "binary", "topic": "string", "partition": "int",
                               "offset": "bigint", "timestamp": "timestamp", "timestampType": "int"}
    plain = [r for r in rows if r.value.startswith(b"plain-a")]
    assert {r.topic for r in rows} == {workload.topic}
    assert {r.timestampType for r in rows} == {0}  # CreateTime
    expected = datetime.fromtimestamp(PLAIN_TIMESTAMP_MS / 1000, timezone.utc)
    assert {r.timestamp.astimezone(timezone.utc) for r in plain} == {expected}


def test_include_headers_adds_the_headers_column(spark, workload: Workload) -> None:
    df = read(spark, workload.bootstrap, subscribe=workload.topic, includeHeaders="true")
    assert dict(df.dtypes)["headers"] == "array<struct<key:string,value:binary>>"
    headers = {bytes(r.value): r.headers for r in df.collect()}
    assert [(h.key, h.value) for h in headers[b"committed-a-p0-0"]] == [("txn", b"committed-a")]
    assert headers[b"plain-a-p0-0"] is None  # as Spark: null when a record has none


def test_ranges_end_at_the_lso_and_a_new_read_sees_the_transaction_once_committed(
        spark, kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("commits-later", partitions=3)
    workload = interleaved(kafka.bootstrap, "commits-later")
    before = read(spark, kafka.bootstrap, subscribe="commits-later")
    assert_rows_are(before.collect(), workload.visible())
    workload.commit_open()
    after = read(spark, kafka.bootstrap, subscribe="commits-later").collect()
    assert_rows_are(after, workload.visible())
    assert len(after) > len(before.collect())  # and open-transaction records are among them
    assert any(r.value.startswith(b"open-") for r in after)


def test_assign_and_json_offsets_read_the_chosen_range(spark, workload: Workload) -> None:
    p0 = workload.visible()[0]
    start, end = p0[2].offset, p0[5].offset
    df = read(spark, workload.bootstrap, assign=json.dumps({workload.topic: [0]}),
              startingOffsets=json.dumps({workload.topic: {"0": start}}),
              endingOffsets=json.dumps({workload.topic: {"0": end}}))
    assert [(r.partition, r.offset) for r in df.collect()] == [(0, w.offset) for w in p0[2:5]]


def test_starting_timestamp_starts_each_partition_at_its_first_record_that_recent(
        spark, workload: Workload) -> None:
    """Only the plain records carry the old PLAIN_TIMESTAMP_MS; the transactions' are now."""
    recent = [w for ws in workload.records.values() for w in ws if w.timestamp_ms is None]
    first = {p: min(w.offset for w in recent if w.partition == p) for p in range(3)}
    df = read(spark, workload.bootstrap, subscribe=workload.topic, startingTimestamp=str(PLAIN_TIMESTAMP_MS + 1))
    assert_rows_are(df.collect(), {p: [w for w in ws if w.offset >= first[p]]
                                   for p, ws in workload.visible().items()})


def test_subscribe_pattern_reads_every_matching_topic(spark, kafka: KafkaBroker, workload: Workload) -> None:
    df = read(spark, kafka.bootstrap, subscribePattern="interleave.")  # a full match, as Java's
    assert_rows_are(df.collect(), workload.visible())
    assert read(spark, kafka.bootstrap, subscribePattern="interleav").count() == 0


def test_read_uncommitted_plans_to_the_high_watermark(spark, workload: Workload) -> None:
    rows = read(spark, workload.bootstrap, subscribe=workload.topic,
                **{"kafka.isolation.level": "read_uncommitted"}).collect()
    values = {r.value for r in rows}
    assert {w.value for ws in workload.records.values() for w in ws} == values  # aborted and open too


@pytest.mark.parametrize("split", [{"maxRecordsPerPartition": "3"}, {"minPartitions": "7"}])
def test_large_partitions_are_split_into_offset_ranges(spark, workload: Workload, split: dict) -> None:
    df = read(spark, workload.bootstrap, subscribe=workload.topic, **split)
    assert df.rdd.getNumPartitions() >= 7
    assert_rows_are(df.collect(), workload.visible())


@pytest.mark.parametrize("options, message", [
    ({}, "One of the following options must be specified for Kafka source: subscribe, subscribePattern, assign"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "Only one of the following options can be specified"),
    ({"subscribe": "interleaved", "startingOffsets": "latest"}, "starting offset can't be latest"),
    ({"subscribe": "interleaved", "endingOffsets": '{"interleaved":{"0":-1}}'},
     "If endingOffsets contains specific offsets, you must specify all TopicPartitions"),
    ({"assign": '{"interleaved":[9]}'}, "UNKNOWN_TOPIC_OR_PARTITION"),
    ({"subscribe": "interleaved", "startingTimestamp": "99999999999999"},
     "No offset matched the timestamp in option 'startingTimestamp'"),
    ({"assign": '{"interleaved":[0]}', "endingOffsets": '{"interleaved":{"0":100000}}'},
     "endingOffsets for interleaved-0 is 100000, past its last stable offset"),
])
def test_misused_options_fail_with_an_error_naming_them(spark, workload: Workload, options: dict,
                                                        message: str) -> None:
    with pytest.raises(Exception, match=message):
        read(spark, workload.bootstrap, **options).collect()


def test_an_empty_topic_reads_no_rows(spark, kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("empty", partitions=2)
    assert read(spark, kafka.bootstrap, subscribe="empty").collect() == []


def test_the_docs_example_reads_the_committed_records(spark, kafka: KafkaBroker) -> None:
    code = blocks(section("docs/spark.md", "Reading topics from Spark"), "python")[0]
    kafka.broker.create_topic("orders", partitions=3)
    workload = interleaved(kafka.bootstrap, "orders")
    scope: dict[str, Any] = {}  # the snippet builds its session: the process's, this test's
    exec(code.replace("127.0.0.1:9092", kafka.bootstrap), scope)
    assert scope["spark"] is spark
    assert_rows_are(scope["df"].collect(), workload.visible())
