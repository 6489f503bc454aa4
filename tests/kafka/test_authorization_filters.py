"""What a principal that may Describe a transaction or a group, but not every topic it
touches, is told -- on Kafka 4.4 and on Exactly, compared: DescribeTransactions leaves
out the topics it may not Describe, OffsetFetch of all a group's offsets leaves them out,
and ConsumerGroupDescribe refuses a group assigned one (TOPIC_AUTHORIZATION_FAILED,
KAFKA-18813). The console's and REST's filters follow these answers
(tests/test_access_faces.py).

Each broker has a PLAINTEXT listener for the operator (User:ANONYMOUS, a super user)
and a SASL_PLAINTEXT one where ``carol`` signs in with PLAIN; she is granted Describe on
the transactional id, the groups and the topic ``shared`` only, never on ``hidden``."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from exactly.app.kafka.wire import ApiKey
from exactly.app.spark.kafka_client import KafkaConnection
from tests.kafka.conftest import SHARED_CONFIG, create_internal_topics
from tests.kafka.differential import Peer, create_topics, plain, retry, settled
from tests.kafka.real_kafka import RealKafka
from tests.kafka_support import free_port
from tests.sasl_support import ListenersBroker
from tests.waiting import eventually

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(240)]
CAROL = ("carol", "carol-secret")
TXN, GROUP_848, GROUP_OFFSETS = "t-open", "g-848", "g-offsets"
#: a group carol may Describe that does not exist, and one she may not Describe
MISSING, NOT_HERS = "g-missing", "g-not-hers"
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND = 29, 30, 69


class Sides:
    """A broker's two faces: the operator's raw connections and carol's."""

    def __init__(self, peer: Peer, sasl_port: int) -> None:
        self.peer, self.sasl_port = peer, sasl_port

    def as_carol(self) -> KafkaConnection:
        """A raw connection on the SASL listener, signed in as carol with PLAIN."""
        connection = KafkaConnection("127.0.0.1", self.sasl_port, "carol-test", 20)
        assert connection.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        user, password = CAROL
        signed_in = connection.request(ApiKey.SASL_AUTHENTICATE, 2,
                                       {"auth_bytes": f"\0{user}\0{password}".encode()})
        assert signed_in.error_code == 0, signed_in
        return connection


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[Sides]:
    sasl_port = free_port()
    broker = RealKafka(tmp_path / "kafka", {
        **SHARED_CONFIG, "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{CAROL[0]}="{CAROL[1]}";'})
    listeners = (f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                 f"CONTROLLER://127.0.0.1:{broker.controller_port}")
    broker.config.update({"listeners": listeners, "advertised.listeners": listeners,
                          "listener.security.protocol.map":
                              "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"})
    try:
        broker.start()
        create_internal_topics(broker)
        peer = Peer("kafka", broker.bootstrap)
        yield Sides(peer, sasl_port)
        peer.close()
    finally:
        broker.stop()


@pytest.fixture
def exactly(tmp_path: Path) -> Iterator[Sides]:
    with ListenersBroker(tmp_path / "exactly", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                         **SHARED_CONFIG) as served:
        served.add_user(*CAROL)
        peer = Peer("exactly", f"127.0.0.1:{served.port('PLAINTEXT')}")
        yield Sides(peer, served.port("SASL_PLAINTEXT"))
        peer.close()


def grant_carol(peer: Peer, *resources: tuple[int, str]) -> None:
    """Describe (8) for User:carol on each ``(resource type, name)``, LITERAL."""
    answer = peer.request(ApiKey.CREATE_ACLS, 3, {"creations": [
        {"resource_type": kind, "resource_name": name, "resource_pattern_type": 3, "principal": "User:carol",
         "host": "*", "operation": 8, "permission_type": 3} for kind, name in resources]})
    assert all(r["error_code"] == 0 for r in answer["results"]), answer


def set_up(sides: Sides) -> None:
    """The operator's doing: both topics, a transaction open on both, a KIP-848 member
    assigned both, committed offsets on both; carol's grants."""
    peer = sides.peer
    create_topics(peer, {"shared": (1, {}), "hidden": (1, {})})
    operator = peer.connection()
    init = settled(operator, ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": TXN, "transaction_timeout": 60_000,
                                                           "producer_id": -1, "producer_epoch": -1})
    added = settled(operator, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": init["producer_id"],
        "v3_and_below_producer_epoch": init["producer_epoch"],
        "v3_and_below_topics": [{"name": t, "partitions": [0]} for t in ("shared", "hidden")]})
    assert all(p["partition_error_code"] == 0 for t in added["results_by_topic_v3_and_below"]
               for p in t["results_by_partition"]), added
    joined = retry(lambda: plain(operator.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
        "group_id": GROUP_848, "member_id": uuid.uuid4().hex, "member_epoch": 0, "rebalance_timeout": 30_000,
        "topic_partitions": [], "subscribed_topic_names": ["shared", "hidden"]})))
    assert joined["error_code"] == 0, joined
    committed = settled(operator, ApiKey.OFFSET_COMMIT, 8, {
        "group_id": GROUP_OFFSETS, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                               "committed_leader_epoch": -1, "committed_metadata": None}]}
                   for t in ("shared", "hidden")]})
    assert all(p["error_code"] == 0 for t in committed["topics"] for p in t["partitions"]), committed
    grant_carol(peer, (5, TXN), (3, GROUP_848), (3, GROUP_OFFSETS), (3, MISSING), (2, "shared"))


def what_carol_is_told(sides: Sides) -> dict[str, Any]:
    carol = sides.as_carol()
    try:
        def ask(api: int, version: int, body: dict[str, Any]) -> Callable[[], dict[str, Any]]:
            return lambda: plain(carol.request(api, version, body))

        def described_once_granted() -> dict[str, Any] | None:  # Kafka's ACLs reach its broker a moment later
            answer = retry(ask(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN]}))
            return answer if answer["transaction_states"][0]["error_code"] == 0 else None

        described = eventually(described_once_granted, 30, "carol's grants")
        groups = retry(ask(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP_848, MISSING, NOT_HERS],
                                                               "include_authorized_operations": False}))["groups"]
        offsets = retry(ask(ApiKey.OFFSET_FETCH, 7, {"group_id": GROUP_OFFSETS, "topics": None,
                                                      "require_stable": False}))
        return {"transaction's topics": [t["topic"] for t in described["transaction_states"][0]["topics"]],
                # by id: Kafka lists the groups refused before the others, Exactly in the request's order
                "groups described": sorted(({k: v for k, v in g.items() if k != "error_message"} for g in groups),
                                           key=lambda g: g["group_id"]),
                "offsets' topics": sorted(t["name"] for t in offsets["topics"]), "offsets' error": offsets["error_code"]}
    finally:
        carol.close()


def test_carol_is_told_only_of_the_topics_she_may_describe_alike(kafka: Sides, exactly: Sides) -> None:
    told = {}
    for sides in (kafka, exactly):
        set_up(sides)
        told[sides.peer.name] = what_carol_is_told(sides)
    refused = {"group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
               "authorized_operations": -2147483648}
    assert told["kafka"] == {"transaction's topics": ["shared"], "groups described": [
        {"error_code": TOPIC_AUTHORIZATION_FAILED, "group_id": GROUP_848, **refused},
        {"error_code": GROUP_ID_NOT_FOUND, "group_id": MISSING, **refused},
        {"error_code": GROUP_AUTHORIZATION_FAILED, "group_id": NOT_HERS, **refused}],  # sorted by id
        "offsets' topics": ["shared"], "offsets' error": 0}, told
    assert told["exactly"] == told["kafka"]
