"""Last stable offset, the aborted-transaction index, and read_committed reads.

Interleaved transactional and non-transactional producers on one partition: a
read_committed reader gets exactly the committed and non-transactional records,
in offset order; the LSO stops at the first open transaction and moves when it ends.
Storage semantics, so the storage layer is driven directly (tests/storage_log.py):
producer ids, epochs and markers of any coordinator epoch, each append durable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from exactly.storage import filenames
from exactly.storage.clock import FakeClock
from exactly.storage.errors import InvalidProducerEpochError, TransactionCoordinatorFencedError
from exactly.storage.read_committed import read_records
from exactly.storage.txn_index import AbortedTxn, TransactionIndex
from tests.conftest import data_batch
from tests.storage_log import DurableLogs

T = "orders"


@pytest.fixture
def logs(tmp_path: Path, clock: FakeClock) -> Iterator[DurableLogs]:
    with DurableLogs(tmp_path / "data", clock=clock) as logs:
        logs.create_topic(T, partitions=1)
        yield logs


def consume_all(logs: DurableLogs, read_committed: bool, max_bytes: int = 1 << 20,
                start: int = 0) -> list[bytes]:
    """Read the partition the way a consumer does: fetch, filter, move on."""
    isolation = "read_committed" if read_committed else "read_uncommitted"
    values, offset = [], start
    while True:
        r = logs.fetch(T, 0, offset, max_bytes=max_bytes, isolation_level=isolation)
        if not r.records:
            return values
        got = read_records(r.records, offset, read_committed, r.aborted_transactions or ())
        values.extend(rec.value for rec in got.records)
        assert got.next_offset > offset
        offset = got.next_offset


class Txn:
    """A transactional producer that writes to partition 0 of the test topic."""

    def __init__(self, logs: DurableLogs, producer_id: int, epoch: int = 0) -> None:
        self.logs, self.pid, self.epoch, self.seq = logs, producer_id, epoch, 0

    def send(self, *values: bytes) -> int:
        offset = self.logs.produce(T, 0, data_batch(values, self.pid, self.epoch, self.seq,
                                                    transactional=True))
        self.seq += len(values)
        return offset

    def end(self, commit: bool, coordinator_epoch: int = 0) -> int:
        return self.logs.write_txn_marker(T, 0, self.pid, self.epoch, coordinator_epoch, commit)


def lso(logs: DurableLogs) -> int:
    return logs.fetch(T, 0, 0, isolation_level="read_committed").last_stable_offset


def txn_index_entries(logs: DurableLogs) -> list[AbortedTxn]:
    log = logs.log(T, 0)
    entries = []
    for segment in log.segments:
        path = filenames.segment_path(log.directory, segment.base_offset, filenames.TXN_INDEX_SUFFIX)
        if path.exists():
            index = TransactionIndex.open(path, segment.base_offset)
            entries.extend(index.all_entries())
            index.close()
    return entries


def test_lso_stops_at_first_open_transaction_and_moves_when_it_ends(logs: DurableLogs) -> None:
    logs.produce(T, 0, data_batch([b"plain-0"]))
    a, b = Txn(logs, 100), Txn(logs, 200)
    first_a = a.send(b"a1")
    assert lso(logs) == first_a == 1
    first_b = b.send(b"b1")
    logs.produce(T, 0, data_batch([b"plain-1"]))
    a.send(b"a2")
    assert lso(logs) == first_a, "LSO is the first offset of the earliest open transaction"
    assert logs.list_offsets(T, 0, -1, "read_committed") == first_a
    assert logs.list_offsets(T, 0, -1, "read_uncommitted") == 5

    b.end(commit=True)  # the later transaction ends first: the LSO cannot move
    assert lso(logs) == first_a
    assert consume_all(logs, read_committed=True) == [b"plain-0"]

    a.end(commit=False)
    end = logs.list_offsets(T, 0, -1, "read_uncommitted")
    assert lso(logs) == end == 7, "no open transaction: LSO equals the high watermark"
    assert consume_all(logs, read_committed=True) == [b"plain-0", b"b1", b"plain-1"]
    assert consume_all(logs, read_committed=False) == [b"plain-0", b"a1", b"b1", b"plain-1", b"a2"]
    assert first_b == 2


def test_abort_writes_txn_index_entry_with_first_last_and_lso(logs: DurableLogs) -> None:
    a, b = Txn(logs, 100), Txn(logs, 200)
    a.send(b"a1")                      # offset 0
    b.send(b"b1")                      # offset 1
    a_abort = a.end(commit=False)      # offset 2; b still open from 1
    b_abort = b.end(commit=False)      # offset 3
    c = Txn(logs, 300)
    c.send(b"c1")                      # offset 4
    c.end(commit=True)                 # commits write no index entry
    assert txn_index_entries(logs) == [
        AbortedTxn(producer_id=100, first_offset=0, last_offset=a_abort, last_stable_offset=1),
        AbortedTxn(producer_id=200, first_offset=1, last_offset=b_abort, last_stable_offset=b_abort + 1),
    ]
    r = logs.fetch(T, 0, 0, isolation_level="read_committed")
    assert sorted(r.aborted_transactions) == [(100, 0), (200, 1)]
    assert consume_all(logs, read_committed=True) == [b"c1"]


def test_fetch_from_inside_an_aborted_transaction_reports_it(logs: DurableLogs) -> None:
    a = Txn(logs, 100)
    a.send(b"a1")
    logs.produce(T, 0, data_batch([b"plain"]))
    a.send(b"a2")
    a.end(commit=False)
    r = logs.fetch(T, 0, 2, isolation_level="read_committed")
    assert r.aborted_transactions == [(100, 0)]
    assert consume_all(logs, read_committed=True, start=2) == []
    assert consume_all(logs, read_committed=True, start=1) == [b"plain"]


def test_read_uncommitted_fetch_sees_open_transactions_and_no_aborted_list(logs: DurableLogs) -> None:
    Txn(logs, 100).send(b"open")
    r = logs.fetch(T, 0, 0, isolation_level="read_uncommitted")
    assert r.records and r.last_stable_offset == 0 and r.high_watermark == 1
    assert not r.aborted_transactions
    assert logs.fetch(T, 0, 0, isolation_level="read_committed").records == b""


def test_markers_from_zombie_coordinators_or_old_epochs_are_fenced(logs: DurableLogs) -> None:
    a = Txn(logs, 100, epoch=2)
    a.send(b"a1")
    a.end(commit=True, coordinator_epoch=5)
    a.send(b"a2")
    end_before = logs.list_offsets(T, 0, -1)
    with pytest.raises(TransactionCoordinatorFencedError) as fenced:
        a.end(commit=False, coordinator_epoch=4)
    assert fenced.value.code == 52
    with pytest.raises(InvalidProducerEpochError) as stale:
        logs.write_txn_marker(T, 0, 100, 1, 5, commit=False)
    assert stale.value.code == 47
    assert logs.list_offsets(T, 0, -1) == end_before, "rejected markers append nothing"
    assert lso(logs) == 2, "the transaction is still open"


def test_timed_out_abort_with_bumped_epoch_fences_the_zombie(logs: DurableLogs) -> None:
    zombie = Txn(logs, 100, epoch=3)
    zombie.send(b"z1")
    logs.write_txn_marker(T, 0, 100, 4, 0, commit=False)  # coordinator aborts with epoch + 1
    with pytest.raises(InvalidProducerEpochError):
        zombie.send(b"z2")
    assert consume_all(logs, read_committed=True) == []
    assert lso(logs) == logs.list_offsets(T, 0, -1)


@dataclass
class Model:
    """What a read_committed reader must see, computed independently of the logs."""

    committed: list[tuple[int, bytes]] = field(default_factory=list)
    pending: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    open_first: dict[int, int] = field(default_factory=dict)


@pytest.mark.parametrize("seed", range(6))
def test_random_interleavings_read_committed_equals_model(tmp_path, seed: int) -> None:
    rng = random.Random(seed)
    with DurableLogs(tmp_path / "d", **{"segment.bytes": 1500}) as logs:
        logs.create_topic(T, partitions=1)
        producers = {pid: Txn(logs, pid) for pid in (10, 20, 30)}
        model = Model()
        idem_seq = 0
        for step in range(150):
            choice = rng.random()
            pid = rng.choice(list(producers))
            p = producers[pid]
            if choice < 0.45:
                value = b"t%d-%d" % (pid, step)
                offset = p.send(value)
                model.pending.setdefault(pid, []).append((offset, value))
                model.open_first.setdefault(pid, offset)
            elif choice < 0.65 and pid in model.open_first:
                commit = rng.random() < 0.6
                p.end(commit)
                records = model.pending.pop(pid)
                del model.open_first[pid]
                if commit:
                    model.committed.extend(records)
            elif choice < 0.8:
                value = b"i-%d" % step
                offset = logs.produce(T, 0, data_batch([value], 99, 0, idem_seq))
                idem_seq += 1
                model.committed.append((offset, value))
            else:
                value = b"p-%d" % step
                model.committed.append((logs.produce(T, 0, data_batch([value])), value))
            expected_lso = min(model.open_first.values(), default=logs.list_offsets(T, 0, -1))
            assert lso(logs) == expected_lso
        stable = lso(logs)
        expected = [v for o, v in sorted(model.committed) if o < stable]
        for max_bytes in (1, 200, 1 << 20):
            assert consume_all(logs, read_committed=True, max_bytes=max_bytes) == expected
        assert len(logs.log(T, 0).segments) > 3, "the test must span segments"
