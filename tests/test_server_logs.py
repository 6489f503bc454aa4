"""The server log as an operator reads it: one access line per HTTP request (which
``exactly.http.access.log.enable=false`` turns off), and scheduled jobs that speak
at INFO only when they did something, always naming themselves."""

from __future__ import annotations

import logging
import re
import signal
import urllib.request
from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.app.engine.scheduler import ScheduledJob, run_round
from exactly.app.http import HttpSettings, create_app
from exactly.storage.clock import FakeClock
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS
from tests.waiting import eventually
from tests.test_cli import free_port, run_to_exit, serve, wait_for_line

pytestmark = pytest.mark.timeout(60)
ACCESS = "exactly.app.http.access_log"
SCHEDULER = "exactly.app.engine.scheduler"


def access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == ACCESS and r.levelno == logging.INFO]


def test_every_http_request_gets_one_access_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS)
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN) as broker:
        client = create_app(broker.engine, test_config={"TESTING": True}).test_client()
        client.get("/v3/clusters?verbose=1")
        client.get("/v3/clusters/nope/topics")
        client.post(f"/v3/clusters/{broker.cluster_id}/topics", json={"topic_name": "t"})
    lines = access_lines(caplog)
    assert len(lines) == 3, lines
    assert re.fullmatch(r'127\.0\.0\.1 "GET /v3/clusters\?verbose=1" 200 \d+\.\d ms', lines[0]), lines[0]
    assert lines[1].startswith('127.0.0.1 "GET /v3/clusters/nope/topics" 404 ')
    assert lines[2].startswith(f'127.0.0.1 "POST /v3/clusters/{broker.cluster_id}/topics" 201 ')


def test_a_request_refused_by_auth_is_logged_too_and_a_forged_newline_stays_on_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS)
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN) as broker:
        client = create_app(broker.engine, HttpSettings(token="s3cret"), test_config={"TESTING": True}).test_client()
        client.get("/v3/clusters")
        client.get("/v3/x%0A127.0.0.1 \"GET /forged\" 200 0.1 ms")
    lines = access_lines(caplog)
    assert len(lines) == 2 and lines[0].startswith('127.0.0.1 "GET /v3/clusters" 401 ')
    assert "\n" not in lines[1] and "\\n" in lines[1]


def test_the_access_log_can_be_turned_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS)
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN,
                **{"exactly.http.access.log.enable": "false"}) as broker:
        create_app(broker.engine, test_config={"TESTING": True}).test_client().get("/v3/clusters")
    assert access_lines(caplog) == []


def test_a_job_that_did_something_says_what_at_info_and_idle_rounds_stay_quiet(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = FakeClock()
    config = {**SMALL_INTERNAL_TOPICS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 50,
              "exactly.mirror.interval.ms": 50}
    with Broker(tmp_path / "data", clock=clock, **config) as broker:
        broker.create_topic("t", 1)
        slow = broker.producer(transactional_id="slow", transaction_timeout_ms=1_000)
        slow.init_transactions()
        slow.begin_transaction()
        slow.send("t", b"v", partition=0).get(timeout=10)
        clock.advance(1_001)
        eventually(lambda: any(r.name == SCHEDULER for r in caplog.records), what="the timeout job's line")
    scheduler_lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == SCHEDULER]
    assert scheduler_lines == [
        ("INFO", "scheduled job abort-timed-out-transactions: aborted 1 timed-out transaction(s): slow")]
    assert not [r for r in caplog.records if r.name.startswith("apscheduler") and r.levelno < logging.WARNING]


def test_routine_and_failed_rounds_name_their_job(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=SCHEDULER)
    run_round(ScheduledJob("log-retention", lambda: 0, 1000, "deleted {n} segment(s) past retention"))
    run_round(ScheduledJob("offset-checkpoints", lambda: None, 1000, None))
    run_round(ScheduledJob("log-cleaner", lambda: 1 / 0, 1000, "rewrote {n} segment(s)"))
    assert [(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records] == [
        ("DEBUG", "scheduled job log-retention"), ("DEBUG", "scheduled job offset-checkpoints"),
        ("ERROR", "scheduled job log-cleaner failed")]


def test_a_served_broker_logs_access_lines_and_no_scheduler_chatter(tmp_path: Path) -> None:
    http_port = free_port()
    proc = serve(tmp_path / "data", "--config", "exactly.mirror.interval.ms=50", http_port=http_port)
    try:
        wait_for_line(proc, "console and HTTP API on")
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v3/clusters", timeout=10) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGTERM)
        code, _, err = run_to_exit(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err
    assert re.search(r'INFO exactly\.app\.http\.access_log: 127\.0\.0\.1 "GET /v3/clusters" 200 \d+\.\d ms', err), err
    # its per-round INFO lines ("Running job \"_run ...") are gone, and a round skipped
    # because this busy machine ran the last one late is no warning either
    assert "apscheduler" not in err
    # a new data directory's mirror is created in one line, not Alembic's plugin lines and
    # migration docstrings (issue 35)
    assert "alembic" not in err, err
    assert re.search(r"INFO exactly\.coordinator\.mirror: SQLite mirror \S+exactly\.db: schema revision \w+ "
                     r"\(migrated from nothing\)", err), err
