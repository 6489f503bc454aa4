"""A console for every principal (issue 29, item 6): a team member who logs in sees the
topics it may Describe (as Metadata filters them), is offered only the actions it may
perform, may ask "who may do what" about itself (not about others), and reads a login
page worded for this broker; ``/metrics`` needs Describe on the cluster.

Before: 403 on the overview and the topics page, 403 on "who may do what" about
oneself, "Delete topic" and "Produce a record" offered on a topic one may only read, a
login page asking for a token the broker does not have, ``/metrics`` open to
``User:ANONYMOUS``."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from flask.testing import FlaskClient

from exactly.app import Broker
from exactly.app.http import HttpSettings, create_app
from exactly.app.security import acl as model
from exactly.app.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.app.security.scram import ScramMechanism, new_credential
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS

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
    assert 'href="/faults"' not in nav and 'href="/acls"' not in nav and 'href="/clients"' not in nav
