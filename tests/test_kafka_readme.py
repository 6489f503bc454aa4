"""The Kafka docs are true: the README's confluent-kafka example runs as written against a
served broker and prints what the README shows, and docs/kafka-clients.md's table of APIs
and versions is what the handlers declare."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.kafka import APIS
from tests.docs import REPO, blocks, section
from tests.kafka_support import KafkaBroker

pytestmark = pytest.mark.timeout(180)


def test_the_exactly_once_example_runs_as_written(tmp_path: Path) -> None:
    example = section("README.md", "What it is for")
    (code,), (expected,) = blocks(example, "python"), blocks(example, "text")
    with KafkaBroker(tmp_path / "data") as kafka:
        done = subprocess.run([sys.executable, "-c", code.replace("127.0.0.1:9092", kafka.bootstrap)],
                              capture_output=True, text=True, timeout=150,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == expected


def test_the_table_of_apis_is_what_the_handlers_declare() -> None:
    rows = re.findall(r"^\| \w+ \((\d+)\) \| (\d+)(?:-(\d+))? \|",
                      section("docs/kafka-clients.md", "Settings, APIs and versions"), re.M)
    documented = {int(key): (int(low), int(high or low)) for key, low, high in rows}
    assert documented == {api.key: (api.min_version, api.max_version) for api in APIS.values() if api.advertised}
