"""The Kafka docs are true: the README's confluent-kafka example runs as written against a
served broker and prints what the README shows, and docs/kafka-clients.md's table of APIs
and versions is what the handlers declare."""

from __future__ import annotations

from pathlib import Path

import pytest

from exactly.app.kafka import APIS
from tests.api_table import newest, regenerated, rows
from tests.docs import blocks, run_readme_example, section
from tests.kafka_support import KafkaBroker

pytestmark = pytest.mark.timeout(180)


def test_the_exactly_once_example_runs_as_written(tmp_path: Path) -> None:
    (expected,) = blocks(section("README.md", "What it is for"), "text")
    with KafkaBroker(tmp_path / "data") as kafka:
        assert run_readme_example(kafka.bootstrap) == expected


def test_the_table_of_apis_is_what_the_handlers_declare() -> None:
    text = section("docs/kafka-clients.md", "Settings, APIs and versions")
    assert regenerated(text) == text, "a handler's @serves changed: run .venv/bin/python -m tests.api_table"
    assert set(APIS) <= {row.key for row in rows(text)}, "every API served has a row"


def test_every_api_served_below_kafkas_versions_says_why() -> None:
    """"why lower" is there exactly where Exactly serves less than Kafka 4.4's newest
    version (or not at all), so a raised version cannot leave a stale reason behind."""
    for row in rows(section("docs/kafka-clients.md", "Settings, APIs and versions")):
        assert bool(row.why_lower) == (newest(row.versions) < newest(row.kafka)), row
