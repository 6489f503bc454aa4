"""The log cleaner's work runs in the engine's worker process (exactly/app/engine/worker_process.py),
outside the broker's interpreter: a round records the process that did it; a worker
killed mid-round fails that round with a log line and leaves the log as it was; the next
round starts a new worker; closing the broker stops the worker, even mid-round; and a
broker killed mid-round takes its worker with it and recovers on restart.

Rounds here are big enough (about 16 MiB of small records, ``tests/cleaner_child.py``'s
``fill``) that a test sees a round's ``.cleaned`` files on disk and acts while the worker
is still writing them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.app.engine.maintenance import LogCleaningFailedError
from exactly.app.engine.worker_process import WorkerProcessDiedError
from exactly.storage import filenames
from exactly.storage.background import run_inline
from exactly.storage.clock import FakeClock
from exactly.storage.log_cleaner import CleanerStats
from exactly.storage.partition_log import PartitionLog
from exactly.storage.read_committed import read_records
from tests.cleaner_child import COMPACTED, TOPIC, fill
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS
from tests.test_log_cleaner import build_for_crash, open_broker, partition_dir, plog
from tests.test_maintenance import in_thread
from tests.waiting import eventually

DEADLINE_S = 60
REPO = Path(__file__).resolve().parents[1]
#: (batches, records per batch, keys): about 16 MiB, each key written about 100 times
SHAPE = (1400, 100, 1400)


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def cleaned_files(partition: Path) -> list[str]:
    return [p.name for p in partition.iterdir() if p.name.endswith(filenames.CLEANED_SUFFIX)]


def latest_values(broker: Broker) -> dict[bytes, bytes]:
    """What a consumer reading TOPIC from the start ends with: each key's last value."""
    offset = broker.list_offsets(TOPIC, 0, -2)
    latest: dict[bytes, bytes] = {}
    while (r := broker.engine.call(broker.engine.partitions.fetch, TOPIC, 0, offset, 4 << 20, timeout=DEADLINE_S)).records:
        got = read_records(r.records, offset, False)
        latest.update((rec.key, rec.value) for rec in got.records)
        offset = got.next_offset
    return latest


def log_shape(broker: Broker) -> tuple[int, int]:
    """(segments, bytes) of TOPIC-0."""
    def on_loop() -> tuple[int, int]:
        log_ = broker.engine.partitions.log(TOPIC, 0)
        return len(log_.segments), log_.size_bytes
    return broker.engine.call(on_loop, timeout=DEADLINE_S)


def build(broker: Broker, shape: tuple[int, int, int] = SHAPE) -> dict[bytes, bytes]:
    """TOPIC-0 filled (``fill``) and rolled; each key's last value."""
    broker.create_topic(TOPIC, 1, COMPACTED)
    latest = fill(lambda batch, acks: broker.produce(TOPIC, 0, batch, acks=acks), *shape)
    broker.engine.call(lambda: broker.engine.partitions.log(TOPIC, 0).roll(), timeout=DEADLINE_S)
    return latest


def compact(broker: Broker) -> int:
    return broker.engine.call(broker.engine.jobs.compact_logs, timeout=DEADLINE_S)


def one_round(broker: Broker, log_: PartitionLog, in_worker: bool) -> CleanerStats:
    """One cleaning round on ``log_``: through the engine's maintenance (in the worker
    process), or driven here on the loop (run_inline)."""
    engine = broker.engine
    if not in_worker:
        return engine.call(lambda: run_inline(log_.clean(engine.clock.now_ms())), timeout=DEADLINE_S)

    async def in_maintenance() -> CleanerStats:
        return await engine.maintenance.on_partition(log_, log_.clean, engine.clock.now_ms())
    return engine.call(in_maintenance, timeout=DEADLINE_S)


def segment_files(data: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in partition_dir(data).iterdir()
            if filenames.parse_offset_name(p.name) and p.suffix in filenames.SEGMENT_SUFFIXES}


def test_a_round_runs_in_a_worker_process_which_close_stops(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN) as broker:
        latest = build(broker, (40, 100, 50))
        engine = broker.engine
        stats = one_round(broker, engine.partitions.log(TOPIC, 0), in_worker=True)

        assert stats.segments_rewritten > 0 and stats.bytes_after < stats.bytes_before
        assert stats.pid not in (0, os.getpid()), "the round's work ran in another process"
        assert stats.pid == engine.maintenance.process.pid
        assert latest_values(broker) == latest
    assert not alive(stats.pid), "closing the broker ended its worker process"


def test_a_round_in_the_worker_process_writes_the_same_bytes_as_one_run_here(
        tmp_path: Path, clock: FakeClock) -> None:
    """Tombstones, committed and aborted transactions, markers, a part cleaned before:
    the worker's round leaves every segment file byte for byte as the same round run
    in the broker's own process does."""
    original = tmp_path / "original"
    build_for_crash(original, clock)
    stats = {}
    for in_worker in (False, True):
        data = tmp_path / f"in-worker-{in_worker}"
        shutil.copytree(original, data)
        with open_broker(data, clock, **FROZEN) as broker:
            stats[in_worker] = one_round(broker, plog(broker), in_worker)
    assert stats[False].pid == os.getpid() and stats[True].pid not in (0, os.getpid())
    assert stats[True].segments_rewritten > 0
    assert dataclasses.replace(stats[True], pid=0) == dataclasses.replace(stats[False], pid=0)
    assert segment_files(tmp_path / "in-worker-True") == segment_files(tmp_path / "in-worker-False")


class RoundInProgress:
    """A broker on ``data`` with TOPIC-0 built, whose cleaning round (started in a
    thread) is writing cleaned segments in the worker process ``pid``."""

    def __init__(self, data: Path) -> None:
        self.partition = data / f"{TOPIC}-0"
        self.broker = Broker(data, **SMALL_INTERNAL_TOPICS, **FROZEN)
        try:
            self.latest = build(self.broker)
            self.before = log_shape(self.broker)
            self.cleaning = in_thread(lambda: compact(self.broker))
            eventually(lambda: cleaned_files(self.partition), DEADLINE_S, "the worker to write a cleaned segment")
            pid = self.broker.engine.maintenance.process.pid
            assert pid is not None and pid != os.getpid()
            self.pid = pid
        except BaseException:
            self.broker.close()
            raise


def test_a_worker_killed_mid_round_fails_the_round_and_the_next_one_works(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The round fails with a log line, what it wrote is deleted, the log reads as
    before, and the next round (in a new worker) cleans it."""
    round_ = RoundInProgress(tmp_path / "data")
    broker = round_.broker
    with broker, caplog.at_level(logging.ERROR):
        os.kill(round_.pid, signal.SIGKILL)
        with pytest.raises(LogCleaningFailedError, match=f"{TOPIC}-0"):  # the round fails, saying which
            round_.cleaning.result(DEADLINE_S)
        failed = [r for r in caplog.records if r.getMessage() == f"cleaning {TOPIC}-0 failed"]
        assert failed and failed[0].exc_info and isinstance(failed[0].exc_info[1], WorkerProcessDiedError)
        assert not cleaned_files(round_.partition)
        assert log_shape(broker) == round_.before and latest_values(broker) == round_.latest
        assert broker.engine.call(lambda: broker.engine.partitions.log(TOPIC, 0).cleaner_state.checkpoint) == 0

        assert compact(broker) > 0, "the next round works, in a new worker"
        assert broker.engine.maintenance.process.pid not in (None, round_.pid)
        assert log_shape(broker)[1] < round_.before[1] / 10
        assert latest_values(broker) == round_.latest


def test_closing_the_broker_mid_round_cancels_the_round_and_ends_the_worker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    round_ = RoundInProgress(data)
    in_thread(round_.broker.close).result(DEADLINE_S)
    assert round_.cleaning.result(DEADLINE_S) == 0
    assert not alive(round_.pid)
    assert not cleaned_files(round_.partition), "the cancelled round deleted what it wrote"
    with Broker(data, **SMALL_INTERNAL_TOPICS, **FROZEN) as broker:
        assert log_shape(broker) == round_.before and latest_values(broker) == round_.latest


def test_a_broker_killed_mid_round_takes_its_worker_along_and_recovers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    partition = data / f"{TOPIC}-0"
    pid_file = tmp_path / "worker.pid"
    child = subprocess.Popen([sys.executable, "-m", "tests.cleaner_child", str(data), str(pid_file),
                              *map(str, SHAPE)], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        eventually(lambda: pid_file.exists() or child.poll() is not None, DEADLINE_S, "the child to start its round")
        assert pid_file.exists(), f"the child failed: {child.stderr.read() if child.stderr else ''}"
        worker = int(pid_file.read_text())
        eventually(lambda: cleaned_files(partition), DEADLINE_S, "the worker to write a cleaned segment")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(DEADLINE_S)
    eventually(lambda: not alive(worker), 10, "the worker to die with its broker")
    assert cleaned_files(partition), "killed mid-round"

    with Broker(data, **SMALL_INTERNAL_TOPICS, **FROZEN) as broker:
        assert not cleaned_files(partition), "the restart discarded the round's files"
        expected = fill(lambda batch, acks: None, *SHAPE)
        assert latest_values(broker) == expected, "all of it was durable; none of it is lost or changed"
        assert compact(broker) > 0
        assert latest_values(broker) == expected
