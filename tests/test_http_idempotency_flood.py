"""The Idempotency-Key store under a flood (exactly/app/http/api/idempotency.py): keys are
per principal, kept while their call can be retried, and a principal past its quota is
refused new keys (429, THROTTLING_QUOTA_EXCEEDED) instead of evicting anyone's live
ones. Before, 10,001 keyed calls of another client pushed a victim's key out of the
one 10,000-entry store, and the victim's retry appended its records a second time
inside its committed transaction."""

from __future__ import annotations

import base64
from pathlib import Path
from contextlib import ExitStack
from typing import Any, Callable, Iterator

import pytest

from exactly.app import Broker
from exactly.app.http import HttpSettings, create_app
from exactly.app.security.scram import ScramMechanism, new_credential
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS

pytestmark = pytest.mark.timeout(120)

TOKEN = "flood-test-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}  # User:admin, the token's principal
ALICE = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-secret").decode()}


class Client:
    def __init__(self, test_client: Any, cluster_id: str, headers: dict[str, str]) -> None:
        self.client = test_client
        self.base = f"/v3/clusters/{cluster_id}"
        self.headers = headers

    def post(self, path: str, body: Any, key: str | None = None) -> Any:
        headers = {**self.headers, **({"Idempotency-Key": key} if key else {})}
        return self.client.post(self.base + path, json=body, headers=headers)

    def values(self, topic: str) -> list[str]:
        answer = self.client.get(f"{self.base}/topics/{topic}/partitions/0/records", headers=self.headers,
                                 query_string={"offset": 0, "isolation_level": "read_committed"})
        return [base64.b64decode(r["value"]["data"]).decode() for r in answer.json["records"]]


def string(text: str) -> dict[str, str]:
    return {"type": "STRING", "data": text}


def make_broker(tmp_path: Path, **config: Any) -> Broker:
    broker = Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN, **config)
    broker.engine.call(broker.engine.access.alter_scram_credentials, [],
                       [new_credential("alice", ScramMechanism.SCRAM_SHA_256, "alice-secret")])
    broker.create_topic("orders", 1)
    return broker


@pytest.fixture
def open_clients(tmp_path: Path) -> Iterator[Callable[..., tuple[Client, Client]]]:
    """``open_clients(**config)``: (alice, admin) on one app over a broker of ``config``."""
    with ExitStack() as stack:
        def open_(**config: Any) -> tuple[Client, Client]:
            broker = stack.enter_context(make_broker(tmp_path, **{"exactly.http.access.log.enable": False}, **config))
            app = create_app(broker.engine, HttpSettings(token=TOKEN), test_config={"TESTING": True})
            test_client = app.test_client()
            return Client(test_client, broker.cluster_id, ALICE), Client(test_client, broker.cluster_id, ADMIN)
        yield open_


def victim_records(alice: Client) -> tuple[dict[str, Any], Any]:
    """Alice's transaction with one keyed records call (the call whose answer she lost)."""
    init = alice.post("/transactions/victim-tx/init", {}).json
    body = {"producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"],
            "records": [{"topic_name": "orders", "partition_id": 0, "value": string("order-42")},
                        {"topic_name": "orders", "partition_id": 0, "value": string("txn-rec")}]}
    first = alice.post("/transactions/victim-tx/records", body, key="order-42")
    assert first.status_code == 200, first.json
    return body, first


def finish(alice: Client, body: dict[str, Any], first: Any) -> None:
    retry = alice.post("/transactions/victim-tx/records", body, key="order-42")
    assert retry.status_code == 200 and retry.headers.get("Idempotent-Replayed") == "true"
    assert retry.json == first.json
    ident = {k: body[k] for k in ("producer_id", "producer_epoch")}
    assert alice.post("/transactions/victim-tx/commit", ident).status_code == 200
    assert alice.values("orders") == ["order-42", "txn-rec"]


@pytest.mark.slow  # 10,001 HTTP calls: ~13 s, a fifth of the fast tier's minute
def test_another_principals_10001_keyed_calls_do_not_evict_the_victims_key(open_clients) -> None:
    alice, admin = open_clients()
    body, first = victim_records(alice)
    for i in range(10_001):  # cheap calls (refused before they reach the engine) whose 400s are kept
        assert admin.post("/transactions/flood-tx/records", {}, key=f"flood-{i}").status_code == 400
    finish(alice, body, first)


def test_a_principal_past_its_quota_is_refused_new_keys_and_evicts_none(open_clients) -> None:
    alice, admin = open_clients(**{"exactly.http.idempotency.keys.per.principal": 50})
    body, first = victim_records(alice)
    for i in range(49):  # alice's one key and 49 more fill her quota
        assert alice.post("/topics/orders/records", {"value": 5}, key=f"own-{i}").status_code == 400
    refused = alice.post("/topics/orders/records", {"value": 5}, key="one-too-many")
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
    assert refused.json["error_name"] == "THROTTLING_QUOTA_EXCEEDED" and refused.json["kafka_error_code"] == 89
    assert admin.post("/topics/orders/records", {"value": 5}, key="one-too-many").status_code == 400, \
        "another principal's quota is its own"
    finish(alice, body, first)


def test_the_keys_of_an_ended_transaction_make_room(open_clients) -> None:
    alice, _ = open_clients(**{"exactly.http.idempotency.keys.per.principal": 3})
    body, first = victim_records(alice)  # init (unkeyed) and records: one key
    finish(alice, body, first)
    ident = {k: body[k] for k in ("producer_id", "producer_epoch")}
    for round_ in range(3):  # each transaction's keys go once it has ended
        for i in range(3):
            records = {**ident, "records": [{"topic_name": "orders", "partition_id": 0,
                                             "value": string(f"r{round_}-{i}")}]}
            assert alice.post("/transactions/victim-tx/records", records, key=f"t{round_}-{i}").status_code == 200
        assert alice.post("/transactions/victim-tx/commit", ident).status_code == 200
    assert len(alice.values("orders")) == 2 + 9


def test_the_same_key_of_two_principals_is_two_keys(open_clients) -> None:
    alice, admin = open_clients()
    mine = alice.post("/topics/orders/records", {"partition_id": 0, "value": string("alice's")}, key="k")
    theirs = admin.post("/topics/orders/records", {"partition_id": 0, "value": string("admin's")}, key="k")
    assert mine.status_code == theirs.status_code == 200, "not 422, nor alice's answer replayed to admin"
    assert "Idempotent-Replayed" not in theirs.headers
    assert alice.values("orders") == ["alice's", "admin's"]
