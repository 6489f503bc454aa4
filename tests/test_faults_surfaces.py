"""The faces of the fault registry: the HTTP resource ``/v3/clusters/<id>/faults`` (in
the OpenAPI document), ``exactly faults`` over a served HTTP API, and the console page
-- each installing a fault that then acts on a real client's request."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
from typing import Iterator

import pytest
from confluent_kafka import Producer

from exactly.app.cli.main import main
from exactly.app.http import create_app
from tests.browser import served
from tests.kafka_support import KafkaBroker

pytestmark = pytest.mark.timeout(60)
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("faults-surfaces") / "data") as k:
        k.broker.create_topic("orders", 2)
        yield k


@pytest.fixture(autouse=True)
def no_faults_left(kafka: KafkaBroker) -> Iterator[None]:
    yield
    kafka.broker.faults.clear()


@pytest.fixture(scope="module")
def app(kafka: KafkaBroker):
    return create_app(kafka.engine, test_config={"TESTING": True})


@pytest.fixture
def client(app):
    return app.test_client()


def produced(kafka: KafkaBroker) -> list:
    """One record to orders-0 by confluent-kafka (no retries): its delivery error, or None."""
    errors: list = []
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": False, "retries": 0,
                  "linger.ms": 0})
    p.produce("orders", b"x", partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(20) == 0
    return errors


def test_the_http_resource_adds_lists_gets_and_removes(kafka: KafkaBroker, client) -> None:
    base = f"/v3/clusters/{kafka.broker.cluster_id}/faults"
    added = client.post(base, json={"api": ["Produce"], "topic": "orders", "error": "NOT_ENOUGH_REPLICAS",
                                    "count": 1})
    assert added.status_code == 201, added.json
    fault = added.json
    assert (fault["kind"], fault["action"], fault["api"], fault["error"], fault["fired"]) == (
        "ExactlyFault", "error", ["Produce"], "NOT_ENOUGH_REPLICAS", 0)
    assert fault["metadata"]["self"].endswith(f"{base}/{fault['fault_id']}")
    assert [e.name() for e in produced(kafka)] == ["NOT_ENOUGH_REPLICAS"]
    listed = client.get(base).json
    assert listed["kind"] == "ExactlyFaultList" and [f["fired"] for f in listed["data"]] == [1]
    assert client.get(f"{base}/{fault['fault_id']}").json["fired"] == 1
    assert client.delete(f"{base}/{fault['fault_id']}").status_code == 204
    assert client.get(f"{base}/{fault['fault_id']}").status_code == 404
    assert client.delete(f"{base}/{fault['fault_id']}").status_code == 404
    assert produced(kafka) == [None]


def test_the_http_resource_installs_events_and_refuses_what_cannot_work(kafka: KafkaBroker, client) -> None:
    base = f"/v3/clusters/{kafka.broker.cluster_id}/faults"
    event = client.post(base + ":event", json={"event": "disk-full", "duration_ms": 60_000})
    assert event.status_code == 201, event.json
    assert {f["error"] for f in event.json["data"]} == {"KAFKA_STORAGE_ERROR", "COORDINATOR_NOT_AVAILABLE",
                                                      "NOT_COORDINATOR"}
    assert [e.name() for e in produced(kafka)] == ["KAFKA_STORAGE_ERROR"]
    assert client.delete(base).status_code == 204 and client.get(base).json["data"] == []
    for body in ({"error": "NOT_A_KAFKA_ERROR"}, {"api": ["Nope"], "error": "NOT_ENOUGH_REPLICAS"},
                 {"api": ["Produce"]}, {"action": "pause"}, {"count": 0, "error": "NOT_ENOUGH_REPLICAS"}):
        refused = client.post(base, json=body)
        assert refused.status_code == 400 and refused.json["error_name"] == "INVALID_REQUEST", (body, refused.json)
    assert client.post(base + ":event", json={"event": "pause"}).status_code == 400


def test_the_openapi_document_describes_the_fault_resource(client) -> None:
    document = client.get("/openapi.json").json
    faults = document["paths"]["/v3/clusters/{cluster_id}/faults"]
    assert set(faults) == {"get", "post", "delete"}
    assert faults["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/AddFault")
    assert set(document["paths"]["/v3/clusters/{cluster_id}/faults/{fault_id}"]) == {"get", "delete"}
    assert "NOT_ENOUGH_REPLICAS" in str(document["components"]["schemas"]["AddFault"])


def faults_cli(url: str, *args: str) -> subprocess.CompletedProcess:
    """``exactly faults --http URL *args``, in this process (as tests/test_acls_cli.py runs ``exactly acls``)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["faults", "--http", url, *args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_the_cli_round_trips_through_the_http_api(kafka: KafkaBroker, app) -> None:
    with served(app, threads=2) as url:
        added = faults_cli(url, "add", "--api", "Produce", "--topic", "orders", "--error", "NOT_ENOUGH_REPLICAS",
                           "--count", "3")
        assert added.returncode == 0, added.stderr
        fault_id = int(added.stdout)
        assert [e.name() for e in produced(kafka)] == ["NOT_ENOUGH_REPLICAS"]
        listed = faults_cli(url, "list")
        assert listed.stdout.splitlines() == [
            f"{fault_id}\tNOT_ENOUGH_REPLICAS\tProduce\ttopic=orders\tfirst 3\tfired 1"]
        event = faults_cli(url, "event", "coordinator-load-in-progress", "--duration-ms", "60000")
        assert event.returncode == 0 and len(event.stdout.split()) == 1
        assert "(coordinator-load-in-progress (transaction))" in faults_cli(url, "list").stdout
        assert faults_cli(url, "remove", str(fault_id)).returncode == 0
        gone = faults_cli(url, "remove", str(fault_id))
        assert gone.returncode == 1 and f"fault {fault_id} not found" in gone.stderr
        refused = faults_cli(url, "add", "--error", "NOT_AN_ERROR")
        assert refused.returncode == 1 and "NOT_AN_ERROR" in refused.stderr
        assert faults_cli(url, "clear").returncode == 0 and faults_cli(url, "list").stdout == ""
    unreachable = faults_cli(url, "list")
    assert unreachable.returncode == 1 and "cannot reach" in unreachable.stderr


def test_an_unknown_name_is_refused_with_the_closest_names_not_every_one(kafka: KafkaBroker, app) -> None:
    with served(app, threads=2) as url:
        misspelt = faults_cli(url, "add", "--api", "Produce", "--error", "NOT_ENOUGH_REPLICA")
        assert misspelt.returncode == 1
        assert misspelt.stderr.strip().endswith(
            "unknown Kafka error 'NOT_ENOUGH_REPLICA': did you mean NOT_ENOUGH_REPLICAS or "
            "NOT_ENOUGH_REPLICAS_AFTER_APPEND?"), misspelt.stderr
        api = faults_cli(url, "add", "--api", "EndTx", "--error", "NOT_ENOUGH_REPLICAS")
        assert api.returncode == 1 and "did you mean EndTxn?" in api.stderr
        nothing_close = faults_cli(url, "add", "--error", "NOT_AN_ERROR")
        assert nothing_close.returncode == 1 and len(nothing_close.stderr) < 200, nothing_close.stderr
        assert "CORRUPT_MESSAGE" not in misspelt.stderr + nothing_close.stderr  # not the whole list


def test_the_console_page_lists_adds_and_removes_with_csrf(kafka: KafkaBroker, client) -> None:
    page = client.get("/faults").get_data(as_text=True)
    assert "No fault installed." in page and 'hx-get="/fragments/faults"' in page
    token = CSRF.search(page).group(1)
    assert client.post("/faults", data={"api": "Produce", "action": "error", "error": "NOT_ENOUGH_REPLICAS",
                                        "topic": "orders", "count": "1"}).status_code == 403  # no token
    added = client.post("/faults", data={"csrf_token": token, "api": "Produce", "action": "error",
                                         "error": "NOT_ENOUGH_REPLICAS", "topic": "orders", "count": "1"})
    assert added.status_code == 303
    (fault,) = kafka.broker.faults.list()
    assert [e.name() for e in produced(kafka)] == ["NOT_ENOUGH_REPLICAS"]
    listed = client.get("/fragments/faults").get_data(as_text=True)
    assert f'data-fault="{fault.id}"' in listed and "<td class=\"num mono\" data-fired>1</td>" in listed
    refused = client.post("/faults", data={"csrf_token": token, "action": "delay"}, follow_redirects=True)
    assert "Could not install the fault: a delay fault needs delay_ms" in refused.get_data(as_text=True)
    assert client.post(f"/faults/{fault.id}/remove", data={"csrf_token": token}).status_code == 303
    assert kafka.broker.faults.list() == []
    kafka.broker.faults.add(action="delay", delay_ms=1)
    assert client.post("/faults/clear", data={"csrf_token": token}).status_code == 303
    assert not kafka.broker.faults.installed

