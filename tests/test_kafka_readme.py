"""The Kafka docs are true: the README's confluent-kafka example runs as written against a
served broker and prints what the README shows, and docs/kafka-clients.md's table of APIs
and versions is what the handlers declare."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exactly.app.kafka import APIS
from tests.docs import blocks, run_readme_example, section
from tests.kafka_support import KafkaBroker

pytestmark = pytest.mark.timeout(180)


def test_the_exactly_once_example_runs_as_written(tmp_path: Path) -> None:
    (expected,) = blocks(section("README.md", "What it is for"), "text")
    with KafkaBroker(tmp_path / "data") as kafka:
        assert run_readme_example(kafka.bootstrap) == expected


def test_the_table_of_apis_is_what_the_handlers_declare() -> None:
    rows = re.findall(r"^\| \w+ \((\d+)\) \| (\d+)(?:-(\d+))? \|",
                      section("docs/kafka-clients.md", "Settings, APIs and versions"), re.M)
    documented = {int(key): (int(low), int(high or low)) for key, low, high in rows}
    assert documented == {api.key: (api.min_version, api.max_version) for api in APIS.values() if api.advertised}
