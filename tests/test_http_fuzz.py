"""Property-based fuzzing of the HTTP API from its own ``/openapi.json`` (schemathesis).

Every operation of the document is called with generated requests -- valid ones and
ones that break the schema -- against the WSGI app over a real broker. Checked for
each answer: never a 5xx, a status the document lists, the documented content type,
a body matching the documented schema, and invalid input refused with a 4xx. Then
the broker must still serve a produce and a read.

The generator is steered a little (``_steer``) so that most requests reach real
resources: the cluster id is the broker's most of the time, and in valid requests
topic names are often the seeded ones and partition ids small -- otherwise nearly
every request would be an uninteresting 404. Topics are created with few
partitions, and the seeded topics are never deleted; config changes go to a topic of
their own (a fuzzed ``max.message.bytes`` must not stop the produce at the end), and
group calls mostly to a seeded group with a member, so consumers, assignments and
lags are reached.
"""

from __future__ import annotations

import random
import re
import zlib
from typing import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from exactly.app import Broker
from exactly.app.http import create_app
from exactly.app.http.api import document, models
from exactly.coordinator import consumer_protocol
from exactly.coordinator.group_metadata import CommittedOffset
from tests.conftest import SMALL_INTERNAL_TOPICS

SEEDED = ("orders", "payments")
CONFIGURED = "fuzz-configs"
GROUP = "fuzz-group"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with Broker(tmp_path_factory.mktemp("fuzz") / "data", **SMALL_INTERNAL_TOPICS) as b:
        yield b


@pytest.fixture(scope="module")
def app(broker: Broker):
    app = create_app(broker.engine, test_config={"TESTING": True})
    client = app.test_client()
    base = f"/v3/clusters/{broker.cluster_id}"
    client.post(f"{base}/topics", json={"topic_name": "orders", "partitions_count": 2})
    client.post(f"{base}/topics", json={"topic_name": "payments", "partitions_count": 1})
    for i in range(3):
        client.post(f"{base}/topics/orders/records",
                    json={"partition_id": 0, "value": {"type": "STRING", "data": f"v{i}"}})
    client.post(f"{base}/topics", json={"topic_name": CONFIGURED, "partitions_count": 1})
    engine, gc = broker.engine, broker.engine.groups.coordinator
    joined = engine.call(gc.join_group, GROUP, "", consumer_protocol.PROTOCOL_TYPE,
                         [("range", consumer_protocol.encode_subscription(["orders"]))], 60_000)
    engine.call(gc.sync_group, GROUP, joined.generation, joined.member_id,
                {joined.member_id: consumer_protocol.encode_assignment([("orders", 0), ("orders", 1)])})
    engine.call(gc.commit_offsets, GROUP, {("orders", 0): CommittedOffset(1)}, joined.generation,
                joined.member_id)
    app.extensions["fuzz.member"] = joined.member_id
    init = client.post(f"{base}/transactions/fuzz-tx/init", json={}).json
    client.post(f"{base}/transactions/fuzz-tx/records", json={
        "producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"],
        "records": [{"topic_name": "payments", "partition_id": 0, "value": {"type": "STRING", "data": "open"}}]})
    return app


#: the document /openapi.json serves (test_http_api checks they are the same); loaded
#: at import so that pytest collects one test per operation
schema = schemathesis.openapi.from_dict(document.document())


def _steer(case, broker: Broker, member: str) -> None:
    """Point most generated requests at real resources (deterministically per case)."""
    rng = random.Random(zlib.crc32(repr((case.method, case.path, case.path_parameters, case.query,
                                         case.body)).encode()))
    params = case.path_parameters or {}
    if "cluster_id" in params and rng.random() < 0.9:
        params["cluster_id"] = broker.cluster_id  # any string is valid here, so never the broken part
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and re.fullmatch("[!-~]{1,255}", key):
        # generated keys repeat across cases, and a key reused with another body is a 422 before the body
        # is even read; keep them unique so the handlers are reached (test_http_api covers the 422)
        case.headers["Idempotency-Key"] = f"{key[:200]}-{rng.getrandbits(64):x}"
    if case.meta is not None and case.meta.generation.mode.is_negative:
        return  # the broken part may be any of the others: leave them as generated
    changes_configs = "/configs" in case.path and case.method.upper() != "GET"
    if "topic_name" in params:
        if changes_configs:
            params["topic_name"] = CONFIGURED
        elif case.method.upper() == "DELETE" and params["topic_name"] in SEEDED:
            params["topic_name"] = "fuzz-doomed"
        elif case.method.upper() != "DELETE" and rng.random() < 0.7:
            params["topic_name"] = rng.choice(SEEDED)
    if "name" in params and rng.random() < 0.7:
        params["name"] = rng.choice(models.CONFIG_NAMES)
    if "broker_id" in params and rng.random() < 0.7:
        params["broker_id"] = broker.engine.topics.node_id
    if "group_id" in params and rng.random() < 0.7:
        params["group_id"] = GROUP
    if "consumer_id" in params and rng.random() < 0.7:
        params["consumer_id"] = member
    if isinstance(params.get("partition_id"), int) and rng.random() < 0.7:
        params["partition_id"] = 0
    body = case.body if isinstance(case.body, dict) else {}
    if isinstance(body.get("partitions_count"), int):
        body["partitions_count"] = min(body["partitions_count"], 3)  # fast to create
    if "transactional_id" in params and rng.random() < 0.6:
        params["transactional_id"] = "fuzz-tx"
        if "producer_id" in body:  # the current producer of fuzz-tx, so calls get past fencing
            meta = broker.engine.call(_describe, broker.engine, "fuzz-tx")
            body.update(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
    items = [body.get(field) for field in ("records", "offsets")]  # a negative case may send anything
    for item in (item for listed in items if isinstance(listed, list) for item in listed):
        if isinstance(item, dict) and "topic_name" in item and rng.random() < 0.8:
            item["topic_name"] = rng.choice(SEEDED)
            item["partition_id"] = 0


async def _describe(engine, txn_id: str):
    return engine.transactions.coordinator.describe(txn_id)


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_answer_is_documented_and_never_a_server_error(case, app, broker: Broker) -> None:
    _steer(case, broker, app.extensions["fuzz.member"])
    case.call_and_validate(app=app, checks=CHECKS)


def test_the_broker_still_serves_after_the_fuzzing(app, broker: Broker) -> None:
    client = app.test_client()
    base = f"/v3/clusters/{broker.cluster_id}/topics/orders"
    produced = client.post(f"{base}/records",
                           json={"partition_id": 1, "value": {"type": "STRING", "data": "after"}})
    assert produced.status_code == 200, produced.json
    read = client.get(f"{base}/partitions/1/records", query_string={
        "offset": produced.json["offset"], "isolation_level": "read_uncommitted"})
    assert read.status_code == 200, read.json
    assert read.json["records"][0]["value"] == {"type": "BINARY", "data": "YWZ0ZXI="}


