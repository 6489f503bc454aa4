"""KIP-890's TRANSACTION_ABORTABLE on the wire, at the versions that know it, and the
codes older versions get instead (Kafka's AddPartitionsToTxnManager and ReplicaManager):

- Produce v11+: a transactional batch whose partition is not in its producer's Ongoing
  transaction is TRANSACTION_ABORTABLE; below v11 INVALID_TXN_STATE; below v12 a
  transaction that is completing is NOT_ENOUGH_REPLICAS instead of CONCURRENT_TRANSACTIONS;
- TxnOffsetCommit v4+: the same for a group not in the transaction (below v4 INVALID_TXN_STATE);
- AddPartitionsToTxn v4/v5: the brokers' batched form, ``VerifyOnly`` or an add;
- FindCoordinator v5/v6 (a share group's key: no share coordinator here), AddOffsetsToTxn v4.

The same answers from Apache Kafka 4.4: tests/kafka/test_transaction_abortable.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from exactly.app.kafka.wire import ApiKey, CoordinatorType
from exactly.coordinator.transaction_state import TransactionState
from tests.kafka_support import KafkaBroker, raw_connection
from tests.raw_producer import RawProducer
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

T = "abortable"
GROUP = "abortable-group"
UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS = 3, 15, 19
INVALID_REQUEST, INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS = 42, 48, 51
OPERATION_NOT_ATTEMPTED, PRODUCER_FENCED, TRANSACTION_ABORTABLE = 55, 90, 120
GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 30, 31


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **{"transaction.version": 1}) as k:
        k.broker.create_topic(T, partitions=2)
        yield k


@pytest.fixture
def producer(kafka: KafkaBroker) -> Iterator[RawProducer]:
    with RawProducer(kafka, "abortable-tx", T, GROUP, end_version=3) as p:
        yield p


def high_watermark(kafka: KafkaBroker, partition: int) -> int:
    return kafka.broker.list_offsets(T, partition, -1)


def test_a_batch_outside_the_transaction_is_transaction_abortable_from_produce_v11(
        kafka: KafkaBroker, producer: RawProducer) -> None:
    producer.add_partitions(0)
    assert producer.send_value(11, 0).error_code == 0
    older = producer.send_value(10, 1)
    assert (older.error_code, older.base_offset) == (INVALID_TXN_STATE, -1)
    assert "not part of an ongoing transaction" in older.error_message
    for version in (11, 12):  # v12 on a transaction.version 1 cluster is only verified
        assert producer.send_value(version, 1).error_code == TRANSACTION_ABORTABLE
    assert high_watermark(kafka, 1) == 0, "nothing appended"
    assert producer.end(commit=True).error_code == 0
    # after the end nothing is open: the same answers
    assert [producer.send_value(v, 0).error_code for v in (9, 11)] == [INVALID_TXN_STATE, TRANSACTION_ABORTABLE]


def test_a_group_outside_the_transaction_is_transaction_abortable_from_txn_offset_commit_v4(
        producer: RawProducer) -> None:
    producer.add_partitions(0)
    assert [producer.commit_offsets(1, v) for v in (3, 4, 5)] == [INVALID_TXN_STATE, TRANSACTION_ABORTABLE,
                                                               TRANSACTION_ABORTABLE]
    answer = producer.conn.request(ApiKey.ADD_OFFSETS_TO_TXN, 4, {
        "transactional_id": producer.txn_id, "producer_id": producer.pid, "producer_epoch": producer.epoch,
        "group_id": GROUP})
    assert answer.error_code == 0
    assert producer.commit_offsets(1, 4) == 0


def test_a_completing_transaction_is_not_enough_replicas_below_produce_v12(
        kafka: KafkaBroker, producer: RawProducer) -> None:
    """The transaction's markers are held (a fault on the coordinator's marker writes), so
    it stays PrepareCommit: a batch of it meanwhile is CONCURRENT_TRANSACTIONS to the
    coordinator, which clients below Produce v12 are told as NOT_ENOUGH_REPLICAS
    (retriable, no metadata refresh), as Kafka's ReplicaManager tells them."""
    producer.add_partitions(0)
    assert producer.send_value(9, 0).error_code == 0
    held = kafka.broker.faults.add(api="WriteTxnMarkers", action="no-answer")
    ended: list[int] = []
    ender = threading.Thread(target=lambda: ended.append(producer.end(commit=True).error_code), daemon=True)
    ender.start()
    eventually(lambda: kafka.engine.call(_state, kafka, producer.txn_id) is TransactionState.PREPARE_COMMIT,
               timeout=30, what="the commit waits for its markers")
    second = raw_connection(kafka.port)
    try:
        answers = {v: producer.send_value(v, 0, conn=second) for v in (10, 11, 12)}
    finally:
        second.sock.close()
        held.remove()
    assert {v: a.error_code for v, a in answers.items()} == {
        10: NOT_ENOUGH_REPLICAS, 11: NOT_ENOUGH_REPLICAS, 12: CONCURRENT_TRANSACTIONS}
    assert "Underlying error: CONCURRENT_TRANSACTIONS" in answers[10].error_message
    ender.join(timeout=30)
    assert ended == [0]
    assert high_watermark(kafka, 0) == 2, "the batch and its marker"


async def _state(kafka: KafkaBroker, txn_id: str) -> TransactionState:
    return kafka.engine.transactions.describe_transaction(txn_id).state


def _brokers_form(kafka: KafkaBroker, version: int, *transactions: dict) -> Any:
    conn = raw_connection(kafka.port)
    try:
        return conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": list(transactions)})
    finally:
        conn.sock.close()


def _codes(answer: Any) -> dict[str, dict[tuple[str, int], int]]:
    return {txn.transactional_id: {(t.name, p.partition_index): p.partition_error_code
                                   for t in txn.topic_results for p in t.results_by_partition}
            for txn in answer.results_by_transaction}


def test_add_partitions_to_txn_v4_and_v5_answer_a_brokers_verification(kafka: KafkaBroker,
                                                                        producer: RawProducer) -> None:
    producer.add_partitions(0)
    other = RawProducer(kafka, "abortable-other", T, GROUP, end_version=3)
    try:
        def verify(p: RawProducer, *partitions: int, epoch: int | None = None) -> dict:
            return {"transactional_id": p.txn_id, "producer_id": p.pid,
                    "producer_epoch": p.epoch if epoch is None else epoch, "verify_only": True,
                    "topics": [{"name": T, "partitions": list(partitions)}]}

        answer = _brokers_form(kafka, 5, verify(producer, 0, 1), verify(other, 0))
        assert answer.error_code == 0
        assert _codes(answer) == {producer.txn_id: {(T, 0): 0, (T, 1): TRANSACTION_ABORTABLE},
                                  other.txn_id: {(T, 0): TRANSACTION_ABORTABLE}}
        # at v4 too: the broker that asked translates it for its Produce's client
        assert _codes(_brokers_form(kafka, 4, verify(producer, 1))) == {
            producer.txn_id: {(T, 1): TRANSACTION_ABORTABLE}}
        fenced = _brokers_form(kafka, 5, verify(producer, 0, epoch=producer.epoch + 1))
        assert _codes(fenced) == {producer.txn_id: {(T, 0): PRODUCER_FENCED}}
        unknown = _brokers_form(kafka, 5, {**verify(producer, 0), "topics": [
            {"name": T, "partitions": [0]}, {"name": "no-such-topic", "partitions": [0]}]})
        assert _codes(unknown) == {producer.txn_id: {(T, 0): OPERATION_NOT_ATTEMPTED,
                                                     ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}}
        # not VerifyOnly: the broker's add (transaction version 2); then the batch is let in
        added = _brokers_form(kafka, 5, {**verify(other, 1), "verify_only": False})
        assert _codes(added) == {other.txn_id: {(T, 1): 0}}
        assert other.send_value(11, 1).error_code == 0
        assert other.end(commit=True).error_code == 0
        assert high_watermark(kafka, 1) == 2, "the batch and its marker"
        assert high_watermark(kafka, 0) == 0, "nothing of a verification is written"
    finally:
        other.close()


def _find(kafka: KafkaBroker, version: int, key_type: int, key: str) -> Any:
    conn = raw_connection(kafka.port)
    try:
        answer = conn.request(ApiKey.FIND_COORDINATOR, version, {"key_type": key_type, "coordinator_keys": [key]})
        return answer.coordinators[0]
    finally:
        conn.sock.close()


def test_find_coordinator_v5_and_v6(kafka: KafkaBroker) -> None:
    """v5 finds groups and transactions as v4 does; a share group's key (KIP-932) is
    INVALID_REQUEST below v6 and, with no share coordinator on this broker,
    COORDINATOR_NOT_AVAILABLE at v6 -- what Kafka answers without one."""
    for version in (5, 6):
        for key_type in (CoordinatorType.GROUP, CoordinatorType.TRANSACTION):
            found = _find(kafka, version, key_type, "some-key")
            assert (found.error_code, found.port) == (0, kafka.port)
    share_key = "share-group:AAAAAAAAAAAAAAAAAAAAAA:0"
    assert _find(kafka, 5, CoordinatorType.SHARE, share_key).error_code == INVALID_REQUEST
    share = _find(kafka, 6, CoordinatorType.SHARE, share_key)
    assert (share.key, share.error_code, share.node_id) == (share_key, COORDINATOR_NOT_AVAILABLE, -1)
    assert _find(kafka, 6, 7, "x").error_code == INVALID_REQUEST


def test_a_share_key_needs_cluster_action(tmp_path: Path) -> None:
    """Kafka's ``getCoordinator``: a share key is looked up by brokers, with ClusterAction
    on the cluster; without it CLUSTER_AUTHORIZATION_FAILED, before anything else."""
    standard = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    with KafkaBroker(tmp_path / "data", **standard) as kafka:
        share = _find(kafka, 6, CoordinatorType.SHARE, "share-group:AAAAAAAAAAAAAAAAAAAAAA:0")
        assert (share.error_code, share.node_id) == (CLUSTER_AUTHORIZATION_FAILED, -1)
        assert _find(kafka, 6, CoordinatorType.GROUP, "g").error_code == GROUP_AUTHORIZATION_FAILED
