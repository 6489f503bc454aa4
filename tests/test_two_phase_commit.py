"""KIP-939 two-phase commit on the wire: a producer initialised with enable2Pc leaves
its transaction prepared (never timed out); a later InitProducerId with
keepPreparedTxn finds it, data untouched, answers the producer id and epoch it was
written with, and gives the caller the epoch bumped, fencing the writer that
prepared it, so that an external coordinator completes it -- across a broker
restart too. The Spark sink (exactly/app/spark/sink.py) commits this way."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.engine import read_models
from exactly.app.kafka.api import ApiKey
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.coordinator import transaction_log
from exactly.coordinator.transaction_state import TWO_PHASE_COMMIT_TIMEOUT_MS, TransactionState, TxnTransitMetadata
from exactly.storage.clock import FakeClock
from exactly.storage.record_batch import SimpleRecord, encode_batch
from exactly.storage.read_committed import read_records
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker, raw_connection
from tests.storage_log import DurableLogs

pytestmark = pytest.mark.timeout(60)
HOUR_MS = 3_600_000
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
PRODUCER_FENCED = 90


def init(raw: KafkaConnection, txn_id: str, enable_2pc: bool = True, keep: bool = False, version: int = 6):
    return raw.request(ApiKey.INIT_PRODUCER_ID, version, {
        "transactional_id": txn_id, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1,
        "enable2_pc": enable_2pc, "keep_prepared_txn": keep})


def write_open_transaction(raw: KafkaConnection, txn_id: str, topic: str, values: list[bytes]) -> tuple[int, int]:
    """Init with enable2Pc, add the partition, produce: a prepared transaction."""
    producer = init(raw, txn_id)
    assert producer.error_code == 0
    added = raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": producer.producer_id,
        "v3_and_below_producer_epoch": producer.producer_epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    records = encode_batch([SimpleRecord(v) for v in values], producer_id=producer.producer_id,
                           producer_epoch=producer.producer_epoch, base_sequence=0, transactional=True)
    produced = raw.request(ApiKey.PRODUCE, 9, {
        "transactional_id": txn_id, "acks": -1, "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    assert produced.responses[0].partition_responses[0].error_code == 0
    return producer.producer_id, producer.producer_epoch


def produce(raw: KafkaConnection, txn_id: str, topic: str, producer: tuple[int, int], sequence: int,
            values: list[bytes]) -> int:
    """A transactional batch of ``producer`` (id, epoch) to ``topic``-0; its error code."""
    records = encode_batch([SimpleRecord(v) for v in values], producer_id=producer[0],
                           producer_epoch=producer[1], base_sequence=sequence, transactional=True)
    produced = raw.request(ApiKey.PRODUCE, 9, {
        "transactional_id": txn_id, "acks": -1, "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return produced.responses[0].partition_responses[0].error_code


def add_partition(raw: KafkaConnection, txn_id: str, topic: str, producer: tuple[int, int]) -> int:
    added = raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": producer[0],
        "v3_and_below_producer_epoch": producer[1],
        "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    return added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def committed_values(kafka: KafkaBroker, topic: str) -> list[bytes]:
    r = kafka.broker.fetch(topic, 0, 0, isolation_level="read_committed")
    return [rec.value for rec in read_records(r.records, 0, True, r.aborted_transactions or ()).records]


def end_txn(raw: KafkaConnection, txn_id: str, producer_id: int, epoch: int, commit: bool) -> int:
    return raw.request(ApiKey.END_TXN, 3, {"transactional_id": txn_id, "producer_id": producer_id,
                                           "producer_epoch": epoch, "committed": commit}).error_code


def lso(kafka: KafkaBroker, topic: str) -> int:
    return kafka.broker.engine.call(read_models.partition, kafka.broker.engine, topic, 0)["last_stable_offset"]


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", clock=FakeClock(), **{"exactly.jobs.enable": False, **TWO_PHASE_COMMIT}) as k:
        k.broker.create_topic("out", 1)
        yield k


@pytest.fixture
def raw(kafka: KafkaBroker) -> Iterator[KafkaConnection]:
    client = raw_connection(kafka.port)
    yield client
    client.close()


def test_a_prepared_transaction_is_kept_and_completed_by_whoever_holds_its_outcome(
        kafka: KafkaBroker, raw: KafkaConnection) -> None:
    prepared = write_open_transaction(raw, "task-0", "out", [b"a", b"b"])
    kept = init(raw, "task-0", keep=True)
    assert kept.error_code == 0
    assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == prepared
    assert (kept.producer_id, kept.producer_epoch) == (prepared[0], prepared[1] + 1)  # KIP-939: bumped
    assert lso(kafka, "out") == 0  # still undecided: read_committed readers wait
    again = init(raw, "task-0", keep=True)  # a coordinator that crashed and asks again
    assert (again.ongoing_txn_producer_id, again.ongoing_txn_producer_epoch) == prepared
    assert (again.producer_id, again.producer_epoch) == (prepared[0], prepared[1] + 2)
    assert end_txn(raw, "task-0", kept.producer_id, kept.producer_epoch, commit=True) == PRODUCER_FENCED
    assert end_txn(raw, "task-0", again.producer_id, again.producer_epoch, commit=True) == 0
    assert lso(kafka, "out") == 3  # two records and the COMMIT marker


def test_a_two_phase_transaction_never_times_out_and_survives_a_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    config = {"clock": clock, "exactly.jobs.enable": False}
    with KafkaBroker(tmp_path / "data", **config, **TWO_PHASE_COMMIT) as kafka:
        kafka.broker.create_topic("out", 1)
        with closing(raw_connection(kafka.port)) as raw:
            prepared = write_open_transaction(raw, "task-0", "out", [b"a"])
        clock.advance(30 * 24 * HOUR_MS)  # past even Int32.MAX ms (24.8 days)
        coordinator = kafka.broker.engine.transactions.coordinator
        assert kafka.broker.engine.call(coordinator.abort_timed_out_transactions) == []
    with KafkaBroker(tmp_path / "data", **config, **TWO_PHASE_COMMIT) as kafka, \
            closing(raw_connection(kafka.port)) as raw:
        kept = init(raw, "task-0", keep=True)
        assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == prepared
        assert end_txn(raw, "task-0", kept.producer_id, kept.producer_epoch, commit=False) == 0
        assert lso(kafka, "out") == 2  # decided: aborted


def test_keep_prepared_with_nothing_open_is_an_ordinary_init(raw: KafkaConnection) -> None:
    first = init(raw, "task-0")
    kept = init(raw, "task-0", keep=True)
    assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (-1, -1)
    assert (kept.producer_id, kept.producer_epoch) == (first.producer_id, first.producer_epoch + 1)


def test_an_init_without_keep_prepared_aborts_the_prepared_transaction(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    write_open_transaction(raw, "task-0", "out", [b"stale"])
    retry = init(raw, "task-0")  # a retried task attempt fences and aborts the failed one
    assert retry.error_code == 0
    assert lso(kafka, "out") == 2
    assert (init(raw, "task-0", keep=True).ongoing_txn_producer_id) == -1


def test_an_ordinary_transaction_is_not_kept(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    producer = kafka.broker.producer(transactional_id="plain")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"x", partition=0).get(10)
    kept = init(raw, "plain", keep=True)
    assert kept.ongoing_txn_producer_id == -1  # only a 2PC transaction can be kept prepared
    assert lso(kafka, "out") == 2


def test_two_phase_commit_is_refused_by_default_as_in_kafka(tmp_path: Path) -> None:
    """``transaction.two.phase.commit.enable`` is false unless the operator turns it on."""
    with KafkaBroker(tmp_path / "data") as kafka, \
            closing(raw_connection(kafka.port)) as raw:
        assert init(raw, "task-0").error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert init(raw, "task-0", keep=True).error_code == 53
        assert init(raw, "task-0", enable_2pc=False).error_code == 0


def test_keep_prepared_needs_enable_2pc(raw: KafkaConnection) -> None:
    assert init(raw, "task-0", enable_2pc=False, keep=True).error_code == 42  # INVALID_REQUEST


def test_list_transactions_filters_by_transactional_id_pattern(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    for txn_id in ("sink-a-t0", "sink-a-t1", "sink-b-t0", "xsink-a-t0"):
        write_open_transaction(raw, txn_id, "out", [b"v"])

    def listed(pattern: str | None) -> tuple[int, list[str]]:
        response = raw.request(ApiKey.LIST_TRANSACTIONS, 2, {"state_filters": ["Ongoing"], "producer_id_filters": [],
                                                             "duration_filter": -1, "transactional_id_pattern": pattern})
        return response.error_code, sorted(t.transactional_id for t in response.transaction_states)

    assert listed("sink-a-.*") == (0, ["sink-a-t0", "sink-a-t1"])  # the whole id must match
    assert listed(None)[1] == ["sink-a-t0", "sink-a-t1", "sink-b-t0", "xsink-a-t0"]
    assert listed("sink-(") == (128, [])  # INVALID_REGULAR_EXPRESSION


def test_keep_prepared_fences_the_writer_that_prepared_the_transaction(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    """KIP-939: the recovering client's InitProducerId bumps the epoch; a batch the old
    writer sends afterwards does not join the transaction, and its EndTxn is fenced."""
    prepared = write_open_transaction(raw, "task-0", "out", [b"prepared"])
    kept = init(raw, "task-0", keep=True)
    assert produce(raw, "task-0", "out", prepared, 1, [b"late"]) == INVALID_PRODUCER_EPOCH
    assert add_partition(raw, "task-0", "out", prepared) == PRODUCER_FENCED
    assert end_txn(raw, "task-0", *prepared, commit=True) == PRODUCER_FENCED
    new = (kept.producer_id, kept.producer_epoch)
    assert produce(raw, "task-0", "out", new, 0, [b"recovered"]) == INVALID_TXN_STATE  # only EndTxn ends it
    assert end_txn(raw, "task-0", *new, commit=True) == 0
    assert committed_values(kafka, "out") == [b"prepared"]
    assert end_txn(raw, "task-0", *new, commit=True) == 0  # a retry after completion
    after = write_open_transaction(raw, "task-0", "out", [b"next"])  # the client carries on
    assert after == (new[0], new[1] + 1)


def test_the_fence_of_keep_prepared_survives_a_restart(tmp_path: Path) -> None:
    """The bumped epoch is in the transaction log (its tagged fields), so a restart
    neither lets the old writer back in nor loses the recovering client's epoch."""
    config = {"clock": FakeClock(), "exactly.jobs.enable": False}
    with KafkaBroker(tmp_path / "data", **config, **TWO_PHASE_COMMIT) as kafka:
        kafka.broker.create_topic("out", 1)
        with closing(raw_connection(kafka.port)) as raw:
            prepared = write_open_transaction(raw, "task-0", "out", [b"prepared"])
            kept = init(raw, "task-0", keep=True)
    with KafkaBroker(tmp_path / "data", **config, **TWO_PHASE_COMMIT) as kafka, \
            closing(raw_connection(kafka.port)) as raw:
        assert produce(raw, "task-0", "out", prepared, 1, [b"late"]) == INVALID_PRODUCER_EPOCH
        assert end_txn(raw, "task-0", *prepared, commit=True) == PRODUCER_FENCED
        assert end_txn(raw, "task-0", kept.producer_id, kept.producer_epoch, commit=True) == 0
        assert committed_values(kafka, "out") == [b"prepared"]


def test_an_ordinary_init_aborts_a_kept_transaction_and_fences_its_recovering_client(
        kafka: KafkaBroker, raw: KafkaConnection) -> None:
    prepared = write_open_transaction(raw, "task-0", "out", [b"prepared"])
    kept = init(raw, "task-0", keep=True)
    fresh = init(raw, "task-0")
    assert fresh.error_code == 0 and fresh.producer_epoch > kept.producer_epoch > prepared[1]
    assert end_txn(raw, "task-0", kept.producer_id, kept.producer_epoch, commit=True) == PRODUCER_FENCED
    assert committed_values(kafka, "out") == []


def test_keep_prepared_at_the_last_epoch_gives_the_client_a_new_producer_id(tmp_path: Path) -> None:
    """A kept transaction written at the last usable epoch (32766): the recovering client
    gets a new producer id at epoch 0 (NextProducerId), the markers still carry the pair
    the data was written with, and completion moves the id to the new producer."""
    data = tmp_path / "data"
    with KafkaBroker(data, **TWO_PHASE_COMMIT) as kafka:
        kafka.broker.create_topic("out", 1)
        partitions = kafka.engine.config.transaction_state_log_num_partitions
        with closing(raw_connection(kafka.port)) as raw:
            init(raw, "other")  # creates __transaction_state
    exhausted = (500, 32766)
    with DurableLogs(data) as logs:  # the id's record after 32766 bumps, as the coordinator writes it
        logs.produce(transaction_log.TOPIC, transaction_log.partition_for("task-0", partitions), encode_batch([
            SimpleRecord(transaction_log.encode_value(TxnTransitMetadata(
                *exhausted[:1], -1, exhausted[1], -1, TWO_PHASE_COMMIT_TIMEOUT_MS, TransactionState.ONGOING,
                frozenset({("out", 0)}), 1_000, 1_000)), key=transaction_log.encode_key("task-0"))]))
        logs.produce("out", 0, encode_batch([SimpleRecord(b"prepared")], producer_id=exhausted[0],
                                            producer_epoch=exhausted[1], base_sequence=0, transactional=True))
    with KafkaBroker(data, **TWO_PHASE_COMMIT) as kafka, closing(raw_connection(kafka.port)) as raw:
        kept = init(raw, "task-0", keep=True)
        assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == exhausted
        assert kept.producer_id != exhausted[0] and kept.producer_epoch == 0
        assert end_txn(raw, "task-0", *exhausted, commit=True) == PRODUCER_FENCED
        assert end_txn(raw, "task-0", kept.producer_id, kept.producer_epoch, commit=True) == 0
        assert committed_values(kafka, "out") == [b"prepared"]
        assert write_open_transaction(raw, "task-0", "out", [b"next"]) == (kept.producer_id, 1)
