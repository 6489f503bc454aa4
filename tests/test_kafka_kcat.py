"""kcat (Debian's, librdkafka underneath) against the listener: metadata with -L,
produce with -P, consume with -C under read_committed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.kafka_support import KafkaBroker

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not Path(KCAT).exists(), reason="kcat is not installed (make test installs it)")]


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        yield k


def kcat(kafka: KafkaBroker, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([KCAT, "-b", kafka.bootstrap, "-X", "broker.address.family=v4", *args],
                          input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kcat_lists_metadata(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("listed", 3)
    metadata = json.loads(kcat(kafka, "-L", "-J"))
    assert [(b["name"], b["id"]) for b in metadata["brokers"]] == [(kafka.bootstrap, kafka.engine.topics.node_id)]
    [topic] = [t for t in metadata["topics"] if t["topic"] == "listed"]
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == kafka.engine.topics.node_id for p in topic["partitions"])


def test_kcat_produces_and_consumes_read_committed(kafka: KafkaBroker) -> None:
    kafka.broker.create_topic("lines", 1)
    kcat(kafka, "-P", "-t", "lines", "-p", "0", "-K", ":", stdin="k1:first\nk2:second\n")
    producer = kafka.broker.producer(transactional_id="mixer")
    producer.init_transactions()
    for outcome, value in (("abort", b"aborted"), ("commit", b"committed")):
        producer.begin_transaction()
        producer.send("lines", value, partition=0)
        producer.flush()  # in the log before the outcome: an abort drops what is still unsent
        getattr(producer, f"{outcome}_transaction")()
    kcat(kafka, "-P", "-t", "lines", "-p", "0", stdin="third\n")
    consumed = kcat(kafka, "-C", "-t", "lines", "-o", "beginning", "-e", "-q", "-f", "%k=%s\n",
                    "-X", "isolation.level=read_committed")
    assert consumed.splitlines() == ["k1=first", "k2=second", "=committed", "=third"]
    everything = kcat(kafka, "-C", "-t", "lines", "-o", "beginning", "-e", "-q", "-f", "%s\n",
                      "-X", "isolation.level=read_uncommitted")
    assert "aborted" in everything.splitlines()
