"""Segment files are deleted as Kafka deletes them: renamed ``.deleted`` at once,
removed ``file.delete.delay.ms`` later at a bounded rate (``exactly/storage/segment_deletion.py``)."""

from __future__ import annotations

from pathlib import Path

from exactly.app import Broker
from exactly.storage import filenames
from exactly.storage.clock import FakeClock
from exactly.storage.partition_log import SegmentDeletion
from exactly.storage.segment_deletion import FREE_STEP, FileDeletion, Throttle, deleted_path
from tests.conftest import data_batch
from tests.storage_log import DurableLogs
from tests.waiting import eventually

HOUR = 3600 * 1000
MiB = 1 << 20


class FakeTime:
    """A clock that only a sleep moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def deleted_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(filenames.DELETED_SUFFIX))


def log_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix == filenames.LOG_SUFFIX)


def past_retention(client: DurableLogs | Broker, clock: FakeClock, config: dict[str, int]) -> None:
    """Topic ``t``: six segments, all past retention.ms but the active one."""
    client.create_topic("t", 1, {"segment.bytes": 500, "retention.ms": HOUR, **config})
    for _ in range(6):
        client.produce("t", 0, data_batch([b"w" * 200], timestamp=clock.now_ms()))
    clock.advance(2 * HOUR)


def test_a_throttle_keeps_the_bytes_spent_to_its_rate() -> None:
    fake = FakeTime()
    throttle = Throttle(4 * MiB, clock=lambda: fake.now, sleep=fake.sleep)
    for _ in range(12):
        throttle.spent(MiB)
    assert fake.now == 3.0, "12 MiB at 4 MiB/s take 3 s"
    fake.now += 10  # time that passed without spending lets the next bytes go at once
    throttle.spent(MiB)
    assert fake.now == 13.0


def test_a_file_deletion_frees_a_file_step_by_step_at_the_throttles_rate(tmp_path: Path) -> None:
    fake = FakeTime()
    path = deleted_path(tmp_path / "x.log")
    path.write_bytes(b"\0" * (5 * FREE_STEP + 100))
    sizes: list[int] = []

    def sleep(seconds: float) -> None:
        sizes.append(path.stat().st_size)
        fake.sleep(seconds)

    job = FileDeletion((path, tmp_path / "gone.deleted"),
                       throttle=lambda: Throttle(FREE_STEP, clock=lambda: fake.now, sleep=sleep))
    job.run()
    assert not path.exists()
    assert sizes == [4 * FREE_STEP + 100, 3 * FREE_STEP + 100, 2 * FREE_STEP + 100, FREE_STEP + 100, 100, 0], \
        "a throttle wait after each step freed"
    assert fake.now == (5 * FREE_STEP + 100) / FREE_STEP, "the bytes freed over the rate"


def test_a_cancelled_file_deletion_leaves_the_rest_for_the_next_open(tmp_path: Path) -> None:
    path = deleted_path(tmp_path / "x.log")
    path.write_bytes(b"\0" * 3 * FREE_STEP)
    job = FileDeletion((path,))
    job.cancel()
    job.run()
    assert path.stat().st_size == 3 * FREE_STEP


def test_retention_renames_segments_deleted_at_once_and_removes_them_after_the_delay(
        tmp_path: Path) -> None:
    clock = FakeClock()
    with DurableLogs(tmp_path / "data", clock=clock) as logs:
        past_retention(logs, clock, {"file.delete.delay.ms": 1234})
        log = logs.log("t")
        before = log_files(log.directory)
        steps = log.delete_old_segments(clock.now_ms())
        deletion = next(steps)
        assert isinstance(deletion, SegmentDeletion)
        deletion.run()
        gone = [filenames.offset_name(s.base_offset, filenames.LOG_SUFFIX) for s in deletion.segments]
        assert gone and set(gone) <= set(before)
        assert not set(gone) & set(log_files(log.directory)), "out of the log's files at once"
        assert {name + filenames.DELETED_SUFFIX for name in gone} <= set(deleted_files(log.directory))
        files = steps.send(None)
        assert isinstance(files, FileDeletion) and files.delay_ms == 1234
        files.run()
        assert deleted_files(log.directory) == []


def test_a_broker_removes_deleted_files_after_file_delete_delay_ms(tmp_path: Path) -> None:
    clock = FakeClock()
    with Broker(tmp_path / "data", clock=clock) as broker:
        past_retention(broker, clock, {"file.delete.delay.ms": 300})
        directory = broker.engine.partitions.log("t", 0).directory
        assert broker.engine.call(broker.engine.jobs.apply_retention) > 0
        assert deleted_files(directory), "renamed at once, removed later"
        # polling the directory: no event says a file went
        eventually(lambda: not deleted_files(directory), 30, "the .deleted files to go")


def test_an_open_removes_leftover_deleted_files(tmp_path: Path) -> None:
    clock = FakeClock()
    with DurableLogs(tmp_path / "data", clock=clock) as logs:
        past_retention(logs, clock, {})
        log = logs.log("t")
        steps = log.delete_old_segments(clock.now_ms())
        next(steps).run()  # a crash (or a close) before the delayed removal
        directory = log.directory
        assert deleted_files(directory)
    with DurableLogs(tmp_path / "data", clock=clock) as logs:
        assert deleted_files(logs.log("t").directory) == []


def test_a_swap_leaves_the_replaced_files_deleted_until_their_removal(tmp_path: Path) -> None:
    clock = FakeClock()
    with DurableLogs(tmp_path / "data", clock=clock) as logs:
        logs.create_topic("c", 1, {"segment.bytes": 600, "cleanup.policy": "compact"})
        for _ in range(12):
            logs.produce("c", 0, data_batch([b"v" * 200]))  # one key: a round keeps the last
        log = logs.log("c")
        log.roll()
        steps = log.clean(clock.now_ms())
        job = next(steps)
        while not isinstance(job, FileDeletion):
            job = steps.send(job.run())
        replaced = [p.name for p in job.paths if p.name.endswith(filenames.LOG_SUFFIX + filenames.DELETED_SUFFIX)]
        assert replaced
        assert set(replaced) <= set(deleted_files(log.directory)), "the swap renamed what it replaced"
        assert job.delay_ms == 60000, "Kafka's default file.delete.delay.ms"
        steps.close()
        job.run()
        assert deleted_files(log.directory) == []
        assert [s.base_offset for s in log.segments][0] == 0
