"""Every abort records its cause and its actor (issue 10, "Right answers").

A transaction aborted by its producer (EndTxn), by the timeout, by a new instance's
InitProducerId, or by an operator (the transaction's Abort from the console or the
API, the partition's KIP-664 Abort) gets a ``transactions`` row in the SQLite mirror
with ``abort_cause`` and ``abort_actor`` and exactly one INFO line in the server
log. The reason travels in the transaction log (headers of the PrepareAbort and
CompleteAbort records), so a mirror rebuilt from the logs has it, and a broker
restarted on them still tells a timed-out producer why it is fenced.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.app.engine import mirror_reads, read_models
from exactly.app.http import create_app
from exactly.coordinator import transaction_log
from exactly.coordinator.mirror_db import reader_engine
from exactly.coordinator.schema import SchemaError
from exactly.coordinator.transaction_state import AbortCause, AbortReason, TransactionState, TxnTransitMetadata
from exactly.storage.clock import FakeClock
from exactly.storage.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError
from exactly.storage.record_batch import ControlType
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _history(broker: Broker, txn_id: str) -> list[dict]:
    broker.mirror.catch_up()
    db = reader_engine(broker.mirror.path)
    try:
        return mirror_reads.transaction_history(db, txn_id)
    finally:
        db.dispose()


def _abort_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.INFO and r.getMessage().startswith("aborting ")]


def _open(broker: Broker, txn_id: str, timeout_ms: int = 60_000):
    producer = broker.producer(transactional_id=txn_id, transaction_timeout_ms=timeout_ms)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"v", partition=0).get(timeout=10)
    return producer


@pytest.fixture
def orders(broker: Broker) -> Broker:
    broker.create_topic("orders", 1)
    return broker


def test_each_cause_is_recorded_with_its_actor_and_logged_once(orders: Broker, clock: FakeClock,
                                                               caplog: pytest.LogCaptureFixture):
    broker = orders
    caplog.set_level(logging.INFO)
    app = create_app(broker.engine, test_config={"TESTING": True}, mirror=broker.mirror)
    client = app.test_client()
    cluster = broker.engine.topics.cluster_id

    _open(broker, "by-client").abort_transaction()

    late = _open(broker, "by-timeout", timeout_ms=10_000)
    clock.advance(10_001)
    assert broker.engine.call(broker.engine.jobs.abort_timed_out_transactions) == ["by-timeout"]

    _open(broker, "by-new-instance")
    broker.producer(transactional_id="by-new-instance").init_transactions()

    _open(broker, "by-console")
    token = CSRF.search(client.get("/transactions/by-console").get_data(as_text=True)).group(1)
    assert client.post("/transactions/by-console/abort", data={"csrf_token": token}).status_code == 303

    _open(broker, "by-api")
    assert client.post(f"/v3/clusters/{cluster}/transactions/by-api/admin-abort").status_code == 200

    _open(broker, "by-partition")
    pid = broker.engine.transactions.coordinator.describe("by-partition").producer_id
    assert client.post(f"/v3/clusters/{cluster}/topics/orders/partitions/0/producers/{pid}/abort").status_code == 200

    expected = {"by-client": ("client", "EndTxn(abort) from producer"),
                "by-timeout": ("timeout", "the transaction coordinator: open 10001 ms, transaction.timeout.ms 10000"),
                "by-new-instance": ("fenced", "InitProducerId of a new instance"),
                "by-console": ("admin", "the console, from 127.0.0.1"),
                "by-api": ("admin", "the HTTP API, from 127.0.0.1"),
                "by-partition": ("admin-partition", "the HTTP API, from 127.0.0.1, on orders-0")}
    for txn_id, (cause, actor) in expected.items():
        [row] = _history(broker, txn_id)
        assert row["outcome"] == "ABORT" and row["abort_cause"] == cause, txn_id
        assert row["abort_actor"].startswith(actor), (txn_id, row["abort_actor"])
    lines = _abort_lines(caplog)
    assert len(lines) == len(expected), lines
    for txn_id, (cause, actor) in expected.items():
        [line] = [line for line in lines if f"'{txn_id}'" in line]
        assert f"cause={cause} actor={actor}" in line and "orders-0" in line, line

    # the mirror rebuilt from the logs has every reason again
    broker.mirror.rebuild()
    assert {txn_id: _history(broker, txn_id)[0]["abort_cause"] for txn_id in expected} == \
        {txn_id: cause for txn_id, (cause, _) in expected.items()}
    # the transaction's page says it: its current state, and its history
    page = client.get("/transactions/by-timeout").get_data(as_text=True)
    assert page.count('data-abort-cause="timeout"') == 2 and "its transaction timed out" in page

    # a committed transaction has no abort reason
    committed = _open(broker, "committed")
    committed.commit_transaction()
    [row] = _history(broker, "committed")
    assert (row["outcome"], row["abort_cause"], row["abort_actor"]) == ("COMMIT", None, None)
    with pytest.raises(ProducerFencedError, match="its transaction timed out"):
        late.commit_transaction()


def test_a_producer_fenced_by_its_timeout_is_told_so(orders: Broker, clock: FakeClock):
    broker = orders
    producer = _open(broker, "slow", timeout_ms=5_000)
    clock.advance(5_001)
    broker.engine.call(broker.engine.jobs.abort_timed_out_transactions)
    with pytest.raises(ProducerFencedError) as raised:
        producer.commit_transaction()
    assert "its transaction timed out" in str(raised.value) and "transaction.timeout.ms 5000" in str(raised.value)

    # a produce of the old epoch: the coordinator's verification says the same
    tc = broker.engine.transactions.coordinator
    meta = tc.describe("slow")
    with pytest.raises(InvalidProducerEpochError, match="its transaction timed out"):
        tc.verify_transaction(meta.producer_id, meta.producer_epoch - 1, "orders", 0)

    # over HTTP, the error's message says it too
    client = create_app(broker.engine, test_config={"TESTING": True}).test_client()
    cluster = broker.engine.topics.cluster_id
    answer = client.post(f"/v3/clusters/{cluster}/transactions/slow/commit",
                         json={"producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch - 1})
    assert answer.status_code == 409 and "its transaction timed out" in answer.get_json()["message"]

    # a producer fenced by a new instance is not told it timed out
    other = _open(broker, "zombie")
    broker.producer(transactional_id="zombie").init_transactions()
    with pytest.raises(ProducerFencedError) as raised:
        other.commit_transaction()
    assert "fenced by a new instance" in str(raised.value) and "timed out" not in str(raised.value)


def test_the_reason_survives_a_restart(tmp_path: Path, clock: FakeClock):
    config = {**SMALL_INTERNAL_TOPICS, **FROZEN}
    with Broker(tmp_path / "data", clock=clock, **config) as broker:
        broker.create_topic("orders", 1)
        producer = _open(broker, "slow", timeout_ms=5_000)
        pid, epoch = producer.producer_id, producer.producer_epoch
        clock.advance(5_001)
        broker.engine.call(broker.engine.jobs.abort_timed_out_transactions)
    with Broker(tmp_path / "data", clock=clock, **config) as broker:
        tc = broker.engine.transactions.coordinator
        with pytest.raises(KafkaError, match="its transaction timed out"):
            broker.engine.call(tc.end_txn, "slow", pid, epoch, True)
        [row] = _history(broker, "slow")
        assert row["abort_cause"] == "timeout"


@settings(max_examples=200)
@given(transit=st.builds(
    TxnTransitMetadata, producer_id=st.integers(0, 2**63 - 1), last_producer_id=st.just(-1),
    producer_epoch=st.integers(0, 32767), last_producer_epoch=st.just(-1),
    txn_timeout_ms=st.integers(1, 2**31 - 1), state=st.sampled_from(list(TransactionState)).filter(
        lambda s: s is not TransactionState.PREPARE_EPOCH_FENCE),
    partitions=st.frozensets(st.tuples(st.sampled_from(["a", "orders"]), st.integers(0, 9)), max_size=4),
    txn_start_timestamp=st.integers(-1, 2**62), txn_last_update_timestamp=st.integers(0, 2**62),
    abort_reason=st.none() | st.builds(AbortReason, st.sampled_from(list(AbortCause)), st.text(max_size=40))))
def test_abort_reasons_round_trip_through_the_transaction_log(transit):
    """Only an abort keeps its reason (the coordinator never gives another state one)."""
    kept = transit.abort_reason if transit.state.outcome is ControlType.ABORT else None
    record = transaction_log.decode(transaction_log.encode_key("t"), transaction_log.encode_value(transit),
                                    transaction_log.encode_headers(transit))
    assert record.transit.abort_reason == kept
    assert record.transit == replace(transit, abort_reason=kept)


def test_an_unknown_abort_cause_is_a_schema_error():
    headers = ((transaction_log.ABORT_CAUSE_HEADER, b"boredom"), (transaction_log.ABORT_ACTOR_HEADER, b"me"))
    value = transaction_log.encode_value(TxnTransitMetadata(1, -1, 0, -1, 1000, TransactionState.COMPLETE_ABORT,
                                                            frozenset(), 0, 1))
    with pytest.raises(SchemaError, match="abort reason"):
        transaction_log.decode(transaction_log.encode_key("t"), value, headers)


@pytest.mark.timeout(60)
def test_over_the_wire_a_produce_of_the_timed_out_epoch_says_why(tmp_path: Path):
    """Produce v8+ carries an error message per partition: the fenced producer reads
    there that its transaction timed out (EndTxn and AddPartitionsToTxn carry codes only)."""
    from exactly.app.kafka.api import ApiKey
    from exactly.storage.record_batch import SimpleRecord, encode_batch
    from tests.kafka_support import KafkaBroker, raw_connection
    from tests.waiting import eventually

    with KafkaBroker(tmp_path / "data", **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 100}) as kafka:
        kafka.broker.create_topic("t", 1)
        raw = raw_connection(kafka.port)
        try:
            init = raw.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "tx", "transaction_timeout": 1,
                                                            "producer_id": -1, "producer_epoch": -1})
            pid, epoch = init.producer_id, init.producer_epoch
            raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
                "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
            engine = kafka.broker.engine
            eventually(lambda: engine.call(read_models.transaction, engine, "tx")["state"] == "CompleteAbort",
                       what="the timeout's abort")
            records = encode_batch([SimpleRecord(b"late")], producer_id=pid, producer_epoch=epoch,
                                   base_sequence=0, transactional=True)
            response = raw.request(ApiKey.PRODUCE, 9, {
                "transactional_id": "tx", "acks": -1, "timeout": 10_000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]})
            answer = response.responses[0].partition_responses[0]
            assert answer.error_code == 47  # INVALID_PRODUCER_EPOCH, as Kafka answers a Produce
            assert "its transaction timed out" in answer.error_message
        finally:
            raw.close()
