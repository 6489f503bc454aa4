"""Segments, offset and time lookups, fetch limits, retention and the durable high watermark."""

from __future__ import annotations

from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.storage import filenames
from exactly.storage.background import run_inline
from exactly.storage.checkpoint import read_checkpoint
from exactly.storage.clock import FakeClock
from exactly.storage.compression import Compression
from exactly.storage.errors import MessageTooLargeError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import SimpleRecord, decode_batch, encode_batch, iter_headers
from tests.conftest import data_batch
from tests.storage_log import DurableLogs

HOUR = 3600 * 1000


def segment_files(broker: Broker, topic: str, partition: int = 0) -> list[str]:
    directory = broker.engine.partitions.log(topic, partition).directory
    return sorted(p.name for p in directory.iterdir() if p.suffix == filenames.LOG_SUFFIX)


def test_segments_roll_on_segment_bytes_with_20_digit_names(broker: Broker) -> None:
    broker.create_topic("t", 1, {"segment.bytes": 1000})
    for i in range(20):
        broker.produce("t", 0, data_batch([b"x" * 100]))
    names = segment_files(broker, "t")
    assert len(names) >= 3
    assert names[0] == "00000000000000000000.log"
    assert all(len(n) == len("00000000000000000000.log") for n in names)
    log = broker.engine.partitions.log("t", 0)
    assert all(s.size <= 1000 for s in log.segments)
    bases = [int(n[:20]) for n in names]
    assert bases == sorted(bases) and bases == [s.base_offset for s in log.segments]


def test_segments_roll_on_segment_ms(broker: Broker, clock: FakeClock) -> None:
    broker.create_topic("t", 1, {"segment.ms": HOUR})
    broker.produce("t", 0, data_batch([b"a"], timestamp=clock.now_ms()))
    broker.produce("t", 0, data_batch([b"b"], timestamp=clock.now_ms()))
    assert len(segment_files(broker, "t")) == 1
    clock.advance(HOUR)
    broker.produce("t", 0, data_batch([b"c"], timestamp=clock.now_ms()))
    assert segment_files(broker, "t") == ["00000000000000000000.log", "00000000000000000002.log"]


def test_every_offset_is_found_through_the_sparse_index(broker: Broker) -> None:
    broker.create_topic("t", 1, {"index.interval.bytes": 200, "segment.bytes": 5000})
    for i in range(120):
        broker.produce("t", 0, data_batch([b"v%d-a" % i, b"v%d-b" % i]))
    log = broker.engine.partitions.log("t", 0)
    assert sum(len(s.offset_index) for s in log.segments) > 20, "the index is in use"
    for offset in range(0, 240, 7):
        r = broker.fetch("t", 0, offset, max_bytes=1)
        first = next(iter_headers(r.records))[1]
        assert first.base_offset <= offset <= first.last_offset
        values = read_records(r.records, offset, False).records
        assert values[0].offset == offset and values[0].value == b"v%d-%s" % (offset // 2, b"ab"[offset % 2:offset % 2 + 1])


def test_lookup_by_timestamp_uses_the_time_index(broker: Broker, clock: FakeClock) -> None:
    broker.create_topic("t", 1, {"index.interval.bytes": 100, "segment.bytes": 3000})
    base = clock.now_ms()
    for i in range(60):
        broker.produce("t", 0, data_batch([b"x" * 50], timestamp=base + i * 1000))
    assert broker.list_offsets("t", 0, base) == 0
    assert broker.list_offsets("t", 0, base + 30_000) == 30
    assert broker.list_offsets("t", 0, base + 30_500) == 31
    assert broker.list_offsets("t", 0, base + 10_000_000) == -1, "no record that new"
    assert broker.list_offsets("t", 0, -2) == 0 and broker.list_offsets("t", 0, -1) == 60


def test_fetch_returns_whole_batches_and_at_least_one(broker: Broker) -> None:
    broker.create_topic("t", 1)
    sizes = [len(data_batch([b"y" * 500]))] * 3
    for _ in range(3):
        broker.produce("t", 0, data_batch([b"y" * 500]))
    assert len(broker.fetch("t", 0, 0, max_bytes=10).records) == sizes[0], "one batch even if too big"
    assert len(broker.fetch("t", 0, 0, max_bytes=sizes[0] * 2 + 5).records) == sizes[0] * 2
    assert broker.fetch("t", 0, 3).records == b"", "fetching at the log end is empty"
    with pytest.raises(OffsetOutOfRangeError) as err:
        broker.fetch("t", 0, 4)
    assert err.value.code == 1
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.fetch("t", 1, 0)


def test_acks_1_waits_for_flush_ms_before_consumers_see_it(tmp_path: Path, clock: FakeClock) -> None:
    with Broker(tmp_path / "d", clock=clock, **{"log.flush.interval.ms": 3_600_000}) as broker:
        broker.create_topic("t", 1)
        broker.produce("t", 0, data_batch([b"unflushed"]), acks=1)
        r = broker.fetch("t", 0, 0)
        assert r.high_watermark == 0 and r.records == b"", "not durable, not visible"
        broker.produce("t", 0, data_batch([b"durable"]), acks=-1)
        r = broker.fetch("t", 0, 0)
        assert r.high_watermark == 2
        assert [x.value for x in read_records(r.records, 0, False).records] == [b"unflushed", b"durable"]


def test_retention_ms_deletes_old_segments_and_persists_log_start(tmp_path: Path, clock: FakeClock) -> None:
    data = tmp_path / "d"
    with Broker(data, clock=clock) as broker:
        broker.create_topic("t", 1, {"segment.bytes": 500, "retention.ms": HOUR})
        for i in range(10):
            broker.produce("t", 0, data_batch([b"z" * 200], timestamp=clock.now_ms()))
        clock.advance(2 * HOUR)
        broker.produce("t", 0, data_batch([b"new"], timestamp=clock.now_ms()))
        deleted = broker.engine.call(broker.engine.jobs.apply_retention)
        assert deleted >= 4
        start = broker.list_offsets("t", 0, -2)
        assert start == broker.engine.partitions.log("t", 0).segments[0].base_offset > 0
        assert read_checkpoint(data / filenames.LOG_START_OFFSET_CHECKPOINT)[("t", 0)] == start
        with pytest.raises(OffsetOutOfRangeError):
            broker.fetch("t", 0, 0)
    with Broker(data, clock=clock) as broker:
        assert broker.list_offsets("t", 0, -2) == start


def test_retention_bytes_keeps_the_newest_data(broker: Broker) -> None:
    broker.create_topic("t", 1, {"segment.bytes": 500, "retention.bytes": 1200})
    for i in range(20):
        broker.produce("t", 0, data_batch([b"%03d" % i + b"q" * 200]))
    broker.engine.call(broker.engine.jobs.apply_retention)
    log = broker.engine.partitions.log("t", 0)
    assert log.size_bytes >= 1200 - 500 and log.size_bytes - log.segments[0].size < 1200
    values, offset = [], log.log_start_offset
    while (r := broker.fetch("t", 0, offset)).records:  # a fetch reads from one segment
        got = read_records(r.records, offset, False)
        values += [rec.value[:3] for rec in got.records]
        offset = got.next_offset
    assert values == [b"%03d" % i for i in range(log.log_start_offset, 20)]


def test_retention_never_deletes_what_read_committed_still_needs(tmp_path: Path, clock: FakeClock) -> None:
    # the storage layer: a raw transactional producer and its marker (tests/storage_log.py)
    with DurableLogs(tmp_path / "data", clock=clock) as logs:
        logs.create_topic("t", 1, {"segment.bytes": 500, "retention.ms": HOUR})
        logs.produce("t", 0, data_batch([b"open"], 50, 0, 0, transactional=True, timestamp=clock.now_ms()))
        for i in range(10):
            logs.produce("t", 0, data_batch([b"w" * 200], timestamp=clock.now_ms()))
        clock.advance(2 * HOUR)
        assert run_inline(logs.log("t").delete_old_segments(clock.now_ms())) == 0, \
            "segment 0 holds an open transaction"
        logs.write_txn_marker("t", 0, 50, 0, 0, commit=True)
        assert run_inline(logs.log("t").delete_old_segments(clock.now_ms())) > 0


def test_records_with_ancient_timestamps_do_not_roll_a_segment_per_append(broker: Broker, clock: FakeClock) -> None:
    """segment.ms counts from when the broker made the segment: a producer whose clock
    is years behind must not turn every append into a new segment."""
    broker.create_topic("t", 1, {"segment.ms": HOUR})
    for _ in range(20):
        broker.produce("t", 0, data_batch([b"old"], timestamp=1))
    assert segment_files(broker, "t") == ["00000000000000000000.log"]
    clock.advance(HOUR)
    broker.produce("t", 0, data_batch([b"old"], timestamp=1))
    assert len(segment_files(broker, "t")) == 2, "segment.ms still rolls by the broker's clock"


@pytest.mark.parametrize("topic_codec, sent, stored", [
    ("gzip", Compression.NONE, Compression.GZIP),
    ("zstd", Compression.GZIP, Compression.ZSTD),
    ("uncompressed", Compression.LZ4, Compression.NONE),
    ("producer", Compression.SNAPPY, Compression.SNAPPY),
])
def test_compression_type_is_the_codec_batches_are_stored_in(broker: Broker, topic_codec: str,
                                                             sent: Compression, stored: Compression) -> None:
    """As Kafka's LogValidator: the records, offsets and producer fields stay; only the
    codec changes -- and an idempotent retry is still answered with the first offset."""
    broker.create_topic("t", 1, {"compression.type": topic_codec})
    producer_id = broker.engine.call(broker.engine.transactions.coordinator.init_producer_id, None, -1)[0]
    records = [SimpleRecord(b"value %d " % i * 20, key=b"k%d" % i, headers=(("h", b"x"),)) for i in range(5)]
    batch = encode_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=0, compression=sent)
    assert broker.produce("t", 0, batch) == 0
    assert broker.produce("t", 0, batch) == 0, "the retry is a duplicate whatever the codec"
    raw = broker.fetch("t", 0, 0).records
    ((_, header),) = [(offset, h) for offset, h in iter_headers(raw)]
    assert header.compression is stored
    assert (header.producer_id, header.base_sequence, header.record_count) == (producer_id, 0, 5)
    assert [(r.key, r.value, r.headers) for r in decode_batch(raw).records] == [
        (r.key, r.value, r.headers) for r in records]
    assert broker.engine.partitions.log("t", 0).log_end_offset == 5


def test_a_batch_that_outgrows_max_message_bytes_when_decompressed_is_refused(broker: Broker) -> None:
    broker.create_topic("t", 1, {"compression.type": "uncompressed", "max.message.bytes": 1000})
    squeezed = encode_batch([SimpleRecord(b"a" * 5000)], compression=Compression.GZIP)
    assert len(squeezed) < 1000
    with pytest.raises(MessageTooLargeError):
        broker.produce("t", 0, squeezed)
    assert broker.engine.partitions.log("t", 0).log_end_offset == 0
