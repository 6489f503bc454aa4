"""ListOffsets by time at the storage layer: the first record at or after a time and the
record with the largest timestamp, found through the sparse time and offset indexes,
checked against a brute-force walk of every record of the log -- across segment rolls,
compression, transactions and their markers, a moved log start and a log reopened after
a clean or an unclean shutdown."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.storage.clock import FakeClock
from exactly.storage.compression import Compression
from exactly.storage.partition_log import PartitionLog
from exactly.storage.record_batch import SimpleRecord, decode_batch, encode_batch, record_times
from tests.storage_log import DurableLogs
from tests.test_record_batch_properties import arb_encoded_batch

T = "t"
PID = 1000
#: the time the markers are written at, among the records' timestamps (0..60)
MARKER_TIME = 30


def test_a_time_inside_a_batch_finds_its_record_not_the_batch(tmp_path: Path) -> None:
    """librdkafka's test 0054: one batch of three records; Kafka answers offset 1 for
    the second record's time, where the batch's base offset (0) made a consumer
    seeking by time read the first record again."""
    with DurableLogs(tmp_path) as logs:
        logs.create_topic(T)
        logs.produce(T, 0, encode_batch([SimpleRecord(b"a", timestamp=1234), SimpleRecord(b"b", timestamp=999999999999),
                                         SimpleRecord(b"c", timestamp=1500000000000)]))
        log = logs.log(T)
        assert log.offset_for_timestamp(999999999999) == (1, 999999999999)
        assert log.offset_for_timestamp(1235) == (1, 999999999999)
        assert log.offset_for_timestamp(1000000000000) == (2, 1500000000000)
        assert log.offset_for_timestamp(1500000000001) is None
        assert log.offset_of_max_timestamp() == (2, 1500000000000)


@settings(max_examples=200, deadline=None)
@given(batch=arb_encoded_batch)
def test_the_lean_walk_reads_every_records_offset_and_time_as_the_decoder_does(batch: bytes) -> None:
    """``record_times`` steps over keys, values and headers; what it reads is what
    ``decode_batch`` decodes, compressed or not, LogAppendTime or not."""
    assert list(record_times(batch)) == [(r.offset, r.timestamp) for r in decode_batch(batch).records]


def records(log: PartitionLog) -> Iterator[tuple[int, int]]:
    """``(offset, timestamp)`` of every record stored, markers included, walked batch by batch."""
    for _, data in log.batches(log.segments[0].base_offset):
        yield from ((r.offset, r.timestamp) for r in decode_batch(data).records)


def first_at_or_after(log: PartitionLog, timestamp: int, upper: int) -> tuple[int, int] | None:
    return next(((o, ts) for o, ts in records(log) if ts >= timestamp and log.log_start_offset <= o < upper), None)


def first_of_max(log: PartitionLog, upper: int) -> tuple[int, int] | None:
    stored = list(records(log))
    if not stored:
        return None
    top = max(ts for _, ts in stored)
    found = next((o, ts) for o, ts in stored if ts == top)
    return found if found[0] < upper else None


step = st.one_of(
    st.tuples(st.sampled_from(["data", "transactional"]), st.lists(st.integers(0, 60), min_size=1, max_size=6),
              st.sampled_from([Compression.NONE, Compression.GZIP])),
    st.tuples(st.sampled_from(["commit", "abort"]), st.just([]), st.just(Compression.NONE)))


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(step, max_size=25), index_interval=st.sampled_from([1, 120, 4096]),
       segment_bytes=st.sampled_from([300, 900, 1 << 20]), log_start=st.integers(0, 40),
       reopen=st.sampled_from([None, "clean", "unclean"]),
       append_time=st.booleans(), targets=st.lists(st.integers(0, 65), min_size=1, max_size=12))
def test_lookups_by_time_answer_what_a_walk_of_every_record_answers(
        steps: list, index_interval: int, segment_bytes: int, log_start: int, reopen: str | None, append_time: bool,
        targets: list[int]) -> None:
    config = {"index.interval.bytes": index_interval, "segment.bytes": segment_bytes,
              "message.timestamp.type": "LogAppendTime" if append_time else "CreateTime"}
    with tempfile.TemporaryDirectory() as directory:
        clock = FakeClock(MARKER_TIME)
        logs = DurableLogs(directory, clock=clock)
        try:
            logs.create_topic(T, 1, config)
            sequence, open_txn = 0, False
            for kind, timestamps, compression in steps:
                batch = [SimpleRecord(b"v", key=b"k", timestamp=ts) for ts in timestamps]
                if kind == "data":
                    logs.produce(T, 0, encode_batch(batch, compression=compression))
                elif kind == "transactional":
                    logs.produce(T, 0, encode_batch(batch, producer_id=PID, producer_epoch=0, base_sequence=sequence,
                                                    transactional=True, compression=compression))
                    sequence, open_txn = sequence + len(batch), True
                elif open_txn:
                    logs.write_txn_marker(T, 0, PID, 0, 0, commit=kind == "commit")
                    open_txn = False
                clock.advance(1)
            log = logs.log(T)
            log.delete_records(min(log_start, log.high_watermark))
            if reopen is not None:  # clean: the indexes are trusted; unclean: rebuilt by recovery
                logs.logs.close(clean=reopen == "clean")
                logs = DurableLogs(directory, clock=clock)
                log = logs.log(T)
            for committed in (False, True):
                upper = log.last_stable_offset if committed else log.high_watermark
                for target in targets:
                    assert log.offset_for_timestamp(target, committed) == first_at_or_after(log, target, upper), target
                assert log.offset_of_max_timestamp(committed) == first_of_max(log, upper)
        finally:
            logs.close()
