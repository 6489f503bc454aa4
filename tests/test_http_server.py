"""The HTTP API through the real WSGI path: waitress on 127.0.0.1 (exactly/app/http/server.py),
called with urllib -- a produce, a read, a whole transaction, errors and auth."""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path
from typing import Any, Iterator

import pytest

from exactly.app import Broker
from exactly.app.http import HttpSettings, create_app
from exactly.app.http.server import HttpServer
from tests.conftest import SMALL_INTERNAL_TOPICS

TOKEN = "server-test-token"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Broker]]:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as broker:
        sock = socket.create_server(("127.0.0.1", 0))
        http = HttpServer(create_app(broker.engine, HttpSettings(token=TOKEN)), sock, threads=4).start()
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}", broker
        finally:
            http.close()
            sock.close()


def call(url: str, body: Any = None, method: str | None = None, token: str | None = TOKEN,
         raw: bytes | None = None) -> tuple[int, Message, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = response.read()
            return response.status, response.headers, json.loads(payload) if payload else None
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def values(read: dict) -> list[str]:
    return [base64.b64decode(r["value"]["data"]).decode() for r in read["records"]]


def test_produce_read_and_a_transaction_over_a_real_socket(server) -> None:
    root, broker = server
    base = f"{root}/v3/clusters/{broker.cluster_id}"
    for name in ("orders", "payments"):
        status, _, _ = call(f"{base}/topics", {"topic_name": name, "partitions_count": 1})
        assert status == 201

    status, _, produced = call(f"{base}/topics/orders/records",
                               {"partition_id": 0, "key": {"type": "STRING", "data": "k"},
                                "value": {"type": "STRING", "data": "plain"}})
    assert status == 200 and produced["offset"] == 0

    status, _, init = call(f"{base}/transactions/server-tx/init", {"transaction_timeout_ms": 30_000})
    assert status == 200 and init["transactional_id"] == "server-tx"
    ident = {"producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"]}
    status, _, appended = call(f"{base}/transactions/server-tx/records", {**ident, "records": [
        {"topic_name": "orders", "partition_id": 0, "value": {"type": "JSON", "data": {"n": 1}}},
        {"topic_name": "payments", "partition_id": 0, "value": {"type": "STRING", "data": "paid"}}]})
    assert status == 200 and [r["offset"] for r in appended["records"]] == [1, 0]
    status, _, _ = call(f"{base}/transactions/server-tx/offsets", {**ident, "group_id": "billing", "offsets": [
        {"topic_name": "orders", "partition_id": 0, "offset": 1}]})
    assert status == 200

    _, _, held = call(f"{base}/topics/orders/partitions/0/records?offset=0&isolation_level=read_committed")
    assert values(held) == ["plain"] and held["last_stable_offset"] == 1 < held["high_watermark"]

    status, _, committed = call(f"{base}/transactions/server-tx/commit", ident)
    assert status == 200 and committed["state"] == "CompleteCommit"
    _, _, orders = call(f"{base}/topics/orders/partitions/0/records?offset=0&isolation_level=read_committed")
    assert values(orders) == ["plain", '{"n":1}']
    assert orders["last_stable_offset"] == orders["high_watermark"]
    _, _, payments = call(f"{base}/topics/payments/partitions/0/records?isolation_level=read_committed")
    assert values(payments) == ["paid"]
    _, _, group = call(f"{base}/consumer-groups/billing")
    assert group["offsets"][0]["committed_offset"] == 1


def test_errors_auth_and_limits_over_a_real_socket(server) -> None:
    root, broker = server
    base = f"{root}/v3/clusters/{broker.cluster_id}"
    status, headers, error = call(f"{root}/v3/clusters", token=None)
    assert status == 401 and error["error_name"] == "UNAUTHORIZED" and "Bearer" in headers["WWW-Authenticate"]
    assert call(f"{root}/metrics", token="wrong")[0] == 401
    status, _, error = call(f"{base}/topics/nope/partitions/0/records")
    assert (status, error["error_name"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    status, _, error = call(f"{base}/topics", raw=b"{broken")
    assert (status, error["error_name"]) == (400, "INVALID_REQUEST")
    too_big = json.dumps({"value": {"type": "STRING", "data": "x" * (5 << 20)}}).encode()
    status, _, error = call(f"{base}/topics/orders/records", raw=too_big)
    assert status == 413 and error["error_name"] == "REQUEST_ENTITY_TOO_LARGE"
    status, headers, document = call(f"{root}/openapi.json")
    assert status == 200 and document["openapi"].startswith("3.1")


def test_close_finishes_and_stops_listening(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS) as broker:
        sock = socket.create_server(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        http = HttpServer(create_app(broker.engine), sock, threads=2).start()
        assert call(f"http://127.0.0.1:{port}/v3/clusters", token=None)[0] == 200
        http.close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
