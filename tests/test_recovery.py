"""Recovery on open, in process and deterministic (exactly/storage/partition_log.py, segment.py).

Each test builds a log on the storage layer (tests/storage_log.py: raw producer ids,
transactional batches and markers, every append fsynced), closes it, damages the data
directory the way a crash or a disk would, reopens it and compares a full
``Picture`` of the recovered partition (offsets, LSO, producer state, every
index entry, every stored batch) with the picture taken before the close or
with a recovery that had to rebuild everything from the ``.log`` files.

An unclean shutdown is simulated by removing ``.kafka_cleanshutdown`` after a
clean close; rewriting ``recovery-point-offset-checkpoint`` chooses which
segments the next start re-validates.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from exactly.app import Broker
from exactly.storage import filenames, producer_snapshot
from exactly.storage.checkpoint import write_checkpoint
from exactly.storage.clock import FakeClock
from exactly.storage.compression import Compression
from exactly.storage.errors import KafkaStorageError
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import (
    HEADER_SIZE,
    SimpleRecord,
    decode_batch,
    encode_batch,
    iter_headers,
)
from exactly.storage.txn_index import AbortedTxn
from tests.conftest import producer_id
from tests.storage_log import DurableLogs

TOPIC = "recovery"
#: small segments and a dense sparse index, so a few dozen batches make many of both
CONFIG = {"segment.bytes": 2048, "index.interval.bytes": 200}
REPO = Path(__file__).resolve().parents[1]

IDEMPOTENT = 1000
TXN_A = 2000
TXN_B = 3000
TXN_OPEN = 4000
OTHER_OPEN = 5000


# -- building logs ------------------------------------------------------------------


def open_logs(data_dir: Path, clock: FakeClock) -> DurableLogs:
    return DurableLogs(data_dir, clock=clock, **CONFIG)


class Producers:
    """Idempotent and transactional producers (epoch 0) writing to the partitions,
    each keeping its own sequence as a client would."""

    def __init__(self, logs: DurableLogs, clock: FakeClock, seed: int = 7) -> None:
        self.logs = logs
        self.clock = clock
        self.rng = random.Random(seed)
        self.sequences: dict[int, int] = defaultdict(int)
        #: every batch sent, as (base offset, producer id, sent bytes)
        self.sent: list[tuple[int, int, bytes]] = []

    def batch(self, producer_id: int, count: int, *, transactional: bool = False,
              gzip: bool = False) -> bytes:
        records = [SimpleRecord(
            value=self.rng.randbytes(self.rng.randrange(20, 120)),
            key=None if i % 3 == 2 else b"key-%d-%d" % (producer_id, i),
            headers=(("h", b"%d" % i),) if i % 2 else (),
            timestamp=self.clock.now_ms() + i) for i in range(count)]
        return encode_batch(records, producer_id=producer_id, producer_epoch=0,
                            base_sequence=self.sequences[producer_id],
                            transactional=transactional,
                            compression=Compression.GZIP if gzip else Compression.NONE)

    def send(self, producer_id: int, count: int = 1, *, transactional: bool = False,
             gzip: bool = False) -> int:
        batch = self.batch(producer_id, count, transactional=transactional, gzip=gzip)
        offset = self.logs.produce(TOPIC, 0, batch)
        self.sequences[producer_id] += count
        self.sent.append((offset, producer_id, batch))
        self.clock.advance(10)
        return offset

    def end(self, producer_id: int, commit: bool) -> int:
        offset = self.logs.write_txn_marker(TOPIC, 0, producer_id, 0, 0, commit)
        self.clock.advance(10)
        return offset


def build_mixed_log(logs: DurableLogs, clock: FakeClock) -> Producers:
    """Many segments of idempotent and transactional batches (some gzip), commits,
    aborts (some while another transaction is open, so the .txnindex LSO is not
    marker + 1) and, at the end, an open transaction followed by other data."""
    logs.create_topic(TOPIC, 1)
    p = Producers(logs, clock)
    for round_ in range(14):
        p.send(IDEMPOTENT, 3, gzip=round_ % 3 == 0)
        p.send(TXN_A, 2, transactional=True)
        p.send(IDEMPOTENT, 1)
        p.send(TXN_B, 4, transactional=True, gzip=round_ % 2 == 0)
        p.end(TXN_A, commit=round_ % 3 != 1)
        p.send(IDEMPOTENT, 2)
        p.end(TXN_B, commit=round_ % 2 == 0)
    p.send(TXN_OPEN, 2, transactional=True)
    p.send(IDEMPOTENT, 2)
    return p


# -- what a recovered log looks like ----------------------------------------------------


@dataclass(frozen=True)
class Picture:
    """Everything recovery must get right, comparable with ==."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    producers: dict[int, tuple]
    ongoing: list[tuple[int, int]]
    segments: list[tuple[int, int, int, int]]  # base, size, next offset, max timestamp
    offset_index: dict[int, list[tuple[int, int]]]
    time_index: dict[int, list[tuple[int, int]]]
    txn_index: dict[int, list[AbortedTxn]]
    batches: list[tuple[int, bytes]]


def picture(logs: DurableLogs) -> Picture:
    log = logs.log(TOPIC)
    return Picture(
        log.log_start_offset, log.log_end_offset, log.high_watermark, log.last_stable_offset,
        log.producer_state.fingerprint(), log.producer_state.ongoing_transactions(),
        [(s.base_offset, s.size, s.next_offset, s.max_timestamp) for s in log.segments],
        {s.base_offset: s.offset_index.entries() for s in log.segments},
        {s.base_offset: s.time_index.entries() for s in log.segments},
        {s.base_offset: s.txn_index.all_entries() for s in log.segments},
        [(header.base_offset, batch) for header, batch in log.batches()])


def partition_dir(data_dir: Path) -> Path:
    return data_dir / filenames.partition_dir_name(TOPIC, 0)


def segment_file(data_dir: Path, base: int, suffix: str) -> Path:
    return filenames.segment_path(partition_dir(data_dir), base, suffix)


def snapshot_offsets(data_dir: Path) -> list[int]:
    return sorted(parsed[0] for path in partition_dir(data_dir).iterdir()
                  if (parsed := filenames.parse_offset_name(path.name))
                  and parsed[1] == filenames.SNAPSHOT_SUFFIX)


def delete_snapshots(data_dir: Path) -> None:
    for offset in snapshot_offsets(data_dir):
        filenames.snapshot_path(partition_dir(data_dir), offset).unlink()


def make_unclean(data_dir: Path, recovery_point: int | None = None) -> None:
    """Make the next start an unclean one that re-validates from ``recovery_point``
    (None: the one the clean close wrote, i.e. the log end)."""
    (data_dir / filenames.CLEAN_SHUTDOWN_FILE).unlink()
    if recovery_point is not None:
        write_checkpoint(data_dir / filenames.RECOVERY_POINT_CHECKPOINT, {(TOPIC, 0): recovery_point})


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def cut(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


@pytest.fixture
def snapshot_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Offsets of the snapshot files the log reads, in order."""
    reads: list[int] = []
    real_read = producer_snapshot.read

    def spy(path: Path) -> Any:
        reads.append(filenames.parse_offset_name(Path(path).name)[0])
        return real_read(path)
    monkeypatch.setattr(producer_snapshot, "read", spy)
    return reads


@pytest.fixture
def built(tmp_path: Path, clock: FakeClock) -> tuple[Path, Picture, Producers]:
    """A closed data directory with the mixed log, and its picture before the close."""
    data_dir = tmp_path / "data"
    with open_logs(data_dir, clock) as logs:
        producers = build_mixed_log(logs, clock)
        before = picture(logs)
    assert len(before.segments) >= 8, "the workload must span many segments"
    assert any(before.txn_index.values()), "the workload must abort transactions"
    assert before.last_stable_offset < before.high_watermark == before.log_end_offset
    last_offset, _, last_sent = producers.sent[-1]
    assert before.batches[-1][0] == last_offset and len(before.batches[-1][1]) == len(last_sent)
    return data_dir, before, producers


def reopen_picture(data_dir: Path, clock: FakeClock) -> Picture:
    with open_logs(data_dir, clock) as logs:
        return picture(logs)


def all_batches(logs: DurableLogs, isolation_level: str = "read_uncommitted",
                max_bytes: int = 700) -> Iterator[tuple[int, bytes]]:
    """Fetch from offset 0 to the end, checking that every response is whole batches."""
    offset = 0
    while True:
        result = logs.fetch(TOPIC, 0, offset, max_bytes=max_bytes, isolation_level=isolation_level)
        if not result.records:
            return
        consumed = 0
        for position, header in iter_headers(result.records):
            batch = result.records[position:position + header.size]
            decode_batch(batch)
            consumed = position + header.size
            yield header.base_offset, batch
        assert consumed == len(result.records), "a fetch served a partial batch"
        offset = result.next_offset


# -- producer snapshots ------------------------------------------------------------------


@pytest.mark.parametrize("mode", [
    "clean",                     # newest snapshot, every segment trusted
    "clean-no-snapshots",        # full header replay, indexes trusted
    "unclean-mid",               # a mid-log snapshot, then replay and recovery
    "unclean-mid-no-snapshots",
    "unclean-from-zero",         # no recovery point: every segment rebuilt from its .log
])
def test_every_recovery_path_restores_the_same_log(built, clock: FakeClock, mode: str,
                                                   snapshot_reads: list[int]) -> None:
    data_dir, before, _ = built
    bases = [base for base, *_ in before.segments]
    mid = bases[len(bases) // 2] + 3
    if "no-snapshots" in mode:
        delete_snapshots(data_dir)
    if mode.startswith("unclean-mid"):
        make_unclean(data_dir, recovery_point=mid)
    elif mode == "unclean-from-zero":
        make_unclean(data_dir, recovery_point=0)
    assert reopen_picture(data_dir, clock) == before
    if mode == "clean":
        assert snapshot_reads == [before.log_end_offset]
    elif mode == "unclean-mid":
        assert snapshot_reads == [bases[len(bases) // 2]], "the snapshot at the recovery segment"
    else:
        assert snapshot_reads == []


def test_snapshot_recovery_equals_full_scan_on_a_copy(built, clock: FakeClock, tmp_path: Path) -> None:
    data_dir, before, _ = built
    full_scan = tmp_path / "full-scan"
    shutil.copytree(data_dir, full_scan)
    delete_snapshots(full_scan)
    make_unclean(full_scan, recovery_point=0)
    with open_logs(data_dir, clock) as a, open_logs(full_scan, clock) as b:
        pa, pb = picture(a), picture(b)
        assert pa == pb == before
        assert pa.last_stable_offset == dict((pid, first) for pid, first in pa.ongoing)[TXN_OPEN]


@pytest.mark.parametrize("damage", ["flip", "truncate", "version", "empty"])
@pytest.mark.parametrize("corrupt_count", [1, 2])
def test_corrupt_newest_snapshots_are_deleted_and_an_older_one_used(
        built, clock: FakeClock, snapshot_reads: list[int], damage: str, corrupt_count: int) -> None:
    data_dir, before, _ = built
    offsets = snapshot_offsets(data_dir)
    assert offsets[-1] == before.log_end_offset
    doomed = offsets[-corrupt_count:]
    for offset in doomed:
        path = filenames.snapshot_path(partition_dir(data_dir), offset)
        size = path.stat().st_size
        if damage == "flip":
            flip_byte(path, size - 5)
        elif damage == "truncate":
            cut(path, size - 7)
        elif damage == "version":
            flip_byte(path, 1)
        else:
            cut(path, 0)
    with open_logs(data_dir, clock) as logs:
        assert picture(logs) == before
        remaining = snapshot_offsets(data_dir)
        for offset in doomed:
            assert offset not in remaining, f"corrupt snapshot {offset} was not deleted"
    used = offsets[-corrupt_count - 1]
    assert snapshot_reads == list(reversed(doomed)) + [used]


def test_snapshot_beyond_the_truncated_log_end_is_ignored(
        built, clock: FakeClock, tmp_path: Path, snapshot_reads: list[int]) -> None:
    data_dir, before, producers = built
    last_offset, last_pid, last_batch = producers.sent[-1]
    assert last_pid == IDEMPOTENT and last_offset == before.batches[-1][0]
    last_base = before.segments[-1][0]
    log_path = segment_file(data_dir, last_base, filenames.LOG_SUFFIX)
    cut(log_path, log_path.stat().st_size - len(last_batch) // 2)
    make_unclean(data_dir)
    full_scan = tmp_path / "full-scan"
    shutil.copytree(data_dir, full_scan)
    delete_snapshots(full_scan)
    assert before.log_end_offset in snapshot_offsets(data_dir)

    with open_logs(data_dir, clock) as logs, open_logs(full_scan, FakeClock(clock.now_ms())) as scan:
        recovered = picture(logs)
        assert recovered.log_end_offset == last_offset
        assert recovered.batches == before.batches[:-1]
        assert recovered.producers == picture(scan).producers
        assert recovered.producers != before.producers
        assert before.log_end_offset not in snapshot_offsets(data_dir)
        assert before.log_end_offset not in snapshot_reads
        # the producer's lost batch is not a duplicate: resending it appends it again
        assert logs.produce(TOPIC, 0, last_batch) == last_offset
        assert logs.log(TOPIC).log_end_offset == before.log_end_offset


def test_stray_snapshot_above_the_log_end_is_ignored_and_deleted(
        built, clock: FakeClock, snapshot_reads: list[int]) -> None:
    data_dir, before, _ = built
    directory = partition_dir(data_dir)
    stray = before.log_end_offset + 100
    shutil.copy(filenames.snapshot_path(directory, before.log_end_offset),
                filenames.snapshot_path(directory, stray))
    assert reopen_picture(data_dir, clock) == before
    assert stray not in snapshot_reads
    assert stray not in snapshot_offsets(data_dir)


# -- indexes -----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX])
@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_index_cut_mid_entry_after_a_clean_shutdown_is_rebuilt(
        built, clock: FakeClock, suffix: str, which: str) -> None:
    data_dir, before, _ = built
    base = _pick_segment(before, which, suffix)
    path = segment_file(data_dir, base, suffix)
    cut(path, path.stat().st_size - 3)
    _assert_rebuilt(data_dir, clock, before, base, suffix)


@pytest.mark.parametrize("suffix", [filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX])
@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_missing_index_is_rebuilt(built, clock: FakeClock, suffix: str, which: str) -> None:
    data_dir, before, _ = built
    base = _pick_segment(before, which, suffix)
    segment_file(data_dir, base, suffix).unlink()
    _assert_rebuilt(data_dir, clock, before, base, suffix)


def _pick_segment(before: Picture, which: str, suffix: str) -> int:
    entries = before.offset_index if suffix == filenames.INDEX_SUFFIX else before.time_index
    with_entries = [base for base, *_ in before.segments if len(entries[base]) >= 2]
    assert len(with_entries) >= 3
    return {"first": with_entries[0], "middle": with_entries[len(with_entries) // 2],
            "last": with_entries[-1]}[which]


def _assert_rebuilt(data_dir: Path, clock: FakeClock, before: Picture, base: int, suffix: str) -> None:
    entry_size = 8 if suffix == filenames.INDEX_SUFFIX else 12
    with open_logs(data_dir, clock) as logs:
        assert picture(logs) == before
        path = segment_file(data_dir, base, suffix)
        expected = before.offset_index if suffix == filenames.INDEX_SUFFIX else before.time_index
        assert path.stat().st_size == entry_size * len(expected[base])
        assert list(all_batches(logs)) == before.batches


# -- torn tails ----------------------------------------------------------------------------


TORN_TAILS = ["garbage", "zeros", "half-batch", "header-only", "flip-in-records", "flip-crc",
              "longer-batch-length", "valid-header-bad-crc", "stale-batch"]


@pytest.mark.parametrize("damage", TORN_TAILS)
def test_torn_tail_after_an_unclean_shutdown_is_truncated(
        built, clock: FakeClock, damage: str) -> None:
    data_dir, before, producers = built
    last_offset, _, last_batch = producers.sent[-1]
    last_base = before.segments[-1][0]
    log_path = segment_file(data_dir, last_base, filenames.LOG_SUFFIX)
    size = log_path.stat().st_size
    last_position = size - len(last_batch)
    rng = random.Random(damage)
    keeps_last = damage in ("garbage", "zeros", "valid-header-bad-crc", "stale-batch")
    if damage == "garbage":
        with open(log_path, "ab") as f:
            f.write(rng.randbytes(300))
    elif damage == "zeros":
        with open(log_path, "ab") as f:
            f.write(bytes(4096))
    elif damage == "half-batch":
        cut(log_path, last_position + len(last_batch) // 2)
    elif damage == "header-only":
        cut(log_path, last_position + HEADER_SIZE)
    elif damage == "flip-in-records":
        flip_byte(log_path, last_position + HEADER_SIZE + 5)
    elif damage == "flip-crc":
        flip_byte(log_path, last_position + 18)
    elif damage == "longer-batch-length":
        flip_byte(log_path, last_position + 9)  # BatchLength grows past the end of the file
    elif damage == "stale-batch":  # a whole, valid batch whose offsets go backwards
        with open(log_path, "ab") as f:
            f.write(before.batches[-3][1])
    else:  # a whole header whose batch does not match its CRC
        bogus = bytearray(last_batch[:HEADER_SIZE + 40])
        bogus[0:8] = (before.log_end_offset).to_bytes(8, "big")
        bogus[8:12] = (len(bogus) - 12).to_bytes(4, "big")
        with open(log_path, "ab") as f:
            f.write(bytes(bogus))
    damaged_size = log_path.stat().st_size
    make_unclean(data_dir)

    with open_logs(data_dir, clock) as logs:
        log = logs.log(TOPIC)
        kept = before.batches if keeps_last else before.batches[:-1]
        end = before.log_end_offset if keeps_last else last_offset
        expected_size = size if keeps_last else last_position
        assert log.truncated_bytes == damaged_size - expected_size
        assert log_path.stat().st_size == expected_size
        recovered = picture(logs)
        assert recovered.batches == kept
        if keeps_last:
            assert recovered == before
        assert log.log_end_offset == log.high_watermark == end
        assert list(all_batches(logs)) == kept
        # appending carries on where the valid log ends, with the right next sequence
        if not keeps_last:
            assert logs.produce(TOPIC, 0, last_batch) == last_offset
        producers.logs = logs
        offset = producers.send(IDEMPOTENT, 2)
        assert offset == before.log_end_offset
        assert [o for o, _ in all_batches(logs)][-1] == offset


def test_corrupt_batch_mid_log_truncates_there_and_drops_the_later_segments(
        built, clock: FakeClock, tmp_path: Path) -> None:
    data_dir, before, _ = built
    bases = [base for base, *_ in before.segments]
    victim_base = bases[len(bases) // 2]
    victim_batches = [(o, b) for o, b in before.batches
                      if victim_base <= o < bases[len(bases) // 2 + 1]]
    victim_offset, victim = victim_batches[len(victim_batches) // 2]
    position = sum(len(b) for o, b in victim_batches if o < victim_offset)
    flip_byte(segment_file(data_dir, victim_base, filenames.LOG_SUFFIX), position + HEADER_SIZE + 3)
    make_unclean(data_dir, recovery_point=victim_base + 1)
    full_scan = tmp_path / "full-scan"
    shutil.copytree(data_dir, full_scan)
    delete_snapshots(full_scan)
    (full_scan / filenames.RECOVERY_POINT_CHECKPOINT).unlink()  # rebuild every segment

    with open_logs(data_dir, clock) as logs, open_logs(full_scan, clock) as scan:
        recovered = picture(logs)
        assert recovered.log_end_offset == victim_offset
        assert recovered.batches == [(o, b) for o, b in before.batches if o < victim_offset]
        assert [base for base, *_ in recovered.segments] == [b for b in bases if b <= victim_base]
        assert logs.log(TOPIC).truncated_bytes == len(victim) + sum(
            len(b) for o, b in victim_batches if o > victim_offset)
        assert recovered == picture(scan)
        assert max(snapshot_offsets(data_dir)) <= victim_offset
        for base in bases:
            if base > victim_base:
                assert not segment_file(data_dir, base, filenames.LOG_SUFFIX).exists()
    # the truncated log takes appends again, from where it now ends
    with open_logs(data_dir, clock) as logs:
        assert logs.log(TOPIC).log_end_offset == victim_offset
        p = Producers(logs, clock)
        p.sequences[IDEMPOTENT] = logs.log(TOPIC).producer_state.producers[IDEMPOTENT].last_seq + 1
        assert p.send(IDEMPOTENT, 2) == victim_offset


def test_recovery_point_at_a_segment_boundary_revalidates_the_segment_below(
        built, clock: FakeClock) -> None:
    """A flush syncs only the active segment's .log; when the recovery point is exactly
    the next segment's base, the segment below may have lost unsynced index entries."""
    data_dir, before, _ = built
    bases = [base for base, *_ in before.segments]
    below, boundary = bases[-3], bases[-2]
    entries = before.offset_index[below]
    assert len(entries) >= 2
    index = segment_file(data_dir, below, filenames.INDEX_SUFFIX)
    cut(index, 8 * (len(entries) - 2))  # whole entries lost, as a killed process loses its buffer
    time_index = segment_file(data_dir, below, filenames.TIME_INDEX_SUFFIX)
    cut(time_index, 0)
    make_unclean(data_dir, recovery_point=boundary)
    assert reopen_picture(data_dir, clock) == before


def test_appends_after_a_clean_restart_index_what_a_rebuild_indexes(
        tmp_path: Path, clock: FakeClock) -> None:
    """The sparse index is derived data: a segment appended to across restarts must
    hold the entries a rebuild from its .log gives (index.interval.bytes counts on)."""
    data_dir = tmp_path / "data"
    with open_logs(data_dir, clock) as logs:
        logs.create_topic(TOPIC, 1)
        p = Producers(logs, clock)
    for restart in range(6):
        with open_logs(data_dir, clock) as logs:
            p.logs = logs
            for _ in range(restart + 1):
                p.send(IDEMPOTENT, 2)
            written = picture(logs)
    assert len(written.segments) >= 2 and len(written.offset_index[0]) >= 2
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(data_dir, rebuilt)
    delete_snapshots(rebuilt)
    make_unclean(rebuilt, recovery_point=0)
    assert reopen_picture(rebuilt, clock) == written


def test_rolled_segments_have_their_indexes_on_disk_once_flushed(tmp_path: Path, clock: FakeClock) -> None:
    """What a recovery point past a rolled segment promises: its index files are
    complete on disk, not only in the process's buffers."""
    data_dir = tmp_path / "data"
    with open_logs(data_dir, clock) as logs:
        build_mixed_log(logs, clock)
        log = logs.log(TOPIC)
        for segment in log.segments[:-1]:
            assert segment.offset_index.entries()
            assert segment_file(data_dir, segment.base_offset, filenames.INDEX_SUFFIX).stat().st_size \
                == 8 * len(segment.offset_index), f"segment {segment.base_offset}: .index not flushed"
            assert segment_file(data_dir, segment.base_offset, filenames.TIME_INDEX_SUFFIX).stat().st_size \
                == 12 * len(segment.time_index)
            assert log.recovery_point > segment.base_offset


# -- the aborted-transaction index ----------------------------------------------------------


@pytest.mark.parametrize("damage", ["deleted", "garbage", "bogus-entry"])
def test_unclean_restart_rebuilds_the_txn_index_of_recovered_segments(
        built, clock: FakeClock, damage: str) -> None:
    data_dir, before, _ = built
    with_aborts = [base for base, entries in before.txn_index.items() if entries]
    recover_from = with_aborts[len(with_aborts) // 2]
    for base, *_ in before.segments:
        if base < recover_from:
            continue
        path = segment_file(data_dir, base, filenames.TXN_INDEX_SUFFIX)
        if damage == "deleted":
            path.unlink(missing_ok=True)
        elif damage == "garbage":
            with open(path, "ab") as f:
                f.write(b"\x07" * 50)
        else:
            with open(path, "ab") as f:
                f.write(AbortedTxn(TXN_A, base, base + 10**6, base).to_bytes())
    make_unclean(data_dir, recovery_point=recover_from)
    recovered = reopen_picture(data_dir, clock)
    assert recovered.txn_index == before.txn_index
    assert recovered == before
    for base, entries in before.txn_index.items():
        path = segment_file(data_dir, base, filenames.TXN_INDEX_SUFFIX)
        assert (path.stat().st_size if path.exists() else 0) == 34 * len(entries)


@pytest.mark.parametrize("restart", ["clean", "unclean", "unclean-no-snapshots", "unclean-from-zero"])
def test_open_transaction_keeps_the_lso_across_a_restart_and_a_later_abort_is_indexed(
        tmp_path: Path, clock: FakeClock, restart: str) -> None:
    data_dir = tmp_path / "data"
    with open_logs(data_dir, clock) as logs:
        logs.create_topic(TOPIC, 1)
        p = Producers(logs, clock)
        for _ in range(6):
            p.send(IDEMPOTENT, 4)
        first = p.send(TXN_OPEN, 2, transactional=True)
        for _ in range(12):
            p.send(IDEMPOTENT, 3)
        p.send(TXN_OPEN, 3, transactional=True)
        other_first = p.send(OTHER_OPEN, 1, transactional=True)
        for _ in range(12):
            p.send(IDEMPOTENT, 3)
        before = picture(logs)
        assert before.last_stable_offset == first
        assert logs.list_offsets(TOPIC, 0, -1, "read_committed") == first
    assert len(before.segments) >= 3, "the open transaction must span segments"

    if restart != "clean":
        make_unclean(data_dir, recovery_point=0 if restart == "unclean-from-zero" else None)
    if restart == "unclean-no-snapshots":
        delete_snapshots(data_dir)
    with open_logs(data_dir, clock) as logs:
        p.logs = logs
        assert picture(logs) == before
        assert logs.list_offsets(TOPIC, 0, -1, "read_committed") == first
        assert all(offset < first for offset, _ in all_batches(logs, "read_committed"))

        marker = p.end(TXN_OPEN, commit=False)
        log = logs.log(TOPIC)
        assert log.active_segment.txn_index.all_entries()[-1] == AbortedTxn(
            producer_id=TXN_OPEN, first_offset=first, last_offset=marker,
            last_stable_offset=other_first)
        assert log.last_stable_offset == other_first
        p.end(OTHER_OPEN, commit=True)
        assert log.last_stable_offset == log.high_watermark == log.log_end_offset
        after_markers = picture(logs)

    # the abort is in the .txnindex on disk, and a consumer drops the aborted records
    with open_logs(data_dir, clock) as logs:
        assert picture(logs) == after_markers
        committed, aborted = consume(logs, read_committed=True)
        assert (TXN_OPEN, first) in aborted
        assert not [r for r in committed if r.producer_id == TXN_OPEN]
        assert [r for r in committed if r.producer_id == OTHER_OPEN]
        everything, _ = consume(logs, read_committed=False)
        assert [r for r in everything if r.producer_id == TXN_OPEN]


def consume(logs: DurableLogs, read_committed: bool) -> tuple[list, list[tuple[int, int]]]:
    """Every record a consumer at this isolation level sees, and the aborted
    transactions the fetches reported."""
    level = "read_committed" if read_committed else "read_uncommitted"
    records, aborted, offset = [], [], 0
    while True:
        result = logs.fetch(TOPIC, 0, offset, max_bytes=1 << 20, isolation_level=level)
        if not result.records:
            return records, aborted
        aborted.extend(result.aborted_transactions or [])
        read = read_records(result.records, offset, read_committed, result.aborted_transactions or [])
        records.extend(read.records)
        offset = read.next_offset


# -- the data directory lock ----------------------------------------------------------------


def test_a_second_broker_on_the_same_directory_is_refused_until_the_first_closes(
        tmp_path: Path, clock: FakeClock) -> None:
    data_dir = tmp_path / "data"
    first = Broker(data_dir, clock=clock)
    try:
        first.create_topic(TOPIC, 1)
        Producers(first, clock).send(producer_id(first), 2)  # an id the broker handed out
        with pytest.raises(KafkaStorageError) as refused:
            open_logs(data_dir, clock)
        assert type(refused.value) is not KafkaStorageError, "expected a specific subclass"
        message = str(refused.value)
        assert str(data_dir) in message and "in use" in message
        # another process is refused too, and gets the same message
        child = subprocess.run(
            [sys.executable, "-c", _OPEN_IN_CHILD, str(data_dir)], cwd=REPO,
            capture_output=True, text=True, timeout=60)
        assert child.returncode == 3, child.stderr
        assert "in use" in child.stdout
        # the refused attempts changed nothing
        assert first.list_offsets(TOPIC, 0, -1) == 2
    finally:
        first.close()
    assert (data_dir / filenames.CLEAN_SHUTDOWN_FILE).exists()
    with Broker(data_dir, clock=clock) as again:
        assert again.list_offsets(TOPIC, 0, -1) == 2
    child = subprocess.run([sys.executable, "-c", _OPEN_IN_CHILD, str(data_dir)], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr


def test_a_failed_open_releases_the_directory_lock(tmp_path: Path, clock: FakeClock) -> None:
    data_dir = tmp_path / "data"
    with Broker(data_dir, clock=clock) as broker:
        broker.create_topic(TOPIC, 1)
    topics = data_dir / "topics.json"
    good = topics.read_text()
    topics.write_text("{not json")
    with pytest.raises(KafkaStorageError, match="topic registry"):
        Broker(data_dir, clock=clock)
    topics.write_text(good)
    Broker(data_dir, clock=clock).close()


def test_a_corrupt_recovery_point_checkpoint_recovers_every_segment(built, clock: FakeClock) -> None:
    data_dir, before, _ = built
    make_unclean(data_dir)
    (data_dir / filenames.RECOVERY_POINT_CHECKPOINT).write_text(f"0\n1\n{TOPIC} 0 12x\n")
    assert reopen_picture(data_dir, clock) == before


_OPEN_IN_CHILD = """
import sys
from exactly import Broker
from exactly.storage.errors import KafkaStorageError
try:
    Broker(sys.argv[1]).close()
except KafkaStorageError as e:
    print(type(e).__name__, e)
    sys.exit(3)
"""
