"""Checkpoint files: Kafka's text format, strict reading and atomic replacement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactly.storage.checkpoint import CorruptCheckpointError, read_checkpoint, write_checkpoint
from exactly.storage.filenames import RECOVERY_POINT_CHECKPOINT


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / RECOVERY_POINT_CHECKPOINT


def test_writes_kafka_format_sorted(path: Path) -> None:
    write_checkpoint(path, {("orders.v1", 1): 977, ("orders.v1", 0): 1042, ("a_b-c", 10): 0})
    assert path.read_bytes() == b"0\n3\na_b-c 10 0\norders.v1 0 1042\norders.v1 1 977\n"


def test_round_trip(path: Path) -> None:
    entries = {("orders.v1", 0): 1042, ("orders.v1", 1): 977, ("__consumer_offsets", 49): 5}
    write_checkpoint(path, entries)
    assert read_checkpoint(path) == entries


def test_empty_mapping_round_trips(path: Path) -> None:
    write_checkpoint(path, {})
    assert path.read_bytes() == b"0\n0\n"
    assert read_checkpoint(path) == {}


def test_missing_and_empty_files_read_as_no_entries(path: Path) -> None:
    assert read_checkpoint(path) == {}
    path.write_bytes(b"")
    assert read_checkpoint(path) == {}


def test_reads_kafka_line_endings_and_separators(path: Path) -> None:
    path.write_bytes(b"0\r\n2\r\ntopic 0 5\r\ntopic\t1  -1")  # CRLF, tab, no final newline
    assert read_checkpoint(path) == {("topic", 0): 5, ("topic", 1): -1}


def test_only_ascii_whitespace_separates_fields_as_in_java(path: Path) -> None:
    entries = {("odd\u00a0topic", 0): 7}  # a no-break space is part of the topic
    write_checkpoint(path, entries)
    assert read_checkpoint(path) == entries


def test_rewrite_replaces_whole_file(path: Path) -> None:
    write_checkpoint(path, {("t", 0): 1, ("t", 1): 2})
    write_checkpoint(path, {("t", 0): 3})
    assert read_checkpoint(path) == {("t", 0): 3}


def test_leaves_no_temporary_file(path: Path) -> None:
    write_checkpoint(path, {("t", 0): 1})
    assert sorted(p.name for p in path.parent.iterdir()) == [RECOVERY_POINT_CHECKPOINT]


def test_leftover_tmp_does_not_affect_read_and_is_replaced(path: Path) -> None:
    write_checkpoint(path, {("t", 0): 1})
    leftover = path.with_name(path.name + ".tmp")
    leftover.write_bytes(b"0\n1\nt 0 999\ngarbage from a crash")
    assert read_checkpoint(path) == {("t", 0): 1}
    write_checkpoint(path, {("t", 0): 2})
    assert read_checkpoint(path) == {("t", 0): 2}
    assert not leftover.exists()


def test_failed_write_keeps_old_checkpoint(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(path, {("t", 0): 1})

    def crash(*_: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        write_checkpoint(path, {("t", 0): 2})
    assert read_checkpoint(path) == {("t", 0): 1}


def test_write_fsyncs_file_and_directory(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(descriptor: int) -> None:
        synced.append(descriptor)
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    write_checkpoint(path, {("t", 0): 1})
    assert len(synced) == 2


@pytest.mark.parametrize("topic", ["has space", "tab\there", "", "new\nline"])
def test_rejects_topics_that_cannot_be_read_back(path: Path, topic: str) -> None:
    with pytest.raises(ValueError):
        write_checkpoint(path, {(topic, 0): 1})
    assert not path.exists()


def test_rejects_negative_partition(path: Path) -> None:
    with pytest.raises(ValueError):
        write_checkpoint(path, {("t", -1): 1})


@pytest.mark.parametrize(("data", "line_number", "line"), [
    (b"1\n0\n", 1, "1"),                          # unknown version
    (b"x\n0\n", 1, "x"),
    (b"\n", 1, ""),
    (b"0\n", 2, None),                            # count missing
    (b"0\nfive\n", 2, "five"),
    (b"0\n-1\n", 2, "-1"),
    (b"0\n2\nt 0 1\n", 4, None),                  # fewer entries than declared
    (b"0\n1\nt 0 1\nt 1 2\n", 4, "t 1 2"),        # more lines than declared
    (b"0\n1\nt 0\n", 3, "t 0"),                   # missing field
    (b"0\n1\nt x 1\n", 3, "t x 1"),
    (b"0\n1\nt 0 1 2\n", 3, "t 0 1 2"),
    (b"0\n1\nt -1 1\n", 3, "t -1 1"),
    (b"0\n1\nt 0 1_000\n", 3, "t 0 1_000"),      # Python's int() would accept this
    (b"0\n1\nt 0 \xd9\xa3\n", 3, "t 0 \u0663"),   # a non-ASCII digit
    (b"0\n2\nt 0 1\n\nt 1 2\n", 4, ""),           # blank line
    (b"0\n1\nt 0 1\xff\n", 3, None),              # not UTF-8
])
def test_malformed_raises_with_path_and_line(
        path: Path, data: bytes, line_number: int, line: str | None) -> None:
    path.write_bytes(data)
    with pytest.raises(CorruptCheckpointError) as caught:
        read_checkpoint(path)
    assert (caught.value.path, caught.value.line_number, caught.value.line) == (
        str(path), line_number, line)
    assert str(path) in str(caught.value)


topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ0123456789._-", min_size=1, max_size=20)
checkpoints = st.dictionaries(
    st.tuples(topics, st.integers(0, 2**31 - 1)), st.integers(-1, 2**63 - 1), max_size=20)


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=checkpoints)
def test_round_trip_property(path: Path, entries: dict[tuple[str, int], int]) -> None:
    write_checkpoint(path, entries)
    assert read_checkpoint(path) == entries
    lines = path.read_text().split("\n")
    assert lines[:2] == ["0", str(len(entries))] and lines[-1] == ""
    assert len(lines) == len(entries) + 3
