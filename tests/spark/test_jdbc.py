"""exactly/app/spark/jdbc.py: Spark's view of each mirror table, read over JDBC while a served
broker runs, equals SQLAlchemy's row for row, with 64-bit values intact.

The producer-id block starts above 2**32 (the file is written before the broker opens
it), so every producer id of the workload is a value a 32-bit read would wrap."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import select

from exactly.app.engine.scheduler import mirror_round
from exactly.app.spark import jdbc
from exactly.coordinator.mirror_db import reader_engine
from exactly.coordinator.producer_id_manager import BODY, VERSION
from exactly.storage.checked_file import write_fields
from exactly.storage.filenames import PRODUCER_ID_BLOCK
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(180)

FIRST_PRODUCER_ID = 2**33 + 7
#: rounds are driven by hand in the row-for-row test, so nothing writes between reads
NO_ROUNDS = {"exactly.mirror.interval.ms": 3_600_000}


def start_broker(data: Path, **config: Any) -> KafkaBroker:
    """A served broker whose first producer id is FIRST_PRODUCER_ID."""
    data.mkdir(parents=True)
    write_fields(data / PRODUCER_ID_BLOCK, VERSION, BODY, FIRST_PRODUCER_ID)
    return KafkaBroker(data, **{**TWO_PHASE_COMMIT, **config})


def client_config(kafka: KafkaBroker, **extra: object) -> dict:
    return {"bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4", **extra}


def create_topic(kafka: KafkaBroker, topic: str, partitions: int) -> None:
    admin = AdminClient(client_config(kafka))
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def transactional_producer(kafka: KafkaBroker, transactional_id: str) -> Producer:
    producer = Producer(client_config(kafka, **{"transactional.id": transactional_id}))
    producer.init_transactions(30)
    return producer


def workload(kafka: KafkaBroker) -> Producer:
    """Two committed transactions and an aborted one of ``tx-a``, a committed group offset
    of ``g-plain``, and ``tx-b``'s transaction left open (records and a pending offset of
    ``g-txn``); returns tx-b's producer (the caller ends it)."""
    create_topic(kafka, "orders", 2)
    a = transactional_producer(kafka, "tx-a")
    for outcome in ("commit", "abort", "commit"):
        a.begin_transaction()
        for i in range(4):
            a.produce("orders", b"v%d" % i, partition=i % 2)
        a.flush(30)
        a.commit_transaction(30) if outcome == "commit" else a.abort_transaction(30)
    consumer = Consumer(client_config(kafka, **{"group.id": "g-plain", "enable.auto.commit": False}))
    consumer.commit(offsets=[TopicPartition("orders", 0, 3)], asynchronous=False)
    consumer.close()
    b = transactional_producer(kafka, "tx-b")
    b.begin_transaction()
    b.produce("orders", b"open", partition=1)
    group = Consumer(client_config(kafka, **{"group.id": "g-txn"}))
    b.send_offsets_to_transaction([TopicPartition("orders", 1, 5)], group.consumer_group_metadata(), 30)
    group.close()
    b.flush(30)
    return b


@pytest.fixture
def served(tmp_path: Path) -> Iterator[KafkaBroker]:
    with start_broker(tmp_path / "data", **NO_ROUNDS) as kafka:
        yield kafka


def sqlalchemy_rows(data: Path, spec: jdbc.MirrorTable) -> list[dict]:
    engine = reader_engine(data / "exactly.db")
    try:
        with engine.connect() as db:
            return [dict(row) for row in db.execute(select(spec.table)).mappings()]
    finally:
        engine.dispose()


def spark_view(row: dict, spec: jdbc.MirrorTable) -> dict:
    """What the typed DataFrame should hold for the SQLAlchemy ``row``."""
    view = {}
    for column in spec.table.columns:
        value = row[column.key]
        view[column.name] = json.loads(value) if column.name in spec.partition_lists else value
        if column.name in spec.times:
            view[column.name.removesuffix("_ms")] = None if value < 0 else (
                datetime.fromtimestamp(value // 1000) + timedelta(milliseconds=value % 1000))
    return view


def key(row: dict, spec: jdbc.MirrorTable) -> tuple:
    return tuple(row[column.name] for column in spec.table.primary_key)


def test_each_mirror_table_reads_the_same_rows_as_sqlalchemy_with_64_bit_values_intact(spark, served) -> None:
    open_txn = workload(served)
    try:
        mirror_round(served.broker.mirror)
        data = served.broker.data_dir
        for name, spec in jdbc.TABLES.items():
            expected = sorted((spark_view(row, spec) for row in sqlalchemy_rows(data, spec)),
                              key=lambda row: key(row, spec))
            frame = jdbc.read_table(spark, data, name)
            got = sorted((row.asDict() for row in frame.collect()), key=lambda row: key(row, spec))
            assert got == expected, name
            assert expected or name == "groups", f"the workload left {name} empty"
        finished = jdbc.finished_transactions(spark, data).collect()
        assert sorted(row.outcome for row in finished) == ["ABORT", "COMMIT", "COMMIT"]
        assert {row.producer_id for row in finished} == {FIRST_PRODUCER_ID}
        current = {row.transactional_id: row for row in jdbc.current_transactions(spark, data).collect()}
        assert current["tx-b"].state == "Ongoing"
        assert "orders-1" in current["tx-b"].partitions  # with its group's __consumer_offsets partition
        assert current["tx-b"].producer_id == FIRST_PRODUCER_ID + 1
        offsets = {(row.group_id, row.status): row for row in jdbc.group_offsets(spark, data).collect()}
        assert offsets["g-plain", "committed"].offset == 3
        assert offsets["g-txn", "pending"].producer_id == FIRST_PRODUCER_ID + 1
        assert {row.producer_id for row in jdbc.producers(spark, data).collect()} == {
            FIRST_PRODUCER_ID, FIRST_PRODUCER_ID + 1}
        orders = {row.partition: (row.last_stable_offset, row.high_watermark)
                  for row in jdbc.partitions(spark, data).collect() if row.topic == "orders"}
        assert orders == {0: (9, 9), 1: (9, 10)}  # tx-b's open transaction holds partition 1's LSO
    finally:
        open_txn.abort_transaction(30)


def test_ids_offsets_and_times_are_bigint_and_times_are_timestamps(spark, served) -> None:
    workload(served).abort_transaction(30)
    mirror_round(served.broker.mirror)
    types = dict(jdbc.finished_transactions(spark, served.broker.data_dir).dtypes)
    assert {types[c] for c in ("id", "producer_id", "producer_epoch", "start_ms", "end_ms", "log_offset")} == {"bigint"}
    assert types["start"] == types["end"] == "timestamp"
    assert types["partitions"] == "array<string>"
    assert types["log_partition"] == "int"
    offsets = dict(jdbc.group_offsets(spark, served.broker.data_dir).dtypes)
    assert offsets["offset"] == offsets["producer_id"] == "bigint"
    assert offsets["commit_timestamp"] == "timestamp"
    # one JDBC partition: one SQLite read transaction, one snapshot
    assert jdbc.finished_transactions(spark, served.broker.data_dir).rdd.getNumPartitions() == 1


def test_reads_are_consistent_snapshots_while_the_broker_commits_transactions(spark, tmp_path: Path) -> None:
    """A producer commits transactions as fast as it can while the mirror runs a round
    every 20 ms and Spark reads the finished transactions again and again: each read
    is one snapshot (ids 1..n, none missing), never shrinks, and the last one, after
    the producer stops, holds every transaction."""
    with start_broker(tmp_path / "data", **{"exactly.mirror.interval.ms": 20}) as kafka:
        create_topic(kafka, "t", 1)
        producer = transactional_producer(kafka, "busy")
        stop, done = threading.Event(), []

        def produce() -> None:
            while not stop.is_set():
                producer.begin_transaction()
                producer.produce("t", b"x")
                producer.commit_transaction(30)
                done.append(1)

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            seen = []
            for _ in range(6):
                ids = [row.id for row in jdbc.finished_transactions(spark, kafka.broker.data_dir).collect()]
                assert sorted(ids) == list(range(1, len(ids) + 1))
                seen.append(len(ids))
        finally:
            stop.set()
            thread.join(60)
        assert seen == sorted(seen) and seen[-1] > seen[0] > 0
        eventually(lambda: jdbc.finished_transactions(spark, kafka.broker.data_dir).count() == len(done),
                   timeout=30, what="the mirror to hold every transaction")


def test_a_missing_mirror_is_a_clear_error_and_no_database_is_created(spark, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no SQLite mirror at .*exactly.db"):
        jdbc.finished_transactions(spark, tmp_path)
    with pytest.raises(FileNotFoundError, match="no SQLite mirror"):
        jdbc.read_table(spark, tmp_path / "nope.db", "partitions")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="no mirror table 'transactional_ids': one of current_transactions, "):
        jdbc.read_table(spark, tmp_path, "transactional_ids")


def test_the_mirror_file_itself_and_a_stopped_broker_read_the_same(spark, tmp_path: Path) -> None:
    with start_broker(tmp_path / "data") as kafka:
        workload(kafka).commit_transaction(30)
    by_dir = jdbc.finished_transactions(spark, tmp_path / "data").collect()
    by_file = jdbc.finished_transactions(spark, tmp_path / "data" / "exactly.db").collect()
    assert by_dir == by_file and len(by_dir) == 4


def test_the_connection_is_read_only(spark, tmp_path: Path) -> None:
    with start_broker(tmp_path / "data"):
        pass
    before = (tmp_path / "data" / "exactly.db").read_bytes()
    rows = spark.createDataFrame([("t", 0, 5)], "topic STRING, partition INT, next_offset BIGINT")
    with pytest.raises(Exception, match="SQLITE_READONLY"):
        rows.write.mode("append").jdbc(jdbc.jdbc_url(tmp_path / "data"), "mirror_progress",
                                       properties={"driver": jdbc.JDBC_DRIVER})
    assert (tmp_path / "data" / "exactly.db").read_bytes() == before
