"""OffsetIndex: byte layout, lookup, invariants, truncation, reopen and sanity checks."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.storage.filenames import INDEX_SUFFIX, segment_path
from exactly.storage.index_file import INT32_MAX
from exactly.storage.offset_index import CorruptIndexError, IndexInvariantError, OffsetIndex

BASE = 1000


def new_index(base: int = BASE) -> OffsetIndex:
    return OffsetIndex(io.BytesIO(), base)


def raw(index: OffsetIndex) -> bytes:
    index._file.seek(0)
    return index._file.read()


def test_entry_is_relative_offset_then_position_big_endian() -> None:
    index = new_index()
    index.append(BASE + 5, 100)
    assert raw(index) == bytes.fromhex("00000005 00000064")


def test_docstring_worked_example_bytes() -> None:
    index = new_index(100)
    index.append(105, 100)
    index.append(110, 4096)
    assert raw(index) == bytes.fromhex("00000005 00000064 0000000a 00001000")


def test_loading_bytes_yields_absolute_entries() -> None:
    index = OffsetIndex(io.BytesIO(bytes.fromhex("00000005 00000064 0000000a 00001000")), 100)
    assert index.entries() == [(105, 100), (110, 4096)]
    assert len(index) == 2
    assert index.last_offset == 110


def test_empty_index_last_offset_is_base_offset() -> None:
    index = new_index()
    assert len(index) == 0
    assert index.entries() == []
    assert index.last_offset == BASE


@pytest.fixture
def three() -> OffsetIndex:
    index = new_index()
    for offset, position in [(BASE + 10, 0), (BASE + 20, 500), (BASE + 30, 900)]:
        index.append(offset, position)
    return index


@pytest.mark.parametrize(("target", "expected"), [
    (BASE, (BASE, 0)),              # before the first entry: start of segment
    (BASE + 9, (BASE, 0)),
    (BASE + 10, (BASE + 10, 0)),    # exact hit
    (BASE + 15, (BASE + 10, 0)),    # between entries: the one below
    (BASE + 20, (BASE + 20, 500)),
    (BASE + 29, (BASE + 20, 500)),
    (BASE + 30, (BASE + 30, 900)),
    (BASE + 10**9, (BASE + 30, 900)),  # after the last entry: the last one
    (BASE - 5, (BASE, 0)),          # below the base offset
])
def test_lookup_returns_greatest_entry_at_or_below_target(
        three: OffsetIndex, target: int, expected: tuple[int, int]) -> None:
    assert three.lookup(target) == expected


def test_lookup_on_empty_index_is_segment_start() -> None:
    assert new_index().lookup(BASE + 7) == (BASE, 0)


@pytest.mark.parametrize("offset", [BASE + 30, BASE + 29, BASE])
def test_append_rejects_offset_not_greater_than_last(three: OffsetIndex, offset: int) -> None:
    with pytest.raises(IndexInvariantError) as caught:
        three.append(offset, 1000)
    error = caught.value
    assert (error.field, error.value, error.bound) == ("offset", offset, BASE + 30)
    assert "must be greater than the last offset" in str(caught.value)
    assert len(three) == 3


def test_append_rejects_offset_below_base() -> None:
    index = new_index()
    with pytest.raises(IndexInvariantError) as caught:
        index.append(BASE - 1, 0)
    assert (caught.value.field, caught.value.bound) == ("offset", BASE)


def test_append_rejects_relative_offset_beyond_int32() -> None:
    index = new_index()
    index.append(BASE + INT32_MAX, 0)  # the largest that fits
    other = new_index()
    with pytest.raises(IndexInvariantError) as caught:
        other.append(BASE + INT32_MAX + 1, 0)
    assert caught.value.bound == BASE + INT32_MAX
    assert raw(other) == b""


def test_append_rejects_decreasing_position(three: OffsetIndex) -> None:
    with pytest.raises(IndexInvariantError) as caught:
        three.append(BASE + 40, 899)
    assert (caught.value.field, caught.value.value, caught.value.bound) == ("position", 899, 900)
    assert len(raw(three)) == 24


def test_append_rejects_negative_first_position_and_position_beyond_int32() -> None:
    index = new_index()
    with pytest.raises(IndexInvariantError):
        index.append(BASE, -1)
    with pytest.raises(IndexInvariantError):
        index.append(BASE, INT32_MAX + 1)
    assert len(index) == 0


def test_invariant_error_names_the_file(tmp_path: Path) -> None:
    path = segment_path(tmp_path, BASE, INDEX_SUFFIX)
    index = OffsetIndex.open(path, BASE)
    index.append(BASE + 1, 0)
    with pytest.raises(IndexInvariantError) as caught:
        index.append(BASE + 1, 0)
    assert caught.value.path == str(path)
    assert str(path) in str(caught.value)
    index.close()


def test_truncate_to_removes_entries_at_or_after_offset(three: OffsetIndex) -> None:
    three.truncate_to(BASE + 20)
    assert three.entries() == [(BASE + 10, 0)]
    assert raw(three) == bytes.fromhex("0000000a 00000000")
    assert three.last_offset == BASE + 10
    three.append(BASE + 11, 1)  # appending resumes after the cut
    assert three.entries() == [(BASE + 10, 0), (BASE + 11, 1)]


def test_truncate_to_between_entries_keeps_lower_one(three: OffsetIndex) -> None:
    three.truncate_to(BASE + 25)
    assert three.entries() == [(BASE + 10, 0), (BASE + 20, 500)]


def test_truncate_to_beyond_last_is_a_no_op_and_below_first_empties(three: OffsetIndex) -> None:
    three.truncate_to(BASE + 31)
    assert len(three) == 3
    three.truncate_to(BASE)
    assert len(three) == 0
    assert raw(three) == b""


def test_reset_empties_file_and_entries(three: OffsetIndex) -> None:
    three.reset()
    assert len(three) == 0
    assert raw(three) == b""
    assert three.lookup(BASE + 30) == (BASE, 0)


def test_reopen_reproduces_entries(tmp_path: Path) -> None:
    path = segment_path(tmp_path, BASE, INDEX_SUFFIX)
    index = OffsetIndex.open(path, BASE)
    index.append(BASE + 3, 0)
    index.append(BASE + 9, 4242)
    index.flush()
    index.close()
    assert path.read_bytes() == bytes.fromhex("00000003 00000000 00000009 00001092")
    reopened = OffsetIndex.open(path, BASE)
    assert reopened.entries() == [(BASE + 3, 0), (BASE + 9, 4242)]
    assert reopened.lookup(BASE + 10) == (BASE + 9, 4242)
    reopened.append(BASE + 12, 5000)  # appends after the loaded entries
    reopened.close()
    assert len(path.read_bytes()) == 24


def test_flush_fsyncs_a_real_file_and_skips_memory(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    index = OffsetIndex.open(tmp_path / "00000000000000000000.index", 0)
    index.append(1, 0)
    index.flush()
    assert synced == [index._file.fileno()]
    new_index().flush()
    assert len(synced) == 1
    index.close()


def test_open_creates_missing_file_empty(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex.open(path, 0)
    assert path.exists() and path.read_bytes() == b""
    assert len(index) == 0
    index.close()


def test_sanity_check_passes_on_valid_index(three: OffsetIndex) -> None:
    three.sanity_check(log_size=901)
    new_index().sanity_check(log_size=0)


def test_sanity_check_catches_file_cut_mid_entry(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(bytes.fromhex("00000005 00000064 000000"))
    index = OffsetIndex.open(path, BASE)
    assert index.entries() == [(BASE + 5, 100)]  # the whole entries still load
    with pytest.raises(CorruptIndexError) as caught:
        index.sanity_check(log_size=10_000)
    assert caught.value.path == str(path)
    assert "multiple of the entry size 8" in caught.value.reason
    index.close()


def test_append_after_partial_tail_overwrites_it() -> None:
    index = OffsetIndex(io.BytesIO(bytes.fromhex("00000005 00000064 0000")), BASE)
    index.append(BASE + 6, 200)
    assert raw(index) == bytes.fromhex("00000005 00000064 00000006 000000c8")
    index.sanity_check(log_size=201)


@pytest.mark.parametrize("log_size", [900, 10])
def test_sanity_check_catches_position_beyond_log(three: OffsetIndex, log_size: int) -> None:
    with pytest.raises(CorruptIndexError, match="last position 900"):
        three.sanity_check(log_size=log_size)


@pytest.mark.parametrize(("data", "message"), [
    ("00000005 00000000 00000005 00000010", "does not exceed the previous key"),
    ("00000005 00000000 00000003 00000010", "does not exceed the previous key"),
    ("00000005 00000010 00000006 00000000", "below the previous value"),
    ("ffffffff 00000000", "below the base offset"),
    ("00000001 ffffffff", "negative"),
])
def test_sanity_check_catches_disordered_entries(data: str, message: str) -> None:
    index = OffsetIndex(io.BytesIO(bytes.fromhex(data)), BASE)
    with pytest.raises(CorruptIndexError, match=message):
        index.sanity_check(log_size=1 << 20)


increasing_entries = st.lists(
    st.tuples(st.integers(0, INT32_MAX), st.integers(0, INT32_MAX)),
    max_size=40, unique_by=lambda entry: entry[0],
).map(lambda pairs: list(zip(sorted(p[0] for p in pairs), sorted(p[1] for p in pairs))))


@settings(max_examples=60)
@given(entries=increasing_entries, base=st.integers(0, 2**40),
       targets=st.lists(st.integers(-10, INT32_MAX + 10), max_size=20))
def test_lookup_matches_brute_force(entries: list[tuple[int, int]], base: int,
                                    targets: list[int]) -> None:
    index = new_index(base)
    for relative, position in entries:
        index.append(base + relative, position)
    probes = targets + [relative for relative, _ in entries]
    for relative in probes:
        below = [(base + r, p) for r, p in entries if r <= relative]
        assert index.lookup(base + relative) == (below[-1] if below else (base, 0))


@settings(max_examples=60)
@given(entries=increasing_entries, base=st.integers(0, 2**40))
def test_round_trip_through_bytes(entries: list[tuple[int, int]], base: int) -> None:
    index = new_index(base)
    for relative, position in entries:
        index.append(base + relative, position)
    data = raw(index)
    assert len(data) == 8 * len(entries)
    reloaded = OffsetIndex(io.BytesIO(data), base)
    assert reloaded.entries() == [(base + r, p) for r, p in entries]
    reloaded.sanity_check(log_size=INT32_MAX + 1)
