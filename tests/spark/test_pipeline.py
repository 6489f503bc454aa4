"""The README's Spark section is true: ``make pipeline``'s broker check, and the pipeline
commands run as written against a served broker."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from app.spark import broker_check
from tests.kafka_support import KafkaBroker

README = Path(__file__).resolve().parents[2] / "README.md"
pytestmark = pytest.mark.timeout(300)


def test_the_broker_check_passes_on_a_kafka_broker_and_says_what_to_do_otherwise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with KafkaBroker(tmp_path / "data") as kafka:
        assert broker_check.main([kafka.bootstrap]) == 0
        port = kafka.port
    assert broker_check.main([f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err == (f"no Kafka broker answers at 127.0.0.1:{port}: start one with `make run` "
                   "in another terminal, then run this again\n")
    assert err.replace(str(port), "9092") in README.read_text()


def test_the_broker_check_refuses_a_listener_that_is_not_kafka() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert not broker_check.kafka_answers(f"127.0.0.1:{port}", timeout=0.5)
