"""Events on demand against real clients: fence a transactional id now, time a
transaction out now -- from the embedded face, the HTTP API, ``exactly events`` and the
console's buttons -- and restart the server from the HTTP API and the CLI.

One server for the module (each test names its own topics and transactional ids)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import requests
from confluent_kafka import KafkaError, KafkaException, Producer

from exactly.app.server import Server
from exactly.app.testing import broker
from exactly.coordinator.transaction_state import AbortCause
from tests.kafka_support import read_to_end
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with broker(tmp_path_factory.mktemp("events") / "data") as s:
        yield s


def _config(server: Server, **extra: object) -> dict:
    return {"bootstrap.servers": server.bootstrap, "broker.address.family": "v4", **extra}


def _open_transaction(server: Server, txn_id: str, topic: str) -> Producer:
    """A confluent-kafka transactional producer with one record sent in an open transaction."""
    server.broker.create_topic(topic, 1)
    producer = Producer(_config(server, **{"transactional.id": txn_id}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in-flight", partition=0)
    assert producer.flush(30) == 0
    return producer


def _commit_error(producer: Producer) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(30)
    return raised.value.args[0]


def _state(server: Server, txn_id: str):
    return server.engine.call(server.engine.transactions.describe_transaction, txn_id)


def _read_committed(server: Server, topic: str) -> list[bytes]:
    return read_to_end(_config(server, **{"group.id": f"reader-{topic}", "isolation.level": "read_committed",
                                          "enable.auto.commit": False}), topic, 1)


def _retry_as_a_new_instance(server: Server, txn_id: str, topic: str) -> None:
    """What an application does after a fatal error: a new producer, the transaction again."""
    successor = Producer(_config(server, **{"transactional.id": txn_id}))
    successor.init_transactions(30)
    successor.begin_transaction()
    successor.produce(topic, b"again", partition=0)
    successor.commit_transaction(30)


def test_fence_now_is_a_fatal_fenced_error_for_a_confluent_transactional_producer(server: Server) -> None:
    producer = _open_transaction(server, "fence-me", "fence-t")
    before = _state(server, "fence-me")
    producer_id, epoch = server.fence("fence-me")
    # as a new instance's InitProducerId: the abort's bump, then the new instance's
    assert (producer_id, epoch) == (before.producer_id, before.producer_epoch + 2)
    error = _commit_error(producer)
    assert error.fatal(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    _, reason = server.engine.transactions.coordinator.txns["fence-me"].fenced  # what the zombie is told
    assert reason.cause is AbortCause.FENCED and "fenced on demand" in reason.actor
    _retry_as_a_new_instance(server, "fence-me", "fence-t")
    assert _read_committed(server, "fence-t") == [b"again"]


def test_timeout_now_fails_the_commit_as_a_timed_out_transaction_does(server: Server) -> None:
    producer = _open_transaction(server, "slow", "timeout-t")
    before = _state(server, "slow")
    server.timeout("slow")
    after = _state(server, "slow")
    assert after.state.display == "CompleteAbort"
    assert after.abort_reason.cause is AbortCause.TIMEOUT and "timed out on demand" in after.abort_reason.actor
    assert after.producer_epoch == before.producer_epoch + 1  # the timeout's one bump
    # librdkafka treats the bumped epoch as fencing (fatal), as it does after a real timeout
    # (tests/test_kafka_confluent.py); the application starts a new instance and retries
    error = _commit_error(producer)
    assert error.fatal() and error.code() == KafkaError._FENCED, error
    _retry_as_a_new_instance(server, "slow", "timeout-t")
    assert _read_committed(server, "timeout-t") == [b"again"]


def test_timeout_now_without_an_open_transaction_is_invalid_txn_state(server: Server) -> None:
    producer = Producer(_config(server, **{"transactional.id": "idle"}))
    producer.init_transactions(30)
    base = f"{server.http_url}/v3/clusters/{server.cluster_id}/transactions"
    answer = requests.post(f"{base}/idle:timeout", timeout=30)
    assert answer.status_code == 409 and answer.json()["error_name"] == "INVALID_TXN_STATE"
    assert requests.post(f"{base}/nobody:fence", timeout=30).status_code == 404


def test_the_http_api_fences_and_times_out(server: Server) -> None:
    base = f"{server.http_url}/v3/clusters/{server.cluster_id}/transactions"
    _open_transaction(server, "http-timeout", "http-t")
    answer = requests.post(f"{base}/http-timeout:timeout", timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "CompleteAbort" and answer.json()["kind"] == "KafkaTransaction"
    epoch = answer.json()["producer_epoch"]
    answer = requests.post(f"{base}/http-timeout:fence", timeout=30)
    assert answer.status_code == 200 and answer.json()["producer_epoch"] == epoch + 1  # nothing open: one bump
    paths = requests.get(f"{server.http_url}/openapi.json", timeout=30).json()["paths"]
    for path in ("/transactions/{transactional_id}:fence", "/transactions/{transactional_id}:timeout",
                 "/server", "/server:restart"):
        assert "/v3/clusters/{cluster_id}" + path in paths


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exactly", "events", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_the_cli_fences_and_times_out_through_the_http_api(server: Server) -> None:
    _open_transaction(server, "cli-txn", "cli-t")
    done = _cli("timeout", "cli-txn", "--http", server.http_url)
    assert done.returncode == 0 and "cli-txn: CompleteAbort" in done.stdout, done.stderr
    assert _state(server, "cli-txn").abort_reason.cause is AbortCause.TIMEOUT
    done = _cli("timeout", "cli-txn", "--http", server.http_url)
    assert done.returncode == 1 and "INVALID_TXN_STATE" in done.stderr
    done = _cli("fence", "cli-txn", "--http", server.http_url)
    assert done.returncode == 0, done.stderr


def test_the_console_buttons_need_the_csrf_token_and_fence_and_time_out(server: Server) -> None:
    _open_transaction(server, "console-txn", "console-t")
    session = requests.Session()
    page = session.get(f"{server.http_url}/transactions/console-txn", timeout=30).text
    assert 'data-event="fence"' in page and 'data-event="time_out"' in page
    token = CSRF.search(page).group(1)
    refused = session.post(f"{server.http_url}/transactions/console-txn/timeout", data={"csrf_token": "forged"},
                           timeout=30)
    assert refused.status_code == 403 and _state(server, "console-txn").state.display == "Ongoing"
    timed_out = session.post(f"{server.http_url}/transactions/console-txn/timeout", data={"csrf_token": token},
                             timeout=30)
    assert timed_out.ok and "Timed out console-txn" in timed_out.text
    assert _state(server, "console-txn").abort_reason.cause is AbortCause.TIMEOUT
    epoch = _state(server, "console-txn").producer_epoch
    fenced = session.post(f"{server.http_url}/transactions/console-txn/fence", data={"csrf_token": token},
                          timeout=30)
    assert fenced.ok and "Fenced console-txn" in fenced.text
    assert _state(server, "console-txn").producer_epoch == epoch + 1


def test_the_http_api_and_the_cli_restart_the_server_in_place(server: Server) -> None:
    base = f"{server.http_url}/v3/clusters/{server.cluster_id}/server"
    ports = (server.kafka_port, server.http_port)
    before = requests.get(base, timeout=30).json()["restarts"]
    answer = requests.post(base + ":restart", json={"clean": False}, timeout=30)
    assert answer.status_code == 202 and answer.json()["restarts"] == before
    eventually(lambda: server.restarts == before + 1, what="the restart the API asked for")
    done = _cli("restart", "--http", server.http_url)
    assert done.returncode == 0 and "restarted cleanly" in done.stdout, done.stderr
    assert requests.get(base, timeout=30).json()["restarts"] == before + 2
    assert (server.kafka_port, server.http_port) == ports
