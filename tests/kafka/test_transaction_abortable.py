"""KIP-890's TRANSACTION_ABORTABLE on Apache Kafka 4.4 and on Exactly, answers compared
field by field: a transactional Produce to a partition not in the transaction at v10
(INVALID_TXN_STATE) and v11 (TRANSACTION_ABORTABLE), TxnOffsetCommit v3 and v4 for a
group not in it, AddPartitionsToTxn v4/v5 ``VerifyOnly`` (the brokers' form),
AddOffsetsToTxn v4, FindCoordinator v5 -- and nothing of the refused batches in the
log. FindCoordinator v6's share group key differs: Kafka 4.4 has a share coordinator. Exactly alone: tests/test_kafka_transaction_abortable.py."""

from __future__ import annotations

from typing import Any

import pytest

from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka.differential import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    PRODUCE,
    TXN_OFFSET_COMMIT,
    Peer,
    Recorded,
    compared,
    create_topics,
)
from tests.kafka.test_transactions_v2 import whole_log

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]


def abortable_scenario(peer: Peer, name: str) -> dict[str, Any]:
    create_topics(peer, {name: (2, {})})
    recorded = Recorded(peer)
    normalize, steps, ask = recorded.normalize, recorded.steps, recorded.ask
    txn_id, group = name + "-tx", name + "-group"
    pid, epoch = recorded.init_producer_id(txn_id)
    sequences: dict[int, int] = {}

    def send(step: str, version: int, partition: int, appended: bool) -> None:
        seq = sequences.get(partition, 0)
        batch = encode_batch([SimpleRecord(step.encode(), timestamp=1_700_000_000_000)], producer_id=pid,
                             producer_epoch=epoch, base_sequence=seq, transactional=True)
        ask(step, PRODUCE, version, {"transactional_id": txn_id, "acks": -1, "timeout": 30_000, "topic_data": [
            {"name": name, "partition_data": [{"index": partition, "records": batch}]}]})
        if appended:
            sequences[partition] = seq + 1

    def verify(step: str, version: int, *partitions: int) -> None:
        ask(step, ADD_PARTITIONS_TO_TXN, version, {"transactions": [
            {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "verify_only": True,
             "topics": [{"name": name, "partitions": list(partitions)}]}]})

    def commit_offsets(step: str, version: int) -> None:
        ask(step, TXN_OFFSET_COMMIT, version, {
            "transactional_id": txn_id, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "topics": [{"name": name, "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})

    def find(step: str, version: int, key_type: int, key: str) -> None:
        ask(step, FIND_COORDINATOR, version, {"key_type": key_type, "coordinator_keys": [key]})

    ask("add-0", ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": name, "partitions": [0]}]})
    send("produce-v11-added", 11, 0, appended=True)
    send("produce-v10-not-added", 10, 1, appended=False)
    send("produce-v11-not-added", 11, 1, appended=False)
    verify("verify-v5", 5, 0, 1)
    verify("verify-v4", 4, 1)
    commit_offsets("offsets-v3-not-added", 3)
    commit_offsets("offsets-v4-not-added", 4)
    ask("add-offsets-v4", ADD_OFFSETS_TO_TXN, 4, {"transactional_id": txn_id, "producer_id": pid,
                                                  "producer_epoch": epoch, "group_id": group})
    commit_offsets("offsets-v4-added", 4)
    ask("commit", END_TXN, 3, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                               "committed": True})
    find("find-group-v5", 5, 0, group)
    find("find-txn-v5", 5, 1, txn_id)
    find("find-share-v5", 5, 2, f"{group}:AAAAAAAAAAAAAAAAAAAAAA:0")
    find("find-share-v6", 6, 2, f"{group}:AAAAAAAAAAAAAAAAAAAAAA:0")
    steps["log-0"] = whole_log(peer, normalize, name, 0)
    steps["log-1"] = whole_log(peer, normalize, name, 1)
    return steps


def test_transaction_abortable_is_answered_the_same(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, abortable_scenario, "abortable")
    assert [kafka[s]["responses"][0]["partition_responses"][0]["error_code"]
            for s in ("produce-v11-added", "produce-v10-not-added", "produce-v11-not-added")] == [0, 48, 120]
    # Kafka 4.4 has a share coordinator (KIP-932); Exactly answers as Kafka does without one
    assert kafka.pop("find-share-v6")["coordinators"][0]["error_code"] == 0
    assert exactly.pop("find-share-v6")["coordinators"][0]["error_code"] == 15  # COORDINATOR_NOT_AVAILABLE
    for step in kafka:
        assert exactly[step] == kafka[step], repr((step, exactly[step], kafka[step]))
