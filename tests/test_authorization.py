"""The authorizer at work on the Kafka port: what a principal sees and may do, as ACLs
change (no restart), with Kafka's rules -- deny beats allow, prefixed and wildcard
patterns; the seeds' endless-transaction attack; the authorized-operations fields;
``__cluster_metadata`` hidden and unwritable; a producer id that belongs to its
principal; and the per-principal abuse limits.

One broker for the module (authorizer on, the test's connections ``User:ANONYMOUS``);
each test starts with no ACL. The producer-id rule needs two principals, which only SASL
gives a connection, so it is tested on the engine's operations with two principals."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from exactly.app.kafka.api import ApiKey
from exactly.app.security import acl as model
from exactly.app.security.acl import CLUSTER_NAME, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.app.security.authorizer import operations_bit_field
from exactly.app.security.principal import KafkaPrincipal
from exactly.coordinator import cluster_metadata
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    InvalidTopicError,
    ThrottlingQuotaExceededError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from tests.conftest import data_batch
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker, raw_connection

pytestmark = pytest.mark.timeout(60)

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
ANONYMOUS = "User:ANONYMOUS"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
O, R = AclOperation, ResourceType


def acl(resource_type: ResourceType, name: str, operation: AclOperation, permission: AclPermissionType = ALLOW,
        pattern: PatternType = PatternType.LITERAL, principal: str = ANONYMOUS) -> model.AclBinding:
    return model.AclBinding(model.ResourcePattern(resource_type, name, pattern),
                            model.AccessControlEntry(principal, "*", operation, permission))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("authz") / "data", **STANDARD, **TWO_PHASE_COMMIT) as k:
        for name in ("vis-1", "vis-2", "hid-1"):
            k.engine.call(k.engine.topics.create_topic, name, 1)
        yield k


@pytest.fixture
def kafka(broker: KafkaBroker) -> Iterator[KafkaBroker]:
    """The module's broker, with no ACL at the start and end of the test."""
    yield broker
    broker.engine.call(broker.engine.access.delete_acls, [AclBindingFilter()])


def grant(kafka: KafkaBroker, *bindings: model.AclBinding) -> None:
    assert kafka.engine.call(kafka.engine.access.create_acls, list(bindings)) == [None] * len(bindings)


def visible_topics(kafka: KafkaBroker) -> set[str]:
    """The topics confluent-kafka's AdminClient lists."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    return set(admin.list_topics(timeout=30).topics)


def test_metadata_lists_what_the_principal_may_describe_as_acls_change(kafka: KafkaBroker) -> None:
    grant(kafka, acl(R.TOPIC, "vis-", O.DESCRIBE, pattern=PatternType.PREFIXED))
    assert visible_topics(kafka) == {"vis-1", "vis-2"}
    grant(kafka, acl(R.TOPIC, "hid-1", O.READ))  # READ implies DESCRIBE; no restart
    assert visible_topics(kafka) == {"vis-1", "vis-2", "hid-1"}
    grant(kafka, acl(R.TOPIC, "vis-2", O.DESCRIBE, DENY))  # deny beats the prefixed allow
    assert visible_topics(kafka) == {"vis-1", "hid-1"}
    grant(kafka, acl(R.TOPIC, "*", O.ALL))  # the wildcard: every topic but the hidden one, still denied vis-2
    assert visible_topics(kafka) == {"vis-1", "hid-1"}


def test_an_unknown_topic_is_not_leaked(kafka: KafkaBroker) -> None:
    """Without Describe: TOPIC_AUTHORIZATION_FAILED, existing or not; with it, the
    missing one is UNKNOWN_TOPIC_OR_PARTITION."""
    client = raw_connection(kafka.port)
    try:
        body = {"topics": [{"name": "hid-1"}, {"name": "nowhere"}], "allow_auto_topic_creation": False}
        codes = {t.name: int(t.error_code) for t in client.request(ApiKey.METADATA, 8, body).topics}
        assert codes == {"hid-1": TopicAuthorizationFailedError.code, "nowhere": TopicAuthorizationFailedError.code}
        grant(kafka, acl(R.TOPIC, "*", O.DESCRIBE))
        codes = {t.name: int(t.error_code) for t in client.request(ApiKey.METADATA, 8, body).topics}
        assert codes == {"hid-1": 0, "nowhere": 3}
        auto = {"topics": [{"name": "auto-1"}], "allow_auto_topic_creation": True}
        assert int(client.request(ApiKey.METADATA, 8, auto).topics[0].error_code) == \
            TopicAuthorizationFailedError.code, "auto-creation needs Create"
        assert kafka.engine.topics.topic_info("auto-1") is None
    finally:
        client.close()


def test_authorized_operations_fields(kafka: KafkaBroker) -> None:
    grant(kafka, acl(R.TOPIC, "vis-1", O.READ), acl(R.CLUSTER, CLUSTER_NAME, O.DESCRIBE),
          acl(R.GROUP, "g", O.DESCRIBE))
    client = raw_connection(kafka.port)
    try:
        meta = client.request(ApiKey.METADATA, 8, {"topics": [{"name": "vis-1"}], "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": True,
                                                   "include_cluster_authorized_operations": True})
        assert meta.topics[0].topic_authorized_operations == operations_bit_field({O.READ, O.DESCRIBE})
        assert meta.cluster_authorized_operations == operations_bit_field({O.DESCRIBE})
        cluster = client.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True,
                                                              "endpoint_type": 1})
        assert int(cluster.error_code) == 0
        assert cluster.cluster_authorized_operations == operations_bit_field({O.DESCRIBE})
        groups = client.request(ApiKey.DESCRIBE_GROUPS, 3, {"groups": ["g"], "include_authorized_operations": True})
        assert groups.groups[0].authorized_operations == operations_bit_field({O.DESCRIBE})
        not_asked = client.request(ApiKey.METADATA, 8, {"topics": [{"name": "vis-1"}],
                                                        "allow_auto_topic_creation": False})
        assert not_asked.topics[0].topic_authorized_operations == -2**31
    finally:
        client.close()


def test_cluster_metadata_is_hidden_even_with_cluster_action_and_never_writable(kafka: KafkaBroker) -> None:
    """It holds the users' credentials: no ACL opens it (tests/test_cluster_metadata_unreadable.py
    tries every option), and nobody produces to it."""
    grant(kafka, acl(R.TOPIC, "*", O.ALL), acl(R.CLUSTER, CLUSTER_NAME, O.ALL))
    assert cluster_metadata.TOPIC not in visible_topics(kafka)
    client = raw_connection(kafka.port)
    try:
        produce = {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": cluster_metadata.TOPIC, "partition_data": [{"index": 0, "records": data_batch([b"forged"])}]}]}
        answer = client.request(ApiKey.PRODUCE, 7, produce).responses[0].partition_responses[0]
        assert int(answer.error_code) == TopicAuthorizationFailedError.code, "nobody produces to it"
    finally:
        client.close()


def test_the_endless_transaction_attack_leaves_nothing_behind_the_lso(kafka: KafkaBroker) -> None:
    """The seeds' attack: Write on the topic but not on the transactional id. Neither
    a real transactional producer nor a forged transactional Produce gets data in."""
    engine = kafka.engine
    grant(kafka, acl(R.TOPIC, "vis-1", O.WRITE))
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "victim"})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(30)
    assert refused.value.args[0].code() == TransactionalIdAuthorizationFailedError.code
    pid, epoch = engine.call(engine.transactions.init_producer_id, "victim", 60_000)
    engine.call(engine.transactions.add_partitions_to_txn, "victim", pid, epoch, [("vis-1", 0)])
    before = engine.partitions.partition_offsets("vis-1", 0)
    client = raw_connection(kafka.port)
    try:
        forged = {"transactional_id": "victim", "acks": -1, "timeout": 5000, "topic_data": [
            {"name": "vis-1", "partition_data": [{"index": 0, "records": data_batch(
                [b"held"], producer_id=pid, epoch=epoch, sequence=0, transactional=True)}]}]}
        answer = client.request(ApiKey.PRODUCE, 7, forged).responses[0].partition_responses[0]
        assert int(answer.error_code) == TransactionalIdAuthorizationFailedError.code
    finally:
        client.close()
    after = engine.partitions.partition_offsets("vis-1", 0)
    assert after == before and after.last_stable_offset == after.high_watermark
    engine.call(engine.transactions.end_txn, "victim", pid, epoch, False)


def test_an_idempotent_producer_needs_write_on_some_topic(kafka: KafkaBroker) -> None:
    client = raw_connection(kafka.port)
    body = {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
    try:
        assert int(client.request(ApiKey.INIT_PRODUCER_ID, 4, body).error_code) == \
            ClusterAuthorizationFailedError.code
        grant(kafka, acl(R.TOPIC, "vis-", O.WRITE, pattern=PatternType.PREFIXED))
        assert int(client.request(ApiKey.INIT_PRODUCER_ID, 4, body).error_code) == 0
        grant(kafka, acl(R.TOPIC, "v", O.WRITE, DENY, pattern=PatternType.PREFIXED))
        assert int(client.request(ApiKey.INIT_PRODUCER_ID, 4, body).error_code) == \
            ClusterAuthorizationFailedError.code, "a deny covering every allowed topic"
    finally:
        client.close()


def test_a_producer_id_belongs_to_its_principal(kafka: KafkaBroker) -> None:
    """Engine level, two principals: another principal's batch or transactional offset
    commit with a producer id is refused; its owner's goes through."""
    engine = kafka.engine
    alice, mallory = KafkaPrincipal.parse("User:alice"), KafkaPrincipal.parse("User:mallory")
    pid, epoch = engine.call(engine.transactions.init_producer_id, None, 60_000, principal=alice)
    batch = data_batch([b"v"], producer_id=pid, epoch=epoch, sequence=0)
    with pytest.raises(ClusterAuthorizationFailedError):
        engine.call(engine.partitions.start_produce, "vis-2", 0, batch, 1, None, mallory)
    engine.call(engine.partitions.start_produce, "vis-2", 0, batch, 1, None, alice)
    txn_pid, txn_epoch = engine.call(engine.transactions.init_producer_id, "alice-tx", 60_000, principal=alice)
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        engine.call(engine.transactions.txn_offset_commit, "alice-tx", "g", txn_pid, txn_epoch, {}, principal=mallory)
    assert engine.counters.authorization_denials[("CLUSTER", "WRITE")] >= 2


def test_a_prepared_transaction_taken_over_belongs_to_the_principal_that_kept_it(kafka: KafkaBroker) -> None:
    """KIP-939: another principal (allowed on the transactional id) keeps alice's prepared
    transaction; the producer id it is given is then its own, and no longer alice's."""
    engine = kafka.engine
    alice, bob = KafkaPrincipal.parse("User:alice"), KafkaPrincipal.parse("User:bob")
    pid, epoch = engine.call(engine.transactions.init_producer_id, "handover-tx", 60_000, enable_2pc=True, principal=alice)
    engine.call(engine.transactions.add_partitions_to_txn, "handover-tx", pid, epoch, [("vis-1", 0)], alice)
    engine.call(engine.partitions.start_produce, "vis-1", 0,
                data_batch([b"v"], producer_id=pid, epoch=epoch, sequence=0, transactional=True), 1, None, alice)
    kept = engine.call(engine.transactions.keep_prepared_transaction, "handover-tx", bob)
    assert (kept.ongoing_producer_id, kept.ongoing_producer_epoch) == (pid, epoch)
    engine.call(engine.transactions.end_txn, "handover-tx", kept.producer_id, kept.producer_epoch, True)
    engine.call(engine.transactions.add_partitions_to_txn, "handover-tx", kept.producer_id, kept.producer_epoch,
                [("vis-1", 0)], bob)  # bob's next transaction, under the producer id he was given
    batch = data_batch([b"w"], producer_id=kept.producer_id, epoch=kept.producer_epoch, sequence=0,
                       transactional=True)
    with pytest.raises(TransactionalIdAuthorizationFailedError, match="another principal"):
        engine.call(engine.partitions.start_produce, "vis-1", 0, batch, 1, None, alice)
    engine.call(engine.partitions.start_produce, "vis-1", 0, batch, 1, None, bob)
    engine.call(engine.transactions.end_txn, "handover-tx", kept.producer_id, kept.producer_epoch, False)


def test_abuse_limits(tmp_path: Path) -> None:
    """Producer ids per principal per second, and open transactions per principal: each
    refused with THROTTLING_QUOTA_EXCEEDED and counted."""
    limits = {**STANDARD, "super.users": ANONYMOUS, "exactly.producer.id.rate.per.principal": 3,
              "exactly.max.open.transactions.per.principal": 1}
    with KafkaBroker(tmp_path / "data", **limits) as kafka:
        kafka.engine.call(kafka.engine.topics.create_topic, "t", 1)
        client = raw_connection(kafka.port)
        try:
            def init(txn_id: str | None) -> object:
                return client.request(ApiKey.INIT_PRODUCER_ID, 4, {
                    "transactional_id": txn_id, "transaction_timeout": 60000, "producer_id": -1,
                    "producer_epoch": -1})

            first, second = init("tx-1"), init("tx-2")
            answers = [init(None) for _ in range(2)]
            codes = [int(a.error_code) for a in (first, second, *answers)]
            assert codes[:3] == [0, 0, 0] and codes[3] == ThrottlingQuotaExceededError.code, codes
            assert answers[-1].throttle_time.total_seconds() > 0

            def add(txn_id: str, answer: object) -> int:
                result = client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
                    "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": answer.producer_id,
                    "v3_and_below_producer_epoch": answer.producer_epoch,
                    "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
                return int(result.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)

            assert add("tx-1", first) == 0
            assert add("tx-2", second) == ThrottlingQuotaExceededError.code
            end = client.request(ApiKey.END_TXN, 3, {"transactional_id": "tx-1", "producer_id": first.producer_id,
                                                     "producer_epoch": first.producer_epoch, "committed": False})
            assert int(end.error_code) == 0
            assert add("tx-2", second) == 0, "one open transaction again"
        finally:
            client.close()
        refusals = kafka.engine.counters.limit_refusals
        assert refusals["exactly.producer.id.rate.per.principal"] == 1
        assert refusals["exactly.max.open.transactions.per.principal"] == 1


def test_two_transactions_opened_at_once_cannot_both_pass_the_cap(tmp_path: Path) -> None:
    """One principal's AddPartitionsToTxn on two transactional ids at the same moment,
    under a cap of one open transaction: one opens, the other is refused."""
    limits = {**STANDARD, "super.users": ANONYMOUS, "exactly.max.open.transactions.per.principal": 1}
    with KafkaBroker(tmp_path / "data", **limits) as kafka:
        engine = kafka.engine
        engine.call(engine.topics.create_topic, "t", 1)
        alice = KafkaPrincipal.parse("User:alice")
        producers = {txn_id: engine.call(engine.transactions.init_producer_id, txn_id, 60_000, principal=alice)
                     for txn_id in ("tx-a", "tx-b")}

        async def both() -> list:
            return await asyncio.gather(*(engine.transactions.add_partitions_to_txn(txn_id, pid, epoch, [("t", 0)], alice)
                                          for txn_id, (pid, epoch) in producers.items()), return_exceptions=True)

        answers = engine.call(both)
        assert sorted(type(a).__name__ for a in answers) == ["ThrottlingQuotaExceededError", "dict"], answers


def test_clients_hear_the_denial_of_their_topic(kafka: KafkaBroker) -> None:
    """confluent-kafka without Write on the topic: the delivery fails with
    TOPIC_AUTHORIZATION_FAILED; without Read, the consumer gets it as an error."""
    from confluent_kafka import Consumer, TopicPartition

    grant(kafka, acl(R.TOPIC, "vis-", O.DESCRIBE, pattern=PatternType.PREFIXED), acl(R.GROUP, "no-read", O.READ))
    before = kafka.engine.partitions.partition_offsets("vis-1", 0).high_watermark
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": False, "retries": 0})
    failed: list = []
    producer.produce("vis-1", b"v", on_delivery=lambda error, _: failed.append(error))
    assert producer.flush(30) == 0
    assert [e.code() for e in failed] == [TopicAuthorizationFailedError.code]
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "no-read", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("vis-1", 0, 0)])
        errors = []
        for _ in range(20):
            message = consumer.poll(1.0)
            if message is not None and message.error() is not None:
                errors.append(message.error().code())
                break
        assert errors == [TopicAuthorizationFailedError.code]
    finally:
        consumer.close()
    assert kafka.engine.partitions.partition_offsets("vis-1", 0).high_watermark == before, "nothing written"
