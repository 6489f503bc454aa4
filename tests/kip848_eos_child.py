"""A consume-transform-produce application with confluent-kafka's KIP-848 consumer
(``group.protocol=consumer``) and a transactional producer: the member that
tests/test_consumer_group_eos.py and tests/kafka/test_consumer_group_eos.py run, replace
and SIGKILL (``tests/kip848_eos.py``). Run from the repository root::

    python -m tests.kip848_eos_child BOOTSTRAP SLOT [PROTOCOL [PREFIX]]

PROTOCOL is the consumer's ``group.protocol`` (``consumer``, the default, or ``classic``:
tests/kafka/test_consumer_group_migration.py mixes both in one group); PREFIX names
the group and topics (:func:`names`) of a scenario that must not share them.

It reads ``INPUT`` (read_committed) in the group ``GROUP`` and, per batch of records,
writes each record transformed to the same partition of ``OUTPUT`` inside a transaction
of the producer ``eos-848-<SLOT>`` that also carries the batch's next offsets, sent with
``send_offsets_to_transaction(..., consumer.consumer_group_metadata())`` -- so the
broker fences a commit from a member epoch that is no longer the member's (KIP-447
carried over to KIP-848). A transaction that must abort is aborted and the batch's
partitions are rewound to their committed offsets; a fatal error (a broker gone for
long, the producer fenced) starts a new consumer and producer. SIGTERM stops it after
the transaction under way, leaving the group.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import time

from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

GROUP = "eos-848"
INPUT = "in-848"
OUTPUT = "out-848"
PARTITIONS = 4
#: records per transaction at most
BATCH = 40
#: a child the test forgot stops by itself
LIFETIME_S = 300
#: how long one client call may take before the instance is thrown away and made again
CALL_TIMEOUT_S = 30


@dataclass(frozen=True)
class Names:
    """The group and the topics of one run of the application."""

    group: str = GROUP
    input: str = INPUT
    output: str = OUTPUT


def names(prefix: str = "") -> Names:
    """The default names, or ``<prefix>-`` before each."""
    return Names(*(f"{prefix}-{n}" if prefix else n for n in (GROUP, INPUT, OUTPUT)))


def input_value(partition: int, offset: int) -> bytes:
    return b"in-%d-%d" % (partition, offset)


def transform(value: bytes) -> bytes:
    return b"out-" + value[3:]


def parse_output(value: bytes) -> tuple[int, int]:
    """(input partition, input offset) of an output record."""
    _, partition, offset = value.split(b"-")
    return int(partition), int(offset)


def client_config(bootstrap: str) -> dict[str, object]:
    """What a member's consumer and producer both run with. ``metadata.recovery.strategy``
    ``none``: once its only broker is down (killed), librdkafka (2.16) re-bootstraps,
    decommissioning the brokers it knew but keeping one cached as the group's
    coordinator, and ``send_offsets_to_transaction`` then waits for that broker for
    ever, past its timeout (librdkafka issues 5511 and 5456) -- on Kafka as on Exactly.
    Without re-bootstrap the broker it knew reconnects."""
    return {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "reconnect.backoff.max.ms": 500,
            "metadata.recovery.strategy": "none"}


class Application:
    def __init__(self, bootstrap: str, slot: int, protocol: str = "consumer", prefix: str = "") -> None:
        self.bootstrap, self.slot, self.protocol, self.names = bootstrap, slot, protocol, names(prefix)
        self.stopping = False
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None

    def _clients(self) -> None:
        common = client_config(self.bootstrap)
        self.producer = Producer({**common, "transactional.id": f"{self.names.group}-{self.slot}",
                                  "transaction.timeout.ms": 60_000})
        self.producer.init_transactions(CALL_TIMEOUT_S)
        # a classic member heartbeats every second: that is when it learns to rejoin
        classic = {"heartbeat.interval.ms": 1_000} if self.protocol == "classic" else {}
        self.consumer = Consumer({**common, **classic, "group.id": self.names.group, "group.protocol": self.protocol,
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
        self.consumer.subscribe([self.names.input])

    def _close(self) -> None:
        if self.consumer is not None:
            try:
                self.consumer.close()
            except (KafkaException, RuntimeError):
                pass
        self.consumer = self.producer = None

    def run(self) -> None:
        deadline = time.monotonic() + LIFETIME_S
        while not self.stopping and time.monotonic() < deadline:
            try:
                self._clients()
                while not self.stopping and time.monotonic() < deadline:
                    self._one_batch()
            except KafkaException as e:
                print(f"slot {self.slot}: new clients after {e.args[0]}", file=sys.stderr, flush=True)
            finally:
                self._close()

    def _one_batch(self) -> None:
        assert self.consumer is not None and self.producer is not None
        messages = [m for m in self.consumer.consume(BATCH, 0.5) if not m.error()]
        # a partition revoked in this poll is another member's now: none of its records
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        batch = [m for m in messages if (m.topic(), m.partition()) in assigned]
        if not batch:
            return
        try:
            self._transaction(batch)
        except KafkaException as e:
            error: KafkaError = e.args[0]
            print(f"slot {self.slot}: transaction failed: {error}", file=sys.stderr, flush=True)
            if error.fatal() or not error.txn_requires_abort():
                raise
            self.producer.abort_transaction(CALL_TIMEOUT_S)
            self._rewind(batch)

    def _transaction(self, batch: list[Message]) -> None:
        assert self.consumer is not None and self.producer is not None
        self.producer.begin_transaction()
        next_offsets: dict[int, int] = {}
        for m in batch:
            self.producer.produce(self.names.output, transform(m.value()), key=m.key(), partition=m.partition())
            next_offsets[m.partition()] = m.offset() + 1
        self.producer.send_offsets_to_transaction(
            [TopicPartition(self.names.input, p, o) for p, o in sorted(next_offsets.items())],
            self.consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
        while True:
            try:
                self.producer.commit_transaction(CALL_TIMEOUT_S)
                return
            except KafkaException as e:
                print(f"slot {self.slot}: commit_transaction: {e.args[0]}", file=sys.stderr, flush=True)
                if not e.args[0].retriable():
                    raise

    def _rewind(self, batch: list[Message]) -> None:
        """Back to the committed offsets of the aborted batch's partitions (those still ours)."""
        assert self.consumer is not None
        partitions = sorted({m.partition() for m in batch})
        committed = self.consumer.committed([TopicPartition(self.names.input, p) for p in partitions],
                                            CALL_TIMEOUT_S)
        assigned = {tp.partition for tp in self.consumer.assignment()}
        for tp in committed:
            if tp.partition in assigned:
                self.consumer.seek(TopicPartition(self.names.input, tp.partition,
                                                  tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))


def main(argv: list[str]) -> None:
    faulthandler.register(signal.SIGUSR1)  # where a stuck member is, for the test's failure report
    app = Application(argv[0], int(argv[1]), *argv[2:4])

    def stop(*_: object) -> None:
        app.stopping = True

    signal.signal(signal.SIGTERM, stop)
    app.run()


if __name__ == "__main__":
    main(sys.argv[1:])
