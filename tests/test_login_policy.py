"""One login policy on every face (issue 29, item 5): a failed login on the Kafka port
(SASL PLAIN and SCRAM), HTTP Basic, a Bearer token and the console's form is answered
only after ``connection.failed.authentication.delay.ms`` and counted in
``exactly_authentication_failures_total`` with its face, mechanism and principal
(``unknown`` for a user that does not exist); an unknown SCRAM user gets a server-first
message as a known one does (the exchange fails at the proof); a cross-site
``POST /login`` is refused (login CSRF).

Before: HTTP answered a wrong password at once and counted nothing, an unknown user
was answered without a key derivation, and another site's form could sign a browser in."""

from __future__ import annotations

import base64
import time
from contextlib import closing
from pathlib import Path
from typing import Iterator

import pytest
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from exactly.app.http import HttpSettings, create_app
from exactly.app.kafka.api import ApiKey
from exactly.app.spark.kafka_client import KafkaConnection
from tests.kafka_support import raw_connection
from tests.sasl_support import ListenersBroker

pytestmark = pytest.mark.timeout(60)

DELAY_MS = 300
SASL_AUTHENTICATION_FAILED = 58


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ListenersBroker]:
    with ListenersBroker(tmp_path_factory.mktemp("login") / "data", **{
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin", "connection.failed.authentication.delay.ms": DELAY_MS}) as broker:
        broker.add_user("alice", "alice-secret")
        yield broker


@pytest.fixture(scope="module")
def api(kafka: ListenersBroker) -> FlaskClient:
    return create_app(kafka.engine, HttpSettings(token="s3cret"), test_config={"TESTING": True}).test_client()


def failures(api: FlaskClient) -> dict[tuple[str, str, str], float]:
    text = api.get("/metrics", headers={"Authorization": "Bearer s3cret"}).get_data(as_text=True)
    return {(s.labels["face"], s.labels["mechanism"], s.labels["principal"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "exactly_authentication_failures_total"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def timed(call) -> tuple[object, float]:
    start = time.monotonic()
    result = call()
    return result, time.monotonic() - start


def test_http_basic_and_bearer_failures_are_delayed_and_counted_with_the_principal(api: FlaskClient) -> None:
    before = failures(api)
    for headers, key in ((basic("alice", "guess"), ("http", "BASIC", "User:alice")),
                         (basic("nobody", "guess"), ("http", "BASIC", "unknown")),
                         ({"Authorization": "Bearer guess"}, ("http", "BEARER", "User:admin"))):
        answer, took = timed(lambda: api.get("/v3/clusters", headers=headers))
        assert answer.status_code == 401
        assert took >= DELAY_MS / 1000, key
        assert failures(api).get(key, 0) == before.get(key, 0) + 1, key
    assert api.get("/v3/clusters", headers=basic("alice", "alice-secret")).status_code == 200


def test_the_console_login_is_delayed_counted_and_worded_for_this_broker(api: FlaskClient) -> None:
    before = failures(api).get(("console", "FORM", "User:alice"), 0)
    answer, took = timed(lambda: api.post("/login", data={"user": "alice", "password": "guess"}))
    assert answer.status_code == 200 and took >= DELAY_MS / 1000
    assert "That user and password do not sign in." in answer.get_data(as_text=True)
    assert failures(api)[("console", "FORM", "User:alice")] == before + 1


def test_a_cross_site_login_is_refused(api: FlaskClient) -> None:
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        with api.session_transaction() as session:
            session.clear()
        refused = api.post("/login", data={"user": "alice", "password": "alice-secret"}, headers=headers)
        assert refused.status_code == 403
        with api.session_transaction() as session:
            assert "principal" not in session
    signed_in = api.post("/login", data={"user": "alice", "password": "alice-secret"},
                         headers={"Sec-Fetch-Site": "same-origin"})
    assert signed_in.status_code == 302


def sasl_client(kafka: ListenersBroker, mechanism: str) -> KafkaConnection:
    client = raw_connection(kafka.port("SASL_PLAINTEXT"))
    assert client.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == 0
    return client


def authenticate(client: KafkaConnection, token: bytes):
    return client.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})


def test_kafka_plain_failures_go_through_the_same_policy(kafka: ListenersBroker, api: FlaskClient) -> None:
    before = failures(api)
    for user, key in (("alice", ("kafka", "PLAIN", "User:alice")), ("nobody", ("kafka", "PLAIN", "unknown"))):
        with closing(sasl_client(kafka, "PLAIN")) as client:
            answer, took = timed(lambda: authenticate(client, f"\0{user}\0guess".encode()))
        assert answer.error_code == SASL_AUTHENTICATION_FAILED and took >= DELAY_MS / 1000
        assert failures(api).get(key, 0) == before.get(key, 0) + 1, key


def test_an_unknown_scram_user_is_answered_as_a_known_one(kafka: ListenersBroker, api: FlaskClient) -> None:
    """RFC 5802 §9: a made-up salt (the same on every attempt) and the usual iterations;
    the exchange fails at the proof, with the one message of every failure."""
    first_answers = []
    for user in ("alice", "nobody", "nobody"):
        with closing(sasl_client(kafka, "SCRAM-SHA-256")) as client:
            first = authenticate(client, f"n,,n={user},r=abcdef".encode())
            assert first.error_code == 0, user
            server_first = dict(part.split("=", 1) for part in bytes(first.auth_bytes).decode().split(","))
            first_answers.append(server_first)
            final = f"c=biws,r={server_first['r']},p={base64.b64encode(bytes(32)).decode()}".encode()
            failed = authenticate(client, final)
            assert failed.error_code == SASL_AUTHENTICATION_FAILED
    known, unknown, again = first_answers
    assert known["i"] == unknown["i"] == "4096" and len(unknown["s"]) == len(known["s"])
    assert unknown["s"] == again["s"], "the same made-up salt on every attempt"
    assert failures(api)[("kafka", "SCRAM-SHA-256", "unknown")] >= 2
