"""Testing an exactly-once application with Exactly (docs/testing.md explains it).

``process`` stands for your application: a consume-transform-produce loop with
confluent-kafka, handling errors as librdkafka's transactional API documents them --
retry what is retriable, abort and rewind on an abortable error, start a new producer
after a fatal one (fenced). Each test runs it on a broker of its own (the
``exactly_broker`` fixture, which installing Exactly gives pytest), breaks something
while it runs, and ends with the audit: every input record processed exactly once.
The last test breaks the application instead, and the audit says where.

Run it from a checkout of Exactly with ``python -m pytest examples/``.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from exactly.app.engine.audit import AuditView, ViolationKind
from exactly.app.server import Server

INPUT, OUTPUT, GROUP, TRANSACTIONAL_ID = "orders", "payments", "billing", "billing-1"
ORDERS = 20  # half before the trouble, half after
TIMEOUT = 10  # seconds, for each transactional call: a timeout is retriable
# One broker: a lost connection is "all brokers down", and librdkafka's re-bootstrap
# would leave send_offsets_to_transaction waiting forever (librdkafka #5511)
CLIENT = {"metadata.recovery.strategy": "none"}

pytestmark = pytest.mark.timeout(120)  # pytest-timeout


# -- the application ------------------------------------------------------------------


def process(bootstrap: str, stop: threading.Event, broken: bool = False) -> None:
    """Turn each order into a payment, exactly once, until ``stop`` is set. ``broken``:
    commit the offsets with ``consumer.commit()`` after the transaction (the bug)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed", **CLIENT})
    consumer.subscribe([INPUT])
    producer = transactional_producer(bootstrap)
    try:
        while not stop.is_set():
            orders = [m for m in consumer.consume(num_messages=5, timeout=0.1) if m.error() is None]
            if not orders:
                continue
            try:
                producer.begin_transaction()
                for order in orders:
                    producer.produce(OUTPUT, key=order.key(), value=b"paid " + order.value())
                if not broken:
                    retried(lambda: producer.send_offsets_to_transaction(
                        consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), TIMEOUT))
                retried(lambda: producer.commit_transaction(TIMEOUT))
                if broken:
                    consumer.commit(asynchronous=False)
            except KafkaException as e:
                if e.args[0].fatal():  # fenced: this producer is done; a new one fences the old epoch
                    close(producer)
                    producer = transactional_producer(bootstrap)
                elif e.args[0].txn_requires_abort():
                    retried(lambda: producer.abort_transaction(TIMEOUT))
                else:
                    raise
                rewind(consumer)  # the orders of the failed transaction are read again
    finally:
        consumer.close()
        close(producer)


def transactional_producer(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID, **CLIENT})
    producer.init_transactions()
    return producer


def close(producer: Producer) -> None:
    try:
        producer.close()
    except KafkaException:  # a fenced producer's close says so
        pass


def retried(call: Callable[[], Any], attempts: int = 10) -> Any:
    """``call`` again while it fails with a retriable error (its documented handling)."""
    for attempt in range(attempts):
        try:
            return call()
        except KafkaException as e:
            if not e.args[0].retriable() or attempt == attempts - 1:
                raise


def rewind(consumer: Consumer) -> None:
    """Back to the committed offsets (the log start where none is committed)."""
    for tp in consumer.committed(consumer.assignment(), timeout=30):
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))


# -- the tests --------------------------------------------------------------------------


def run(broker: Server, trouble: Callable[[Server], Any], broken: bool = False) -> tuple[AuditView, Any]:
    """Run the application on ``broker``: half the orders, then ``trouble`` while it
    runs, then the rest. Returns the audit, once all are committed and the application
    stopped, and what ``trouble`` returned."""
    broker.broker.create_topic(INPUT, 1)
    broker.broker.create_topic(OUTPUT, 1)
    with application(broker, broken) as running:
        send_half(broker, running, 0)
        made = trouble(broker)
        send_half(broker, running, 1)
    return broker.audit(GROUP, INPUT, OUTPUT, records_per_input=1), made


@contextmanager
def application(broker: Server, broken: bool) -> Iterator[Future]:
    """``process`` on a thread until the block ends; then what it raised is raised."""
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(process, broker.bootstrap, stop, broken)
        try:
            yield running
        finally:
            stop.set()
        running.result(timeout=60)


def send_half(broker: Server, running: Future, half: int) -> None:
    """Send one half of the orders and wait until the group has committed them."""
    send_orders(broker, range(half * ORDERS // 2, (half + 1) * ORDERS // 2))
    wait_until_committed(broker, (half + 1) * ORDERS // 2, running)


def send_orders(broker: Server, numbers: range) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, **CLIENT})
    for n in numbers:
        producer.produce(INPUT, key=b"%d" % n, value=b"order %d" % n)
    assert producer.flush(30) == 0
    producer.close()


def wait_until_committed(broker: Server, offset: int, running: Future, timeout: float = 60) -> None:
    """Poll the group's committed offset until it reaches ``offset`` (or the application failed)."""
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, **CLIENT})
    deadline = time.monotonic() + timeout
    try:
        while not running.done() and committed(reader) < offset:
            assert time.monotonic() < deadline, f"the group did not commit offset {offset} in {timeout} s"
            time.sleep(0.05)  # the polling interval
    finally:
        reader.close()
    if running.done():
        running.result()


def committed(reader: Consumer) -> int:
    try:
        return reader.committed([TopicPartition(INPUT, 0)], timeout=5)[0].offset
    except KafkaException:  # the broker is restarting: not yet
        return -1


def test_a_fenced_producer_is_replaced_and_nothing_is_lost_or_doubled(exactly_broker: Server) -> None:
    view, _ = run(exactly_broker, lambda b: b.fence(TRANSACTIONAL_ID))  # as a new instance's init would
    assert view.ok, view.violations
    assert view.transactions[-1].producer_epoch > view.transactions[0].producer_epoch  # a new instance took over


def test_concurrent_transactions_bursts_are_retried(exactly_broker: Server) -> None:
    view, burst = run(exactly_broker, lambda b: b.faults.add(
        api="AddPartitionsToTxn", error="CONCURRENT_TRANSACTIONS", count=5))
    assert burst.fired == 5
    assert view.ok, view.violations


def test_a_coordinator_move_is_waited_out(exactly_broker: Server) -> None:
    view, moved = run(exactly_broker, lambda b: b.faults.event("not-coordinator", 500, coordinator="transaction")
                      + b.faults.event("not-coordinator", 500, coordinator="group"))
    assert sum(fault.fired for fault in moved) > 0
    assert view.ok, view.violations


def test_an_unclean_broker_restart(exactly_broker: Server) -> None:
    view, _ = run(exactly_broker, lambda b: b.restart(clean=False))  # as a SIGKILL and a new start
    assert exactly_broker.restarts == 1
    assert view.ok, view.violations


def test_the_audit_catches_offsets_committed_outside_the_transaction(exactly_broker: Server) -> None:
    view, _ = run(exactly_broker, lambda b: None, broken=True)
    assert not view.ok
    assert {v.kind for v in view.violations} == {ViolationKind.OFFSETS_OUTSIDE_TRANSACTION,
                                                 ViolationKind.OUTPUT_WITHOUT_OFFSETS}
    # each plain commit, from the offset committed before it: together they cover the orders
    outside = [v for v in view.violations if v.kind is ViolationKind.OFFSETS_OUTSIDE_TRANSACTION]
    assert {(v.topic, v.partition) for v in outside} == {(INPUT, 0)}
    assert [(v.start_offset, v.end_offset) for v in outside] == list(zip(
        [0] + [v.end_offset for v in outside[:-1]], [v.end_offset for v in outside]))
    assert outside[-1].end_offset == ORDERS
    # and the payments of each transaction, which committed no offsets
    unpaired = [v for v in view.violations if v.kind is ViolationKind.OUTPUT_WITHOUT_OFFSETS]
    assert len(unpaired) == len(outside) and {v.topic for v in unpaired} == {OUTPUT}
