"""A topic written by real confluent-kafka producers with committed, aborted and
still-open transactions interleaved with plain idempotent records, and the records a
read_committed reader must return from it: the source tests' common input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

#: the timestamp (ms) the plain records are produced with
PLAIN_TIMESTAMP_MS = 1_700_000_000_123


@dataclass(frozen=True)
class Written:
    """One record as the broker stored it."""

    partition: int
    offset: int
    value: bytes
    key: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int | None = None


@dataclass
class Workload:
    """``topic`` with a transaction ``open`` still Ongoing: ``visible()`` is what a
    read_committed read returns now, ``commit_open()`` ends it."""

    bootstrap: str
    topic: str
    partitions: int
    records: dict[str, list[Written]] = field(default_factory=dict)
    open: Any = None

    def visible(self) -> dict[int, list[Written]]:
        """Per partition, in offset order: the committed and plain records below the
        LSO (the first offset of the open transaction in that partition, if any)."""
        holds: dict[int, int] = {}
        if self.open is not None:
            for w in self.records["open"]:
                holds[w.partition] = min(holds.get(w.partition, w.offset), w.offset)
        result: dict[int, list[Written]] = {p: [] for p in range(self.partitions)}
        for name, written in self.records.items():
            if not name.startswith("aborted"):
                for w in written:
                    if w.offset < holds.get(w.partition, 2**63):
                        result[w.partition].append(w)
        return {p: sorted(ws, key=lambda w: w.offset) for p, ws in result.items()}

    def commit_open(self) -> None:
        self.open.commit_transaction(30)
        self.open = None

    def produce_plain(self, name: str, partitions: list[int], count: int = 1) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        self._produce(producer, name, partitions, count, timestamp=PLAIN_TIMESTAMP_MS)
        producer.flush(30)

    def begin(self, name: str, partitions: list[int], count: int = 2) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"{self.topic}-{name}",
                             "transaction.timeout.ms": 300_000})
        producer.init_transactions(30)
        producer.begin_transaction()
        self._produce(producer, name, partitions, count, headers=[("txn", name.encode())])
        producer.flush(30)
        return producer

    def _produce(self, producer: Producer, name: str, partitions: list[int], count: int,
                 headers: list | None = None, timestamp: int | None = None) -> None:
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            self.records.setdefault(name, []).append(Written(
                msg.partition(), msg.offset(), msg.value(), msg.key(), tuple(headers or ()), timestamp))

        for p in partitions:
            for i in range(count):
                value = f"{name}-p{p}-{i}".encode()
                extra = {"timestamp": timestamp} if timestamp else {}
                producer.produce(self.topic, value=value, key=b"k-" + value, partition=p, headers=headers,
                                 on_delivery=delivered, **extra)


def interleaved(bootstrap: str, topic: str) -> Workload:
    """Three partitions: plain records, a committed transaction, an aborted one and one
    left open (on partitions 1 and 2), with committed and plain records after it."""
    w = Workload(bootstrap, topic, partitions=3)
    w.produce_plain("plain-a", [0, 1, 2], count=2)
    committed = w.begin("committed-a", [0, 1])
    aborted = w.begin("aborted-b", [0, 2])
    w.produce_plain("plain-b", [0, 1, 2])
    committed.commit_transaction(30)
    w.open = w.begin("open", [1, 2])
    aborted.abort_transaction(30)
    w.produce_plain("plain-c", [0, 1, 2])
    w.begin("committed-d", [0, 1], count=1).commit_transaction(30)
    return w
