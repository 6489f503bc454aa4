"""Group lag from the counts each partition keeps (``exactly/storage/visible_records.py``).

The lag of a read_committed consumer at ``position`` is the records it would still
receive up to the LSO; ``visibility.data_records`` answers it from counts kept as
batches and markers are appended. Here the answers are checked against the
definition itself -- a consumer's read_committed read of the range, through
``exactly/storage/read_committed.py`` -- across appends, commits, aborts, open transactions,
rolls, retention, compaction and reopening; for logs longer than the old 1,000-batch
bound; and without the log's files (no batch is read per query).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.app.engine import read_models
from exactly.storage import visibility
from exactly.storage.background import run_inline
from exactly.storage.clock import FakeClock
from exactly.storage.partition_log import PartitionLog
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.conftest import SMALL_INTERNAL_TOPICS, data_batch
from tests.storage_log import DurableLogs
from tests.waiting import eventually

T = "orders"
#: small segments, so appends roll and retention deletes whole segments as the test goes
SMALL_SEGMENTS = {"segment.bytes": 600, "retention.bytes": 1500, "retention.ms": -1}
#: and compaction besides: every round cleans what it can at once
COMPACTED = {**SMALL_SEGMENTS, "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0.01,
             "delete.retention.ms": 0, "min.compaction.lag.ms": 0}


def received(log: PartitionLog, start: int, upper: int) -> int:
    """What a read_committed consumer receives from ``[start, upper)`` -- the definition,
    by the consumer's own algorithm: every batch read, aborted ranges from the fetch's
    ``.txnindex`` answer, markers dropped. ``upper`` may be above the LSO (what is
    held back: open transactions count, as they may still commit)."""
    count, offset = 0, start
    while offset < upper:
        result = log.read(offset, 1 << 20)
        if not result.records:
            break
        aborted = [(t.producer_id, t.first_offset) for t in log.collect_aborted(offset, result.next_offset)]
        count += sum(1 for record in read_records(result.records, offset, True, aborted).records
                     if record.offset < upper)
        offset = result.next_offset
    return count


def check(log: PartitionLog, positions: list[int] | None = None) -> None:
    """Lag and held-back records equal the consumer's count, from every position asked."""
    start, lso, hw = log.log_start_offset, log.last_stable_offset, log.high_watermark
    for position in positions if positions is not None else range(start, hw + 1):
        assert visibility.read_committed_lag(log, position) == (received(log, max(position, start), lso), True), position
    assert visibility.data_records(log, lso, hw) == (received(log, lso, hw), True)
    assert len(log.visible_records) == sum(1 for _ in log.headers(0, log.log_end_offset))  # one slot per batch


class Producers:
    """Plain and transactional producers writing to partition 0 through the storage layer."""

    def __init__(self, logs: DurableLogs) -> None:
        self.logs = logs
        self.sequences: dict[int, int] = {}
        self.open: set[int] = set()

    @property
    def log(self) -> PartitionLog:
        return self.logs.log(T)

    def plain(self, n: int) -> None:
        self.logs.produce(T, 0, data_batch([b"p"] * n))

    def send(self, pid: int, n: int) -> None:
        seq = self.sequences.get(pid, 0)
        self.logs.produce(T, 0, data_batch([b"t"] * n, pid, 0, seq, transactional=True))
        self.sequences[pid] = seq + n
        self.open.add(pid)

    def end(self, pid: int, commit: bool) -> None:
        if pid in self.open:
            self.logs.write_txn_marker(T, 0, pid, 0, 0, commit)
            self.open.discard(pid)


STEP = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 4)),
    st.tuples(st.just("send"), st.integers(1, 3), st.integers(1, 4)),
    st.tuples(st.just("commit"), st.integers(1, 3)),
    st.tuples(st.just("abort"), st.integers(1, 3)),
    st.tuples(st.just("retention")),
    st.tuples(st.just("clean")),
    st.tuples(st.just("reopen")))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=40), probes=st.lists(st.floats(0, 1), min_size=1, max_size=3))
def test_lag_is_what_a_read_committed_consumer_receives(tmp_path_factory: pytest.TempPathFactory,
                                                          steps: list[tuple], probes: list[float]) -> None:
    """Any mix of plain batches, transactions of three producers (committed, aborted or
    left open), rolls, retention, compaction (records with the same keys) and
    reopening: after every step the lag from a few positions -- and at the end from
    every position -- is the consumer's count."""
    data = tmp_path_factory.mktemp("lag") / "data"
    clock = FakeClock()
    logs = DurableLogs(data, clock=clock)
    logs.create_topic(T, 1, COMPACTED)
    producers = Producers(logs)
    try:
        for step in steps:
            kind = step[0]
            if kind == "plain":
                producers.plain(step[1])
            elif kind == "send":
                producers.send(step[1], step[2])
            elif kind in ("commit", "abort"):
                producers.end(step[1], kind == "commit")
            elif kind == "retention":
                run_inline(producers.log.delete_old_segments(clock.now_ms()))
            elif kind == "clean":
                clock.advance(1000)
                run_inline(producers.log.clean(clock.now_ms()))
            else:  # reopen: the counts are rebuilt from the segments and .txnindex files
                logs.close()
                logs = producers.logs = DurableLogs(data, clock=clock)
            log = producers.log
            check(log, [log.log_start_offset + round(p * (log.high_watermark - log.log_start_offset))
                        for p in probes])
        check(producers.log)
    finally:
        logs.close()


@pytest.fixture
def logs(tmp_path: Path, clock: FakeClock) -> Iterator[DurableLogs]:
    with DurableLogs(tmp_path / "data", clock=clock) as logs:
        logs.create_topic(T, 1)
        yield logs


def long_partition(logs: DurableLogs, batches: int) -> None:
    """``batches`` batches: plain ones of 1-3 records, and every seventh batch a
    transaction of two batches, one in three of them aborted."""
    producers = Producers(logs)
    for i in range(batches):
        if i % 7 == 0:
            producers.send(1, 2)
            producers.send(1, 1)
            producers.end(1, commit=i % 21 != 0)
        else:
            producers.plain(1 + i % 3)


def test_a_long_partitions_lag_is_exact(logs: DurableLogs) -> None:
    """Past the 1,000 batch headers one count used to read, the lag was an offset
    difference flagged inexact; now it is the consumer's count from anywhere."""
    long_partition(logs, 3000)
    log = logs.log(T)
    assert log.high_watermark > 3000
    check(log, [0, 1, 2, 500, log.high_watermark // 2 + 1, log.high_watermark - 3, log.high_watermark])


def test_lag_reads_no_batch(tmp_path: Path, clock: FakeClock) -> None:
    """The counts answer alone: with every segment file closed, the lag from any
    position (not inside a compacted batch) still comes out, and right."""
    logs = DurableLogs(tmp_path / "data", clock=clock)
    try:
        logs.create_topic(T, 1)
        long_partition(logs, 1500)
        log = logs.log(T)
        positions = list(range(0, log.high_watermark + 1, 97)) + [log.high_watermark]
        expected = [received(log, p, log.last_stable_offset) for p in positions]
        for segment in log.segments:
            segment.close()
        assert [visibility.read_committed_lag(log, p) for p in positions] == [(n, True) for n in expected]
    finally:
        logs.logs.close(clean=False)


def test_lag_after_compaction_and_reopening(tmp_path: Path, clock: FakeClock) -> None:
    """The cleaner thins batches out, drops aborted data and keeps markers: the counts
    follow the cleaned segments, and are rebuilt the same from them on reopening."""
    data = tmp_path / "data"
    compacted = {"cleanup.policy": "compact", "segment.bytes": 400, "min.cleanable.dirty.ratio": 0.01,
                 "delete.retention.ms": 0, "min.compaction.lag.ms": 0}
    with DurableLogs(data, clock=clock) as logs:
        logs.create_topic(T, 1, compacted)
        sequence = 0
        for i in range(60):
            keys = [b"k%d" % ((i + j) % 5) for j in range(3)]
            batch = encode_batch([SimpleRecord(b"v%d" % i, key=k) for k in keys], producer_id=7,
                                 producer_epoch=0, base_sequence=sequence, transactional=True)
            logs.produce(T, 0, batch)
            sequence += 3
            logs.write_txn_marker(T, 0, 7, 0, 0, commit=i % 4 != 0)
        log = logs.log(T)
        log.roll()
        log.flush()
        before = sum(1 for _ in log.headers(0, log.log_end_offset))
        clock.advance(1000)
        run_inline(log.clean(clock.now_ms()))
        assert sum(h.record_count for h in log.headers(0, log.log_end_offset)) < 3 * 60
        assert sum(1 for _ in log.headers(0, log.log_end_offset)) <= before
        check(log)
    with DurableLogs(data, clock=clock) as logs:
        check(logs.log(T))


def test_console_and_api_say_the_lag_is_exact(broker: Broker) -> None:
    """``lag_exact`` stays in the answers for the clients that read it, always true,
    also past the old bound of 1,000 batches."""
    broker.create_topic(T, 1)
    plain = encode_batch([SimpleRecord(b"v", key=b"k")])
    for _ in range(1200):
        broker.produce(T, 0, plain, acks=1)
    consumer = broker.consumer(group_id="svc", enable_auto_commit=False)
    consumer.commit({(T, 0): 0})
    consumer.close()
    log = broker.engine.partitions.log(T, 0)
    offsets = broker.engine.call(read_models.group, broker.engine, "svc")["offsets"][0]
    assert (offsets["lag"], offsets["lag_exact"]) == (received(log, 0, log.last_stable_offset), True) == (1200, True)
    summary = next(g for g in broker.engine.call(read_models.groups_summary, broker.engine) if g["group_id"] == "svc")
    assert (summary["lag"], summary["lag_exact"]) == (1200, True)


def test_after_a_restart_the_lag_is_counted_off_the_loop(tmp_path: Path, clock: FakeClock) -> None:
    """Opening a log reads no batch header to count it: the counts of what it opened
    with are made on the broker's worker after the first lag asked, exact once there
    (meanwhile an upper bound, flagged) -- also for a transaction left open across the
    restart and aborted after it."""
    data = tmp_path / "data"
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS) as broker:
        broker.create_topic(T, 1, {"segment.bytes": 2000})
        for i in range(300):
            broker.produce(T, 0, encode_batch([SimpleRecord(b"v%d" % i, key=b"k")]), acks=1)
        consumer = broker.consumer(group_id="svc", enable_auto_commit=False)
        consumer.commit({(T, 0): 5})
        consumer.close()
        stuck = broker.producer(transactional_id="stuck", transaction_timeout_ms=300_000)
        stuck.init_transactions()
        stuck.begin_transaction()
        stuck.send(T, b"open", partition=0).get(timeout=10)
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS) as broker:
        log = broker.engine.partitions.log(T, 0)
        assert len(log.segments) > 3 and len(log.visible_records) == 0  # nothing read on open
        def offsets() -> dict:
            return broker.engine.call(read_models.group, broker.engine, "svc")["offsets"][0]
        counted = eventually(lambda: (o := offsets())["lag_exact"] and o, 30, "the counts of the opened log")
        assert counted["lag"] == 295 and counted["held_back"] == 1
        txn_id = "stuck"
        broker.engine.call(broker.engine.transactions.coordinator.admin_abort, txn_id, "test")
        settled = eventually(lambda: not (o := offsets())["held_back"] and o, 30, "the abort to reach the counts")
        assert (settled["lag"], settled["lag_exact"]) == (295, True)
        assert settled["lag"] == received(log, 5, log.last_stable_offset)


def test_a_transaction_ended_while_its_batches_were_being_counted(tmp_path: Path, clock: FakeClock) -> None:
    """The counting of an opened log is planned, run and installed in steps (the
    owner's ``background``): a transaction that was open when a segment's count was
    planned and ends -- abort or commit -- before it is installed ends in the counts too."""
    data = tmp_path / "data"
    with DurableLogs(data, clock=clock) as logs:
        logs.create_topic(T, 1, SMALL_SEGMENTS)
        producers = Producers(logs)
        producers.plain(2)
        producers.send(1, 3)
        producers.send(2, 2)
        producers.plain(1)
    with DurableLogs(data, clock=clock) as logs:
        log = logs.log(T)
        deferred: list = []
        log.background = deferred.append
        assert visibility.read_committed_lag(log, 0)[1] is False  # not counted yet: an upper bound
        steps = deferred.pop()
        job = steps.send(None)  # planned: producers 1 and 2 have transactions open
        job.run()  # counted (off the owner's thread, in a broker)
        producers = Producers(logs)
        producers.sequences, producers.open = {1: 3, 2: 2}, {1, 2}
        producers.end(1, commit=False)
        producers.end(2, commit=True)
        with pytest.raises(StopIteration):
            steps.send(None)  # installed, after both markers
        check(log)
        assert visibility.read_committed_lag(log, 0) == (2 + 2 + 1, True)
