"""Kafka's transactions system test (``tests/kafkatest/tests/core/transactions_test.py``
in Kafka's repository), its method with Kafka's own tools from ``kafka-tools``, against
any broker at a fixed address:

1. ``VerifiableProducer`` (idempotent, ``acks=all``) seeds ``messages`` integers into an
   input topic of ``partitions`` partitions;
2. one ``TransactionalMessageCopier`` per input partition (``--use-group-metadata``: its
   offsets go into each transaction with the consumer's group metadata, KIP-447;
   ``--enable-random-aborts``: a third of its transactions are aborted) copies that
   partition to the same partition of the output topic, a transaction per poll;
3. meanwhile the caller bounces the broker and the copiers (:meth:`kill_copier`: SIGKILL
   or SIGTERM, then a new copier that resumes from the committed offsets);
4. a read_committed consumer reads the output: every input integer exactly once, and
   nothing of an aborted transaction (the aborted copies are there for read_uncommitted).

``tests/kafka/test_transactions_system.py`` runs it small in ``make test``;
``bench/soak_transactions.py`` runs it large with many bounces.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.real_kafka import java_command, java_env
from tests.kafka_support import outcomes, read_to_end
from tests.waiting import eventually

TOOLS = "org.apache.kafka.tools."
#: Kafka's system test writes 3 output partitions for 2 input ones
OUTPUT_PARTITIONS = 3
#: the copier's transaction timeout: longer than a broker's restart (a transaction open
#: across one must not time out: the coordinator would abort it and fence the copier,
#: on Kafka as on Exactly -- a clean restart took 11 s on a loaded 2-core machine), and
#: as short as that allows: a copier killed between sending its offsets and committing
#: holds its successor up until the transaction times out (the successor's consumer
#: reads its committed offset before its producer fences the predecessor, and a
#: read_committed consumer's offset waits for pending ones, KIP-447). Kafka's system
#: test: 40 s.
TRANSACTION_TIMEOUT_MS = 20_000
#: the lines of a copier's standard error (its client's warnings) kept for a failure's message
ERROR_LINES = 200


@dataclass
class Copier:
    """One ``TransactionalMessageCopier`` process and the last JSON status line it printed
    (``remaining``: records left to copy of those it found at its start; ``stage``
    ``ShutdownComplete`` at its end), the count of them, and its standard error."""

    transactional_id: str
    partition: int
    process: subprocess.Popen
    status: dict[str, Any] | None = None
    statuses: int = 0
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=ERROR_LINES))

    def __post_init__(self) -> None:
        threading.Thread(target=self._read_statuses, daemon=True).start()
        threading.Thread(target=lambda: self.errors.extend(self.process.stderr), daemon=True).start()

    def _read_statuses(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                self.status = json.loads(line)
                self.statuses += 1

    @property
    def finished(self) -> bool:
        """Exited 0 with nothing left to copy."""
        return (self.process.poll() == 0 and self.status is not None and self.status["stage"] == "ShutdownComplete"
                and self.status["remaining"] == 0)


class ConcurrentReader:
    """A read_committed consumer of ``topic`` on a thread, counting the values it reads
    until stopped; it rides through broker restarts."""

    def __init__(self, config: dict[str, Any], topic: str) -> None:
        self.read: Counter = Counter()
        self.errors: list = []
        self._stop = threading.Event()
        self._consumer = Consumer({**config, "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False})
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                self.errors.append(message.error())
            else:
                self.read[message.value().decode()] += 1
        self._consumer.close()

    def values(self, at_least: int, timeout: float = 120) -> Counter:
        """What it read, once that is ``at_least`` values (or its reading stalls)."""
        eventually(lambda: sum(self.read.values()) >= at_least, timeout, f"the concurrent reader to read {at_least}",
                   interval=0.1, progress=lambda: sum(self.read.values()))
        self.stop()
        return self.read

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


class TransactionsSystemTest:
    """The scenario on the broker at ``bootstrap`` with topics ``<name>-input`` and
    ``<name>-output`` and the copiers' group ``<name>-copiers``."""

    def __init__(self, bootstrap: str, name: str, messages: int, partitions: int = 2,
                 transaction_size: int = 20, transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS) -> None:
        self.bootstrap = bootstrap
        self.input, self.output, self.group = name + "-input", name + "-output", name + "-copiers"
        self.messages, self.partitions, self.transaction_size = messages, partitions, transaction_size
        self.transaction_timeout_ms = transaction_timeout_ms
        self.copiers: list[Copier] = []
        #: every copier process started, killed ones included (their stderr for a failure)
        self.started: list[Copier] = []
        self.ends: list[int] = []
        self.concurrent: ConcurrentReader | None = None

    def client(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "broker.address.family": "v4", **extra}

    # -- the steps ------------------------------------------------------------------------

    def create_topics(self) -> None:
        admin = AdminClient(self.client())
        created = outcomes(admin.create_topics([NewTopic(self.input, self.partitions, 1),
                                                NewTopic(self.output, max(self.partitions, OUTPUT_PARTITIONS), 1)]))
        assert created == {self.input: None, self.output: None}, created

    def seed(self, timeout: float = 120) -> None:
        """VerifiableProducer writes 0 .. messages-1 (idempotent, acks=all), keyed by 100
        keys in turn so that both partitions get about half; every one acked."""
        done = subprocess.run(java_command([TOOLS + "VerifiableProducer", "--bootstrap-server", self.bootstrap,
                                            "--topic", self.input, "--max-messages", str(self.messages),
                                            "--acks", "-1", "--repeating-keys", "100"]),
                              capture_output=True, text=True, timeout=timeout, env=java_env())
        summary = [json.loads(line) for line in done.stdout.splitlines() if '"tool_data"' in line]
        assert done.returncode == 0 and summary and summary[-1]["acked"] == self.messages, \
            f"VerifiableProducer: exit {done.returncode}, {summary}\n{done.stderr[-3000:]}"
        self.ends = self._end_offsets(self.input, self.partitions)
        assert sum(self.ends) == self.messages and min(self.ends) > self.messages // 4, self.ends

    def start_copiers(self) -> None:
        """The copiers, and beside them a read_committed consumer of the output (Kafka's
        test's concurrent consumer: it reads through the bounces)."""
        self.copiers = [self._copier(partition) for partition in range(self.partitions)]
        self.concurrent = ConcurrentReader(self.client(**{"group.id": self.group + "-concurrent"}), self.output)

    def kill_copier(self, index: int, hard: bool = True) -> None:
        """SIGKILL (or SIGTERM: the copier's clean shutdown) copier ``index``, then start
        its successor under the same transactional id, which fences it."""
        old = self.copiers[index]
        (old.process.kill if hard else old.process.terminate)()
        old.process.wait(60)
        self.copiers[index] = self._copier(old.partition)

    def copied(self, partition: int) -> int:
        """Records of ``partition`` committed to the output so far, as its copiers said
        (a new copier says nothing until the transaction its predecessor left open has
        ended: until then, what the predecessor said)."""
        return max((self.ends[partition] - copier.status["remaining"] for copier in self.started
                    if copier.partition == partition and copier.status), default=0)

    def wait_for_progress(self, fraction: float, timeout: float = 90) -> None:
        """Until every copier has copied at least ``fraction`` of its partition (or finished)."""
        for copier in self.copiers:
            eventually(lambda: copier.process.poll() is not None or
                       self.copied(copier.partition) >= fraction * self.ends[copier.partition],
                       timeout, f"{copier.transactional_id} to copy {fraction:.0%}", interval=0.1,
                       progress=lambda: copier.statuses)
            self._check_alive(copier)

    def wait_until_copied(self, timeout: float = 120) -> None:
        """Until every copier has exited 0 with nothing left."""
        for copier in self.copiers:
            eventually(lambda: copier.process.poll() is not None, timeout, f"{copier.transactional_id} to finish",
                       interval=0.1, progress=lambda: copier.statuses)
            assert copier.finished, self._report(copier)

    def output_values(self, isolation: str = "read_committed") -> Counter:
        """How often each value is in the output, read to its end in ``isolation``."""
        partitions = max(self.partitions, OUTPUT_PARTITIONS)
        return Counter(v.decode() for v in read_to_end(self.client(**{"group.id": self.group + "-verifier",
                                                                       "isolation.level": isolation}),
                                                        self.output, partitions, timeout=120))

    def check_exactly_once(self) -> Counter:
        """Every input value in the output exactly once under read_committed, for a
        consumer reading after the copy and for the one that read during it; returns
        read_uncommitted's count (aborted copies included)."""
        expected = Counter(str(i) for i in range(self.messages))
        for who, committed in (("read after the copy", self.output_values()),
                               ("read during the copy", self.concurrent.values(self.messages))):
            missing, duplicated = expected - committed, committed - expected
            assert not missing and not duplicated, (
                f"{who}: {len(missing)} input records missing (e.g. {sorted(missing)[:5]}), "
                f"{sum(duplicated.values())} extra (e.g. {sorted(duplicated)[:5]}) of {self.messages}")
        return self.output_values("read_uncommitted")

    def stop(self) -> None:
        if self.concurrent is not None:
            self.concurrent.stop()
        for copier in self.started:
            if copier.process.poll() is None:
                copier.process.kill()
                copier.process.wait(30)

    # -- helpers --------------------------------------------------------------------------

    def _copier(self, partition: int) -> Copier:
        transactional_id = f"{self.group}-{partition}"
        process = subprocess.Popen(
            java_command([TOOLS + "TransactionalMessageCopier", "--broker-list", self.bootstrap,
                          "--transactional-id", transactional_id, "--consumer-group", self.group,
                          "--input-topic", self.input, "--input-partition", str(partition),
                          "--output-topic", self.output, "--max-messages", "-1",
                          "--transaction-size", str(self.transaction_size),
                          "--transaction-timeout", str(self.transaction_timeout_ms),
                          "--use-group-metadata", "--enable-random-aborts"]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=java_env())
        copier = Copier(transactional_id, partition, process)
        self.started.append(copier)
        return copier

    def _check_alive(self, copier: Copier) -> None:
        status = copier.process.poll()
        assert status is None or copier.finished, self._report(copier)

    @staticmethod
    def _report(copier: Copier) -> str:
        return (f"{copier.transactional_id} exited {copier.process.poll()}; last status "
                f"{copier.status}\n{''.join(copier.errors)[-4000:]}")

    def _end_offsets(self, topic: str, partitions: int) -> list[int]:
        consumer = Consumer(self.client(**{"group.id": self.group + "-offsets"}))
        try:
            return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                    for p in range(partitions)]
        finally:
            consumer.close()

