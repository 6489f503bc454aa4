"""exactly/app/spark/report_job.py on a known workload: transactions of known durations (a
fake clock moves between each one's first record and its end), so every figure of the
report is asserted exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.app.engine.scheduler import mirror_round
from exactly.app.spark import report_job
from exactly.storage.clock import FakeClock
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS

pytestmark = pytest.mark.timeout(180)

#: (transactional id, partitions written, duration in ms, commit?)
WORKLOAD = [
    ("alpha", [0], 100, True),
    ("alpha", [0], 200, True),
    ("alpha", [0], 300, False),
    ("beta", [0, 1], 400, True),
    ("beta", [1], 1000, False),
    ("gamma", [1], 50, True),
]


def run_workload(data: Path) -> None:
    """WORKLOAD on a broker whose clock moves only here, then one mirror round."""
    clock = FakeClock()
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS, **FROZEN) as broker:
        broker.create_topic("orders", partitions=2)
        producers = {}
        for transactional_id, partitions, duration_ms, commit in WORKLOAD:
            if transactional_id not in producers:
                producers[transactional_id] = broker.producer(transactional_id=transactional_id)
                producers[transactional_id].init_transactions()
            producer = producers[transactional_id]
            producer.begin_transaction()
            for partition in partitions:
                producer.send("orders", b"x", partition=partition)
            producer.flush()
            clock.advance(duration_ms)
            producer.commit_transaction() if commit else producer.abort_transaction()
            clock.advance(7)  # between transactions: no one's duration
        for producer in producers.values():
            producer.close()
        mirror_round(broker.mirror)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("report") / "data"
    run_workload(data)
    return data


def test_the_report_counts_outcomes_per_transactional_id_and_the_duration_percentiles(spark, data: Path) -> None:
    report = report_job.build_report(spark, data, top=3)
    assert report["transactions"] == {"total": 6, "committed": 4, "aborted": 2}
    assert report["by_transactional_id"] == [
        {"transactional_id": "alpha", "commits": 2, "aborts": 1},
        {"transactional_id": "beta", "commits": 1, "aborts": 1},
        {"transactional_id": "gamma", "commits": 1, "aborts": 0},
    ]
    # durations 50 100 200 300 400 1000: interpolated at 0.5*5, 0.95*5 and 0.99*5
    assert report["duration_ms"] == {"p50": 250.0, "p95": 850.0, "p99": 970.0, "max": 1000}


def test_the_longest_lso_holds_name_the_partition_the_transaction_and_how_long(spark, data: Path) -> None:
    holds = report_job.build_report(spark, data, top=4)["longest_lso_holds"]
    assert [(h["partition"], h["duration_ms"], h["transactional_id"], h["outcome"]) for h in holds] == [
        ("orders-1", 1000, "beta", "ABORT"),
        ("orders-0", 400, "beta", "COMMIT"),
        ("orders-1", 400, "beta", "COMMIT"),
        ("orders-0", 300, "alpha", "ABORT"),
    ]
    start = FakeClock().now_ms() + 100 + 7 + 200 + 7 + 300 + 7  # beta's first transaction
    assert holds[1]["start"] == holds[2]["start"] == _iso_ms(start)
    assert holds[0]["producer_id"] == holds[1]["producer_id"] >= 0


def _iso_ms(ms: int) -> str:
    from datetime import datetime, timezone
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


def test_run_writes_json_and_markdown_and_prints_the_tables(spark, data: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "report.json"
    report_job.run(spark, data, out, top=2)
    written = json.loads(out.read_text())
    assert written["transactions"]["total"] == 6 and len(written["longest_lso_holds"]) == 2
    markdown = out.with_suffix(".md").read_text()
    captured = capsys.readouterr()
    assert captured.out == markdown
    assert "| alpha | 2 | 1 |" in markdown and "| beta | 1 | 1 |" in markdown
    assert "... and 1 more transactional ids" in markdown
    assert "p50 250, p95 850, p99 970, max 1000" in markdown
    assert "| orders-1 | 1000 | beta |" in markdown
    progress = captured.err.splitlines()
    assert progress[0].startswith("report: reading finished transactions from")
    assert "report: 6 finished transactions (4 committed, 2 aborted) of 3 transactional ids" in progress
    assert progress[-1] == f"report: wrote {out} and report.md"


def test_an_empty_mirror_reports_no_transactions(spark, tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN) as broker:
        mirror_round(broker.mirror)
    report = report_job.build_report(spark, tmp_path / "data")
    assert report["transactions"] == {"total": 0, "committed": 0, "aborted": 0}
    assert report["duration_ms"] == {"p50": None, "p95": None, "p99": None, "max": None}
    assert report["by_transactional_id"] == report["longest_lso_holds"] == []
    assert "(none)" in report_job.to_markdown(report)


def test_the_command_without_a_mirror_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_job.main(["--data-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no SQLite mirror at" in err
    assert not (tmp_path / "nowhere").exists()
