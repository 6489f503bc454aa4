"""Every declared REST route, driven over a real server, answers what its ``Route``
declares (``exactly/app/http/api/route.py``): a tour of the API -- topics, records,
transactions, a real confluent-kafka consumer's group, configs, ACLs, faults, events --
in which each answer is checked against its route's status and answer model
(tests/http_answers.py, which the test client of every other test applies too), and
which must reach every route, so a new route without a step here fails. A route that
this broker always refuses (changing its static configs) is driven to its refusal.

And the check itself: a handler answering what its model does not say fails the test
that made the request."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition

from exactly.app.http import create_app
from exactly.app.http.api import faults
from exactly.app.http.api.route import ROUTES
from exactly.app.server import Server
from tests.conftest import SMALL_INTERNAL_TOPICS
from tests.http_answers import check, route_of
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

TOKEN = "tour-secret"
CONFIG = {**SMALL_INTERNAL_TOPICS, "http.auth.token": TOKEN, "super.users": "User:admin",
          "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}


def string(text: str) -> dict[str, str]:
    return {"type": "STRING", "data": text}


class Tour:
    """The API of one server as its admin (the token's principal, a super user); each
    answer checked against its route, and the routes reached remembered."""

    def __init__(self, server: Server) -> None:
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {TOKEN}"
        self.root = server.http_url
        self.base = f"/v3/clusters/{server.cluster_id}"
        self.reached: set[int] = set()

    def call(self, method: str, path: str, status: int, body: Any = None, **query: Any) -> Any:
        path = path if path.startswith("/v3/") else self.base + path
        response = self.http.request(method, self.root + path, json=body, params=query, timeout=30)
        assert response.status_code == status, (method, path, response.status_code, response.text)
        route = check(method, path, response.status_code, response.headers.get("Content-Type", "").split(";")[0],
                      response.content)
        assert route is not None, f"{method} {path} is no declared route"
        self.reached.add(ROUTES.index(route))
        return response.json() if response.content else None

    def get(self, path: str, status: int = 200, **query: Any) -> Any:
        return self.call("GET", path, status, **query)

    def post(self, path: str, body: Any = None, status: int = 200) -> Any:
        return self.call("POST", path, status, body)

    def transaction(self, txn_id: str, partition: int = 0) -> dict[str, int]:
        """An open transaction of ``txn_id`` with a record on ``tour-partition``: its producer fields."""
        init = self.post(f"/transactions/{txn_id}/init", {"transaction_timeout_ms": 60_000})
        producer = {"producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"]}
        self.post(f"/transactions/{txn_id}/records", {**producer, "records": [
            {"topic_name": "tour", "partition_id": partition, "value": string(txn_id)}]})
        return producer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("tour") / "data", **CONFIG) as s:
        yield s


def consumer_in_group(server: Server, group: str) -> Consumer:
    """A confluent-kafka consumer (User:ANONYMOUS) of ``tour`` in ``group``, assigned
    its partitions, its position committed."""
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "broker.address.family": "v4", "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe(["tour"])
    eventually(lambda: consumer.poll(0.2) is not None or consumer.assignment(), what="the consumer's assignment")
    consumer.commit(offsets=[TopicPartition("tour", p.partition, 1) for p in consumer.assignment()],
                    asynchronous=False)
    return consumer


def test_every_route_answers_what_it_declares(server: Server) -> None:
    tour = Tour(server)
    node = tour.get("")["controller"]["related"].rsplit("/", 1)[1]
    tour.get("/v3/clusters")
    tour.get("/brokers")
    tour.get(f"/brokers/{node}")

    # -- topics and records
    tour.post("/topics", {"topic_name": "tour", "partitions_count": 1, "validate_only": True})
    tour.post("/topics", {"topic_name": "tour", "partitions_count": 1}, status=201)
    tour.call("PATCH", "/topics/tour", 200, {"partitions_count": 2})
    tour.post("/topics", {"topic_name": "tour-doomed", "partitions_count": 1}, status=201)
    tour.call("DELETE", "/topics/tour-doomed", 204)
    tour.get("/topics")
    tour.get("/topics/tour")
    tour.get(f"/brokers/{node}/partition-replicas")
    tour.post("/topics/tour/records", {"partition_id": 0, "key": string("k"), "value": string("v")})
    tour.call("POST", "/topics/tour/records:batch", 207, {"entries": [
        {"id": "a", "partition_id": 1, "value": string("a")}, {"id": "b", "partition_id": 9, "value": string("b")}]})
    producer_id = tour.post("/producer-ids")["producer_id"]
    tour.post("/topics/tour/records", {"partition_id": 1, "value": string("idempotent"), "producer_id": producer_id,
                                       "producer_epoch": 0, "sequence": 0})
    partition = "/topics/tour/partitions/0"
    tour.get("/topics/tour/partitions")
    tour.get(partition)
    tour.get(partition + "/replicas")
    tour.get(f"{partition}/replicas/{node}")
    tour.get("/topics/-/partitions/-/reassignment")
    tour.get("/topics/tour/partitions/-/reassignment")
    tour.get(partition + "/reassignment", 404)  # none in progress, ever
    tour.get(partition + "/offset")
    tour.get(partition + "/offsets", timestamp="earliest")
    tour.get(partition + "/records", offset=0, isolation_level="read_uncommitted")

    # -- transactions: committed, aborted, by the admin, fenced, timed out, and one left hanging
    producer = tour.transaction("tour-commit")
    tour.post("/transactions/tour-commit/offsets", {**producer, "group_id": "tour-offsets", "offsets": [
        {"topic_name": "tour", "partition_id": 0, "offset": 1}]})
    tour.get("/transactions", state="Ongoing")
    tour.get("/transactions/tour-commit")
    tour.post("/transactions/tour-commit/commit", producer)
    tour.post("/transactions/tour-abort/abort", tour.transaction("tour-abort"))
    tour.transaction("tour-admin")
    tour.post("/transactions/tour-admin/admin-abort")
    tour.transaction("tour-fence")
    tour.post("/transactions/tour-fence:fence")
    tour.transaction("tour-timeout")
    tour.post("/transactions/tour-timeout:timeout")
    hanging = tour.transaction("tour-hang", partition=1)["producer_id"]
    tour.get("/topics/tour/partitions/1/producers")
    tour.get(f"/topics/tour/partitions/1/producers/{hanging}")
    tour.post(f"/topics/tour/partitions/1/producers/{hanging}/abort")

    # -- ACLs (a Kafka consumer is User:ANONYMOUS: it may read the tour's topics and groups)
    grant = {"resource_type": "TOPIC", "resource_name": "tour", "pattern_type": "PREFIXED",
             "principal": "User:ANONYMOUS", "host": "*", "operation": "READ", "permission": "ALLOW"}
    tour.post("/acls", grant, status=201)
    tour.post("/acls:batch", {"data": [{**grant, "resource_type": "GROUP"}, {**grant, "resource_name": "gone"}]},
              status=204)
    tour.get("/acls", principal="User:ANONYMOUS")
    tour.call("DELETE", "/acls", 200, resource_name="gone")

    # -- a consumer group with a member, its lags and the audit
    consumer = consumer_in_group(server, "tour-group")
    try:
        group = "/consumer-groups/tour-group"
        tour.get("/consumer-groups")
        tour.get(group)
        member = tour.get(group + "/consumers")["data"][0]["consumer_id"]
        tour.get(f"{group}/consumers/{member}")
        assigned = tour.get(f"{group}/consumers/{member}/assignments")["data"][0]
        tour.get(f"{group}/consumers/{member}/assignments/tour/partitions/{assigned['partition_id']}")
        tour.get(group + "/lags")
        tour.get(f"{group}/lags/tour/partitions/{assigned['partition_id']}")
        tour.get(group + "/lag-summary")
        tour.get(group + "/audit", input="tour", output="tour")
    finally:
        consumer.close()

    # -- configs: the topic's change; the broker's are static (refused, as Kafka refuses a read-only config)
    configs = "/topics/tour/configs"
    tour.get(configs)
    tour.get(configs + "/retention.ms")
    tour.call("PUT", configs + "/retention.ms", 204, {"value": "86400000"})
    tour.call("DELETE", configs + "/retention.ms", 204)
    tour.post(configs + ":alter", {"data": [{"name": "retention.ms", "value": "3600000"}]}, status=204)
    tour.get("/topics/-/configs")
    tour.get("/brokers/-/configs")
    broker_configs = f"/brokers/{node}/configs"
    name = tour.get(broker_configs)["data"][0]["name"]
    tour.get(f"{broker_configs}/{name}")
    tour.get("/broker-configs")
    tour.get(f"/broker-configs/{name}", 404)  # none is dynamic
    for path in (broker_configs, "/broker-configs"):
        tour.call("PUT", f"{path}/{name}", 400, {"value": "1"})
        tour.call("DELETE", f"{path}/{name}", 400)
        tour.post(path + ":alter", {"data": [{"name": name, "value": "1"}]}, status=400)

    # -- faults
    fault = tour.post("/faults", {"api": ["DescribeLogDirs"], "error": "KAFKA_STORAGE_ERROR"}, status=201)
    tour.get("/faults")
    tour.get(f"/faults/{fault['fault_id']}")
    tour.call("DELETE", f"/faults/{fault['fault_id']}", 204)
    tour.post("/faults:event", {"event": "disk-full", "duration_ms": 60_000}, status=201)
    tour.call("DELETE", "/faults", 204)

    # -- the server, restarted last
    restarts = tour.get("/server")["restarts"]
    tour.post("/server:restart", {"clean": True}, status=202)
    eventually(lambda: server.restarts == restarts + 1, what="the restart the API asked for")

    missing = sorted(f"{r.method.upper()} {r.path}" for i, r in enumerate(ROUTES) if i not in tour.reached)
    assert not missing, f"the tour reaches no answer of these routes: add a step for each: {missing}"


def test_an_answer_its_model_does_not_describe_fails_the_test(broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check the test client applies to every answer: a field the model lacks, a
    wrong type, a status the route does not declare."""
    client = create_app(broker.engine, test_config={"TESTING": True}).test_client()
    base = f"/v3/clusters/{broker.cluster_id}/faults"
    client.post(base, json={"api": ["DescribeLogDirs"], "error": "KAFKA_STORAGE_ERROR"})
    real = faults.fault_resource
    for changed, complaint in (({"surprise": 1}, "does not have: ['.data[0].surprise']"),
                               ({"fired": "never"}, "is not its declared FaultList")):
        monkeypatch.setattr(faults, "fault_resource", lambda fault, changed=changed: {**real(fault), **changed})
        with pytest.raises(AssertionError, match=complaint.replace("[", r"\[").replace(".", r"\.")):
            client.get(base)
    monkeypatch.setattr(faults, "fault_resource", real)
    assert client.get(base).status_code == 200
    assert route_of("GET", base).answer.__name__ == "FaultList"
    with pytest.raises(AssertionError, match="its Route declares"):
        check("GET", base, 201, "application/json", client.get(base).get_data())
