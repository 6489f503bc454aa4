"""Transactions version 2 (KIP-890 part 2) on Apache Kafka and on Exactly: the same raw
requests a Kafka 4 client sends, answers compared field by field -- Produce v12 and
TxnOffsetCommit v5 with no AddPartitionsToTxn / AddOffsetsToTxn before them, EndTxn v5
answering the bumped epoch (and a retry of it), an abort with nothing added, the late
Produce and TxnOffsetCommit of the previous transaction refused -- and Kafka's
``kafka-features describe`` printing the same features."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from exactly.coordinator.transaction_state import TransactionState
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka.differential import (
    END_TXN,
    OFFSET_FETCH,
    PRODUCE,
    TXN_OFFSET_COMMIT,
    Normalizer,
    Peer,
    Recorded,
    compared,
    create_topics,
    fetch,
    plain,
)
from tests.kafka.real_kafka import run_tool

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]


def tv2_scenario(peer: Peer, name: str) -> dict[str, Any]:
    create_topics(peer, {name: (2, {})})
    recorded = Recorded(peer)
    normalize, connection, steps, ask = recorded.normalize, recorded.connection, recorded.steps, recorded.ask
    txn_id, group = name + "-tx", name + "-group"
    pid, epoch = recorded.init_producer_id(txn_id)
    sequences: dict[int, int] = {}

    def batch(partition: int, value: bytes, at_epoch: int, sequence: int | None = None) -> bytes:
        seq = sequences.get(partition, 0) if sequence is None else sequence
        sequences[partition] = seq + 1
        return encode_batch([SimpleRecord(value, timestamp=1_700_000_000_000)], producer_id=pid,
                            producer_epoch=at_epoch, base_sequence=seq, transactional=True)

    def send(step: str, partition: int, records: bytes) -> None:
        ask(step, PRODUCE, 12, {"transactional_id": txn_id, "acks": -1, "timeout": 30_000, "topic_data": [
            {"name": name, "partition_data": [{"index": partition, "records": records}]}]})

    def commit_offsets(step: str, offset: int, at_epoch: int) -> None:
        ask(step, TXN_OFFSET_COMMIT, 5, {"transactional_id": txn_id, "group_id": group, "producer_id": pid,
                                         "producer_epoch": at_epoch, "generation_id": -1, "member_id": "",
                                         "topics": [{"name": name, "partitions": [
                                             {"partition_index": 0, "committed_offset": offset,
                                              "committed_metadata": ""}]}]})

    def end(step: str, commit: bool, at_epoch: int) -> dict:
        return ask(step, END_TXN, 5, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": at_epoch,
                                      "committed": commit})

    send("produce-0", 0, batch(0, b"a", epoch))
    send("produce-1", 1, batch(1, b"b", epoch))
    commit_offsets("offsets", 1, epoch)
    late = batch(0, b"late", epoch)
    committed = end("commit", True, epoch)
    end("commit-retry", True, epoch)
    next_epoch = committed["producer_epoch"]
    sequences.clear()
    send("next-produce", 0, batch(0, b"c", next_epoch))
    send("late-produce", 0, late)
    commit_offsets("late-offsets", 7, epoch)
    aborted = end("abort", False, next_epoch)
    end("abort-nothing-added", False, aborted["producer_epoch"])
    steps["offsets-fetched"] = normalize(plain(connection.request(OFFSET_FETCH, 7, {
        "group_id": group, "require_stable": True, "topics": [{"name": name, "partition_indexes": [0]}]})))
    steps["log-0"] = whole_log(peer, normalize, name, 0)
    steps["log-1"] = whole_log(peer, normalize, name, 1)
    return steps


def whole_log(peer: Peer, normalize: Normalizer, topic: str, partition: int) -> dict[str, Any]:
    """Every batch of the partition up to its last stable offset, read_committed, and the
    aborted transactions (Kafka may answer a fetch with fewer batches than there are)."""
    batches, aborted, offset = [], [], 0
    while True:
        answer = fetch(peer, normalize, topic, partition, isolation_level=1, offset=offset)
        aborted += answer["aborted_transactions"] or []
        if not answer["batches"]:
            return {"batches": batches, "aborted": aborted, "lso": answer["last_stable_offset"]}
        batches += answer["batches"]
        offset = batches[-1]["base_offset"] + batches[-1]["last_offset_delta"] + 1


def test_a_kafka_4_clients_transactions_are_answered_the_same(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, tv2_scenario, "tv2")
    assert kafka["commit"]["producer_epoch"] == kafka["init"]["producer_epoch"] + 1  # the scenario is TV2 on Kafka
    assert kafka["late-produce"]["responses"][0]["partition_responses"][0]["error_code"] != 0
    for step in kafka:
        assert exactly[step] == kafka[step], repr((step, exactly[step], kafka[step]))


def features_described(peer: Peer) -> dict[str, dict[str, str]]:
    """kafka-features describe's lines, ``Feature: name  Key: value ...``, by feature
    name (the epoch left out: each broker's own)."""
    done = run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", peer.bootstrap, "describe")
    assert done.returncode == 0, done.stderr[-3000:]
    described = {}
    for line in done.stdout.splitlines():
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        name = fields.pop("Feature", None)
        if name is not None:
            described[name] = {k: v for k, v in fields.items() if k != "Epoch"}
    return described


def test_kafka_features_describe_shows_transaction_version_2(brokers: tuple[Peer, Peer]) -> None:
    """kafka-features.sh describe (Admin.describeFeatures, i.e. ApiVersions): every feature
    Exactly reports is reported by Kafka the same way; Kafka's others (kraft, share,
    streams, ELR) say what Exactly does not have."""
    kafka, exactly = (features_described(p) for p in brokers)
    assert exactly["transaction.version"] == {"SupportedMinVersion": "0", "SupportedMaxVersion": "2",
                                              "FinalizedVersionLevel": "2"}
    assert set(exactly) == {"transaction.version", "metadata.version", "group.version"}
    assert {name: kafka[name] for name in ("transaction.version", "metadata.version")} == {
        name: exactly[name] for name in ("transaction.version", "metadata.version")}
    assert exactly["group.version"]["SupportedMaxVersion"] == kafka["group.version"]["SupportedMaxVersion"]


@pytest.fixture(params=[2, 1], ids=["tv2", "tv1"])
def versioned_exactly(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, int]]:
    """A fresh Exactly finalizing transaction version 2, then 1 (beside the shared settings)."""
    from exactly.app.testing import broker
    from tests.kafka.conftest import SHARED_CONFIG
    with broker(tmp_path / "exactly-data", **SHARED_CONFIG, **{"transaction.version": request.param}) as server:
        yield server, request.param


def test_kafkas_java_producer_follows_the_finalized_transaction_version(
        versioned_exactly: tuple[Any, int]) -> None:
    """Kafka 4.4's own producer (ProducerPerformance, committing every 50 ms) against
    Exactly: with version 2 finalized it sends no AddPartitionsToTxn and takes the epoch
    every EndTxn v5 bumps; pinned at 1 it keeps its epoch. Every record is committed."""
    exactly_broker, version = versioned_exactly
    peer = Peer("exactly", exactly_broker.bootstrap)
    create_topics(peer, {"perf": (2, {})})
    done = run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", "perf", "--num-records", "3000",
                    "--record-size", "100", "--throughput", "-1", "--transactional-id", "perf-tx",
                    "--transaction-duration-ms", "50", "--producer-props",
                    f"bootstrap.servers={exactly_broker.bootstrap}", timeout=90)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    engine = exactly_broker.engine

    async def describe() -> Any:
        return engine.transactions.describe_transaction("perf-tx")
    meta = engine.call(describe)
    assert meta.state is TransactionState.COMPLETE_COMMIT
    if version == 2:
        assert meta.client_transaction_version == 2 and meta.producer_epoch >= 2  # bumped per transaction
    else:
        assert (meta.client_transaction_version, meta.producer_epoch) == (0, 0)
    counts = [engine.call(engine.partitions.partition_offsets, "perf", p) for p in (0, 1)]
    assert sum(c.last_stable_offset for c in counts) >= 3000
    peer.close()
