"""What an operator sees of Kafka clients: who is connected (client id, software
name and version from ApiVersions, address, since when), and per-API request counts
and latency histograms in ``/metrics``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaException, Producer

from exactly.app.engine import read_models
from exactly.app.http import create_app
from exactly.app.http.console.blueprint import FRAGMENTS
from exactly.app.kafka.api import ApiKey
from tests.kafka_support import KafkaBroker, raw_connection, read_to_end
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        yield k


def clients(kafka: KafkaBroker) -> list[dict]:
    return kafka.engine.call(read_models.kafka_clients, kafka.engine)


def test_connected_clients_are_listed_with_what_they_said_they_are(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("t", 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "client.id": "billing-app",
                         "broker.address.family": "v4"})
    producer.produce("t", b"v", partition=0)
    assert producer.flush(30) == 0
    raw = raw_connection(kafka.port, client_id="raw")
    raw.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "handmade", "client_software_version": "0.1"})
    listed = {c["client_id"]: c for c in clients(kafka)}
    billing = [c for c in clients(kafka) if c["client_id"] == "billing-app"]  # librdkafka opens two
    assert {c["client_software_name"] for c in billing} == {"confluent-kafka-python"}
    assert sum(c["requests"] for c in billing) >= 2  # ApiVersions and Produce at least
    assert listed["raw"]["client_software_name"] == "handmade" and listed["raw"]["client_software_version"] == "0.1"
    host, port = raw.sock.getsockname()[:2]
    assert listed["raw"]["address"] == f"{host}:{port}" and listed["raw"]["connected_since_ms"] > 0
    raw.close()
    eventually(lambda: "raw" not in {c["client_id"] for c in clients(kafka)}, what="the closed client to go")


def test_metrics_count_and_time_kafka_requests_per_api(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("t", 1)
    raw = raw_connection(kafka.port)
    for _ in range(3):
        raw.request(ApiKey.METADATA, 8, {"topics": None})
    text = create_app(kafka.engine, test_config={"TESTING": True}).test_client().get("/metrics").get_data(True)
    count = re.search(r'^exactly_kafka_request_duration_seconds_count\{api="metadata"\} (\S+)$', text, re.M)
    assert count and float(count.group(1)) == 3
    assert re.search(r'^exactly_kafka_request_duration_seconds_bucket\{api="metadata",le="\+Inf"\} 3\.0$', text, re.M)
    assert re.search(r"^exactly_kafka_connections 1\.0$", text, re.M)
    raw.close()


def test_the_console_lists_connected_clients(kafka: KafkaBroker) -> None:
    console = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
    assert "No Kafka client is connected." in console.get("/clients").get_data(True)
    raw = raw_connection(kafka.port, client_id="console-visible")
    raw.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "handmade", "client_software_version": "0.1"})
    host, port = raw.sock.getsockname()[:2]
    page = console.get("/clients").get_data(True)
    assert 'data-client="console-visible"' in page and f"{host}:{port}" in page and "handmade" in page
    fragment = console.get(FRAGMENTS + "/clients").get_data(True)
    assert fragment.lstrip().startswith("<div") and "console-visible" in fragment  # htmx refreshes the part
    raw.close()
    eventually(lambda: "console-visible" not in console.get("/clients").get_data(True),
               what="the closed client to leave the page")


def test_wire_and_http_work_lands_in_the_same_latency_histograms_and_fencing_counter(kafka: KafkaBroker) -> None:
    """Measured in the engine and the coordinator, not at one face: a librdkafka
    transaction, an HTTP produce and a read_committed consumer all show up."""
    kafka.broker.create_topic("t", 1)
    config = {"bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4"}
    zombie = Producer({**config, "transactional.id": "tx"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("t", b"zombie", partition=0)
    assert zombie.flush(30) == 0
    producer = Producer({**config, "transactional.id": "tx"})
    producer.init_transactions(30)  # fences the zombie
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("t", b"wire", partition=0)
    producer.commit_transaction(30)
    http = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
    answer = http.post(f"/v3/clusters/{kafka.broker.cluster_id}/topics/t/records",
                       json={"partition_id": 0, "value": {"type": "STRING", "data": "http"}})
    assert answer.status_code == 200
    assert sorted(read_to_end({**config, "group.id": "r", "isolation.level": "read_committed"}, "t", 1)) == [
        b"http", b"wire"]
    text = http.get("/metrics").get_data(True)

    def sample(name: str) -> float:
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        assert found, name
        return float(found.group(1))

    assert sample('exactly_transaction_end_duration_seconds_count{outcome="commit"}') == 1
    assert sample("exactly_produce_duration_seconds_count") >= 3  # zombie, wire and HTTP batches
    assert sample("exactly_log_flush_duration_seconds_count") >= 1
    assert sample("exactly_fetch_duration_seconds_count") >= 1
    assert sample('exactly_fenced_producers_total{error="PRODUCER_FENCED"}') == 1
