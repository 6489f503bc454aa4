"""The streaming copy job, exactly once through crashes: its driver's process group
(driver, JVM, Python workers) is SIGKILLed during the sink's commit, before and
after the decision record and between two EndTxn (the sink's one test hook,
EXACTLY_SPARK_CRASH_AT), and at arbitrary moments mid-batch, and restarted from its checkpoint each time. The output
read read_committed is then exactly the transformed input: nothing missing, nothing
twice, no transaction left open."""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.spark.copy_job import expected_output
from exactly.app.spark.kafka_client import KafkaClient
from exactly.app.spark.sink import CRASH_AT_ENV
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker, read_to_end

ROOT = Path(__file__).resolve().parents[2]
SEED = 300
#: each test takes half a minute or more and shares nothing: one worker each
pytestmark = [pytest.mark.spread, pytest.mark.slow]
#: a driver's whole life, JVM start included, on a loaded 2-core machine
RUN_TIMEOUT = 420


@pytest.fixture
def served(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **TWO_PHASE_COMMIT) as broker:
        yield broker


class Job:
    """One run of ``python -m exactly.app.spark.copy_job`` in a process group of its own,
    its output lines collected by a thread."""

    def __init__(self, served: KafkaBroker, checkpoint: Path, crash_at: str | None = None,
                 *extra: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop(CRASH_AT_ENV, None)
        if crash_at:
            env[CRASH_AT_ENV] = crash_at
        self.process = subprocess.Popen(
            [sys.executable, "-m", "exactly.app.spark.copy_job", "--bootstrap", served.bootstrap, "--input", "in",
             "--output", "out", "--checkpoint", str(checkpoint), "--seed", str(SEED),
             "--max-offsets-per-trigger", "40", *extra],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip())

    def wait_for_batch(self, timeout: float = RUN_TIMEOUT) -> str:
        """The next progress line ("batch N: ...")."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                assert self.process.poll() is None, f"the job exited {self.process.returncode}: {self.output()}"
                continue
            self.seen.append(line)
            if line.startswith("batch "):
                return line
        raise AssertionError(f"no progress line in {timeout} s: {self.output()}")

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL every process of the driver's session: its group (driver, JVM) and
        the Python workers' (pyspark.daemon gives them a group of their own)."""
        for pid in session_members(self.process.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(30)

    def output(self) -> str:
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "\n".join(self.seen[-40:])


def session_members(session: int) -> list[int]:
    """The processes of session ``session`` (field 6 of /proc/PID/stat)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone already
        if int(fields[3]) == session:
            members.append(int(stat.parent.name))
    return members


def committed_input(served: KafkaBroker) -> list[bytes]:
    return read_to_end({"bootstrap.servers": served.bootstrap, "group.id": "check-in",
                        "isolation.level": "read_committed"}, "in", 2,
                       select=lambda m: expected_output(m.partition(), m.offset(), m.value()))


def committed_output(served: KafkaBroker) -> list[bytes]:
    return read_to_end({"bootstrap.servers": served.bootstrap, "group.id": "check-out",
                        "isolation.level": "read_committed"}, "out", 2)


def open_transactions(served: KafkaBroker) -> list[str]:
    with KafkaClient(served.bootstrap) as client:
        return [t.transactional_id for t in client.list_transactions("exactly-spark-.*", ["Ongoing"])]


def kill_at_the_sinks_crash_points(served: KafkaBroker, checkpoint: Path, jobs: list[Job]) -> None:
    """Before the decision record, after it, and between two EndTxn: a run each."""
    for crash_at in ("before-decision:1", "after-decision:2", "mid-completion:4"):
        job = Job(served, checkpoint, crash_at, "--available-now")  # ends, should the crash not come
        jobs.append(job)
        assert job.wait() == -signal.SIGKILL, job.output()


def kill_mid_batch(served: KafkaBroker, checkpoint: Path, jobs: list[Job]) -> None:
    """Twice, at an arbitrary moment of the batch after a progress line."""
    for _ in range(2):
        job = Job(served, checkpoint)
        jobs.append(job)
        job.wait_for_batch()
        time.sleep(random.uniform(0, 1.5))
        job.kill()


#: two chains of kills, each on a checkpoint of its own, run side by side on two workers
#: (one chain of all five took six minutes of a loaded machine, longer than the rest of
#: the suite's tests on a worker)
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("kills", [kill_at_the_sinks_crash_points, kill_mid_batch], ids=lambda k: k.__name__)
def test_killed_during_commits_and_batches_then_restarted_the_output_is_exactly_the_input(
        served, tmp_path: Path, kills) -> None:
    checkpoint = tmp_path / "checkpoint"
    jobs: list[Job] = []
    try:
        kills(served, checkpoint, jobs)
        job = Job(served, checkpoint, None, "--available-now")
        jobs.append(job)
        assert job.wait() == 0, job.output()
    finally:
        for number, job in enumerate(jobs):
            job.kill()
            print(f"--- run {number} exited {job.process.returncode}:\n{job.output()}")
    expected = committed_input(served)
    output = committed_output(served)
    assert len(expected) == SEED
    assert len(output) == len(set(output)), "a record was written twice"
    assert sorted(output) == sorted(expected)
    assert open_transactions(served) == []
