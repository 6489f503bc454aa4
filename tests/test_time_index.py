"""TimeIndex: byte layout, Kafka's append rule, lookup, truncation, reopen and sanity checks."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.storage.filenames import TIME_INDEX_SUFFIX, segment_path
from exactly.storage.index_file import INT32_MAX
from exactly.storage.time_index import NO_TIMESTAMP, CorruptIndexError, IndexInvariantError, TimeIndex

BASE = 100
T0 = 1_700_000_000_000


def new_index(base: int = BASE) -> TimeIndex:
    return TimeIndex(io.BytesIO(), base)


def raw(index: TimeIndex) -> bytes:
    index._file.seek(0)
    return index._file.read()


def test_entry_is_int64_timestamp_then_relative_offset() -> None:
    index = new_index()
    assert index.maybe_append(T0, BASE + 5)
    assert raw(index) == bytes.fromhex("0000018bcfe56800 00000005")
    assert index.entries() == [(T0, BASE + 5)]


def test_loading_bytes_yields_absolute_entries() -> None:
    data = bytes.fromhex("0000018bcfe56800 00000005 0000018bcfe56801 00000009")
    index = TimeIndex(io.BytesIO(data), BASE)
    assert index.entries() == [(T0, BASE + 5), (T0 + 1, BASE + 9)]
    assert index.last_entry == (T0 + 1, BASE + 9)


def test_empty_index_last_entry_is_no_timestamp_at_base() -> None:
    assert new_index().last_entry == (NO_TIMESTAMP, BASE)


@pytest.fixture
def three() -> TimeIndex:
    index = new_index()
    for timestamp, offset in [(T0, BASE + 1), (T0 + 100, BASE + 5), (T0 + 200, BASE + 9)]:
        assert index.maybe_append(timestamp, offset)
    return index


def test_equal_timestamp_is_skipped_silently(three: TimeIndex) -> None:
    assert not three.maybe_append(T0 + 200, BASE + 9)   # segment roll re-appends the last entry
    assert not three.maybe_append(T0 + 200, BASE + 12)
    assert len(three) == 3
    assert len(raw(three)) == 36


def test_no_timestamp_is_never_indexed() -> None:
    index = new_index()
    assert not index.maybe_append(NO_TIMESTAMP, BASE)
    assert len(index) == 0 and raw(index) == b""
    assert index.maybe_append(0, BASE)


def test_equal_offset_with_greater_timestamp_is_appended(three: TimeIndex) -> None:
    assert three.maybe_append(T0 + 300, BASE + 9)
    assert three.last_entry == (T0 + 300, BASE + 9)


def test_rejects_offset_below_last(three: TimeIndex) -> None:
    with pytest.raises(IndexInvariantError) as caught:
        three.maybe_append(T0 + 300, BASE + 8)
    error = caught.value
    assert (error.field, error.value, error.bound) == ("offset", BASE + 8, BASE + 9)
    assert len(three) == 3


def test_rejects_timestamp_below_last(three: TimeIndex) -> None:
    with pytest.raises(IndexInvariantError) as caught:
        three.maybe_append(T0 + 199, BASE + 10)
    error = caught.value
    assert (error.field, error.value, error.bound) == ("timestamp", T0 + 199, T0 + 200)


@pytest.mark.parametrize(("offset", "bound"), [
    (BASE - 1, BASE),
    (BASE + INT32_MAX + 1, BASE + INT32_MAX),
])
def test_rejects_offset_outside_relative_range(offset: int, bound: int) -> None:
    index = new_index()
    with pytest.raises(IndexInvariantError) as caught:
        index.maybe_append(T0, offset)
    assert (caught.value.field, caught.value.bound) == ("offset", bound)
    assert raw(index) == b""


@pytest.mark.parametrize(("target", "expected"), [
    (T0 - 1, (NO_TIMESTAMP, BASE)),     # before the first entry: scan from the segment start
    (T0, (T0, BASE + 1)),
    (T0 + 99, (T0, BASE + 1)),
    (T0 + 100, (T0 + 100, BASE + 5)),
    (T0 + 150, (T0 + 100, BASE + 5)),
    (T0 + 200, (T0 + 200, BASE + 9)),
    (T0 * 2, (T0 + 200, BASE + 9)),     # after the last entry: the last one
])
def test_lookup_returns_greatest_entry_at_or_below_timestamp(
        three: TimeIndex, target: int, expected: tuple[int, int]) -> None:
    assert three.lookup(target) == expected


def test_lookup_on_empty_index() -> None:
    assert new_index().lookup(T0) == (NO_TIMESTAMP, BASE)


def test_truncate_to_removes_entries_at_or_after_offset(three: TimeIndex) -> None:
    three.truncate_to(BASE + 5)
    assert three.entries() == [(T0, BASE + 1)]
    assert len(raw(three)) == 12
    assert three.maybe_append(T0 + 50, BASE + 2)  # the old last timestamp no longer blocks


def test_truncate_to_between_entries_and_beyond(three: TimeIndex) -> None:
    three.truncate_to(BASE + 10)
    assert len(three) == 3
    three.truncate_to(BASE + 6)
    assert three.entries() == [(T0, BASE + 1), (T0 + 100, BASE + 5)]
    three.truncate_to(BASE)
    assert three.entries() == [] and raw(three) == b""
    assert three.last_entry == (NO_TIMESTAMP, BASE)


def test_reset_empties(three: TimeIndex) -> None:
    three.reset()
    assert len(three) == 0 and raw(three) == b""


def test_reopen_reproduces_entries(tmp_path: Path) -> None:
    path = segment_path(tmp_path, BASE, TIME_INDEX_SUFFIX)
    index = TimeIndex.open(path, BASE)
    index.maybe_append(T0, BASE + 5)
    index.maybe_append(T0 + 1, BASE + 7)
    index.flush()
    index.close()
    assert path.read_bytes() == bytes.fromhex("0000018bcfe56800 00000005 0000018bcfe56801 00000007")
    reopened = TimeIndex.open(path, BASE)
    assert reopened.entries() == [(T0, BASE + 5), (T0 + 1, BASE + 7)]
    assert not reopened.maybe_append(T0 + 1, BASE + 8)  # the loaded last entry still rules
    reopened.close()


def test_sanity_check_passes_on_valid_index(three: TimeIndex) -> None:
    three.sanity_check()
    new_index().sanity_check()


def test_sanity_check_catches_file_cut_mid_entry(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.timeindex"
    path.write_bytes(bytes.fromhex("0000018bcfe56800 00000005 0000018b"))
    index = TimeIndex.open(path, BASE)
    assert len(index) == 1
    with pytest.raises(CorruptIndexError, match="multiple of the entry size 12"):
        index.sanity_check()
    index.close()


@pytest.mark.parametrize(("data", "message"), [
    ("0000018bcfe56800 00000005 0000018bcfe56800 00000006", "does not exceed the previous key"),
    ("0000018bcfe56801 00000005 0000018bcfe56800 00000006", "does not exceed the previous key"),
    ("0000018bcfe56800 00000005 0000018bcfe56801 00000004", "below the previous value"),
    ("0000018bcfe56800 ffffffff", "below the base offset"),
])
def test_sanity_check_catches_disordered_entries(data: str, message: str) -> None:
    index = TimeIndex(io.BytesIO(bytes.fromhex(data)), BASE)
    with pytest.raises(CorruptIndexError, match=message):
        index.sanity_check()


increasing_entries = st.lists(
    st.tuples(st.integers(0, 2**62), st.integers(0, INT32_MAX)),
    max_size=40, unique_by=lambda entry: entry[0],
).map(lambda pairs: list(zip(sorted(p[0] for p in pairs), sorted(p[1] for p in pairs))))


@settings(max_examples=60)
@given(entries=increasing_entries, targets=st.lists(st.integers(-5, 2**62 + 5), max_size=20))
def test_lookup_matches_brute_force(entries: list[tuple[int, int]], targets: list[int]) -> None:
    index = new_index()
    for timestamp, relative in entries:
        assert index.maybe_append(timestamp, BASE + relative)
    for target in targets + [timestamp for timestamp, _ in entries]:
        below = [(t, BASE + r) for t, r in entries if t <= target]
        assert index.lookup(target) == (below[-1] if below else (NO_TIMESTAMP, BASE))


@settings(max_examples=60)
@given(entries=increasing_entries)
def test_round_trip_through_bytes(entries: list[tuple[int, int]]) -> None:
    index = new_index()
    for timestamp, relative in entries:
        index.maybe_append(timestamp, BASE + relative)
    data = raw(index)
    assert len(data) == 12 * len(entries)
    reloaded = TimeIndex(io.BytesIO(data), BASE)
    assert reloaded.entries() == [(t, BASE + r) for t, r in entries]
    reloaded.sanity_check()
