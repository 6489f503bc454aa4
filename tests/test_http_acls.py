"""ACLs over HTTP and HTTP under the same principals as the Kafka port.

Confluent REST v3's ``/v3/clusters/<id>/acls`` (search with each filter, create,
delete, batch) over a real broker with the StandardAuthorizer on; each request
authorized as its principal (the token's ``User:admin``, a super user; another
token's ``User:alice``; ``User:ANONYMOUS`` with no token), a denial being 403 with
Kafka's error; the console's ACL, Users and "who may do what" pages; and the mirror's
``acls`` table after a restart and after ``exactly db rebuild``. One broker serves the
module: each test uses resource names of its own and removes what it adds.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import text

from exactly.app import Broker
from exactly.app.engine.mirror_source import EngineMirrorSource
from exactly.app.http import HttpSettings, create_app
from exactly.app.http.access import DECLARED, needs_of
from exactly.app.security.acl import AclBindingFilter
from exactly.app.security.scram import ScramMechanism, new_credential
from exactly.coordinator.mirror_db import reader_engine
from tests.mirror_oracle import expected_state_from_logs, read_state
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS

pytestmark = pytest.mark.timeout(60)

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin"}
ADMIN = {"Authorization": "Bearer s3cret"}
ALICE = {"Authorization": "Bearer alice-token"}
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with Broker(tmp_path_factory.mktemp("acls") / "data", **SMALL_INTERNAL_TOPICS, **FROZEN, **STANDARD) as b:
        b.create_topic("orders", 1)
        b.create_topic("payments", 1)
        yield b


def _app(broker: Broker, **settings: str) -> Flask:
    return create_app(broker.engine, HttpSettings(**settings), test_config={"TESTING": True}, mirror=broker.mirror)


@pytest.fixture(scope="module")
def admin(broker: Broker) -> FlaskClient:
    """The API as ``User:admin``, a super user (the token's principal by default)."""
    return _app(broker, token="s3cret").test_client()


@pytest.fixture(scope="module")
def alice(broker: Broker) -> FlaskClient:
    """The API as ``User:alice`` (a token whose principal is alice), who has no super powers."""
    return _app(broker, token="alice-token", token_principal="User:alice").test_client()


@pytest.fixture
def cluster(broker: Broker) -> str:
    return broker.engine.topics.cluster_id


def acl(resource_type: str, name: str, principal: str, operation: str, permission: str = "ALLOW",
        pattern_type: str = "LITERAL", host: str = "*") -> dict[str, str]:
    return {"resource_type": resource_type, "resource_name": name, "pattern_type": pattern_type,
            "principal": principal, "host": host, "operation": operation, "permission": permission}


def drop(admin: FlaskClient, cluster: str, principal: str) -> None:
    response = admin.delete(f"/v3/clusters/{cluster}/acls", query_string={"principal": principal}, headers=ADMIN)
    assert response.status_code == 200, response.json


# -- the table ---------------------------------------------------------------------------------


def test_every_endpoint_says_what_it_needs(admin: FlaskClient) -> None:
    """A new endpoint cannot skip authorization: its view declares what it needs where
    it is registered (a REST Route, the console's page and view), and a path argument
    it names is one of its rule's."""
    app = admin.application
    rules = list(app.url_map.iter_rules())
    missing = sorted({rule.endpoint for rule in rules if app.view_functions[rule.endpoint] not in DECLARED})
    assert not missing, f"declare what these endpoints need where they are registered: {missing}"
    for rule in rules:
        for need in needs_of(app, rule.endpoint):
            assert not need.place.arg or need.place.arg in rule.arguments, (rule.endpoint, need)


# -- REST v3 ACLs ---------------------------------------------------------------------------------


def test_create_search_each_filter_and_delete_as_confluent(admin: FlaskClient, cluster: str) -> None:
    base = f"/v3/clusters/{cluster}/acls"
    mine = [acl("TOPIC", "rest-orders", "User:rest", "READ"),
            acl("TOPIC", "rest-", "User:rest", "WRITE", pattern_type="PREFIXED"),
            acl("GROUP", "rest-group", "User:rest", "READ", host="10.0.0.1"),
            acl("TRANSACTIONAL_ID", "rest-tx", "User:rest", "WRITE", permission="DENY")]
    created = admin.post(base, json=mine[0], headers=ADMIN)
    assert created.status_code == 201 and created.data == b""
    assert "resource_name=rest-orders" in created.headers["Location"]
    batch = admin.post(base + ":batch", json={"data": mine[1:]}, headers=ADMIN)
    assert batch.status_code == 204, batch.json

    listed = admin.get(base, query_string={"principal": "User:rest"}, headers=ADMIN).json
    assert listed["kind"] == "KafkaAclList" and listed["metadata"]["self"].endswith("principal=User:rest")
    first = next(a for a in listed["data"] if a["resource_name"] == "rest-orders")
    assert first == {"kind": "KafkaAcl", "metadata": {"self": created.headers["Location"], "resource_name": None},
                     "cluster_id": cluster, **mine[0]}
    assert len(listed["data"]) == 4
    for name, value, expected in [("resource_type", "group", {"rest-group"}),
                                  ("resource_name", "rest-tx", {"rest-tx"}),
                                  ("pattern_type", "PREFIXED", {"rest-"}),
                                  ("host", "10.0.0.1", {"rest-group"}),
                                  ("operation", "WRITE", {"rest-", "rest-tx"}),
                                  ("permission", "DENY", {"rest-tx"})]:
        found = admin.get(base, query_string={"principal": "User:rest", name: value}, headers=ADMIN).json["data"]
        assert {a["resource_name"] for a in found} == expected, name
    match = admin.get(base, query_string={"resource_type": "TOPIC", "resource_name": "rest-orders",
                                          "pattern_type": "MATCH", "principal": "User:rest"}, headers=ADMIN).json
    assert {a["resource_name"] for a in match["data"]} == {"rest-orders", "rest-"}  # the literal and its prefix

    deleted = admin.delete(base, query_string={"principal": "User:rest", "resource_type": "TOPIC"}, headers=ADMIN)
    assert deleted.status_code == 200
    assert {a["resource_name"] for a in deleted.json["data"]} == {"rest-orders", "rest-"}
    assert {a["resource_name"] for a in admin.get(base, query_string={"principal": "User:rest"},
                                                  headers=ADMIN).json["data"]} == {"rest-group", "rest-tx"}
    drop(admin, cluster, "User:rest")


def test_bad_acls_are_kafkas_invalid_request(admin: FlaskClient, cluster: str) -> None:
    base = f"/v3/clusters/{cluster}/acls"
    for wrong in (acl("ANY", "x", "User:a", "READ"), acl("TOPIC", "x", "alice", "READ"),
                  acl("TOPIC", "x", "User:a", "READ", pattern_type="MATCH"), acl("TOPIC", "x", "User:a", "FLY")):
        response = admin.post(base, json=wrong, headers=ADMIN)
        assert response.status_code == 400 and response.json["error_name"] == "INVALID_REQUEST", wrong
    assert admin.get(base, query_string={"operation": "FLY"}, headers=ADMIN).status_code == 400


def test_without_an_authorizer_acls_are_security_disabled(broker: Broker, tmp_path: Path) -> None:
    with Broker(tmp_path / "plain", **SMALL_INTERNAL_TOPICS, **FROZEN) as plain:
        client = create_app(plain.engine, test_config={"TESTING": True}).test_client()
        response = client.get(f"/v3/clusters/{plain.engine.topics.cluster_id}/acls")
        assert response.status_code == 400
        assert response.json["error_code"] == 40002 and response.json["error_name"] == "SECURITY_DISABLED"
        assert response.json["kafka_error_code"] == 54
        # and with no authorizer every request of User:ANONYMOUS is served as before
        plain.create_topic("free", 1)
        assert client.get(f"/v3/clusters/{plain.engine.topics.cluster_id}/topics/free").status_code == 200


# -- each request as its principal -----------------------------------------------------------------


def test_a_denied_principal_gets_403_with_kafkas_error(admin: FlaskClient, alice: FlaskClient,
                                                       cluster: str) -> None:
    base = f"/v3/clusters/{cluster}"
    read = alice.get(f"{base}/topics/orders/partitions/0/records", headers=ALICE)
    assert read.status_code == 403
    assert read.json["error_name"] == "TOPIC_AUTHORIZATION_FAILED" and read.json["kafka_error_code"] == 29
    assert read.json["error_code"] == 40301
    produce = alice.post(f"{base}/topics/orders/records", json={"value": {"type": "STRING", "data": "x"}},
                         headers=ALICE)
    assert produce.status_code == 403 and produce.json["error_name"] == "TOPIC_AUTHORIZATION_FAILED"
    init = alice.post(f"{base}/transactions/alice-tx/init", headers=ALICE)
    assert init.status_code == 403 and init.json["error_name"] == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    acls = alice.get(f"{base}/acls", headers=ALICE)
    assert acls.status_code == 403 and acls.json["error_name"] == "CLUSTER_AUTHORIZATION_FAILED"
    abort = alice.post(f"{base}/transactions/alice-tx/admin-abort", headers=ALICE)
    assert abort.status_code == 403 and abort.json["error_name"] == "CLUSTER_AUTHORIZATION_FAILED"
    assert alice.get(f"{base}/topics", headers=ALICE).json["data"] == []  # filtered by Describe
    assert alice.get(f"{base}/consumer-groups/g/lags", headers=ALICE).json["error_name"] == \
        "GROUP_AUTHORIZATION_FAILED"

    for grant in (acl("TOPIC", "orders", "User:alice", "READ"), acl("TOPIC", "orders", "User:alice", "WRITE")):
        assert admin.post(f"{base}/acls", json=grant, headers=ADMIN).status_code == 201
    try:
        assert alice.get(f"{base}/topics/orders/partitions/0/records", headers=ALICE).status_code == 200
        assert alice.post(f"{base}/topics/orders/records", json={"value": {"type": "STRING", "data": "x"}},
                          headers=ALICE).status_code == 200
        assert [t["topic_name"] for t in alice.get(f"{base}/topics", headers=ALICE).json["data"]] == ["orders"]
        # Write on the topic is not Write on the transactional id (the endless-transaction attack)
        records = alice.post(f"{base}/transactions/alice-tx/records", headers=ALICE, json={
            "producer_id": 1, "producer_epoch": 0, "records": [{"topic_name": "orders"}]})
        assert records.json["error_name"] == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        # a denial beats the allows
        assert admin.post(f"{base}/acls", json=acl("TOPIC", "orders", "User:alice", "READ", "DENY"),
                          headers=ADMIN).status_code == 201
        assert alice.get(f"{base}/topics/orders/partitions/0/records", headers=ALICE).status_code == 403
    finally:
        drop(admin, cluster, "User:alice")


def test_transactional_records_need_write_on_each_topic(admin: FlaskClient, alice: FlaskClient,
                                                        cluster: str) -> None:
    base = f"/v3/clusters/{cluster}"
    assert admin.post(f"{base}/acls", json=acl("TRANSACTIONAL_ID", "alice-", "User:alice", "WRITE",
                                               pattern_type="PREFIXED"), headers=ADMIN).status_code == 201
    try:
        init = alice.post(f"{base}/transactions/alice-app/init", headers=ALICE)
        assert init.status_code == 200, init.json
        sent = alice.post(f"{base}/transactions/alice-app/records", headers=ALICE, json={
            "producer_id": init.json["producer_id"], "producer_epoch": init.json["producer_epoch"],
            "records": [{"topic_name": "payments", "value": {"type": "STRING", "data": "x"}}]})
        assert sent.status_code == 403 and sent.json["error_name"] == "TOPIC_AUTHORIZATION_FAILED"
        assert "payments" in sent.json["message"]
    finally:
        drop(admin, cluster, "User:alice")


def test_basic_authentication_and_the_token_principal(admin: FlaskClient, cluster: str) -> None:
    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    assert admin.get(f"/v3/clusters/{cluster}/acls", headers=basic("admin", "s3cret")).status_code == 200
    for wrong in (basic("admin", "guess"), basic("alice", "s3cret"), {"Authorization": "Basic !!!"}):
        response = admin.get(f"/v3/clusters/{cluster}/acls", headers=wrong)
        assert response.status_code == 401 and "Basic" in response.headers["WWW-Authenticate"]


# -- the console -----------------------------------------------------------------------------------


@pytest.fixture
def console(broker: Broker) -> FlaskClient:
    client = _app(broker, token="s3cret").test_client()
    assert client.post("/login", data={"user": "admin", "password": "s3cret"}).status_code == 302
    return client


def _csrf(client: FlaskClient, path: str) -> str:
    return CSRF.search(client.get(path).get_data(as_text=True)).group(1)


def test_the_acl_page_lists_adds_and_removes_with_csrf(console: FlaskClient, broker: Broker) -> None:
    page = console.get("/acls")
    assert page.status_code == 200 and 'href="/acls"' in page.get_data(as_text=True)  # in the nav
    fields = acl("GROUP", "console-group", "User:carol", "READ")
    assert console.post("/acls/add", data=fields).status_code == 403  # no CSRF token
    assert _held(broker, "User:carol") == set()
    token = _csrf(console, "/acls")
    added = console.post("/acls/add", data={**fields, "csrf_token": token})
    assert added.status_code == 303 and _held(broker, "User:carol") == {("console-group", "READ")}
    html = console.get("/acls", query_string={"principal": "User:carol"}).get_data(as_text=True)
    assert 'data-acl="User:carol READ console-group"' in html and "Added: ALLOW User:carol READ" in html
    assert "console-group" not in console.get("/acls", query_string={"principal": "User:dave"}).get_data(
        as_text=True)
    assert console.post("/acls/remove", data=fields).status_code == 403
    removed = console.post("/acls/remove", data={**fields, "csrf_token": token})
    assert removed.status_code == 303 and _held(broker, "User:carol") == set()
    wrong = console.post("/acls/add", data={**fields, "principal": "carol", "csrf_token": token},
                         follow_redirects=True)
    assert "Could not add the ACL: INVALID_REQUEST" in wrong.get_data(as_text=True)


def test_console_pages_need_a_login(broker: Broker) -> None:
    client = _app(broker, token="s3cret").test_client()
    for page in ("/acls", "/users", "/access"):
        assert "/login" in client.get(page).headers["Location"], page
    assert client.post("/acls/add", data=acl("TOPIC", "x", "User:x", "READ")).status_code == 302


def _held(broker: Broker, principal: str) -> set[tuple[str, str]]:
    found = broker.engine.call(broker.engine.access.describe_acls, AclBindingFilter(principal=principal))
    return {(b.pattern.name, b.entry.operation.name) for b in found}


def _cell(html: str, resource_type: str, name: str, operation: str) -> tuple[str, str, str]:
    """(allowed, reason, text) of one cell of the who-may-do-what table."""
    table = html[html.index(f'data-resource-type="{resource_type}"'):]
    row = table[table.index(f'data-resource="{name}"'):]
    cell = re.search(rf'data-operation="{operation}" data-allowed="(\w+)" data-reason="(\w+)">(.*?)</td>', row,
                     re.S)
    return cell.group(1), cell.group(2), cell.group(3)


def test_who_may_do_what_explains_allow_deny_super_and_no_acl(console: FlaskClient, admin: FlaskClient,
                                                              cluster: str) -> None:
    for grant in (acl("TOPIC", "orders", "User:erin", "READ"), acl("TOPIC", "orders", "User:erin", "WRITE", "DENY"),
                  acl("TOPIC", "pay", "User:*", "WRITE", pattern_type="PREFIXED")):
        assert admin.post(f"/v3/clusters/{cluster}/acls", json=grant, headers=ADMIN).status_code == 201
    try:
        html = console.get("/access", query_string={"principal": "User:erin"}).get_data(as_text=True)
        allowed, reason, words = _cell(html, "TOPIC", "orders", "READ")
        assert (allowed, reason) == ("yes", "ALLOWED_BY_ACL") and "ALLOW User:erin READ on TOPIC" in words
        assert _cell(html, "TOPIC", "orders", "DESCRIBE")[:2] == ("yes", "ALLOWED_BY_ACL")  # implied by READ
        allowed, reason, words = _cell(html, "TOPIC", "orders", "WRITE")
        assert (allowed, reason) == ("no", "DENIED_BY_ACL") and "DENY User:erin WRITE" in words
        allowed, reason, words = _cell(html, "TOPIC", "payments", "WRITE")
        assert (allowed, reason) == ("yes", "ALLOWED_BY_ACL") and "User:* WRITE on TOPIC &#39;pay&#39; (PREFIXED)" in words
        assert _cell(html, "TOPIC", "orders", "DELETE")[:2] == ("no", "NOT_ALLOWED")
        assert _cell(html, "CLUSTER", "kafka-cluster", "ALTER")[:2] == ("no", "NO_ACL_DENIED")
        mine = console.get("/access").get_data(as_text=True)  # the signed-in principal by default
        assert 'value="User:admin"' in mine and _cell(mine, "TOPIC", "orders", "WRITE")[:2] == ("yes", "SUPER_USER")
        assert console.get("/access", query_string={"principal": "erin"}).status_code == 400
    finally:
        for principal in ("User:erin", "User:*"):
            drop(admin, cluster, principal)


def test_the_users_page_reads_the_mirror_and_a_user_logs_in_with_basic(console: FlaskClient, broker: Broker) -> None:
    assert "No user has credentials yet." in console.get("/users").get_data(as_text=True)
    frank = new_credential("frank", ScramMechanism.SCRAM_SHA_256, "frank-secret", iterations=8192)
    broker.engine.call(broker.engine.access.alter_scram_credentials, [], [frank])
    try:
        broker.mirror.catch_up()
        html = console.get("/users").get_data(as_text=True)
        assert 'data-user="frank"' in html and "SCRAM-SHA-256 · 8192 iterations" in html
        basic = "Basic " + base64.b64encode(b"frank:frank-secret").decode()
        app = console.application
        with app.test_client() as frank_client:
            assert frank_client.get("/v3/clusters", headers={"Authorization": basic}).status_code == 200
            wrong = "Basic " + base64.b64encode(b"frank:guess").decode()
            assert frank_client.get("/v3/clusters", headers={"Authorization": wrong}).status_code == 401
    finally:
        broker.engine.call(broker.engine.access.alter_scram_credentials, [("frank", ScramMechanism.SCRAM_SHA_256)], [])
        broker.mirror.catch_up()
    assert "No user has credentials yet." in console.get("/users").get_data(as_text=True)


# -- the mirror -------------------------------------------------------------------------------------


def _acl_rows(path: Path) -> list[dict]:
    engine = reader_engine(path)
    try:
        with engine.connect() as db:
            return [dict(r) for r in db.execute(text(
                "SELECT resource_type, resource_name, pattern_type, principal, host, operation, permission_type "
                "FROM acls ORDER BY resource_name")).mappings()]
    finally:
        engine.dispose()


def test_the_mirror_holds_the_acls_after_a_restart_and_a_rebuild(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS, **FROZEN, **STANDARD) as first:
        client = _app(first, token="s3cret").test_client()
        base = f"/v3/clusters/{first.engine.topics.cluster_id}/acls"
        client.post(base + ":batch", headers=ADMIN, json={"data": [
            acl("TOPIC", "kept", "User:gina", "READ"), acl("GROUP", "gone", "User:gina", "READ")]})
        client.delete(base, query_string={"resource_name": "gone"}, headers=ADMIN)
        first.mirror.catch_up()
        expected = [{"resource_type": "TOPIC", "resource_name": "kept", "pattern_type": "LITERAL",
                     "principal": "User:gina", "host": "*", "operation": "READ", "permission_type": "ALLOW"}]
        assert _acl_rows(first.mirror.path) == expected
        assert read_state(first.mirror.path) == expected_state_from_logs(EngineMirrorSource(first.engine))
    with Broker(data, **SMALL_INTERNAL_TOPICS, **FROZEN, **STANDARD) as second:
        assert _acl_rows(second.mirror.path) == expected
        second.mirror.rebuild()
        assert _acl_rows(second.mirror.path) == expected
        assert _held(second, "User:gina") == {("kept", "READ")}  # and the authorizer has it back
