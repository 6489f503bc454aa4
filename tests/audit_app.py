"""A consume-transform-produce application with confluent-kafka, correct unless told
which classic exactly-once bug to have: one harness, a flag per bug, for the bug
catalogue (tests/test_audit_catalogue.py, docs/testing.md's table).

The correct application is the documented one (docs/testing.md's worked example,
whose error handling and client settings it uses): a read_committed consumer with
auto-commit off, one transaction per polled batch, the next offsets to consume sent
with ``send_offsets_to_transaction``; a retriable error retries the call, an abortable
one aborts and rewinds the consumer to the committed offsets, a fatal one (fenced)
gets a new producer (its ``init_transactions`` takes the transactional id over) and
rewinds. It runs until its consumer has read its input to the end (every record is
produced before it starts). ``trouble(application)`` is called once, in its second
transaction, once that transaction's output is at the broker (so a transaction is
open: a fence or a timeout hits it; a fault installed then hits what follows).

The clients set ``metadata.recovery.strategy=none`` (the example's ``CLIENT``):
against a single broker a lost connection is "all brokers down", and librdkafka's
re-bootstrap then leaves ``send_offsets_to_transaction`` waiting for a decommissioned
group coordinator forever (librdkafka #5511; docs/testing.md).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from examples.test_exactly_once_app import CLIENT, close, retried, rewind
from exactly.app.server import Server
from exactly.app.testing import lineage
from tests.waiting import eventually

#: records per transaction, at most
BATCH = 4
#: seconds for each transactional call (a timeout is retriable)
TIMEOUT = 10

_names = itertools.count()


@dataclass(frozen=True)
class Bugs:
    """Which bug the application has (none: the correct application)."""

    #: sends the offset of the last record processed, not the next one to consume
    offset_one_short: bool = False
    #: after an abort, goes on from where its consumer is (the aborted batch is never read again)
    no_rewind: bool = False
    #: consumes with isolation.level=read_uncommitted
    read_uncommitted: bool = False
    #: commits the offsets with consumer.commit() after the transaction, not in it
    commit_outside: bool = False
    #: sends the offsets in the transaction and commits them with consumer.commit() too
    commit_twice: bool = False
    #: writes the output with a plain (idempotent, not transactional) producer
    output_outside: bool = False
    #: stops (crashes) after this many committed transactions
    stop_after: int | None = None


@dataclass(frozen=True)
class Topics:
    """One run's input and output topics and group, with names of their own."""

    input: str
    output: str
    group: str
    partitions: int

    @classmethod
    def create(cls, broker: Server, partitions: int = 1) -> "Topics":
        n = next(_names)
        made = cls(f"orders-{n}", f"payments-{n}", f"billing-{n}", partitions)
        broker.broker.create_topic(made.input, partitions)
        broker.broker.create_topic(made.output, 1)
        return made

    def fill(self, broker: Server, records: int, aborted: int = 0) -> None:
        """``records`` input records, round robin over the partitions, one per batch (so a
        consumer's fetches interleave the partitions); ``aborted`` more in the middle,
        in an upstream transaction that aborts."""
        plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1, **CLIENT})
        upstream = None
        try:
            for n in range(records):
                if aborted and n == records // 2:
                    assert plain.flush(TIMEOUT) == 0
                    upstream = Producer({"bootstrap.servers": broker.bootstrap,
                                         "transactional.id": f"{self.input}-upstream", **CLIENT})
                    upstream.init_transactions(TIMEOUT)
                    upstream.begin_transaction()
                    for a in range(aborted):
                        upstream.produce(self.input, value=b"cancelled %d" % a, partition=a % self.partitions)
                    assert upstream.flush(TIMEOUT) == 0
                    upstream.abort_transaction(TIMEOUT)
                plain.produce(self.input, value=b"order %d" % n, partition=n % self.partitions)
            assert plain.flush(TIMEOUT) == 0
        finally:
            plain.close()
            if upstream is not None:
                upstream.close()


class Application:
    """One instance of the application on ``topics``, with ``bugs``; ``lineage``: its
    output records name their input records (``exactly.app.testing.lineage``)."""

    def __init__(self, broker: Server, topics: Topics, bugs: Bugs = Bugs(), lineage: bool = False,
                 transactional_id: str = "1", trouble: Callable[["Application"], Any] | None = None,
                 from_beginning: bool = False) -> None:
        self.broker, self.topics, self.bugs, self.lineage = broker, topics, bugs, lineage
        self.transactional_id = f"{topics.group}-{transactional_id}"
        self.trouble, self.from_beginning = trouble, from_beginning
        self.committed_transactions = 0
        #: what ``trouble`` returned (the faults it installed)
        self.troubled: Any = None

    def run(self, deadline_s: float = 60) -> None:
        """Process the input to its end (or to ``stop_after``), then close every client."""
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": self.topics.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "isolation.level": "read_uncommitted" if self.bugs.read_uncommitted else "read_committed",
                             "max.partition.fetch.bytes": 1, **CLIENT})
        partitions = [TopicPartition(self.topics.input, p) for p in range(self.topics.partitions)]
        producer = plain = None
        try:
            ends = {tp.partition: consumer.get_watermark_offsets(tp, TIMEOUT)[1] for tp in partitions}
            consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in partitions]
                            if self.from_beginning else partitions)
            producer = self._producer()
            if self.bugs.output_outside:
                plain = Producer({"bootstrap.servers": self.broker.bootstrap, "enable.idempotence": True, **CLIENT})

            def step() -> bool:
                """One batch in one transaction; True once the input's end (or ``stop_after``) is reached."""
                nonlocal producer
                if self.bugs.stop_after is not None and self.committed_transactions >= self.bugs.stop_after:
                    return True
                batch = [m for m in consumer.consume(BATCH, 0.1) if m.error() is None]
                if not batch:
                    return all(tp.offset >= ends[tp.partition] for tp in consumer.position(partitions))
                try:
                    self._transact(producer, plain, consumer, batch)
                except KafkaException as e:
                    if e.args[0].fatal():  # fenced: this producer is done; a new one takes the id over
                        close(producer)
                        producer = self._producer()
                    elif e.args[0].txn_requires_abort():
                        retried(lambda: producer.abort_transaction(TIMEOUT))
                    else:
                        raise
                    if not self.bugs.no_rewind:
                        rewind(consumer)
                return False
            eventually(step, deadline_s, "the application to reach the end of its input", interval=0)
        finally:
            consumer.close()
            for client in (producer, plain):
                if client is not None:
                    close(client)

    def _producer(self) -> Producer:
        # The output goes at the commit's flush (or the trouble's), after the offsets: whether an
        # abortable Produce error or the offsets reach the transaction first is then no race, and
        # the aborted transaction always names the input it read (the audit's "seek back" cause)
        producer = Producer({"bootstrap.servers": self.broker.bootstrap, "transactional.id": self.transactional_id,
                             "linger.ms": 10_000, **CLIENT})
        producer.init_transactions(TIMEOUT)
        return producer

    def _transact(self, producer: Producer, plain: Producer | None, consumer: Consumer, batch: list) -> None:
        """One transaction: each input record's output, then the offsets, then the commit."""
        producer.begin_transaction()
        for message in batch:
            (plain or producer).produce(self.topics.output, key=message.key(), value=b"paid " + message.value(),
                                        headers=[lineage(message)] if self.lineage else None)
        if self.trouble is not None and self.committed_transactions == 1:
            assert (plain or producer).flush(TIMEOUT) == 0  # the output is at the broker: a transaction is open
            trouble, self.trouble = self.trouble, None
            self.troubled = trouble(self)
        if plain is not None:
            assert plain.flush(TIMEOUT) == 0
        last = {(m.topic(), m.partition()): m.offset() for m in batch}
        offsets = [TopicPartition(t, p, o if self.bugs.offset_one_short else o + 1) for (t, p), o in last.items()]
        if not self.bugs.commit_outside:
            retried(lambda: producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(),
                                                                  TIMEOUT))
        retried(lambda: producer.commit_transaction(TIMEOUT))
        if self.bugs.commit_outside or self.bugs.commit_twice:
            consumer.commit(offsets=offsets, asynchronous=False)
        self.committed_transactions += 1
