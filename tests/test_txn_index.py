"""TransactionIndex: 34-byte entries, lazy creation, collect_aborted, truncation, sanity checks."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.storage.filenames import TXN_INDEX_SUFFIX, segment_path
from exactly.storage.txn_index import (
    AbortedTxn,
    CorruptIndexError,
    IndexInvariantError,
    TransactionIndex,
)

BASE = 100
EXAMPLE_BYTES = bytes.fromhex(
    "0000"                # version 0
    "0000000000000007"    # producer id 7
    "0000000000000064"    # first offset 100
    "0000000000000096"    # last offset 150
    "0000000000000064"    # last stable offset 100
)


def new_index(data: bytes = b"") -> TransactionIndex:
    return TransactionIndex(io.BytesIO(data), BASE)


def raw(index: TransactionIndex) -> bytes:
    assert index._file is not None
    index._file.seek(0)
    return index._file.read()


def test_entry_layout_is_34_bytes_as_documented() -> None:
    txn = AbortedTxn(producer_id=7, first_offset=100, last_offset=150, last_stable_offset=100)
    assert txn.to_bytes() == EXAMPLE_BYTES
    index = new_index()
    index.append(txn)
    assert raw(index) == EXAMPLE_BYTES
    assert new_index(EXAMPLE_BYTES).all_entries() == [txn]


def test_fields_are_signed() -> None:
    txn = AbortedTxn(producer_id=-1, first_offset=-2, last_offset=150, last_stable_offset=-3)
    data = txn.to_bytes()
    assert data[2:] == bytes.fromhex(
        "ffffffffffffffff fffffffffffffffe 0000000000000096 fffffffffffffffd")
    assert new_index(data).all_entries() == [txn]


def test_aborted_txn_is_frozen() -> None:
    txn = AbortedTxn(1, 2, 3, 4)
    with pytest.raises(AttributeError):
        txn.producer_id = 5  # type: ignore[misc]


def test_append_rejects_last_offset_not_increasing() -> None:
    index = new_index()
    index.append(AbortedTxn(1, 100, 150, 100))
    for last_offset in (150, 149):
        with pytest.raises(IndexInvariantError) as caught:
            index.append(AbortedTxn(2, 120, last_offset, 100))
        assert (caught.value.field, caught.value.value, caught.value.bound) == (
            "last_offset", last_offset, 150)
    assert len(raw(index)) == 34


def test_append_rejects_last_offset_below_base() -> None:
    index = new_index()
    with pytest.raises(IndexInvariantError) as caught:
        index.append(AbortedTxn(1, 10, BASE - 1, 10))
    assert caught.value.bound == BASE
    assert raw(index) == b""


def test_open_creates_no_file_until_first_append(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = segment_path(tmp_path, BASE, TXN_INDEX_SUFFIX)
    index = TransactionIndex.open(path, BASE)
    assert index.all_entries() == []
    assert index.collect_aborted(0, 1000) == ([], False)
    index.flush()
    index.truncate_to(0)
    index.reset()
    index.sanity_check()
    assert not path.exists()
    index.append(AbortedTxn(7, 100, 150, 100))
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    index.flush()
    assert len(synced) == 1
    assert path.read_bytes() == EXAMPLE_BYTES
    index.close()


def test_reopen_reproduces_entries_and_appends_after_them(tmp_path: Path) -> None:
    path = segment_path(tmp_path, BASE, TXN_INDEX_SUFFIX)
    index = TransactionIndex.open(path, BASE)
    first, second = AbortedTxn(7, 100, 150, 100), AbortedTxn(8, 120, 160, 120)
    index.append(first)
    index.append(second)
    index.close()
    reopened = TransactionIndex.open(path, BASE)
    assert reopened.all_entries() == [first, second]
    with pytest.raises(IndexInvariantError):
        reopened.append(AbortedTxn(9, 100, 160, 100))
    reopened.append(AbortedTxn(9, 100, 170, 100))
    reopened.close()
    assert len(path.read_bytes()) == 3 * 34


def test_in_memory_index_needs_a_file_object() -> None:
    with pytest.raises(ValueError):
        TransactionIndex(None, BASE)


@pytest.fixture
def aborted() -> TransactionIndex:
    index = new_index()
    for txn in [
        AbortedTxn(1, first_offset=100, last_offset=120, last_stable_offset=100),
        AbortedTxn(2, first_offset=110, last_offset=140, last_stable_offset=110),
        AbortedTxn(3, first_offset=150, last_offset=160, last_stable_offset=150),
        AbortedTxn(4, first_offset=170, last_offset=200, last_stable_offset=170),
    ]:
        index.append(txn)
    return index


@pytest.mark.parametrize(("fetch", "upper", "producers", "complete"), [
    (0, 100, [], True),              # producer 1 starts at the bound; its LSO 100 reaches it
    (0, 101, [1], True),             # stops at producer 2, whose LSO 110 >= 101
    (100, 111, [1, 2], True),        # stops at producer 3 (LSO 150)
    (121, 150, [2], True),           # 1 ended before the fetch; 3 starts at the bound
    (141, 149, [], True),            # a gap between transactions
    (120, 110, [1], True),           # 1 ends at the fetch offset; 2 starts at the bound
    (161, 1000, [4], False),         # only the last overlaps; no LSO reaches 1000
    (0, 1000, [1, 2, 3, 4], False),
    (200, 201, [4], False),
    (201, 1000, [], False),
])
def test_collect_aborted_range_and_completeness(
        aborted: TransactionIndex, fetch: int, upper: int, producers: list[int],
        complete: bool) -> None:
    found, is_complete = aborted.collect_aborted(fetch, upper)
    assert [txn.producer_id for txn in found] == producers
    assert is_complete is complete


def test_collect_aborted_stops_at_first_entry_whose_lso_reaches_the_bound() -> None:
    index = new_index()
    index.append(AbortedTxn(1, 100, 120, last_stable_offset=130))
    index.append(AbortedTxn(2, 105, 140, last_stable_offset=100))  # overlaps, but comes after
    result = index.collect_aborted(100, 130)
    assert result.aborted == [AbortedTxn(1, 100, 120, 130)]
    assert result.is_complete


def test_truncate_to_drops_entries_ending_at_or_after_offset(aborted: TransactionIndex) -> None:
    aborted.truncate_to(160)
    assert [txn.producer_id for txn in aborted.all_entries()] == [1, 2]
    assert len(raw(aborted)) == 68
    aborted.append(AbortedTxn(5, 141, 145, 141))
    assert [txn.producer_id for txn in aborted.all_entries()] == [1, 2, 5]
    aborted.truncate_to(1000)
    assert len(aborted.all_entries()) == 3
    aborted.truncate_to(0)
    assert aborted.all_entries() == [] and raw(aborted) == b""


def test_reset_empties_and_allows_any_offset_again(aborted: TransactionIndex) -> None:
    aborted.reset()
    assert aborted.all_entries() == [] and raw(aborted) == b""
    aborted.append(AbortedTxn(1, 100, 101, 100))


def test_delete_removes_file_and_reports_whether_it_existed(tmp_path: Path) -> None:
    path = segment_path(tmp_path, BASE, TXN_INDEX_SUFFIX)
    never_written = TransactionIndex.open(path, BASE)
    assert never_written.delete() is False
    index = TransactionIndex.open(path, BASE)
    index.append(AbortedTxn(7, 100, 150, 100))
    assert index.delete() is True
    assert not path.exists()
    assert index.all_entries() == []


def test_sanity_check_passes_on_valid_index(aborted: TransactionIndex) -> None:
    aborted.sanity_check()
    new_index().sanity_check()


def test_sanity_check_catches_file_cut_mid_entry(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(EXAMPLE_BYTES + EXAMPLE_BYTES[:20])
    index = TransactionIndex.open(path, BASE)
    assert len(index.all_entries()) == 1
    with pytest.raises(CorruptIndexError) as caught:
        index.sanity_check()
    assert caught.value.path == str(path)
    assert "multiple of the entry size 34" in caught.value.reason
    index.close()


def test_sanity_check_rejects_newer_version() -> None:
    index = new_index(b"\x00\x01" + EXAMPLE_BYTES[2:])
    with pytest.raises(CorruptIndexError, match="version 1"):
        index.sanity_check()


def test_sanity_check_rejects_last_offset_below_base() -> None:
    index = TransactionIndex(io.BytesIO(EXAMPLE_BYTES), base_offset=151)
    with pytest.raises(CorruptIndexError, match="below the base offset 151"):
        index.sanity_check()


def test_sanity_check_rejects_non_increasing_last_offsets() -> None:
    with pytest.raises(CorruptIndexError, match="does not exceed the previous 150"):
        new_index(EXAMPLE_BYTES + EXAMPLE_BYTES).sanity_check()


txn_lists = st.lists(
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**40), st.integers(0, 2**40),
              st.integers(-1, 2**40)),
    max_size=20, unique_by=lambda fields: fields[2],
).map(lambda rows: [AbortedTxn(pid, first, BASE + last, lso)
                    for pid, first, last, lso in sorted(rows, key=lambda fields: fields[2])])


@settings(max_examples=60)
@given(txns=txn_lists)
def test_round_trip_through_bytes(txns: list[AbortedTxn]) -> None:
    index = new_index()
    for txn in txns:
        index.append(txn)
    data = raw(index)
    assert len(data) == 34 * len(txns)
    assert data == b"".join(txn.to_bytes() for txn in txns)
    reloaded = new_index(data)
    assert reloaded.all_entries() == txns
    reloaded.sanity_check()


@settings(max_examples=60)
@given(txns=txn_lists, fetch=st.integers(0, 2**40), span=st.integers(0, 2**40))
def test_collect_aborted_matches_kafka_scan(txns: list[AbortedTxn], fetch: int, span: int) -> None:
    index = new_index()
    for txn in txns:
        index.append(txn)
    upper = fetch + span
    stop = next((n for n, txn in enumerate(txns) if txn.last_stable_offset >= upper), None)
    scanned = txns if stop is None else txns[: stop + 1]
    expected = [txn for txn in scanned if txn.last_offset >= fetch and txn.first_offset < upper]
    assert index.collect_aborted(fetch, upper) == (expected, stop is not None)
