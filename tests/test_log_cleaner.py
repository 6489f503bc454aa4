"""Log compaction (exactly/storage/log_cleaner.py), through the embedded Broker.

Each test writes a compacted topic, rolls the log so the data is cleanable, runs
the cleaner and checks what a consumer, producer state and the files on disk see
afterwards. A FakeClock drives min.compaction.lag.ms and delete.retention.ms.
Transactions are real ones: producer ids and epochs from the coordinator, raw
batches, markers written by EndTxn (tests/raw_txn.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.app.config import BrokerConfig
from exactly.storage import filenames, log_cleaner
from exactly.storage.background import run_inline
from exactly.storage.clock import FakeClock
from exactly.storage.compression import Compression
from exactly.storage.errors import InvalidRecordError
from exactly.storage.log_cleaner import CleanerStats
from exactly.storage.log_manager import LogManager
from exactly.storage.partition_log import PartitionLog
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import (
    DELETE_HORIZON_BIT,
    BatchHeader,
    ControlType,
    SimpleRecord,
    decode_batch,
    decode_control_record,
    encode_batch,
)
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS, producer_id
from tests.raw_txn import RawTxn, coordinator_call

T = "compacted"
HOUR = 3600 * 1000
#: small segments, so a few batches make several; tombstones live an hour
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 400, "delete.retention.ms": HOUR}


# -- helpers ----------------------------------------------------------------------------


def on_loop(broker: Broker, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the engine's loop, the one owner of partition state."""
    async def run() -> Any:
        return fn()
    return broker.engine.call(run)


def plog(broker: Broker) -> PartitionLog:
    return broker.engine.partitions.log(T, 0)


def clean(broker: Broker, clock: FakeClock) -> CleanerStats:
    """One round, its jobs run right there on the loop (the engine runs them on its
    maintenance thread; tests/test_maintenance.py shows that)."""
    return on_loop(broker, lambda: run_inline(plog(broker).clean(clock.now_ms())))


def roll(broker: Broker) -> None:
    """Start a new active segment, so everything written so far may be cleaned."""
    on_loop(broker, lambda: plog(broker).roll())


def batch(key: bytes | None, value: bytes | None, *, producer_id: int = -1, sequence: int = -1,
          epoch: int = 0, transactional: bool = False, timestamp: int | None = None,
          compression: Compression = Compression.NONE) -> bytes:
    return encode_batch([SimpleRecord(value, key=key, timestamp=timestamp)], producer_id=producer_id,
                        producer_epoch=epoch if producer_id >= 0 else -1, base_sequence=sequence,
                        transactional=transactional, compression=compression)


def put(broker: Broker, key: bytes | None, value: bytes | None, **kwargs: Any) -> int:
    return broker.produce(T, 0, batch(key, value, **kwargs))


def open_broker(data: Path, clock: FakeClock, **config: Any) -> Broker:
    return Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS, **config)


class Producer:
    """An idempotent producer keeping its own sequence, with a producer id the broker handed out."""

    def __init__(self, broker: Broker) -> None:
        self.broker, self.pid, self.epoch = broker, producer_id(broker), 0
        self.seq = 0
        self.sent: list[tuple[int, bytes]] = []

    def send(self, *pairs: tuple[bytes, bytes | None]) -> int:
        data = encode_batch([SimpleRecord(v, key=k) for k, v in pairs], producer_id=self.pid,
                            producer_epoch=self.epoch, base_sequence=self.seq)
        offset = self.broker.produce(T, 0, data)
        self.seq += len(pairs)
        self.sent.append((offset, data))
        return offset


class TxnProducer:
    """A transactional producer of ``transactional_id`` writing to the test partition."""

    def __init__(self, broker: Broker, transactional_id: str) -> None:
        self.txn = RawTxn(broker, transactional_id)
        self.pid = self.txn.pid

    def send(self, *pairs: tuple[bytes, bytes | None]) -> int:
        return self.txn.produce(T, 0, [SimpleRecord(v, key=k) for k, v in pairs])

    def end(self, commit: bool) -> int:
        """EndTxn; the offset of its marker."""
        return self.txn.end(commit)[(T, 0)]


def consume(broker: Broker, read_committed: bool = True, start: int = 0) -> list:
    """Every record a consumer gets reading the partition from ``start``."""
    isolation = "read_committed" if read_committed else "read_uncommitted"
    records, offset = [], start
    while True:
        r = broker.fetch(T, 0, offset, max_bytes=300, isolation_level=isolation)
        if not r.records:
            return records
        got = read_records(r.records, offset, read_committed, r.aborted_transactions or ())
        records.extend(got.records)
        assert got.next_offset > offset
        offset = got.next_offset


def triples(broker: Broker, read_committed: bool = False) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in consume(broker, read_committed)]


def latest_per_key(broker: Broker) -> dict[bytes, bytes]:
    """What a read_committed consumer that applies every record ends up with."""
    table: dict[bytes, bytes] = {}
    for r in consume(broker, read_committed=True):
        if r.value is None:
            table.pop(r.key, None)
        else:
            table[r.key] = r.value
    return table


def stored(broker: Broker) -> list[tuple[BatchHeader, bytes]]:
    return on_loop(broker, lambda: list(plog(broker).batches()))


def markers(broker: Broker) -> list[tuple[BatchHeader, ControlType]]:
    return [(h, decode_control_record(decode_batch(b).records[0])[0])
            for h, b in stored(broker) if h.is_control]


def offsets_picture(broker: Broker) -> tuple[int, int, int, int]:
    log = plog(broker)
    return on_loop(broker, lambda: (log.log_start_offset, log.log_end_offset, log.high_watermark,
                                    log.last_stable_offset))


def txn_index(broker: Broker) -> list:
    return on_loop(broker, lambda: [t for s in plog(broker).segments for t in s.txn_index.all_entries()])


def assert_indexes_match_the_log(broker: Broker) -> None:
    """Every index entry of every segment points at what is in its .log: offset index
    entries at batch boundaries, time index entries at a batch's last offset, and
    .txnindex entries at an ABORT marker still there."""
    def check() -> None:
        for segment in plog(broker).segments:
            headers = {location.position: location.header for location in segment.headers_from(0)}
            for offset, position in segment.offset_index.entries():
                assert headers[position].last_offset == offset, segment.log_path
            last_offsets = {header.last_offset for header in headers.values()}
            assert all(offset in last_offsets for _, offset in segment.time_index.entries())
            marker_offsets = {header.base_offset for header in headers.values() if header.is_control}
            assert all(txn.last_offset in marker_offsets for txn in segment.txn_index.all_entries())
    on_loop(broker, check)


def cleanable_end(broker: Broker) -> int:
    """Where the cleanable range ends: the base of the segment holding the first
    uncleanable offset (the LSO or the active segment's base)."""
    def end() -> int:
        log = plog(broker)
        uncleanable = min(log.last_stable_offset, log.active_segment.base_offset)
        return max(s.base_offset for s in log.segments if s.base_offset <= uncleanable)
    return on_loop(broker, end)


def partition_dir(data_dir: Path) -> Path:
    return data_dir / filenames.partition_dir_name(T, 0)


@pytest.fixture
def topic(broker: Broker) -> str:
    broker.create_topic(T, 1, CONFIG)
    return T


# -- what is kept ------------------------------------------------------------------------


def test_latest_value_of_each_key_is_kept_at_its_offset(broker: Broker, clock: FakeClock,
                                                         topic: str) -> None:
    latest = {}
    for i in range(40):
        key = b"k%d" % (i % 6)
        latest[key] = (put(broker, key, b"v%d" % i), b"v%d" % i)
    roll(broker)
    before = offsets_picture(broker)
    assert len(plog(broker).segments) > 4

    stats = clean(broker, clock)

    assert triples(broker) == sorted((offset, key, value) for key, (offset, value) in latest.items())
    assert stats.records_removed == 40 - 6 and stats.segments_rewritten > 0
    assert stats.bytes_after < stats.bytes_before
    assert offsets_picture(broker) == before, "offsets, log start, HW and LSO never move"
    # every stored batch is still where it was: its base offset and range unchanged
    for header, data in stored(broker):
        assert decode_batch(data).records[0].offset == header.base_offset


def test_a_round_with_nothing_dirty_does_nothing_and_touches_no_file(broker: Broker, clock: FakeClock,
                                                                     topic: str, tmp_path: Path) -> None:
    for i in range(20):
        put(broker, b"k%d" % (i % 3), b"v%d" % i)
    roll(broker)
    assert clean(broker, clock).segments_rewritten > 0
    files = {p.name: p.stat().st_mtime_ns for p in partition_dir(tmp_path / "data").iterdir()}

    assert clean(broker, clock) == CleanerStats()

    assert {p.name: p.stat().st_mtime_ns for p in partition_dir(tmp_path / "data").iterdir()} == files
    broker.engine.call(broker.engine.jobs.checkpoint)
    end = plog(broker).active_segment.base_offset
    assert (tmp_path / "data" / filenames.CLEANER_OFFSET_CHECKPOINT).read_text() == f"0\n1\n{T} 0 {end}\n"


def test_the_cleaner_checkpoint_survives_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    with open_broker(tmp_path / "data", clock) as broker:
        broker.create_topic(T, 1, CONFIG)
        for i in range(20):
            put(broker, b"k%d" % (i % 3), b"v%d" % i)
        roll(broker)
        broker.engine.call(broker.engine.jobs.compact_logs)
        end = plog(broker).active_segment.base_offset
    with open_broker(tmp_path / "data", clock) as broker:
        assert plog(broker).cleaner_state.checkpoint == end
        assert clean(broker, clock) == CleanerStats()


def test_small_cleaned_segments_are_merged_by_a_later_round(broker: Broker, clock: FakeClock,
                                                            topic: str) -> None:
    for i in range(40):
        put(broker, b"k%d" % (i % 4), b"v%d" % i)
    roll(broker)
    clean(broker, clock)
    count = len(plog(broker).segments)
    put(broker, b"k0", b"new")
    roll(broker)

    clean(broker, clock)

    assert len(plog(broker).segments) < count
    assert latest_per_key(broker) == {b"k0": b"new", b"k1": b"v37", b"k2": b"v38", b"k3": b"v39"}


def test_compressed_batches_keep_their_codec_and_a_valid_crc(broker: Broker, clock: FakeClock,
                                                              topic: str) -> None:
    data = encode_batch([SimpleRecord(b"a", key=b"k1"), SimpleRecord(b"b", key=b"k2"),
                         SimpleRecord(b"c", key=b"k3")], compression=Compression.GZIP)
    first = broker.produce(T, 0, data)
    put(broker, b"k2", b"b2")
    roll(broker)

    clean(broker, clock)

    header, rewritten = stored(broker)[0]
    assert header.base_offset == first and header.compression is Compression.GZIP
    assert header.last_offset_delta == 2 and header.record_count == 2
    assert [(r.offset, r.key, r.value) for r in decode_batch(rewritten).records] == [
        (first, b"k1", b"a"), (first + 2, b"k3", b"c")]


def test_a_batch_whose_last_records_went_keeps_its_offset_range(broker: Broker, clock: FakeClock,
                                                                topic: str) -> None:
    first = broker.produce(T, 0, encode_batch([SimpleRecord(b"a", key=b"k1"), SimpleRecord(b"b", key=b"k2"),
                                               SimpleRecord(b"c", key=b"k3")]))
    put(broker, b"k2", b"b2")
    put(broker, b"k3", b"c2")
    roll(broker)

    clean(broker, clock)

    header = stored(broker)[0][0]
    assert (header.base_offset, header.record_count, header.last_offset_delta) == (first, 1, 2)
    assert triples(broker) == [(first, b"k1", b"a"), (first + 3, b"k2", b"b2"), (first + 4, b"k3", b"c2")]
    assert triples(broker, read_committed=True) == triples(broker)


def test_a_keyless_record_to_a_compacted_topic_is_an_invalid_record(broker: Broker, topic: str) -> None:
    with pytest.raises(InvalidRecordError) as raised:
        broker.produce(T, 0, encode_batch([SimpleRecord(b"x", key=b"k"), SimpleRecord(b"y")]))
    assert raised.value.code == 87
    assert "Compacted topic cannot accept message without key" in str(raised.value)
    assert offsets_picture(broker)[1] == 0, "nothing was appended"
    broker.create_topic("plain", 1)
    assert broker.produce("plain", 0, encode_batch([SimpleRecord(b"y")])) == 0


def test_min_compaction_lag_keeps_young_segments_dirty(broker: Broker, clock: FakeClock) -> None:
    broker.create_topic(T, 1, {**CONFIG, "min.compaction.lag.ms": 60_000})
    for i in range(10):
        put(broker, b"k", b"old%d" % i, timestamp=clock.now_ms())
    clock.advance(60_001)
    for i in range(10):
        put(broker, b"k", b"young%d" % i, timestamp=clock.now_ms())
    roll(broker)
    young = [o for o, _, v in triples(broker) if v.startswith(b"young")]

    clean(broker, clock)

    kept = triples(broker)
    assert [o for o, _, v in kept if v.startswith(b"young")] == young, "young data is not cleaned"
    assert len([v for _, _, v in kept if v.startswith(b"old")]) < 10
    clock.advance(60_001)
    clean(broker, clock)
    assert triples(broker) == [(young[-1], b"k", b"young9")]


# -- tombstones --------------------------------------------------------------------------


def test_a_tombstone_is_removed_only_after_delete_retention(broker: Broker, clock: FakeClock,
                                                            topic: str) -> None:
    put(broker, b"gone", b"value")
    put(broker, b"kept", b"value")
    tombstone = put(broker, b"gone", None)
    roll(broker)
    stamped_at = clock.now_ms()

    clean(broker, clock)

    assert triples(broker) == [(1, b"kept", b"value"), (tombstone, b"gone", None)]
    header = next(h for h, _ in stored(broker) if h.base_offset == tombstone)
    assert header.attributes & DELETE_HORIZON_BIT and header.delete_horizon_ms == stamped_at + HOUR
    clock.advance(HOUR - 1)
    assert clean(broker, clock) == CleanerStats(), "no round before the horizon"
    assert (tombstone, b"gone", None) in triples(broker)

    clock.advance(1)
    stats = clean(broker, clock)

    assert triples(broker) == [(1, b"kept", b"value")]
    assert stats.records_removed == 1
    assert latest_per_key(broker) == {b"kept": b"value"}


def test_a_stamped_tombstone_keeps_its_timestamp(broker: Broker, clock: FakeClock, topic: str) -> None:
    offset = put(broker, b"k", None, timestamp=1234)
    roll(broker)
    clean(broker, clock)
    (record,) = consume(broker)
    assert (record.offset, record.value, record.timestamp) == (offset, None, 1234)


def test_a_horizon_is_found_again_after_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    with open_broker(tmp_path / "data", clock) as broker:
        broker.create_topic(T, 1, CONFIG)
        put(broker, b"k", None)
        roll(broker)
        clean(broker, clock)
    clock.advance(HOUR)
    with open_broker(tmp_path / "data", clock) as broker:
        assert triples(broker) == [(0, b"k", None)]
        clean(broker, clock)
        assert triples(broker) == []


# -- transactions ------------------------------------------------------------------------


def test_aborted_data_is_removed_and_committed_data_kept(broker: Broker, clock: FakeClock,
                                                         topic: str) -> None:
    put(broker, b"k3", b"plain")
    aborted = TxnProducer(broker, "txn-100")
    aborted.send((b"k1", b"aborted-1"), (b"k2", b"aborted-2"))
    committed = TxnProducer(broker, "txn-200")
    committed.send((b"k1", b"committed"))
    aborted.send((b"k3", b"aborted-3"))  # later than k3=plain: must not remove it
    aborted.end(commit=False)
    committed.end(commit=True)
    roll(broker)
    view = latest_per_key(broker)

    stats = clean(broker, clock)

    values = [v for _, _, v in triples(broker, read_committed=False)]
    assert not any(v.startswith(b"aborted") for v in values), "even read_uncommitted sees none"
    assert sorted(values) == [b"committed", b"plain"]
    assert latest_per_key(broker) == view == {b"k1": b"committed", b"k3": b"plain"}
    assert stats.records_removed == 3


def test_nothing_at_or_beyond_the_lso_is_touched_while_a_transaction_is_open(
        broker: Broker, clock: FakeClock, topic: str) -> None:
    for i in range(10):
        put(broker, b"k", b"before%d" % i)
    txn = TxnProducer(broker, "txn-100")
    lso = txn.send((b"k", b"open"))
    for i in range(10):
        put(broker, b"k", b"after%d" % i)
    roll(broker)
    assert offsets_picture(broker)[3] == lso
    end = cleanable_end(broker)
    assert 0 < end <= lso
    untouched = [(h, b) for h, b in stored(broker) if h.last_offset >= end]

    clean(broker, clock)

    assert [(h, b) for h, b in stored(broker) if h.last_offset >= end] == untouched
    assert [(o, v) for o, _, v in triples(broker) if o < end] == [(end - 1, b"before%d" % (end - 1))]
    assert offsets_picture(broker)[3] == lso

    txn.end(commit=True)
    roll(broker)
    clean(broker, clock)
    assert triples(broker) == [(lso + 10, b"k", b"after9")]


def test_markers_stay_while_their_data_does_then_until_delete_retention(
        broker: Broker, clock: FakeClock, topic: str) -> None:
    # producer 100: seven committed transactions overwriting k1; only the last five
    # batches are remembered by producer state, so the first two can go entirely
    p = TxnProducer(broker, "txn-100")
    commit_offsets = []
    for i in range(7):
        p.send((b"k1", b"x%d" % i))
        commit_offsets.append(p.end(commit=True))
    # producer 200: an aborted transaction, then five committed ones on other keys
    q = TxnProducer(broker, "txn-200")
    q.send((b"k2", b"aborted"))
    abort_offset = q.end(commit=False)
    for i in range(5):
        q.send((b"q%d" % i, b"v"))
        q.end(commit=True)
    # producer 300: one committed value that stays the latest of its key
    r = TxnProducer(broker, "txn-300")
    r.send((b"k9", b"forever"))
    forever_marker = r.end(commit=True)
    for i in range(5):
        r.send((b"r%d" % i, b"v"))
        r.end(commit=True)
    roll(broker)
    assert [t.last_offset for t in txn_index(broker)] == [abort_offset]

    clean(broker, clock)

    by_offset = {h.base_offset: h for h, _ in markers(broker)}
    for gone_data in (commit_offsets[0], commit_offsets[1], abort_offset):
        assert by_offset[gone_data].delete_horizon_ms == clock.now_ms() + HOUR, "stamped, still there"
    for remembered in commit_offsets[2:]:
        assert by_offset[remembered].delete_horizon_ms is None
    assert by_offset[forever_marker].delete_horizon_ms is None
    assert [t.last_offset for t in txn_index(broker)] == [abort_offset], "its marker is still there"
    assert b"aborted" not in [v for _, _, v in triples(broker, read_committed=False)]

    clock.advance(HOUR)
    clean(broker, clock)

    left = {h.base_offset for h, _ in markers(broker)}
    assert not {commit_offsets[0], commit_offsets[1], abort_offset} & left
    assert set(commit_offsets[2:]) <= left and forever_marker in left
    assert txn_index(broker) == [], "no entry outlives its ABORT marker"
    assert latest_per_key(broker)[b"k9"] == b"forever"
    assert latest_per_key(broker)[b"k1"] == b"x6"


def test_a_read_committed_consumer_sees_the_latest_committed_value_of_each_key(
        broker: Broker, clock: FakeClock, topic: str) -> None:
    idem = Producer(broker)
    a, b = TxnProducer(broker, "txn-100"), TxnProducer(broker, "txn-200")
    for round_ in range(6):
        put(broker, b"plain", b"p%d" % round_)
        a.send((b"shared", b"a%d" % round_), (b"a-only", b"a%d" % round_))
        idem.send((b"shared", b"i%d" % round_))
        b.send((b"shared", b"b%d" % round_))
        b.end(commit=round_ % 2 == 0)
        a.end(commit=round_ % 3 == 0)
        if round_ == 4:
            put(broker, b"plain", None)
    roll(broker)
    a.send((b"late", b"open"))  # an open transaction past the cleaned range
    put(broker, b"shared", b"after")
    before_all = latest_per_key(broker)

    clean(broker, clock)

    assert latest_per_key(broker) == before_all
    records = consume(broker)
    end = cleanable_end(broker)
    keys = [r.key for r in records if r.offset < end]
    assert len(keys) == len(set(keys)), "each key once in the cleaned range"
    aborted_values = {b"a1", b"a2", b"a4", b"a5", b"b1", b"b3", b"b5"}
    assert not aborted_values & {r.value for r in consume(broker, read_committed=False)}
    clock.advance(HOUR)
    clean(broker, clock)
    assert latest_per_key(broker) == before_all


# -- producer state ----------------------------------------------------------------------


def test_producer_state_survives_cleaning_and_a_rebuild_from_the_log(tmp_path: Path,
                                                                      clock: FakeClock) -> None:
    data = tmp_path / "data"
    with open_broker(data, clock) as broker:
        broker.create_topic(T, 1, CONFIG)
        idem = Producer(broker)
        for i in range(8):
            idem.send((b"k%d" % (i % 2), b"i%d" % i))
        txn = TxnProducer(broker, "txn-600")
        for i in range(3):
            txn.send((b"t", b"t%d" % i))
            txn.end(commit=i != 1)
        last_aborted = TxnProducer(broker, "txn-700")
        last_aborted.send((b"z", b"aborted"))
        last_aborted.end(commit=False)
        fenced = TxnProducer(broker, "txn-800")
        fenced.send((b"f", b"f0"))
        coordinator_call(broker, "admin_abort", "txn-800")  # aborted with a bumped epoch
        put(broker, b"k0", b"plain")
        put(broker, b"k1", b"plain")  # idem's last batch keeps no record
        roll(broker)
        before = on_loop(broker, lambda: plog(broker).producer_state.fingerprint())

        clean(broker, clock)
        clock.advance(HOUR)  # past every marker's delete horizon
        clean(broker, clock)

        assert on_loop(broker, lambda: plog(broker).producer_state.fingerprint()) == before
        fence = (fenced.pid, fenced.txn.epoch + 1)
        assert fence in {(h.producer_id, h.producer_epoch) for h, _ in markers(broker)}, \
            "the epoch-bumping marker stays"
        last_offset, last_sent = idem.sent[-1]
        header = next(h for h, _ in stored(broker) if h.base_offset == last_offset)
        assert (header.record_count, header.producer_id, header.base_sequence,
                header.last_offset_delta, header.producer_epoch) == (0, idem.pid, 7, 0, 0)
    with open_broker(data, clock) as broker:
        assert on_loop(broker, lambda: plog(broker).producer_state.fingerprint()) == before
    for path in partition_dir(data).glob("*" + filenames.SNAPSHOT_SUFFIX):
        path.unlink()
    with open_broker(data, clock) as broker:  # producer state rebuilt from the cleaned log
        assert on_loop(broker, lambda: plog(broker).producer_state.fingerprint()) == before
        for offset, sent in idem.sent[-5:]:
            assert broker.produce(T, 0, sent) == offset, "a retry is still a duplicate"
        end = offsets_picture(broker)[1]
        idem.broker = broker
        assert idem.send((b"k0", b"next")) == end, "the next sequence is accepted"
        assert offsets_picture(broker)[3] == end + 1, "no transaction looks open"


# -- crash safety ------------------------------------------------------------------------


def build_for_crash(data: Path, clock: FakeClock, precleaned: bool = True) -> None:
    """A log whose next round cleans every segment -- and, if ``precleaned``, merges
    the small segments an earlier round left."""
    with open_broker(data, clock) as broker:
        broker.create_topic(T, 1, {**CONFIG, "segment.bytes": 700})
        txn = TxnProducer(broker, "txn-100")
        for i in range(40):
            put(broker, b"k%d" % (i % 4), b"v%d" % i if i % 7 else None)
            if i % 5 == 0:
                txn.send((b"k%d" % (i % 3), b"t%d" % i))
                txn.end(commit=i % 10 == 0)
            if i == 19 and precleaned:
                roll(broker)
                clean(broker, clock)
        roll(broker)


def picture(broker: Broker) -> tuple:
    assert_indexes_match_the_log(broker)
    return (latest_per_key(broker), set(triples(broker)), offsets_picture(broker),
            on_loop(broker, lambda: plog(broker).producer_state.fingerprint()))


def view(data: Path, clock: FakeClock) -> tuple:
    with open_broker(data, clock) as broker:
        return picture(broker)


def leftovers(data: Path) -> list[str]:
    return [p.name for p in partition_dir(data).iterdir()
            if p.name.endswith((filenames.CLEANED_SUFFIX, filenames.SWAP_SUFFIX))]


@pytest.mark.slow
def test_a_crash_at_any_step_of_the_swap_leaves_a_valid_log(tmp_path: Path, clock: FakeClock) -> None:
    """Kill (os._exit in a forked child) at each rename of a cleaning round; the next
    open finishes or discards the swap, and the log reads as before or as cleaned."""
    original = tmp_path / "original"
    build_for_crash(original, clock)
    before = view(original, clock)
    reference = tmp_path / "reference"
    shutil.copytree(original, reference)
    with open_broker(reference, clock) as broker:
        segments = len(plog(broker).segments)
        broker.engine.call(broker.engine.jobs.compact_logs)
        assert len(plog(broker).segments) < segments, "the round merges segments"
    after = view(reference, clock)
    assert after[1] < before[1]

    outcomes = set()
    step = 0
    while True:
        step += 1
        data = tmp_path / f"crash-{step}"
        shutil.copytree(original, data)
        status = run_until_step(data, clock, step)
        assert status in (0, 17), f"child failed with status {status}"
        if status == 0:
            break
        assert_swap_files_are_in_protocol_order(data)
        with open_broker(data, clock) as broker:
            assert not leftovers(data), f"step {step}: {leftovers(data)}"
            remaining = picture(broker)
            assert remaining[0] == before[0], f"step {step}: what consumers see changed"
            assert after[1] <= remaining[1] <= before[1], f"step {step}: a record appeared or vanished"
            assert remaining[2:] == before[2:]
            outcomes.add("cleaned" if remaining[1] == after[1] else
                         "original" if remaining[1] == before[1] else "partly cleaned")
            broker.engine.call(broker.engine.jobs.compact_logs)
            assert set(triples(broker)) == after[1], f"step {step}: a later round finishes the job"
        shutil.rmtree(data)
    assert step > 8, "every rename of the protocol was a crash point"
    assert outcomes == {"original", "partly cleaned", "cleaned"}


def assert_swap_files_are_in_protocol_order(data: Path) -> None:
    """What a crash may leave: a committed ``.log.swap`` only once no file of its
    segment is still ``.cleaned``; an index ``.swap`` without a ``.log.swap`` only
    before the commit point, i.e. while the ``.log.cleaned`` is still there."""
    names = {p.name for p in partition_dir(data).iterdir()}
    for name in names:
        if not name.endswith(filenames.SWAP_SUFFIX):
            continue
        base, suffix = filenames.parse_swap_name(name)
        log_swap = filenames.offset_name(base, filenames.LOG_SUFFIX + filenames.SWAP_SUFFIX)
        cleaned = {filenames.offset_name(base, s + filenames.CLEANED_SUFFIX)
                   for s in filenames.SEGMENT_SUFFIXES}
        if log_swap in names:
            assert not cleaned & names, f"{name}: committed while {cleaned & names} were not renamed"
        else:
            assert filenames.offset_name(base, filenames.LOG_SUFFIX + filenames.CLEANED_SUFFIX) in names, (
                f"{name}: an index .swap outlived its .log.swap")


def run_until_step(data: Path, clock: FakeClock, step: int) -> int:
    """Clean ``data`` in a forked child that dies at its ``step``-th rename; its exit status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            calls = 0
            real = {"rename": os.rename, "replace": os.replace}

            def dying(name: str) -> Callable[..., None]:
                def call(*args: Any, **kwargs: Any) -> None:
                    nonlocal calls
                    calls += 1
                    if calls == step:
                        os._exit(17)
                    real[name](*args, **kwargs)
                return call
            os.rename, os.replace = dying("rename"), dying("replace")
            manager = LogManager(data, BrokerConfig().log, FakeClock(clock.now_ms()))
            for log_ in manager:
                run_inline(log_.clean(clock.now_ms()))
            run_inline(manager.checkpoint())
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_leftover_cleaned_and_swap_files_are_discarded_or_completed(tmp_path: Path,
                                                                    clock: FakeClock) -> None:
    original = tmp_path / "original"
    build_for_crash(original, clock, precleaned=False)
    before = view(original, clock)
    reference = tmp_path / "reference"
    shutil.copytree(original, reference)
    with open_broker(reference, clock) as broker:
        broker.engine.call(broker.engine.jobs.compact_logs)
        groups = [s.base_offset for s in plog(broker).segments[:-1]]
    after = view(reference, clock)
    cleaned_base = groups[0]

    def copy_cleaned(to: Path, suffixes: tuple[str, ...], extra: str) -> None:
        for suffix in suffixes:
            shutil.copy(filenames.segment_path(partition_dir(reference), cleaned_base, suffix),
                        filenames.segment_path(partition_dir(to), cleaned_base, suffix + extra))

    # .cleaned files (a crash before the commit point): deleted, the log as it was
    data = tmp_path / "cleaned"
    shutil.copytree(original, data)
    copy_cleaned(data, filenames.SEGMENT_SUFFIXES, filenames.CLEANED_SUFFIX)
    assert view(data, clock) == before and not leftovers(data)

    # index .swap files without their .log.swap: not committed, deleted
    data = tmp_path / "uncommitted"
    shutil.copytree(original, data)
    copy_cleaned(data, filenames.SEGMENT_SUFFIXES[1:], filenames.SWAP_SUFFIX)
    assert view(data, clock) == before and not leftovers(data)

    # a .log.swap (committed): it replaces the segments in its offsets
    data = tmp_path / "committed"
    shutil.copytree(original, data)
    copy_cleaned(data, filenames.SEGMENT_SUFFIXES, filenames.SWAP_SUFFIX)
    swapped = view(data, clock)
    assert not leftovers(data)
    assert swapped[0] == before[0] and swapped[2:] == before[2:]
    assert after[1] <= swapped[1] < before[1]


@pytest.mark.parametrize("failing", ["writing", "commit"])
def test_a_round_that_fails_before_the_commit_point_leaves_the_log_as_it_was(
        broker: Broker, clock: FakeClock, topic: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    for key in (b"u0", b"k", b"u1", b"u2", b"u3") + (b"k",) * 20:
        put(broker, key, b"v")
    roll(broker)
    before = stored(broker)
    if failing == "writing":  # the second batch written to the cleaned segment (run here, not
        # in the engine's worker process, where this patch would not reach)
        appended = []
        real_append = log_cleaner.LogSegment.append

        def append(self: Any, *args: Any) -> int:
            appended.append(1)
            if len(appended) == 2:
                raise OSError(28, "No space left on device")
            return real_append(self, *args)
        monkeypatch.setattr(log_cleaner.LogSegment, "append", append)
    else:  # the rename of .log.cleaned to .log.swap
        real_rename = os.rename

        def rename(source: Any, target: Any) -> None:
            if str(target).endswith(filenames.LOG_SUFFIX + filenames.SWAP_SUFFIX):
                raise OSError(28, "No space left on device")
            real_rename(source, target)
        monkeypatch.setattr(os, "rename", rename)

    if failing == "writing":
        with pytest.raises(OSError):
            clean(broker, clock)
    else:
        assert broker.engine.call(broker.engine.jobs.compact_logs) == 0  # the disk watch reports a full disk

    assert stored(broker) == before
    assert not leftovers(tmp_path / "data")
    assert plog(broker).cleaner_state.checkpoint == 0
    monkeypatch.undo()
    assert broker.engine.call(broker.engine.jobs.compact_logs) > 0
    assert {k for _, k, _ in triples(broker)} == {b"u0", b"u1", b"u2", b"u3", b"k"}


# -- the scheduled job -------------------------------------------------------------------


def test_the_cleaner_runs_every_log_cleaner_backoff_ms(broker: Broker) -> None:
    from exactly.app.engine.scheduler import start_scheduler
    assert BrokerConfig().log_cleaner_backoff_ms == 15_000
    scheduler = start_scheduler(broker.engine, broker.mirror)
    try:
        assert scheduler.get_job("log-cleaner").trigger.interval == timedelta(seconds=15)
    finally:
        scheduler.shutdown(wait=True)


def test_only_compacted_topics_are_cleaned(broker: Broker, clock: FakeClock) -> None:
    broker.create_topic("plain", 1, {"segment.bytes": 400})
    broker.create_topic(T, 1, CONFIG)
    for i in range(20):
        broker.produce("plain", 0, batch(b"k", b"v%d" % i))
        put(broker, b"k", b"v%d" % i)
    on_loop(broker, lambda: (broker.engine.partitions.log("plain", 0).roll(), plog(broker).roll()))
    plain = on_loop(broker, lambda: list(broker.engine.partitions.log("plain", 0).batches()))

    assert broker.engine.call(broker.engine.jobs.compact_logs) > 0

    assert on_loop(broker, lambda: list(broker.engine.partitions.log("plain", 0).batches())) == plain
    assert triples(broker) == [(19, b"k", b"v19")]


# -- the property ------------------------------------------------------------------------

KEYS = [b"a", b"b", b"c", b"d"]
#: the records of one batch: 1 to 3 (key, value or None) pairs
pairs = st.lists(st.tuples(st.sampled_from(KEYS), st.none() | st.binary(max_size=20)),
                 min_size=1, max_size=3)
op = st.one_of(
    st.tuples(st.just("plain"), pairs),
    st.tuples(st.just("idem"), pairs),
    st.tuples(st.just("txn"), st.integers(0, 2), pairs),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean")),
    st.tuples(st.just("advance"), st.sampled_from([1, HOUR // 2, HOUR])),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=40))
def test_cleaning_never_changes_the_latest_committed_value_of_any_key(ops: list[tuple]) -> None:
    """Random writes (plain, idempotent, transactional that commit, abort or stay
    open, tombstones) over several segments, cleaned at random points and at the
    end: a read_committed consumer ends up with the same table every time, never
    meets an aborted record, and producer state rebuilt from the log is unchanged."""
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as directory:
        data = Path(directory) / "data"
        # frozen: the clock jumps an hour with transactions open, which the broker's own
        # timeout job would abort; here only the test ends them
        with open_broker(data, clock, **FROZEN) as broker:
            broker.create_topic(T, 1, {**CONFIG, "segment.bytes": 300})
            idem = Producer(broker)
            txns = [TxnProducer(broker, f"txn-{i}") for i in range(3)]
            open_txns: set[int] = set()
            aborted_values: set[bytes] = set()
            pending: dict[int, list[bytes]] = defaultdict(list)
            all_records = {}
            for step, (kind, *args) in enumerate(ops):
                if kind in ("plain", "idem", "txn"):
                    # values are unique per step and say who wrote them
                    records = [(key, None if value is None else b"%s%d-%d-" % (kind.encode(), step, i) + value)
                               for i, (key, value) in enumerate(args[-1])]
                    if kind == "plain":
                        broker.produce(T, 0, encode_batch([SimpleRecord(v, key=k) for k, v in records]))
                    elif kind == "idem":
                        idem.send(*records)
                    else:
                        txns[args[0]].send(*records)
                        open_txns.add(args[0])
                        pending[args[0]].extend(v for _, v in records if v is not None)
                elif kind == "end" and args[0] in open_txns:
                    txns[args[0]].end(commit=args[1])
                    open_txns.discard(args[0])
                    if not args[1]:
                        aborted_values.update(pending[args[0]])
                    pending[args[0]].clear()
                elif kind == "roll":
                    roll(broker)
                elif kind == "clean":
                    expected = latest_per_key(broker)
                    clean(broker, clock)
                    assert latest_per_key(broker) == expected
                elif kind == "advance":
                    clock.advance(args[0])
                all_records.update({o: (k, v) for o, k, v in triples(broker)})
            roll(broker)
            expected = latest_per_key(broker)
            producers = on_loop(broker, lambda: plog(broker).producer_state.fingerprint())
            end = cleanable_end(broker)

            clean(broker, clock)
            clock.advance(HOUR)
            clean(broker, clock)

            assert latest_per_key(broker) == expected
            kept = triples(broker, read_committed=False)
            for offset, key, value in kept:
                assert all_records.get(offset, (key, value)) == (key, value), "records never change"
            cleaned = [(o, k, v) for o, k, v in kept if o < end]
            assert not {v for _, _, v in cleaned} & aborted_values, "no aborted record is left"
            assert len({k for _, k, _ in cleaned}) == len(cleaned), "each key at most once"
            assert on_loop(broker, lambda: plog(broker).producer_state.fingerprint()) == producers
            assert_indexes_match_the_log(broker)
        for path in partition_dir(data).glob("*" + filenames.SNAPSHOT_SUFFIX):
            path.unlink()
        with open_broker(data, clock) as broker:
            assert on_loop(broker, lambda: plog(broker).producer_state.fingerprint()) == producers
            assert latest_per_key(broker) == expected
