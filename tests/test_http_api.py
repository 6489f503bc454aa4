"""The HTTP API (exactly/app/http/): every endpoint, its errors, transactions over HTTP, auth,
metrics and the OpenAPI document, through Flask's test client over a real broker."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exactly.app import Broker
from exactly.app.http import HttpSettings, create_app
from exactly.app.http.api import document, idempotency, transactions
from exactly.app.http.api.codec import iso_time
from exactly.app.client.partitioner import murmur2
from exactly.coordinator.transaction_state import IllegalTransitionError, TransactionMetadata
from exactly.storage.clock import FakeClock
from exactly.storage.errors import UnknownServerError
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.conftest import SMALL_INTERNAL_TOPICS
from tests.storage_log import DurableLogs



def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def string(text: str) -> dict[str, str]:
    return {"type": "STRING", "data": text}


class Api:
    """The test client with the cluster's base path and status checks."""

    def __init__(self, client, cluster_id: str) -> None:
        self.client = client
        self.base = f"/v3/clusters/{cluster_id}"

    def call(self, method: str, path: str, status: int, body: Any = None, headers: dict | None = None,
             **query: Any):
        response = self.client.open(self.base + path, method=method, json=body, headers=headers,
                                    query_string=query)
        assert response.status_code == status, (method, path, response.status_code, response.get_data(True))
        if response.status_code >= 400:
            error = response.json  # every error is the JSON error body
            assert set(error) == {"error_code", "message", "error_name", "kafka_error_code"}, error
        return response

    def get(self, path: str, status: int = 200, **query: Any) -> Any:
        return self.call("GET", path, status, **query).json

    def post(self, path: str, body: Any = None, status: int = 200, headers: dict | None = None) -> Any:
        return self.call("POST", path, status, body, headers).json

    def error(self, method: str, path: str, status: int, body: Any = None, **query: Any) -> str:
        """The error name of a call expected to fail with ``status``."""
        return self.call(method, path, status, body, **query).json["error_name"]

    def create_topic(self, name: str, partitions: int = 1, **configs: str) -> None:
        self.post("/topics", {"topic_name": name, "partitions_count": partitions,
                              "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]},
                  status=201)

    def produce(self, topic: str, partition: int | None, value: str, status: int = 200, **fields: Any) -> Any:
        body = {"value": string(value), **fields}
        if partition is not None:
            body["partition_id"] = partition
        return self.post(f"/topics/{topic}/records", body, status=status)

    def read(self, topic: str, partition: int, isolation: str = "read_committed", offset: int = 0) -> Any:
        return self.get(f"/topics/{topic}/partitions/{partition}/records", offset=offset,
                        isolation_level=isolation)

    def values(self, topic: str, partition: int, isolation: str = "read_committed") -> list[str]:
        records = self.read(topic, partition, isolation)["records"]
        return [base64.b64decode(r["value"]["data"]).decode() for r in records]

    def partition(self, topic: str, partition: int) -> Any:
        return self.get(f"/topics/{topic}/partitions/{partition}")

    def init(self, txn_id: str, **body: Any) -> tuple[int, int]:
        answer = self.post(f"/transactions/{txn_id}/init", body)
        return answer["producer_id"], answer["producer_epoch"]


@pytest.fixture
def app(broker: Broker):
    return create_app(broker.engine, test_config={"TESTING": True})


@pytest.fixture
def api(app, broker: Broker) -> Api:
    return Api(app.test_client(), broker.cluster_id)


@pytest.fixture
def topics(api: Api) -> Api:
    api.create_topic("orders", 2)
    api.create_topic("payments", 1)
    return api


def txn_body(producer: tuple[int, int], **fields: Any) -> dict[str, Any]:
    return {"producer_id": producer[0], "producer_epoch": producer[1], **fields}


def record(topic: str, partition: int, value: str) -> dict[str, Any]:
    return {"topic_name": topic, "partition_id": partition, "value": string(value)}


# -- clusters -------------------------------------------------------------------------------


def test_the_cluster_id_is_the_data_directory_s_and_survives_a_restart(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as b:
        client = create_app(b.engine, test_config={"TESTING": True}).test_client()
        listed = client.get("/v3/clusters").json
        assert listed["kind"] == "KafkaClusterList"
        first = listed["data"][0]["cluster_id"]
        assert first == b.cluster_id
        cluster = client.get(f"/v3/clusters/{first}").json
        assert cluster["cluster_id"] == first
        assert cluster["topics"]["related"].endswith(f"/v3/clusters/{first}/topics")
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as b:
        client = create_app(b.engine, test_config={"TESTING": True}).test_client()
        assert client.get("/v3/clusters").json["data"][0]["cluster_id"] == first


@pytest.mark.parametrize("path", ["", "/topics", "/topics/orders/partitions/0/records", "/transactions",
                                  "/consumer-groups"])
def test_another_cluster_id_is_404(topics: Api, path: str) -> None:
    response = topics.client.get(f"/v3/clusters/not-this-one{path}")
    assert response.status_code == 404
    assert response.json["error_name"] == "NOT_FOUND" and "not-this-one" in response.json["message"]


def test_unknown_paths_and_methods_answer_json(api: Api) -> None:
    assert api.error("GET", "/no-such-thing", 404) == "NOT_FOUND"
    assert api.error("PUT", "/topics", 405) == "METHOD_NOT_ALLOWED"
    assert api.error("GET", "/transactions//init", 404) == "NOT_FOUND"  # not a redirect to a merged path


SECRET = "/srv/secret/path and internals"


@pytest.mark.parametrize("failure", [IllegalTransitionError(SECRET), UnknownServerError(SECRET), KeyError(SECRET)])
def test_a_server_error_is_a_500_with_a_reference_and_never_the_exception_s_text(
        topics: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, failure: Exception) -> None:
    """A bug inside the coordinator (forced here: adding a partition fails as an illegal
    transition would) is not the client's fault: never a 409, never its text."""
    producer = topics.init("bug-tx")

    def broken(self, *args, **kwargs):
        raise failure

    monkeypatch.setattr(TransactionMetadata, "prepare_add_partitions", broken)
    body = txn_body(producer, records=[record("orders", 0, "x")])
    with caplog.at_level("ERROR", logger="exactly.app.http.errors"):
        answer = topics.call("POST", "/transactions/bug-tx/records", 500, body).json
    assert answer["error_name"] == "UNKNOWN_SERVER_ERROR" and answer["kafka_error_code"] == -1
    assert answer["error_code"] == 500
    reference = re.fullmatch(r"internal server error; reference ([0-9a-f]{8}) in the broker's log",
                             answer["message"]).group(1)
    assert "secret" not in json.dumps(answer) and type(failure).__name__ not in json.dumps(answer)
    logged = [r for r in caplog.records if reference in r.getMessage()]
    assert logged and SECRET in str(logged[0].exc_info[1]), "the log keeps what the client is not told"
    assert topics.partition("orders", 0)["high_watermark"] == 0


# -- topics ------------------------------------------------------------------------------------


def test_create_list_get_and_delete_a_topic(api: Api) -> None:
    created = api.post("/topics", {"topic_name": "orders", "partitions_count": 3, "replication_factor": 1,
                                   "configs": [{"name": "retention.ms", "value": "86400000"}]}, status=201)
    assert created["kind"] == "KafkaTopic" and created["topic_name"] == "orders"
    assert created["partitions_count"] == 3 and created["replication_factor"] == 1
    assert created["configs"]["related"].endswith("/topics/orders/configs")
    effective = {c["name"]: c for c in created["effective_configs"]}
    assert effective["retention.ms"] == {"name": "retention.ms", "value": "86400000", "is_default": False,
                                         "source": "DYNAMIC_TOPIC_CONFIG", "is_read_only": False,
                                         "is_sensitive": False}
    assert effective["cleanup.policy"]["value"] == "delete" and effective["cleanup.policy"]["is_default"]
    assert created["partitions"]["related"].endswith("/topics/orders/partitions")
    assert [t["topic_name"] for t in api.get("/topics")["data"]] == ["orders"]
    assert api.get("/topics/orders")["topic_id"] == created["topic_id"]
    api.call("DELETE", "/topics/orders", 204)
    assert api.error("GET", "/topics/orders", 404) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert api.get("/topics")["data"] == []


def test_internal_topics_are_listed_as_internal(topics: Api) -> None:
    topics.init("tx")  # creates __transaction_state
    listed = {t["topic_name"]: t["is_internal"] for t in topics.get("/topics")["data"]}
    assert listed == {"__transaction_state": True, "orders": False, "payments": False}


@pytest.mark.parametrize("body, status, error", [
    ({}, 400, "INVALID_REQUEST"),
    ({"topic_name": 7}, 400, "INVALID_REQUEST"),
    ({"topic_name": "a/b"}, 400, "INVALID_TOPIC_EXCEPTION"),
    ({"topic_name": ".."}, 400, "INVALID_TOPIC_EXCEPTION"),
    ({"topic_name": "t", "partitions_count": 0}, 400, "INVALID_REQUEST"),
    ({"topic_name": "t", "partitions_count": "2"}, 400, "INVALID_REQUEST"),
    ({"topic_name": "t", "partitions_count": 2.0}, 400, "INVALID_REQUEST"),
    ({"topic_name": "t", "partitions_count": True}, 400, "INVALID_REQUEST"),
    ({"topic_name": "t", "partitions_count": 100_000}, 400, "POLICY_VIOLATION"),  # Kafka's 10,000 a request
    ({"topic_name": "t", "replication_factor": 3}, 400, "INVALID_REPLICATION_FACTOR"),
    ({"topic_name": "t", "configs": {"retention.ms": "1"}}, 400, "INVALID_REQUEST"),
    ({"topic_name": "t", "configs": [{"name": "no.such.config", "value": "1"}]}, 400, "INVALID_CONFIG"),
    ({"topic_name": "t", "configs": [{"name": "retention.ms", "value": "soon"}]}, 400, "INVALID_CONFIG"),
    ({"topic_name": "t", "configs": [{"name": "retention.ms", "value": 5}]}, 400, "INVALID_REQUEST"),
    ({"topic_name": "t", "configs": [{"value": None}]}, 400, "INVALID_REQUEST"),  # found by the fuzzer
    ({"topic_name": "__consumer_offsets"}, 400, "INVALID_TOPIC_EXCEPTION"),
    ({"topic_name": "orders"}, 400, "TOPIC_ALREADY_EXISTS"),
])
def test_create_topic_refuses_bad_input(topics: Api, body: dict, status: int, error: str) -> None:
    assert topics.error("POST", "/topics", status, body) == error
    assert {t["topic_name"] for t in topics.get("/topics")["data"]} == {"orders", "payments"}


@pytest.mark.parametrize("data, content_type, status, error", [
    (b"{not json", "application/json", 400, "INVALID_REQUEST"),
    (b"[1, 2]", "application/json", 400, "INVALID_REQUEST"),
    (b"null", "application/json", 400, "INVALID_REQUEST"),
    (b"", "application/json", 400, "INVALID_REQUEST"),
    (b"[" * 100_000 + b"]" * 100_000, "application/json", 400, "INVALID_REQUEST"),
    (b"topic_name=t", "application/x-www-form-urlencoded", 415, "UNSUPPORTED_MEDIA_TYPE"),
    (b'{"topic_name": "t"}', "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
])
def test_a_write_needs_a_json_object_body(api: Api, data: bytes, content_type: str, status: int,
                                          error: str) -> None:
    response = api.client.post(f"{api.base}/topics", data=data, content_type=content_type)
    assert (response.status_code, response.json["error_name"]) == (status, error)


def test_an_optional_body_may_be_absent_but_not_blank(topics: Api) -> None:
    assert topics.client.post(f"{topics.base}/transactions/blank-tx/init").status_code == 200
    response = topics.client.post(f"{topics.base}/transactions/blank-tx/init", data=b"\n",
                                  content_type="application/json")
    assert (response.status_code, response.json["error_name"]) == (400, "INVALID_REQUEST")


def test_a_body_over_the_size_limit_is_413(topics: Api) -> None:
    body = json.dumps({"value": {"type": "BINARY", "data": b64(b"x" * (4 << 20))}})
    response = topics.client.post(f"{topics.base}/topics/orders/records", data=body,
                                  content_type="application/json")
    assert response.status_code == 413 and response.json["error_name"] == "REQUEST_ENTITY_TOO_LARGE"
    assert topics.partition("orders", 0)["high_watermark"] == 0


def test_delete_refuses_unknown_and_internal_topics(topics: Api) -> None:
    topics.init("tx")
    assert topics.error("DELETE", "/topics/nope", 404) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert topics.error("DELETE", "/topics/__transaction_state", 400) == "INVALID_TOPIC_EXCEPTION"


# -- partitions and producers ---------------------------------------------------------------


def test_partitions_show_offsets_and_the_transaction_holding_the_lso(topics: Api) -> None:
    topics.produce("orders", 0, "plain")
    producer = topics.init("orders-tx", transaction_timeout_ms=30_000)
    topics.post("/transactions/orders-tx/records", txn_body(producer, records=[record("orders", 0, "in-txn")]))
    detail = topics.partition("orders", 0)
    assert detail["kind"] == "KafkaPartition"
    assert (detail["log_start_offset"], detail["last_stable_offset"], detail["high_watermark"]) == (0, 1, 2)
    assert detail["open_transactions"] == [{
        "producer_id": producer[0], "first_offset": 1, "transactional_id": "orders-tx",
        "transaction_start_ms": detail["open_transactions"][0]["transaction_start_ms"],
        "transaction_timeout_ms": 30_000}]
    listed = topics.get("/topics/orders/partitions")["data"]
    assert [p["partition_id"] for p in listed] == [0, 1]
    assert listed[0]["open_transactions"][0]["transactional_id"] == "orders-tx"
    assert listed[1]["open_transactions"] == [] and listed[1]["high_watermark"] == 0

    producers = topics.get("/topics/orders/partitions/0/producers")
    assert producers["kind"] == "KafkaProducerList"
    (entry,) = producers["data"]
    assert entry["producer_id"] == producer[0] and entry["transactional_id"] == "orders-tx"
    assert entry["current_transaction_start_offset"] == 1 and entry["last_sequence"] == 0


@pytest.mark.parametrize("path", ["/topics/nope/partitions", "/topics/nope/partitions/0",
                                  "/topics/orders/partitions/2", "/topics/orders/partitions/2/producers",
                                  "/topics/orders/partitions/99999999999"])
def test_unknown_partitions_are_404(topics: Api, path: str) -> None:
    assert topics.error("GET", path, 404) == "UNKNOWN_TOPIC_OR_PARTITION"


# -- produce and read --------------------------------------------------------------------------


def test_records_of_every_data_type_read_back_as_binary(topics: Api, clock: FakeClock) -> None:
    sent = [
        ({"type": "BINARY", "data": b64(b"\x00\xffk")}, {"type": "BINARY", "data": b64(b"\x01\x02")}),
        ({"type": "STRING", "data": "clé"}, {"type": "STRING", "data": "valeur ✓"}),
        ({"type": "JSON", "data": {"id": 7}}, {"type": "JSON", "data": [1, "two", None]}),
        (None, {"type": "JSON", "data": None}),
    ]
    for key, value in sent:
        answer = topics.post("/topics/orders/records", {"partition_id": 1, "key": key, "value": value})
        assert answer["error_code"] == 200 and answer["timestamp"] == iso_time(clock.now_ms())
    topics.post("/topics/orders/records", {"partition_id": 1, "headers": [{"name": "trace", "value": b64(b"abc")},
                                                                          {"name": "empty", "value": None}],
                                           "timestamp": 1_600_000_000_000})
    topics.post("/topics/orders/records", {"partition_id": 1, "timestamp": "2021-02-05T19:14:42Z",
                                           "value": string("iso")})
    records = topics.read("orders", 1)["records"]
    assert [r["offset"] for r in records] == list(range(6))
    assert [r["key"] for r in records[:4]] == [
        {"type": "BINARY", "data": b64(b"\x00\xffk")}, {"type": "BINARY", "data": b64("clé".encode())},
        {"type": "BINARY", "data": b64(b'{"id":7}')}, None]
    assert [r["value"] for r in records[:5]] == [
        {"type": "BINARY", "data": b64(b"\x01\x02")}, {"type": "BINARY", "data": b64("valeur ✓".encode())},
        {"type": "BINARY", "data": b64(b'[1,"two",null]')}, {"type": "BINARY", "data": b64(b"null")}, None]
    assert records[4]["headers"] == [{"name": "trace", "value": b64(b"abc")}, {"name": "empty", "value": None}]
    assert records[4]["timestamp"] == 1_600_000_000_000
    assert records[5]["timestamp"] == 1_612_552_482_000
    assert records[0]["is_transactional"] is False and records[0]["producer_id"] == -1


def test_produce_summarises_key_and_value_like_rest_v3(topics: Api) -> None:
    answer = topics.post("/topics/orders/records", {"partition_id": 0, "key": string("k1"),
                                                    "value": {"type": "JSON", "data": {"n": 1}}})
    assert answer["key"] == {"type": "STRING", "size": 2} and answer["value"] == {"type": "JSON", "size": 7}
    assert (answer["topic_name"], answer["partition_id"], answer["offset"]) == ("orders", 0, 0)


def test_without_a_partition_the_key_picks_it_as_kafka_does(topics: Api) -> None:
    expected = (murmur2(b"customer-42") & 0x7FFFFFFF) % 2
    partitions = {topics.post("/topics/orders/records", {"key": string("customer-42"), "value": string("v")})
                  ["partition_id"] for _ in range(4)}
    assert partitions == {expected}
    assert topics.post("/topics/orders/records", {"value": string("keyless")})["partition_id"] in (0, 1)


@pytest.mark.parametrize("body, status, error", [
    ({"value": {"type": "BINARY", "data": "not base64!"}}, 400, "INVALID_REQUEST"),
    ({"value": {"type": "BINARY", "data": "YWJj"[:3]}}, 400, "INVALID_REQUEST"),
    ({"value": {"type": "BINARY", "data": 12}}, 400, "INVALID_REQUEST"),
    ({"value": {"type": "AVRO", "data": {}}}, 400, "INVALID_REQUEST"),
    ({"value": {"type": "STRING"}}, 400, "INVALID_REQUEST"),
    ({"value": {"type": "STRING", "data": 5}}, 400, "INVALID_REQUEST"),
    ({"value": {"type": "STRING", "data": "\ud800"}}, 400, "INVALID_REQUEST"),
    ({"value": "raw"}, 400, "INVALID_REQUEST"),
    ({"key": ["k"]}, 400, "INVALID_REQUEST"),
    ({"headers": {"a": "b"}}, 400, "INVALID_REQUEST"),
    ({"headers": [{"value": b64(b"x")}]}, 400, "INVALID_REQUEST"),
    ({"headers": [{"name": "h", "value": "%%%"}]}, 400, "INVALID_REQUEST"),
    ({"partition_id": -1}, 400, "INVALID_REQUEST"),
    ({"partition_id": "0"}, 400, "INVALID_REQUEST"),
    ({"partition_id": 2**31}, 400, "INVALID_REQUEST"),
    ({"timestamp": -5}, 400, "INVALID_REQUEST"),
    ({"timestamp": "yesterday"}, 400, "INVALID_REQUEST"),
    ({"timestamp": "2021-02-05T19:14:42"}, 400, "INVALID_REQUEST"),
    ({"timestamp": 1.5}, 400, "INVALID_REQUEST"),
    ({"producer_id": 1000}, 400, "INVALID_REQUEST"),
    ({"producer_id": 1000, "producer_epoch": 0, "sequence": -1}, 400, "INVALID_REQUEST"),
    ({"producer_id": 1000, "producer_epoch": 40_000, "sequence": 0}, 400, "INVALID_REQUEST"),
    ({"producer_id": 2**63, "producer_epoch": 0, "sequence": 0}, 400, "INVALID_REQUEST"),
    ({"partition_id": 5}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
])
def test_produce_refuses_bad_input_and_appends_nothing(topics: Api, body: dict, status: int, error: str) -> None:
    assert topics.error("POST", "/topics/orders/records", status, {"partition_id": 0, **body}) == error
    assert topics.partition("orders", 0)["high_watermark"] == 0


def test_produce_to_unknown_or_internal_topics_is_refused(topics: Api) -> None:
    topics.init("tx")
    assert topics.error("POST", "/topics/nope/records", 404,
                        {"value": string("v")}) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert topics.error("POST", "/topics/__transaction_state/records", 400,
                        {"partition_id": 0, "value": string("v")}) == "INVALID_TOPIC_EXCEPTION"


def test_a_record_over_max_message_bytes_is_413(api: Api) -> None:
    api.create_topic("small", 1, max_message_bytes="200")
    body = {"partition_id": 0, "value": {"type": "BINARY", "data": b64(b"x" * 500)}}
    assert api.error("POST", "/topics/small/records", 413, body) == "MESSAGE_TOO_LARGE"


def test_an_idempotent_producer_s_retry_returns_the_original_offset(topics: Api) -> None:
    producer = topics.post("/producer-ids")
    assert producer["producer_epoch"] == 0
    again = topics.post("/producer-ids")
    assert again["producer_id"] != producer["producer_id"]  # never reused
    ident = {"producer_id": producer["producer_id"], "producer_epoch": 0}
    topics.produce("orders", 0, "other")  # offset 0
    first = topics.produce("orders", 0, "a", sequence=0, **ident)["offset"]
    retry = topics.produce("orders", 0, "a", sequence=0, **ident)["offset"]
    second = topics.produce("orders", 0, "b", sequence=1, **ident)["offset"]
    assert (first, retry, second) == (1, 1, 2)
    assert topics.values("orders", 0) == ["other", "a", "b"]
    gap = {"partition_id": 0, "value": string("c"), "sequence": 5, **ident}
    assert topics.error("POST", "/topics/orders/records", 409, gap) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert topics.error("POST", "/topics/orders/records", 409, {"partition_id": 1, "value": string("c"),
                                                                "sequence": 3, **ident}) == "UNKNOWN_PRODUCER_ID"
    assert topics.partition("orders", 0)["high_watermark"] == 3


def test_an_idempotent_retry_is_deduplicated_after_a_restart(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as b:
        api = Api(create_app(b.engine, test_config={"TESTING": True}).test_client(), b.cluster_id)
        api.create_topic("orders")
        ident = {**api.post("/producer-ids"), "sequence": 0}
        first = api.produce("orders", 0, "once", **ident)["offset"]
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as b:
        api = Api(create_app(b.engine, test_config={"TESTING": True}).test_client(), b.cluster_id)
        assert api.produce("orders", 0, "once", **ident)["offset"] == first
        assert api.values("orders", 0) == ["once"]


def test_reads_page_with_max_bytes_and_next_offset(topics: Api) -> None:
    for i in range(5):
        topics.produce("orders", 0, f"v{i}")
    page = topics.get("/topics/orders/partitions/0/records", offset=1, max_bytes=1)
    assert [r["offset"] for r in page["records"]] == [1]  # at least one batch, even past max_bytes
    assert page["next_offset"] == 2 and page["high_watermark"] == 5
    rest = topics.get("/topics/orders/partitions/0/records", offset=page["next_offset"])
    assert [r["offset"] for r in rest["records"]] == [2, 3, 4] and rest["next_offset"] == 5
    assert topics.get("/topics/orders/partitions/0/records", offset=5)["records"] == []
    assert [r["offset"] for r in topics.get("/topics/orders/partitions/0/records")["records"]] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("query, status, error", [
    ({"offset": -1}, 400, "INVALID_REQUEST"),
    ({"offset": "abc"}, 400, "INVALID_REQUEST"),
    ({"offset": "1.5"}, 400, "INVALID_REQUEST"),
    ({"offset": "99999999999999999999"}, 400, "INVALID_REQUEST"),
    ({"offset": 3}, 416, "OFFSET_OUT_OF_RANGE"),
    ({"max_bytes": 0}, 400, "INVALID_REQUEST"),
    ({"max_bytes": 10**9}, 400, "INVALID_REQUEST"),
    ({"isolation_level": "serializable"}, 400, "INVALID_REQUEST"),
])
def test_reads_refuse_bad_queries(topics: Api, query: dict, status: int, error: str) -> None:
    topics.produce("orders", 0, "v")
    assert topics.error("GET", "/topics/orders/partitions/0/records", status, **query) == error


def test_list_offsets_latest_is_the_lso_under_read_committed(topics: Api, clock: FakeClock) -> None:
    topics.produce("orders", 0, "early")
    clock.advance(1_000)
    later = clock.now_ms()
    topics.produce("orders", 0, "late")
    producer = topics.init("tx")
    topics.post("/transactions/tx/records", txn_body(producer, records=[record("orders", 0, "open")]))

    def offset(**query: Any) -> int:
        answer = topics.get("/topics/orders/partitions/0/offsets", **query)
        return answer["offset"]
    assert offset() == offset(timestamp="latest", isolation_level="read_committed") == 2
    assert offset(timestamp="latest", isolation_level="read_uncommitted") == 3
    assert offset(timestamp="earliest") == 0
    assert offset(timestamp=later - 1, isolation_level="read_uncommitted") == 1
    found = topics.get("/topics/orders/partitions/0/offsets", timestamp=later - 1)
    assert found["timestamp"] == later
    assert offset(timestamp=later + 1, isolation_level="read_committed") == -1  # only the open record is later
    for bad in ("-1", "now", "1e3"):
        assert topics.error("GET", "/topics/orders/partitions/0/offsets", 400, timestamp=bad) == "INVALID_REQUEST"
    assert topics.error("GET", "/topics/orders/partitions/0/offsets", 400,
                        isolation_level="READ_COMMITTED") == "INVALID_REQUEST"
    assert topics.error("GET", "/topics/nope/partitions/0/offsets", 404) == "UNKNOWN_TOPIC_OR_PARTITION"


# -- transactions over HTTP ------------------------------------------------------------------


def test_a_transaction_commits_across_two_topics_and_another_aborts(topics: Api) -> None:
    topics.produce("orders", 0, "before")
    producer = topics.init("orders-tx", transaction_timeout_ms=60_000)
    appended = topics.post("/transactions/orders-tx/records", txn_body(producer, records=[
        record("orders", 0, "o1"), record("payments", 0, "p1"), record("orders", 0, "o2")]))
    assert appended == {"records": [{"topic_name": "orders", "partition_id": 0, "offset": 1},
                                    {"topic_name": "payments", "partition_id": 0, "offset": 0},
                                    {"topic_name": "orders", "partition_id": 0, "offset": 2}]}
    topics.post("/transactions/orders-tx/offsets", txn_body(producer, group_id="billing", offsets=[
        {"topic_name": "orders", "partition_id": 0, "offset": 1, "metadata": "m"}]))
    # open: read_committed consumers see nothing of it, the LSO is held at its first offset
    assert topics.values("orders", 0) == ["before"]
    assert topics.values("payments", 0) == []
    assert topics.values("orders", 0, "read_uncommitted") == ["before", "o1", "o2"]
    group = topics.get("/consumer-groups/billing")
    assert group["offsets"][0]["committed_offset"] is None
    assert group["offsets"][0]["pending"] == [{"producer_id": producer[0], "transactional_id": "orders-tx",
                                               "offset": 1}]
    assert topics.get("/transactions/orders-tx")["state"] == "Ongoing"

    committed = topics.post("/transactions/orders-tx/commit", txn_body(producer))
    assert committed["state"] == "CompleteCommit"
    assert topics.values("orders", 0) == ["before", "o1", "o2"]
    assert topics.values("payments", 0) == ["p1"]
    orders = topics.read("orders", 0)
    assert orders["last_stable_offset"] == orders["high_watermark"] == 4  # the COMMIT marker is offset 3
    assert all(r["is_transactional"] for r in orders["records"][1:])
    group = topics.get("/consumer-groups/billing")
    assert group["offsets"][0]["committed_offset"] == 1 and group["offsets"][0]["pending"] == []
    assert group["offsets"][0]["lag"] == 2  # records 1 and 2: the COMMIT marker (3) is not a record to read

    # the next transaction of the same producer aborts: nothing of it is ever visible read_committed
    topics.post("/transactions/orders-tx/records", txn_body(producer, records=[
        record("orders", 1, "doomed"), record("payments", 0, "doomed")]))
    topics.post("/transactions/orders-tx/offsets", txn_body(producer, group_id="billing", offsets=[
        {"topic_name": "orders", "partition_id": 0, "offset": 3}]))
    aborted = topics.post("/transactions/orders-tx/abort", txn_body(producer))
    assert aborted["state"] == "CompleteAbort"
    assert topics.values("orders", 1) == []
    assert topics.values("payments", 0) == ["p1"]
    assert topics.values("payments", 0, "read_uncommitted") == ["p1", "doomed"]
    payments = topics.partition("payments", 0)
    assert payments["last_stable_offset"] == payments["high_watermark"]
    assert topics.get("/consumer-groups/billing")["offsets"][0]["committed_offset"] == 1


def test_the_first_records_call_opens_the_transaction_and_sequences_follow_per_partition(topics: Api) -> None:
    producer = topics.init("seq-tx")
    for i in range(3):
        topics.post("/transactions/seq-tx/records", txn_body(producer, records=[record("orders", 0, f"v{i}")]))
    entry = topics.get("/topics/orders/partitions/0/producers")["data"][0]
    assert entry["last_sequence"] == 2 and entry["producer_epoch"] == producer[1]
    described = topics.get("/transactions/seq-tx")
    assert described["partitions"] == [{"topic_name": "orders", "partition_id": 0}]


def test_committing_a_transaction_with_nothing_in_it_is_a_no_op(topics: Api) -> None:
    producer = topics.init("idle-tx")
    assert topics.post("/transactions/idle-tx/commit", txn_body(producer))["state"] == "Empty"
    assert topics.post("/transactions/idle-tx/abort", txn_body(producer))["state"] == "Empty"


def test_a_retried_call_with_the_same_idempotency_key_appends_once(topics: Api) -> None:
    producer = topics.init("retry-tx")
    body = txn_body(producer, records=[record("orders", 0, "once"), record("payments", 0, "once")])
    key = {"Idempotency-Key": "send-1"}
    first = topics.call("POST", "/transactions/retry-tx/records", 200, body, key)
    retry = topics.call("POST", "/transactions/retry-tx/records", 200, body, key)
    assert retry.json == first.json and retry.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert topics.partition("orders", 0)["high_watermark"] == 1
    assert topics.partition("payments", 0)["high_watermark"] == 1
    # the same key for another body is refused, and nothing is appended
    other = txn_body(producer, records=[record("orders", 0, "twice")])
    assert topics.call("POST", "/transactions/retry-tx/records", 422, other, key).json["error_name"] == \
        "UNPROCESSABLE_ENTITY"
    # ... and for another operation with the same body (commit and abort have the same body)
    commit_key = {"Idempotency-Key": "end-1"}
    topics.call("POST", "/transactions/retry-tx/commit", 200, txn_body(producer), commit_key)
    topics.call("POST", "/transactions/retry-tx/abort", 422, txn_body(producer), commit_key)
    assert topics.call("POST", "/transactions/retry-tx/commit", 200, txn_body(producer), commit_key).json[
        "state"] == "CompleteCommit"
    assert topics.values("orders", 0) == ["once"]
    # a retried init does not bump the epoch again (which would fence the caller itself)
    init_key = {"Idempotency-Key": "init-2"}
    bumped = topics.call("POST", "/transactions/retry-tx/init", 200, {}, init_key).json
    assert topics.call("POST", "/transactions/retry-tx/init", 200, {}, init_key).json == bumped
    assert bumped["producer_epoch"] == producer[1] + 1
    assert topics.get("/transactions/retry-tx")["producer_epoch"] == producer[1] + 1
    assert topics.error("POST", "/transactions/retry-tx/records", 409, body) == "PRODUCER_FENCED"


def test_a_records_call_keeps_its_key_in_a_header_that_clients_may_not_send(topics: Api) -> None:
    producer = topics.init("mark-tx")
    body = txn_body(producer, records=[record("orders", 0, "a"), record("orders", 0, "b")])
    topics.call("POST", "/transactions/mark-tx/records", 200, body, {"Idempotency-Key": "mark-1"})
    marks = [[(h["name"], json.loads(base64.b64decode(h["value"]))) for h in r["headers"]]
             for r in topics.read("orders", 0, "read_uncommitted")["records"]]
    assert [[(name, mark["key"], mark["index"], mark["count"]) for name, mark in m] for m in marks] == \
        [[(transactions.KEY_HEADER, "mark-1", 0, 2)], [(transactions.KEY_HEADER, "mark-1", 1, 2)]]
    forged = {**record("orders", 0, "c"), "headers": [{"name": transactions.KEY_HEADER, "value": b64(b"{}")}]}
    assert topics.error("POST", "/transactions/mark-tx/records", 400,
                        txn_body(producer, records=[forged])) == "INVALID_REQUEST"
    topics.post("/transactions/mark-tx/records", txn_body(producer, records=[record("orders", 0, "d")]))
    assert topics.read("orders", 0, "read_uncommitted")["records"][2]["headers"] == [], "no key, no header"


def test_a_keyed_call_cut_short_by_a_crash_answers_transaction_abortable_after_a_restart(tmp_path: Path) -> None:
    key = {"Idempotency-Key": "cut-1"}
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as b:
        app = create_app(b.engine, test_config={"TESTING": True})
        api = Api(app.test_client(), b.cluster_id)
        api.create_topic("orders", 2)
        producer = api.init("cut-tx")
        body = txn_body(producer, records=[record("orders", 0, "a"), record("orders", 1, "b")])
        with app.test_request_context(f"{api.base}/transactions/cut-tx/records", method="POST", json=body):
            fingerprint = idempotency.fingerprint()
        # what a crash between the two partitions' appends of that call leaves: its first record only
        b.engine.call(b.engine.transactions.coordinator.add_partitions, "cut-tx", *producer,
                      {("orders", 0), ("orders", 1)})
        mark = json.dumps({"key": "cut-1", "fingerprint": fingerprint, "index": 0, "count": 2}).encode()
        for partition, header in ((0, mark), (1, b"[" * 100_000)):  # a Kafka client's own header of that name
            b.produce("orders", partition, encode_batch(
                [SimpleRecord(b"x", headers=((transactions.KEY_HEADER, header),))], producer_id=producer[0],
                producer_epoch=producer[1], base_sequence=0, transactional=True))
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as b:
        api = Api(create_app(b.engine, test_config={"TESTING": True}).test_client(), b.cluster_id)
        retry = api.call("POST", "/transactions/cut-tx/records", 409, body, key)
        assert retry.json["error_name"] == "TRANSACTION_ABORTABLE" and retry.headers["Idempotent-Replayed"] == "true"
        assert [api.partition("orders", p)["high_watermark"] for p in (0, 1)] == [1, 1], "nothing appended"
        assert api.post("/transactions/cut-tx/abort", txn_body(producer))["state"] == "CompleteAbort"
        assert api.values("orders", 0) == api.values("orders", 1) == []


def test_an_error_answer_is_replayed_but_a_retriable_one_runs_again(topics: Api) -> None:
    producer = topics.init("err-tx")
    key = {"Idempotency-Key": "bad-partition"}
    body = txn_body(producer, records=[record("orders", 7, "x")])
    # UNKNOWN_TOPIC_OR_PARTITION is retriable (the topic may appear): not kept, the retry runs again
    assert topics.call("POST", "/transactions/err-tx/records", 404, body, key).headers["Retry-After"] == "1"
    assert "Idempotent-Replayed" not in topics.call("POST", "/transactions/err-tx/records", 404, body, key).headers
    fenced = {"Idempotency-Key": "fenced"}
    stale = txn_body((producer[0], producer[1] + 5), records=[record("orders", 0, "x")])
    topics.call("POST", "/transactions/err-tx/records", 409, stale, fenced)
    assert topics.call("POST", "/transactions/err-tx/records", 409, stale, fenced).headers[
        "Idempotent-Replayed"] == "true"


@pytest.mark.parametrize("key", ["", "a" * 256, "with space", "tab\tkey"])
def test_a_malformed_idempotency_key_is_400(topics: Api, key: str) -> None:
    producer = topics.init("tx")
    response = topics.client.post(f"{topics.base}/transactions/tx/commit", json=txn_body(producer),
                                  headers={"Idempotency-Key": key})
    assert response.status_code == 400 and response.json["error_name"] == "INVALID_REQUEST"


def test_a_zombie_with_the_old_epoch_is_refused_after_a_new_init(topics: Api) -> None:
    zombie = topics.init("app-tx")
    topics.post("/transactions/app-tx/records", txn_body(zombie, records=[record("orders", 0, "zombie")]))
    current = topics.init("app-tx")  # a new instance: fences the old one and aborts its transaction
    assert current[0] == zombie[0] and current[1] > zombie[1]
    for path, body in (("records", txn_body(zombie, records=[record("orders", 0, "late")])),
                       ("offsets", txn_body(zombie, group_id="g", offsets=[
                           {"topic_name": "orders", "partition_id": 0, "offset": 1}])),
                       ("commit", txn_body(zombie)), ("abort", txn_body(zombie))):
        assert topics.error("POST", f"/transactions/app-tx/{path}", 409, body) == "PRODUCER_FENCED"
    topics.post("/transactions/app-tx/records", txn_body(current, records=[record("orders", 0, "current")]))
    topics.post("/transactions/app-tx/commit", txn_body(current))
    assert topics.values("orders", 0) == ["current"]
    assert topics.values("orders", 0, "read_uncommitted") == ["zombie", "current"]


def test_txn_offsets_with_a_stale_generation_are_fenced(topics: Api, broker: Broker) -> None:
    joined = broker.engine.call(broker.engine.groups.coordinator.join_group, "workers", "", "consumer",
                                [("range", b"")], 10_000)
    producer = topics.init("kip447-tx")
    offsets = [{"topic_name": "orders", "partition_id": 0, "offset": 5}]
    stale = txn_body(producer, group_id="workers", generation_id=joined.generation - 1,
                     member_id=joined.member_id, offsets=offsets)
    assert topics.error("POST", "/transactions/kip447-tx/offsets", 409, stale) == "ILLEGAL_GENERATION"
    unknown = txn_body(producer, group_id="workers", generation_id=joined.generation, member_id="ghost",
                       offsets=offsets)
    assert topics.error("POST", "/transactions/kip447-tx/offsets", 409, unknown) == "UNKNOWN_MEMBER_ID"
    topics.post("/transactions/kip447-tx/offsets", txn_body(producer, group_id="workers", offsets=offsets,
                                                            generation_id=joined.generation,
                                                            member_id=joined.member_id))
    topics.post("/transactions/kip447-tx/commit", txn_body(producer))
    group = topics.get("/consumer-groups/workers")
    assert group["generation_id"] == joined.generation
    assert [m["member_id"] for m in group["members"]] == [joined.member_id]
    assert group["offsets"][0]["committed_offset"] == 5


@pytest.mark.parametrize("path, body, status, error", [
    ("init", {"transaction_timeout_ms": 0}, 400, "INVALID_REQUEST"),
    ("init", {"transaction_timeout_ms": "60000"}, 400, "INVALID_REQUEST"),
    ("init", {"transaction_timeout_ms": 2**31 - 1}, 400, "INVALID_TRANSACTION_TIMEOUT"),
    ("records", {"producer_id": None, "records": [record("orders", 0, "v")]}, 400, "INVALID_REQUEST"),
    ("records", {"producer_id": "P", "records": [record("orders", 0, "v")]}, 400, "INVALID_REQUEST"),
    ("records", {"producer_epoch": 2**15, "records": [record("orders", 0, "v")]}, 400, "INVALID_REQUEST"),
    ("records", {"records": []}, 400, "INVALID_REQUEST"),
    ("records", {"records": [{"partition_id": 0}]}, 400, "INVALID_REQUEST"),
    ("records", {"records": ["v"]}, 400, "INVALID_REQUEST"),
    ("records", {"records": [record("nope", 0, "v")]}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("records", {"records": [record("orders", 0, "v"), record("orders", 9, "v")]}, 404,
     "UNKNOWN_TOPIC_OR_PARTITION"),
    ("records", {"records": [record("__consumer_offsets", 0, "v")]}, 400, "INVALID_TOPIC_EXCEPTION"),
    ("records", {"records": [{**record("orders", 0, "v"), "value": {"type": "BINARY", "data": "?"}}]}, 400,
     "INVALID_REQUEST"),
    ("offsets", {"group_id": "g", "offsets": []}, 400, "INVALID_REQUEST"),
    ("offsets", {"group_id": "", "offsets": [{"topic_name": "orders", "partition_id": 0, "offset": 1}]}, 400,
     "INVALID_REQUEST"),
    ("offsets", {"group_id": "g", "offsets": [{"topic_name": "orders", "partition_id": 0, "offset": -1}]}, 400,
     "INVALID_REQUEST"),
    ("offsets", {"group_id": "g", "offsets": [{"topic_name": "orders", "partition_id": 3, "offset": 1}]}, 404,
     "UNKNOWN_TOPIC_OR_PARTITION"),
    ("offsets", {"group_id": "g", "offsets": [{"topic_name": "orders", "partition_id": 0, "offset": 1,
                                                "metadata": "m" * 5000}]}, 400, "OFFSET_METADATA_TOO_LARGE"),
    ("commit", {"producer_id": None}, 400, "INVALID_REQUEST"),
    ("commit", {"producer_epoch": -1}, 400, "INVALID_REQUEST"),
])
def test_transaction_calls_refuse_bad_input(topics: Api, path: str, body: dict, status: int, error: str) -> None:
    producer = topics.init("bad-tx")
    if path != "init":  # the producer's own id and epoch, unless the case overrides them
        body = {k: v for k, v in txn_body(producer, **body).items() if v is not None}
    assert topics.error("POST", f"/transactions/bad-tx/{path}", status, body) == error
    assert topics.partition("orders", 0)["high_watermark"] == 0


def test_transaction_calls_for_another_producer_are_refused(topics: Api) -> None:
    producer = topics.init("mine")
    other = topics.init("theirs")
    assert topics.error("POST", "/transactions/mine/records", 409, txn_body(
        other, records=[record("orders", 0, "v")])) == "INVALID_PRODUCER_ID_MAPPING"
    assert topics.error("POST", "/transactions/unknown/commit", 409, txn_body(producer)) == \
        "INVALID_PRODUCER_ID_MAPPING"
    assert topics.error("POST", "/transactions/mine/commit", 409, txn_body(
        (producer[0], producer[1] + 1))) == "PRODUCER_FENCED"


def test_list_and_describe_transactions(topics: Api, clock: FakeClock) -> None:
    open_ = topics.init("open-tx", transaction_timeout_ms=45_000)
    topics.post("/transactions/open-tx/records", txn_body(open_, records=[record("orders", 0, "v")]))
    topics.init("idle-tx")
    clock.advance(1_500)
    listed = topics.get("/transactions")
    assert listed["kind"] == "KafkaTransactionList"
    assert [(t["transactional_id"], t["state"]) for t in listed["data"]] == [("idle-tx", "Empty"),
                                                                              ("open-tx", "Ongoing")]
    ongoing = topics.get("/transactions", state="Ongoing")["data"]
    assert [t["transactional_id"] for t in ongoing] == ["open-tx"]
    assert ongoing[0]["age_ms"] == 1_500 and ongoing[0]["transaction_timeout_ms"] == 45_000
    both = topics.client.get(f"{topics.base}/transactions?state=Ongoing&state=Empty").json["data"]
    assert len(both) == 2
    assert topics.error("GET", "/transactions", 400, state="ongoing") == "INVALID_REQUEST"
    described = topics.get("/transactions/open-tx")
    assert described["state"] == "Ongoing" and described["producer_id"] == open_[0]
    assert described["partitions"] == [{"topic_name": "orders", "partition_id": 0}]
    assert described["history"] is None  # no SQLite mirror in this app
    assert topics.error("GET", "/transactions/nobody", 404) == "TRANSACTIONAL_ID_NOT_FOUND"
    assert topics.error("GET", "/transactions/open-tx", 400, history_limit=-1) == "INVALID_REQUEST"


def test_describe_shows_finished_transactions_from_the_sqlite_mirror(broker: Broker) -> None:
    app = create_app(broker.engine, test_config={"TESTING": True}, mirror=broker.mirror)
    api = Api(app.test_client(), broker.cluster_id)
    api.create_topic("orders", 2)
    producer = api.init("hist-tx")
    api.post("/transactions/hist-tx/records", txn_body(producer, records=[record("orders", 0, "a"),
                                                                          record("orders", 1, "b")]))
    api.post("/transactions/hist-tx/commit", txn_body(producer))
    api.post("/transactions/hist-tx/records", txn_body(producer, records=[record("orders", 1, "c")]))
    api.post("/transactions/hist-tx/abort", txn_body(producer))
    broker.mirror.catch_up()  # now, rather than at the broker's next mirror round
    history = api.get("/transactions/hist-tx")["history"]
    assert [h["outcome"] for h in history] == ["ABORT", "COMMIT"]
    assert history[1]["partitions"] == [{"topic_name": "orders", "partition_id": 0},
                                        {"topic_name": "orders", "partition_id": 1}]
    assert history[0]["partitions"] == [{"topic_name": "orders", "partition_id": 1}]
    assert all(h["producer_id"] == producer[0] for h in history)
    assert api.get("/transactions/hist-tx", history_limit=1)["history"][0]["outcome"] == "ABORT"


def test_admin_abort_ends_the_transaction_holding_the_lso_and_fences_its_producer(topics: Api) -> None:
    producer = topics.init("stuck-tx")
    topics.post("/transactions/stuck-tx/records", txn_body(producer, records=[record("orders", 0, "stuck")]))
    topics.produce("orders", 0, "behind")
    before = topics.partition("orders", 0)
    assert before["last_stable_offset"] == 0 < before["high_watermark"]
    aborted = topics.post("/transactions/stuck-tx/admin-abort")
    assert aborted["state"] == "CompleteAbort" and aborted["producer_epoch"] == producer[1] + 1
    after = topics.partition("orders", 0)
    assert after["last_stable_offset"] == after["high_watermark"] and after["open_transactions"] == []
    assert topics.values("orders", 0) == ["behind"]
    assert topics.error("POST", "/transactions/stuck-tx/records", 409, txn_body(
        producer, records=[record("orders", 0, "late")])) == "PRODUCER_FENCED"
    assert topics.error("POST", "/transactions/stuck-tx/admin-abort", 409) == "INVALID_TXN_STATE"
    assert topics.error("POST", "/transactions/nobody/admin-abort", 404) == "TRANSACTIONAL_ID_NOT_FOUND"


def test_a_hanging_transaction_of_a_producer_no_coordinator_knows_is_aborted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # a log written without verification (an older broker): no coordinator knows producer 424242
    with DurableLogs(data) as logs:
        logs.create_topic("orders", 2)
        logs.produce("orders", 0, encode_batch([SimpleRecord(b"hanging")], producer_id=424242, producer_epoch=3,
                                               base_sequence=0, transactional=True))
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        topics = Api(create_app(broker.engine, test_config={"TESTING": True}).test_client(), broker.cluster_id)
        topics.produce("orders", 0, "after")
        detail = topics.partition("orders", 0)
        assert detail["last_stable_offset"] == 0
        assert detail["open_transactions"][0]["transactional_id"] is None
        answer = topics.post("/topics/orders/partitions/0/producers/424242/abort")
        assert answer == {"topic_name": "orders", "partition_id": 0, "producer_id": 424242,
                          "transactional_id": None, "producer_epoch": 4, "last_stable_offset": 3}
        detail = topics.partition("orders", 0)
        assert detail["last_stable_offset"] == detail["high_watermark"] == 3
        assert topics.values("orders", 0) == ["after"]
        assert topics.error("POST", "/topics/orders/partitions/0/producers/424242/abort", 409) == \
            "INVALID_TXN_STATE"
        assert topics.error("POST", "/topics/orders/partitions/1/producers/424242/abort", 409) == \
            "INVALID_TXN_STATE"
        assert topics.error("POST", "/topics/nope/partitions/0/producers/1/abort", 404) == \
            "UNKNOWN_TOPIC_OR_PARTITION"


def test_the_partition_abort_of_a_transactional_producer_aborts_its_transaction(topics: Api) -> None:
    owned = topics.init("owned-tx")
    topics.post("/transactions/owned-tx/records", txn_body(owned, records=[record("orders", 1, "v"),
                                                                           record("payments", 0, "w")]))
    answer = topics.post(f"/topics/orders/partitions/1/producers/{owned[0]}/abort")
    assert answer == {"topic_name": "orders", "partition_id": 1, "producer_id": owned[0],
                      "transactional_id": "owned-tx", "producer_epoch": owned[1] + 1, "last_stable_offset": 2}
    assert topics.get("/transactions/owned-tx")["state"] == "CompleteAbort"
    for topic, partition in (("orders", 1), ("payments", 0)):  # the whole transaction, fenced everywhere
        detail = topics.partition(topic, partition)
        assert detail["last_stable_offset"] == detail["high_watermark"] == 2
    assert topics.error("POST", "/transactions/owned-tx/records", 409, txn_body(
        owned, records=[record("orders", 1, "late")])) == "PRODUCER_FENCED"


# -- consumer groups ----------------------------------------------------------------------------


def test_consumer_groups_list_and_describe(topics: Api, broker: Broker) -> None:
    assert topics.get("/consumer-groups")["data"] == []
    joined = broker.engine.call(broker.engine.groups.coordinator.join_group, "readers", "", "consumer",
                                [("range", b"")], 10_000, client_id="reader-1")
    listed = topics.get("/consumer-groups")["data"]
    assert [(g["consumer_group_id"], g["members_count"], g["generation_id"]) for g in listed] == [
        ("readers", 1, joined.generation)]
    group = topics.get("/consumer-groups/readers")
    assert group["kind"] == "KafkaConsumerGroup" and group["leader"] == joined.member_id
    assert group["members"][0]["client_id"] == "reader-1" and group["offsets"] == []
    assert topics.error("GET", "/consumer-groups/nobody", 404) == "GROUP_ID_NOT_FOUND"


# -- security ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v3/clusters", "/openapi.json", "/metrics"])
def test_with_a_token_the_api_needs_the_bearer_header(broker: Broker, path: str) -> None:
    client = create_app(broker.engine, HttpSettings(token="s3cret"), test_config={"TESTING": True}).test_client()
    missing = client.get(path)
    assert missing.status_code == 401 and missing.json["error_name"] == "UNAUTHORIZED"
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    for wrong in ("Bearer nope", "s3cret", "Basic czNjcmV0", "Bearer s3cret2", "Bearer "):
        assert client.get(path, headers={"Authorization": wrong}).status_code == 401, wrong
    assert client.get(path, headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_with_a_token_a_write_without_it_changes_nothing(broker: Broker) -> None:
    client = create_app(broker.engine, HttpSettings(token="s3cret"), test_config={"TESTING": True}).test_client()
    base = f"/v3/clusters/{broker.cluster_id}"
    assert client.post(f"{base}/topics", json={"topic_name": "t"}).status_code == 401
    assert broker.engine.topics.topic_names() == []
    ok = client.post(f"{base}/topics", json={"topic_name": "t"}, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 201


@pytest.mark.parametrize("headers", [{"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                                     {"Origin": "http://evil.example"}, {"Origin": "http://localhost:9999"}])
def test_a_write_from_another_site_s_page_is_refused(topics: Api, headers: dict) -> None:
    producer = topics.init("victim-tx")
    topics.post("/transactions/victim-tx/records", txn_body(producer, records=[record("orders", 0, "v")]))
    forged = topics.client.post(f"{topics.base}/transactions/victim-tx/admin-abort", headers=headers)
    assert forged.status_code == 403 and forged.json["error_name"] == "FORBIDDEN"
    assert topics.get("/transactions/victim-tx")["state"] == "Ongoing"
    assert topics.client.get(f"{topics.base}/transactions/victim-tx", headers=headers).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"},
                                     {"Origin": "http://localhost"}])
def test_a_write_from_a_tool_or_this_site_is_accepted(topics: Api, headers: dict) -> None:
    producer = topics.init("tx")
    topics.post("/transactions/tx/records", txn_body(producer, records=[record("orders", 0, "v")]))
    assert topics.client.post(f"{topics.base}/transactions/tx/admin-abort", headers=headers).status_code == 200


def test_api_responses_are_not_framable_or_sniffable(api: Api) -> None:
    response = api.client.get("/v3/clusters")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"


# -- the OpenAPI document -----------------------------------------------------------------------


def _rules(app) -> set[tuple[str, str]]:
    import re
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/v3"):
            path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
            found |= {(path, m.lower()) for m in rule.methods - {"HEAD", "OPTIONS"}}
    return found


def test_every_v3_route_is_documented_and_every_documented_path_is_a_route(app) -> None:
    documented = {(path, method) for path, ops in document.document()["paths"].items() if path.startswith("/v3")
                  for method in ops}
    routes = _rules(app)
    assert routes - documented == set(), "routes missing from /openapi.json"
    assert documented - routes == set(), "documented paths without a route"
    assert len(routes) >= 24


#: JSON Schema keywords: a dict literal holding one states a shape by hand
SCHEMA_KEYWORDS = {"properties", "minimum", "maximum", "pattern", "enum", "items", "minLength",
                   "maxLength", "oneOf", "anyOf", "allOf"}


def test_http_shapes_are_declared_only_as_models() -> None:
    """One declaration per shape: pydantic models live in exactly/app/http/api/models.py, and no
    other module under exactly/app/http writes a JSON Schema by hand (the document derives them)."""
    import ast
    http = Path(__file__).resolve().parents[1] / "exactly" / "app" / "http"
    sources = sorted(http.rglob("*.py"))
    assert len(sources) > 20, "the walk finds the HTTP face's modules"
    for path in sources:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict) and path.name != "models.py":  # a model's json_schema_extra may
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                assert not keys & SCHEMA_KEYWORDS, f"{path.name}:{node.lineno} states a schema by hand"
            if isinstance(node, ast.ClassDef) and path.name != "models.py":
                bases = {ast.unparse(b) for b in node.bases}
                assert not bases & {"BaseModel", "m.Request", "models.Request"}, \
                    f"{path.name}:{node.lineno} declares a shape outside models.py"


def test_the_document_states_the_limits_the_validation_applies() -> None:
    """The limits are read from one place: the document shows the models' bounds."""
    from exactly.app.http.api import models
    schemas = document.document()["components"]["schemas"]
    batch = schemas["ProduceBatch"]["properties"]["entries"]
    assert batch["maxItems"] == models.MAX_BATCH_ENTRIES
    assert schemas["CreateTopic"]["properties"]["topic_name"]["maxLength"] == 249
    read = document.document()["paths"]["/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/"
                                        "{partition_id}/records"]["get"]["parameters"]
    (max_bytes,) = [p for p in read if p["name"] == "max_bytes"]
    assert max_bytes["schema"]["maximum"] == models.MAX_FETCH_BYTES == 52_428_800


def test_openapi_json_serves_the_document_with_every_reference_resolvable(api: Api) -> None:
    served = api.client.get("/openapi.json").json
    assert served == json.loads(json.dumps(document.document()))
    assert served["openapi"].startswith("3.1")
    text = json.dumps(served)
    import re
    for name in set(re.findall(r'"#/components/schemas/([^"]+)"', text)):
        assert name in served["components"]["schemas"], name
    for name in set(re.findall(r'"#/components/responses/([^"]+)"', text)):
        assert name in served["components"]["responses"], name
    for path, ops in served["paths"].items():
        for op in ops.values():
            named = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert named == set(re.findall(r"{([a-z_]+)}", path)), path


# -- metrics ----------------------------------------------------------------------------------


def _scrape(api: Api) -> dict[tuple[str, tuple], float]:
    response = api.client.get("/metrics")
    assert response.status_code == 200 and response.mimetype == "text/plain"
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.get_data(True)) for s in family.samples}


def test_metrics_report_offsets_producers_transactions_and_requests(topics: Api) -> None:
    before = _scrape(topics)
    topics.produce("orders", 0, "plain")
    producer = topics.init("m-tx")
    topics.post("/transactions/m-tx/records", txn_body(producer, records=[record("orders", 0, "a"),
                                                                          record("orders", 1, "b")]))
    opened = _scrape(topics)
    orders0 = (("partition", "0"), ("topic", "orders"))
    assert opened[("exactly_partition_high_watermark", orders0)] == 2
    assert opened[("exactly_partition_last_stable_offset", orders0)] == 1
    assert opened[("exactly_partition_log_start_offset", orders0)] == 0
    assert opened[("exactly_live_producer_ids", orders0)] == 1
    assert opened[("exactly_active_transactional_ids", (("state", "Ongoing"),))] == 1
    assert not any(name == "exactly_active_transactional_ids" and labels == (("state", "CompleteCommit"),)
                   for name, labels in opened)  # a completed transaction is not an active one
    topics.post("/transactions/m-tx/commit", txn_body(producer))
    topics.values("orders", 0)
    after = _scrape(topics)
    assert after[("exactly_partition_last_stable_offset", orders0)] == 3
    assert after[("exactly_transactions_completed_total", (("outcome", "commit"),))] == 1
    assert after[("exactly_transactions_completed_total", (("outcome", "abort"),))] == 0
    assert after[("exactly_active_transactional_ids", (("state", "Ongoing"),))] == 0
    assert after[("exactly_produced_records_total", ())] - before[("exactly_produced_records_total", ())] >= 3
    assert after[("exactly_produce_requests_total", ())] > before[("exactly_produce_requests_total", ())]
    assert after[("exactly_fetch_requests_total", ())] >= before[("exactly_fetch_requests_total", ())] + 1
    assert after[("exactly_fetched_bytes_total", ())] > 0
    route = (("endpoint", "/v3/clusters/<cluster_id>/topics/<topic_name>/records"), ("method", "POST"),
             ("status", "200"))
    assert after[("exactly_http_requests_total", route)] == 1
    assert any(name == "process_cpu_seconds_total" for name, _ in after)
