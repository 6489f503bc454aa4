"""SASL and TLS on the Kafka listeners, with real clients: confluent-kafka (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512 on SASL_PLAINTEXT and SASL_SSL), kafka-python, aiokafka
and kcat; and with a raw connection for what no client sends on purpose (a wrong
password, an unknown mechanism, a replayed SCRAM message, fuzzed frames, a request
before authentication, a session left to expire).

One broker serves the module, with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners
(a certificate from its generated CA)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import scramp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from exactly.app.cli.admin_connection import authenticate
from exactly.app.http import create_app
from exactly.app.kafka.api import ApiKey
from exactly.app.security.principal import ANONYMOUS, KafkaPrincipal
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.storage.errors import IllegalSaslStateError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from tests.kafka_support import SOFTWARE, raw_connection, read_to_end
from tests.sasl_support import ListenersBroker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)
KCAT = shutil.which("kcat") or "/usr/bin/kcat"
#: the failed-login delay of the module's broker (short: the fuzz test fails many logins)
DELAY_MS = 30


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ListenersBroker]:
    with ListenersBroker(tmp_path_factory.mktemp("sasl") / "data",
                         **{"connection.failed.authentication.delay.ms": DELAY_MS}) as k:
        k.add_user("alice", "alice-secret")
        yield k


@pytest.fixture(scope="module")
def metrics(kafka: ListenersBroker) -> Any:
    """The HTTP face's test client (one per module: building the app takes seconds)."""
    return create_app(kafka.engine, test_config={"TESTING": True}).test_client()


def failures(metrics: Any) -> dict[str, float]:
    """``exactly_authentication_failures_total`` by mechanism (every face and principal
    summed), scraped from ``/metrics``."""
    text = metrics.get("/metrics").get_data(True)
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "exactly_authentication_failures_total":
                found[s.labels["mechanism"]] = found.get(s.labels["mechanism"], 0) + s.value
    return found


def principals(kafka: ListenersBroker, client_id: str) -> set[KafkaPrincipal]:
    """The principals of the open connections with this client id."""
    return kafka.engine.call(lambda: {c.principal for c in kafka.engine.clients
                                      if c.client_id == client_id})


def round_trip(config: dict[str, Any]) -> None:
    """Produce one record with confluent-kafka and read it back, on ``config``'s listener."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    producer.produce(topic, b"hello")
    assert producer.flush(30) == 0
    assert read_to_end({**config, "group.id": topic}, topic, 1) == [b"hello"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_kafka_round_trip(kafka: ListenersBroker, protocol: str, mechanism: str) -> None:
    round_trip(kafka.confluent(protocol, mechanism, **{"client.id": f"cf-{protocol}-{mechanism}"}))


def test_each_listener_advertises_itself_and_plaintext_is_anonymous(kafka: ListenersBroker) -> None:
    for protocol in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"):
        admin = AdminClient(kafka.confluent(protocol, "SCRAM-SHA-256"))
        brokers = admin.list_topics(timeout=30).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", kafka.port(protocol))]
    connection = raw_connection(kafka.port("PLAINTEXT"), client_id="anonymous-raw")
    connection.request(ApiKey.API_VERSIONS, 3, SOFTWARE)
    assert principals(kafka, "anonymous-raw") == {ANONYMOUS}
    sasl = raw_connection(kafka.port("SASL_PLAINTEXT"), client_id="alice-raw")
    authenticate(sasl, "SCRAM-SHA-512", "alice", "alice-secret")
    assert principals(kafka, "alice-raw") == {KafkaPrincipal("User", "alice")}
    brokers = sasl.request(ApiKey.METADATA, 8, {"topics": [], "allow_auto_topic_creation": False}).brokers
    assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", kafka.port("SASL_PLAINTEXT"))]
    connection.close()
    sasl.close()


@pytest.mark.parametrize("mechanism,protocol", [("PLAIN", "SASL_PLAINTEXT"), ("SCRAM-SHA-256", "SASL_SSL")])
def test_kafka_python(kafka: ListenersBroker, mechanism: str, protocol: str) -> None:
    topic = f"kp-{mechanism}-{protocol}"
    config = kafka.python_client(protocol, mechanism)
    producer = KafkaProducer(**config)
    producer.send(topic, b"from kafka-python").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=30_000, **config)
    assert next(iter(consumer)).value == b"from kafka-python"
    consumer.close()


@pytest.mark.parametrize("mechanism,protocol", [("PLAIN", "SASL_SSL"), ("SCRAM-SHA-512", "SASL_PLAINTEXT")])
def test_aiokafka(kafka: ListenersBroker, mechanism: str, protocol: str) -> None:
    topic = f"aio-{mechanism}-{protocol}"
    config = kafka.python_client(protocol, mechanism)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**config)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"from aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **config)
        await consumer.start()
        try:
            return [(await asyncio.wait_for(consumer.getone(), 30)).value]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"from aiokafka"]


@pytest.mark.skipif(not Path(KCAT).exists(), reason="kcat is not installed (make test installs it)")
def test_kcat_over_sasl_ssl(kafka: ListenersBroker) -> None:
    options = [f"-X{key}={value}" for key, value in kafka.confluent("SASL_SSL", "SCRAM-SHA-512").items()
               if key != "bootstrap.servers"]
    base = [KCAT, "-b", f"127.0.0.1:{kafka.port('SASL_SSL')}", *options]
    subprocess.run([*base, "-P", "-t", "kcat-sasl"], input="one\ntwo\n", text=True, check=True, timeout=60)
    out = subprocess.run([*base, "-C", "-t", "kcat-sasl", "-o", "beginning", "-e", "-q"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert out.split() == ["one", "two"]
    metadata = json.loads(subprocess.run([*base, "-L", "-J"], capture_output=True, text=True, check=True,
                                         timeout=60).stdout)
    assert metadata["brokers"][0]["name"] == f"127.0.0.1:{kafka.port('SASL_SSL')}"


def test_wrong_password_is_refused_late_counted_and_closed(kafka: ListenersBroker, metrics: Any) -> None:
    before = failures(metrics).get("PLAIN", 0)
    connection = raw_connection(kafka.port("SASL_PLAINTEXT"))
    started = time.monotonic()
    with pytest.raises(SaslAuthenticationFailedError, match="Invalid username or password"):
        authenticate(connection, "PLAIN", "alice", "not-her-password")
    assert time.monotonic() - started >= DELAY_MS / 1000
    assert connection.closed_by_peer()
    assert failures(metrics)["PLAIN"] == before + 1

    errors: list[Any] = []
    producer = Producer(kafka.confluent("SASL_SSL", "SCRAM-SHA-256", password="wrong",
                                        error_cb=errors.append))
    producer.produce("never", b"x")

    def reported() -> bool:
        producer.poll(0.1)
        return any("Authentication failed" in e.str() for e in errors)

    eventually(reported, what="confluent-kafka to report the authentication failure")
    producer.purge()
    assert failures(metrics).get("SCRAM-SHA-256", 0) >= 1


def test_unknown_mechanism_lists_the_enabled_ones(kafka: ListenersBroker) -> None:
    connection = raw_connection(kafka.port("SASL_PLAINTEXT"))
    response = connection.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert response.error_code == UnsupportedSaslMechanismError.code
    assert list(response.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert connection.closed_by_peer()


def test_a_plaintext_listener_has_no_sasl(kafka: ListenersBroker) -> None:
    connection = raw_connection(kafka.port("PLAINTEXT"))
    response = connection.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert response.error_code == IllegalSaslStateError.code


def test_nothing_but_authentication_before_it(kafka: ListenersBroker) -> None:
    connection = raw_connection(kafka.port("SASL_PLAINTEXT"))
    assert connection.request(ApiKey.API_VERSIONS, 3, SOFTWARE).error_code == 0
    connection.send(ApiKey.METADATA, 8, {"topics": [], "allow_auto_topic_creation": False})
    assert connection.closed_by_peer()


def _scram_first(connection: KafkaConnection, client: scramp.ScramClient) -> None:
    assert connection.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
    first = connection.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_first().encode()})
    assert first.error_code == 0
    client.set_server_first(bytes(first.auth_bytes).decode())


def test_a_replayed_scram_client_final_is_refused(kafka: ListenersBroker) -> None:
    original = raw_connection(kafka.port("SASL_PLAINTEXT"))
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    _scram_first(original, client)
    final = client.get_client_final().encode()
    done = original.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": final})
    assert done.error_code == 0
    client.set_server_final(bytes(done.auth_bytes).decode())
    again = original.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": final})  # on the same connection
    assert again.error_code == IllegalSaslStateError.code and original.closed_by_peer()

    eavesdropper = raw_connection(kafka.port("SASL_PLAINTEXT"))  # on a new one: a new server nonce
    _scram_first(eavesdropper, scramp.ScramClient(["SCRAM-SHA-256"], "alice", "guess"))
    replayed = eavesdropper.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": final})
    assert replayed.error_code == SaslAuthenticationFailedError.code
    assert "invalid credentials" in replayed.error_message
    assert eavesdropper.closed_by_peer()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
       tokens=st.lists(st.binary(max_size=200), min_size=1, max_size=3),
       raw=st.booleans())
def test_fuzzed_sasl_tokens_never_crash_the_listener(kafka: ListenersBroker, mechanism: str,
                                                     tokens: list[bytes], raw: bool) -> None:
    connection = raw_connection(kafka.port("SASL_PLAINTEXT"), timeout=10)
    try:
        connection.request(ApiKey.SASL_HANDSHAKE, 0 if raw else 1, {"mechanism": mechanism})
        for token in tokens:
            if raw:  # after a v0 handshake: size-prefixed tokens, no header
                connection.sock.sendall(len(token).to_bytes(4, "big") + token)
                connection.read_frame()
            elif connection.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token}).error_code:
                break
    except (ConnectionError, OSError):
        pass  # refused and closed: what a garbled exchange gets
    finally:
        connection.close()
    fresh = raw_connection(kafka.port("SASL_PLAINTEXT"))
    authenticate(fresh, "SCRAM-SHA-512", "alice", "alice-secret")
    fresh.close()


def test_v0_handshake_then_raw_tokens_authenticates(kafka: ListenersBroker) -> None:
    connection = raw_connection(kafka.port("SASL_PLAINTEXT"), client_id="raw-v0")
    assert connection.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
    token = b"\0alice\0alice-secret"
    connection.sock.sendall(len(token).to_bytes(4, "big") + token)
    assert connection.read_frame() == b""
    assert connection.request(ApiKey.API_VERSIONS, 3, SOFTWARE).error_code == 0
    assert principals(kafka, "raw-v0") == {KafkaPrincipal("User", "alice")}


def test_re_authentication_keeps_the_principal_and_the_mechanism(kafka: ListenersBroker) -> None:
    kafka.add_user("mallory", "mallory-secret")
    connection = raw_connection(kafka.port("SASL_PLAINTEXT"), client_id="reauth-raw")
    authenticate(connection, "PLAIN", "alice", "alice-secret")
    authenticate(connection, "PLAIN", "alice", "alice-secret")  # KIP-368: again, on the same connection
    assert principals(kafka, "reauth-raw") == {KafkaPrincipal("User", "alice")}
    with pytest.raises(SaslAuthenticationFailedError, match="Cannot change principals"):
        authenticate(connection, "PLAIN", "mallory", "mallory-secret")
    assert connection.closed_by_peer()

    other = raw_connection(kafka.port("SASL_PLAINTEXT"))
    authenticate(other, "PLAIN", "alice", "alice-secret")
    with pytest.raises(IllegalSaslStateError):
        authenticate(other, "SCRAM-SHA-256", "alice", "alice-secret")
    assert other.closed_by_peer()
