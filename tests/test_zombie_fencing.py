"""Zombie fencing with the embedded producer: two instances, one transactional id.

The seed's Transactional Guarantees: once a newer instance has called
init_transactions, every transactional request of the older one -- a send to a
partition already in its transaction (Produce), a send to a new partition
(AddPartitionsToTxn), commit (EndTxn) -- is refused with the fatal
ProducerFencedError, every later call raises it again, and nothing the zombie
wrote ever becomes visible to a read_committed consumer. The coordinator's
transaction timeout fences the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from exactly.app import Broker
from exactly.app.client.producer import Producer
from exactly.storage.clock import FakeClock
from exactly.storage.errors import ProducerFencedError
from exactly.storage.read_committed import read_records
from tests.conftest import SMALL_INTERNAL_TOPICS, jobs_config

T = "orders"
SMALL = SMALL_INTERNAL_TOPICS


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock, request: pytest.FixtureRequest) -> Iterator[Broker]:
    with Broker(tmp_path / "data", clock=clock, **SMALL, **jobs_config(request)) as b:
        b.create_topic(T, partitions=3)
        yield b


def visible(broker: Broker) -> list[bytes]:
    """Everything a read_committed consumer gets from the topic."""
    values = []
    for partition in range(3):
        r = broker.fetch(T, partition, 0, isolation_level="read_committed")
        values += [rec.value for rec in read_records(r.records, 0, True, r.aborted_transactions or ()).records]
    return sorted(values)


def stable(broker: Broker) -> bool:
    """No partition's LSO is held back by an open transaction."""
    return all(broker.list_offsets(T, p, -1, "read_committed") == broker.list_offsets(T, p, -1)
               for p in range(3))


def two_instances(broker: Broker) -> tuple[Producer, Producer]:
    """``old`` has an open transaction with data on partitions 0 and 1 when ``new``
    initialises with the same transactional id."""
    old = broker.producer(transactional_id="app", delivery_timeout_ms=2_000)
    old.init_transactions()
    old.begin_transaction()
    old.send(T, b"zombie-0", partition=0).get(timeout=10)
    old.send(T, b"zombie-1", partition=1).get(timeout=10)
    new = broker.producer(transactional_id="app", delivery_timeout_ms=2_000)
    new.init_transactions()
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 2)
    return old, new


def stays_fenced(old: Producer) -> None:
    """Fatal: every later call raises ProducerFencedError too."""
    for call in (lambda: old.send(T, b"again", partition=0), old.commit_transaction,
                 old.abort_transaction, old.begin_transaction, old.flush,
                 lambda: old.send_offsets_to_transaction({(T, 0): 1}, "group")):
        with pytest.raises(ProducerFencedError) as raised:
            call()
        assert (raised.value.code, raised.value.name) == (90, "PRODUCER_FENCED")
    old.close()  # closing a fenced producer is quiet


FENCED_CALLS: dict[str, Callable[[Producer], object]] = {
    "send to a partition in the transaction (Produce)": lambda old: old.send(T, b"zombie-late", partition=0).get(timeout=10),
    "send to a new partition (AddPartitionsToTxn)": lambda old: old.send(T, b"zombie-new", partition=2).get(timeout=10),
    "commit (EndTxn)": lambda old: old.commit_transaction(),
}


@pytest.mark.parametrize("request_", list(FENCED_CALLS))
def test_the_older_instance_is_fenced_and_nothing_it_wrote_is_visible(broker, request_):
    old, new = two_instances(broker)
    with pytest.raises(ProducerFencedError) as raised:
        FENCED_CALLS[request_](old)
    assert (raised.value.code, raised.value.name) == (90, "PRODUCER_FENCED")
    stays_fenced(old)
    new.begin_transaction()
    new.send(T, b"new-0", partition=0).get(timeout=10)
    new.send(T, b"new-2", partition=2).get(timeout=10)
    new.commit_transaction()
    assert visible(broker) == [b"new-0", b"new-2"]
    assert stable(broker)


def test_the_zombie_is_fenced_even_while_the_newer_instance_has_a_transaction_open(broker):
    old, new = two_instances(broker)
    new.begin_transaction()
    new.send(T, b"new-0", partition=0).get(timeout=10)
    for call in FENCED_CALLS.values():
        with pytest.raises(ProducerFencedError):
            call(old)
    new.send(T, b"new-1", partition=1).get(timeout=10)
    new.commit_transaction()
    assert visible(broker) == [b"new-0", b"new-1"] and stable(broker)


def test_the_older_instance_was_aborted_not_committed(broker):
    old, new = two_instances(broker)
    assert visible(broker) == [] and stable(broker)
    new.close()
    old.close()
    assert visible(broker) == []


def test_a_timed_out_transaction_is_aborted_by_the_job_and_its_producer_fenced(broker, clock):
    slow = broker.producer(transactional_id="slow", transaction_timeout_ms=5_000, delivery_timeout_ms=2_000)
    slow.init_transactions()
    slow.begin_transaction()
    slow.send(T, b"slow-0", partition=0).get(timeout=10)
    assert not stable(broker)
    clock.advance(5_001)
    assert broker.engine.call(broker.engine.jobs.abort_timed_out_transactions) == ["slow"]
    assert stable(broker) and visible(broker) == []
    with pytest.raises(ProducerFencedError):
        slow.send(T, b"slow-late", partition=0).get(timeout=10)  # refused by the partition: the markers bumped the epoch
    stays_fenced(slow)
    assert visible(broker) == [] and stable(broker)
    # a new instance carries on where the fenced one left off
    fresh = broker.producer(transactional_id="slow")
    fresh.init_transactions()
    fresh.begin_transaction()
    fresh.send(T, b"fresh", partition=0).get(timeout=10)
    fresh.commit_transaction()
    assert visible(broker) == [b"fresh"]


@pytest.mark.parametrize("request_", ["commit (EndTxn)", "send to a new partition (AddPartitionsToTxn)"])
def test_a_timed_out_producer_is_fenced_by_the_coordinator(broker, clock, request_):
    slow = broker.producer(transactional_id="slow", transaction_timeout_ms=5_000, delivery_timeout_ms=2_000)
    slow.init_transactions()
    slow.begin_transaction()
    slow.send(T, b"slow-0", partition=0).get(timeout=10)
    clock.advance(5_001)
    broker.engine.call(broker.engine.jobs.abort_timed_out_transactions)
    with pytest.raises(ProducerFencedError):
        FENCED_CALLS[request_](slow)
    stays_fenced(slow)
    assert visible(broker) == [] and stable(broker)
