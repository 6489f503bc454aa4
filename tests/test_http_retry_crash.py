"""A transaction's ``records`` call retried with its ``Idempotency-Key`` after the
served process was SIGKILLed and restarted: nothing is appended again and the first
answer comes back (exactly/app/http/api/transactions.py keeps the key with the records)."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.test_cli import REPO, free_port
from tests.waiting import eventually


class Served:
    """``python run.py`` on free ports, its log in a file; killed at the end whatever happens."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.port = free_port()
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "run.py"), "--data-dir", str(data_dir), "--kafka-port", str(free_port()),
             "--http-port", str(self.port)], cwd=REPO, stdout=subprocess.PIPE, stderr=self._log, text=True)

        def started() -> bool:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                pytest.fail(f"the server exited with {self.proc.returncode}; see {log}")
            return "console and HTTP API on" in line
        eventually(started, 60, f"the server to start (see {log})", interval=0)
        self.cluster = self.call("GET", "/v3/clusters")[1]["data"][0]["cluster_id"]

    def call(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read()), dict(response.headers)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), dict(e.headers)

    def v3(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None):
        return self.call(method, f"/v3/clusters/{self.cluster}{path}", body, headers)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self._log.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[list[Served]]:
    started: list[Served] = []
    try:
        yield started
    finally:
        for server in started:
            server.kill()


def record(topic: str, value: str, partition: int | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"topic_name": topic, "value": {"type": "STRING", "data": value}}
    if partition is not None:
        item["partition_id"] = partition
    return item


def committed_values(server: Served, topic: str, partitions: int) -> list[str]:
    values = []
    for p in range(partitions):
        status, read, _ = server.v3("GET", f"/topics/{topic}/partitions/{p}/records?isolation_level=read_committed")
        assert status == 200
        values += [base64.b64decode(r["value"]["data"]).decode() for r in read["records"]]
    return sorted(values)


def high_watermarks(server: Served, topic: str, partitions: int) -> list[int]:
    return [server.v3("GET", f"/topics/{topic}/partitions/{p}")[1]["high_watermark"] for p in range(partitions)]


def test_a_records_retry_after_sigkill_and_restart_appends_nothing_and_gets_the_first_answer(
        tmp_path: Path, served: list[Served]) -> None:
    data, log = tmp_path / "data", tmp_path / "server.log"
    first = Served(data, log)
    served.append(first)
    for topic, partitions in (("orders", 3), ("payments", 1)):
        assert first.v3("POST", "/topics", {"topic_name": topic, "partitions_count": partitions})[0] == 201
    status, init, _ = first.v3("POST", "/transactions/shop/init", {"transaction_timeout_ms": 300_000})
    assert status == 200
    producer = {"producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"]}
    # records without a partition land on a random one: the answer must be remembered, not recomputed
    body = {**producer, "records": [record("orders", "o1"), record("payments", "p1", 0), record("orders", "o2"),
                                    record("orders", "o3", 2), record("orders", "o4")]}
    key = {"Idempotency-Key": "shop-call-1"}
    status, answer, headers = first.v3("POST", "/transactions/shop/records", body, key)
    assert status == 200 and "Idempotent-Replayed" not in headers
    watermarks = high_watermarks(first, "orders", 3), high_watermarks(first, "payments", 1)

    first.kill()  # the client never learns the answer (say) and retries against the restarted broker
    second = Served(data, log)
    served.append(second)
    status, replayed, headers = second.v3("POST", "/transactions/shop/records", body, key)
    assert status == 200, replayed
    assert replayed == answer and headers["Idempotent-Replayed"] == "true"
    assert (high_watermarks(second, "orders", 3), high_watermarks(second, "payments", 1)) == watermarks
    # the same key with another body is still refused, and appends nothing
    other = {**producer, "records": [record("orders", "o9", 0)]}
    status, refused, _ = second.v3("POST", "/transactions/shop/records", other, key)
    assert (status, refused["error_name"]) == (422, "UNPROCESSABLE_ENTITY")
    assert high_watermarks(second, "orders", 3) == watermarks[0]

    status, committed, _ = second.v3("POST", "/transactions/shop/commit", producer)
    assert status == 200 and committed["state"] == "CompleteCommit"
    assert committed_values(second, "orders", 3) == ["o1", "o2", "o3", "o4"]
    assert committed_values(second, "payments", 1) == ["p1"]
