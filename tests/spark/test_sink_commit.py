"""The streaming sink's commit protocol, driven as Spark drives it (tasks prepare,
then a fresh writer's commit or abort runs with their messages and the batch id),
against a served broker, without a SparkSession: every crash the copy-job test can
only hit by chance is set up here on purpose."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StringType, StructField, StructType

from exactly.app.spark import kafka_admin, sink
from exactly.app.spark.kafka_admin import admin_for
from exactly.app.spark.kafka_client import KafkaClient, TransactionalProducer
from exactly.app.spark.sink import PreparedTransactionLost, SinkLog, TaskCommit, TopicStreamWriter, TxnIds
from exactly.storage.record_batch import SimpleRecord
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker, read_to_end

QUERY = "3f1c0e52-0000-4000-8000-000000000001"
SCHEMA = StructType([StructField("value", StringType())])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **TWO_PHASE_COMMIT) as broker:
        broker.broker.create_topic("out", partitions=2)
        yield broker


@pytest.fixture
def client(served: KafkaBroker) -> Iterator[KafkaClient]:
    with KafkaClient(served.bootstrap) as client:
        yield client


def writer(served: KafkaBroker) -> TopicStreamWriter:
    """A new stream writer, as Spark makes for every commit or abort call."""
    return TopicStreamWriter({"kafka.bootstrap.servers": served.bootstrap, "topic": "out"}, SCHEMA)


def task(client: KafkaClient, run: str, batch: int, partition: int, values: list[str]) -> TaskCommit:
    """What a task of ``run`` writes for ``batch`` and reports."""
    ids = TxnIds(QUERY, run)
    producer = TransactionalProducer(client, ids.task(batch, partition))
    producer.begin()
    for value in values:
        producer.send("out", partition, SimpleRecord(value.encode()))
    producer.prepare()
    return TaskCommit(ids, producer.transactional_id, producer.producer_id, producer.producer_epoch,
                      len(values))


def committed(served: KafkaBroker) -> list[bytes]:
    return sorted(read_to_end({"bootstrap.servers": served.bootstrap, "group.id": "check",
                               "isolation.level": "read_committed"}, "out", 2))


def open_transactions(client: KafkaClient) -> list[str]:
    return [t.transactional_id for t in client.list_transactions("exactly-spark-.*", ["Ongoing"])]


def test_batches_commit_in_turn_on_alternating_ids(served, client) -> None:
    for batch in range(3):
        messages = [task(client, "run1", batch, p, [f"b{batch}p{p}"]) for p in (0, 1)]
        writer(served).commit(messages, batch)
    assert committed(served) == sorted(f"b{b}p{p}".encode() for b in range(3) for p in (0, 1))
    assert open_transactions(client) == []
    assert SinkLog(admin_for(served.bootstrap), QUERY).latest() == (TxnIds(QUERY, "run1"), 2)


def test_a_batch_replayed_after_its_decision_is_not_written_twice(served, client) -> None:
    first = [task(client, "run1", 0, p, [f"a{p}"]) for p in (0, 1)]
    SinkLog(admin_for(served.bootstrap), QUERY).decide("run1", 0)  # the driver died here: decided, not completed
    replay = [task(client, "run2", 0, p, [f"a{p}"]) for p in (0, 1)]  # the restart replays batch 0
    writer(served).commit(replay, 0)
    assert committed(served) == [b"a0", b"a1"]  # the first run's, rolled forward; the replay's aborted
    assert open_transactions(client) == []
    assert first[0].transactional_id != replay[0].transactional_id


def test_an_undecided_batch_of_a_crashed_run_is_aborted_and_written_again(served, client) -> None:
    writer(served).commit([task(client, "run1", 0, 0, ["b0"])], 0)
    task(client, "run1", 1, 0, ["b1 (crashed before deciding)"])
    task(client, "run1", 1, 1, ["b1 (crashed before deciding)"])
    writer(served).commit([task(client, "run2", 1, p, [f"b1p{p}"]) for p in (0, 1)], 1)
    assert committed(served) == [b"b0", b"b1p0", b"b1p1"]
    assert open_transactions(client) == []


def test_a_run_that_died_mid_commit_is_rolled_forward_not_the_batch_after(served, client) -> None:
    """Run 1 decided batch 4 and committed one of its two transactions; no batch 5 had
    started on its other parity. Run 2's first commit rolls batch 4 forward."""
    decided = [task(client, "run1", 4, p, [f"b4p{p}"]) for p in (0, 1)]
    SinkLog(admin_for(served.bootstrap), QUERY).decide("run1", 4)
    client.end_txn(decided[0].transactional_id, decided[0].producer_id, decided[0].producer_epoch, commit=True)
    writer(served).commit([task(client, "run2", 5, 0, ["b5"])], 5)
    assert committed(served) == [b"b4p0", b"b4p1", b"b5"]
    assert open_transactions(client) == []


def test_abort_after_the_decision_rolls_forward_and_never_undoes_a_commit(served, client) -> None:
    messages = [task(client, "run1", 0, p, [f"a{p}"]) for p in (0, 1)]
    SinkLog(admin_for(served.bootstrap), QUERY).decide("run1", 0)
    client.end_txn(messages[0].transactional_id, messages[0].producer_id, messages[0].producer_epoch, commit=True)
    writer(served).abort(messages, 0)
    assert committed(served) == [b"a0", b"a1"]
    assert open_transactions(client) == []


def test_abort_of_an_undecided_batch_aborts_it_failed_tasks_included(served, client) -> None:
    writer(served).commit([task(client, "run1", 0, 0, ["kept"])], 0)
    done = task(client, "run1", 1, 0, ["undecided"])
    task(client, "run1", 1, 1, ["failed task"])  # Spark gives abort None for it
    writer(served).abort([done, None], 1)
    assert committed(served) == [b"kept"]
    assert open_transactions(client) == []


def test_a_task_whose_transaction_was_lost_fails_the_batch_undecided(served, client) -> None:
    messages = [task(client, "run1", 0, p, [f"a{p}"]) for p in (0, 1)]
    client.abort_transaction(messages[1].transactional_id)  # e.g. another attempt fenced it
    with pytest.raises(PreparedTransactionLost, match="the task prepared producer"):
        writer(served).commit(messages, 0)
    assert SinkLog(admin_for(served.bootstrap), QUERY).latest() is None
    writer(served).abort(messages, 0)
    assert committed(served) == []
    assert open_transactions(client) == []


def test_the_batch_after_the_decided_one_is_aborted_not_rolled_forward(served, client) -> None:
    """Run 1 completed batch 4, wrote batch 5 and died before deciding it: batch 5's
    transactions of run 1 are not the decided batch's (the other parity) and go."""
    writer(served).commit([task(client, "run1", 4, p, [f"b4p{p}"]) for p in (0, 1)], 4)
    task(client, "run1", 5, 0, ["b5 of the dead run"])
    writer(served).commit([task(client, "run2", 5, 0, ["b5"])], 5)
    assert committed(served) == [b"b4p0", b"b4p1", b"b5"]
    assert open_transactions(client) == []


#: what can happen to a micro-batch between its tasks and Spark's checkpoint commit:
#: a clean commit, the driver dying at one of the sink's crash points, a task failing
OUTCOMES = ("committed", "before-decision", "after-decision", "mid-completion", "a task failed")


class Died(Exception):
    """The driver process dying at a crash point (here: the commit call ends)."""


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("stateful") / "data", **TWO_PHASE_COMMIT) as broker:
        yield broker


@pytest.fixture
def shared(shared_broker: KafkaBroker) -> Iterator[KafkaBroker]:
    """The module's broker; the sink's admin client of it goes with each test (the
    suite's leak check counts it as the test's)."""
    yield shared_broker
    kafka_admin.forget(shared_broker.bootstrap)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(OUTCOMES), max_size=8))
def test_any_sequence_of_crashes_and_replays_writes_each_batch_once(shared, outcomes) -> None:
    """Spark's side as it behaves: until a commit returns, a new run replays the batch
    with the same id; after the outcomes, one last run commits."""
    topic, query = f"out-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    shared.broker.create_topic(topic, partitions=2)
    options = {"kafka.bootstrap.servers": shared.bootstrap, "topic": topic}
    batch, run = 0, 0
    with KafkaClient(shared.bootstrap) as client, pytest.MonkeyPatch.context() as patch:
        def tasks() -> list[TaskCommit]:
            ids = TxnIds(query, f"run{run}")
            messages = []
            for p in (0, 1):
                producer = TransactionalProducer(client, ids.task(batch, p))
                producer.begin()
                producer.send(topic, p, SimpleRecord(f"b{batch}p{p}".encode()))
                producer.prepare()
                messages.append(TaskCommit(ids, producer.transactional_id, producer.producer_id,
                                           producer.producer_epoch, 1))
            return messages

        for outcome in outcomes + ["committed"]:
            messages = tasks()
            if outcome == "a task failed":
                TopicStreamWriter(options, SCHEMA).abort([messages[0], None], batch)
                run += 1
                continue

            def crash_point(point: str, at_batch: int, outcome: str = outcome) -> None:
                if point == outcome:
                    raise Died(point)
            patch.setattr(sink, "crash_point", crash_point)
            try:
                TopicStreamWriter(options, SCHEMA).commit(messages, batch)
                batch += 1  # Spark records the batch in its checkpoint
            except Died:
                run += 1  # the query restarts from its checkpoint and replays the batch
        output = read_to_end({"bootstrap.servers": shared.bootstrap, "group.id": "check",
                              "isolation.level": "read_committed"}, topic, 2)
        assert sorted(output) == sorted(f"b{b}p{p}".encode() for b in range(batch) for p in (0, 1))
        assert [t for t in open_transactions(client) if query in t] == []
