"""Real clients per principal, allowed and denied, with the authorizer on: confluent-kafka,
kafka-python, aiokafka and kcat on SASL_PLAINTEXT and SASL_SSL; the seeds' endless
transaction attack and a cross-principal producer-id hijack over the wire; ACL changes
taking effect without a restart; and the console refusing writes without a login and a
CSRF token.

One served broker for the module (``exactly.app.server.Server``: both SASL listeners, TLS from
its generated CA, the HTTP face), ``User:admin`` its super user. ``alice`` is granted
what each test needs; ``mallory`` is the principal refused. Each test names its own
topics, so no test sees another's ACLs."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import TopicAuthorizationFailedError as AioTopicAuthorizationFailed
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclBinding as CfAclBinding
from confluent_kafka.admin import AclBindingFilter as CfAclBindingFilter
from confluent_kafka.admin import AclOperation as CfAclOperation
from confluent_kafka.admin import AclPermissionType as CfAclPermissionType
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import ResourcePatternType, ResourceType as CfResourceType
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import TopicAuthorizationFailedError as KpTopicAuthorizationFailed

from exactly.app.cli.admin_connection import authenticate
from exactly.app.kafka.api import ApiKey
from exactly.app.security import acl as model
from exactly.app.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.app.server import Server
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from tests.conftest import data_batch
from tests.kafka_support import read_to_end
from tests.sasl_support import ClientSettings
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)
KCAT = shutil.which("kcat") or "/usr/bin/kcat"
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
LISTENERS = "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "mallory": "mallory-secret"}
O, R = AclOperation, ResourceType


class Secured(ClientSettings):
    """The module's broker, its users, and each principal's client settings."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.engine = server.engine
        self.ca = str(Path(server.data_dir) / "tls" / "ca.pem")
        for user, password in PASSWORDS.items():
            self.add_user(user, password)

    def port(self, name: str) -> int:
        return next(k.node.port for k in self.server.kafka_listeners if k.spec.name == name)

    def login(self, user: str, protocol: str = "SASL_SSL", mechanism: str = "SCRAM-SHA-512",
              **extra: Any) -> dict[str, Any]:
        """confluent-kafka's settings for ``user``."""
        return self.confluent(protocol, mechanism, user, PASSWORDS[user], **extra)

    def python_login(self, user: str, protocol: str, mechanism: str) -> dict[str, Any]:
        """kafka-python's and aiokafka's settings for ``user``."""
        return self.python_client(protocol, mechanism, user, PASSWORDS[user])

    def raw(self, user: str) -> KafkaConnection:
        """A raw protocol connection logged in as ``user`` on SASL_PLAINTEXT."""
        connection = KafkaConnection("127.0.0.1", self.port("SASL_PLAINTEXT"), f"raw-{user}", 10.0)
        authenticate(connection, "SCRAM-SHA-256", user, PASSWORDS[user])
        return connection

    def topic(self, prefix: str, partitions: int = 1) -> str:
        """A new topic, created as the admin would."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.engine.call(self.engine.topics.create_topic, name, partitions)
        return name

    def grant(self, user: str, resource_type: ResourceType, name: str, *operations: AclOperation) -> None:
        bindings = [model.AclBinding(model.ResourcePattern(resource_type, name, PatternType.LITERAL),
                                     model.AccessControlEntry(f"User:{user}", "*", op, AclPermissionType.ALLOW))
                    for op in operations]
        assert self.engine.call(self.engine.access.create_acls, bindings) == [None] * len(bindings)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    config = {"listeners": LISTENERS, "exactly.ssl.generate": "true", "authorizer.class.name": STANDARD,
              "super.users": "User:admin"}
    with Server(tmp_path_factory.mktemp("security") / "data", **config) as server:
        yield Secured(server)


def delivery_errors(config: dict[str, Any], topic: str, value: bytes = b"v") -> list:
    """Produce one record with confluent-kafka: the delivery's error (``[None]`` if delivered)."""
    producer = Producer({**config, "enable.idempotence": False, "retries": 0})
    errors: list = []
    producer.produce(topic, value, on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(30) == 0
    return [e.code() if e is not None else None for e in errors]


def first_consumer_error(config: dict[str, Any], topic: str) -> int:
    """The error confluent-kafka's consumer hears reading ``topic`` from offset 0."""
    consumer = Consumer({**config, "group.id": f"g-{topic}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])

        def error() -> int | None:
            message = consumer.poll(0.5)
            assert message is None or message.error() is not None, "a denied principal read a record"
            return message.error().code() if message is not None else None

        return eventually(error, 15, "the consumer's error")
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol,mechanism", [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"),
                                                ("SASL_SSL", "SCRAM-SHA-512")])
def test_confluent_kafka_per_principal(secured: Secured, protocol: str, mechanism: str) -> None:
    topic = secured.topic("cf")
    secured.grant("alice", R.TOPIC, topic, O.READ, O.WRITE)
    secured.grant("alice", R.GROUP, topic, O.READ)
    # mallory may see the topic and use its group -- so the refusals are Produce's and Fetch's
    secured.grant("mallory", R.TOPIC, topic, O.DESCRIBE)
    secured.grant("mallory", R.GROUP, f"g-{topic}", O.READ)
    alice = secured.login("alice", protocol, mechanism)
    mallory = secured.login("mallory", protocol, mechanism)
    assert delivery_errors(alice, topic, b"alice's") == [None]
    assert read_to_end({**alice, "group.id": topic}, topic, 1) == [b"alice's"]
    assert delivery_errors(mallory, topic) == [TopicAuthorizationFailedError.code]
    assert first_consumer_error(mallory, topic) == TopicAuthorizationFailedError.code
    assert secured.engine.partitions.partition_offsets(topic, 0).high_watermark == 1


@pytest.mark.parametrize("protocol,mechanism", [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512")])
def test_kafka_python_per_principal(secured: Secured, protocol: str, mechanism: str) -> None:
    topic = secured.topic("kp")
    secured.grant("alice", R.TOPIC, topic, O.READ, O.WRITE)
    producer = KafkaProducer(**secured.python_login("alice", protocol, mechanism))
    producer.send(topic, b"from kafka-python").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=30_000,
                             **secured.python_login("alice", protocol, mechanism))
    assert next(iter(consumer)).value == b"from kafka-python"
    consumer.close()
    denied = KafkaProducer(max_block_ms=10_000, **secured.python_login("mallory", protocol, mechanism))
    with pytest.raises(KpTopicAuthorizationFailed):
        denied.send(topic, b"forged").get(timeout=30)
    denied.close()


@pytest.mark.parametrize("protocol,mechanism", [("SASL_SSL", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256")])
def test_aiokafka_per_principal(secured: Secured, protocol: str, mechanism: str) -> None:
    topic = secured.topic("aio")
    secured.grant("alice", R.TOPIC, topic, O.READ, O.WRITE)

    async def run() -> bytes:
        producer = AIOKafkaProducer(**secured.python_login("alice", protocol, mechanism))
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"from aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest",
                                    **secured.python_login("alice", protocol, mechanism))
        await consumer.start()
        try:
            read = (await asyncio.wait_for(consumer.getone(), 30)).value
        finally:
            await consumer.stop()
        denied = AIOKafkaProducer(request_timeout_ms=10_000, **secured.python_login("mallory", protocol, mechanism))
        await denied.start()
        try:
            with pytest.raises(AioTopicAuthorizationFailed):
                await asyncio.wait_for(denied.send_and_wait(topic, b"forged"), 30)
        finally:
            await denied.stop()
        return read

    assert asyncio.run(run()) == b"from aiokafka"


@pytest.mark.skipif(not Path(KCAT).exists(), reason="kcat is not installed (make test installs it)")
def test_kcat_per_principal(secured: Secured) -> None:
    topic = secured.topic("kcat")
    secured.grant("alice", R.TOPIC, topic, O.READ, O.WRITE)

    def kcat(user: str, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        options = [f"-X{key}={value}" for key, value in secured.login(user).items() if key != "bootstrap.servers"]
        return subprocess.run([KCAT, "-b", f"127.0.0.1:{secured.port('SASL_SSL')}", *options, *argv],
                              input=stdin, capture_output=True, text=True, timeout=30)

    assert kcat("alice", "-P", "-t", topic, stdin="one\ntwo\n").returncode == 0
    read = kcat("alice", "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert read.returncode == 0 and read.stdout.split() == ["one", "two"]
    denied = kcat("mallory", "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert denied.returncode != 0 and "authorization failed" in denied.stderr.lower(), denied.stderr


def test_the_endless_transaction_attack_over_the_wire(secured: Secured) -> None:
    """Write on the topic but not on the transactional id: no transaction begins, and a
    forged transactional Produce leaves nothing behind the LSO."""
    topic = secured.topic("endless")
    secured.grant("mallory", R.TOPIC, topic, O.WRITE)
    secured.grant("alice", R.TRANSACTIONAL_ID, "victim-tx", O.WRITE)
    producer = Producer(secured.login("mallory", **{"transactional.id": "victim-tx"}))
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(30)
    assert refused.value.args[0].code() == TransactionalIdAuthorizationFailedError.code
    alice, mallory = secured.raw("alice"), secured.raw("mallory")
    try:
        init = alice.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "victim-tx", "transaction_timeout": 60000,
                                                         "producer_id": -1, "producer_epoch": -1})
        assert int(init.error_code) == 0
        forged = {"transactional_id": "victim-tx", "acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": data_batch(
                [b"held"], producer_id=init.producer_id, epoch=init.producer_epoch, sequence=0,
                transactional=True)}]}]}
        answer = mallory.request(ApiKey.PRODUCE, 7, forged).responses[0].partition_responses[0]
        assert int(answer.error_code) == TransactionalIdAuthorizationFailedError.code
    finally:
        alice.close()
        mallory.close()
    offsets = secured.engine.partitions.partition_offsets(topic, 0)
    assert offsets.high_watermark == 0 and offsets.last_stable_offset == offsets.high_watermark


def test_a_cross_principal_producer_id_hijack_is_refused_over_the_wire(secured: Secured) -> None:
    """mallory, with Write on the topic, sends a Produce carrying alice's producer id:
    refused, nothing written; alice's own batch with it goes in."""
    topic = secured.topic("hijack")
    for user in ("alice", "mallory"):
        secured.grant(user, R.TOPIC, topic, O.WRITE)
    alice, mallory = secured.raw("alice"), secured.raw("mallory")
    try:
        init = alice.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                         "producer_id": -1, "producer_epoch": -1})
        assert int(init.error_code) == 0

        def produce(connection: KafkaConnection, value: bytes) -> int:
            body = {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": data_batch(
                    [value], producer_id=init.producer_id, epoch=init.producer_epoch, sequence=0)}]}]}
            return int(connection.request(ApiKey.PRODUCE, 7, body).responses[0].partition_responses[0].error_code)

        assert produce(mallory, b"hijacked") == ClusterAuthorizationFailedError.code
        assert secured.engine.partitions.partition_offsets(topic, 0).high_watermark == 0
        assert produce(alice, b"alice's") == 0
    finally:
        alice.close()
        mallory.close()
    assert secured.engine.partitions.partition_offsets(topic, 0).high_watermark == 1


def test_acl_changes_take_effect_without_a_restart(secured: Secured) -> None:
    """The admin grants and revokes over the wire (AdminClient on SASL_SSL); mallory's
    next request hears each change."""
    topic = secured.topic("live")
    admin = AdminClient(secured.login("admin"))
    write = CfAclBinding(CfResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:mallory", "*",
                         CfAclOperation.WRITE, CfAclPermissionType.ALLOW)
    mallory = secured.login("mallory")
    assert delivery_errors(mallory, topic) == [TopicAuthorizationFailedError.code]
    admin.create_acls([write])[write].result(timeout=30)
    assert delivery_errors(mallory, topic) == [None]
    deleted = CfAclBindingFilter(CfResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:mallory", "*",
                                 CfAclOperation.ANY, CfAclPermissionType.ANY)
    assert len(admin.delete_acls([deleted])[deleted].result(timeout=30)) == 1
    assert delivery_errors(mallory, topic) == [TopicAuthorizationFailedError.code]
    assert secured.engine.partitions.partition_offsets(topic, 0).high_watermark == 1


def test_the_console_refuses_writes_without_a_login_and_a_csrf_token(secured: Secured) -> None:
    """The authorizer on and no ``http.auth.token``: the console wants a login, and a
    logged-in write its CSRF token, over real HTTP."""
    url = secured.server.http_url
    fields = {"resource_type": "TOPIC", "resource_name": "console-made", "pattern_type": "LITERAL",
              "principal": "User:carol", "host": "*", "operation": "READ", "permission": "ALLOW"}

    def held() -> bool:
        found = secured.engine.call(secured.engine.access.describe_acls, model.AclBindingFilter(principal="User:carol"))
        return bool(found)

    with requests.Session() as browser:
        anonymous = browser.post(f"{url}/acls/add", data=fields, allow_redirects=False, timeout=30)
        assert anonymous.status_code == 302 and "/login" in anonymous.headers["Location"]
        signed_in = browser.post(f"{url}/login", data={"user": "admin", "password": PASSWORDS["admin"]},
                                 allow_redirects=False, timeout=30)
        assert signed_in.status_code == 302
        assert browser.post(f"{url}/acls/add", data=fields, allow_redirects=False, timeout=30).status_code == 403
        assert not held()
        token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get(f"{url}/acls", timeout=30).text)
        added = browser.post(f"{url}/acls/add", data={**fields, "csrf_token": token.group(1)},
                             allow_redirects=False, timeout=30)
        assert added.status_code == 303 and held()
