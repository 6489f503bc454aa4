"""Producer-state snapshots: Kafka's version-1 layout, round trips, corruption, atomic writes.

The layout checks use hand-written bytes and a Kafka-style reader written here
from the docstring's grammar, not the module's own structs, so a mistake in
the module cannot be mirrored by the test.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.storage import atomic_file, producer_snapshot
from exactly.storage.producer_snapshot import CorruptSnapshotError, decode, encode
from exactly.storage.producer_state import BATCHES_TO_RETAIN, BatchMetadata, ProducerStateEntry
from exactly.storage.record_batch import MAX_SEQUENCE

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
ENTRY_SIZE = 46


def entry(pid: int, epoch: int, batches: list[tuple[int, int, int]] = (), *, timestamp: int = 1234,
          coordinator_epoch: int = -1, txn: int | None = None) -> ProducerStateEntry:
    """``batches`` as (last seq, last offset, offset delta), oldest first."""
    return ProducerStateEntry(
        pid, epoch, coordinator_epoch=coordinator_epoch, last_timestamp=timestamp,
        current_txn_first_offset=txn,
        batches=deque((BatchMetadata(*b) for b in batches), maxlen=BATCHES_TO_RETAIN))


def keys(entries: list[ProducerStateEntry]) -> list[tuple]:
    return [e.key() for e in entries]


def kafka_read(data: bytes) -> dict[int, tuple]:
    """What Kafka's ProducerStateManager.readSnapshot + loadProducerEntry keep:
    each 46-byte entry in order, the last one per producer id winning."""
    version, crc, count = struct.unpack_from(">hIi", data)
    assert version == 1
    assert crc == crc32c.crc32c(data[6:])
    assert len(data) == 10 + count * ENTRY_SIZE
    producers = {}
    for i in range(count):
        row = struct.unpack_from(">qhiqiqiq", data, 10 + i * ENTRY_SIZE)
        producers[row[0]] = row[1:]
    return producers


# --- byte layout ----------------------------------------------------------------------------


def test_crc32c_is_castagnoli() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_worked_example_byte_by_byte() -> None:
    """The docstring's example: producer 7, epoch 0, sequences 0..2 at offsets 10..12."""
    body = bytes.fromhex(
        "00000001"            # ProducerEntries: 1
        "0000000000000007"    # ProducerId 7
        "0000"                # Epoch 0
        "00000002"            # LastSequence 2
        "000000000000000c"    # LastOffset 12
        "00000002"            # OffsetDelta 2
        "00000000000004d2"    # Timestamp 1234
        "ffffffff"            # CoordinatorEpoch -1
        "ffffffffffffffff"    # CurrentTxnFirstOffset -1: no open transaction
    )
    expected = bytes.fromhex("0001") + crc32c.crc32c(body).to_bytes(4, "big") + body
    assert len(expected) == 10 + 46
    data = encode([entry(7, 0, [(2, 12, 2)])])
    assert data == expected
    assert keys(decode(data)) == keys([entry(7, 0, [(2, 12, 2)])])


def test_open_transaction_and_retained_batches_repeat_the_producer_fields() -> None:
    data = encode([entry(9, 3, [(4, 20, 1), (7, 25, 2)], timestamp=-5, coordinator_epoch=6, txn=19)])
    common = bytes.fromhex("fffffffffffffffb" "00000006" "0000000000000013")
    body = (bytes.fromhex("00000002")
            + bytes.fromhex("0000000000000009" "0003" "00000004" "0000000000000014" "00000001") + common
            + bytes.fromhex("0000000000000009" "0003" "00000007" "0000000000000019" "00000002") + common)
    assert data == bytes.fromhex("0001") + crc32c.crc32c(body).to_bytes(4, "big") + body


def test_producer_without_batches_is_one_entry_with_no_sequence() -> None:
    """Kafka writes lastSeq -1, lastOffset -1, offsetDelta 0 for an empty entry
    (e.g. a producer known only from a marker)."""
    data = encode([entry(5, 2, coordinator_epoch=3)])
    assert kafka_read(data) == {5: (2, -1, -1, 0, 1234, 3, -1)}
    (back,) = decode(data)
    assert back.key() == entry(5, 2, coordinator_epoch=3).key()
    assert not back.batches


def test_empty_snapshot() -> None:
    data = encode([])
    assert data == bytes.fromhex("0001") + crc32c.crc32c(b"\0\0\0\0").to_bytes(4, "big") + b"\0\0\0\0"
    assert decode(data) == []


def test_kafka_style_reader_sees_each_producers_newest_batch() -> None:
    entries = [
        entry(1, 0, [(i, 10 * i + 3, 1) for i in range(5)], timestamp=77),
        entry(2, 4, [(0, 2, 0)], coordinator_epoch=1, txn=2),
        entry(3, 1),
    ]
    data = encode(entries)
    assert len(data) == 10 + (5 + 1 + 1) * 46
    assert kafka_read(data) == {
        1: (0, 4, 43, 1, 77, -1, -1),
        2: (4, 0, 2, 0, 1234, 1, 2),
        3: (1, -1, -1, 0, 1234, -1, -1),
    }


# --- round trip ----------------------------------------------------------------------------

arb_batch = st.builds(BatchMetadata,
                      last_seq=st.integers(0, MAX_SEQUENCE),
                      last_offset=st.integers(0, INT64_MAX),
                      offset_delta=st.integers(0, INT32_MAX))


@st.composite
def arb_entries(draw: st.DrawFn) -> list[ProducerStateEntry]:
    pids = draw(st.lists(st.integers(0, INT64_MAX), max_size=6, unique=True))
    return [ProducerStateEntry(
        pid,
        draw(st.integers(0, 2**15 - 1)),
        coordinator_epoch=draw(st.just(-1) | st.integers(0, INT32_MAX)),
        last_timestamp=draw(st.just(-1) | st.integers(0, INT64_MAX)),
        current_txn_first_offset=draw(st.none() | st.integers(0, INT64_MAX)),
        batches=deque(draw(st.lists(arb_batch, max_size=BATCHES_TO_RETAIN)),
                      maxlen=BATCHES_TO_RETAIN),
    ) for pid in pids]


@settings(max_examples=200, deadline=None)
@given(arb_entries())
def test_round_trip(entries: list[ProducerStateEntry]) -> None:
    data = encode(entries)
    rows = sum(max(1, len(e.batches)) for e in entries)
    assert len(data) == 10 + rows * 46
    back = decode(data)
    assert keys(back) == keys(entries)
    for e in back:
        assert e.batches.maxlen == BATCHES_TO_RETAIN
    assert encode(back) == data
    newest = kafka_read(data)
    for e in entries:
        assert newest[e.producer_id][1] == e.last_seq
        assert newest[e.producer_id][2] == e.last_data_offset


# --- corruption ----------------------------------------------------------------------------

SAMPLE = [entry(1, 0, [(0, 0, 0), (3, 4, 2)], coordinator_epoch=2, txn=3), entry(2, 5)]


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_any_single_flipped_byte_is_corrupt(mask: int) -> None:
    data = encode(SAMPLE)
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= mask
        with pytest.raises(CorruptSnapshotError):
            decode(bytes(damaged), "00000000000000000005.snapshot")


@pytest.mark.parametrize("version", [0, 2, -1, 0x0100])
def test_unknown_version_is_corrupt(version: int) -> None:
    data = bytearray(encode(SAMPLE))
    struct.pack_into(">h", data, 0, version)  # the CRC does not cover it: only the version is wrong
    with pytest.raises(CorruptSnapshotError, match="version"):
        decode(bytes(data))


def test_every_truncation_is_corrupt() -> None:
    data = encode(SAMPLE)
    for size in range(len(data)):
        with pytest.raises(CorruptSnapshotError):
            decode(data[:size])


def with_body(body: bytes) -> bytes:
    """A version-1 file around ``body`` with a CRC that matches it."""
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


@pytest.mark.parametrize("count", [0, 2, 4, -1, INT32_MAX])
def test_count_that_does_not_fit_the_length_is_corrupt_even_under_a_good_crc(count: int) -> None:
    data = encode(SAMPLE)  # 3 entries
    body = struct.pack(">i", count) + data[10:]
    with pytest.raises(CorruptSnapshotError):
        decode(with_body(body))


def test_trailing_bytes_are_corrupt_even_under_a_good_crc() -> None:
    data = encode(SAMPLE)
    with pytest.raises(CorruptSnapshotError):
        decode(with_body(data[6:] + b"\0"))
    with pytest.raises(CorruptSnapshotError):
        decode(with_body(data[6:] + bytes(46)))


def test_corrupt_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000007.snapshot"
    path.write_bytes(encode(SAMPLE)[:-1])
    with pytest.raises(CorruptSnapshotError) as caught:
        producer_snapshot.read(path)
    assert caught.value.path == path
    assert str(path) in str(caught.value)


def test_missing_file_is_corrupt(tmp_path: Path) -> None:
    with pytest.raises(CorruptSnapshotError):
        producer_snapshot.read(tmp_path / "00000000000000000007.snapshot")


# --- writing ----------------------------------------------------------------------------------


def test_write_then_read(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000012.snapshot"
    producer_snapshot.write(path, SAMPLE)
    assert path.read_bytes() == encode(SAMPLE)
    assert keys(producer_snapshot.read(path)) == keys(SAMPLE)
    assert sorted(os.listdir(tmp_path)) == [path.name]


def test_write_replaces_the_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000012.snapshot"
    producer_snapshot.write(path, SAMPLE)
    (tmp_path / (path.name + ".tmp")).write_bytes(b"left over from a crash")
    newer = [entry(1, 1, [(0, 11, 0)])]
    producer_snapshot.write(path, newer)
    assert path.read_bytes() == encode(newer)
    assert sorted(os.listdir(tmp_path)) == [path.name]


def test_failed_write_leaves_the_old_snapshot_intact(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "00000000000000000012.snapshot"
    producer_snapshot.write(path, SAMPLE)

    def failing_fsync(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(atomic_file.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk gone"):
        producer_snapshot.write(path, [entry(1, 1, [(0, 11, 0)])])
    monkeypatch.undo()
    assert path.read_bytes() == encode(SAMPLE)
