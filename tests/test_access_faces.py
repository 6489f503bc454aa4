"""One act, one rule, whichever face asks: the REST API, the console and the Kafka port
authorize the same act with the same row of Kafka's table
(``exactly/app/kafka/authorization.py``), so an ACL that lets a principal do something on
one face lets it on the others, and one that does not, on none.

One broker with the authorizer on serves the module; each test grants its ACLs and
removes them. They are granted to ``User:*``, so one grant covers the Kafka connection
(PLAINTEXT: ``User:ANONYMOUS``) and the REST requests and console of ``User:carol`` (a
SCRAM user: HTTP Basic, the console's sign-in)."""

from __future__ import annotations

import base64
import re
from typing import Any, Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from flask.testing import FlaskClient

from exactly.app.http import HttpSettings, create_app
from exactly.app.kafka.wire import ApiKey
from exactly.app.security import acl as model
from exactly.app.security.acl import CLUSTER_NAME, AclBindingFilter, AclOperation, PatternType, ResourceType
from exactly.app.security.scram import ScramMechanism, new_credential
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from tests.kafka_support import KafkaBroker, outcomes, raw_connection

pytestmark = pytest.mark.timeout(60)

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
CAROL = "Basic " + base64.b64encode(b"carol:carol-secret").decode()
O, R = AclOperation, ResourceType


def acl(resource_type: ResourceType, name: str, operation: AclOperation,
        pattern: PatternType = PatternType.LITERAL) -> model.AclBinding:
    return model.AclBinding(model.ResourcePattern(resource_type, name, pattern),
                            model.AccessControlEntry("User:*", "*", operation, model.AclPermissionType.ALLOW))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("faces") / "data", **STANDARD) as k:
        k.engine.call(k.engine.topics.create_topic, "shared", 1)
        carol = new_credential("carol", ScramMechanism.SCRAM_SHA_256, "carol-secret", iterations=4096)
        k.engine.call(k.engine.access.alter_scram_credentials, [], [carol])
        yield k


@pytest.fixture
def kafka(broker: KafkaBroker) -> Iterator[KafkaBroker]:
    """The module's broker, with no ACL at the start and end of the test."""
    yield broker
    broker.engine.call(broker.engine.access.delete_acls, [AclBindingFilter()])


def _client(broker: KafkaBroker) -> FlaskClient:
    """With a token (for the admin, unused here) the API wants credentials and every page
    carries the session's CSRF token in its Log out form."""
    return create_app(broker.engine, HttpSettings(token="admin-secret"), test_config={"TESTING": True}).test_client()


@pytest.fixture
def rest(broker: KafkaBroker) -> FlaskClient:
    client = _client(broker)
    client.environ_base["HTTP_AUTHORIZATION"] = CAROL
    return client


@pytest.fixture
def console(broker: KafkaBroker) -> FlaskClient:
    client = _client(broker)
    assert client.post("/login", data={"user": "carol", "password": "carol-secret"}).status_code == 302
    return client


def grant(kafka: KafkaBroker, *bindings: model.AclBinding) -> None:
    assert kafka.engine.call(kafka.engine.access.create_acls, list(bindings)) == [None] * len(bindings)


def console_post(console: FlaskClient, path: str, form: dict[str, str]) -> Any:
    """A console form, with the session's CSRF token (every page carries it, a 403 page too)."""
    found = CSRF.search(console.get("/new-topic").get_data(as_text=True))
    assert found, "no CSRF token on the page"
    return console.post(path, data={**form, "csrf_token": found.group(1)})


def exists(kafka: KafkaBroker, topic: str) -> bool:
    return kafka.engine.topics.topic_info(topic) is not None


def create_on_every_face(kafka: KafkaBroker, rest: FlaskClient, console: FlaskClient,
                         name: str) -> dict[str, bool]:
    """Create ``<name>-rest``, ``<name>-console`` and ``<name>-kafka``, each through its
    face; which of them now exist (a refusal is Kafka's TOPIC_AUTHORIZATION_FAILED)."""
    answer = rest.post(f"/v3/clusters/{kafka.engine.topics.cluster_id}/topics",
                       json={"topic_name": f"{name}-rest", "partitions_count": 1})
    assert answer.status_code in (201, 403), answer.json
    if answer.status_code == 403:
        assert answer.json["error_name"] == "TOPIC_AUTHORIZATION_FAILED"
    form = console_post(console, "/new-topic", {"name": f"{name}-console", "partitions": "1", "configs": ""})
    assert form.status_code in (303, 403), form.get_data(as_text=True)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    refused = outcomes(admin.create_topics([NewTopic(f"{name}-kafka", 1, 1)], operation_timeout=30))
    assert refused[f"{name}-kafka"] is None or refused[f"{name}-kafka"].code() == TopicAuthorizationFailedError.code
    return {face: exists(kafka, f"{name}-{face}") for face in ("rest", "console", "kafka")}


@pytest.mark.parametrize("held", ["prefixed", "cluster"])
def test_create_on_the_topics_or_on_the_cluster_creates_topics_on_every_face(
        kafka: KafkaBroker, rest: FlaskClient, console: FlaskClient, held: str) -> None:
    """CreateTopics: Create on the cluster, or on the topic -- here a PREFIXED ACL."""
    everywhere = {"rest": True, "console": True, "kafka": True}
    nowhere = {"rest": False, "console": False, "kafka": False}
    assert create_on_every_face(kafka, rest, console, f"before-{held}") == nowhere
    grant(kafka, acl(R.TOPIC, "team-", O.CREATE, PatternType.PREFIXED) if held == "prefixed"
          else acl(R.CLUSTER, CLUSTER_NAME, O.CREATE))
    assert create_on_every_face(kafka, rest, console, f"team-{held}") == everywhere
    outside = create_on_every_face(kafka, rest, console, f"other-{held}")
    assert outside == (nowhere if held == "prefixed" else everywhere)


def init_producer_id(kafka: KafkaBroker, transactional_id: str | None) -> int:
    """InitProducerId on the Kafka port: its error code."""
    client = raw_connection(kafka.port)
    try:
        return int(client.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": transactional_id, "transaction_timeout": 60000, "producer_id": -1,
            "producer_epoch": -1}).error_code)
    finally:
        client.close()


def test_a_transactional_produce_needs_write_on_its_transactional_id_on_every_face(
        kafka: KafkaBroker, rest: FlaskClient, console: FlaskClient) -> None:
    """Write on a topic is not Write on a transactional id: the console's produce in a
    transaction fences the id's producer (InitProducerId), so it needs what Kafka's does."""
    grant(kafka, acl(R.TOPIC, "shared", O.WRITE))
    denied = TransactionalIdAuthorizationFailedError
    assert init_producer_id(kafka, "victim") == denied.code
    answer = rest.post(f"/v3/clusters/{kafka.engine.topics.cluster_id}/transactions/victim/init")
    assert answer.status_code == 403 and answer.json["error_name"] == denied.name
    form = console_post(console, "/topics/shared/produce", {"value": "x", "transactional_id": "victim"})
    assert form.status_code == 403 and denied.name in form.get_data(as_text=True)
    assert kafka.engine.call(kafka.engine.transactions.describe_transaction, "victim") is None, "nothing fenced"

    grant(kafka, acl(R.TRANSACTIONAL_ID, "victim", O.WRITE))
    form = console_post(console, "/topics/shared/produce", {"value": "x", "transactional_id": "victim"})
    assert form.status_code == 303 and "/topics/shared/partitions/0/records/" in form.headers["Location"]
    assert init_producer_id(kafka, "victim") == 0


def test_an_idempotent_producer_id_needs_write_on_any_topic_on_every_face(
        kafka: KafkaBroker, rest: FlaskClient) -> None:
    """InitProducerId without a transactional id: IdempotentWrite on the cluster, or
    Write on any topic (KIP-679) -- one its ACLs name, whether or not it exists yet."""
    path = f"/v3/clusters/{kafka.engine.topics.cluster_id}/producer-ids"
    assert init_producer_id(kafka, None) == ClusterAuthorizationFailedError.code
    answer = rest.post(path)
    assert answer.status_code == 403 and answer.json["error_name"] == ClusterAuthorizationFailedError.name
    grant(kafka, acl(R.TOPIC, "later-", O.WRITE, PatternType.PREFIXED))  # no such topic yet
    assert init_producer_id(kafka, None) == 0
    assert rest.post(path).status_code == 200


def describe_transaction_topics(kafka: KafkaBroker, transactional_id: str) -> list[str]:
    """DescribeTransactions on the Kafka port: the topics it names of the transaction."""
    client = raw_connection(kafka.port)
    try:
        state, = client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                                {"transactional_ids": [transactional_id]}).transaction_states
        assert state.error_code == 0
        return [t.topic for t in state.topics]
    finally:
        client.close()


def test_a_transaction_names_only_the_topics_the_principal_may_describe_on_every_face(
        kafka: KafkaBroker, rest: FlaskClient, console: FlaskClient) -> None:
    """Describe on a transactional id is not Describe on the topics it writes: Kafka's
    DescribeTransactions leaves out the partitions of topics the principal may not
    Describe, and so do the REST answer and the console's transaction page."""
    kafka.engine.call(kafka.engine.topics.create_topic, "hidden-ledger", 1)
    writes = [acl(R.TRANSACTIONAL_ID, "t-open", O.WRITE), acl(R.TOPIC, "shared", O.WRITE),
              acl(R.TOPIC, "hidden-ledger", O.WRITE)]
    grant(kafka, *writes)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "t-open"})
    try:
        producer.init_transactions(10)
        producer.begin_transaction()
        for topic in ("shared", "hidden-ledger"):
            producer.produce(topic, b"x")
        assert producer.flush(10) == 0
        assert describe_transaction_topics(kafka, "t-open") == ["hidden-ledger", "shared"]  # Write implies Describe
        kafka.engine.call(kafka.engine.access.delete_acls, [AclBindingFilter()])
        grant(kafka, acl(R.TRANSACTIONAL_ID, "t-open", O.DESCRIBE), acl(R.TOPIC, "shared", O.DESCRIBE))

        assert describe_transaction_topics(kafka, "t-open") == ["shared"]
        answer = rest.get(f"/v3/clusters/{kafka.engine.topics.cluster_id}/transactions/t-open")
        assert answer.status_code == 200, answer.json
        assert [p["topic_name"] for p in answer.json["partitions"]] == ["shared"]
        page = console.get("/transactions/t-open")
        assert page.status_code == 200
        assert "shared" in page.get_data(as_text=True) and "hidden-ledger" not in page.get_data(as_text=True)
        grant(kafka, *writes)
        producer.abort_transaction(10)
    finally:
        del producer  # destroyed: no client outlives the test


def fetch_all_offsets_topics(kafka: KafkaBroker, group_id: str) -> list[str]:
    """OffsetFetch of all the group's offsets on the Kafka port: the topics it answers."""
    client = raw_connection(kafka.port)
    try:
        answer = client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group_id, "topics": None})
        assert answer.error_code == 0
        return sorted(t.name for t in answer.topics)
    finally:
        client.close()


def test_a_groups_offsets_show_only_on_topics_the_principal_may_describe_on_every_face(
        kafka: KafkaBroker, rest: FlaskClient, console: FlaskClient) -> None:
    """Describe on a group is not Describe on the topics it consumes: OffsetFetch of all
    its offsets leaves out the topics the principal may not Describe, and so do the REST
    group, its lags, and the console's group page."""
    kafka.engine.call(kafka.engine.topics.create_topic, "hidden-orders", 1)
    grant(kafka, acl(R.GROUP, "g-faces", O.READ), acl(R.TOPIC, "shared", O.READ),
          acl(R.TOPIC, "hidden-orders", O.READ))
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    offsets = ConsumerGroupTopicPartitions("g-faces", [TopicPartition("shared", 0, 0),
                                                       TopicPartition("hidden-orders", 0, 0)])
    altered = outcomes(admin.alter_consumer_group_offsets([offsets]))
    del admin  # destroyed before any assertion: a traceback would keep the client alive
    assert altered == {"g-faces": None}
    assert fetch_all_offsets_topics(kafka, "g-faces") == ["hidden-orders", "shared"]  # Read implies Describe
    kafka.engine.call(kafka.engine.access.delete_acls, [AclBindingFilter()])
    grant(kafka, acl(R.GROUP, "g-faces", O.DESCRIBE), acl(R.TOPIC, "shared", O.DESCRIBE))

    assert fetch_all_offsets_topics(kafka, "g-faces") == ["shared"]
    group = f"/v3/clusters/{kafka.engine.topics.cluster_id}/consumer-groups/g-faces"
    assert [o["topic_name"] for o in rest.get(group).json["offsets"]] == ["shared"]
    assert [lag["topic_name"] for lag in rest.get(group + "/lags").json["data"]] == ["shared"]
    page = console.get("/groups/g-faces").get_data(as_text=True)
    assert "shared" in page and "hidden-orders" not in page


def test_a_topics_reader_sees_its_producers_but_not_their_transactional_ids(
        kafka: KafkaBroker, rest: FlaskClient, console: FlaskClient) -> None:
    """Read on a topic shows its records and producers (DescribeProducers: producer ids
    and epochs), never the transactional ids that wrote them: those need Describe on the
    transactional id, on REST's producers and the console's record and partition pages too."""
    grant(kafka, acl(R.TRANSACTIONAL_ID, "t-hidden", O.WRITE), acl(R.TOPIC, "shared", O.WRITE))
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "t-hidden"})
    try:
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("shared", b"written in a transaction")
        producer.commit_transaction(10)
    finally:
        del producer  # destroyed: no client outlives the test
    kafka.engine.call(kafka.engine.access.delete_acls, [AclBindingFilter()])
    grant(kafka, acl(R.TOPIC, "shared", O.READ))
    for path in ("/topics/shared/partitions/0", "/topics/shared/partitions/0/records"):
        page = console.get(path)
        assert page.status_code == 200, path
        html = page.get_data(as_text=True)
        assert "written in a transaction" in html and "t-hidden" not in html and "data-txn-hidden" in html, path
    producers = f"/v3/clusters/{kafka.engine.topics.cluster_id}/topics/shared/partitions/0/producers"
    named = [p["transactional_id"] for p in rest.get(producers).json["data"]]
    assert "t-hidden" not in named and None in named
    grant(kafka, acl(R.TRANSACTIONAL_ID, "t-hidden", O.DESCRIBE))
    assert "t-hidden" in console.get("/topics/shared/partitions/0/records").get_data(as_text=True)
    assert "t-hidden" in [p["transactional_id"] for p in rest.get(producers).json["data"]]


def test_a_consumer_groups_members_show_only_the_topics_the_principal_may_describe(
        kafka: KafkaBroker, rest: FlaskClient, console: FlaskClient) -> None:
    """A KIP-848 member's assignment on REST and the console: only its partitions of the
    topics the principal may Describe (the Kafka port refuses the whole group then,
    tests/test_consumer_group_authorization.py)."""
    kafka.engine.call(kafka.engine.topics.create_topic, "hidden-848", 1)
    grant(kafka, acl(R.GROUP, "g-848", O.READ), acl(R.TOPIC, "shared", O.DESCRIBE),
          acl(R.TOPIC, "hidden-848", O.DESCRIBE))
    client = raw_connection(kafka.port)
    try:
        joined = client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": "g-848", "member_id": "m-faces", "member_epoch": 0, "rebalance_timeout": 30_000,
            "topic_partitions": [], "subscribed_topic_names": ["shared", "hidden-848"]})
    finally:
        client.close()
    assert joined.error_code == 0 and len(joined.assignment.topic_partitions) == 2
    kafka.engine.call(kafka.engine.access.delete_acls, [AclBindingFilter(R.TOPIC, "hidden-848")])

    member, = rest.get(f"/v3/clusters/{kafka.engine.topics.cluster_id}/consumer-groups/g-848").json["members"]
    assert [p["topic_name"] for p in member["assignment"]] == ["shared"]
    page = console.get("/groups/g-848").get_data(as_text=True)
    assert "shared" in page and "hidden-848" not in page
