"""Confluent REST Proxy v3 compatibility of the HTTP API (exactly/app/http/): every shared
resource checked against the proxy's documented shapes (tests/data/confluent_v3_shapes.json,
written down from confluentinc/kafka-rest's api/v3/openapi.yaml), its error codes,
streaming and batch produce, topic configs, consumers and lags -- through Flask's test
client over a real broker."""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.app.config import TOPIC_DEFAULTS, BrokerConfig
from exactly.app.http.api import codec
from exactly.app.http import create_app
from exactly.app.http.api.codec import MAX_TIME_MS, iso_time
from exactly.app.http.api.validation import json_values
from exactly.app.http.server import HttpServer
from exactly.app.kafka import attach as attach_kafka
from exactly.coordinator import consumer_protocol
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.storage.clock import FakeClock
from tests.conftest import SMALL_INTERNAL_TOPICS
from tests.docs import section
# the HTTP API tests' fixtures (app, api, topics), used here by name, not copied
from tests.test_http_api import Api, api, app, record, string, topics, txn_body  # noqa: F401

SHAPES = json.loads((Path(__file__).parent / "data" / "confluent_v3_shapes.json").read_text())

#: required fields of the proxy's resources that Exactly does not offer -- docs/http-api.md's
#: compatibility table lists them under "not offered" (none left)
NOT_OFFERED: dict[str, set[str]] = {
}


# -- checking a shape -----------------------------------------------------------------------


def _type_ok(value: Any, kind: str) -> bool:
    if kind.endswith("?"):
        return value is None or _type_ok(value, kind[:-1])
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
        "relationship": lambda v: isinstance(v, dict) and isinstance(v.get("related"), str)
        and v["related"].startswith("http"),
        "date-time": lambda v: isinstance(v, str) and datetime.fromisoformat(v).tzinfo is not None,
    }
    return checks[kind](value)


def check_fields(answer: dict[str, Any], shape: dict[str, dict[str, str]], skip: set[str] = frozenset(),
                 what: str = "") -> None:
    for name, kind in shape["required"].items():
        if name in skip:
            continue
        assert name in answer, f"{what}: {name} is missing"
        assert _type_ok(answer[name], kind), f"{what}: {name}={answer[name]!r} is not {kind}"
    for name, kind in shape["optional"].items():
        if name in answer:
            assert _type_ok(answer[name], kind), f"{what}: {name}={answer[name]!r} is not {kind}"


def check_resource(answer: dict[str, Any], kind: str, skip: set[str] = frozenset()) -> None:
    """``answer`` is the proxy's resource ``kind``: kind, metadata and every field."""
    assert answer["kind"] == kind
    check_fields(answer["metadata"], SHAPES["resource_metadata"], what=f"{kind}.metadata")
    assert answer["metadata"]["resource_name"].startswith("crn:///kafka=")
    check_fields(answer, SHAPES["kinds"][kind], NOT_OFFERED.get(kind, set()) | skip, kind)


def check_list(answer: dict[str, Any], kind: str, skip: set[str] = frozenset()) -> None:
    assert answer["kind"] == kind
    check_fields(answer["metadata"], SHAPES["collection_metadata"], what=f"{kind}.metadata")
    for item in answer["data"]:
        check_resource(item, SHAPES["lists"][kind], skip)


def check_error(response, kafka_name: str) -> None:
    """The error the proxy answers for ``kafka_name``: its status and error_code, with
    Kafka's name kept beside them."""
    expected = SHAPES["errors"][kafka_name]
    assert response.status_code == expected["status"], response.get_data(True)
    body = response.json
    check_fields(body, SHAPES["error"], what="error")
    assert body["error_code"] == expected["error_code"] and body["error_name"] == kafka_name


# -- a group with a live consumer and committed offsets ---------------------------------------


def stable_group(broker: Broker, group_id: str, assigned: list[tuple[str, int]]) -> str:
    """A consumer-protocol group with one member assigned ``assigned``; its member id."""
    engine = broker.engine
    gc = engine.groups.coordinator
    joined = engine.call(gc.join_group, group_id, "", consumer_protocol.PROTOCOL_TYPE,
                         [("range", consumer_protocol.encode_subscription(sorted({t for t, _ in assigned})))],
                         10_000, client_id="reader-1", client_host="/127.0.0.1")
    engine.call(gc.sync_group, group_id, joined.generation, joined.member_id,
                {joined.member_id: consumer_protocol.encode_assignment(assigned)})
    return joined.member_id


def commit(broker: Broker, group_id: str, offsets: dict[tuple[str, int], int], member_id: str = "") -> None:
    """OffsetCommit, as ``member_id`` of the group's current generation (or as a
    standalone consumer without one)."""
    gc = broker.engine.groups.coordinator
    generation = broker.engine.call(lambda: gc.describe(group_id).generation) if member_id else -1
    errors = broker.engine.call(gc.commit_offsets, group_id, {tp: CommittedOffset(o) for tp, o in offsets.items()},
                                generation, member_id)
    assert not any(errors.values()), errors


# -- every shared resource has the proxy's shape ------------------------------------------------


def test_every_shared_resource_has_the_proxy_s_documented_shape(topics: Api, broker: Broker) -> None:
    for i in range(3):
        topics.produce("orders", 0, f"v{i}")
    member = stable_group(broker, "readers", [("orders", 0), ("orders", 1)])
    commit(broker, "readers", {("orders", 0): 1}, member)
    node = broker.engine.topics.node_id

    check_list(topics.client.get("/v3/clusters").json, "KafkaClusterList")
    check_resource(topics.get(""), "KafkaCluster")
    check_list(topics.get("/brokers"), "KafkaBrokerList")
    check_resource(topics.get(f"/brokers/{node}"), "KafkaBroker")
    check_list(topics.get(f"/brokers/{node}/configs"), "KafkaBrokerConfigList")
    check_resource(topics.get(f"/brokers/{node}/configs/num.partitions"), "KafkaBrokerConfig")
    check_list(topics.get("/topics"), "KafkaTopicList")
    check_resource(topics.get("/topics/orders"), "KafkaTopic")
    check_list(topics.get("/topics/orders/partitions"), "KafkaPartitionList")
    check_resource(topics.get("/topics/orders/partitions/0"), "KafkaPartition")
    check_list(topics.get("/topics/orders/partitions/0/replicas"), "KafkaReplicaList")
    check_resource(topics.get(f"/topics/orders/partitions/0/replicas/{node}"), "KafkaReplica")
    check_list(topics.get(f"/brokers/{node}/partition-replicas"), "KafkaReplicaList")
    check_resource(topics.get("/topics/orders/partitions/0/offset"), "KafkaPartitionWithOffsets")
    configs = topics.get("/topics/orders/configs")
    check_list(configs, "KafkaTopicConfigList")
    for config in configs["data"]:
        assert config["source"] in SHAPES["config_sources"]
        for synonym in config["synonyms"]:
            check_fields(synonym, SHAPES["config_synonym"], what="synonym")
    check_resource(topics.get("/topics/orders/configs/compression.type"), "KafkaTopicConfig")
    every = topics.get("/topics/-/configs")
    check_list(every, "KafkaTopicConfigList")
    listed = [t["topic_name"] for t in topics.get("/topics")["data"]]
    assert sorted({c["topic_name"] for c in every["data"]}) == sorted(listed)  # __consumer_offsets too
    assert len(every["data"]) == len(listed) * len(configs["data"])
    check_list(topics.get("/brokers/-/configs"), "KafkaBrokerConfigList")
    check_list(topics.get("/consumer-groups"), "KafkaConsumerGroupList")
    group = topics.get("/consumer-groups/readers")
    check_resource(group, "KafkaConsumerGroup")
    assert group["state"] == "STABLE" and group["state"] in SHAPES["consumer_group_states"]
    assert group["partition_assignor"] == "range" and group["is_simple"] is False
    check_list(topics.get("/consumer-groups/readers/consumers"), "KafkaConsumerList")
    check_resource(topics.get(f"/consumer-groups/readers/consumers/{member}"), "KafkaConsumer")
    check_list(topics.get(f"/consumer-groups/readers/consumers/{member}/assignments"), "KafkaConsumerAssignmentList")
    check_resource(topics.get(f"/consumer-groups/readers/consumers/{member}/assignments/orders/partitions/1"),
                   "KafkaConsumerAssignment")
    check_list(topics.get("/consumer-groups/readers/lags"), "KafkaConsumerLagList")
    check_resource(topics.get("/consumer-groups/readers/lags/orders/partitions/0"), "KafkaConsumerLag")
    check_resource(topics.get("/consumer-groups/readers/lag-summary"), "KafkaConsumerGroupLagSummary")


def test_every_resource_and_list_links_to_itself_with_its_query_string(topics: Api) -> None:
    producer = topics.init("tx")
    topics.post("/transactions/tx/records", txn_body(producer, records=[record("orders", 0, "v")]))
    listed = topics.get("/transactions", state="Ongoing")
    assert listed["metadata"]["self"].endswith("/transactions?state=Ongoing")
    assert listed["data"][0]["kind"] == "KafkaTransaction"
    assert listed["data"][0]["metadata"]["self"].endswith("/transactions/tx")  # an item: its own URL
    described = topics.get("/transactions/tx", history_limit=5)
    assert described["metadata"]["self"].endswith("/transactions/tx?history_limit=5")
    assert described["metadata"]["resource_name"].endswith("/transactional-id=tx")
    producers = topics.get("/topics/orders/partitions/0/producers")
    assert producers["kind"] == "KafkaProducerList"
    one = producers["data"][0]
    assert one["kind"] == "KafkaProducer" and one["transactional_id"] == "tx"
    assert topics.client.get(one["metadata"]["self"]).json == one
    for answer in (topics.get("/topics/orders"), topics.get("/consumer-groups")):
        assert topics.client.get(answer["metadata"]["self"]).json == answer  # self is where it came from


# -- errors ---------------------------------------------------------------------------------------


def test_errors_carry_the_proxy_s_code_and_status_and_kafka_s_name(topics: Api) -> None:
    check_error(topics.client.get(f"{topics.base}/topics/nope"), "UNKNOWN_TOPIC_OR_PARTITION")
    check_error(topics.client.get(f"{topics.base}/topics/nope/partitions/0"), "UNKNOWN_TOPIC_OR_PARTITION")
    for path in ("/topics/orders/partitions/2", "/topics/orders/partitions/9/records",
                 "/topics/orders/partitions/2/offset"):  # the topic is there, not the partition
        missing = topics.client.get(topics.base + path)
        assert (missing.status_code, missing.json["error_code"], missing.json["error_name"]) == (
            404, SHAPES["partition_not_found"]["error_code"], "UNKNOWN_TOPIC_OR_PARTITION"), path
    check_error(topics.client.post(f"{topics.base}/topics/nope/records", json={"value": string("v")}),
                "UNKNOWN_TOPIC_OR_PARTITION")
    check_error(topics.client.post(f"{topics.base}/topics", json={"topic_name": "orders"}), "TOPIC_ALREADY_EXISTS")
    bad = topics.client.post(f"{topics.base}/topics", json={
        "topic_name": "t", "configs": [{"name": "compression.type", "value": "brotli"}]})
    check_error(bad, "INVALID_CONFIG")
    assert bad.json["kafka_error_code"] == 40 and "compression.type" in bad.json["message"]
    check_error(topics.client.post(f"{topics.base}/topics", json={"topic_name": 7}), "INVALID_REQUEST")
    # errors the proxy has no code for: the status is the code, Kafka's name beside it
    missing = topics.client.get(f"{topics.base}/consumer-groups/nobody")
    assert missing.status_code == 404
    assert missing.json == {"error_code": 404, "message": "no group 'nobody'", "error_name": "GROUP_ID_NOT_FOUND",
                            "kafka_error_code": 69}
    producer = topics.init("tx")
    topics.init("tx")  # fences the first
    fenced = topics.client.post(f"{topics.base}/transactions/tx/records",
                                json=txn_body(producer, records=[record("orders", 0, "late")]))
    assert (fenced.status_code, fenced.json["error_code"], fenced.json["error_name"]) == (409, 409, "PRODUCER_FENCED")
    unknown_path = topics.client.get(f"{topics.base}/nothing-here")
    assert unknown_path.json["error_code"] == 404 and unknown_path.json["kafka_error_code"] is None


def test_a_retriable_broker_error_is_503_with_the_proxy_s_retriable_code(topics: Api, broker: Broker) -> None:
    # the coordinator's write of the new id to __transaction_state meets a disk that refuses it:
    # the coordinator answers COORDINATOR_NOT_AVAILABLE (retriable), as Kafka's does
    disk = broker.faults.add(api="Produce", topic="__transaction_state", error="KAFKA_STORAGE_ERROR", count=1)
    response = topics.client.post(f"{topics.base}/transactions/tx/init", json={})
    assert (response.status_code, response.headers["Retry-After"]) == (503, "1")
    assert response.json == {"error_code": 50003,
                             "message": f"could not write the transaction log: fault {disk.id} on __transaction_state-2",
                             "error_name": "COORDINATOR_NOT_AVAILABLE", "kafka_error_code": 15}
    assert topics.client.post(f"{topics.base}/transactions/tx/init", json={}).status_code == 200  # the retry


# -- produce ------------------------------------------------------------------------------------


def test_a_produce_answers_the_proxy_s_delivery_report_with_an_iso_timestamp(topics: Api, clock: FakeClock) -> None:
    answer = topics.post("/topics/orders/records", {"partition_id": 0, "key": string("k"), "value": string("v"),
                                                    "timestamp": "2021-02-05T19:14:42.120Z"})
    check_fields(answer, SHAPES["produce_response"], what="produce")
    assert answer["timestamp"] == "2021-02-05T19:14:42.120Z"
    check_fields(answer["value"], SHAPES["produce_response_data"], what="value")
    now = topics.post("/topics/orders/records", {"partition_id": 0, "value": string("v")})
    assert datetime.fromisoformat(now["timestamp"]).timestamp() * 1000 == clock.now_ms()


def test_a_log_append_time_topic_reports_the_broker_s_time(topics: Api, clock: FakeClock) -> None:
    topics.create_topic("stamped", 1, message_timestamp_type="LogAppendTime")
    answer = topics.post("/topics/stamped/records", {"value": string("v"), "timestamp": "2001-01-01T00:00:00Z"})
    assert datetime.fromisoformat(answer["timestamp"]).timestamp() * 1000 == clock.now_ms()


def test_concatenated_records_get_one_delivery_report_each_in_order(topics: Api) -> None:
    """The proxy's streaming produce: a bad record in the middle gets its own error
    report, the others are appended; the HTTP status is 200."""
    body = "\n".join(json.dumps(r) for r in (
        {"partition_id": 0, "value": string("first")},
        {"partition_id": 0, "value": {"type": "NOPE", "data": 1}},
        {"partition_id": 1, "key": string("k"), "value": string("second")},
        {"partition_id": 9, "value": string("nowhere")},
        {"partition_id": 0, "value": string("third")}))
    response = topics.client.post(f"{topics.base}/topics/orders/records", data=body,
                                  content_type="application/json")
    assert response.status_code == 200 and response.is_streamed
    decoder, text, reports, at = json.JSONDecoder(), response.get_data(True), [], 0
    while at < len(text.rstrip()):
        report, at = decoder.raw_decode(text, at)
        reports.append(report)
        at += len(text[at:]) - len(text[at:].lstrip())
    assert [r["error_code"] for r in reports] == [200, 40002, 200, 40403, 200]
    assert reports[1]["error_name"] == "INVALID_REQUEST" and "records[1].value.type" in reports[1]["message"]
    assert [(r["partition_id"], r["offset"]) for r in reports if r["error_code"] == 200] == [(0, 0), (1, 0), (0, 1)]
    for report in (reports[0], reports[2], reports[4]):
        check_fields(report, SHAPES["produce_response"], what="report")
    assert topics.values("orders", 0) == ["first", "third"] and topics.values("orders", 1) == ["second"]


def test_a_bug_answering_one_streamed_record_is_its_500_report_and_the_others_go_on(
        topics: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    real = codec.iso_time

    def broken(ms: int) -> str:
        if ms == 1_000_000_000_000:
            raise KeyError("/srv/secret")
        return real(ms)

    monkeypatch.setattr(codec, "iso_time", broken)
    body = "".join(json.dumps({"partition_id": 0, "value": string(v), "timestamp": t})
                   for v, t in (("a", 1_600_000_000_000), ("b", 1_000_000_000_000), ("c", 1_600_000_000_000)))
    response = topics.client.post(f"{topics.base}/topics/orders/records", data=body, content_type="application/json")
    reports = [json.loads(line) for line in response.get_data(True).splitlines()]
    assert [r["error_code"] for r in reports] == [200, 500, 200]
    assert reports[1]["error_name"] == "UNKNOWN_SERVER_ERROR" and "secret" not in reports[1]["message"]
    assert topics.values("orders", 0) == ["a", "b", "c"]  # the bug was in the answer, the record is durable


def test_a_streamed_produce_retried_with_its_idempotency_key_appends_once(topics: Api) -> None:
    body = "".join(json.dumps({"partition_id": 0, "value": string(f"v{i}")}) for i in range(3))
    sent = [topics.client.post(f"{topics.base}/topics/orders/records", data=body, content_type="application/json",
                               headers={"Idempotency-Key": "stream-1"}) for _ in range(2)]
    assert sent[0].get_data() == sent[1].get_data() and sent[1].headers["Idempotent-Replayed"] == "true"
    assert topics.values("orders", 0) == ["v0", "v1", "v2"]


def test_streamed_delivery_reports_over_a_real_socket_come_chunked(tmp_path: Path) -> None:
    """Through waitress: the reports are sent as a chunked stream, not one body."""
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as broker:
        sock = socket.create_server(("127.0.0.1", 0))
        server = HttpServer(create_app(broker.engine), sock, threads=2).start()
        try:
            connection = http.client.HTTPConnection("127.0.0.1", sock.getsockname()[1], timeout=30)
            base = f"/v3/clusters/{broker.cluster_id}"
            connection.request("POST", f"{base}/topics", json.dumps({"topic_name": "t"}),
                               {"Content-Type": "application/json"})
            created = connection.getresponse()
            assert created.status == 201 and json.loads(created.read())["topic_name"] == "t"
            body = "".join(json.dumps({"value": string(f"v{i}")}) for i in range(50))  # no whitespace between
            connection.request("POST", f"{base}/topics/t/records", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
            reports = [json.loads(line) for line in response.read().decode().splitlines()]
            assert [(r["error_code"], r["offset"]) for r in reports] == [(200, i) for i in range(50)]
        finally:
            server.close()
            sock.close()


@settings(max_examples=300, deadline=None)
@given(st.integers(0, MAX_TIME_MS))
def test_an_iso_timestamp_names_the_same_millisecond(ms: int) -> None:
    text = iso_time(ms)
    assert text.endswith("Z") and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z", text)
    moment = datetime.fromisoformat(text)
    assert int(moment.timestamp()) * 1000 + moment.microsecond // 1000 == ms


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                      max_size=3), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=3), min_size=1, max_size=5),
       st.lists(st.sampled_from(["", " ", "\n", "\r\n", "\t"]), min_size=6, max_size=6))
def test_concatenated_json_values_come_back_as_sent(values: list, gaps: list[str]) -> None:
    """The streaming produce's body: objects one after another, any whitespace between
    (none included), parse back to the same objects in order."""
    body = gaps[0] + "".join(json.dumps(v) + gap for v, gap in zip(values, gaps[1:] + gaps))
    with Flask(__name__).test_request_context(data=body.encode(), content_type="application/json"):
        assert json_values() == values


def test_a_body_that_is_not_json_values_to_the_end_produces_nothing(topics: Api) -> None:
    body = json.dumps({"partition_id": 0, "value": string("a")}) + ' {"partition_id": 0, '
    response = topics.client.post(f"{topics.base}/topics/orders/records", data=body,
                                  content_type="application/json")
    check_error(response, "INVALID_REQUEST")
    assert topics.values("orders", 0) == []


def test_a_record_batch_answers_207_with_successes_and_failures_by_entry_id(topics: Api) -> None:
    answer = topics.call("POST", "/topics/orders/records:batch", 207, {"entries": [
        {"id": "a-1", "partition_id": 1, "value": string("one")},
        {"id": "b_2", "partition_id": 5, "value": string("lost")},
        {"id": "c3", "partition_id": 1, "value": string("two"), "timestamp": "2021-02-05T19:14:42Z"},
    ]}).json
    check_fields(answer, SHAPES["produce_batch_response"], what="batch")
    assert [s["id"] for s in answer["successes"]] == ["a-1", "c3"]
    for success in answer["successes"]:
        check_fields(success, SHAPES["produce_batch_success"], what="success")
    assert [(s["partition_id"], s["offset"]) for s in answer["successes"]] == [(1, 0), (1, 1)]
    assert answer["successes"][1]["timestamp"] == "2021-02-05T19:14:42Z"
    (failure,) = answer["failures"]
    check_fields(failure, SHAPES["produce_batch_failure"], what="failure")
    assert (failure["id"], failure["error_code"], failure["error_name"]) == ("b_2", 40403,
                                                                             "UNKNOWN_TOPIC_OR_PARTITION")
    assert topics.values("orders", 1) == ["one", "two"]


@pytest.mark.parametrize("entries, problem", [
    ([], "entries"),
    ([{"id": "x", "value": string("v")}] * 2, "more than once"),
    ([{"id": f"e{i}", "value": string("v")} for i in range(11)], "entries"),
    ([{"id": "has space", "value": string("v")}], "id"),
    ([{"id": 7, "value": string("v")}], "id"),
    ([{"value": string("v")}], "id"),
])
def test_a_malformed_record_batch_is_refused_whole(topics: Api, entries: list, problem: str) -> None:
    response = topics.client.post(f"{topics.base}/topics/orders/records:batch", json={"entries": entries})
    check_error(response, "INVALID_REQUEST")
    assert problem in response.json["message"]
    assert topics.values("orders", 0) + topics.values("orders", 1) == []


# -- topic configs ------------------------------------------------------------------------------


def config(api: Api, topic: str, name: str) -> dict[str, Any]:
    return api.get(f"/topics/{topic}/configs/{name}")


def test_topic_configs_show_the_effective_value_and_where_it_comes_from(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **{"log.retention.ms": 3_600_000}) as broker:
        api = Api(create_app(broker.engine, test_config={"TESTING": True}).test_client(), broker.cluster_id)
        api.create_topic("orders", 1, cleanup_policy="compact", compression_type="zstd")
        assert config(api, "orders", "cleanup.policy") | {"metadata": None} == {
            "kind": "KafkaTopicConfig", "metadata": None, "cluster_id": broker.cluster_id, "topic_name": "orders",
            "name": "cleanup.policy", "value": "compact", "is_default": False, "source": "DYNAMIC_TOPIC_CONFIG",
            "is_read_only": False, "is_sensitive": False,
            "synonyms": [{"name": "cleanup.policy", "value": "compact", "source": "DYNAMIC_TOPIC_CONFIG"},
                         {"name": "log.cleanup.policy", "value": "delete", "source": "DEFAULT_CONFIG"}]}
        retention = config(api, "orders", "retention.ms")
        assert (retention["value"], retention["source"], retention["is_default"]) == (
            "3600000", "STATIC_BROKER_CONFIG", False)
        segment = config(api, "orders", "segment.bytes")
        assert (segment["value"], segment["source"], segment["is_default"]) == (
            "1073741824", "DEFAULT_CONFIG", True)
        assert config(api, "orders", "compression.type")["value"] == "zstd"
        assert config(api, "orders", "unclean.leader.election.enable")["value"] == "false"
        assert api.error("GET", "/topics/orders/configs/no.such.config", 404) == "NOT_FOUND"
        listed = {c["name"]: c["value"] for c in api.get("/topics/orders/configs")["data"]}
        assert listed == {c["name"]: c["value"] for c in api.get("/topics/orders")["effective_configs"]}


def test_a_config_set_over_rest_is_obeyed_at_once_and_kept_across_a_restart(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as broker:
        api = Api(create_app(broker.engine, test_config={"TESTING": True}).test_client(), broker.cluster_id)
        api.create_topic("orders", 1)
        api.produce("orders", 0, "x" * 200)
        api.call("PUT", "/topics/orders/configs/max.message.bytes", 204, {"value": "100"})
        assert api.error("POST", "/topics/orders/records", 413, {"value": string("x" * 200)}) == \
            "MESSAGE_TOO_LARGE"  # the log obeys the new value now
        api.call("POST", "/topics/orders/configs:alter", 204, {"data": [
            {"name": "retention.ms", "value": "60000"}, {"name": "compression.type", "operation": "SET",
                                                         "value": "gzip"}]})
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as broker:
        api = Api(create_app(broker.engine, test_config={"TESTING": True}).test_client(), broker.cluster_id)
        kept = {c["name"]: (c["value"], c["source"]) for c in api.get("/topics/orders/configs")["data"]}
        assert kept["max.message.bytes"] == ("100", "DYNAMIC_TOPIC_CONFIG")
        assert kept["retention.ms"] == ("60000", "DYNAMIC_TOPIC_CONFIG")
        assert kept["compression.type"] == ("gzip", "DYNAMIC_TOPIC_CONFIG")
        assert api.error("POST", "/topics/orders/records", 413, {"value": string("x" * 200)}) == \
            "MESSAGE_TOO_LARGE"
        api.call("DELETE", "/topics/orders/configs/max.message.bytes", 204)
        api.call("POST", "/topics/orders/configs:alter", 204, {"data": [{"name": "retention.ms",
                                                                        "operation": "DELETE"}]})
        assert config(api, "orders", "max.message.bytes")["source"] == "DEFAULT_CONFIG"
        assert config(api, "orders", "retention.ms")["is_default"] is True
        api.produce("orders", 0, "x" * 200)  # the default limit again


@pytest.mark.parametrize("data", [
    [{"name": "retention.ms", "value": "soon"}],
    [{"name": "compression.type", "value": "brotli"}],
    [{"name": "min.insync.replicas", "value": "2"}],
    [{"name": "min.cleanable.dirty.ratio", "value": "1.5"}],
    [{"name": "preallocate", "value": "maybe"}],
    [{"name": "message.format.version", "value": "3.0"}],  # removed in Kafka 4 (deleting it succeeds, as there)
    [{"name": "retention.ms", "value": "1000"}, {"name": "segment.bytes", "value": "1"}],
])
def test_a_bad_config_is_invalid_config_and_changes_nothing(topics: Api, data: list) -> None:
    before = topics.get("/topics/orders/configs")["data"]
    check_error(topics.client.post(f"{topics.base}/topics/orders/configs:alter", json={"data": data}),
                "INVALID_CONFIG")
    assert topics.get("/topics/orders/configs")["data"] == before


def test_validate_only_checks_and_changes_nothing(topics: Api, broker: Broker) -> None:
    topics.call("POST", "/topics/orders/configs:alter", 204, {
        "data": [{"name": "retention.ms", "value": "1000"}], "validate_only": True})
    assert config(topics, "orders", "retention.ms")["is_default"] is True
    check_error(topics.client.post(f"{topics.base}/topics/orders/configs:alter", json={
        "data": [{"name": "retention.ms", "value": "-5"}], "validate_only": True}), "INVALID_CONFIG")
    # 200, not 201: the proxy's dry run (api/v3/openapi.yaml: "200 returned when dry-run mode is being used")
    would_be = topics.post("/topics", {"topic_name": "dry", "partitions_count": 3, "validate_only": True,
                                       "configs": [{"name": "compression.type", "value": "lz4"}]}, status=200)
    assert (would_be["topic_name"], would_be["partitions_count"], would_be["topic_id"]) == ("dry", 3, None)
    assert "dry" not in broker.engine.topics.topic_names()
    assert not any(p.name.startswith("dry-") for p in broker.engine.disk.data_dir.iterdir())
    check_error(topics.client.post(f"{topics.base}/topics", json={"topic_name": "orders", "validate_only": True}),
                "TOPIC_ALREADY_EXISTS")
    check_error(topics.client.post(f"{topics.base}/topics", json={
        "topic_name": "dry", "validate_only": True, "configs": [{"name": "flush.ms", "value": "x"}]}),
        "INVALID_CONFIG")


def test_a_topic_grows_its_partitions_and_keeps_them_across_a_restart(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as broker:
        api = Api(create_app(broker.engine, test_config={"TESTING": True}).test_client(), broker.cluster_id)
        api.create_topic("orders", 2)
        api.produce("orders", 1, "before")
        stray = broker.engine.disk.data_dir / "orders-2"  # what a grow that never committed left
        stray.mkdir()
        (stray / "00000000000000000000.log").write_bytes(b"\x00" * 100)
        grown = api.call("PATCH", "/topics/orders", 200, {"partitions_count": 4}).json
        check_resource(grown, "KafkaTopic")
        assert grown["partitions_count"] == 4
        assert [p["partition_id"] for p in api.get("/topics/orders/partitions")["data"]] == [0, 1, 2, 3]
        assert api.partition("orders", 2)["log_end_offset"] == 0
        assert (stray / "00000000000000000000.log").stat().st_size == 0  # the stray bytes are gone
        api.produce("orders", 3, "after")
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as broker:
        api = Api(create_app(broker.engine, test_config={"TESTING": True}).test_client(), broker.cluster_id)
        assert api.get("/topics/orders")["partitions_count"] == 4
        assert api.values("orders", 1) == ["before"] and api.values("orders", 3) == ["after"]
        check_error(api.client.patch(f"{api.base}/topics/orders", json={"partitions_count": 3}),
                    "INVALID_PARTITIONS")
        check_error(api.client.patch(f"{api.base}/topics/nope", json={"partitions_count": 3}),
                    "UNKNOWN_TOPIC_OR_PARTITION")
        check_error(api.client.patch(f"{api.base}/topics/orders", json={"partitions_count": "5"}),
                    "INVALID_REQUEST")
        assert api.get("/topics/orders")["partitions_count"] == 4


def test_the_configs_of_an_internal_topic_are_the_broker_s(topics: Api) -> None:
    topics.init("tx")  # creates __transaction_state
    assert topics.error("PUT", "/topics/__transaction_state/configs/retention.ms", 400,
                        {"value": "1"}) == "INVALID_TOPIC_EXCEPTION"
    assert topics.error("PATCH", "/topics/__transaction_state", 400,
                        {"partitions_count": 99}) == "INVALID_TOPIC_EXCEPTION"


# -- partitions, brokers ------------------------------------------------------------------------


def test_partition_offsets_are_the_log_start_and_the_high_watermark_or_the_lso(topics: Api) -> None:
    topics.produce("orders", 0, "plain")
    producer = topics.init("tx")
    topics.post("/transactions/tx/records", txn_body(producer, records=[record("orders", 0, "open")]))
    offsets = topics.get("/topics/orders/partitions/0/offset")
    assert (offsets["earliest_offset"], offsets["latest_offset"]) == (0, 2)  # as the proxy: read_uncommitted
    committed = topics.get("/topics/orders/partitions/0/offset", isolation_level="read_committed")
    assert committed["latest_offset"] == 1  # the LSO, held by the open transaction
    assert offsets["metadata"]["resource_name"].endswith("/partition=0/offset_type=earliest_and_latest")
    assert topics.error("GET", "/topics/orders/partitions/0/offset", 400, offset_type="latest") == \
        "INVALID_REQUEST"


def test_the_one_broker_leads_every_partition(topics: Api, broker: Broker) -> None:
    node = broker.engine.topics.node_id
    (only,) = topics.get("/brokers")["data"]
    assert only["broker_id"] == node and topics.get("")["controller"]["related"].endswith(f"/brokers/{node}")
    partition = topics.get("/topics/orders/partitions/1")
    assert partition["leader"]["related"].endswith(f"/topics/orders/partitions/1/replicas/{node}")
    replica = topics.client.get(partition["leader"]["related"]).json
    assert (replica["is_leader"], replica["is_in_sync"], replica["broker_id"]) == (True, True, node)
    replicas = topics.get(f"/brokers/{node}/partition-replicas")["data"]
    assert {(r["topic_name"], r["partition_id"]) for r in replicas} == {("orders", 0), ("orders", 1),
                                                                       ("payments", 0)}
    assert topics.error("GET", f"/brokers/{node + 1}", 404) == "NOT_FOUND"


def test_broker_configs_are_the_settings_given_at_start_and_hide_secrets(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **{"num.partitions": 3,
                                                                "http.auth.token": "s3cret",
                                                                "ssl.key.password": "k3y-s3cret"}) as broker:
        api = Api(create_app(broker.engine, test_config={"TESTING": True}).test_client(), broker.cluster_id)
        node = broker.engine.topics.node_id
        configs = {c["name"]: c for c in api.get(f"/brokers/{node}/configs")["data"]}
        assert (configs["num.partitions"]["value"], configs["num.partitions"]["source"]) == (
            "3", "STATIC_BROKER_CONFIG")
        assert configs["num.partitions"]["synonyms"][1] == {"name": "num.partitions", "value": "1",
                                                            "source": "DEFAULT_CONFIG"}
        assert configs["auto.create.topics.enable"]["value"] == "true" and configs["auto.create.topics.enable"][
            "is_default"]
        token = configs["http.auth.token"]
        assert token["is_sensitive"] and token["value"] is None and "s3cret" not in json.dumps(token)
        key_password = configs["ssl.key.password"]  # Kafka's PASSWORD configs: never shown
        assert key_password["is_sensitive"] and "k3y-s3cret" not in json.dumps(configs)
        assert all(c["is_read_only"] for c in configs.values())
        assert api.error("GET", f"/brokers/{node}/configs/no.such", 404) == "NOT_FOUND"
        assert api.error("GET", f"/brokers/{node + 1}/configs", 404) == "NOT_FOUND"


def test_the_broker_names_the_kafka_address_clients_are_told(topics: Api, broker: Broker) -> None:
    node = broker.engine.topics.node_id
    assert (topics.get(f"/brokers/{node}")["host"], topics.get(f"/brokers/{node}")["port"]) == (None, None)
    sock = socket.create_server(("127.0.0.1", 0))
    listener = attach_kafka(broker.engine, sock)  # what `exactly serve` attaches
    try:
        (listed,) = topics.get("/brokers")["data"]
        assert (listed["host"], listed["port"]) == ("127.0.0.1", sock.getsockname()[1])
    finally:
        listener.close()
        sock.close()


def test_broker_configs_are_every_config_kafka_lists_that_this_broker_knows(tmp_path: Path) -> None:
    """Kafka lists the topic defaults under their broker-level names (log.segment.bytes),
    beside the broker's own settings; all static here, so changing one is refused as
    Kafka refuses a read-only config."""
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **{"log.segment.bytes": 1 << 20}) as broker:
        api = Api(create_app(broker.engine, test_config={"TESTING": True}).test_client(), broker.cluster_id)
        node = broker.engine.topics.node_id
        listed = api.get(f"/brokers/{node}/configs")
        check_list(listed, "KafkaBrokerConfigList")
        configs = {c["name"]: c for c in listed["data"]}
        settings = {f.name.replace("_", ".") for f in dataclasses.fields(BrokerConfig) if f.name != "log"}
        assert set(configs) == settings | set(TOPIC_DEFAULTS)
        segment = api.get(f"/brokers/{node}/configs/log.segment.bytes")
        assert (segment["value"], segment["source"], segment["synonyms"][1]["value"]) == (
            str(1 << 20), "STATIC_BROKER_CONFIG", "1073741824")
        assert configs["log.cleaner.delete.retention.ms"]["value"] == "86400000"
        assert configs["log.cleaner.delete.retention.ms"]["is_default"]
        for method, path, body in (("PUT", f"/brokers/{node}/configs/log.segment.bytes", {"value": "1"}),
                                   ("DELETE", f"/brokers/{node}/configs/num.partitions", None),
                                   ("POST", f"/brokers/{node}/configs:alter", {"data": [{"name": "num.partitions",
                                                                                       "value": "2"}]})):
            assert api.error(method, path, 400, body) == "INVALID_REQUEST"
        assert api.get(f"/brokers/{node}/configs/num.partitions")["value"] == "1"


def test_cluster_wide_broker_configs_are_kafka_s_dynamic_defaults_none_here(topics: Api) -> None:
    cluster = topics.get("")
    listed = topics.client.get(cluster["broker_configs"]["related"]).json
    assert (listed["kind"], listed["data"]) == ("KafkaClusterConfigList", [])
    assert listed["metadata"]["self"].endswith("/broker-configs")
    assert topics.error("GET", "/broker-configs/num.partitions", 404) == "NOT_FOUND"
    assert topics.error("PUT", "/broker-configs/num.partitions", 400, {"value": "2"}) == "INVALID_REQUEST"
    assert topics.error("DELETE", "/broker-configs/num.partitions", 400) == "INVALID_REQUEST"
    assert topics.error("POST", "/broker-configs:alter", 400,
                        {"data": [{"name": "num.partitions", "value": "2"}]}) == "INVALID_REQUEST"
    assert topics.error("PUT", "/broker-configs/num.partitions", 400, {"value": 2}) == "INVALID_REQUEST"


def test_topics_carry_authorized_operations_and_reassignment_links(topics: Api) -> None:
    """``authorized_operations`` is empty unless asked for, as the proxy; asked, it is
    every topic operation while no authorizer is configured (Kafka's answer)."""
    assert topics.get("/topics/orders")["authorized_operations"] == []
    asked = topics.get("/topics/orders", include_authorized_operations="true")
    assert asked["authorized_operations"] == ["ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE",
                                              "DESCRIBE_CONFIGS", "READ", "WRITE"]
    listed = topics.get("/topics", include_authorized_operations="true")["data"]
    assert all(t["authorized_operations"] == asked["authorized_operations"] for t in listed)
    none = topics.client.get(asked["partition_reassignments"]["related"]).json
    assert (none["kind"], none["data"]) == ("KafkaReassignmentList", [])
    everywhere = topics.client.get(topics.get("")["partition_reassignments"]["related"]).json
    assert (everywhere["kind"], everywhere["data"]) == ("KafkaReassignmentList", [])
    partition = topics.get("/topics/orders/partitions/1")
    assert partition["reassignment"]["related"].endswith("/topics/orders/partitions/1/reassignment")
    assert topics.client.get(partition["reassignment"]["related"]).status_code == 404
    assert topics.error("GET", "/topics/nope/partitions/-/reassignment", 404) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert topics.error("GET", "/topics/orders/partitions/7/reassignment", 404) == "UNKNOWN_TOPIC_OR_PARTITION"


# -- consumers and lags -------------------------------------------------------------------------


def test_consumers_show_their_assignments(topics: Api, broker: Broker) -> None:
    member = stable_group(broker, "readers", [("orders", 1), ("payments", 0)])
    (consumer,) = topics.get("/consumer-groups/readers/consumers")["data"]
    assert (consumer["consumer_id"], consumer["client_id"], consumer["instance_id"]) == (member, "reader-1", None)
    assigned = topics.client.get(consumer["assignments"]["related"]).json["data"]
    assert [(a["topic_name"], a["partition_id"]) for a in assigned] == [("orders", 1), ("payments", 0)]
    assert assigned[0]["lag"]["related"].endswith("/consumer-groups/readers/lags/orders/partitions/1")
    assert topics.error("GET", f"/consumer-groups/readers/consumers/{member}/assignments/orders/partitions/0",
                        404) == "NOT_FOUND"
    assert topics.error("GET", "/consumer-groups/readers/consumers/someone-else", 404) == "NOT_FOUND"


def test_lags_are_the_groups_read_committed_lag_against_the_lso(topics: Api, broker: Broker) -> None:
    """The lag the proxy's resources show is the group's (exactly.app.engine.read_models.group):
    records a read_committed consumer would still receive, the LSO as the end."""
    for i in range(4):
        topics.produce("orders", 0, f"plain-{i}")
    producer = topics.init("tx")
    topics.post("/transactions/tx/records", txn_body(producer, records=[record("orders", 1, "a"),
                                                                       record("orders", 1, "b")]))
    topics.post("/transactions/tx/commit", txn_body(producer))
    topics.post("/transactions/tx/records", txn_body(producer, records=[record("orders", 1, "open")]))
    member = stable_group(broker, "readers", [("orders", 0)])
    commit(broker, "readers", {("orders", 0): 1, ("orders", 1): 0}, member)

    group = topics.get("/consumer-groups/readers")
    lags = {(lag["topic_name"], lag["partition_id"]): lag
            for lag in topics.get("/consumer-groups/readers/lags")["data"]}
    for offset in group["offsets"]:
        lag = lags[(offset["topic_name"], offset["partition_id"])]
        assert lag["lag"] == offset["lag"] and lag["current_offset"] == offset["committed_offset"]
        assert lag["log_end_offset"] == offset["last_stable_offset"]
    assert lags[("orders", 0)]["lag"] == 3 and lags[("orders", 0)]["consumer_id"] == member
    assert lags[("orders", 1)]["log_end_offset"] == 3  # the open transaction holds the LSO at 3
    assert lags[("orders", 1)]["consumer_id"] == "" and lags[("orders", 1)]["client_id"] == ""
    summary = topics.get("/consumer-groups/readers/lag-summary")
    top = max(lags.values(), key=lambda lag: lag["lag"])
    assert (summary["max_lag"], summary["max_lag_topic_name"], summary["max_lag_partition_id"]) == (
        top["lag"], top["topic_name"], top["partition_id"])
    assert summary["total_lag"] == sum(lag["lag"] for lag in lags.values())
    assert summary["lag_exact"] is all(lag["lag_exact"] for lag in lags.values()) is True  # an estimate says so
    assert topics.client.get(summary["max_lag_partition"]["related"]).json["partition_id"] == top["partition_id"]
    one = topics.get("/consumer-groups/readers/lags/orders/partitions/0")
    assert one == lags[("orders", 0)] | {"metadata": one["metadata"]}
    assert topics.error("GET", "/consumer-groups/readers/lags/payments/partitions/0", 404) == "NOT_FOUND"


def test_a_group_without_committed_offsets_lags_from_the_log_start(topics: Api, broker: Broker) -> None:
    """Issue 18: an assigned partition never committed counts from the log start, as
    kafka-consumer-groups.sh does (current_offset -1, as OffsetFetch answers)."""
    stable_group(broker, "idle", [("orders", 0)])
    log = broker.engine.partitions.log("orders", 0)
    summary = topics.get("/consumer-groups/idle/lag-summary")
    assert (summary["max_lag"], summary["total_lag"]) == (log.high_watermark - log.log_start_offset,) * 2
    assert summary["max_lag_partition"]["related"].endswith("/topics/orders/partitions/0")
    [lag] = topics.get("/consumer-groups/idle/lags")["data"]
    assert (lag["partition_id"], lag["current_offset"], lag["lag"]) == (0, -1, summary["max_lag"])


def test_group_states_are_spelled_as_the_proxy_does(topics: Api, broker: Broker) -> None:
    commit(broker, "standalone", {("orders", 0): 0})  # no members: a simple group
    group = topics.get("/consumer-groups/standalone")
    assert (group["state"], group["is_simple"], group["partition_assignor"]) == ("EMPTY", True, "")
    engine = broker.engine
    engine.call(engine.groups.coordinator.join_group, "joining", "", "consumer", [("range", b"")], 10_000)
    assert re.fullmatch(r"[A-Z_]+", topics.get("/consumer-groups/joining")["state"])


def test_the_docs_table_names_what_is_not_offered() -> None:
    table = section("docs/http-api.md", "Confluent REST v3 compatibility")
    not_offered = table[table.index("**Not offered**"):]
    named: dict[str, str] = {}
    for fields in NOT_OFFERED.values():
        for field in fields:
            assert named[field] in not_offered, field
