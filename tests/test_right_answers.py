"""Right answers to the questions the console exists for (issue 10, "Right answers").

* Lag is the number of records a read_committed consumer would still receive: data
  records from the committed offset up to the LSO, markers and aborted records not
  counted -- checked against what a read_committed fetch from that offset returns.
* A group whose consumer sits at the LSO while the LSO is held back says so: what is
  held back, and by which transaction.
* The records view never calls a record after the LSO "visible": it waits behind
  the LSO, with the transaction that holds it.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.app.engine import read_models
from exactly.storage.clock import FakeClock
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.test_log_cleaner import CONFIG, T, clean, plog, roll


def _offsets(broker: Broker, group_id: str, topic: str, partition: int = 0) -> dict:
    return next(o for o in broker.engine.call(read_models.group, broker.engine, group_id)["offsets"]
                if (o["topic_name"], o["partition_id"]) == (topic, partition))


def _commit(broker: Broker, group_id: str, topic: str, offset: int) -> None:
    consumer = broker.consumer(group_id=group_id, enable_auto_commit=False)
    try:
        consumer.commit({(topic, 0): offset})
    finally:
        consumer.close()


def _received(broker: Broker, topic: str, offset: int) -> int:
    """How many records a read_committed consumer at ``offset`` receives up to the LSO."""
    count = 0
    while True:
        result = broker.fetch(topic, 0, offset, 1 << 20, "read_committed")
        if not result.records:
            return count
        count += len(read_records(result.records, offset, True, result.aborted_transactions).records)
        offset = result.next_offset


def test_a_caught_up_exactly_once_consumer_has_lag_0(broker: Broker):
    """The commit marker after the last data record is not a record to receive."""
    broker.create_topic("orders", 1)
    producer = broker.producer(transactional_id="billing")
    producer.init_transactions()
    producer.begin_transaction()
    for value in (b"a", b"b"):
        producer.send("orders", value, partition=0).get(timeout=10)
    producer.send_offsets_to_transaction({("orders", 0): 2}, "svc")
    producer.commit_transaction()
    log = broker.engine.partitions.log("orders", 0)
    assert log.last_stable_offset == log.high_watermark == 3  # records 0, 1; the COMMIT marker 2

    offsets = _offsets(broker, "svc", "orders")
    assert offsets["committed_offset"] == 2
    assert (offsets["lag"], offsets["lag_exact"], offsets["held_back"]) == (0, True, 0)
    summary = next(g for g in broker.engine.call(read_models.groups_summary, broker.engine) if g["group_id"] == "svc")
    assert (summary["lag"], summary["held_back"]) == (0, 0)


def test_aborted_records_and_markers_are_not_lag(broker: Broker):
    broker.create_topic("orders", 1)
    producer = broker.producer(transactional_id="billing")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(3):
        producer.send("orders", b"doomed-%d" % i, partition=0).get(timeout=10)
    producer.abort_transaction()                                          # 0-2, ABORT marker 3
    plain = broker.producer()
    for i in range(2):
        plain.send("orders", b"plain-%d" % i, partition=0).get(timeout=10)  # 4, 5
    _commit(broker, "svc", "orders", 0)
    assert _offsets(broker, "svc", "orders")["lag"] == 2 == _received(broker, "orders", 0)
    _commit(broker, "svc", "orders", 5)  # inside the batch of the plain records
    assert _offsets(broker, "svc", "orders")["lag"] == 1 == _received(broker, "orders", 5)


def test_a_consumer_at_a_held_back_lso_is_not_done(broker: Broker):
    """Lag 0 -- nothing to receive yet -- but the group says what waits, and why."""
    broker.create_topic("orders", 1)
    plain = broker.producer()
    plain.send("orders", b"before", partition=0).get(timeout=10)
    producer = broker.producer(transactional_id="stuck", transaction_timeout_ms=300_000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"open", partition=0).get(timeout=10)      # 1: pins the LSO
    plain.send("orders", b"after", partition=0).get(timeout=10)        # 2: waits behind it
    _commit(broker, "svc", "orders", 1)
    offsets = _offsets(broker, "svc", "orders")
    assert (offsets["lag"], offsets["last_stable_offset"], offsets["held_back"]) == (0, 1, 2)
    [holder] = offsets["held_by"]
    assert (holder["transactional_id"], holder["first_offset"], holder["holds_lso"]) == ("stuck", 1, True)
    assert holder["in_transaction"] and holder["state"] == "Ongoing"
    summary = next(g for g in broker.engine.call(read_models.groups_summary, broker.engine) if g["group_id"] == "svc")
    assert (summary["lag"], summary["held_back"]) == (0, 2)

    producer.abort_transaction()                                       # ABORT marker 3
    offsets = _offsets(broker, "svc", "orders")
    assert (offsets["lag"], offsets["held_back"], offsets["held_by"]) == (1, 0, [])  # "after"
    assert _received(broker, "orders", 1) == 1


def test_held_back_counts_records_not_markers_or_aborted_ones(broker: Broker):
    """Past the LSO: an aborted transaction and its marker are no records to wait for."""
    broker.create_topic("orders", 1)
    stuck = broker.producer(transactional_id="stuck", transaction_timeout_ms=300_000)
    stuck.init_transactions()
    stuck.begin_transaction()
    stuck.send("orders", b"open", partition=0).get(timeout=10)            # 0: pins the LSO
    other = broker.producer(transactional_id="other")
    other.init_transactions()
    other.begin_transaction()
    for i in range(3):
        other.send("orders", b"doomed-%d" % i, partition=0).get(timeout=10)  # 1-3
    other.abort_transaction()                                              # marker 4
    broker.producer().send("orders", b"plain", partition=0).get(timeout=10)  # 5
    _commit(broker, "svc", "orders", 0)
    offsets = _offsets(broker, "svc", "orders")
    assert (offsets["last_stable_offset"], offsets["high_watermark"]) == (0, 6)
    assert (offsets["lag"], offsets["held_back"]) == (0, 2)                # "open" and "plain"


_topics = itertools.count()
#: what one step writes: plain records, or a transaction of records that commits or aborts
STEPS = st.lists(st.tuples(st.sampled_from(["plain", "commit", "abort"]), st.integers(1, 4)),
                 min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS, where=st.floats(0, 1), open_at_end=st.booleans())
def test_lag_is_what_a_read_committed_consumer_still_receives(broker: Broker, steps, where, open_at_end):
    topic = f"t{next(_topics)}"
    broker.create_topic(topic, 1)
    plain = broker.producer()
    txn = broker.producer(transactional_id=f"{topic}-tx", transaction_timeout_ms=300_000)
    txn.init_transactions()
    for kind, n in steps:
        if kind == "plain":
            futures = [plain.send(topic, b"p", partition=0) for _ in range(n)]  # batched together
            for future in futures:
                future.get(timeout=10)
            continue
        txn.begin_transaction()
        for _ in range(n):
            txn.send(topic, b"t", partition=0).get(timeout=10)
        txn.commit_transaction() if kind == "commit" else txn.abort_transaction()
    if open_at_end:
        txn.begin_transaction()
        txn.send(topic, b"open", partition=0).get(timeout=10)
        plain.send(topic, b"after", partition=0).get(timeout=10)
    log = broker.engine.partitions.log(topic, 0)
    position = round(where * log.high_watermark)
    _commit(broker, "g-" + topic, topic, position)
    offsets = _offsets(broker, "g-" + topic, topic)
    assert offsets["lag_exact"]
    assert offsets["lag"] == _received(broker, topic, position)
    if open_at_end:
        txn.abort_transaction()


def test_a_record_after_the_lso_waits_behind_it(broker: Broker):
    """Offset 10 opens a transaction, offset 11 is a plain record: LSO 10, so 11 is not
    visible yet; it waits behind the transaction holding the LSO."""
    broker.create_topic("orders", 1)
    plain = broker.producer()
    for i in range(10):
        plain.send("orders", b"p%d" % i, partition=0).get(timeout=10)
    producer = broker.producer(transactional_id="stuck", transaction_timeout_ms=300_000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"open", partition=0).get(timeout=10)      # 10
    plain.send("orders", b"after", partition=0).get(timeout=10)        # 11
    view = broker.engine.call(read_models.records, broker.engine, "orders", 0, 8)
    assert view["last_stable_offset"] == 10
    status = {r["offset"]: r["status"] for r in view["records"]}
    assert status == {8: "visible", 9: "visible", 10: "open", 11: "waits"}
    waiting = view["records"][-1]
    assert waiting["held_by"]["transactional_id"] == "stuck" and waiting["held_by"]["first_offset"] == 10

    producer.commit_transaction()                                      # COMMIT marker 12
    status = {r["offset"]: r["status"]
              for r in broker.engine.call(read_models.records, broker.engine, "orders", 0, 8)["records"]}
    assert status == {8: "visible", 9: "visible", 10: "committed", 11: "visible", 12: "marker"}


def test_lag_from_inside_a_compacted_batch_counts_the_records_it_kept(broker: Broker, clock: FakeClock):
    """A committed offset inside a batch the cleaner thinned out: only that batch is
    decoded, and only the records it still holds count."""
    broker.create_topic(T, 1, CONFIG)
    first = encode_batch([SimpleRecord(b"v", key=k) for k in (b"a", b"b", b"a", b"b", b"c")])
    broker.produce(T, 0, first)                                                   # 0-4
    broker.produce(T, 0, encode_batch([SimpleRecord(b"w", key=k) for k in (b"a", b"b")]))  # 5, 6
    roll(broker)
    clean(broker, clock)
    header = next(plog(broker).headers(0, 5))
    assert (header.base_offset, header.record_count, header.last_offset) == (0, 1, 4)  # only "c" is left
    _commit(broker, "svc", T, 2)
    offsets = _offsets(broker, "svc", T)
    assert (offsets["lag"], offsets["lag_exact"]) == (3, True) and _received(broker, T, 2) == 3
