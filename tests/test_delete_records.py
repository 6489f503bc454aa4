"""DeleteRecords (API 21): the log start offset moves, as Kafka's
``UnifiedLog.maybeIncrementLogStartOffset`` moves it -- never past the high
watermark, -1 meaning the high watermark, reads below it OFFSET_OUT_OF_RANGE, the
segments wholly below it deleted by the next retention pass, the move kept across a
restart, the LSO never below it, producer state kept (KIP-360) -- through the
engine, then through confluent-kafka's ``AdminClient.delete_records``, an
idempotent and a transactional producer, and kcat."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from confluent_kafka import OFFSET_END, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from exactly.app import Broker
from exactly.app.engine.partitions import LogDeleteRecordsResult
from exactly.storage import filenames
from exactly.storage.checkpoint import read_checkpoint
from exactly.storage.clock import FakeClock
from exactly.storage.errors import (
    InvalidTopicError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnknownTopicOrPartitionError,
)
from exactly.storage.background import run_inline
from exactly.storage.isolation_level import IsolationLevel
from exactly.storage.partition_log import HIGH_WATERMARK, PartitionLog
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS, data_batch, producer_id
from exactly.app.kafka.api import ApiKey
from tests.kafka_support import KafkaBroker, raw_connection, read_to_end
from tests.raw_txn import RawTxn
from tests.storage_log import DurableLogs

pytestmark = pytest.mark.timeout(120)
EARLIEST = -2
COMMITTED = IsolationLevel.READ_COMMITTED.label


def delete(broker: Broker, topic: str, partition: int, offset: int) -> LogDeleteRecordsResult:
    return broker.engine.call(broker.engine.partitions.delete_records, {(topic, partition): offset})[topic, partition]


def low_watermark(broker: Broker, topic: str, partition: int, offset: int) -> int:
    """The new log start offset; raises the error that refused the move."""
    result = delete(broker, topic, partition, offset)
    if result.error is not None:
        raise result.error
    return result.low_watermark


def fill(broker: Broker, topic: str, count: int, partition: int = 0) -> None:
    for i in range(count):
        broker.produce(topic, partition, data_batch([b"v%d" % i]))


def start_of(broker: Broker, topic: str, partition: int = 0) -> int:
    return broker.engine.call(broker.engine.partitions.partition_offsets, topic, partition).log_start_offset


# -- the engine ----------------------------------------------------------------------------


def test_the_log_start_moves_and_reads_below_it_are_out_of_range(broker: Broker) -> None:
    broker.create_topic("t", 1)
    fill(broker, "t", 5)
    assert low_watermark(broker, "t", 0, 3) == 3
    with pytest.raises(OffsetOutOfRangeError):
        broker.fetch("t", 0, 2)
    assert broker.fetch("t", 0, 3).records, "the records from the log start on are still read"
    assert broker.list_offsets("t", 0, EARLIEST) == 3
    assert low_watermark(broker, "t", 0, 1) == 3, "an offset below the log start moves nothing"
    assert low_watermark(broker, "t", 0, -1) == 5, "-1 is the high watermark"
    assert broker.fetch("t", 0, 5).records == b"", "the log end is still a fetch position"


@pytest.mark.parametrize("offset", [6, -2])
def test_past_the_high_watermark_or_below_minus_one_is_offset_out_of_range(broker: Broker, offset: int) -> None:
    broker.create_topic("t", 1)
    fill(broker, "t", 5)
    assert isinstance(delete(broker, "t", 0, offset).error, OffsetOutOfRangeError)
    assert start_of(broker, "t") == 0


def test_refusals_are_kafkas(broker: Broker) -> None:
    broker.create_topic("t", 1)
    broker.create_topic("kept", 1, {"cleanup.policy": "compact"})
    broker.create_topic("both", 1, {"cleanup.policy": "compact,delete"})
    broker.engine.call(broker.engine.topics.ensure_internal_topic, "__consumer_offsets")
    fill(broker, "both", 2)
    results = broker.engine.call(broker.engine.partitions.delete_records, {
        ("t", 1): 0, ("nope", 0): 0, ("kept", 0): 0, ("__consumer_offsets", 0): 0, ("both", 0): -1})
    errors = {key: type(result.error) for key, result in results.items()}
    assert errors == {("t", 1): UnknownTopicOrPartitionError, ("nope", 0): UnknownTopicOrPartitionError,
                      ("kept", 0): PolicyViolationError, ("__consumer_offsets", 0): InvalidTopicError,
                      ("both", 0): type(None)}
    assert results["both", 0].low_watermark == 2


def test_the_new_log_start_survives_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    config = {**SMALL_INTERNAL_TOPICS, **FROZEN}
    with Broker(tmp_path / "d", clock=clock, **config) as broker:
        broker.create_topic("t", 1)
        fill(broker, "t", 4)
        assert low_watermark(broker, "t", 0, 3) == 3
        checkpoint = read_checkpoint(tmp_path / "d" / filenames.LOG_START_OFFSET_CHECKPOINT)
        assert checkpoint[("t", 0)] == 3, "written before DeleteRecords answers"
    with Broker(tmp_path / "d", clock=clock, **config) as broker:
        assert start_of(broker, "t") == 3
        with pytest.raises(OffsetOutOfRangeError):
            broker.fetch("t", 0, 2)


def test_retention_deletes_the_segments_wholly_below_the_log_start(broker: Broker, clock: FakeClock) -> None:
    broker.create_topic("t", 1, {"segment.bytes": 200})  # one batch a segment
    for i in range(12):
        broker.produce("t", 0, data_batch([b"x" * 60], timestamp=clock.now_ms() + i))
    log_ = broker.engine.partitions.log("t", 0)
    assert len(log_.segments) > 4
    middle = log_.segments[3]
    new_start = middle.base_offset + (1 if middle.next_offset - middle.base_offset > 1 else 0)
    assert low_watermark(broker, "t", 0, new_start) == new_start
    assert broker.engine.call(broker.engine.jobs.apply_retention) == 3, "the three segments below it"
    assert log_.segments[0] is middle, "the segment holding the log start stays"
    assert log_.snapshot_offsets() and min(log_.snapshot_offsets()) >= new_start, "no snapshot below it is kept"
    assert start_of(broker, "t") == new_start
    assert broker.list_offsets("t", 0, 0) >= new_start, "a timestamp lookup never answers below it"
    assert broker.engine.call(broker.engine.jobs.apply_retention) == 0


def test_an_open_transaction_does_not_stop_it_and_the_lso_is_never_below_the_log_start(broker: Broker) -> None:
    broker.create_topic("t", 1)
    txn = RawTxn(broker, "tx")
    txn.send("t", 0, b"open")  # offset 0: the transaction holds the LSO there
    fill(broker, "t", 4)  # 1..4
    offsets = broker.engine.call(broker.engine.partitions.partition_offsets, "t", 0)
    assert (offsets.last_stable_offset, offsets.high_watermark) == (0, 5)
    assert low_watermark(broker, "t", 0, 3) == 3, "Kafka moves it past an open transaction"
    assert broker.engine.call(broker.engine.partitions.partition_offsets, "t", 0).last_stable_offset == 3
    assert broker.fetch("t", 0, 3, isolation_level=COMMITTED).records == b"", "nothing stable yet"
    txn.send("t", 0, b"more")  # 5
    txn.abort()  # the marker at 6
    offsets = broker.engine.call(broker.engine.partitions.partition_offsets, "t", 0)
    assert (offsets.log_start_offset, offsets.last_stable_offset, offsets.high_watermark) == (3, 7, 7)
    read = broker.fetch("t", 0, 3, isolation_level=COMMITTED)
    assert read.aborted_transactions == [(txn.pid, 0)], "the aborted transaction begun below the log start"
    assert low_watermark(broker, "t", 0, -1) == 7


def test_producer_state_is_kept_as_in_kafka_since_kip_360(broker: Broker, clock: FakeClock) -> None:
    broker.create_topic("t", 1)
    pid = producer_id(broker)
    broker.produce("t", 0, data_batch([b"a"], pid, 0, 0, timestamp=clock.now_ms()))
    assert low_watermark(broker, "t", 0, -1) == 1
    assert broker.produce("t", 0, data_batch([b"a"], pid, 0, 0)) == 0, "a retry is still a duplicate"
    assert broker.produce("t", 0, data_batch([b"b"], pid, 0, 1)) == 1, "the next sequence is accepted"


# -- the log's start offset as a state machine -------------------------------------------------

TXN_PRODUCER = 7
#: a script of the log's events: appends, a transaction's batches and its end, DeleteRecords at an
#: offset relative to the high watermark, a retention pass, a clean restart
steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("txn"), st.integers(1, 2)),
    st.tuples(st.just("end"), st.booleans()),
    st.tuples(st.just("delete"), st.integers(-8, 2)),
    st.tuples(st.just("minus_one"), st.none()),
    st.tuples(st.just("retention"), st.none()),
    st.tuples(st.just("restart"), st.none())), max_size=25)


def check_offsets(log_: PartitionLog) -> None:
    start, lso, hw = log_.log_start_offset, log_.last_stable_offset, log_.high_watermark
    assert start <= lso <= hw, (start, lso, hw)
    if start > 0:
        with pytest.raises(OffsetOutOfRangeError):
            log_.read(start - 1, 1 << 20)
    log_.read(start, 1 << 20)  # the log start is always a fetch position


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=steps)
def test_the_log_start_only_moves_up_to_the_high_watermark_and_stays_put(script: list) -> None:
    config = {"segment.bytes": 300, "file.delete.delay.ms": 0}
    with tempfile.TemporaryDirectory() as directory:
        logs = DurableLogs(directory, **config)
        logs.create_topic("t", 1)
        sequence, in_txn = 0, False
        try:
            for step, arg in script:
                log_ = logs.log("t")
                before = log_.log_start_offset
                if step == "append":
                    logs.produce("t", 0, data_batch([b"x" * 20] * arg))
                elif step == "txn":
                    logs.produce("t", 0, data_batch([b"t"] * arg, TXN_PRODUCER, 0, sequence, transactional=True))
                    sequence, in_txn = sequence + arg, True
                elif step == "end" and in_txn:
                    logs.write_txn_marker("t", 0, TXN_PRODUCER, 0, 0, commit=arg)
                    in_txn = False
                elif step in ("delete", "minus_one"):
                    offset = HIGH_WATERMARK if step == "minus_one" else log_.high_watermark + arg
                    target = log_.high_watermark if offset == HIGH_WATERMARK else offset
                    if target < 0 or target > log_.high_watermark:
                        with pytest.raises(OffsetOutOfRangeError):
                            log_.delete_records(offset)
                        assert log_.log_start_offset == before
                    else:
                        assert log_.delete_records(offset) == max(before, target)
                elif step == "retention":
                    run_inline(log_.delete_old_segments(log_.clock.now_ms()))
                    assert len(log_.segments) == 1 or log_.segments[1].base_offset > log_.log_start_offset, \
                        "no segment wholly below the log start is left"
                    assert log_.log_start_offset == before
                elif step == "restart":
                    logs.close()
                    logs = DurableLogs(directory, **config)
                    assert logs.log("t").log_start_offset == before, "the checkpoint keeps it"
                log_ = logs.log("t")
                assert log_.log_start_offset >= before, "it never moves back"
                check_offsets(log_)
        finally:
            logs.close()


# -- real clients ----------------------------------------------------------------------------


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **{"producer.id.expiration.ms": 1}, **FROZEN) as k:
        yield k


def config(kafka: KafkaBroker, **extra: object) -> dict:
    return {"bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4", **extra}


def admin_delete(kafka: KafkaBroker, *partitions: TopicPartition) -> dict[tuple[str, int], object]:
    """``AdminClient.delete_records``: each partition's low watermark, or its KafkaError."""
    admin = AdminClient(config(kafka))  # kept: the futures resolve only while it lives
    futures = admin.delete_records(list(partitions), request_timeout=30)
    answers: dict[tuple[str, int], object] = {}
    for tp, future in futures.items():
        try:
            answers[tp.topic, tp.partition] = future.result(30).low_watermark
        except KafkaException as e:
            answers[tp.topic, tp.partition] = e.args[0].code()
    return answers


def produce(producer: Producer, topic: str, values: list[bytes]) -> None:
    errors: list[KafkaError] = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(60) == 0
    assert errors == []


def test_admin_client_delete_records(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("t", 2)
    fill(kafka.broker, "t", 6)
    fill(kafka.broker, "t", 2, partition=1)
    answers = admin_delete(kafka, TopicPartition("t", 0, 4), TopicPartition("t", 1, OFFSET_END))
    assert answers == {("t", 0): 4, ("t", 1): 2}
    answers = admin_delete(kafka, TopicPartition("t", 0, 7))
    assert answers == {("t", 0): KafkaError.OFFSET_OUT_OF_RANGE}
    values = read_to_end(config(kafka, **{"group.id": "g"}), "t", 1)
    assert values == [b"v4", b"v5"], "a consumer from the beginning starts at the log start"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_served_version_answers_each_partition(kafka: KafkaBroker, version: int) -> None:
    kafka.broker.create_topic("t", 1)
    fill(kafka.broker, "t", 3)
    client = raw_connection(kafka.port)
    try:
        response = client.request(ApiKey.DELETE_RECORDS, version, {"timeout": 30_000, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "offset": -1},
                                         {"partition_index": 1, "offset": 0}]}]})
    finally:
        client.close()
    ((topic,),) = (response.topics,)
    answers = [(p.partition_index, p.low_watermark, p.error_code) for p in topic.partitions]
    assert answers == [(0, 3, 0), (1, -1, UnknownTopicOrPartitionError.code)]


def test_an_idempotent_producer_whose_state_is_gone_recovers_without_duplicate_or_loss(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("t", 1)
    producer = Producer(config(kafka, **{"enable.idempotence": True, "linger.ms": 50}))
    produce(producer, "t", [b"a%d" % i for i in range(10)])
    assert admin_delete(kafka, TopicPartition("t", 0, OFFSET_END)) == {("t", 0): 10}
    produce(producer, "t", [b"b%d" % i for i in range(10)])  # its state was kept: nothing to recover
    assert admin_delete(kafka, TopicPartition("t", 0, OFFSET_END)) == {("t", 0): 20}
    # producer.id.expiration.ms=1: its state goes now, its next batch is UNKNOWN_PRODUCER_ID with the
    # log start past its last acknowledged offset -- KIP-360: librdkafka bumps its epoch and resends
    assert kafka.engine.call(kafka.engine.jobs.expire_producer_ids) == 1
    produce(producer, "t", [b"c%d" % i for i in range(10)])
    producer.flush(10)
    offsets = kafka.engine.call(kafka.engine.partitions.partition_offsets, "t", 0)
    assert (offsets.log_start_offset, offsets.high_watermark) == (20, 30), "each record written once"
    (entry,) = kafka.engine.partitions.log("t", 0).producer_state.producers.values()
    assert entry.producer_epoch == 1, "it recovered with an epoch bump (KIP-360)"
    assert read_to_end(config(kafka, **{"group.id": "g"}), "t", 1) == [b"c%d" % i for i in range(10)]


def test_delete_records_during_a_transaction_then_the_lso(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("t", 1)
    producer = Producer(config(kafka, **{"transactional.id": "tx", "linger.ms": 5}))
    producer.init_transactions(30)
    producer.begin_transaction()
    produce(producer, "t", [b"t%d" % i for i in range(5)])  # 0..4, open
    assert kafka.engine.call(kafka.engine.partitions.partition_offsets, "t", 0).last_stable_offset == 0
    assert admin_delete(kafka, TopicPartition("t", 0, 2)) == {("t", 0): 2}
    assert kafka.engine.call(kafka.engine.partitions.partition_offsets, "t", 0).last_stable_offset == 2
    producer.commit_transaction(30)
    offsets = kafka.engine.call(kafka.engine.partitions.partition_offsets, "t", 0)
    assert (offsets.log_start_offset, offsets.last_stable_offset, offsets.high_watermark) == (2, 6, 6)
    committed = config(kafka, **{"group.id": "g", "isolation.level": "read_committed"})
    assert read_to_end(committed, "t", 1) == [b"t2", b"t3", b"t4"]


KCAT = shutil.which("kcat") or "/usr/bin/kcat"


@pytest.mark.skipif(not Path(KCAT).exists(), reason="kcat is not installed (make test installs it)")
def test_kcat_reads_from_the_new_log_start_and_resets_below_it(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("t", 1)
    fill(kafka.broker, "t", 5)
    assert admin_delete(kafka, TopicPartition("t", 0, 3)) == {("t", 0): 3}

    def kcat(*args: str) -> list[str]:
        done = subprocess.run([KCAT, "-b", kafka.bootstrap, "-X", "broker.address.family=v4", "-C", "-t", "t",
                               "-p", "0", "-e", "-f", "%o %s\\n", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert kcat("-o", "beginning") == ["3 v3", "4 v4"]
    # offset 1 is below the log start: OFFSET_OUT_OF_RANGE, and the consumer resets to the earliest
    assert kcat("-o", "1", "-X", "auto.offset.reset=earliest") == ["3 v3", "4 v4"]

