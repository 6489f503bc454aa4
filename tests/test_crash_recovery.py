"""Crash recovery with real processes: a producer child (tests/crash_child.py) is
SIGKILLed again and again at random points. After every kill the data directory
must hold every acknowledged append with the same records, serve only whole
batches, keep each producer's sequences gap- and duplicate-free, hide aborted
transactions from read_committed, and recover to exactly the state (producer
state, LSO, every index) that a rebuild from the ``.log`` files alone gives.

Rounds alternate between two ways of recovering: the test opens the crashed
directory itself (and closes it cleanly, so the next child starts clean), or the
test checks a copy and the next child recovers the crashed directory itself and
must carry on with the right sequences. Some children also write the
recovery-point checkpoint as they go, as the broker's scheduled job does.
``CRASH_SEED`` picks another run.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from exactly.app import Broker
from exactly.storage import filenames
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import (
    ControlType,
    RecordBatch,
    decode_batch,
    decode_control_record,
    iter_headers,
)
from tests.conftest import LineTail
from tests.crash_child import (
    CONFIG,
    IDEMPOTENT_ID,
    TOPIC,
    TRANSACTIONAL_ID,
    record_digest,
)
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]
SEED = int(os.environ.get("CRASH_SEED", "20240607"))
ROUNDS = 20
#: how long a child may take to start, recover and acknowledge its batches
ROUND_DEADLINE_S = 30.0


# -- the child and its acknowledgements ------------------------------------------------


@dataclass(frozen=True)
class Ack:
    kind: str          # D idempotent batch, T transactional batch, M marker, R duplicate resend, S start
    offset: int
    producer_id: int = -1
    sequence: int = -1
    count: int = 0
    digest: str = ""
    commit: bool = False


def parse_ack(line: str) -> Ack:
    kind, *fields = line.split()
    if kind == "S":
        return Ack(kind, int(fields[0]))
    if kind in "DT":
        offset, pid, sequence, count, digest = fields
        return Ack(kind, int(offset), int(pid), int(sequence), int(count), digest)
    if kind == "M":
        offset, pid, outcome = fields
        return Ack(kind, int(offset), int(pid), commit=outcome == "COMMIT")
    if kind == "R":
        offset, pid, sequence = fields
        return Ack(kind, int(offset), int(pid), int(sequence))
    raise AssertionError(f"unexpected ack line {line!r}")


class AckFile:
    """The acks the child appended since the last poll."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.acks: list[Ack] = []
        self._tail = LineTail(path)

    def poll(self) -> list[Ack]:
        new = [parse_ack(line) for line in self._tail.poll()]
        self.acks.extend(new)
        return new


def start_child(data_dir: Path, ack_path: Path, seed: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.crash_child", str(data_dir), str(ack_path), str(seed), *extra],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def sigkill(child: subprocess.Popen) -> None:
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(timeout=ROUND_DEADLINE_S) == -signal.SIGKILL


def reap(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()
        child.wait(timeout=ROUND_DEADLINE_S)
    if child.stderr:
        child.stderr.close()


# -- what the recovered directory must hold -----------------------------------------------


def partition_dir(data_dir: Path) -> Path:
    return data_dir / filenames.partition_dir_name(TOPIC, 0)


def full_rebuild_copy(crashed: Path, to: Path) -> Path:
    """A copy of ``crashed`` that can only recover by scanning every ``.log`` from the
    start: no snapshots, no recovery point."""
    shutil.copytree(crashed, to)
    for path in partition_dir(to).glob("*" + filenames.SNAPSHOT_SUFFIX):
        path.unlink()
    (to / filenames.RECOVERY_POINT_CHECKPOINT).unlink(missing_ok=True)
    return to


def fetch_everything(broker: Broker, rng: random.Random) -> dict[int, tuple[bytes, RecordBatch]]:
    """Every batch, by read_uncommitted fetches of random sizes from 0 to the high
    watermark; every response must be whole batches that decode fully (CRC included)."""
    batches: dict[int, tuple[bytes, RecordBatch]] = {}
    offset = 0
    while True:
        result = broker.fetch(TOPIC, 0, offset, max_bytes=rng.choice([1, 3000, 70_000, 1 << 20]))
        if not result.records:
            assert offset == result.high_watermark
            return batches
        end = 0
        for position, header in iter_headers(result.records):
            raw = result.records[position:position + header.size]
            batches[header.base_offset] = (raw, decode_batch(raw))
            end = position + header.size
        assert end == len(result.records), f"fetch at {offset} served a partial batch"
        offset = result.next_offset


def consume_committed(broker: Broker) -> list[int]:
    """Offsets of every record a read_committed consumer sees."""
    seen: list[int] = []
    offset = 0
    while True:
        result = broker.fetch(TOPIC, 0, offset, max_bytes=50_000, isolation_level="read_committed")
        if not result.records:
            return seen
        read = read_records(result.records, offset, True, result.aborted_transactions or [])
        seen.extend(record.offset for record in read.records)
        offset = read.next_offset


def on_loop(broker: Broker, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the engine's loop, the one owner of partition state."""
    async def run() -> Any:
        return fn()
    return broker.engine.call(run)


def log_picture(broker: Broker) -> dict:
    """What a rebuild from the .log files must reproduce exactly."""
    def take() -> dict:
        log = broker.engine.partitions.log(TOPIC, 0)
        return {
            "log_end_offset": log.log_end_offset,
            "high_watermark": log.high_watermark,
            "last_stable_offset": log.last_stable_offset,
            "producers": log.producer_state.fingerprint(),
            "last_sequences": {entry.producer_id: entry.last_seq for entry in log.producer_state},
            "ongoing": log.producer_state.ongoing_transactions(),
            "segments": [(s.base_offset, s.size, s.next_offset, s.max_timestamp) for s in log.segments],
            "txn_index": {s.base_offset: s.txn_index.all_entries() for s in log.segments},
            "offset_index": {s.base_offset: s.offset_index.entries() for s in log.segments},
            "time_index": {s.base_offset: s.time_index.entries() for s in log.segments},
        }
    return on_loop(broker, take)


def check_recovered(broker: Broker, rebuilt: Broker, acks: list[Ack], rng: random.Random) -> None:
    batches = fetch_everything(broker, rng)
    picture = log_picture(broker)
    end = picture["log_end_offset"]
    assert picture["high_watermark"] == end, "recovered data is on disk, so all of it is readable"

    # contiguous batches from 0 to the log end
    expected_base = 0
    for base in sorted(batches):
        assert base == expected_base, f"gap or overlap at offset {base} (expected {expected_base})"
        expected_base = batches[base][1].header.next_offset
    assert expected_base == end

    # every acknowledged append is there, with the same records
    for ack in acks:
        if ack.kind == "S":
            assert ack.offset <= end
            continue
        assert ack.offset in batches, f"acknowledged {ack} is missing; log end {end}"
        header = batches[ack.offset][1].header
        records = batches[ack.offset][1].records
        assert header.producer_id == ack.producer_id, ack
        if ack.kind in "DT":
            assert not header.is_control and header.is_transactional == (ack.kind == "T"), ack
            assert (header.base_sequence, header.record_count) == (ack.sequence, ack.count), ack
            assert record_digest(records) == ack.digest, f"records of {ack} changed"
        elif ack.kind == "M":
            control_type, _ = decode_control_record(records[0])
            assert header.is_control
            assert control_type == (ControlType.COMMIT if ack.commit else ControlType.ABORT), ack
        else:
            assert header.base_sequence == ack.sequence, ack

    # each producer's sequences run on without gap or duplicate: nothing was appended twice
    last_sequence = {IDEMPOTENT_ID: -1, TRANSACTIONAL_ID: -1}
    outcome_of: dict[int, str] = {}  # record offset of a transactional batch -> outcome
    open_txn: list[int] = []
    for base in sorted(batches):
        header, records = batches[base][1].header, batches[base][1].records
        if header.is_control:
            outcome = "commit" if decode_control_record(records[0])[0] == ControlType.COMMIT else "abort"
            outcome_of.update((offset, outcome) for offset in open_txn)
            open_txn = []
            continue
        assert header.base_sequence == last_sequence[header.producer_id] + 1, (
            f"producer {header.producer_id} batch at {base} has sequence {header.base_sequence} "
            f"after {last_sequence[header.producer_id]}")
        last_sequence[header.producer_id] = header.last_sequence
        if header.is_transactional:
            open_txn.extend(record.offset for record in records)
    assert picture["last_sequences"] == {pid: seq for pid, seq in last_sequence.items() if seq >= 0}

    # the LSO holds at the open transaction, and read_committed shows committed data only
    lso = open_txn[0] if open_txn else end
    assert picture["last_stable_offset"] == lso
    assert broker.list_offsets(TOPIC, 0, -1, "read_committed") == lso
    committed = consume_committed(broker)
    aborted = {offset for offset, outcome in outcome_of.items() if outcome == "abort"}
    assert not aborted & set(committed), "read_committed served records of aborted transactions"
    expected = [record.offset for base in sorted(batches) for record in batches[base][1].records
                if not batches[base][1].header.is_control and record.offset < lso
                and outcome_of.get(record.offset, "commit") == "commit"]
    assert committed == expected

    # recovery from snapshots and the recovery point equals a rebuild from the .log files
    assert picture == log_picture(rebuilt)


# -- the tests ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigkilled_producer_loses_no_acknowledged_batch(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    data_dir = tmp_path / "data"
    ack_file = AckFile(tmp_path / "acks")
    kinds: Counter[str] = Counter()
    for round_ in range(ROUNDS):
        child_recovers = round_ % 2 == 1
        checkpoint_every = rng.choice([0, 0, 1, 5, 20])
        target = rng.choice([1, 2, 5, 10, 25, 60, 150])
        before = len(ack_file.acks)
        child = start_child(data_dir, ack_file.path, SEED + round_,
                            *(["--checkpoint-every", str(checkpoint_every)] if checkpoint_every else []))
        try:
            started: list[Ack] = []

            def enough_acknowledged() -> bool:
                started.extend(a for a in ack_file.poll() if a.kind == "S")
                return bool(started) and sum(
                    a.kind in "DTM" for a in ack_file.acks[before:]) >= target

            eventually(enough_acknowledged, ROUND_DEADLINE_S, f"{target} acknowledged appends in round {round_}",
                       interval=0.005, child=child)
            sigkill(child)
        finally:
            reap(child)
        ack_file.poll()
        kinds.update(a.kind for a in ack_file.acks[before:])

        round_dir = tmp_path / f"round-{round_}"
        check_dir = data_dir
        if child_recovers:  # the next child recovers the crashed directory; we check a copy
            check_dir = round_dir / "check"
            shutil.copytree(data_dir, check_dir)
        rebuilt_dir = full_rebuild_copy(data_dir, round_dir / "rebuilt")
        with Broker(check_dir, **CONFIG) as broker, Broker(rebuilt_dir, **CONFIG) as rebuilt:
            try:
                check_recovered(broker, rebuilt, ack_file.acks, rng)
            except AssertionError as failure:
                failure.add_note(f"round {round_}; reproduce with CRASH_SEED={SEED}")
                raise
        shutil.rmtree(round_dir)

    # the rounds did exercise everything the test claims to
    assert kinds["S"] == ROUNDS and kinds["R"] >= ROUNDS // 2
    assert kinds["D"] and kinds["T"] and kinds["M"]
    committed_and_aborted = {a.commit for a in ack_file.acks if a.kind == "M"}
    assert committed_and_aborted == {True, False}
    segments = list(partition_dir(data_dir).glob("*" + filenames.LOG_SUFFIX))
    assert len(segments) >= 5, "the log should span many segments"


@pytest.mark.timeout(120)
def test_recovery_point_checkpoint_never_trusts_unsynced_indexes_of_rolled_segments(
        tmp_path: Path) -> None:
    """The checkpoint job may write a recovery point past a segment that rolled after
    its last flush; a kill must not then leave that trusted segment with index entries
    that only ever lived in the dead process's buffers."""
    data_dir = tmp_path / "data"
    ack_file = AckFile(tmp_path / "acks")
    child = start_child(data_dir, ack_file.path, SEED, "--checkpoint-every", "1")
    try:
        def rolled_four_times() -> bool:
            ack_file.poll()
            return partition_dir(data_dir).exists() and len(
                list(partition_dir(data_dir).glob("*" + filenames.LOG_SUFFIX))) >= 5

        eventually(rolled_four_times, ROUND_DEADLINE_S, "five segments",
                   interval=0.005, child=child)
        sigkill(child)
    finally:
        reap(child)
    ack_file.poll()
    rebuilt_dir = full_rebuild_copy(data_dir, tmp_path / "rebuilt")
    with Broker(data_dir, **CONFIG) as broker, Broker(rebuilt_dir, **CONFIG) as rebuilt:
        recovered, expected = log_picture(broker), log_picture(rebuilt)
        trusted = [base for base, *_ in expected["segments"][:-2]]
        assert all(expected["offset_index"][base] for base in trusted), "segments must be indexed"
        for base in trusted:
            assert recovered["offset_index"][base] == expected["offset_index"][base], (
                f"segment {base}: the .index lost the entries written before the kill")
            assert recovered["time_index"][base] == expected["time_index"][base]
        assert recovered == expected
        check_recovered(broker, rebuilt, ack_file.acks, random.Random(SEED))
