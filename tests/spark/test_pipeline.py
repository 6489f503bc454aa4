"""docs/spark.md's pipeline section is true: ``make pipeline``'s broker check, and the pipeline
commands run as written against a served broker."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from exactly.app.spark import broker_check
from tests.docs import REPO, blocks, page, section
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker, read_to_end

PAGE = "docs/spark.md"
#: two Spark jobs and a report, each a JVM of its own, beside other workers' tests
pytestmark = pytest.mark.timeout(600)


def test_the_broker_check_passes_on_a_kafka_broker_and_says_what_to_do_otherwise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with KafkaBroker(tmp_path / "data") as kafka:
        assert broker_check.main([kafka.bootstrap]) == 0
        port = kafka.port
    assert broker_check.main([f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err == (f"no Kafka broker answers at 127.0.0.1:{port}: start one with `make run` "
                   "in another terminal, then run this again\n")
    assert err.replace(str(port), "9092") in page(PAGE)


def test_the_broker_check_refuses_a_listener_that_is_not_kafka() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert not broker_check.kafka_answers(f"127.0.0.1:{port}", timeout=0.5)


def run_as_a_user(argv: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """``argv`` in a process group of its own (the driver, its JVM and Python workers),
    all killed if it outlives ``timeout``."""
    process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def read_committed(kafka: KafkaBroker, topic: str) -> list[bytes]:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    return read_to_end({"bootstrap.servers": kafka.bootstrap, "group.id": "check", "enable.auto.commit": False,
                        "isolation.level": "read_committed"}, topic, partitions)


@pytest.mark.slow  # three Spark drivers: about two minutes
def test_the_pipeline_commands_and_the_jdbc_example_run_as_written(tmp_path: Path) -> None:
    """The page's two commands, in a directory whose ./data a served broker holds:
    the copy job fills pipeline-out exactly once, then the report covers its transactions."""
    pipeline = section(PAGE, "Spark: the pipeline, and the mirror over JDBC")
    (commands,), (example,) = blocks(pipeline, "sh"), blocks(pipeline, "python")
    with KafkaBroker(tmp_path / "data", **TWO_PHASE_COMMIT) as kafka:  # as `make run` serves it
        runs = []
        for command in commands.strip().splitlines():
            argv = shlex.split(command.replace("127.0.0.1:9092", kafka.bootstrap))
            assert argv[0] == ".venv/bin/python"  # runs from a shell where nothing is activated
            runs.append(run_as_a_user([sys.executable, *argv[1:]], tmp_path))
            assert runs[-1].returncode == 0, runs[-1].stderr[-3000:]
        seeded, copied = (read_committed(kafka, topic) for topic in ("pipeline-in", "pipeline-out"))
        assert seeded and len(copied) == len(set(copied)) == len(seeded)
        report = runs[-1]
        (written,) = (tmp_path / "data" / "reports").glob("transactions-*.json")
        figures = json.loads(written.read_text())
        assert figures["transactions"]["committed"] >= 1
        assert report.stdout == written.with_suffix(".md").read_text()
        assert re.search(r"^report: \d+ finished transactions \(\d+ committed, \d+ aborted\)", report.stderr, re.M)
        shown = run_as_a_user([sys.executable, "-c", example], tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "|transactional_id|producer_id|partitions|start|end|" in shown.stdout.replace(" ", "")
