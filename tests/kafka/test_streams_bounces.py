"""Kafka Streams with ``exactly_once_v2`` through crashes (``StreamsWordCount.java``: words
re-keyed through a repartition topic, counted in a state store with a compacted
changelog, every commit a transaction carrying the offsets, KIP-447): while the input is
still being written, the application is killed with SIGKILL and started again on a fresh
state directory (its store restored from the changelog), and on Exactly the broker is
SIGKILLed and restarted too. The output, read with read_committed, is each word's count
going up -- never a count twice (Streams' cache may leave some out) -- to exactly the
number of times the word was written; the changelog is compacted, and Streams purged the
repartition topic (DeleteRecords). On the real Kafka (whose fixture cannot restart) the same
with the application's crash only.
"""

from __future__ import annotations

import struct
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.kafka.differential import Peer, create_topics, unique
from tests.kafka.jars import classpath
from tests.kafka.real_kafka import JavaPrograms, RealKafka, java_command, java_env
from tests.kafka.test_transactions_system import BROKER_CONFIG
from tests.kafka_fuzz import ServedBroker
from tests.kafka_support import read_to_end
from tests.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
WORDS = ("apple", "banana", "cherry")
#: records per word, written over a few seconds (the crashes come while they are)
PER_WORD = 150


class Input:
    """An idempotent producer writing the words in turn on a thread: the first third at
    once, the rest, paced, after :meth:`go` -- while the crashes happen. It rides through
    broker restarts (its retries are deduplicated)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "broker.address.family": "v4", "linger.ms": 5})
        self.errors: list = []
        self._go = threading.Event()
        self.thread = threading.Thread(target=self._write, args=(topic,), daemon=True)
        self.thread.start()

    def _write(self, topic: str) -> None:
        total = PER_WORD * len(WORDS)
        for i in range(total):
            if i == total // 3:
                self._go.wait(300)
            self.producer.produce(topic, WORDS[i % len(WORDS)].encode(), key=b"%d" % i,
                                  on_delivery=lambda error, _: error and self.errors.append(error))
            self.producer.poll(0)
            if i >= total // 3:
                time.sleep(0.02)  # pacing the input over the crashes, not waiting for anything

    def go(self) -> None:
        self._go.set()

    def finish(self) -> None:
        self._go.set()
        self.thread.join(120)
        assert self.producer.flush(120) == 0 and not self.errors, self.errors


def counts_in_order(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Every count the output holds per word, in order, read with read_committed."""
    counts: dict[str, list[int]] = defaultdict(list)
    for key, value in read_to_end({"bootstrap.servers": bootstrap, "group.id": topic + "-check",
                                   "isolation.level": "read_committed", "broker.address.family": "v4"},
                                  topic, 1, select=lambda m: (m.key().decode(), struct.unpack(">q", m.value())[0])):
        counts[key].append(value)
    return counts


def crash_and_count(java: JavaPrograms, bootstrap: str, name: str, state: Path,
                    broker: ServedBroker | None = None) -> None:
    peer = Peer("broker", bootstrap)
    create_topics(peer, {name + "-in": (3, {}), name + "-out": (1, {})})
    peer.close()

    def command(state_dir: Path) -> list[str]:
        return java_command(["StreamsWordCount", bootstrap, name + "-in", name + "-out", name, str(state_dir),
                             str(len(WORDS)), str(PER_WORD), "240"], class_path=f"{java.directory}:{classpath()}")

    written = Input(bootstrap, name + "-in")
    first = subprocess.Popen(command(state / "first"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=java_env())
    try:
        eventually(lambda: sum(map(len, counts_in_order(bootstrap, name + "-out").values())) > 0, 120,
                   "the first instance's first committed counts", interval=0.5, child=first)
        first.kill()
        first.wait(30)
        written.go()
        if broker is not None:
            port = broker.port
            broker.stop(kill=True)
            broker.start(port=port)
        second = subprocess.run(command(state / "second"), capture_output=True, text=True, timeout=300,
                                env=java_env())
    finally:
        written.finish()
        if first.poll() is None:
            first.kill()
    assert second.returncode == 0, f"{second.stdout[-2000:]}{second.stderr[-5000:]}"
    counts = counts_in_order(bootstrap, name + "-out")
    assert sorted(counts) == sorted(WORDS)
    for word, seen in counts.items():
        assert seen == sorted(set(seen)) and seen[-1] == PER_WORD, f"{word}: {seen}"
    internal_topics_as_streams_made_them(bootstrap, name)


def internal_topics_as_streams_made_them(bootstrap: str, application: str) -> None:
    """The store's changelog is compacted, and Streams purged what it had consumed of
    the repartition topic (DeleteRecords: its log start offset moved)."""
    client = {"bootstrap.servers": bootstrap, "broker.address.family": "v4"}
    changelog = ConfigResource("topic", application + "-counts-changelog")
    admin = AdminClient(client)
    configs = admin.describe_configs([changelog])[changelog].result(30)
    assert configs["cleanup.policy"].value == "compact"
    consumer = Consumer({**client, "group.id": application + "-check"})
    try:
        repartition = application + "-counts-repartition"
        starts = [consumer.get_watermark_offsets(TopicPartition(repartition, p), timeout=30)[0] for p in range(3)]
    finally:
        consumer.close()
    assert max(starts) > 0, f"{repartition}: log start offsets {starts}"


def test_kafka_streams_counts_exactly_once_through_its_crash_and_exactlys(java_programs: JavaPrograms,
                                                                         tmp_path: Path) -> None:
    broker = ServedBroker(tmp_path / "data", **BROKER_CONFIG)
    broker.start()
    try:
        crash_and_count(java_programs, f"127.0.0.1:{broker.port}", "streams", tmp_path / "state", broker)
        assert not broker.errors()
    finally:
        broker.stop(kill=True)


@pytest.mark.xdist_group("real-kafka")
def test_kafka_streams_counts_exactly_once_on_kafka_through_its_crash(real_kafka: RealKafka,
                                                                     java_programs: JavaPrograms,
                                                                     tmp_path: Path) -> None:
    crash_and_count(java_programs, real_kafka.bootstrap, unique("streams"), tmp_path / "state")
