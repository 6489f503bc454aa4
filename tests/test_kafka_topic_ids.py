"""Topic ids on the wire (KIP-516) and the APIs at Kafka 4's versions that carry them:
Metadata v10+ gives each topic's id and (v12+) answers ids, CreateTopics v7 returns it,
Fetch v13+ reads by it, Produce v13 writes by it, DeleteTopics v6 deletes by it, DescribeTopicPartitions pages
through topics; an id no topic has -- a deleted topic's, even when one of its name was
created since -- is UNKNOWN_TOPIC_ID. And what a client does with them: librdkafka
notices a topic re-created with fewer partitions (its test 0107)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.app.kafka.wire import ApiKey
from exactly.storage import filenames, partition_metadata
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka_support import KafkaBroker, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)
UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE, INVALID_REQUEST, UNKNOWN_TOPIC_ID = 3, 1, 42, 100


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as broker:
        yield broker


def _create(raw, name: str, partitions: int) -> uuid.UUID:
    response = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": partitions,
                                                                 "replication_factor": 1}], "timeout": 10_000})
    assert response.topics[0].error_code == 0
    return response.topics[0].topic_id


def _delete(raw, **topic) -> object:
    return raw.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": None, **topic}], "timeout": 10_000}).responses[0]


def _fetch(raw, topic_id: uuid.UUID, offset: int = 0, last_fetched_epoch: int = -1, version: int = 13):
    response = raw.request(ApiKey.FETCH, version, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [
        {"topic_id": topic_id, "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                                               "last_fetched_epoch": last_fetched_epoch}]}]})
    return response.responses[0]


def test_create_topics_v7_metadata_and_the_partition_files_agree_on_the_id(kafka, tmp_path):
    raw = raw_connection(kafka.port)
    created = _create(raw, "orders", 2)
    described = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": "orders"}]}).topics[0]
    assert described.topic_id == created and described.error_code == 0
    by_id = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": created}]}).topics[0]
    assert (by_id.name, len(by_id.partitions)) == ("orders", 2)
    for p in range(2):
        assert partition_metadata.read(tmp_path / "data" / filenames.partition_dir_name("orders", p)) == created


def test_metadata_answers_an_unknown_id_and_refuses_ids_before_v12(kafka):
    raw = raw_connection(kafka.port)
    stranger = uuid.uuid4()
    answer = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": stranger}]}).topics[0]
    assert (answer.error_code, answer.topic_id, answer.name) == (UNKNOWN_TOPIC_ID, stranger, None)
    refused = raw.request(ApiKey.METADATA, 10, {"topics": [{"name": "x", "topic_id": stranger}]}).topics[0]
    assert refused.error_code == INVALID_REQUEST
    assert raw.request(ApiKey.METADATA, 13, {"topics": []}).error_code == 0


def test_a_re_created_topic_has_a_new_id_and_the_old_one_is_unknown_everywhere(kafka):
    raw = raw_connection(kafka.port)
    old = _create(raw, "orders", 1)
    assert _fetch(raw, old).partitions[0].error_code == 0
    deleted = _delete(raw, topic_id=old)
    assert (deleted.error_code, deleted.name, deleted.topic_id) == (0, "orders", old)
    new = _create(raw, "orders", 1)
    assert new != old
    assert _fetch(raw, old).partitions[0].error_code == UNKNOWN_TOPIC_ID
    assert _fetch(raw, new, version=18).partitions[0].error_code == 0
    assert _delete(raw, topic_id=old).error_code == UNKNOWN_TOPIC_ID
    assert _delete(raw, name="orders", topic_id=new).error_code == INVALID_REQUEST
    assert raw.request(ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": old}]}).topics[0].error_code \
        == UNKNOWN_TOPIC_ID


def _produce_v13(raw, topic_id: uuid.UUID, value: bytes):
    records = encode_batch([SimpleRecord(value)])
    response = raw.request(ApiKey.PRODUCE, 13, {"transactional_id": None, "acks": -1, "timeout": 10_000,
                                                "topic_data": [{"topic_id": topic_id, "partition_data": [
                                                    {"index": 0, "records": records}]}]})
    return response.responses[0]


def test_produce_v13_writes_by_topic_id_and_an_old_id_is_unknown(kafka):
    """KIP-516 in Produce: the answer names the topic by the same id; the id of a deleted
    topic is UNKNOWN_TOPIC_ID, even when a topic of its name exists again, and nothing of
    the batch reaches the new one."""
    raw = raw_connection(kafka.port)
    old = _create(raw, "orders", 1)
    written = _produce_v13(raw, old, b"by id")
    assert (written.topic_id, written.partition_responses[0].error_code) == (old, 0)
    assert written.partition_responses[0].base_offset == 0
    assert _delete(raw, topic_id=old).error_code == 0
    new = _create(raw, "orders", 1)
    stale = _produce_v13(raw, old, b"to a deleted topic")
    assert (stale.topic_id, stale.partition_responses[0].error_code) == (old, UNKNOWN_TOPIC_ID)
    assert stale.partition_responses[0].base_offset == -1
    assert kafka.broker.list_offsets("orders", 0, -1) == 0
    assert _produce_v13(raw, new, b"again").partition_responses[0].error_code == 0


def test_fetch_v12_answers_a_diverging_epoch_past_the_log_end(kafka):
    """KIP-320 in Fetch: a fetcher that last read epoch 0 and asks past where epoch 0
    ends is told where it ends, with no records; an epoch after the log's is out of range."""
    raw = raw_connection(kafka.port)
    topic = _create(raw, "orders", 1)
    with_epoch = _fetch(raw, topic, offset=5, last_fetched_epoch=0).partitions[0]
    assert with_epoch.error_code == 0 and with_epoch.records in (b"", None)
    assert (with_epoch.diverging_epoch.epoch, with_epoch.diverging_epoch.end_offset) == (0, 0)
    assert _fetch(raw, topic, last_fetched_epoch=3).partitions[0].error_code == OFFSET_OUT_OF_RANGE
    assert _fetch(raw, topic, last_fetched_epoch=0).partitions[0].diverging_epoch.epoch == -1


def test_describe_topic_partitions_pages_through_every_topic_with_its_cursor(kafka):
    raw = raw_connection(kafka.port)
    ids = {"a": _create(raw, "a", 3), "b": _create(raw, "b", 2)}
    seen, cursor = [], None
    for _ in range(10):
        page = raw.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": "a"}, {"name": "b"}],
                                                                 "response_partition_limit": 2, "cursor": cursor})
        seen += [(t.name, t.topic_id, p.partition_index, p.leader_id) for t in page.topics for p in t.partitions]
        if page.next_cursor is None:
            break
        cursor = {"topic_name": page.next_cursor.topic_name, "partition_index": page.next_cursor.partition_index}
    assert seen == [("a", ids["a"], 0, 1), ("a", ids["a"], 1, 1), ("a", ids["a"], 2, 1),
                    ("b", ids["b"], 0, 1), ("b", ids["b"], 1, 1)]
    unknown = raw.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": "zz"}],
                                                                "response_partition_limit": 10})
    assert unknown.topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
    for cursor in ({"topic_name": "zz", "partition_index": 0}, {"topic_name": "a", "partition_index": -1}):
        refused = raw.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": "a"}, {"name": "b"}],
                                                                    "response_partition_limit": 10, "cursor": cursor})
        assert [(t.name, t.error_code, t.partitions) for t in refused.topics] == [
            ("a", INVALID_REQUEST, ()), ("b", INVALID_REQUEST, ())], cursor


def test_librdkafka_notices_a_topic_re_created_with_fewer_partitions(kafka):
    """librdkafka's 0107: a producer that wrote to partition 1 of a topic sees, once the
    topic is re-created with one partition (a new id), that partition 1 is gone, and
    keeps writing to partition 0 of the new topic."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("recreated", 2, 1)])["recreated"].result(10)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "topic.metadata.refresh.interval.ms": 200,
                         "allow.auto.create.topics": False,
                         "message.timeout.ms": 5000})
    outcomes: list = []

    def produce(partition: int) -> None:
        """Its outcome: None (delivered), or the error -- at delivery, or at once once the
        producer's metadata says the partition does not exist."""
        try:
            producer.produce("recreated", b"v", partition=partition, on_delivery=lambda e, m: outcomes.append(e))
        except KafkaException as e:
            outcomes.append(e.args[0])
        producer.flush(10)

    produce(1)
    assert outcomes == [None]
    admin.delete_topics(["recreated"])["recreated"].result(10)
    admin.create_topics([NewTopic("recreated", 1, 1)])["recreated"].result(10)

    def partition_1_refused() -> bool:
        outcomes.clear()
        produce(1)
        return outcomes[0] is not None and outcomes[0].code() == KafkaError._UNKNOWN_PARTITION

    eventually(partition_1_refused, timeout=30)
    outcomes.clear()
    produce(0)
    assert outcomes == [None]
    assert kafka.engine.partitions.partition_offsets("recreated", 0).high_watermark == 1


@pytest.mark.parametrize("api,version", [(ApiKey.FETCH, 16), (ApiKey.PRODUCE, 10)])
def test_a_leader_that_moved_is_named_with_its_endpoint(kafka, api, version):
    """KIP-951: NOT_LEADER_OR_FOLLOWER (here a fault's: one node never loses a leader)
    comes with the partition's current leader and that node's endpoint, so a client
    retries there without asking Metadata first."""
    raw = raw_connection(kafka.port)
    topic = _create(raw, "orders", 2)
    kafka.broker.faults.add(api="Fetch" if api == ApiKey.FETCH else "Produce", topic="orders", partition=0,
                            error="NOT_LEADER_OR_FOLLOWER")
    if api == ApiKey.FETCH:
        response = raw.request(api, version, {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "topics": [
            {"topic_id": topic, "partitions": [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                                               for p in (0, 1)]}]})
        partitions = {p.partition_index: p for p in response.responses[0].partitions}
    else:
        batch = encode_batch([SimpleRecord(b"v")])
        response = raw.request(api, version, {"acks": -1, "timeout": 10_000, "topic_data": [
            {"name": "orders", "partition_data": [{"index": p, "records": batch} for p in (0, 1)]}]})
        partitions = {p.index: p for p in response.responses[0].partition_responses}
    assert (partitions[0].error_code, partitions[1].error_code) == (6, 0)
    assert (partitions[0].current_leader.leader_id, partitions[0].current_leader.leader_epoch) == (1, 0)
    assert partitions[1].current_leader.leader_id == -1
    assert [(n.node_id, n.port) for n in response.node_endpoints] == [(1, kafka.port)]


@pytest.mark.slow
def test_topic_ids_survive_a_sigkill_of_the_broker(tmp_path):
    """A topic's id, answered once CreateTopics answered, is the id after the broker
    process is killed (SIGKILL: no shutdown at all) and started again on its files."""
    from tests.test_kafka_crash import ServedBroker

    broker = ServedBroker(tmp_path / "data")
    try:
        raw = raw_connection(broker.port)
        created = {name: _create(raw, name, 2) for name in ("first", "second")}
        raw.close()
        broker.kill()
        broker.start()
        raw = raw_connection(broker.port)
        described = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": n} for n in created]}).topics
        assert {t.name: t.topic_id for t in described} == created
        for name, topic in created.items():
            for p in range(2):
                assert partition_metadata.read(tmp_path / "data" / filenames.partition_dir_name(name, p)) == topic
    finally:
        broker.kill()


def test_a_principal_that_may_not_describe_learns_nothing_of_a_topic_by_its_id(tmp_path):
    """With the authorizer on and no ACL: Metadata by id answers TOPIC_AUTHORIZATION_FAILED
    for the id (ids are not secret, names may be: no name), DescribeTopicPartitions lists
    none of the topics, Fetch and DeleteTopics by id are refused."""
    standard = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    with KafkaBroker(tmp_path / "data", **standard) as kafka:
        info = kafka.engine.call(kafka.engine.topics.create_topic, "secret", 1)
        raw = raw_connection(kafka.port)
        by_id = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": info.topic_id}]}).topics[0]
        assert (by_id.error_code, by_id.name, by_id.topic_id) == (29, None, info.topic_id)
        assert raw.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [], "response_partition_limit": 10}
                           ).topics == ()
        assert _fetch(raw, info.topic_id).partitions[0].error_code == 29
        assert _delete(raw, topic_id=info.topic_id).error_code == 29
        assert kafka.engine.topics.topic_info("secret") is not None
