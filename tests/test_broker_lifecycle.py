"""One lifecycle, embedded or served: an open ``Broker`` runs the scheduled jobs and
keeps the SQLite mirror current, and closing it stops them; ``exactly.jobs.enable``
turns them off for a frozen world."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.coordinator.mirror_db import db_path, head_revision
from exactly.coordinator.transaction_state import TransactionState, TxnTransitMetadata
from exactly.storage.errors import KafkaStorageError, ProducerFencedError
from exactly.storage.read_committed import read_records
from tests.conftest import SMALL_INTERNAL_TOPICS
from tests.test_cli import free_port, run_to_exit, serve, wait_for_line
from tests.waiting import eventually

TOPIC = "orders"
#: the timeout job every 20 ms, the mirror every 20 ms: a test waits milliseconds, not seconds
QUICK_JOBS = {**SMALL_INTERNAL_TOPICS,
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": 20,
              "exactly.mirror.interval.ms": 20}
TXN_TIMEOUT_MS = 500
WAIT_S = 15


def finished_transactions(data: Path) -> list[tuple[str, str, int]]:
    """(transactional id, outcome, producer epoch) of each row the mirror holds."""
    connection = sqlite3.connect(f"file:{db_path(data)}?mode=ro", uri=True)
    try:
        return connection.execute(
            "SELECT transactional_id, outcome, producer_epoch FROM transactions ORDER BY id").fetchall()
    finally:
        connection.close()


def describe(broker: Broker, transactional_id: str) -> TxnTransitMetadata:
    async def on_the_loop() -> TxnTransitMetadata:
        return broker.engine.transactions.coordinator.describe(transactional_id)
    return broker.engine.call(on_the_loop)


def lso_and_hw(broker: Broker) -> tuple[int, int]:
    return (broker.list_offsets(TOPIC, 0, -1, isolation_level="read_committed"),
            broker.list_offsets(TOPIC, 0, -1))


def open_transaction(broker: Broker):
    """A transactional producer with one record sent in an open transaction."""
    broker.create_topic(TOPIC, partitions=1)
    producer = broker.producer(transactional_id="slow", transaction_timeout_ms=TXN_TIMEOUT_MS)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"never visible", partition=0)
    producer.flush()
    assert lso_and_hw(broker) == (0, 1), "the open transaction holds the LSO"
    return producer


def test_an_embedded_transaction_past_its_timeout_is_aborted_by_the_brokers_own_job(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Broker(data, **QUICK_JOBS) as broker:
        producer = open_transaction(broker)
        epoch = producer.producer_epoch
        eventually(lambda: lso_and_hw(broker)[0] == lso_and_hw(broker)[1], WAIT_S, "the LSO caught up")
        eventually(lambda: describe(broker, "slow").state is TransactionState.COMPLETE_ABORT,
                   WAIT_S, "the abort completed")
        assert describe(broker, "slow").producer_epoch == epoch + 1
        r = broker.fetch(TOPIC, 0, 0, isolation_level="read_committed")
        assert read_records(r.records, 0, True, r.aborted_transactions).records == []
        with pytest.raises(ProducerFencedError):
            producer.commit_transaction()  # the zombie's next call: fenced by the epoch bump

        assert db_path(data).exists()
        eventually(lambda: finished_transactions(data) == [("slow", "ABORT", epoch + 1)],
                   WAIT_S, "the mirror recorded the abort")


def test_with_jobs_off_the_world_stays_frozen_until_a_test_drives_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Broker(data, **QUICK_JOBS, **{"exactly.jobs.enable": False}) as broker:
        producer = open_transaction(broker)
        deadline = time.monotonic() + 4 * TXN_TIMEOUT_MS / 1000  # the jobs would have run 100 times
        while time.monotonic() < deadline:
            assert lso_and_hw(broker)[0] == 0, "a job ran with exactly.jobs.enable=false"
            time.sleep(0.05)
        assert finished_transactions(data) == [], "the mirror ran a round"

        assert broker.engine.call(broker.engine.jobs.abort_timed_out_transactions) == ["slow"]
        eventually(lambda: lso_and_hw(broker)[0] == lso_and_hw(broker)[1], WAIT_S, "the LSO caught up")
        broker.mirror.catch_up()
        assert finished_transactions(data) == [("slow", "ABORT", producer.producer_epoch + 1)]


def broker_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive()}


def test_close_stops_every_job_and_thread_and_is_idempotent(tmp_path: Path) -> None:
    before = broker_threads()
    broker = Broker(tmp_path / "data", **QUICK_JOBS)
    broker.create_topic(TOPIC, partitions=1)
    assert broker_threads() - before, "an open broker runs its loop and its jobs"
    broker.close()
    broker.close()
    assert broker_threads() <= before, f"left running: {broker_threads() - before}"
    with pytest.raises(KafkaStorageError):
        broker.create_topic("after", partitions=1)
    with Broker(tmp_path / "data", **QUICK_JOBS) as reopened:  # the directory was released
        assert TOPIC in reopened.engine.topics.topic_names()


def test_opening_creates_the_mirror_at_the_newest_schema_and_a_bad_one_is_a_clear_error(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS):
        pass
    connection = sqlite3.connect(db_path(data))
    try:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()

    db_path(data).unlink()
    db_path(data).mkdir()  # not a database
    with pytest.raises(KafkaStorageError, match="cannot open the SQLite mirror"):
        Broker(data, **SMALL_INTERNAL_TOPICS)
    db_path(data).rmdir()
    with Broker(data, **SMALL_INTERNAL_TOPICS):  # the failed open released the directory
        assert db_path(data).is_file()


def http_json(method: str, url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_served_the_same_jobs_abort_a_stale_transaction_and_the_api_reads_the_brokers_mirror(
        tmp_path: Path) -> None:
    http_port = free_port()
    configs = [arg for key, value in QUICK_JOBS.items() for arg in ("--config", f"{key}={value}")]
    proc = serve(tmp_path / "data", "--http-port", str(http_port), *configs)
    try:
        wait_for_line(proc, "console and HTTP API")
        base = f"http://127.0.0.1:{http_port}/v3/clusters"
        base += "/" + http_json("GET", base)["data"][0]["cluster_id"]
        http_json("POST", f"{base}/topics", {"topic_name": TOPIC, "partitions_count": 1})
        producer = http_json("POST", f"{base}/transactions/stale/init", {"transaction_timeout_ms": TXN_TIMEOUT_MS})
        http_json("POST", f"{base}/transactions/stale/records", {
            "producer_id": producer["producer_id"], "producer_epoch": producer["producer_epoch"],
            "records": [{"topic_name": TOPIC, "partition_id": 0, "value": {"type": "STRING", "data": "x"}}]})

        def history() -> list[tuple[str, int]]:
            described = http_json("GET", f"{base}/transactions/stale")
            return [(h["outcome"], h["producer_epoch"]) for h in described["history"] or []]

        eventually(lambda: history() == [("ABORT", producer["producer_epoch"] + 1)],
                   WAIT_S, "the served broker aborted the transaction and its mirror recorded it")
        partition = http_json("GET", f"{base}/topics/{TOPIC}/partitions/0")
        assert partition["last_stable_offset"] == partition["high_watermark"]
        proc.send_signal(signal.SIGTERM)
        code, out, err = run_to_exit(proc)
        assert code == 0 and "stopped cleanly" in out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
