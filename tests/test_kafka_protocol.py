"""The Kafka listener at the protocol level: single requests at exact versions over a
raw socket (kio-encoded), for what real clients rely on but never show directly --
version negotiation, ordering of pipelined responses, acks=0, long polling, size
limits, version-dependent error codes."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.kafka import APIS
from exactly.app.kafka.api import ApiKey
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka_support import SOFTWARE, KafkaBroker, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        yield k


@pytest.fixture
def raw(kafka: KafkaBroker) -> Iterator[KafkaConnection]:
    client = raw_connection(kafka.port)
    yield client
    client.close()


def batch(*values: bytes, producer_id: int = -1, epoch: int = -1, sequence: int = -1,
          transactional: bool = False) -> bytes:
    return encode_batch([SimpleRecord(v, key=b"k") for v in values], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, transactional=transactional)


def produce_body(topic: str, partition: int, records: bytes, acks: int = -1,
                 transactional_id: str | None = None) -> dict:
    return {"transactional_id": transactional_id, "acks": acks, "timeout": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def fetch_body(topic: str, partitions: list[int], offset: int = 0, max_wait_ms: int = 0, min_bytes: int = 1,
               max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20, isolation_level: int = 0) -> dict:
    return {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes}
                for p in partitions]}]}


def only_partition(response, field: str = "responses", partitions: str = "partitions"):
    return getattr(response, field)[0].__getattribute__(partitions)[0]


# -- ApiVersions ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_advertises_every_handler_at_its_declared_versions(raw: KafkaConnection, version: int) -> None:
    response = raw.request(ApiKey.API_VERSIONS, version, {"client_software_name": "raw-test",
                                                          "client_software_version": "1.0"})
    assert response.error_code == 0
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == {a.key: (a.min_version, a.max_version) for a in APIS.values() if a.advertised}
    assert advertised[ApiKey.WRITE_TXN_MARKERS] == (1, 2)  # Admin.abortTransaction's, KIP-664
    assert advertised[ApiKey.PRODUCE] == (3, 13) and advertised[ApiKey.FETCH] == (4, 18)  # Produce v13: topic ids
    assert advertised[ApiKey.INIT_PRODUCER_ID] == (0, 6)  # v3+ KIP-360's epoch bump, v6 KIP-939's 2PC


def test_api_versions_at_an_unknown_version_answers_unsupported_version_in_v0(raw: KafkaConnection) -> None:
    """librdkafka tries v3, kafka-python v4; a newer client may try more and must be
    told, in the v0 format it can always parse, which range to use instead."""
    client_id = b"future-client"
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 9, 41, len(client_id)) + client_id + b"\x00"
    body = b"\x05name\x041.0\x00"  # compact strings and an empty tagged-field section
    raw.sock.sendall(struct.pack(">i", len(header + body)) + header + body)
    correlation_id, response = raw.receive(ApiKey.API_VERSIONS, 0)
    assert correlation_id == 41
    assert response.error_code == 35  # UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 4)]
    assert raw.request(ApiKey.API_VERSIONS, 3, SOFTWARE).error_code == 0  # the retry at v3 works


def test_an_unknown_api_or_unsupported_version_closes_only_that_connection(kafka: KafkaBroker) -> None:
    bad = raw_connection(kafka.port, client_id="bad")
    bad.sock.sendall(struct.pack(">ihhih", 10, 9999, 0, 1, -1))
    assert bad.closed_by_peer()
    old = raw_connection(kafka.port, client_id="bad")
    old.sock.sendall(struct.pack(">ihhih", 10, ApiKey.METADATA, 99, 1, -1))  # Metadata v99: Kafka closes
    assert old.closed_by_peer()
    good = raw_connection(kafka.port)
    assert good.request(ApiKey.METADATA, 8, {"topics": None}).brokers[0].port == kafka.port


# -- ordering, acks=0 -------------------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    """A long-polling fetch first, then two instant requests: the instant ones wait
    their turn, and every response carries its request's correlation id."""
    kafka.broker.create_topic("t", 1)
    frames = [raw.frame(ApiKey.FETCH, 11, fetch_body("t", [0], max_wait_ms=300), correlation_id=7),
              raw.frame(ApiKey.METADATA, 8, {"topics": None}, correlation_id=8),
              raw.frame(ApiKey.API_VERSIONS, 3, SOFTWARE, correlation_id=9)]
    raw.sock.sendall(b"".join(frames))
    assert raw.receive(ApiKey.FETCH, 11)[0] == 7
    assert raw.receive(ApiKey.METADATA, 8)[0] == 8
    assert raw.receive(ApiKey.API_VERSIONS, 3)[0] == 9


def test_produce_with_acks_0_gets_no_response(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    raw.send(ApiKey.PRODUCE, 9, produce_body("t", 0, batch(b"fire-and-forget"), acks=0), correlation_id=1)
    raw.send(ApiKey.METADATA, 8, {"topics": None}, correlation_id=2)
    assert raw.receive(ApiKey.METADATA, 8)[0] == 2  # the next response is the metadata one
    eventually(lambda: kafka.broker.list_offsets("t", 0, -1) == 1, what="the acks=0 record")


def test_a_failed_acks_0_produce_closes_the_connection(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    raw.send(ApiKey.PRODUCE, 9, produce_body("missing", 0, batch(b"v"), acks=0))
    assert raw.closed_by_peer()  # the only way an acks=0 producer learns of an error


@pytest.mark.parametrize("version", [3, 7, 9])
def test_produce_answers_offsets_and_per_partition_errors(kafka: KafkaBroker, raw: KafkaConnection,
                                                          version: int) -> None:
    kafka.broker.create_topic("t", 1)
    body = produce_body("t", 0, batch(b"a", b"b"))
    body["topic_data"].append({"name": "missing", "partition_data": [{"index": 0, "records": batch(b"c")}]})
    response = raw.request(ApiKey.PRODUCE, version, body)
    results = {t.name: t.partition_responses[0] for t in response.responses}
    assert (results["t"].error_code, results["t"].base_offset) == (0, 0)
    assert results["missing"].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert kafka.broker.list_offsets("t", 0, -1) == 2


def test_transactional_batches_need_the_request_transactional_id(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    records = batch(b"v", producer_id=5, epoch=0, sequence=0, transactional=True)
    response = raw.request(ApiKey.PRODUCE, 9, produce_body("t", 0, records))
    assert only_partition(response, partitions="partition_responses").error_code == 53
    assert kafka.broker.list_offsets("t", 0, -1) == 0


def test_corrupt_batch_is_corrupt_message_and_leaves_the_log_alone(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    damaged = bytearray(batch(b"v"))
    damaged[-1] ^= 0xFF
    response = raw.request(ApiKey.PRODUCE, 9, produce_body("t", 0, bytes(damaged)))
    assert only_partition(response, partitions="partition_responses").error_code == 2
    assert kafka.broker.list_offsets("t", 0, -1) == 0


# -- fetch ----------------------------------------------------------------------------------------


def test_a_long_polling_fetch_is_woken_by_an_append(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    raw.send(ApiKey.FETCH, 11, fetch_body("t", [0], max_wait_ms=30_000))
    eventually(lambda: kafka.engine.partitions._data_waiters.get(("t", 0)), what="the fetch to wait")
    started = time.monotonic()
    kafka.broker.produce("t", 0, batch(b"late"))
    _, response = raw.receive(ApiKey.FETCH, 11)
    assert time.monotonic() - started < 15  # woken by the append, not by max_wait
    partition = only_partition(response)
    assert partition.records and partition.high_watermark == 1


def test_a_read_committed_fetch_is_woken_by_the_commit_marker(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    producer = kafka.broker.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"pending", partition=0).get(10)
    first = raw.request(ApiKey.FETCH, 11, fetch_body("t", [0], isolation_level=1))
    assert not only_partition(first).records and only_partition(first).last_stable_offset == 0
    raw.send(ApiKey.FETCH, 11, fetch_body("t", [0], max_wait_ms=30_000, isolation_level=1))
    eventually(lambda: kafka.engine.partitions._data_waiters.get(("t", 0)), what="the fetch to wait")
    producer.commit_transaction()
    partition = only_partition(raw.receive(ApiKey.FETCH, 11)[1])
    assert partition.records and partition.last_stable_offset == 2  # the record and its marker
    assert partition.aborted_transactions == ()


def test_read_committed_fetch_reports_aborted_transactions(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    producer = kafka.broker.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"doomed", partition=0).get(10)
    producer.abort_transaction()
    committed = only_partition(raw.request(ApiKey.FETCH, 11, fetch_body("t", [0], isolation_level=1)))
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(producer.producer_id, 0)]
    uncommitted = only_partition(raw.request(ApiKey.FETCH, 11, fetch_body("t", [0], isolation_level=0)))
    assert uncommitted.aborted_transactions is None and uncommitted.records == committed.records


def test_fetch_size_limits_follow_kip_74(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 2)
    for partition in (0, 1):
        for i in range(3):
            kafka.broker.produce("t", partition, batch(bytes(1000)))
    one_batch = len(batch(bytes(1000)))
    # a partition limit below one batch still returns the first batch (progress) ...
    tiny = raw.request(ApiKey.FETCH, 11, fetch_body("t", [0, 1], partition_max_bytes=10))
    sizes = [len(p.records) for p in tiny.responses[0].partitions]
    assert sizes == [one_batch, 0]  # ... but only for the first partition with data
    # the response limit is shared: the first partition takes what fits, the second the rest
    shared = raw.request(ApiKey.FETCH, 11, fetch_body("t", [0, 1], max_bytes=int(one_batch * 2.5)))
    assert [len(p.records) for p in shared.responses[0].partitions] == [2 * one_batch, 0]


def test_fetch_errors_per_partition(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    out_of_range = raw.request(ApiKey.FETCH, 11, fetch_body("t", [0], offset=5, max_wait_ms=10_000))
    assert only_partition(out_of_range).error_code == 1  # answered at once, without waiting
    unknown = raw.request(ApiKey.FETCH, 11, fetch_body("t", [7]))
    assert only_partition(unknown).error_code == 3


def test_fetch_sessions_are_answered_sessionless(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    body = fetch_body("t", [0])
    body["session_epoch"] = 0  # "create a session" (kafka-python does this)
    assert raw.request(ApiKey.FETCH, 11, body).session_id == 0
    body.update(session_id=1234, session_epoch=1)
    assert raw.request(ApiKey.FETCH, 11, body).error_code == 70  # FETCH_SESSION_ID_NOT_FOUND


# -- metadata and offsets ------------------------------------------------------------------------------


def test_metadata_creates_requested_topics_when_allowed(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "d", **{"num.partitions": 3}) as kafka:
        raw = raw_connection(kafka.port)
        created = raw.request(ApiKey.METADATA, 8, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True})
        assert created.topics[0].error_code == 0 and len(created.topics[0].partitions) == 3
        assert created.brokers[0].port == kafka.port and created.controller_id == created.brokers[0].node_id
        refused = raw.request(ApiKey.METADATA, 8, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": False})
        assert refused.topics[0].error_code == 3
        illegal = raw.request(ApiKey.METADATA, 8, {"topics": [{"name": "a/b"}]})
        assert illegal.topics[0].error_code == 17  # INVALID_TOPIC_EXCEPTION
    with KafkaBroker(tmp_path / "e", **{"auto.create.topics.enable": "false"}) as kafka:
        raw = raw_connection(kafka.port)
        assert raw.request(ApiKey.METADATA, 8, {"topics": [{"name": "auto"}]}).topics[0].error_code == 3


def test_advertised_listeners_is_what_clients_are_told(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "d", **{"advertised.listeners": "PLAINTEXT://kafka.example:19092"}) as kafka:
        raw = raw_connection(kafka.port)
        broker = raw.request(ApiKey.METADATA, 8, {"topics": []}).brokers[0]
        assert (broker.host, broker.port) == ("kafka.example", 19092)
        coordinator = raw.request(ApiKey.FIND_COORDINATOR, 2, {"key": "tx", "key_type": 1})
        assert (coordinator.host, coordinator.port) == ("kafka.example", 19092)


def test_find_coordinator_v4_answers_every_key(raw: KafkaConnection, kafka: KafkaBroker) -> None:
    response = raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["a", "b"]})
    assert [(c.key, c.error_code, c.port) for c in response.coordinators] == [("a", 0, kafka.port),
                                                                              ("b", 0, kafka.port)]


def test_list_offsets_latest_is_the_lso_under_read_committed(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    kafka.broker.produce("t", 0, encode_batch([SimpleRecord(b"old", timestamp=1000)]))
    producer = kafka.broker.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"open", partition=0).get(10)

    def offsets(timestamp: int, isolation_level: int) -> tuple[int, int]:
        body = {"replica_id": -1, "isolation_level": isolation_level,
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]}
        partition = only_partition(raw.request(ApiKey.LIST_OFFSETS, 5, body), field="topics")
        assert partition.error_code == 0
        return partition.offset, partition.timestamp

    assert offsets(-1, 1)[0] == 1  # the LSO: the open transaction starts at 1
    assert offsets(-1, 0)[0] == 2  # the high watermark
    assert offsets(-2, 1)[0] == 0
    assert offsets(500, 0) == (0, 1000)
    assert offsets(10**15, 0) == (-1, -1)


def test_offset_fetch_require_stable_waits_for_pending_transactional_offsets(kafka: KafkaBroker,
                                                                            raw: KafkaConnection) -> None:
    kafka.broker.create_topic("in", 1)
    producer = kafka.broker.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({("in", 0): 5}, "g")
    body = {"group_id": "g", "topics": [{"name": "in", "partition_indexes": [0]}], "require_stable": True}
    assert only_partition(raw.request(ApiKey.OFFSET_FETCH, 7, body), field="topics").error_code == 88
    producer.commit_transaction()
    stable = only_partition(raw.request(ApiKey.OFFSET_FETCH, 7, body), field="topics")
    assert (stable.error_code, stable.committed_offset) == (0, 5)


def test_offset_for_leader_epoch_answers_the_one_epoch(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    kafka.broker.produce("t", 0, batch(b"a", b"b"))
    body = {"replica_id": -1, "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}]}]}
    partition = only_partition(raw.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, body), field="topics")
    assert (partition.error_code, partition.leader_epoch, partition.end_offset) == (0, 0, 2)
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = 3
    partition = only_partition(raw.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, body), field="topics")
    assert partition.error_code == 75  # UNKNOWN_LEADER_EPOCH


# -- transactions: version-dependent errors ---------------------------------------------------------------


def test_a_fenced_producer_hears_producer_fenced_only_from_versions_that_know_it(raw: KafkaConnection,
                                                                                kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("t", 1)
    init = {"transactional_id": "tx", "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
    old = raw.request(ApiKey.INIT_PRODUCER_ID, 4, init)
    new = raw.request(ApiKey.INIT_PRODUCER_ID, 4, init)
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)

    def add_partitions(version: int) -> int:
        body = {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": old.producer_id,
                "v3_and_below_producer_epoch": old.producer_epoch,
                "v3_and_below_topics": [{"name": "t", "partitions": [0]}]}
        response = raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, body)
        return response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    def end_txn(version: int) -> int:
        return raw.request(ApiKey.END_TXN, version, {"transactional_id": "tx", "producer_id": old.producer_id,
                                                     "producer_epoch": old.producer_epoch, "committed": True}).error_code

    assert [add_partitions(v) for v in (0, 1, 2, 3)] == [47, 47, 90, 90]
    assert [end_txn(v) for v in (0, 1, 2, 3)] == [47, 47, 90, 90]
    bump = {**init, "producer_id": old.producer_id, "producer_epoch": old.producer_epoch}
    assert [raw.request(ApiKey.INIT_PRODUCER_ID, v, bump).error_code for v in (3, 4)] == [47, 90]


def test_kip_360_epoch_bump_through_init_producer_id(raw: KafkaConnection) -> None:
    init = {"transactional_id": "tx", "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
    first = raw.request(ApiKey.INIT_PRODUCER_ID, 4, init)
    bump = {**init, "producer_id": first.producer_id, "producer_epoch": first.producer_epoch}
    bumped = raw.request(ApiKey.INIT_PRODUCER_ID, 4, bump)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, first.producer_id, 1)
    assert raw.request(ApiKey.INIT_PRODUCER_ID, 4, bump).producer_epoch == 1  # a retried bump


def test_init_producer_id_checks_the_transaction_timeout(raw: KafkaConnection) -> None:
    body = {"transactional_id": "tx", "transaction_timeout": 2_000_000_000}
    assert raw.request(ApiKey.INIT_PRODUCER_ID, 0, body).error_code == 50  # INVALID_TRANSACTION_TIMEOUT
    assert raw.request(ApiKey.INIT_PRODUCER_ID, 0, {**body, "transactional_id": ""}).error_code == 42


def test_write_txn_markers_from_a_client_aborts_the_open_transaction_and_never_commits(
        kafka: KafkaBroker, raw: KafkaConnection) -> None:
    """Kafka's ``Admin.abortTransaction`` (kafka-transactions.sh abort) sends an ABORT
    marker for a producer's open transaction on one partition: the transaction ends
    (through its coordinator) and the LSO moves. A COMMIT marker from a client is
    refused, and one for a producer with nothing open is INVALID_TXN_STATE."""
    from tests.raw_txn import RawTxn

    kafka.broker.create_topic("t", 1)
    txn = RawTxn(kafka.broker, "tx")
    txn.send("t", 0, b"held")

    def marker(commit: bool) -> int:
        body = {"markers": [{"producer_id": txn.pid, "producer_epoch": txn.epoch, "transaction_result": commit,
                             "coordinator_epoch": 0, "topics": [{"name": "t", "partition_indexes": [0]}]}]}
        return raw.request(ApiKey.WRITE_TXN_MARKERS, 1, body).markers[0].topics[0].partitions[0].error_code

    assert marker(commit=True) == 42  # INVALID_REQUEST
    assert kafka.broker.list_offsets("t", 0, -1, isolation_level="read_committed") == 0
    assert marker(commit=False) == 0
    assert kafka.broker.list_offsets("t", 0, -1, isolation_level="read_committed") == 2  # record + ABORT
    assert kafka.broker.engine.transactions.describe_transaction("tx").producer_epoch == txn.epoch + 1  # fenced
    assert marker(commit=False) == 48  # INVALID_TXN_STATE: nothing open any more


def test_write_txn_markers_v2_checks_the_markers_epoch_by_its_transaction_version(
        kafka: KafkaBroker, raw: KafkaConnection) -> None:
    """KIP-1228: a marker of transaction version 2 must carry an epoch newer than the
    producer's on the partition (a version 2 coordinator's marker has the bumped one),
    one of version 0/1 an epoch at least as new; else INVALID_PRODUCER_EPOCH and the
    transaction stays open. What kafka-transactions.sh abort sends (version 0, the
    producer's epoch) aborts it."""
    from tests.raw_txn import RawTxn

    kafka.broker.create_topic("t", 1)
    RawTxn(kafka.broker, "tx")
    txn = RawTxn(kafka.broker, "tx")  # the second InitProducerId: epoch 1
    txn.send("t", 0, b"held")

    def marker(version: int, epoch: int, transaction_version: int = 0) -> int:
        body = {"markers": [{"producer_id": txn.pid, "producer_epoch": epoch, "transaction_result": False,
                             "coordinator_epoch": 0, "transaction_version": transaction_version,
                             "topics": [{"name": "t", "partition_indexes": [0]}]}]}
        return raw.request(ApiKey.WRITE_TXN_MARKERS, version, body).markers[0].topics[0].partitions[0].error_code

    def stable() -> int:
        return kafka.broker.list_offsets("t", 0, -1, isolation_level="read_committed")

    assert txn.epoch == 1
    assert marker(1, txn.epoch - 1) == 47  # INVALID_PRODUCER_EPOCH
    assert marker(2, txn.epoch - 1, transaction_version=0) == 47
    assert marker(2, txn.epoch, transaction_version=2) == 47  # version 2: not newer
    assert stable() == 0 and kafka.broker.engine.transactions.is_open("tx")
    assert marker(2, txn.epoch, transaction_version=0) == 0
    assert stable() == 2  # record + ABORT


# -- admin and operator APIs -------------------------------------------------------------------------------


def test_list_config_resources_lists_the_topics_and_this_broker(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    """KIP-1142: every topic a client may see and broker 1; a type Kafka does not list
    refuses the request; v0 (client metrics resources) lists none. As Kafka 4.4 answers:
    tests/kafka/test_list_config_resources.py."""
    kafka.broker.create_topic("t", 1)
    raw.request(ApiKey.UPDATE_FEATURES, 1, {"timeout": 5000, "validate_only": False, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}]})  # a record there
    assert kafka.broker.engine.topics.topic_info("__cluster_metadata") is not None
    listed = raw.request(ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": []})
    assert listed.error_code == 0
    assert {(r.resource_name, r.resource_type) for r in listed.config_resources} >= {("t", 2), ("1", 4)}
    assert "__cluster_metadata" not in {r.resource_name for r in listed.config_resources}
    assert [r.resource_name for r in raw.request(ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [4]})
            .config_resources] == ["1"]
    assert raw.request(ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [2, 99]}).error_code == 35
    assert raw.request(ApiKey.LIST_CONFIG_RESOURCES, 0, {}).config_resources == ()


def test_create_topics_validates_like_kafka(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    def create(name: str, partitions: int = 1, replication: int = 1, validate_only: bool = False,
               configs: dict | None = None) -> tuple[int, str | None]:
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication,
                            "assignments": [], "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                "timeout": 10_000, "validate_only": validate_only}
        result = raw.request(ApiKey.CREATE_TOPICS, 4, body).topics[0]
        return result.error_code, result.error_message

    assert create("dry", validate_only=True)[0] == 0 and "dry" not in kafka.engine.topics.topic_names()
    assert create("t", 2, configs={"cleanup.policy": "compact"}) == (0, None)
    assert kafka.engine.topics.topic("t").overrides == {"cleanup.policy": "compact"}
    assert create("t")[0] == 36  # TOPIC_ALREADY_EXISTS
    assert create("r", replication=3)[0] == 38  # INVALID_REPLICATION_FACTOR
    assert create("p", partitions=0)[0] == 37  # INVALID_PARTITIONS
    code, message = create("c", configs={"cleanup.policy": "sometimes"})
    assert code == 40 and "cleanup.policy" in message and "c" not in kafka.engine.topics.topic_names()
    assert create("default", partitions=-1, replication=-1)[0] == 0
    deleted = raw.request(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["t", "ghost"], "timeout": 10_000})
    assert [(r.name, r.error_code) for r in deleted.responses] == [("t", 0), ("ghost", 3)]


def test_describe_configs_of_a_topic_and_the_broker(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1, {"retention.ms": 1000})
    body = {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None},
                          {"resource_type": 4, "resource_name": "", "configuration_keys": ["num.partitions"]}],
            "include_synonyms": False}
    topic, broker = raw.request(ApiKey.DESCRIBE_CONFIGS, 2, body).results
    configs = {c.name: (c.value, c.config_source) for c in topic.configs}
    assert configs["retention.ms"] == ("1000", 1) and configs["cleanup.policy"] == ("delete", 5)
    assert [(c.name, c.value) for c in broker.configs] == [("num.partitions", "1")]


def test_operator_apis_show_an_open_transaction(kafka: KafkaBroker, raw: KafkaConnection) -> None:
    kafka.broker.create_topic("t", 1)
    producer = kafka.broker.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"open", partition=0).get(10)
    listed = raw.request(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": ["Ongoing", "Nonsense"],
                                                       "producer_id_filters": [], "duration_filter": -1})
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [("tx", "Ongoing")]
    assert listed.unknown_state_filters == ("Nonsense",)
    described = raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx", "ghost"]})
    tx, ghost = described.transaction_states
    assert (tx.transaction_state, tx.producer_id, [(t.topic, t.partitions) for t in tx.topics]) == (
        "Ongoing", producer.producer_id, [("t", (0,))])
    assert ghost.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
    producers = raw.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t", "partition_indexes": [0, 9]}]})
    found, missing = producers.topics[0].partitions
    assert [(p.producer_id, p.current_txn_start_offset) for p in found.active_producers] == [(producer.producer_id, 0)]
    assert missing.error_code == 3


def test_describe_cluster_and_threads_do_not_matter(kafka: KafkaBroker) -> None:
    """DescribeCluster answers this node; many connections at once are served alike."""
    answers: list[int] = []

    def ask() -> None:
        client = raw_connection(kafka.port)
        for _ in range(20):
            answers.append(client.request(ApiKey.DESCRIBE_CLUSTER, 0, {}).brokers[0].port)
        client.close()

    controllers = raw_connection(kafka.port).request(ApiKey.DESCRIBE_CLUSTER, 1, {"endpoint_type": 2})
    assert controllers.error_code == 115  # UNSUPPORTED_ENDPOINT_TYPE: a broker describes brokers
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == [kafka.port] * 160


def test_a_consumer_group_heartbeat_v0_joins_without_the_regex_field_v1_added(
        kafka: KafkaBroker, raw: KafkaConnection) -> None:
    """KIP-848's early-access v0 has no SubscribedTopicRegex: the handler must not read it
    (it did, and closed the connection on every v0 heartbeat)."""
    kafka.broker.create_topic("t", 2)
    joined = raw.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
        "group_id": "g", "member_id": "", "member_epoch": 0, "rebalance_timeout": 30_000,
        "subscribed_topic_names": ["t"], "topic_partitions": []})
    assert joined.error_code == 0 and joined.member_id and joined.member_epoch >= 1
