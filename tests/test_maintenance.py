"""Maintenance never blocks the event loop on the disk (exactly/app/engine/maintenance.py).

Each test holds a real piece of maintenance in progress on its worker thread -- a
cleaning round, a retention pass, the snapshot a roll takes, a topic creation, a
producer-id block -- with ``Worker.before_job``, the documented test hook, and shows
what keeps working meanwhile (produce and fetch on other partitions, appends and
rolls on the same one) and that the work then installs correctly. The proof of the
whole: no fsync ever runs on the engine's loop thread while a workload of rolls,
retention, cleaning, checkpoints, topic changes and InitProducerId runs. And a
broker killed while the snapshot of a roll was not yet written recovers everything
it acknowledged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from exactly.app import Broker
from exactly.app.engine.worker import Worker
from exactly.coordinator.producer_id_manager import BLOCK_SIZE, ProducerIdBlock
from exactly.storage import filenames
from exactly.storage.background import Cancellable, Job, run_inline
from exactly.storage.checkpoint import read_checkpoint
from exactly.storage.clock import FakeClock
from exactly.storage.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from exactly.storage.filenames import TOPICS_FILE
from exactly.storage.log_manager import TopicCreation
from exactly.storage.partition_log import PartitionLog, SnapshotWrite
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import SimpleRecord, encode_batch
from exactly.storage.segment_swap import SegmentDeletion, SegmentSwap
from tests.conftest import SMALL_INTERNAL_TOPICS, data_batch

DEADLINE_S = 30
HOUR = 3600 * 1000
REPO = Path(__file__).resolve().parents[1]
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 2000}


# -- helpers ----------------------------------------------------------------------------


class Gate:
    """Holds the first job ``worker`` starts that ``matches``, until released."""

    def __init__(self, worker: Worker, matches: Callable[[Job], bool]) -> None:
        self.worker = worker
        self.matches = matches
        self.held: Job | None = None
        self._entered = threading.Event()
        self._released = threading.Event()
        worker.before_job = self._before

    def _before(self, job: Job) -> None:
        if self.held is None and self.matches(job):
            self.held = job
            self._entered.set()
            assert self._released.wait(DEADLINE_S), "the test never released its gate"

    def wait_held(self) -> Job:
        assert self._entered.wait(DEADLINE_S), "the job never reached its worker"
        assert self.held is not None
        return self.held

    def release(self) -> None:
        self._released.set()
        self.worker.before_job = None


@pytest.fixture
def gates() -> Iterator[list[Gate]]:
    """Gates opened by a test; all released at teardown, so a failure never hangs close."""
    opened: list[Gate] = []
    yield opened
    for gate in opened:
        gate.release()


def hold(gates: list[Gate], worker: Worker, kind: type | tuple[type, ...]) -> Gate:
    gate = Gate(worker, lambda job: isinstance(job, kind))
    gates.append(gate)
    return gate


def in_thread(fn: Callable[[], Any]) -> Future:
    """Run a blocking call (a test thread's engine.call) in a thread of its own."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as e:
            future.set_exception(e)
    threading.Thread(target=run, daemon=True).start()
    return future


def produce(broker: Broker, topic: str, partition: int, batch: bytes) -> int:
    """An acks=all produce that fails the test instead of waiting a minute."""
    engine = broker.engine
    return engine.submit(engine.partitions.start_produce, topic, partition, batch, -1).result(DEADLINE_S).base_offset


def values(broker: Broker, topic: str, partition: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record a consumer reads from the log start."""
    offset = broker.list_offsets(topic, partition, -2)
    out = []
    while (r := broker.engine.call(broker.engine.partitions.fetch, topic, partition, offset, 1 << 20,
                                   timeout=DEADLINE_S)).records:
        got = read_records(r.records, offset, False)
        out += [(rec.offset, rec.key, rec.value) for rec in got.records]
        offset = got.next_offset
    return out


def on_loop(broker: Broker, fn: Callable[[], Any]) -> Any:
    return broker.engine.call(fn, timeout=DEADLINE_S)


def plog(broker: Broker, topic: str, partition: int = 0) -> PartitionLog:
    return broker.engine.partitions.log(topic, partition)


def put(broker: Broker, topic: str, key: bytes, value: bytes, timestamp: int | None = None) -> int:
    return produce(broker, topic, 0, encode_batch([SimpleRecord(value, key=key, timestamp=timestamp)]))


def other_partition_works(broker: Broker, round_: int) -> None:
    """Produce (acks=all) and fetch on a partition that no maintenance touches."""
    value = b"meanwhile-%d" % round_
    offset = produce(broker, "other", 0, data_batch([value]))
    assert (offset, b"k0", value) in values(broker, "other")


# -- each kind of maintenance, held on its worker ------------------------------------------


def test_produce_and_fetch_go_on_while_a_cleaning_round_is_held(broker: Broker, gates: list[Gate]) -> None:
    broker.create_topic("big", 1, COMPACTED)
    broker.create_topic("other", 1)
    for round_ in range(6):
        for key in range(8):
            put(broker, "big", b"k%d" % key, b"v%d-%d" % (key, round_) + b"." * 60)
    on_loop(broker, lambda: plog(broker, "big").roll())
    before = values(broker, "big")
    gate = hold(gates, broker.engine.maintenance.partitions, SegmentSwap)

    cleaning = in_thread(lambda: broker.engine.call(broker.engine.jobs.compact_logs, timeout=DEADLINE_S))
    gate.wait_held()  # the first cleaned segment is written and synced; its swap waits
    for round_ in range(3):
        other_partition_works(broker, round_)
    segments = on_loop(broker, lambda: len(plog(broker, "big").segments))
    during = [put(broker, "big", b"new%d" % i, b"n" * 80) for i in range(30)]  # appends, and rolls
    assert on_loop(broker, lambda: len(plog(broker, "big").segments)) > segments, "a roll during the round"
    assert not cleaning.done(), "the round is still held"

    gate.release()
    assert cleaning.result(DEADLINE_S) > 0
    after = values(broker, "big")
    latest = {key: (offset, value) for offset, key, value in before}
    assert [r for r in after if r[0] < before[-1][0] + 1] == sorted(
        (offset, key, value) for key, (offset, value) in latest.items())
    assert [offset for offset, key, _ in after if key.startswith(b"new")] == during
    assert on_loop(broker, lambda: plog(broker, "big").cleaner_state.checkpoint) > 0


def test_produce_and_fetch_go_on_while_retention_deletes_segments(tmp_path: Path, clock: FakeClock,
                                                                  gates: list[Gate]) -> None:
    data = tmp_path / "data"
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS) as broker:
        broker.create_topic("old", 1, {"segment.bytes": 500, "retention.ms": HOUR})
        broker.create_topic("other", 1)
        for _ in range(10):
            produce(broker, "old", 0, data_batch([b"z" * 200], timestamp=clock.now_ms()))
        clock.advance(2 * HOUR)
        produce(broker, "old", 0, data_batch([b"new"], timestamp=clock.now_ms()))
        first_segment = filenames.segment_path(data / "old-0", 0, filenames.LOG_SUFFIX)
        gate = hold(gates, broker.engine.maintenance.partitions, SegmentDeletion)

        retention = in_thread(lambda: broker.engine.call(broker.engine.jobs.apply_retention, timeout=DEADLINE_S))
        gate.wait_held()
        start = broker.list_offsets("old", 0, -2)
        assert start > 0, "the log start moved at once"
        with pytest.raises(OffsetOutOfRangeError):
            broker.fetch("old", 0, 0)
        assert first_segment.exists(), "its files go on the worker, which is held"
        other_partition_works(broker, 0)
        produce(broker, "old", 0, data_batch([b"newer"], timestamp=clock.now_ms()))
        assert not retention.done()

        gate.release()
        assert retention.result(DEADLINE_S) >= 4
        assert not first_segment.exists()
        assert read_checkpoint(data / filenames.LOG_START_OFFSET_CHECKPOINT)[("old", 0)] == start
        remaining = values(broker, "old")
        assert remaining[0][0] == start and [v for _, _, v in remaining[-2:]] == [b"new", b"newer"]


def test_produce_and_fetch_go_on_while_the_snapshot_of_a_roll_is_written(tmp_path: Path,
                                                                        gates: list[Gate]) -> None:
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        broker.create_topic("t", 2, {"segment.bytes": 500})
        broker.create_topic("other", 1)
        gate = hold(gates, broker.engine.maintenance.metadata, SnapshotWrite)
        while on_loop(broker, lambda: len(plog(broker, "t").segments)) == 1:
            produce(broker, "t", 0, data_batch([b"r" * 150]))  # returns although the roll's snapshot waits
        write = gate.wait_held()
        assert isinstance(write, SnapshotWrite)
        rolled_at = on_loop(broker, lambda: plog(broker, "t").segments[1].base_offset)
        assert write.path == filenames.snapshot_path(data / "t-0", rolled_at)
        assert not write.path.exists()
        produce(broker, "t", 0, data_batch([b"same partition"]))
        produce(broker, "t", 1, data_batch([b"next partition"]))
        assert values(broker, "t", 1)[0][2] == b"next partition"
        other_partition_works(broker, 0)

        gate.release()
        assert broker.engine.call(broker.engine.jobs.take_snapshots, timeout=DEADLINE_S) >= 1  # waits behind it
        assert write.path.exists()


def test_a_topic_is_durable_before_create_topic_returns(tmp_path: Path, gates: list[Gate]) -> None:
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        broker.create_topic("other", 1)
        gate = hold(gates, broker.engine.maintenance.metadata, TopicCreation)
        creating = in_thread(lambda: broker.create_topic("fresh", 2))
        gate.wait_held()
        assert '"fresh"' not in (data / TOPICS_FILE).read_text()
        with pytest.raises(UnknownTopicOrPartitionError):
            produce(broker, "fresh", 0, data_batch([b"too early"]))
        other_partition_works(broker, 0)
        assert not creating.done()

        gate.release()
        assert creating.result(DEADLINE_S).partitions == 2
        assert '"fresh"' in (data / TOPICS_FILE).read_text()
        assert produce(broker, "fresh", 1, data_batch([b"now"])) == 0


def test_a_topic_created_again_never_gets_the_data_a_crash_left_of_its_namesake(tmp_path: Path) -> None:
    """A crash after topics.json dropped a deleted topic but before its directory went
    leaves the directory behind; creating a topic of that name starts empty."""
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        broker.create_topic("t", 1)
        produce(broker, "t", 0, data_batch([b"old data"]))
    registry = json.loads((data / TOPICS_FILE).read_text())
    del registry["t"]  # as delete_topic's commit point leaves it
    (data / TOPICS_FILE).write_text(json.dumps(registry))
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        assert (data / "t-0").exists()
        broker.create_topic("t", 1)
        assert values(broker, "t") == []
        assert produce(broker, "t", 0, data_batch([b"new data"])) == 0


def test_no_producer_id_is_handed_out_before_its_block_is_durable(tmp_path: Path, gates: list[Gate]) -> None:
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        broker.create_topic("other", 1)
        engine = broker.engine
        gate = hold(gates, engine.maintenance.metadata, ProducerIdBlock)
        first = in_thread(lambda: engine.call(engine.transactions.coordinator.init_producer_id, None, -1))
        second = in_thread(lambda: engine.call(engine.transactions.coordinator.init_producer_id, None, -1))
        block = gate.wait_held()
        assert isinstance(block, ProducerIdBlock)
        assert not (data / "producer-id-block").exists()
        other_partition_works(broker, 0)
        assert not first.done() and not second.done(), "no id before its block is durable"

        gate.release()
        ids = sorted([first.result(DEADLINE_S)[0], second.result(DEADLINE_S)[0]])
        assert ids[1] == ids[0] + 1 and ids[1] < block.end, "both from the one block written"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        again = broker.engine.call(broker.engine.transactions.coordinator.init_producer_id, None, -1)[0]
        assert again >= block.end >= BLOCK_SIZE


def test_a_topic_deleted_while_its_cleaning_round_runs_is_gone_and_the_round_stops(
        tmp_path: Path, gates: list[Gate]) -> None:
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        broker.create_topic("big", 1, COMPACTED)
        broker.create_topic("other", 1)
        for round_ in range(4):
            for key in range(8):
                put(broker, "big", b"k%d" % key, b"v%d" % round_ + b"." * 60)
        on_loop(broker, lambda: plog(broker, "big").roll())
        gate = hold(gates, broker.engine.maintenance.partitions, Cancellable)

        cleaning = in_thread(lambda: broker.engine.call(broker.engine.jobs.compact_logs, timeout=DEADLINE_S))
        gate.wait_held()
        deleting = in_thread(lambda: broker.delete_topic("big"))
        other_partition_works(broker, 0)
        with pytest.raises(UnknownTopicOrPartitionError):
            produce(broker, "big", 0, data_batch([b"gone"]))
        assert not deleting.done(), "deletion waits for the round's job to stop"

        gate.release()
        deleting.result(DEADLINE_S)
        assert cleaning.result(DEADLINE_S) == 0
        assert not (data / "big-0").exists()
        assert '"big"' not in (data / TOPICS_FILE).read_text()
        broker.create_topic("big", 1, COMPACTED)
        assert values(broker, "big") == []


def settle(broker: Broker) -> None:
    """Let the loop run what is already scheduled, a few callbacks deep (each round
    trip queues behind what the one before scheduled)."""
    for _ in range(10):
        on_loop(broker, lambda: None)


def test_retention_waits_for_a_cleaning_round_on_the_same_partition(broker: Broker, clock: FakeClock,
                                                                    gates: list[Gate]) -> None:
    broker.create_topic("both", 1, {**COMPACTED, "retention.ms": HOUR})
    for round_ in range(4):
        for key in range(8):
            put(broker, "both", b"k%d" % key, b"v%d" % round_ + b"." * 60, clock.now_ms())
    clock.advance(2 * HOUR)
    put(broker, "both", b"fresh", b"x", clock.now_ms())
    on_loop(broker, lambda: plog(broker, "both").roll())
    gate = hold(gates, broker.engine.maintenance.partitions, SegmentSwap)
    engine = broker.engine

    cleaning = in_thread(lambda: engine.call(engine.jobs.compact_logs, timeout=DEADLINE_S))
    gate.wait_held()
    retention = engine.schedule(engine.jobs.apply_retention)
    settle(broker)
    assert broker.list_offsets("both", 0, -2) == 0, "retention planned nothing while the round runs"
    assert not retention.done()

    gate.release()
    assert cleaning.result(DEADLINE_S) > 0
    retention.result(DEADLINE_S)  # then it ran, on the cleaned segments
    assert [key for _, key, _ in values(broker, "both")][-1] == b"fresh"


def test_a_round_whose_segments_changed_under_it_is_discarded(broker: Broker, clock: FakeClock) -> None:
    """prepare_swap re-checks on the loop: here retention (which the engine never runs
    during a round) deletes the segments a round has just cleaned."""
    broker.create_topic("big", 1, {**COMPACTED, "retention.ms": HOUR})
    for round_ in range(4):
        for key in range(8):
            put(broker, "big", b"k%d" % key, b"v%d" % round_ + b"." * 60, clock.now_ms())
    clock.advance(2 * HOUR)
    put(broker, "big", b"fresh", b"x", clock.now_ms())
    on_loop(broker, lambda: plog(broker, "big").roll())
    directory = plog(broker, "big").directory
    before = values(broker, "big")

    def cleaned_files() -> list[Path]:
        return [p for p in directory.iterdir() if p.name.endswith(filenames.CLEANED_SUFFIX)]
    retention_ran: list[bool] = []

    def round_with_retention_in_the_middle() -> tuple[Any, int]:
        log_ = plog(broker, "big")
        steps = log_.clean(clock.now_ms())
        result: Any = None
        while True:
            try:
                job = steps.send(result)
            except StopIteration as stop:
                return stop.value, log_.cleaner_state.checkpoint
            result = job.run()
            if cleaned_files() and not retention_ran:  # cleaned segments are written, not swapped in
                assert run_inline(log_.delete_old_segments(clock.now_ms())) > 0
                retention_ran.append(True)

    stats, checkpoint = on_loop(broker, round_with_retention_in_the_middle)
    assert stats.segments_rewritten == 0 and checkpoint == 0, "nothing installed, checkpoint not moved"
    assert retention_ran and not cleaned_files(), "work deleted"
    after = values(broker, "big")
    assert after == before[len(before) - len(after):] and after[0][0] > 0, "retention alone happened"


# -- the proof: the loop thread never fsyncs ------------------------------------------------


def test_the_loop_thread_never_fsyncs(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fsync of a workload with rolls (their snapshots), retention, cleaning,
    checkpoints, snapshots, topic creation and deletion, and InitProducerId (a block
    of ids and the transaction log) is recorded with the thread that ran it."""
    calls: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def record(fd: int, real: Callable[[int], None] = real) -> None:
            calls.append(threading.current_thread().name)
            real(fd)
        monkeypatch.setattr(os, name, record)

    with Broker(tmp_path / "data", clock=clock, **SMALL_INTERNAL_TOPICS) as broker:
        engine = broker.engine
        opened = len(calls)
        broker.create_topic("big", 1, COMPACTED)
        broker.create_topic("other", 2, {"segment.bytes": 600})
        broker.create_topic("old", 1, {"segment.bytes": 600, "retention.ms": HOUR})
        for round_ in range(5):
            for key in range(8):
                put(broker, "big", b"k%d" % key, b"v%d" % round_ + b"." * 60)
            broker.produce("other", round_ % 2, data_batch([b"o" * 200]), acks=1)
            produce(broker, "old", 0, data_batch([b"z" * 200], timestamp=clock.now_ms()))
        producer = broker.producer(transactional_id="txn")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("other", b"in a transaction", key=b"t", partition=0)
        producer.commit_transaction()
        engine.call(engine.transactions.coordinator.init_producer_id, None, -1)
        assert engine.call(engine.jobs.compact_logs) > 0
        clock.advance(2 * HOUR)
        produce(broker, "old", 0, data_batch([b"late"], timestamp=clock.now_ms()))
        assert engine.call(engine.jobs.apply_retention) > 0
        assert engine.call(engine.jobs.take_snapshots) > 0
        engine.call(engine.jobs.checkpoint)
        broker.create_topic("short-lived", 1)
        broker.delete_topic("short-lived")
        during = calls[opened:]
    threads = set(during)
    assert "exactly-engine" not in threads, f"{during.count('exactly-engine')} fsyncs on the loop thread"
    assert {"exactly-fsync", "exactly-maintenance", "exactly-metadata"} <= threads, threads


# -- a crash between a roll and its snapshot -----------------------------------------------

CHILD = textwrap.dedent('''
    import sys, threading
    from exactly import Broker
    from exactly.storage.partition_log import SnapshotWrite
    from exactly.storage.record_batch import SimpleRecord, encode_batch

    broker = Broker(sys.argv[1])
    broker.create_topic("t", 1, {"segment.bytes": 700})
    never = threading.Event()
    def block_snapshots(job):
        if isinstance(job, SnapshotWrite):
            never.wait()  # the snapshot of every roll stays unwritten until the kill
    broker.engine.maintenance.metadata.before_job = block_snapshots
    pid = broker.engine.call(broker.engine.transactions.coordinator.init_producer_id, None, -1)[0]
    print("producer", pid, flush=True)
    for seq in range(40):
        batch = encode_batch([SimpleRecord(b"v%d" % seq + b"." * 100)], producer_id=pid,
                             producer_epoch=0, base_sequence=seq)
        offset = broker.produce("t", 0, batch)
        print(seq, offset, flush=True)
    print("done", flush=True)
    never.wait()
''')


def test_a_broker_killed_before_the_snapshot_of_a_roll_is_written_recovers_all_it_acknowledged(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        acked = []
        assert child.stdout is not None
        pid = int(child.stdout.readline().split()[1])  # "producer <id>": the id the broker handed out
        for line in child.stdout:
            if line.strip() == "done":
                break
            seq, offset = map(int, line.split())
            acked.append((seq, offset))
        else:
            pytest.fail(f"the child ended early: {child.stderr.read() if child.stderr else ''}")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(DEADLINE_S)
    assert len(acked) == 40
    partition = data / "t-0"
    segments = sorted(partition.glob("*.log"))
    assert len(segments) > 3, "several rolls happened"
    assert not list(partition.glob("*.snapshot")), "no snapshot of a roll was written before the kill"

    with Broker(data) as broker:
        assert [(offset, v) for offset, _, v in values(broker, "t")] == [
            (offset, b"v%d" % seq + b"." * 100) for seq, offset in acked]
        last_seq, last_offset = acked[-1]
        resend = encode_batch([SimpleRecord(b"v%d" % last_seq + b"." * 100)], producer_id=pid,
                              producer_epoch=0, base_sequence=last_seq)
        assert broker.produce("t", 0, resend) == last_offset, "still known as a duplicate"
        following = encode_batch([SimpleRecord(b"next")], producer_id=pid, producer_epoch=0,
                                 base_sequence=last_seq + 1)
        assert broker.produce("t", 0, following) == last_offset + 1
