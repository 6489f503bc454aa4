"""The sink's Kafka protocol client against a served broker: KIP-939 prepared
transactions (kept, completed, aborted), fencing of an earlier task attempt, the
operator APIs that find open transactions, and retries of retriable errors. No Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.spark.kafka_admin import KafkaAdmin
from exactly.app.spark.kafka_client import KafkaClient, TransactionalProducer
from exactly.storage.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from exactly.storage.record_batch import SimpleRecord
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker, read_to_end

INT32_MAX_MS = 2**31 - 1


@pytest.fixture
def served(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **TWO_PHASE_COMMIT) as broker:
        broker.broker.create_topic("out", partitions=2)
        yield broker


@pytest.fixture
def client(served: KafkaBroker) -> Iterator[KafkaClient]:
    with KafkaClient(served.bootstrap, timeout=10) as client:
        yield client


def committed(served: KafkaBroker) -> list[bytes]:
    return sorted(read_to_end({"bootstrap.servers": served.bootstrap, "group.id": "check",
                               "isolation.level": "read_committed"}, "out", 2))


def prepare(client: KafkaClient, transactional_id: str, values: list[bytes]) -> tuple[int, int]:
    producer = TransactionalProducer(client, transactional_id)
    producer.begin()
    for i, value in enumerate(values):
        producer.send("out", i % 2, SimpleRecord(value))
    return producer.prepare()


def test_a_prepared_transaction_stays_open_invisible_and_never_times_out(served, client) -> None:
    prepare(client, "t", [b"a", b"b", b"c"])
    described = client.describe_transaction("t")
    assert described.transaction_state == "Ongoing"
    assert described.transaction_timeout.total_seconds() * 1000 == INT32_MAX_MS
    assert committed(served) == []


def test_keep_prepared_keeps_the_data_and_complete_commits_it(served, client) -> None:
    producer_id, epoch = prepare(client, "t", [b"a", b"b", b"c"])
    # the completer is another process: its own client and connection
    with KafkaClient(served.bootstrap) as completer:
        kept = completer.init_producer_id("t", keep_prepared_txn=True)
        assert (kept.ongoing_producer_id, kept.ongoing_producer_epoch) == (producer_id, epoch)
        assert client.describe_transaction("t").transaction_state == "Ongoing"
        assert completer.complete_transaction("t", producer_id, epoch) is True
    assert committed(served) == [b"a", b"b", b"c"]
    assert client.list_transactions("t", ["Ongoing"]) == []


def test_complete_aborts_a_transaction_written_by_another_producer(served, client) -> None:
    producer_id, epoch = prepare(client, "t", [b"stale"])
    assert client.complete_transaction("t", producer_id, epoch + 1) is False
    assert committed(served) == []
    assert client.describe_transaction("t").transaction_state == "CompleteAbort"


def test_complete_with_nothing_open_is_done(served, client) -> None:
    producer_id, epoch = prepare(client, "t", [b"a"])
    assert client.complete_transaction("t", producer_id, epoch) is True
    assert client.complete_transaction("t", producer_id, epoch) is True  # again: already committed
    assert committed(served) == [b"a"]


def test_a_retried_attempt_fences_the_failed_one_and_aborts_its_data(served, client) -> None:
    first = TransactionalProducer(client, "task-0")
    first.begin()
    first.send("out", 0, SimpleRecord(b"from the failed attempt"))
    first.flush()
    producer_id, epoch = prepare(client, "task-0", [b"retried"])  # the next attempt, same id
    first.send("out", 0, SimpleRecord(b"zombie"))
    with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
        first.flush()
    assert client.complete_transaction("task-0", producer_id, epoch) is True
    assert committed(served) == [b"retried"]


def test_list_transactions_finds_a_sinks_open_ids_by_pattern(served, client) -> None:
    for txn in ("exactly-spark-q1-r1-0-0", "exactly-spark-q1-r1-0-1", "exactly-spark-q2-r1-0-0"):
        prepare(client, txn, [b"x"])
    found = client.list_transactions("exactly-spark-q1-.*", ["Ongoing"])
    assert sorted(t.transactional_id for t in found) == ["exactly-spark-q1-r1-0-0", "exactly-spark-q1-r1-0-1"]
    client.abort_transaction("exactly-spark-q1-r1-0-0")
    assert [t.transactional_id for t in client.list_transactions("exactly-spark-q1-.*", ["Ongoing"])] \
        == ["exactly-spark-q1-r1-0-1"]


def test_group_offsets_hold_a_decision(served) -> None:
    admin = KafkaAdmin(served.bootstrap, timeout=10)
    admin.create_topic("decisions", 1)
    admin.create_topic("decisions", 1)  # exists already: fine
    assert admin.partition_count("decisions") == 1
    assert admin.fetch_offset("g", "decisions", 0) is None
    admin.commit_offset("g", "decisions", 0, 7, "run-1")
    assert admin.fetch_offset("g", "decisions", 0) == (7, "run-1")


def test_an_unknown_topic_is_kafkas_exception_class(served) -> None:
    with pytest.raises(UnknownTopicOrPartitionError):
        KafkaAdmin(served.bootstrap, timeout=10).partition_count("missing")


def test_errors_are_kafkas_exception_classes(served, client) -> None:
    producer = TransactionalProducer(client, "t")
    producer.begin()
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send("out", 5, SimpleRecord(b"x"))
    with pytest.raises(InvalidProducerIdMappingError,
                       match=r"EndTxn\('t', commit\): INVALID_PRODUCER_ID_MAPPING \(49\)"):
        client.end_txn("t", producer.producer_id + 1, producer.producer_epoch, commit=True)


def test_the_sink_s_missing_topic_is_created_as_kafka_s_auto_creation_would(served, client) -> None:
    """As a Kafka producer: Metadata allowing auto-creation, so the broker creates the
    topic with num.partitions (its auto.create.topics.enable decides); the source and the
    admin calls never create one."""
    producer = TransactionalProducer(client, "t")
    producer.begin()
    producer.send("fresh", 0, SimpleRecord(b"x"))
    assert producer.partitions("fresh") == served.engine.config.num_partitions == 1
    assert served.engine.topics.topic_info("fresh") is not None


def test_a_broker_that_does_not_auto_create_refuses_the_sink_s_topic_with_what_to_do(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data", **{"auto.create.topics.enable": False, **TWO_PHASE_COMMIT}) as served, \
            KafkaClient(served.bootstrap, timeout=10) as client:
        producer = TransactionalProducer(client, "t")
        producer.begin()
        with pytest.raises(UnknownTopicOrPartitionError) as refused:
            producer.send("fresh", 0, SimpleRecord(b"x"))
        assert "\n" not in str(refused.value)
        assert "auto.create.topics.enable=false): create it first" in str(refused.value)
        assert served.engine.topics.topic_info("fresh") is None


def test_two_phase_commit_refused_when_the_broker_disables_it(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data", **{"transaction.two.phase.commit.enable": False}) as served, \
            KafkaClient(served.bootstrap) as client:
        with pytest.raises(TransactionalIdAuthorizationFailedError, match="transaction.two.phase.commit.enable"):
            client.init_producer_id("t")


def test_retriable_errors_are_retried_until_the_deadline(served, client) -> None:
    answers = [ConcurrentTransactionsError(), ConcurrentTransactionsError(), "done"]

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    assert client.retrying(call) == "done"

    def always_busy() -> None:
        raise ConcurrentTransactionsError()
    with pytest.raises(ConcurrentTransactionsError):
        client.retrying(always_busy, deadline_s=0.2)
    calls = []

    def fatal() -> None:
        calls.append(1)
        raise InvalidTxnStateError()
    with pytest.raises(InvalidTxnStateError):
        client.retrying(fatal)
    assert len(calls) == 1
