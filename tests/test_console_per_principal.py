"""A console for every principal (issue 29, item 6): a team member who logs in sees the
topics it may Describe (as Metadata filters them), is offered only the actions it may
perform, may ask "who may do what" about itself (not about others), and reads a login
page worded for this broker; ``/metrics`` needs Describe on the cluster.

Before: 403 on the overview and the topics page, 403 on "who may do what" about
oneself, "Delete topic" and "Produce a record" offered on a topic one may only read, a
login page asking for a token the broker does not have, ``/metrics`` open to
``User:ANONYMOUS``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer
from flask.testing import FlaskClient

from exactly.app import Broker
from exactly.app.engine import mirror_reads
from exactly.app.http import HttpSettings, create_app
from exactly.app.security import acl as model
from exactly.app.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.app.security.scram import ScramMechanism, new_credential
from exactly.coordinator.mirror_db import reader_engine
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS
from tests.sasl_support import ListenersBroker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin"}


def grant(broker: Broker, operation: AclOperation, name: str, pattern: PatternType = PatternType.LITERAL) -> None:
    binding = model.AclBinding(model.ResourcePattern(ResourceType.TOPIC, name, pattern),
                               model.AccessControlEntry("User:team", "*", operation, AclPermissionType.ALLOW))
    assert broker.engine.call(broker.engine.access.create_acls, [binding]) == [None]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN, **STANDARD) as b:
        for name in ("team-a", "team-b", "secret"):
            b.create_topic(name, 1)
        b.engine.call(b.engine.access.alter_scram_credentials, [],
                      [new_credential("team", ScramMechanism.SCRAM_SHA_256, "team-secret")])
        grant(b, AclOperation.READ, "team-", PatternType.PREFIXED)
        yield b


@pytest.fixture
def team(broker: Broker) -> FlaskClient:
    client = create_app(broker.engine, HttpSettings(), test_config={"TESTING": True}).test_client()
    assert client.post("/login", data={"user": "team", "password": "team-secret"}).status_code == 302
    return client


def test_a_team_member_sees_its_topics_and_only_the_actions_it_may_take(broker: Broker, team: FlaskClient) -> None:
    landing = team.get("/")
    assert landing.status_code == 302 and landing.headers["Location"].endswith("/topics")
    topics = team.get("/topics")
    assert topics.status_code == 200
    html = topics.get_data(as_text=True)
    assert "team-a" in html and "team-b" in html and "secret" not in html
    assert team.get("/topics/secret").status_code == 403
    page = team.get("/topics/team-a").get_data(as_text=True)
    assert "Produce a record" not in page and "Delete topic" not in page
    grant(broker, AclOperation.WRITE, "team-a")
    page = team.get("/topics/team-a").get_data(as_text=True)
    assert "Produce a record" in page and "Delete topic" not in page


def test_who_may_do_what_about_oneself_only(team: FlaskClient) -> None:
    mine = team.get("/access")
    assert mine.status_code == 200
    html = mine.get_data(as_text=True)
    assert "team-a" in html and "secret" not in html
    assert team.get("/access", query_string={"principal": "User:admin"}).status_code == 403


def test_the_login_page_asks_for_what_this_broker_has(broker: Broker) -> None:
    no_token = create_app(broker.engine, HttpSettings(), test_config={"TESTING": True}).test_client()
    html = no_token.get("/login").get_data(as_text=True)
    assert "Sign in with your user name and password" in html and "http.auth.token" not in html
    wrong = no_token.post("/login", data={"user": "team", "password": "nope"}).get_data(as_text=True)
    assert "That user and password do not sign in." in wrong and "no token" not in wrong


def test_metrics_need_describe_on_the_cluster(broker: Broker, team: FlaskClient) -> None:
    api = create_app(broker.engine, HttpSettings(token="s3cret"), test_config={"TESTING": True}).test_client()
    assert api.get("/metrics").status_code == 401, "a token is configured: say who you are"
    anonymous = create_app(broker.engine, HttpSettings(), test_config={"TESTING": True}).test_client()
    refused = anonymous.get("/metrics")
    assert refused.status_code == 403 and b"team-a" not in refused.data
    scraped = api.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert scraped.status_code == 200 and b"exactly_partition_high_watermark" in scraped.data


def test_transactions_groups_and_the_navigation_show_what_the_principal_may_see(
        broker: Broker, team: FlaskClient) -> None:
    engine = broker.engine
    for txn_id in ("team-tx", "other-tx"):
        engine.call(engine.transactions.init_producer_id, txn_id, 60_000)
    binding = model.AclBinding(model.ResourcePattern(ResourceType.TRANSACTIONAL_ID, "team-", PatternType.PREFIXED),
                               model.AccessControlEntry("User:team", "*", AclOperation.WRITE, AclPermissionType.ALLOW))
    assert engine.call(engine.access.create_acls, [binding]) == [None]
    transactions = team.get("/transactions")
    assert transactions.status_code == 200
    html = transactions.get_data(as_text=True)
    assert 'data-txn="team-tx"' in html and "other-tx" not in html
    assert team.get("/groups").status_code == 200
    nav = team.get("/topics").get_data(as_text=True)
    assert 'href="/transactions"' in nav and 'href="/access"' in nav
    assert 'href="/clients"' in nav and 'href="/history"' in nav
    assert 'href="/faults"' not in nav and 'href="/acls"' not in nav


# -- the clients and history pages: a team member's own connections and transactions --------


def allow(engine, resource_type: ResourceType, name: str, operation: AclOperation) -> None:
    binding = model.AclBinding(model.ResourcePattern(resource_type, name, PatternType.PREFIXED),
                               model.AccessControlEntry("User:team", "*", operation, AclPermissionType.ALLOW))
    assert engine.call(engine.access.create_acls, [binding]) == [None]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ListenersBroker]:
    """A broker with a PLAINTEXT listener for its operator (User:ANONYMOUS, a super user
    here) and a SASL one for ``team`` (Read and Describe on ``team-*``) and ``admin``;
    a transaction each of ``team-tx`` (on ``team-a`` and ``secret``) and ``other-tx``
    (on ``secret``), finished and mirrored."""
    with ListenersBroker(tmp_path_factory.mktemp("shared") / "data",
                         "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                         **{**STANDARD, "super.users": "User:admin;User:ANONYMOUS"}) as kafka:
        for user in ("team", "admin"):
            kafka.add_user(user, user + "-secret")
        allow(kafka.engine, ResourceType.TOPIC, "team-", AclOperation.READ)
        allow(kafka.engine, ResourceType.TRANSACTIONAL_ID, "team-", AclOperation.DESCRIBE)
        for name in ("team-a", "secret"):
            kafka.broker.create_topic(name, 1)
        for txn_id, topics in (("team-tx", ("team-a", "secret")), ("other-tx", ("secret",))):
            producer = Producer(kafka.confluent("PLAINTEXT", **{"transactional.id": txn_id}))
            producer.init_transactions(10)
            producer.begin_transaction()
            for topic in topics:
                producer.produce(topic, b"x")
            producer.commit_transaction(10)
            del producer  # destroyed: no client outlives the fixture's test
        db = reader_engine(kafka.broker.mirror.path)
        eventually(lambda: kafka.broker.mirror.catch_up() >= 0 and mirror_reads.finished_transactions(db)[1] == 2,
                   10, "the mirror to read both commits")
        db.dispose()
        yield kafka


def console(kafka: ListenersBroker, user: str) -> FlaskClient:
    client = create_app(kafka.engine, HttpSettings(), test_config={"TESTING": True},
                        mirror=kafka.broker.mirror).test_client()
    assert client.post("/login", data={"user": user, "password": user + "-secret"}).status_code == 302
    return client


def test_history_lists_the_transactions_and_partitions_the_principal_may_describe(shared: ListenersBroker) -> None:
    team = console(shared, "team").get("/history")
    assert team.status_code == 200
    html = team.get_data(as_text=True)
    assert re.findall(r'data-finished="([^"]+)"', html) == ["team-tx"]
    assert "team-a" in html and "secret" not in html and "1 finished" in html
    everything = console(shared, "admin").get("/history").get_data(as_text=True)
    assert sorted(re.findall(r'data-finished="([^"]+)"', everything)) == ["other-tx", "team-tx"]
    assert "secret" in everything


def test_clients_shows_a_principal_its_own_connections(shared: ListenersBroker) -> None:
    mine = Producer(shared.confluent("SASL_PLAINTEXT", "SCRAM-SHA-256", "team", "team-secret",
                                     **{"client.id": "team-app"}))
    theirs = Producer(shared.confluent("PLAINTEXT", **{"client.id": "operator-app"}))
    try:
        for producer in (mine, theirs):
            producer.list_topics(timeout=10)
        # librdkafka moves from its bootstrap connection to the broker's own: wait for both to be listed
        def both_listed() -> str | None:
            page = console(shared, "admin").get("/clients").get_data(as_text=True)
            return page if 'data-client="team-app"' in page and 'data-client="operator-app"' in page else None
        everyone = eventually(both_listed, 10, "both clients connected")
        team = console(shared, "team").get("/clients")
    finally:
        del mine, theirs, producer
    assert team.status_code == 200
    html = team.get_data(as_text=True)
    assert 'data-client="team-app" data-principal="User:team"' in html and "operator-app" not in html
    assert 'data-client="operator-app" data-principal="User:ANONYMOUS"' in everyone
