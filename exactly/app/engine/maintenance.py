"""Maintenance off the event loop: the engine's driver for steps of jobs.

Storage and the coordinators describe each piece of maintenance as steps
(``exactly/storage/background.py``): the code between the steps plans on the loop, from
the state it owns, and installs the outcome there; every yielded job does its file
I/O -- writes, fsyncs, renames, deletions -- on a worker thread
(``exactly/app/engine/worker.py``) while the loop goes on serving produce and fetch. This
module runs them:

* **per partition** (:meth:`Maintenance.on_partition`): a cleaning round or a
  retention pass, on the ``exactly-maintenance`` thread, one at a time per
  partition -- both change the partition's sealed segments, so they never overlap
  on one partition (Kafka's cleaner manager keeps the same rule). A long round
  delays no fsync of a produce: those run on the fsync thread.
* **short writes** (:meth:`Maintenance.run`): snapshots, checkpoints, topic
  changes, producer-id blocks, on the ``exactly-metadata`` thread, so none of them
  waits behind a cleaning round.
* **in the background** (:meth:`Maintenance.start`): the snapshot a roll takes;
  nobody waits for it.

A job that finds the disk full fails with LogDirFullError (KAFKA_STORAGE_ERROR, so a
CreateTopics or an HTTP request answers with it) and is reported to the engine's
:class:`~exactly.app.engine.disk_space.DiskSpace`, which logs the full disk once; the job
itself is not logged again (steps undo what they wrote, and the next round retries).

A job that is CPU work in Python (a ``ProcessJob``: a cleaning round's reading,
filtering and writing) would hold the interpreter's GIL against the loop even on a
thread; its thread hands it to the ``exactly-cleaner`` worker process
(``exactly/app/engine/worker_process.py``) and waits. Plan and install stay on the loop.

A :class:`~exactly.storage.segment_deletion.FileDeletion` (the ``.deleted`` files of the
segments a swap or retention replaced) is not waited for: it starts
``file.delete.delay.ms`` later on the ``exactly-deleter`` thread, which gives the
blocks back at a bounded rate, and the steps go on at once. Closing cancels the ones
waiting or running; the next open removes their files.

A topic being deleted, or the engine closing, first cancels its partitions' jobs
(:meth:`Maintenance.quiesce`): a cleaning job in progress or to come -- in the
worker process too -- stops at its next batch, and the round deletes what it wrote.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

from exactly.app.engine.disk_space import DiskSpace
from exactly.app.engine.worker import Worker
from exactly.app.engine.worker_process import WorkerProcess
from exactly.storage.background import Cancellable, Job, ProcessJob, Steps
from exactly.storage.errors import LogDirFullError, is_no_space, storage_error
from exactly.storage.partition_log import PartitionLog
from exactly.storage.segment_deletion import FileDeletion

log = logging.getLogger(__name__)
T = TypeVar("T")

#: the niceness of the maintenance thread and the worker process (0 is normal, 19 the
#: lowest priority)
MAINTENANCE_NICE = 10


class MaintenanceCancelledError(Exception):
    """A partition's maintenance was not started: its topic is being deleted, or the
    engine is closing. (One cancelled while it runs ends with its job's error, e.g.
    ``CleaningAbortedError``.)"""


class LogCleaningFailedError(Exception):
    """A log-cleaner round in which some partitions could not be cleaned (each one
    logged with its error, left as it was); the others were cleaned."""

    def __init__(self, failed: list[str], rewritten: int) -> None:
        super().__init__(f"cleaning failed for {', '.join(failed)} (the round rewrote {rewritten} segment(s) "
                         f"of the other partitions)")
        self.failed = failed
        self.rewritten = rewritten


@dataclass
class _Slot:
    """The maintenance of one partition: one job at a time."""

    lock: asyncio.Lock
    cancelled: bool = False
    job: Job | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if isinstance(self.job, Cancellable):
            self.job.cancel()


class Maintenance:
    """The engine's maintenance threads and what runs on them; used on the loop only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, disk: DiskSpace) -> None:
        self._loop = loop
        self._disk = disk
        #: cleaning rounds and retention (long jobs, at a lower CPU priority than the
        #: loop and the fsync thread, which produce and fetch wait on)
        self.partitions = Worker(loop, "exactly-maintenance", nice=MAINTENANCE_NICE)
        #: short whole-file writes: snapshots, checkpoints, topics.json, producer-id blocks
        self.metadata = Worker(loop, "exactly-metadata")
        #: the CPU work of cleaning rounds, out of this interpreter
        self.process = WorkerProcess("exactly-cleaner", nice=MAINTENANCE_NICE)
        #: removing the files of replaced segments, file.delete.delay.ms after
        self.deleter = Worker(loop, "exactly-deleter", nice=MAINTENANCE_NICE)
        self._deletions: set[FileDeletion] = set()
        self._slots: weakref.WeakKeyDictionary[PartitionLog, _Slot] = weakref.WeakKeyDictionary()
        self._in_flight: set[asyncio.Future[Any]] = set()
        self._closing = False

    async def run(self, steps: Steps[T]) -> T:
        """Drive ``steps`` of short writes to the end: their own code here on the loop,
        each job on the metadata thread. The drive is a task of its own: a caller that
        gives up (a cancelled request) never leaves steps half done, e.g. a topic
        registered on disk but not in memory."""
        return await self._task(self._drive(steps, self.metadata, None))

    async def on_partition(self, partition_log: PartitionLog, make_steps: Callable[..., Steps[T]],
                           *args: Any) -> T:
        """Run ``make_steps(*args)`` -- called once this partition's earlier maintenance
        is done, so it plans from the state that left -- on the maintenance thread. The
        drive is a task of its own, as in :meth:`run`: a swap is never left half installed.

        :raise MaintenanceCancelledError: the partition is being deleted or the engine closed.
        """
        return await self._task(self._on_partition(partition_log, make_steps, *args))

    def start(self, steps: Steps[Any]) -> None:
        """Run ``steps`` in the background on the metadata thread (the snapshot a roll
        takes): a failure is logged; nothing waits for them but close. Once closing
        they are dropped: the clean shutdown writes its own snapshot."""
        if self._closing:
            steps.close()
            return
        self._track(self._drive(steps, self.metadata, None)).add_done_callback(_log_failure)

    def _slot(self, partition_log: PartitionLog) -> _Slot:
        slot = self._slots.get(partition_log)
        if slot is None:
            slot = self._slots[partition_log] = _Slot(asyncio.Lock())
        return slot

    async def _on_partition(self, partition_log: PartitionLog, make_steps: Callable[..., Steps[T]],
                            *args: Any) -> T:
        slot = self._slot(partition_log)
        async with slot.lock:
            if slot.cancelled or self._closing:
                raise MaintenanceCancelledError("the partition is being deleted or the broker is closing")
            return await self._drive(make_steps(*args), self.partitions, slot)

    async def _drive(self, steps: Steps[T], worker: Worker, slot: _Slot | None) -> T:
        """A job's result is sent back into the steps, its exception thrown in. Once
        the slot is cancelled every cancellable job is cancelled before it starts (it
        raises, and the steps end); the others -- a swap, a close -- still run, so
        whatever a finished job did on disk is installed in memory."""
        result: Any = None
        error: BaseException | None = None
        while True:
            try:
                job = steps.send(result) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value
            if isinstance(job, FileDeletion):
                self._delete_later(job)
                result, error = None, None
                continue
            if isinstance(job, ProcessJob):
                job = self.process.call(job)
            if slot is not None:
                slot.job = job
                if slot.cancelled and isinstance(job, Cancellable):
                    job.cancel()
            try:
                result, error = await worker.run(job), None
            except Exception as e:  # handed to the steps, which clean up and re-raise
                result, error = None, self._no_space(e)
            finally:
                if slot is not None:
                    slot.job = None

    def _delete_later(self, deletion: FileDeletion) -> None:
        """Run ``deletion`` on the deleter thread once its delay has passed."""
        if self._closing:
            return
        self._deletions.add(deletion)
        self._loop.call_later(deletion.delay_ms / 1000, self._start_deletion, deletion)

    def _start_deletion(self, deletion: FileDeletion) -> None:
        if self._closing:
            return
        task = self._track(self._delete(deletion))
        task.add_done_callback(_log_failure)

    async def _delete(self, deletion: FileDeletion) -> None:
        try:
            await self.deleter.run(deletion)
        finally:
            self._deletions.discard(deletion)

    def _no_space(self, error: Exception) -> Exception:
        """A job's error as the steps get it: a full disk as LogDirFullError, reported."""
        if not isinstance(error, OSError) or not is_no_space(error):
            return error
        full = storage_error(error, f"cannot write {error.filename or 'to the data directory'}")
        full.__cause__ = error
        self._disk.refused(full)
        return full

    def _track(self, coroutine: Any) -> asyncio.Task[Any]:
        task = self._loop.create_task(coroutine)
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        return task

    async def _task(self, coroutine: Any) -> Any:
        return await asyncio.shield(self._track(coroutine))

    async def quiesce(self, logs: Iterable[PartitionLog]) -> None:
        """Cancel the maintenance of ``logs`` (a job in progress stops early) and wait
        until none runs; none starts on them again."""
        slots = [self._slot(partition_log) for partition_log in logs]
        for slot in slots:
            slot.cancel()
        for slot in slots:
            async with slot.lock:
                pass

    async def close(self) -> None:
        """Cancel every partition's maintenance and wait for every job in flight."""
        self._closing = True
        for deletion in self._deletions:
            deletion.cancel()
        await self.quiesce(list(self._slots.keys()))
        while self._in_flight:
            await asyncio.gather(*list(self._in_flight), return_exceptions=True)

    def stop(self) -> None:
        """End the worker process and the threads (after close, once the loop has stopped)."""
        self.process.stop()
        self.partitions.stop()
        self.deleter.stop()
        self.metadata.stop()


def _log_failure(task: asyncio.Task[Any]) -> None:
    """Log a background job's failure -- but not a full disk's: DiskSpace said so."""
    if task.cancelled() or task.exception() is None:
        return
    if isinstance(task.exception(), LogDirFullError):
        log.debug("background maintenance found the disk full: %s", task.exception())
    else:
        log.error("background maintenance failed", exc_info=task.exception())
